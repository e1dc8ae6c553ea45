/**
 * Real-time collaboration (jupyter-collaboration): two browser contexts, two
 * users' views of one notebook on a JupyterLab with RTC on (the second server
 * of playwright.config.js). A suggestion one client asked for appears once,
 * in both; either client's Accept or Reject is seen by both; undo takes an
 * Accept back for both. The real server, kernel and strategies; the model is
 * tests/openai_server.py.
 */
import {
  IJupyterLabPageFixture,
  expect,
  galata,
  test
} from '@jupyterlab/galata';
import { Page } from '@playwright/test';

import {
  ask,
  execute,
  notebookAgentMetadata,
  notebookCells,
  notebookWithDf,
  openPanel,
  screenshotPath
} from './helpers';

const RTC_URL = `http://localhost:${Number(process.env.JDA_UI_RTC_PORT || 8889)}`;
const FIRST = 'What is the mean delay per airline?';
const SECOND = 'How many flights are in the table?';
const NAME = 'together.ipynb';

test.use({ baseURL: RTC_URL });

function suggestions(page: Page) {
  return page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-suggestion'
  );
}

async function sources(page: Page): Promise<string[]> {
  return (await notebookCells(page)).map(c =>
    Array.isArray(c.source) ? c.source.join('') : c.source
  );
}

test('two clients: one suggestion, either decides, both see it, undo', async ({
  page,
  browser,
  tmpPath,
  waitForApplication
}) => {
  // The collaborative notebook model: RTC is really on for this server. (No
  // explicit save: the server writes the shared document itself, and a save of
  // the page's own races it into a "File Changed" dialog.)
  await notebookWithDf(page, NAME);
  expect(
    await page.evaluate(() => {
      const widget = (window as any).jupyterapp.shell.currentWidget;
      return widget.context.model.collaborative === true;
    })
  ).toBe(true);

  // A second user: another browser context on the same notebook.
  const { page: other } = await galata.newPage({
    baseURL: RTC_URL,
    browser,
    waitForApplication,
    tmpPath
  });
  const peer = other as IJupyterLabPageFixture;
  await peer.notebook.open(NAME);
  await expect(
    peer.locator('.jp-NotebookPanel .jp-OutputArea-output table').first()
  ).toBeVisible({ timeout: 60_000 });

  // Client A asks; the suggestion appears once, in both notebooks.
  await openPanel(page);
  await ask(page, FIRST);
  await expect(suggestions(page)).toHaveCount(1, { timeout: 90_000 });
  await expect(suggestions(peer)).toHaveCount(1, { timeout: 30_000 });
  expect(await sources(page)).toHaveLength(2);
  expect(await sources(peer)).toEqual(await sources(page));
  // The other client gets the suggestion's bar too: it can decide.
  const peerBar = suggestions(peer).locator('.jp-DataAgent-suggestionBar');
  await expect(peerBar).toContainText('Suggested by Data Agent');
  // ...and its Run All leaves the pending suggestion alone too (with
  // jupyter-collaboration's own cell executor disabled: package.json).
  await execute(peer, 'notebook:run-all-cells');
  await expect(peer.getByText('suggestion was not run').first()).toBeVisible();
  expect((await notebookCells(page))[1].outputs).toEqual([]);
  await page.screenshot({ path: screenshotPath('rtc-suggestion-a.png') });
  await peer.screenshot({ path: screenshotPath('rtc-suggestion-b.png') });

  // Client B accepts: both see an ordinary cell, and the turn is accepted.
  await peerBar.locator('button.jp-DataAgent-accept').click();
  await expect(suggestions(peer)).toHaveCount(0);
  await expect(suggestions(page)).toHaveCount(0, { timeout: 30_000 });
  await expect
    .poll(async () => (await sources(page))[1] ?? '')
    .toContain('groupby("airline")');
  expect(await sources(peer)).toEqual(await sources(page));
  await expect
    .poll(async () => (await notebookAgentMetadata(page))?.turns?.[0]?.status)
    .toBe('accepted');

  // B's undo takes its Accept back: the suggestion is pending again, for both.
  await execute(peer, 'jupyter-data-agent:undo');
  await expect(suggestions(peer)).toHaveCount(1);
  await expect(suggestions(page)).toHaveCount(1, { timeout: 30_000 });
  await expect
    .poll(async () => (await notebookAgentMetadata(page))?.turns?.[0]?.status)
    .toBe('pending');
  // ...and A accepts it now, from its own bar.
  await suggestions(page)
    .locator('.jp-DataAgent-suggestionBar button.jp-DataAgent-accept')
    .click();
  await expect(suggestions(page)).toHaveCount(0);
  await expect(suggestions(peer)).toHaveCount(0, { timeout: 30_000 });
  const accepted = await sources(page);
  expect(accepted).toHaveLength(2);

  // B asks the next question; A rejects it: both are back to the two cells.
  await peer.notebook.selectCells(1);
  await openPanel(peer);
  await ask(peer, SECOND);
  await expect(suggestions(peer)).toHaveCount(1, { timeout: 90_000 });
  await expect(suggestions(page)).toHaveCount(1, { timeout: 30_000 });
  expect(await sources(page)).toHaveLength(3);
  await suggestions(page)
    .locator('.jp-DataAgent-suggestionBar button.jp-DataAgent-reject')
    .click();
  await expect(suggestions(page)).toHaveCount(0);
  await expect(suggestions(peer)).toHaveCount(0, { timeout: 30_000 });
  await expect.poll(() => sources(peer)).toEqual(accepted);
  expect(await sources(page)).toEqual(accepted);
  const stored = await notebookAgentMetadata(peer);
  expect(stored.turns.map((t: any) => [t.intent, t.status])).toEqual([
    [FIRST, 'accepted'],
    [SECOND, 'rejected']
  ]);
  await peer.context().close();
});
