/**
 * Cell edits as diffs, against the real server and the scripted model
 * (ui-tests/fixtures/replies.json): "Fix the error in this cell" on a
 * raising cell shows the fix as a diff over that cell (CodeMirror's merge
 * view), Accept replaces the cell's source in place (no cell added) and
 * clears its traceback, one undo restores the original exactly; Reject
 * leaves the cell untouched; a sidebar request about a pinned cell that
 * edits it ("Rewrite this cell …") is a diff too.
 */
import { expect, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';

import {
  DF_CODE,
  ask,
  execute,
  notebookAgentMetadata,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen,
  screenshotPath,
  loggedRequests,
  useDarkTheme
} from './helpers';

const BROKEN = 'df["nope"].mean()';

/** A notebook whose second cell raised a KeyError in the real kernel. */
async function brokenNotebook(page: Page & any, name: string): Promise<void> {
  await notebookWithDf(page, name);
  await page.notebook.addCell('code', BROKEN);
  await page.notebook.runCell(1, true);
  await expect(
    (await page.notebook.getCellLocator(1))!.locator(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    )
  ).toContainText('KeyError');
}

async function fixCell(page: Page & any, index: number): Promise<void> {
  await (await page.notebook.getCellLocator(index))!.click({
    button: 'right'
  });
  await page
    .locator('.lm-Menu')
    .getByText('Fix the error in this cell')
    .click();
}

function target(page: Page) {
  return page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-replacing');
}

test('Fix shows a diff over the cell; Accept replaces it; undo restores it', async ({
  page
}) => {
  await brokenNotebook(page, 'celldiff-fix.ipynb');
  const before = await notebookCells(page);
  await openPanel(page);
  await fixCell(page, 1);

  // The diff appears on the broken cell itself: its source is unchanged.
  const cell = target(page);
  await expect(cell).toHaveCount(1, { timeout: 60 * 1000 });
  const diff = cell.locator('.jp-DataAgent-cellDiff');
  await expect(diff).toBeVisible();
  await expect(diff.locator('.cm-deletedChunk')).toContainText('nope');
  await expect(diff.locator('.cm-changedLine').last()).toContainText(
    'df["delay"].mean()'
  );
  await expect(cell.locator('.jp-DataAgent-suggestionLabel')).toHaveText(
    'Suggested edit of this cell'
  );
  await expect(panel(page).locator('.jp-DataAgent-editsCell')).toHaveText(
    'edits cell 2'
  );
  // The cell's own editor is hidden while the diff stands in for it.
  await expect(cell.locator('.jp-Cell-inputWrapper')).toBeHidden();
  let cells = await notebookCells(page);
  expect(cells.map(c => c.source)).toEqual([DF_CODE, BROKEN]);
  expect(cells[1].id).toBe(before[1].id);
  // The toolbar and the diff at the top of the notebook for the screenshot.
  await page.sidebar.close('left');
  await cell
    .locator('.jp-DataAgent-suggestionBar')
    .evaluate(node => node.scrollIntoView({ block: 'start' }));
  await page.screenshot({ path: screenshotPath('celldiff-fix.png') });

  // The prompt the model got carried the broken cell with its error.
  const requests = loggedRequests();
  const prompt = JSON.stringify(requests[requests.length - 1]);
  expect(prompt).toContain('KeyError');
  expect(prompt).toContain('nope');
  // An edit turn: the model is told its code replaces the cell (prompts/edit.py).
  expect(prompt).toContain('Rewrite the last cell above in full');

  // Accept: the same cell (same id) now holds the candidate; nothing added.
  await cell.locator('button.jp-DataAgent-accept').click();
  await expect(target(page)).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells).toHaveLength(2);
  expect(cells[1].id).toBe(before[1].id);
  expect(cells[1].source).toContain('df["delay"].mean()');
  expect(cells[1].source).not.toContain(BROKEN);
  // The KeyError's traceback came from the code replaced: it goes too.
  expect(cells[1].outputs).toEqual([]);
  const stored = await notebookAgentMetadata(page);
  const turn = stored.turns[stored.turns.length - 1];
  expect(turn).toMatchObject({
    intent: 'Fix the error in cell 2',
    edit_kind: 'fix',
    status: 'accepted',
    edits_cell: before[1].id,
    code: cells[1].source
  });
  expect(turn.candidates[0].trim()).toBe(cells[1].source);
  await expect(
    (await page.notebook.getCellLocator(1))!.locator('.jp-InputArea-editor')
  ).toContainText('df["delay"].mean()');
  await expect(
    panel(page).locator('.jp-DataAgent-chip.jp-mod-accepted')
  ).toBeVisible();
  await page.screenshot({ path: screenshotPath('celldiff-accepted.png') });

  // One undo (the extension's command) restores the original exactly, and
  // the suggestion is back on the cell.
  await execute(page, 'jupyter-data-agent:undo');
  await expect(target(page)).toHaveCount(1);
  cells = await notebookCells(page);
  expect(cells.map(c => c.source)).toEqual([DF_CODE, BROKEN]);
  expect(cells[1].outputs).toEqual(before[1].outputs);
  await expect
    .poll(async () => {
      const turns = (await notebookAgentMetadata(page)).turns;
      return turns[turns.length - 1].status;
    })
    .toBe('pending');

  // Accept again, then the notebook's own undo (z in command mode): one step
  // back to the original source too.
  await target(page).locator('button.jp-DataAgent-accept').click();
  await expect(target(page)).toHaveCount(0);
  expect((await notebookCells(page))[1].source).toContain('df["delay"].mean()');
  await page.keyboard.press('Escape');
  await page.keyboard.press('z');
  await expect
    .poll(async () => (await notebookCells(page))[1].source)
    .toBe(BROKEN);
  await expect(target(page)).toHaveCount(1);
  expect(await notebookCells(page)).toHaveLength(2);
});

test('a pending edit survives a reload; Reject leaves the cell as it was', async ({
  page
}) => {
  await brokenNotebook(page, 'celldiff-reject.ipynb');
  const before = await notebookCells(page);
  await openPanel(page);
  await fixCell(page, 1);

  const cell = target(page);
  await expect(cell).toHaveCount(1, { timeout: 60 * 1000 });
  await expect(cell.locator('.jp-DataAgent-cellDiff')).toBeVisible();

  // Saved and reopened, the suggestion is still a diff over the same cell.
  await page.notebook.save();
  await reloadAndReopen(page, 'celldiff-reject.ipynb');
  await expect(target(page)).toHaveCount(1);
  await expect(
    target(page).locator('.jp-DataAgent-cellDiff .cm-changedLine').last()
  ).toContainText('df["delay"].mean()');
  expect((await notebookCells(page))[1].source).toBe(BROKEN);

  // A second Fix of the same cell supersedes the first: still one diff.
  const turnsOf = async () =>
    ((await notebookAgentMetadata(page)).turns as any[]).map(t => t.status);
  await fixCell(page, 1);
  await expect
    .poll(turnsOf, { timeout: 60 * 1000 })
    .toEqual(['rejected', 'pending']);
  await expect(target(page)).toHaveCount(1);
  await expect(page.locator('.jp-DataAgent-cellDiff')).toHaveCount(1);
  expect((await notebookCells(page)).map(c => c.source)).toEqual([
    DF_CODE,
    BROKEN
  ]);

  await target(page).locator('button.jp-DataAgent-reject').click();
  await expect(target(page)).toHaveCount(0);
  await expect(page.locator('.jp-DataAgent-cellDiff')).toHaveCount(0);
  // Source, outputs (the error), metadata: all as before.
  expect(await notebookCells(page)).toEqual(before);
  const stored = await notebookAgentMetadata(page);
  expect(stored.turns).toHaveLength(2);
  for (const turn of stored.turns) {
    expect(turn).toMatchObject({
      status: 'rejected',
      edits_cell: before[1].id
    });
  }
  await expect(
    (await page.notebook.getCellLocator(1))!.locator('.jp-InputArea-editor')
  ).toBeVisible();
});

test('a sidebar request that rewrites the pinned cell is a diff', async ({
  page
}) => {
  await notebookWithDf(page, 'celldiff-pinned.ipynb');
  await page.notebook.addCell('code', 'df["delay"].mean()');
  await page.notebook.runCell(1, true);
  const before = await notebookCells(page);
  await (await page.notebook.getCellLocator(1))!.click({ button: 'right' });
  await page.locator('.lm-Menu').getByText('Ask about this cell').click();
  await openPanel(page);
  await expect(panel(page).locator('.jp-DataAgent-pinned')).toContainText(
    'cell 2'
  );
  await ask(page, 'Rewrite this cell to use the median');

  const cell = target(page);
  await expect(cell).toHaveCount(1, { timeout: 60 * 1000 });
  await expect(cell.locator('.cm-changedLine').last()).toContainText(
    'median()'
  );
  // The diff follows the theme (JupyterLab's variables), dark included.
  await useDarkTheme(page);
  await cell.screenshot({ path: screenshotPath('celldiff-dark.png') });
  await page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('apputils:change-theme', {
      theme: 'JupyterLab Light'
    })
  );
  await cell.locator('button.jp-DataAgent-acceptAndRun').click();
  await expect(target(page)).toHaveCount(0);
  const cells = await notebookCells(page);
  expect(cells).toHaveLength(2);
  expect(cells[1].id).toBe(before[1].id);
  expect(cells[1].source).toContain('df["delay"].median()');
  // Run in the real kernel: the median of 10, 25, 30, 5, 15.
  await expect(
    (await page.notebook.getCellLocator(1))!.locator('.jp-OutputArea-output')
  ).toContainText('15');

  // "Improve this cell" from the context menu is an edit too; one candidate,
  // so no cycling; Reject keeps the accepted rewrite.
  const rewritten = (await notebookCells(page))[1];
  await (await page.notebook.getCellLocator(1))!.click({ button: 'right' });
  await page.locator('.lm-Menu').getByText('Improve this cell').click();
  await expect(target(page)).toHaveCount(1, { timeout: 60 * 1000 });
  await expect(target(page).locator('.jp-DataAgent-cellDiff')).toContainText(
    'median_delay = round(df["delay"].median(), 1)'
  );
  await expect(target(page).locator('button.jp-DataAgent-next')).toBeHidden();
  await target(page).locator('button.jp-DataAgent-reject').click();
  await expect(target(page)).toHaveCount(0);
  expect((await notebookCells(page))[1]).toEqual(rewritten);
});
