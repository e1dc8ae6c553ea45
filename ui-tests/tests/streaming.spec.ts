/**
 * Streamed tokens against the real server: the model (tests/openai_server/,
 * a reply paced at 0.2 s per token by its rule in
 * ui-tests/fixtures/replies.json) writes the candidate while the sidebar
 * shows it growing, highlighted, with the elapsed time; the executed
 * candidate then replaces it.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  ask,
  notebookWithDf,
  openPanel,
  panel,
  screenshotPath
} from './helpers';

const SLOW = 'How many late flights per airline?';

test('the candidate appears as the model writes it, then the executed one replaces it', async ({
  page
}) => {
  await notebookWithDf(page, 'streaming.ipynb');
  await openPanel(page);
  await ask(page, SLOW);

  const streaming = panel(page).locator('.jp-DataAgent-streaming');
  await expect(streaming).toContainText('Step 1', { timeout: 60_000 });
  // Rendered as highlighted code, not raw text.
  await expect(streaming.locator('pre').first()).toBeVisible();
  await expect(panel(page).locator('.jp-DataAgent-elapsed')).toBeVisible();
  const early = (await streaming.innerText()).length;
  await expect
    .poll(async () => (await streaming.innerText()).length, { timeout: 20_000 })
    .toBeGreaterThan(early + 20);
  await expect(streaming).not.toContainText('to_frame');
  await page.screenshot({ path: screenshotPath('streaming-real.png') });

  // Done: the written text gives way to the executed candidate and its suggestion.
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1, { timeout: 60_000 });
  await expect(streaming).toHaveCount(0);
  await expect(suggestion.locator('.jp-InputArea')).toContainText('to_frame');
  const exchange = panel(page).locator('.jp-DataAgent-exchange').last();
  await expect(exchange.locator('.jp-DataAgent-output')).toContainText(
    'late flights'
  );
  await page.screenshot({ path: screenshotPath('streaming-real-done.png') });
});
