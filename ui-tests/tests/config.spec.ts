/**
 * "Data Agent: Show Model Configuration", run from the command palette
 * against the real server: the dialog shows what `GET config` answers
 * (the model is tests/openai_server/, see playwright.config.js).
 */
import { expect, test } from '@jupyterlab/galata';

import { screenshotPath } from './helpers';

test('the model configuration dialog shows the server configuration', async ({
  page
}) => {
  await page.keyboard.press('Control+Shift+C');
  const palette = page.locator('#command-palette');
  await expect(palette).toBeVisible();
  await palette
    .locator('.lm-CommandPalette-input')
    .fill('Show Model Configuration');
  await palette
    .locator('.lm-CommandPalette-item', {
      hasText: 'Data Agent: Show Model Configuration'
    })
    .click();

  const dialog = page.locator('.jp-Dialog-content');
  await expect(dialog).toBeVisible();
  const table = dialog.locator('.jp-DataAgent-configTable');
  await expect(table).toBeVisible();
  const row = (label: string) =>
    table.locator('tr', { has: page.locator(`th:text-is("${label}")`) });
  await expect(row('Backend')).toContainText('openai');
  await expect(row('Model')).toContainText('test-model');
  await expect(row('Endpoint')).toContainText(
    `http://127.0.0.1:${process.env.JDA_UI_OPENAI_PORT || 8765}/v1`
  );
  // Whether a key is set, never the key itself.
  await expect(row('API key')).toContainText('set on the server');
  await expect(dialog).not.toContainText('test-key');
  await expect(row('Strategies')).toContainText('Direct');
  await expect(row('Strategies')).toContainText('Vote');
  // c.DataAgent.max_samples in ui-tests/jupyter_server_test_config.py.
  await expect(row('Limits')).toContainText('max samples: 12');
  // No c.DataAgent.prices in the test server's config: no cost is estimated.
  await expect(row('Price')).toContainText('none configured');
  await page.screenshot({ path: screenshotPath('config-dialog.png') });
  await dialog.locator('button.jp-mod-accept').click();
  await expect(dialog).toHaveCount(0);
});
