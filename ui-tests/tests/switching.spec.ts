/**
 * The sidebar follows the current notebook through any number of tab
 * switches and a reload, against the real server and kernels (the model is
 * tests/openai_server/). It once went blank: unmounting a notebook's
 * conversation detached Lumino widgets React had already removed, and the
 * "Widget is not attached" error unmounted the whole panel.
 */
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';

import {
  DF_CODE,
  activateNotebook,
  ask,
  notebookJson,
  openPanel,
  panel
} from './helpers';

const NOTEBOOKS: { name: string; intents: string[] }[] = [
  { name: 'switch-a.ipynb', intents: ['What is the mean delay per airline?'] },
  { name: 'switch-b.ipynb', intents: ['How many flights are in the table?'] },
  { name: 'switch-c.ipynb', intents: [] }
];

/** The panel shows the composer and exactly this notebook's conversation. */
async function expectPanelFor(
  page: IJupyterLabPageFixture,
  notebook: { name: string; intents: string[] }
): Promise<void> {
  const sidebar = panel(page);
  await expect(sidebar.locator('.jp-DataAgent-notebook')).toHaveText(
    notebook.name
  );
  await expect(sidebar.locator('.jp-DataAgent-input')).toBeVisible();
  await expect(sidebar.locator('.jp-DataAgent-send')).toBeVisible();
  const intents = sidebar.locator('.jp-DataAgent-intentText');
  await expect(intents).toHaveText(notebook.intents);
  if (!notebook.intents.length) {
    await expect(sidebar.locator('.jp-DataAgent-empty')).toBeVisible();
  } else {
    // The turn's code is rendered (a Lumino widget hosted in React).
    await expect(sidebar.locator('.jp-DataAgent-code').first()).toBeVisible();
  }
}

async function switchAround(
  page: IJupyterLabPageFixture,
  times: number
): Promise<void> {
  for (let i = 0; i < times; i++) {
    const notebook = NOTEBOOKS[i % NOTEBOOKS.length];
    await activateNotebook(page, notebook.name);
    await expectPanelFor(page, notebook);
  }
}

test('the panel survives switching notebooks, before and after a reload', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(300_000);
  const errors: string[] = [];
  page.on('pageerror', error => errors.push(error.message));
  page.on('console', message => {
    if (message.type() === 'error' && /not attached/i.test(message.text())) {
      errors.push(message.text());
    }
  });

  for (const notebook of NOTEBOOKS) {
    await page.contents.uploadContent(
      notebookJson(notebook.intents.length ? DF_CODE : ''),
      'text',
      `${tmpPath}/${notebook.name}`
    );
  }
  await page.filebrowser.refresh();
  await openPanel(page);
  for (const notebook of NOTEBOOKS) {
    expect(await page.notebook.open(notebook.name)).toBe(true);
    if (!notebook.intents.length) {
      continue;
    }
    await page.notebook.runCell(0, true);
    await expect(
      page.locator(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output table'
      )
    ).toBeVisible();
    for (const intent of notebook.intents) {
      await ask(page, intent);
      // Done: the candidate was placed in the notebook as a suggestion.
      await expect(
        page.locator(
          '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-suggestion'
        )
      ).toHaveCount(1, { timeout: 90_000 });
    }
    await page.notebook.save();
  }

  await switchAround(page, 10);
  expect(errors).toEqual([]);

  // After a reload every turn comes back from the notebooks' metadata.
  await page.reload({ waitForIsReady: false });
  await page.waitForSelector('#jupyterlab-splash', {
    state: 'detached',
    timeout: 120 * 1000
  });
  for (const notebook of NOTEBOOKS) {
    if (!(await page.notebook.isOpen(notebook.name))) {
      await page.notebook.open(notebook.name);
    }
  }
  await openPanel(page);
  await switchAround(page, 10);

  // Closing the current notebook leaves the panel to the next one.
  await activateNotebook(page, 'switch-b.ipynb');
  expect(await page.notebook.close()).toBe(true);
  await activateNotebook(page, NOTEBOOKS[0].name);
  await expectPanelFor(page, NOTEBOOKS[0]);
  await activateNotebook(page, NOTEBOOKS[2].name);
  await expectPanelFor(page, NOTEBOOKS[2]);
  expect(errors).toEqual([]);
});
