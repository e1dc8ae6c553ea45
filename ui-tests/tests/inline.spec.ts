/**
 * Inline completion in Chromium against the real server: typing in a cell
 * below a DataFrame shows ghost text from the Data Agent's provider, the
 * prompt the model received carried the kernel's schema of that frame
 * (read live from the kernel, not from the notebook text), and Tab accepts
 * the ghost text into the cell.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  notebookCells,
  notebookWithDf,
  screenshotPath,
  loggedRequests,
  promptOf
} from './helpers';

// The replies file answers a prompt with this line at the cursor.
const TYPED = 'by_carrier = df.groupby("';
const CURSOR = '<CURSOR>';

function inlineRequests(): any[] {
  return loggedRequests().filter(req => promptOf(req).includes(TYPED + CURSOR));
}

test('ghost text from the kernel schema appears as you type and Tab accepts it', async ({
  page
}) => {
  await notebookWithDf(page, 'inline.ipynb');
  const before = inlineRequests().length;
  await page.notebook.addCell('code', '');
  const cells = page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell'
  );
  await expect(cells).toHaveCount(2);
  await page.notebook.enterCellEditingMode(1);
  await page.keyboard.type(TYPED, { delay: 20 });

  const ghost = cells.nth(1).locator('.jp-GhostText');
  await expect(ghost).toBeVisible({ timeout: 30 * 1000 });
  await expect(ghost).toContainText('airline")["delay"].mean()');
  // Streamed in; the "uncover" animation reveals it over a moment.
  await expect(
    cells.nth(1).locator('.jp-GhostText-streamingIndicator')
  ).toHaveCount(0);
  await page.waitForTimeout(1500);
  await page.screenshot({ path: screenshotPath('inline-ghost.png') });

  // The model was shown the schema the kernel reported for df, with the typed line at the cursor.
  const requests = inlineRequests().slice(before);
  expect(requests.length).toBeGreaterThan(0);
  const prompt = promptOf(requests[requests.length - 1]);
  expect(prompt).toContain('# Columns in df with example values:');
  expect(prompt).toMatch(/airline \(AA\)/);
  expect(prompt).toContain(TYPED + CURSOR);
  expect(requests[requests.length - 1].body.max_tokens).toBeLessThanOrEqual(48);

  await page.keyboard.press('Tab');
  await expect(ghost).toHaveCount(0);
  const source = (await notebookCells(page))[1].source;
  expect(Array.isArray(source) ? source.join('') : source).toBe(
    'by_carrier = df.groupby("airline")["delay"].mean()'
  );
});
