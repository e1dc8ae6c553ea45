/**
 * What accepting will change, before Accept (issue 40, item 6): a candidate
 * carries the namespace diff its kernel copy computed, and the suggestion
 * bar and the sidebar say it in a line. No mocked routes: the extension's
 * server, its kernel copies and the OpenAI-protocol test server
 * (fixtures/replies.json) answer.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  ask,
  kernelRepr,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen,
  screenshotPath
} from './helpers';

const QUESTION = 'Keep the late flights as clean and trim df';
// df (helpers.DF_CODE): 5 flights, delays 10, 25, 30, 5, 15.
const LINE =
  'If run: adds clean (3 × 2); changes df: 1 row fewer; writes late.csv in scratch';

test.beforeEach(async ({ page }) => {
  const probe = await page.request.post('/jupyter-data-agent/turns', {
    data: {}
  });
  test.skip(
    probe.status() === 404,
    'the server has no POST /jupyter-data-agent/turns yet'
  );
});

test('the bar and the sidebar say what accepting will change; the kernel has none of it before Accept', async ({
  page
}) => {
  await notebookWithDf(page, 'nsdiff.ipynb');
  await openPanel(page);
  await ask(page, QUESTION);
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1, { timeout: 90_000 });
  const bar = suggestion.locator('.jp-DataAgent-suggestionBar');
  const barLine = bar.locator('.jp-DataAgent-changes');
  await expect(barLine).toHaveText(LINE, { timeout: 30_000 });
  await expect(barLine.locator('code')).toHaveText(['clean', 'df', 'late.csv']);
  const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
  const sideLine = exchange.locator(
    '.jp-DataAgent-candidate .jp-DataAgent-changes'
  );
  await expect(sideLine).toHaveText(LINE);
  await page.screenshot({ path: screenshotPath('nsdiff-before-accept.png') });

  // Before Accept the user's kernel holds none of it: df as it was, no clean, no file.
  expect(await kernelRepr(page, 'len(df)')).toBe('5');
  expect(await kernelRepr(page, 'clean')).toBe('NameError');
  expect(
    await kernelRepr(page, '__import__("os").path.exists("late.csv")')
  ).toBe('False');

  // Accept keeps the code (not run): the bar goes, the kernel is still as it was.
  await bar.locator('[data-action="accept"]').click();
  await expect(bar).toHaveCount(0);
  expect(await kernelRepr(page, 'len(df)')).toBe('5');

  // Stored with the turn: after a reload the sidebar says it again.
  await page.notebook.save();
  await reloadAndReopen(page, 'nsdiff.ipynb');
  await openPanel(page);
  const stored = panel(page).locator('.jp-DataAgent-exchange.jp-mod-stored');
  await expect(stored).toHaveCount(1);
  await expect(stored.locator('.jp-DataAgent-changes')).toHaveText(LINE);
});
