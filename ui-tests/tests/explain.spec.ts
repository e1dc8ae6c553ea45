/**
 * "Explain this cell": the active cell goes to the server with strategy
 * `explain`, the answer comes back as Markdown prose, the sidebar renders it
 * with JupyterLab's Markdown renderer as untrusted data, and no cell is
 * inserted. The strategy chooser is built from the server's catalog: it
 * offers the Agent (react) and not Explain.
 *
 * First against a scripted server (exact events), then against the real
 * server, its explain strategy and the scripted model
 * (ui-tests/fixtures/replies.json).
 */
import { expect, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';

import {
  MockServer,
  event,
  finishEvents,
  notebookCells,
  notebookWithDf,
  openPanel,
  reloadAndReopen,
  panel,
  screenshotPath,
  loggedRequests
} from './helpers';

const PROSE = [
  'This cell **builds** the `df` table of flights:',
  '',
  '- `airline`: the carrier',
  '- `delay`: minutes late',
  '',
  '<img src=x onerror="window.__jdaExplainPwned = 1"><script>window.__jdaExplainPwned = 2</script>'
].join('\n');

async function explainCell(page: Page, index: number): Promise<void> {
  // In the cell's code: the right-click makes it the active cell (N2).
  const cell = page.locator('.jp-Notebook .jp-Cell').nth(index);
  await cell.locator('.jp-InputArea-editor').click({ button: 'right' });
  await page.locator('.lm-Menu').getByText('Explain this cell').click();
}

async function notPwned(page: Page): Promise<void> {
  // onerror fires once the broken image fails to load: give it time.
  await page.waitForTimeout(1000);
  expect(
    await page.evaluate(() => (window as any).__jdaExplainPwned)
  ).toBeUndefined();
}

test('the chooser offers every strategy of the catalog but Explain; Agent sends react', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'chooser.ipynb');
  await openPanel(page);

  const select = panel(page).locator('.jp-DataAgent-strategy select');
  await expect(select.locator('option')).toHaveText([
    'Direct',
    'Vote',
    'Agent',
    'Search'
  ]);
  await expect(select.locator('option[value="explain"]')).toHaveCount(0);
  await expect(select.locator('option[value="react"]')).toHaveAttribute(
    'title',
    /ReAct/
  );

  await select.selectOption({ label: 'Agent' });
  const input = panel(page).locator('.jp-DataAgent-input');
  await input.fill('Which airline is the most delayed?');
  await input.press('Enter');
  await expect.poll(() => server.bodies.length).toBe(1);
  expect(server.bodies[0].strategy).toBe('react');
  await expect(
    panel(page).locator('.jp-DataAgent-exchange .jp-DataAgent-chip').first()
  ).toHaveText('Agent');
  await server.send('job1', [
    event('job1', 1, 'error', 'The turn was cancelled.', { state: 'cancelled' })
  ]);
  await expect(panel(page).locator('.jp-DataAgent-send')).toBeVisible();
});

test('Explain this cell shows Markdown prose and inserts no cell', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'explain.ipynb');
  await page.notebook.addCell('code', 'df.groupby("airline")["delay"].mean()');
  await page.notebook.runCell(1, true);
  const before = await notebookCells(page);
  // Another cell is active: the right-click on cell 2 decides which.
  await page.notebook.selectCells(0);

  await explainCell(page, 1);
  await expect.poll(() => server.bodies.length).toBe(1);
  const body = server.bodies[0];
  expect(body).toMatchObject({
    intent: 'Explain cell 2',
    strategy: 'explain',
    active_index: 1
  });
  // The cell goes with its source and outputs.
  expect(body.cells[1].source).toContain('groupby');
  expect(body.cells[1].outputs.length).toBeGreaterThan(0);

  await server.send('job1', [
    event('job1', 1, 'progress', 'Running the explain strategy.', {
      state: 'searching',
      strategy: 'explain'
    }),
    ...finishEvents('job1', 2, [], {
      turnId: 'turn-explain',
      result: { strategy: 'explain', answer: PROSE, chosen: null }
    })
  ]);

  const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
  const prose = exchange.locator('.jp-DataAgent-prose');
  await expect(prose).toBeVisible();
  // Rendered by JupyterLab's Markdown renderer: emphasis, code and a list.
  await expect(prose.locator('.jp-RenderedMarkdown strong')).toHaveText(
    'builds'
  );
  await expect(prose.locator('.jp-RenderedMarkdown code').first()).toHaveText(
    'df'
  );
  await expect(prose.locator('.jp-RenderedMarkdown li')).toHaveCount(2);
  // Untrusted: no script element, no event handler survives sanitizing.
  await expect(prose.locator('script')).toHaveCount(0);
  expect(await prose.innerHTML()).not.toContain('onerror');
  await notPwned(page);
  await expect(exchange.locator('.jp-DataAgent-chip').first()).toHaveText(
    'Explain'
  );
  // Nothing to insert: no candidate, no suggestion, the notebook unchanged.
  await expect(exchange.locator('.jp-DataAgent-candidates')).toHaveCount(0);
  await expect(exchange.locator('.jp-DataAgent-note')).toHaveCount(0);
  await expect(
    page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion')
  ).toHaveCount(0);
  expect(await notebookCells(page)).toEqual(before);
  await panel(page).screenshot({ path: screenshotPath('explain-panel.png') });

  // Stored with the turn: the answer and its usage come back after a
  // reload, from the notebook alone (N3).
  await page.notebook.save();
  await reloadAndReopen(page, 'explain.ipynb');
  await openPanel(page);
  const stored = panel(page).locator('.jp-DataAgent-exchange').first();
  await expect(stored.locator('.jp-DataAgent-intentText')).toHaveText(
    'Explain cell 2'
  );
  await expect(
    stored.locator('.jp-DataAgent-prose .jp-RenderedMarkdown strong')
  ).toHaveText('builds');
  await expect(stored.locator('.jp-DataAgent-usage')).toBeVisible();
  await expect(stored.locator('.jp-DataAgent-candidateBar')).toHaveCount(0);
});

test('Explain against the real server: the model’s prose, the cell in the prompt', async ({
  page
}) => {
  const config = await page.request.get('/jupyter-data-agent/config');
  const available: string[] = config.ok()
    ? ((await config.json()).capabilities?.strategies ?? [])
    : [];
  test.skip(
    !available.includes('explain'),
    'this server has no explain strategy yet'
  );

  await notebookWithDf(page, 'explain-real.ipynb');
  await page.notebook.addCell('code', 'df["delay"].describe()');
  await page.notebook.runCell(1, true);
  const before = await notebookCells(page);
  await openPanel(page);

  await explainCell(page, 1);
  const prose = panel(page).locator('.jp-DataAgent-prose');
  await expect(prose).toBeVisible({ timeout: 90_000 });
  await expect(prose.locator('.jp-RenderedMarkdown strong').first()).toHaveText(
    'summary statistics'
  );
  await expect(prose.locator('.jp-RenderedMarkdown li')).toHaveCount(2);
  await expect(
    page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion')
  ).toHaveCount(0);
  expect(await notebookCells(page)).toEqual(before);

  // The model saw the active cell.
  const prompts = loggedRequests().map(req => JSON.stringify(req.body));
  expect(prompts.pop()).toContain('describe()');
  await panel(page).screenshot({
    path: screenshotPath('explain-real-panel.png')
  });
});
