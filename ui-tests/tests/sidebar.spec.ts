/**
 * The sidebar in daily use, against the real server, kernel and
 * OpenAI-protocol test server: turns keep their order and come back after a
 * reload with their failure reason and output preview; Escape stops a turn
 * and the suggestion shortcuts work from the composer; the suggestion
 * scrolls into view and "Show in notebook" finds it; Copy, Insert, Retry
 * and Clear conversation; the panel in the dark theme.
 */
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';

import {
  DF_CODE,
  ask,
  notebookAgentMetadata,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen,
  screenshotPath,
  loggedRequests,
  notebookJson,
  useDarkTheme
} from './helpers';

const SLOW = 'Sidebar slow question: list the airlines';
const COUNT = 'How many flights are in the table?';

/** Requests the test server received whose prompt holds `text`. */
function requestsWith(text: string): number {
  return loggedRequests().filter(req => JSON.stringify(req).includes(text))
    .length;
}

/** A notebook file: the DataFrame cell, then `notes` Markdown cells. */
function longNotebook(notes: number): string {
  const cells: Record<string, unknown>[] = [
    {
      cell_type: 'code',
      execution_count: null,
      id: 'df-cell',
      metadata: {},
      outputs: [],
      source: DF_CODE
    }
  ];
  for (let i = 1; i <= notes; i++) {
    cells.push({
      cell_type: 'markdown',
      id: `note-${i}`,
      metadata: {},
      source: `Note ${i}\n\nA line of the analysis that fills the page.`
    });
  }
  return notebookJson(cells);
}

async function waitForSuggestion(page: IJupyterLabPageFixture) {
  await expect(
    page.locator(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-suggestion'
    )
  ).toHaveCount(1, { timeout: 90_000 });
}

test('a stopped turn keeps its place and comes back after a reload with the previews', async ({
  page
}) => {
  test.setTimeout(300_000);
  await notebookWithDf(page, 'sidebar-order.ipynb');
  await openPanel(page);
  const sidebar = panel(page);
  const input = sidebar.locator('.jp-DataAgent-input');

  // A slow turn, stopped with Escape from the composer while it streams.
  await input.fill(SLOW);
  await input.press('Enter');
  await expect(sidebar.locator('.jp-DataAgent-stop')).toBeVisible();
  await expect(sidebar.locator('.jp-DataAgent-streaming')).toBeVisible({
    timeout: 60_000
  });
  await input.focus();
  await input.press('Escape');
  await expect(
    sidebar.locator('.jp-DataAgent-note', { hasText: 'Stopped.' })
  ).toBeVisible({ timeout: 30_000 });
  await expect(sidebar.locator('.jp-DataAgent-send')).toBeVisible();

  // A second turn, which finishes and is placed in the notebook.
  await ask(page, COUNT);
  await waitForSuggestion(page);
  const intents = sidebar.locator('.jp-DataAgent-intentText');
  await expect(intents).toHaveText([SLOW, COUNT]);

  // Accept from the composer with the notebook's shortcut.
  await input.focus();
  await input.press('Control+Shift+Enter');
  await expect(
    sidebar.locator('.jp-DataAgent-chip.jp-mod-accepted')
  ).toBeVisible();
  const cells = await notebookCells(page);
  expect(cells[1].source).toContain('len(df)');

  // Both turns are stored in order: the stopped one with its reason.
  const stored = await notebookAgentMetadata(page);
  expect(stored.turns.map((t: any) => t.intent)).toEqual([SLOW, COUNT]);
  expect(stored.turns[0].failure.status).toBe('cancelled');
  expect(stored.turns[1].previews[0][0].data['text/plain']).toBe('5');

  await page.notebook.save();
  await reloadAndReopen(page, 'sidebar-order.ipynb');
  await openPanel(page);
  await expect(intents).toHaveText([SLOW, COUNT]);
  const [first, second] = [
    sidebar.locator('.jp-DataAgent-exchange').nth(0),
    sidebar.locator('.jp-DataAgent-exchange').nth(1)
  ];
  await expect(first.locator('.jp-DataAgent-note')).toHaveText('Stopped.');
  await expect(
    second.locator('.jp-DataAgent-chip.jp-mod-accepted')
  ).toBeVisible();
  await expect(second.locator('.jp-DataAgent-output')).toContainText('5');
  await page
    .locator(`#${'jupyter-data-agent-panel'}`)
    .screenshot({ path: screenshotPath('turn-order-after-reload.png') });

  // ↑ in the composer recalls every earlier question, newest first.
  await input.focus();
  await input.press('ArrowUp');
  await expect(input).toHaveValue(COUNT);
  await input.evaluate((el: HTMLTextAreaElement) => el.setSelectionRange(0, 0));
  await input.press('ArrowUp');
  await expect(input).toHaveValue(SLOW);
});

test('the suggestion scrolls into view; Show in notebook, Copy, Insert, Retry, Clear', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(300_000);
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  // A long notebook: the DataFrame at the top, then 40 notes; the
  // question is asked about the last cell while the notebook shows its top.
  await page.contents.uploadContent(
    longNotebook(40),
    'text',
    `${tmpPath}/sidebar-long.ipynb`
  );
  await page.filebrowser.refresh();
  expect(await page.notebook.open('sidebar-long.ipynb')).toBe(true);
  await page.notebook.runCell(0, true);
  await page.notebook.selectCells(40);
  await openPanel(page);
  const scroller = page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer'
  );
  await scroller.evaluate(node => (node.scrollTop = 0));
  await ask(page, COUNT);
  await waitForSuggestion(page);
  const suggestion = page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toBeInViewport();

  // Away and back with the turn's link: in view and selected.
  await scroller.evaluate(node => (node.scrollTop = 0));
  await expect(suggestion).not.toBeInViewport();
  const sidebar = panel(page);
  await sidebar.locator('.jp-DataAgent-showCells').click();
  await expect(suggestion).toBeInViewport();
  await expect(suggestion).toHaveClass(/jp-mod-active/);

  // Copy puts the candidate's code on the clipboard.
  await sidebar.locator('.jp-DataAgent-codeWrap').first().hover();
  await sidebar.locator('.jp-DataAgent-copy').first().click();
  await expect(sidebar.locator('.jp-DataAgent-copy').first()).toHaveText(
    'Copied'
  );
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(
    '# Step 1: Count the rows of the flights table\nlen(df)'
  );

  // Reject, then Insert (the turn's one Insert button) places it again.
  await sidebar.locator('.jp-DataAgent-panelReject').click();
  await expect(suggestion).toHaveCount(0);
  await expect(sidebar.getByRole('button', { name: 'Insert' })).toHaveCount(1);
  await sidebar.locator('.jp-DataAgent-insert').click();
  await expect(suggestion).toHaveCount(1);
  await sidebar.locator('.jp-DataAgent-panelAccept').click();
  await expect(suggestion).toHaveCount(0);
  await page
    .locator('#jupyter-data-agent-panel')
    .screenshot({ path: screenshotPath('sidebar-tour.png') });

  // Retry asks the same question again.
  const before = requestsWith('How many flights are in the table');
  await sidebar.locator('.jp-DataAgent-retry').first().click();
  await expect(sidebar.locator('.jp-DataAgent-intentText')).toHaveText([
    COUNT,
    COUNT
  ]);
  await waitForSuggestion(page);
  expect(requestsWith('How many flights are in the table')).toBeGreaterThan(
    before
  );

  // The dark theme: the panel follows JupyterLab's variables.
  await useDarkTheme(page);
  await page
    .locator('#jupyter-data-agent-panel')
    .screenshot({ path: screenshotPath('sidebar-dark.png') });
  await page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('apputils:change-theme', {
      theme: 'JupyterLab Light'
    })
  );

  // Clear, after a confirmation: the panel and the metadata are empty; the
  // accepted cell stays, the pending suggestion goes.
  await sidebar.locator('.jp-DataAgent-clear').click();
  await page.locator('.jp-Dialog .jp-mod-warn').click();
  await expect(sidebar.locator('.jp-DataAgent-empty')).toBeVisible();
  expect((await notebookAgentMetadata(page)).turns).toEqual([]);
  await expect(suggestion).toHaveCount(0);
  const sources = (await notebookCells(page)).map(c => c.source);
  expect(sources.filter(s => s.includes('len(df)'))).toHaveLength(1);
});

test('a busy kernel offers to answer from the notebook text now', async ({
  page
}) => {
  test.setTimeout(240_000);
  await notebookWithDf(page, 'sidebar-busy.ipynb');
  // The kernel busy with a long cell, not awaited.
  await page.evaluate(() => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    widget.sessionContext.session.kernel.requestExecute({
      code: 'import time; time.sleep(90)'
    });
  });
  await openPanel(page);
  const sidebar = panel(page);
  await ask(page, COUNT);
  const answerNow = sidebar.locator('.jp-DataAgent-answerNow');
  await expect(answerNow).toBeVisible({ timeout: 60_000 });
  await sidebar
    .locator('.jp-DataAgent-exchange')
    .screenshot({ path: screenshotPath('sidebar-busy-kernel.png') });
  const started = Date.now();
  await answerNow.click();
  await waitForSuggestion(page);
  // Long before the cell ends, and nothing was run in a kernel copy.
  expect(Date.now() - started).toBeLessThan(60_000);
  await expect(sidebar.locator('.jp-DataAgent-status').first()).toHaveText(
    'not run'
  );
});

test('the model picker names a model; one the server does not offer is refused in words', async ({
  page
}) => {
  test.setTimeout(300_000);
  // The server's reply, with a model added to its list that the server does not
  // offer (it offers test-model and big-model): the turn itself goes to the real server.
  await page.route(/\/jupyter-data-agent\/config(\?|$)/, async route => {
    const response = await route.fetch();
    const config = await response.json();
    await route.fulfill({
      response,
      json: {
        ...config,
        models: [...config.models, 'retired-model'],
        prices: { ...config.prices, 'retired-model': { input: 7, output: 21 } }
      }
    });
  });
  // The notebook first, then the reload that fetches the config through the
  // route: a notebook created while the reloaded file browser is still
  // restoring its folder lands in the wrong one (seen in CI).
  await notebookWithDf(page, 'sidebar-models.ipynb');
  await page.notebook.save();
  await reloadAndReopen(page, 'sidebar-models.ipynb');
  await openPanel(page);
  const sidebar = panel(page);
  const picker = sidebar.locator('.jp-DataAgent-model select');
  await expect(picker).toBeVisible();
  await expect(picker.locator('option')).toHaveText([
    'test-model',
    'big-model',
    'retired-model'
  ]);
  await picker.selectOption('retired-model');
  const sent = page.waitForRequest(
    request =>
      request.url().includes('/jupyter-data-agent/turns') &&
      request.method() === 'POST'
  );
  await ask(page, COUNT);
  expect((await sent).postDataJSON().model).toBe('retired-model');
  const error = sidebar.locator('.jp-DataAgent-error');
  await expect(error).toContainText("'retired-model' is not offered");
  await expect(error).toContainText('test-model');
  // Stored as a failed turn, with its reason.
  const stored = await notebookAgentMetadata(page);
  expect(stored.turns[0].failure.status).toBe('error');
  expect(stored.turns[0].failure.reason).toContain('retired-model');
  await sidebar
    .locator('.jp-DataAgent-body')
    .screenshot({ path: screenshotPath('sidebar-model-picker.png') });

  // The configuration dialog lists every offered model's price (N5, M1).
  // Not awaited: the command ends when the dialog closes.
  await page.evaluate(() => {
    void (window as any).jupyterapp.commands.execute(
      'jupyter-data-agent:show-config'
    );
  });
  const dialog = page.locator('.jp-Dialog-content');
  const row = (label: string) =>
    dialog.locator('tr', { has: page.locator(`th:text-is("${label}")`) });
  await expect(row('Model')).toContainText(
    'retired-model (picked in this notebook'
  );
  await expect(row('Price')).toContainText(
    'retired-model: $7 input / $21 output per million tokens'
  );
  await page.keyboard.press('Escape');
  await expect(dialog).toHaveCount(0);

  // The pick is kept over a reload: the notebook remembers it (N5).
  await page.notebook.save();
  await reloadAndReopen(page, 'sidebar-models.ipynb');
  await openPanel(page);
  await expect(panel(page).locator('.jp-DataAgent-model select')).toHaveValue(
    'retired-model'
  );
});

test('the composer remembers the strategy of each notebook', async ({
  page
}) => {
  test.setTimeout(180_000);
  await notebookWithDf(page, 'sidebar-strategy.ipynb');
  await openPanel(page);
  const strategy = panel(page).locator('.jp-DataAgent-strategy select');
  await expect(strategy).toHaveValue('direct');
  await strategy.selectOption('vote');
  expect((await notebookAgentMetadata(page)).strategy).toBe('vote');
  await page.notebook.save();

  // Another notebook starts from the default.
  await page.notebook.createNew('sidebar-other.ipynb');
  await expect(strategy).toHaveValue('direct');

  await reloadAndReopen(page, 'sidebar-strategy.ipynb');
  await openPanel(page);
  await expect(panel(page).locator('.jp-DataAgent-notebook')).toHaveText(
    'sidebar-strategy.ipynb'
  );
  await expect(strategy).toHaveValue('vote');
});
