/**
 * The user story end to end against the real server extension, its real
 * strategies and a real kernel, with the model played by
 * tests/openai_server/ (replies in ui-tests/fixtures/replies.json).
 */
import { expect, test } from '@jupyterlab/galata';

import {
  ask,
  notebookAgentMetadata,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen,
  screenshotPath,
  loggedRequests,
  promptOf
} from './helpers';

const FIRST = 'What is the mean delay per airline?';
const SECOND = 'How many flights are in the table?';

function prompts(): string[] {
  return loggedRequests().map(promptOf);
}

test.beforeEach(async ({ page }) => {
  // The server API is built alongside the UI: say so instead of failing on a 404.
  const probe = await page.request.post('/jupyter-data-agent/turns', {
    data: {}
  });
  test.skip(
    probe.status() === 404,
    'the server has no POST /jupyter-data-agent/turns yet'
  );
});

test('ask, accept, ask again, reject, reload', async ({ page }) => {
  await notebookWithDf(page, 'scenario.ipynb');
  await openPanel(page);

  // First question: a Quick (direct) answer, streamed, placed as a suggestion.
  await ask(page, FIRST);
  const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
  await expect(exchange.locator('.jp-DataAgent-intentText')).toHaveText(FIRST);
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1, { timeout: 90_000 });
  await expect(exchange.locator('.jp-DataAgent-log summary')).toContainText(
    'step'
  );
  const bar = suggestion.locator('.jp-DataAgent-suggestionBar');
  await expect(bar).toContainText('Suggested by Data Agent');
  await expect(bar).toContainText('Group the flights by airline');
  await expect(suggestion.locator('.jp-InputArea')).toContainText('groupby');
  // The output preview from the kernel copy: the mean delays.
  const output = exchange.locator('.jp-DataAgent-output');
  await expect(output).toContainText('AA');
  await expect(output).toContainText('20');
  await page.screenshot({ path: screenshotPath('scenario-suggestion.png') });
  await panel(page).screenshot({ path: screenshotPath('scenario-panel.png') });

  // Accept: the cell stays, the marking goes, the decision is stored.
  await bar.locator('button.jp-DataAgent-accept').click();
  await expect(suggestion).toHaveCount(0);
  let cells = await notebookCells(page);
  expect(cells).toHaveLength(2);
  expect(cells[1].source).toContain('groupby("airline")');
  expect(cells[1].metadata.jupyter_data_agent.status).toBe('accepted');
  await expect(
    exchange.locator('.jp-DataAgent-chip.jp-mod-accepted')
  ).toBeVisible();

  // Second question, asked about the last cell; rejecting it restores the notebook.
  await page.notebook.selectCells(1);
  const before = await notebookCells(page);
  await ask(page, SECOND);
  await expect(suggestion).toHaveCount(1, { timeout: 90_000 });
  await expect(suggestion.locator('.jp-InputArea')).toContainText('len(df)');
  await expect(
    panel(page)
      .locator('.jp-DataAgent-exchange')
      .nth(1)
      .locator('.jp-DataAgent-output')
  ).toContainText('5');
  // The first turn was part of the second prompt.
  expect(prompts().pop()).toContain(`Problem: ${FIRST}`);
  await suggestion.locator('button.jp-DataAgent-reject').click();
  await expect(suggestion).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells).toEqual(before);

  const stored = await notebookAgentMetadata(page);
  expect(stored.version).toBe(1);
  expect(stored.turns.map((t: any) => [t.intent, t.status])).toEqual([
    [FIRST, 'accepted'],
    [SECOND, 'rejected']
  ]);

  // Reload: the conversation comes back from the notebook.
  await page.notebook.save();
  await reloadAndReopen(page, 'scenario.ipynb');
  await openPanel(page);
  const turns = panel(page).locator('.jp-DataAgent-exchange');
  await expect(turns).toHaveCount(2);
  await expect(turns.nth(0)).toContainText(FIRST);
  await expect(
    turns.nth(0).locator('.jp-DataAgent-chip.jp-mod-accepted')
  ).toBeVisible();
  await expect(turns.nth(1)).toContainText(SECOND);
  await expect(
    turns.nth(1).locator('.jp-DataAgent-chip.jp-mod-rejected')
  ).toBeVisible();
  await page.screenshot({ path: screenshotPath('scenario-after-reload.png') });
});
