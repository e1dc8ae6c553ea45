import { expect, test } from '@jupyterlab/galata';

import { PANEL_ID, openPanel, screenshotPath } from './helpers';

test('the extension is activated and its sidebar panel opens', async ({
  page
}) => {
  const activated = await page.evaluate(() =>
    (window as any).jupyterapp.isPluginActivated('jupyter-data-agent:plugin')
  );
  expect(activated).toBe(true);

  await page.notebook.createNew('smoke.ipynb');
  await openPanel(page);
  const panel = page.locator(`#${PANEL_ID}`);
  await expect(panel.locator('.jp-DataAgent-input')).toBeVisible();
  await expect(panel.locator('.jp-DataAgent-notebook')).toHaveText(
    'smoke.ipynb'
  );
  const chooser = panel.locator('.jp-DataAgent-strategy select');
  await expect(chooser).toHaveValue('direct');
  // The chooser comes from the server's catalog (GET config): the Agent
  // (react) is offered; Explain is a cell command, not a way to write code.
  await expect(chooser.locator('option[value="react"]')).toHaveText('Agent');
  await expect(chooser.locator('option[value="explain"]')).toHaveCount(0);
  await page.screenshot({ path: screenshotPath('smoke-panel.png') });
});

test('the commands are in the palette and the cell context menu', async ({
  page
}) => {
  await page.notebook.createNew('menus.ipynb');
  await page.notebook.setCell(0, 'code', '1 + 1');
  await page.notebook
    .getCellLocator(0)
    .then(cell => cell!.click({ button: 'right' }));
  const menu = page.locator('.lm-Menu');
  await expect(menu.getByText('Ask about this cell')).toBeVisible();
  await expect(menu.getByText('Explain this cell')).toBeVisible();
  await expect(menu.getByText('Fix the error in this cell')).toBeVisible();
  await page.keyboard.press('Escape');
});
