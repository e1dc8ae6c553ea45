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
  // Two models offered, one priced (ui-tests/jupyter_server_test_config.py): every
  // model's price is listed, "none" for the other, not "none configured" (issue 40, M1).
  await expect(row('Models offered')).toContainText('test-model, big-model');
  await expect(row('Price')).toContainText(
    'big-model: $5 input / $15 output per million tokens'
  );
  await expect(row('Price')).toContainText('test-model: none (no cost shown)');
  await expect(row('Price')).not.toContainText('none configured');
  await page.screenshot({ path: screenshotPath('config-dialog.png') });
  await dialog.locator('button.jp-mod-accept').click();
  await expect(dialog).toHaveCount(0);
});
