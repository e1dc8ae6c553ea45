/**
 * The sidebar's history holds the notebook's turns from elsewhere: a
 * `%%agent` cell of the notebook, run in its real kernel, sends its turn to
 * the real server (the model-service socket); the sidebar lists it as
 * "from %%agent", replays it from the server's events on a click, and
 * inserts its candidate as a suggestion, after which the turn is one of
 * its own.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  notebookAgentMetadata,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel
} from './helpers';

const INTENT = 'In a cell: what is the mean delay per airline?';

test('a %%agent turn is in the sidebar history, replayed and inserted', async ({
  page
}) => {
  await notebookWithDf(page, 'history-magic.ipynb');
  await page.notebook.addCell('code', '%load_ext jupyter_data_agent');
  await page.notebook.runCell(1, true);
  await page.notebook.addCell('code', `%%agent\n${INTENT}`);
  await page.notebook.runCell(2, true);
  // The cell's own outcome: its code, inserted as the next cell.
  await expect
    .poll(async () => (await notebookCells(page)).map(c => c.source), {
      timeout: 90_000
    })
    .toContainEqual(expect.stringContaining('groupby("airline")'));
  const cellsAfterMagic = (await notebookCells(page)).length;

  await openPanel(page);
  const entry = panel(page).locator(
    '.jp-DataAgent-outsideTurn[data-source="magic"]'
  );
  await expect(entry).toHaveCount(1, { timeout: 30_000 });
  await expect(entry.locator('.jp-DataAgent-outsideTurn-source')).toHaveText(
    'from %%agent'
  );
  await expect(entry.locator('.jp-DataAgent-outsideTurn-intent')).toHaveText(
    INTENT
  );
  await expect(entry.locator('.jp-DataAgent-outsideTurn-meta')).toContainText(
    'direct'
  );

  // Closed until asked; a click replays it from the server's events, a
  // second one hides it again.
  const header = entry.locator('.jp-DataAgent-outsideTurn-header');
  await expect(header).toHaveAttribute('aria-expanded', 'false');
  await header.click();
  await expect(header).toHaveAttribute('aria-expanded', 'true');
  await expect(entry.locator('.jp-DataAgent-candidate').first()).toContainText(
    'groupby'
  );
  await header.click();
  await expect(header).toHaveAttribute('aria-expanded', 'false');
  await expect(entry.locator('.jp-DataAgent-candidate')).toHaveCount(0);
  await header.click();
  await expect(entry.locator('.jp-DataAgent-candidate').first()).toBeVisible();

  // Insert: a suggestion in the notebook, like the sidebar's own turns.
  await page.notebook.selectCells(cellsAfterMagic - 1);
  await entry.locator('button.jp-DataAgent-insert').click();
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);
  await expect(suggestion.locator('.jp-InputArea')).toContainText('groupby');
  expect(await notebookCells(page)).toHaveLength(cellsAfterMagic + 1);

  // Inserted, it is one of this notebook's own turns: stored in the
  // notebook and shown once, as a suggested exchange.
  const own = panel(page).locator('.jp-DataAgent-exchange', {
    hasText: INTENT
  });
  await expect(own).toHaveCount(1);
  await expect(
    own.locator('.jp-DataAgent-chip', { hasText: 'suggested' })
  ).toBeVisible();
  const stored = (await notebookAgentMetadata(page)).turns as any[];
  expect(stored.map(t => [t.intent, t.status])).toEqual([[INTENT, 'pending']]);
});
