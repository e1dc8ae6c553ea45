/**
 * The whole front end against a scripted server (REST routes and the events
 * socket played in the browser): streaming, suggestions, keyboard, undo,
 * reject restoring the notebook, the polling fallback, the error-fix
 * command and the conversation surviving a reload; a fix low in a long
 * notebook shows its bar, and its accept clears the old traceback; a
 * question asked from an empty cell is answered in that cell.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  CANDIDATES,
  DF_CODE,
  MockServer,
  ask,
  event,
  execute,
  finishEvents,
  notebookAgentMetadata,
  notebookCells,
  notebookJson,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen,
  screenshotPath
} from './helpers';

const INTENT = 'What is the mean delay per airline?';

test('candidates stream in and become suggested cells', async ({ page }) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'mocked.ipynb');
  await openPanel(page);

  // Vote with its sample count: the server's default is shown, then changed.
  await panel(page)
    .locator('.jp-DataAgent-strategy select')
    .selectOption('vote');
  const samples = panel(page).locator('.jp-DataAgent-number input');
  await expect(samples).toHaveValue('5');
  await samples.fill('3');
  await ask(page, INTENT);

  await expect.poll(() => server.bodies.length).toBe(1);
  const body = server.bodies[0];
  expect(body).toMatchObject({
    version: 1,
    intent: INTENT,
    strategy: 'vote',
    options: { samples: 3 },
    active_index: 0
  });
  expect(body.notebook_path).toMatch(/mocked\.ipynb$/);
  expect(body.cells).toHaveLength(1);
  expect(body.cells[0].source).toContain('pd.DataFrame');
  expect(body.cells[0].outputs.length).toBeGreaterThan(0);
  expect(typeof body.kernel_id).toBe('string');

  // Progress while the job runs, with the Stop button.
  await server.send('job1', [
    event('job1', 1, 'progress', 'Waiting for the kernel', {
      state: 'waiting_for_kernel'
    })
  ]);
  await expect(panel(page).locator('.jp-DataAgent-waiting')).toBeVisible();
  await expect(panel(page).locator('.jp-DataAgent-stop')).toBeVisible();
  await server.send('job1', [
    event('job1', 2, 'progress', 'Sampling 3 candidates'),
    event('job1', 3, 'candidate', 'Candidate 1 ran', {
      index: 0,
      candidate: CANDIDATES[0]
    })
  ]);
  await expect(panel(page).locator('.jp-DataAgent-progressMessage')).toHaveText(
    'Sampling 3 candidates'
  );
  await expect(panel(page).locator('.jp-DataAgent-waiting')).toHaveCount(0);
  await page.screenshot({ path: screenshotPath('mocked-streaming.png') });

  await server.send('job1', [
    event('job1', 4, 'candidate', 'Candidate 2 ran', {
      index: 1,
      candidate: CANDIDATES[1]
    }),
    event('job1', 5, 'candidate', 'Candidate 3 failed', {
      index: 2,
      candidate: CANDIDATES[2]
    }),
    // `done` names the chosen candidate by index; the candidates came above.
    finishEvents('job1', 6, [], {
      turnId: 'turn-mean-delay',
      result: { strategy: 'vote', chosen: 0, candidates: 3 }
    })[0]
  ]);

  // The chosen candidate is placed below the df cell as a suggestion.
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);
  const bar = suggestion.locator('.jp-DataAgent-suggestionBar');
  await expect(bar).toContainText('Suggested by Data Agent');
  await expect(bar).toContainText('Group the flights by airline');
  await expect(bar.locator('.jp-DataAgent-suggestionCount')).toHaveText(
    '1 / 3'
  );
  let cells = await notebookCells(page);
  expect(cells).toHaveLength(2);
  expect(cells[1].source).toBe(CANDIDATES[0].code);
  expect(cells[1].metadata.jupyter_data_agent).toEqual({
    turn_id: 'turn-mean-delay',
    intent: INTENT,
    status: 'pending'
  });
  // Explanation, highlighted code and the executed output (an HTML table) in the panel.
  const candidate = panel(page).locator('.jp-DataAgent-candidate');
  await expect(candidate.locator('.jp-DataAgent-steps li')).toHaveCount(2);
  await expect(candidate.locator('.jp-DataAgent-code pre')).toContainText(
    'groupby'
  );
  await expect(candidate.locator('.jp-DataAgent-output table')).toBeVisible();
  await expect(candidate.locator('.jp-DataAgent-facts')).toContainText(
    'support 3'
  );
  await page.screenshot({ path: screenshotPath('mocked-suggestion.png') });
  await panel(page).screenshot({ path: screenshotPath('mocked-panel.png') });

  // Keyboard: next / previous candidate in command mode.
  await page.notebook.selectCells(1);
  await page.keyboard.press('Alt+n');
  await expect(bar.locator('.jp-DataAgent-suggestionCount')).toHaveText(
    '2 / 3'
  );
  cells = await notebookCells(page);
  expect(cells).toHaveLength(2);
  expect(cells[1].source).toBe(CANDIDATES[1].code);
  // The panel follows: the image output of candidate 2.
  await expect(candidate.locator('.jp-DataAgent-output img')).toBeVisible();
  await page.keyboard.press('Alt+n');
  await expect(
    candidate.locator('.jp-DataAgent-output .jp-RenderedText')
  ).toContainText('KeyError');
  await page.keyboard.press('Alt+p');
  await page.keyboard.press('Alt+p');
  await expect(bar.locator('.jp-DataAgent-suggestionCount')).toHaveText(
    '1 / 3'
  );

  // Accept with the keyboard: the marking goes, the code stays.
  await page.keyboard.press('Control+Shift+Enter');
  await expect(suggestion).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells).toHaveLength(2);
  expect(cells[1].source).toBe(CANDIDATES[0].code);
  expect(cells[1].metadata.jupyter_data_agent.status).toBe('accepted');
  const stored = await notebookAgentMetadata(page);
  expect(stored.turns[0]).toMatchObject({
    turn_id: 'turn-mean-delay',
    intent: INTENT,
    status: 'accepted',
    code: CANDIDATES[0].code,
    candidates: CANDIDATES.map(c => c.code)
  });
  await expect(
    panel(page).locator('.jp-DataAgent-chip.jp-mod-accepted')
  ).toBeVisible();

  // The notebook's own undo (z in command mode) takes the acceptance back...
  await page.keyboard.press('z');
  await expect(suggestion).toHaveCount(1);
  await expect
    .poll(async () => (await notebookAgentMetadata(page)).turns[0].status)
    .toBe('pending');
  // ...and the toolbar button accepts again.
  await bar.locator('button.jp-DataAgent-accept').click();
  await expect(suggestion).toHaveCount(0);

  // Editing an accepted cell is recorded as "edited".
  await page.notebook.setCell(
    1,
    'code',
    'df.groupby("airline")["delay"].median()'
  );
  await expect
    .poll(async () => (await notebookAgentMetadata(page)).turns[0])
    .toMatchObject({
      status: 'edited',
      code: 'df.groupby("airline")["delay"].median()'
    });
});

test('reject restores the notebook exactly; polling when the socket fails', async ({
  page
}) => {
  const server = new MockServer();
  server.pollOnly.add('job1');
  await server.install(page);
  await notebookWithDf(page, 'reject.ipynb');
  await page.notebook.addCell('markdown', '## Notes');
  await page.notebook.selectCells(0);
  const before = await notebookCells(page);

  await openPanel(page);
  server.events.set('job1', [
    event('job1', 0, 'progress', 'Building the prompt'),
    ...finishEvents('job1', 1, [CANDIDATES[0]], { turnId: 'turn-rows' })
  ]);
  server.pollStatus.set('job1', 'done');
  await ask(page, 'How many flights are in the table?');

  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);
  let cells = await notebookCells(page);
  expect(cells.map(c => c.cell_type)).toEqual(['code', 'code', 'markdown']);
  // One candidate: no ‹ › to cycle with.
  await expect(suggestion.locator('button.jp-DataAgent-next')).toBeHidden();

  await suggestion.locator('button.jp-DataAgent-reject').click();
  await expect(suggestion).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells).toEqual(before);
  const stored = await notebookAgentMetadata(page);
  expect(stored.turns.map((t: any) => [t.turn_id, t.status])).toEqual([
    ['turn-rows', 'rejected']
  ]);
  await expect(
    panel(page).locator('.jp-DataAgent-chip.jp-mod-rejected')
  ).toBeVisible();

  // Our own undo command puts the rejected suggestion back, then accept it per step.
  await execute(page, 'jupyter-data-agent:undo');
  await expect(suggestion).toHaveCount(1);
  await execute(page, 'jupyter-data-agent:reject');
  await expect(suggestion).toHaveCount(0);
  expect(await notebookCells(page)).toEqual(before);
});

test('fix the error in a cell, stop, and find the conversation after a reload', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'fix.ipynb');
  await page.notebook.addCell('code', 'df["late"].mean()');
  await page.notebook.runCell(1, true);
  await expect(
    page.locator(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    )
  ).toBeVisible();

  // From the cell's context menu.
  await (await page.notebook.getCellLocator(1))!.click({ button: 'right' });
  await page
    .locator('.lm-Menu')
    .getByText('Fix the error in this cell')
    .click();
  await expect.poll(() => server.bodies.length).toBe(1);
  const body = server.bodies[0];
  // A typed edit: the cell and its error, no sentence about it.
  expect(body.intent).toBe('');
  expect(body.edit).toMatchObject({
    kind: 'fix',
    cell_id: body.cells[1].id,
    source: 'df["late"].mean()',
    error: { ename: 'KeyError' },
    output: '',
    instruction: ''
  });
  expect(body.edit.error.traceback.length).toBeGreaterThan(0);
  expect(body.active_index).toBe(1);
  expect(
    body.cells[1].outputs.some((o: any) => o.output_type === 'error')
  ).toBe(true);
  await server.send('job1', [
    event('job1', 1, 'progress', 'Reading the error'),
    ...finishEvents(
      'job1',
      2,
      [
        {
          ...CANDIDATES[0],
          code: 'df["delay"].mean()',
          steps: [],
          explanation: 'Use the delay column: there is no "late" column.'
        }
      ],
      { turnId: 'turn-fix' }
    )
  ]);
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);
  await expect(
    suggestion.locator('.jp-DataAgent-suggestionExplanation')
  ).toContainText('no "late" column');
  // The fix replaces the broken cell (a diff over it), no cell is added.
  expect((await notebookCells(page)).map(c => c.source)).toEqual([
    DF_CODE,
    'df["late"].mean()'
  ]);
  await expect(suggestion.locator('.jp-DataAgent-cellDiff')).toBeVisible();
  await suggestion.locator('button.jp-DataAgent-acceptAndRun').click();
  await expect(suggestion).toHaveCount(0);
  expect((await notebookCells(page))[1].source).toBe('df["delay"].mean()');
  await expect(
    (await page.notebook.getCellLocator(1))!.locator('.jp-OutputArea-output')
  ).toContainText('17');

  // A second request, stopped while it runs.
  await ask(page, 'Plot the delays');
  await expect.poll(() => server.bodies.length).toBe(2);
  await server.send('job2', [event('job2', 1, 'progress', 'Sampling')]);
  await panel(page).locator('.jp-DataAgent-stop').click();
  await expect.poll(() => server.cancelled).toEqual(['job2']);
  await server.send('job2', [
    event('job2', 2, 'error', 'Cancelled by the user')
  ]);
  await expect(panel(page).locator('.jp-DataAgent-send')).toBeVisible();

  // The conversation lives in the notebook: save, reload, reopen.
  await page.notebook.save();
  await reloadAndReopen(page, 'fix.ipynb');
  await openPanel(page);
  const turns = panel(page).locator('.jp-DataAgent-exchange');
  // The stopped request is stored too, after the first, with its reason.
  await expect(turns).toHaveCount(2);
  await expect(turns.first()).toContainText('Fix the error in cell 2');
  await expect(
    turns.first().locator('.jp-DataAgent-chip.jp-mod-accepted')
  ).toBeVisible();
  await expect(turns.nth(1)).toContainText('Cancelled by the user');
  // Up in the question box brings the intents back, newest first.
  const input = panel(page).locator('.jp-DataAgent-input');
  await input.click();
  await input.press('ArrowUp');
  await expect(input).toHaveValue('Plot the delays');
  await input.evaluate((el: HTMLTextAreaElement) => el.setSelectionRange(0, 0));
  await input.press('ArrowUp');
  await expect(input).toHaveValue('Fix the error in cell 2');
  await page.screenshot({ path: screenshotPath('mocked-after-reload.png') });
});

test('perStep insert mode, keyboard reject, dark theme', async ({ page }) => {
  const server = new MockServer();
  await server.install(page);
  await page.evaluate(async () => {
    const registry = await (window as any).galata.getPlugin(
      '@jupyterlab/apputils-extension:settings'
    );
    await registry.set('jupyter-data-agent:plugin', 'insertMode', 'perStep');
  });
  await notebookWithDf(page, 'steps.ipynb');
  const before = await notebookCells(page);
  await openPanel(page);
  await ask(page, INTENT);
  await expect.poll(() => server.bodies.length).toBe(1);
  expect(server.bodies[0].strategy).toBe('direct');
  await server.send('job1', [
    ...finishEvents('job1', 1, CANDIDATES.slice(0, 2), { turnId: 'turn-steps' })
  ]);

  // One markdown cell per step explanation, one code cell per step.
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(4);
  let cells = await notebookCells(page);
  expect(cells.slice(1).map(c => [c.cell_type, c.source])).toEqual([
    ['markdown', '**Step 1.** Group the flights by airline'],
    ['code', 'by_airline = df.groupby("airline")'],
    ['markdown', '**Step 2.** Average the delay of each airline'],
    ['code', 'by_airline["delay"].mean().to_frame()']
  ]);
  // Only the first cell carries the toolbar.
  await expect(page.locator('.jp-DataAgent-suggestionBar')).toHaveCount(1);

  await page.theme.setDarkTheme();
  await page.screenshot({ path: screenshotPath('mocked-perstep-dark.png') });

  // Cycling to a one-step candidate shrinks the suggestion in place.
  await page.notebook.selectCells(0);
  await page.keyboard.press('Alt+n');
  await expect(suggestion).toHaveCount(2);
  cells = await notebookCells(page);
  expect(cells.slice(1).map(c => c.cell_type)).toEqual(['markdown', 'code']);

  await page.keyboard.press('Control+Shift+Backspace');
  await expect(suggestion).toHaveCount(0);
  expect(await notebookCells(page)).toEqual(before);
  await page.theme.setLightTheme();
});

/** A long notebook: 24 cells that printed 8 lines each, then a cell whose long traceback is shown. */
function longNotebookWithError(): string {
  const cells: Record<string, unknown>[] = [];
  for (let i = 0; i < 24; i++) {
    cells.push({
      cell_type: 'code',
      execution_count: i + 1,
      id: `rows-${i}`,
      metadata: {},
      outputs: [
        {
          output_type: 'stream',
          name: 'stdout',
          text: Array.from({ length: 8 }, (_, k) => `row ${i}.${k}\n`).join('')
        }
      ],
      source: `print("rows ${i}")`
    });
  }
  cells.push({
    cell_type: 'code',
    execution_count: 25,
    id: 'broken',
    metadata: {},
    outputs: [
      {
        output_type: 'error',
        ename: 'KeyError',
        evalue: "'late'",
        traceback: [
          ...Array.from(
            { length: 30 },
            (_, k) => `  File "frame${k}.py", line ${k + 1}, in step${k}`
          ),
          "KeyError: 'late'"
        ]
      }
    ],
    source: 'df["late"].mean()'
  });
  return notebookJson(cells);
}

test('a fix low in a long notebook shows its bar; its accept clears the traceback', async ({
  page,
  tmpPath
}) => {
  const server = new MockServer();
  await server.install(page);
  await page.contents.uploadContent(
    longNotebookWithError(),
    'text',
    `${tmpPath}/long-fix.ipynb`
  );
  await page.filebrowser.refresh();
  expect(await page.notebook.open('long-fix.ipynb')).toBe(true);
  await openPanel(page);
  const broken = (await page.notebook.getCellLocator(24))!;
  await broken.locator('.jp-InputArea-editor').click({ button: 'right' });
  await page
    .locator('.lm-Menu')
    .getByText('Fix the error in this cell')
    .click();
  await expect.poll(() => server.bodies.length).toBe(1);
  expect(server.bodies[0].edit).toMatchObject({
    kind: 'fix',
    cell_id: 'broken'
  });
  // A fix of a dozen lines: with the traceback, the cell is taller than the view.
  const fix = [
    '# Step 1: The column is "delay", not "late"',
    ...Array.from({ length: 10 }, (_, k) => `part${k} = df["delay"] * ${k}`),
    'df["delay"].mean()'
  ].join('\n');
  await server.send(
    'job1',
    finishEvents(
      'job1',
      1,
      [{ ...CANDIDATES[0], code: fix, steps: [], explanation: 'Use delay.' }],
      { turnId: 'turn-long-fix' }
    )
  );
  const cell = page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-replacing');
  await expect(cell.locator('.jp-DataAgent-cellDiff')).toBeVisible();

  // Without the test scrolling: the bar's Accept is inside the notebook's view.
  const accept = cell.locator('button.jp-DataAgent-accept');
  const view = page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer'
  );
  const inView = async () => {
    const button = await accept.boundingBox();
    const area = await view.boundingBox();
    return (
      !!button &&
      !!area &&
      button.y >= area.y &&
      button.y + button.height <= area.y + area.height
    );
  };
  expect(
    await cell.evaluate(node => node.getBoundingClientRect().height)
  ).toBeGreaterThan((await view.boundingBox())!.height);
  await expect.poll(inView).toBe(true);
  // And it stays there once everything has settled.
  await page.waitForTimeout(1000);
  expect(await inView()).toBe(true);
  await page.screenshot({ path: screenshotPath('mocked-long-fix.png') });

  // Accept: the traceback of the broken code goes with it.
  await accept.click();
  await expect(cell).toHaveCount(0);
  let cells = await notebookCells(page);
  expect(cells[24]).toMatchObject({
    id: 'broken',
    source: fix,
    outputs: [],
    execution_count: null
  });
  await expect(
    (await page.notebook.getCellLocator(24))!.locator('.jp-OutputArea-output')
  ).toHaveCount(0);
  // One undo: the broken code and its traceback, as they were.
  await execute(page, 'jupyter-data-agent:undo');
  await expect(cell).toHaveCount(1);
  cells = await notebookCells(page);
  expect(cells[24]).toMatchObject({
    source: 'df["late"].mean()',
    execution_count: 25
  });
  expect(cells[24].outputs.map((o: any) => o.ename)).toEqual(['KeyError']);
  // Accept again, then the notebook's own undo (z): the traceback is back too.
  await cell.locator('button.jp-DataAgent-accept').click();
  await expect(cell).toHaveCount(0);
  await page.keyboard.press('Escape');
  await page.keyboard.press('z');
  await expect
    .poll(async () => (await notebookCells(page))[24].outputs.length)
    .toBe(1);
  expect((await notebookCells(page))[24].source).toBe('df["late"].mean()');
});

test('a question asked from an empty cell is answered in it; Reject gives it back', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'empty-cell.ipynb');
  // A new, empty cell: the user asks from there.
  await execute(page, 'notebook:insert-cell-below');
  const before = await notebookCells(page);
  expect(before.map(c => c.source)).toEqual([DF_CODE, '']);
  await openPanel(page);
  await ask(page, INTENT);
  await expect.poll(() => server.bodies.length).toBe(1);
  expect(server.bodies[0].active_index).toBe(1);
  await server.send('job1', [
    ...finishEvents('job1', 1, CANDIDATES.slice(0, 2), {
      turnId: 'turn-empty'
    })
  ]);
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);
  // The suggestion is in the empty cell: no empty cell is left above it.
  let cells = await notebookCells(page);
  expect(cells.map(c => c.id)).toEqual(before.map(c => c.id));
  expect(cells[1].source).toBe(CANDIDATES[0].code);
  // Cycling stays in that cell.
  await suggestion.locator('button.jp-DataAgent-next').click();
  await expect
    .poll(async () => (await notebookCells(page))[1].source)
    .toBe(CANDIDATES[1].code);
  expect(await notebookCells(page)).toHaveLength(2);

  // Reject: the empty cell is back, exactly as it was.
  await suggestion.locator('button.jp-DataAgent-reject').click();
  await expect(suggestion).toHaveCount(0);
  expect(await notebookCells(page)).toEqual(before);
  // Undo the reject, then accept: still two cells, the answer in the second.
  await execute(page, 'jupyter-data-agent:undo');
  await expect(suggestion).toHaveCount(1);
  await suggestion.locator('button.jp-DataAgent-accept').click();
  await expect(suggestion).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells.map(c => c.id)).toEqual(before.map(c => c.id));
  expect(cells[1].source).toBe(CANDIDATES[1].code);
  const turns = (await notebookAgentMetadata(page)).turns;
  expect(turns[turns.length - 1]).toMatchObject({
    turn_id: 'turn-empty',
    status: 'accepted'
  });
});
