/**
 * Inside Jupyter AI (issue 38): `@DataAgent` in Jupyter AI's own chat, on a
 * JupyterLab from the venv where Jupyter AI 3.2 is installed beside this
 * package (`.venv-jai`, made by .ci/run; the last server of
 * playwright.config.js). The message becomes a turn on the open notebook;
 * the reply in the chat shows the answer, the agreement and the code, and the
 * cell waits in the notebook as a suggestion until Accept. The real server,
 * kernel, chat and persona manager; the model is tests/openai_server/.
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import {
  DF_CODE,
  notebookCells,
  notebookJson,
  openPanel,
  panel,
  screenshotPath
} from './helpers';

const JAI_URL = `http://localhost:${Number(process.env.JDA_UI_JAI_PORT || 8890)}`;
const JAI_VENV = path.resolve(
  __dirname,
  '..',
  '..',
  '.venv-jai',
  'bin',
  'jupyter'
);
const QUESTION = 'How many flights are in the table?';

test.use({ baseURL: JAI_URL });
test.skip(
  !fs.existsSync(JAI_VENV),
  'no .venv-jai with Jupyter AI (.ci/run makes it)'
);

test('@DataAgent in Jupyter AI chat answers and suggests the cell in the notebook', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(240_000);
  const name = 'jupyterai.ipynb';
  await page.contents.uploadContent(
    notebookJson(DF_CODE),
    'text',
    `${tmpPath}/${name}`
  );
  await page.filebrowser.refresh();
  expect(await page.notebook.open(name)).toBe(true);
  await page.notebook.runCell(0, true);
  await page.notebook.save(); // the persona reads the notebook as saved

  // Jupyter AI's chat in the side panel, the notebook still in the main area.
  await page.evaluate(async dir => {
    await (window as any).jupyterapp.commands.execute(
      'jupyterlab-chat:createAndOpen',
      {
        name: 'ask-data-agent',
        path: dir,
        inSidePanel: true
      }
    );
  }, tmpPath);
  const chat = page.locator('.jp-chat-input-container').last();
  await expect(chat.locator('.jp-jai-personaControls-persona')).toHaveText(
    'DataAgent',
    {
      timeout: 60_000
    }
  );
  await chat
    .locator('textarea:not([aria-hidden="true"])')
    .fill(`@DataAgent /vote ${QUESTION} @file:${tmpPath}/${name}`);
  await chat.locator('.jp-chat-send-button').click();

  // One reply that shows the progress, then the answer, the agreement and the code.
  const reply = page.locator('.jp-chat-message', {
    hasText: 'as a suggested cell'
  });
  await expect(reply).toBeVisible({ timeout: 180_000 });
  await expect(reply).toContainText('candidates agree on this answer');
  await expect(reply).toContainText('len(df)');
  await expect(reply).toContainText('Nothing ran in your kernel');

  // The cell waits in the notebook as a suggestion from the persona, until Accept.
  const suggestion = page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1, { timeout: 30_000 });
  await expect(suggestion.locator('.jp-DataAgent-suggestionLabel')).toHaveText(
    'Suggested by Jupyter AI: DataAgent'
  );
  const shot = screenshotPath('jupyterai-chat.png');
  await page.screenshot({ path: shot });
  console.log(`@DataAgent exchange: ${shot}`);
  // This package's own sidebar works beside Jupyter AI's: it lists the proposal too.
  await openPanel(page);
  await expect(
    panel(page).locator('.jp-DataAgent-agentActivity')
  ).toContainText('Jupyter AI: DataAgent');
  await suggestion
    .locator('.jp-DataAgent-suggestionBar .jp-DataAgent-accept')
    .click();
  await expect(suggestion).toHaveCount(0);
  const cells = await notebookCells(page);
  expect(cells.map(c => c.source)).toEqual([
    DF_CODE,
    '# Step 1: Count the rows of the flights table\nlen(df)'
  ]);
});
