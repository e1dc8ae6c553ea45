/**
 * Real-time collaboration (jupyter-collaboration): two browser contexts, two
 * users' views of one notebook on a JupyterLab with RTC on (the second server
 * of playwright.config.js). A suggestion one client asked for appears once,
 * in both, and neither runs it before it is accepted; either client's Accept
 * or Reject is seen by both; undo (the extension's command, and the
 * notebook's own `z`) takes a decision back for both; an edit of a cell (a
 * diff over it) is shown to both and either can decide it; the candidate
 * either client cycles to is the one both show and decide; each decision
 * reaches the server's decisions store once, from the client that made it.
 * The real server, kernel and strategies; the model is tests/openai_server/
 * (the last test scripts client A's turns instead).
 */
import {
  IJupyterLabPageFixture,
  expect,
  galata,
  test
} from '@jupyterlab/galata';
import { Browser, Page } from '@playwright/test';

import {
  CANDIDATES,
  DF_CODE,
  MockServer,
  ask,
  execute,
  finishEvents,
  notebookAgentMetadata,
  notebookCells,
  notebookJson,
  openPanel,
  screenshotPath
} from './helpers';

const RTC_URL = `http://localhost:${Number(process.env.JDA_UI_RTC_PORT || 8889)}`;
const FIRST = 'What is the mean delay per airline?';
const SECOND = 'How many flights are in the table?';
const BROKEN = 'df["nope"].mean()';
const EDITED = 'df.groupby("airline")["delay"].median()';

test.use({ baseURL: RTC_URL });

/** The pending suggestion cells of the notebook shown. */
function suggestions(page: Page) {
  return page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-suggestion'
  );
}

/** The cells an edit suggestion is shown over, as a diff. */
function replacing(page: Page) {
  return page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-replacing'
  );
}

function bar(page: Page) {
  return suggestions(page).locator('.jp-DataAgent-suggestionBar');
}

async function sources(page: Page): Promise<string[]> {
  return (await notebookCells(page)).map(c =>
    Array.isArray(c.source) ? c.source.join('') : c.source
  );
}

async function turnStatuses(page: Page): Promise<[string, string][]> {
  const stored = await notebookAgentMetadata(page);
  return (stored?.turns ?? []).map((t: any) => [t.intent, t.status]);
}

interface IPosted {
  intent: string;
  decision: string;
  /** The client that sent it. */
  client: string;
  /** The candidate decided on: its index and its code as it came. */
  candidate: number;
  code: string;
}

/** The decisions the clients post to the server's store (POST decisions), in the order sent. */
function postedDecisions(clients: Record<string, Page>): IPosted[] {
  const posted: IPosted[] = [];
  for (const [client, page] of Object.entries(clients)) {
    page.on('request', request => {
      if (
        request.method() === 'POST' &&
        new URL(request.url()).pathname.endsWith(
          '/jupyter-data-agent/decisions'
        )
      ) {
        const body = request.postDataJSON();
        posted.push({
          intent: body.intent,
          decision: body.decision,
          client,
          candidate: body.candidate,
          code: body.code
        });
      }
    });
  }
  return posted;
}

/** [intent, decision, client] of each decision posted. */
function who(posted: IPosted[]): [string, string, string][] {
  return posted.map(p => [p.intent, p.decision, p.client]);
}

/** The collaborative notebook model: RTC is really on for this server. */
async function isCollaborative(page: Page): Promise<boolean> {
  return page.evaluate(() => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    return widget.context.model.collaborative === true;
  });
}

/**
 * Client A's notebook `name` with these code cells, each run in the real
 * kernel. Uploaded rather than created (no rename), and never saved by hand:
 * the collaboration server keeps the shared document and writes the file.
 */
async function sharedNotebook(
  page: IJupyterLabPageFixture,
  tmpPath: string,
  name: string,
  sources: string[]
): Promise<void> {
  await page.contents.uploadContent(
    notebookJson(
      sources.map((source, i) => ({
        cell_type: 'code',
        execution_count: null,
        id: `cell-${i}`,
        metadata: {},
        outputs: [],
        source
      }))
    ),
    'text',
    `${tmpPath}/${name}`
  );
  await page.filebrowser.refresh();
  expect(await page.notebook.open(name)).toBe(true);
  for (let i = 0; i < sources.length; i++) {
    await page.notebook.runCell(i, true);
  }
  await expect(
    page
      .locator(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output table'
      )
      .first()
  ).toBeVisible();
}

/** A second user: another browser context, on the notebook `name`. */
async function secondClient(
  browser: Browser,
  tmpPath: string,
  waitForApplication: any,
  name: string
): Promise<IJupyterLabPageFixture> {
  const { page } = await galata.newPage({
    baseURL: RTC_URL,
    browser,
    waitForApplication,
    tmpPath
  });
  const peer = page as IJupyterLabPageFixture;
  await peer.notebook.open(name);
  // The kernel's outputs came along with the shared notebook.
  await expect(
    peer.locator('.jp-NotebookPanel .jp-OutputArea-output').first()
  ).toBeVisible({ timeout: 60_000 });
  return peer;
}

test('two clients: one suggestion, either decides, both see it, undo', async ({
  page,
  browser,
  tmpPath,
  waitForApplication
}) => {
  const name = 'together.ipynb';
  await sharedNotebook(page, tmpPath, name, [DF_CODE]);
  expect(await isCollaborative(page)).toBe(true);
  const peer = await secondClient(browser, tmpPath, waitForApplication, name);
  expect(await isCollaborative(peer)).toBe(true);
  const posted = postedDecisions({ A: page, B: peer });

  // Client A asks; the suggestion appears once, in both notebooks.
  await openPanel(page);
  await ask(page, FIRST);
  await expect(suggestions(page)).toHaveCount(1, { timeout: 90_000 });
  await expect(suggestions(peer)).toHaveCount(1, { timeout: 30_000 });
  expect(await sources(page)).toHaveLength(2);
  expect(await sources(peer)).toEqual(await sources(page));
  // The other client gets the suggestion's bar too: it can decide.
  await expect(bar(peer)).toContainText('Suggested by Data Agent');
  await expect(bar(peer)).toHaveCount(1);
  await page.screenshot({ path: screenshotPath('rtc-suggestion-a.png') });
  await peer.screenshot({ path: screenshotPath('rtc-suggestion-b.png') });
  // Nobody runs it before it is accepted: B's Run All skips it (with
  // jupyter-collaboration's own cell executor in charge, it ran).
  await execute(peer, 'notebook:run-all-cells');
  await expect(peer.getByText('suggestion was not run').first()).toBeVisible();
  expect((await notebookCells(page))[1].outputs).toEqual([]);
  expect((await notebookCells(peer))[1].outputs).toEqual([]);

  // Client B accepts: both see an ordinary cell, and the turn is accepted.
  await bar(peer).locator('button.jp-DataAgent-accept').click();
  await expect(suggestions(peer)).toHaveCount(0);
  await expect(suggestions(page)).toHaveCount(0, { timeout: 30_000 });
  await expect
    .poll(async () => (await sources(page))[1] ?? '')
    .toContain('groupby("airline")');
  expect(await sources(peer)).toEqual(await sources(page));
  await expect.poll(() => turnStatuses(page)).toEqual([[FIRST, 'accepted']]);

  // B's undo (the extension's command) takes its Accept back, for both.
  await execute(peer, 'jupyter-data-agent:undo');
  await expect(suggestions(peer)).toHaveCount(1);
  await expect(suggestions(page)).toHaveCount(1, { timeout: 30_000 });
  await expect.poll(() => turnStatuses(page)).toEqual([[FIRST, 'pending']]);

  // A accepts it now, from its own bar...
  await bar(page).locator('button.jp-DataAgent-accept').click();
  await expect(suggestions(page)).toHaveCount(0);
  await expect(suggestions(peer)).toHaveCount(0, { timeout: 30_000 });
  await expect.poll(() => turnStatuses(peer)).toEqual([[FIRST, 'accepted']]);
  // ...and takes it back with the notebook's own undo (z): one step, the
  // suggestion is pending again for both.
  await page.keyboard.press('Escape');
  await page.keyboard.press('z');
  await expect(suggestions(page)).toHaveCount(1);
  await expect(suggestions(peer)).toHaveCount(1, { timeout: 30_000 });
  await expect.poll(() => turnStatuses(peer)).toEqual([[FIRST, 'pending']]);
  expect(await sources(page)).toHaveLength(2);

  // B accepts for good.
  await bar(peer).locator('button.jp-DataAgent-accept').click();
  await expect(suggestions(page)).toHaveCount(0, { timeout: 30_000 });
  const accepted = await sources(peer);
  expect(accepted).toHaveLength(2);
  await expect.poll(() => sources(page)).toEqual(accepted);

  // A edits the accepted cell: the turn is "edited" for both.
  await page.notebook.setCell(1, 'code', EDITED);
  await expect
    .poll(async () => (await notebookAgentMetadata(peer))?.turns?.[0])
    .toMatchObject({ status: 'edited', code: EDITED });
  const edited = await sources(page);
  await expect.poll(() => sources(peer)).toEqual(edited);

  // B asks the next question; A rejects it: both are back to the two cells.
  await peer.notebook.selectCells(1);
  await openPanel(peer);
  await ask(peer, SECOND);
  await expect(suggestions(peer)).toHaveCount(1, { timeout: 90_000 });
  await expect(suggestions(page)).toHaveCount(1, { timeout: 30_000 });
  expect(await sources(page)).toHaveLength(3);
  await bar(page).locator('button.jp-DataAgent-reject').click();
  await expect(suggestions(page)).toHaveCount(0);
  await expect(suggestions(peer)).toHaveCount(0, { timeout: 30_000 });
  await expect.poll(() => sources(peer)).toEqual(edited);
  expect(await sources(page)).toEqual(edited);

  // A's undo puts the rejected suggestion back, in place, for both; B
  // rejects it with the keyboard command.
  await execute(page, 'jupyter-data-agent:undo');
  await expect(suggestions(page)).toHaveCount(1);
  await expect(suggestions(peer)).toHaveCount(1, { timeout: 30_000 });
  expect((await sources(peer))[2]).toContain('len(df)');
  await execute(peer, 'jupyter-data-agent:reject');
  await expect(suggestions(peer)).toHaveCount(0);
  await expect(suggestions(page)).toHaveCount(0, { timeout: 30_000 });
  await expect.poll(() => sources(page)).toEqual(edited);
  await expect
    .poll(() => turnStatuses(page))
    .toEqual([
      [FIRST, 'edited'],
      [SECOND, 'rejected']
    ]);
  expect(await turnStatuses(peer)).toEqual(await turnStatuses(page));

  // Each decision went to the server's store once, from the client that
  // made it, not once more from the client that saw it happen. (Going back
  // to pending posts nothing; a decision made again is posted again.)
  await expect
    .poll(() => posted.length, { timeout: 10_000 })
    .toBeGreaterThanOrEqual(6);
  expect(who(posted)).toEqual([
    [FIRST, 'accepted', 'B'],
    [FIRST, 'accepted', 'A'],
    [FIRST, 'accepted', 'B'],
    [FIRST, 'edited', 'A'],
    [SECOND, 'rejected', 'A'],
    [SECOND, 'rejected', 'B']
  ]);
  await peer.context().close();
});

test('two clients: an edit shown as a diff to both, decided by the other', async ({
  page,
  browser,
  tmpPath,
  waitForApplication
}) => {
  const name = 'fix-together.ipynb';
  await sharedNotebook(page, tmpPath, name, [DF_CODE, BROKEN]);
  await expect(
    (await page.notebook.getCellLocator(1))!.locator(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    )
  ).toContainText('KeyError');
  const peer = await secondClient(browser, tmpPath, waitForApplication, name);
  await expect(
    peer.locator(
      '.jp-NotebookPanel .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    )
  ).toContainText('KeyError');
  const before = await notebookCells(page);
  const posted = postedDecisions({ A: page, B: peer });

  // A asks for a fix from the cell's context menu: one diff over that cell,
  // in both notebooks; the cell itself is unchanged.
  await openPanel(page);
  await (await page.notebook.getCellLocator(1))!.click({ button: 'right' });
  await page
    .locator('.lm-Menu')
    .getByText('Fix the error in this cell')
    .click();
  for (const client of [page, peer]) {
    await expect(replacing(client)).toHaveCount(1, { timeout: 90_000 });
    await expect(client.locator('.jp-DataAgent-cellDiff')).toHaveCount(1);
    await expect(
      replacing(client).locator('.jp-DataAgent-cellDiff .cm-deletedChunk')
    ).toContainText('nope');
    await expect(
      replacing(client).locator('.jp-DataAgent-cellDiff .cm-changedLine').last()
    ).toContainText('df["delay"].mean()');
    await expect(
      replacing(client).locator('.jp-DataAgent-suggestionLabel')
    ).toHaveText('Suggested edit of this cell');
    expect(await sources(client)).toEqual([DF_CODE, BROKEN]);
  }
  await peer.screenshot({ path: screenshotPath('rtc-celldiff-b.png') });

  // B accepts: the same cell holds the fix, for both; nothing was added.
  await replacing(peer).locator('button.jp-DataAgent-accept').click();
  for (const client of [peer, page]) {
    await expect(replacing(client)).toHaveCount(0, { timeout: 30_000 });
    await expect(client.locator('.jp-DataAgent-cellDiff')).toHaveCount(0);
    await expect
      .poll(async () => (await sources(client))[1])
      .toContain('df["delay"].mean()');
    const cells = await notebookCells(client);
    expect(cells).toHaveLength(2);
    expect(cells[1].id).toBe(before[1].id);
  }
  await expect
    .poll(async () => (await notebookAgentMetadata(page))?.turns?.[0])
    .toMatchObject({ status: 'accepted', edits_cell: before[1].id });

  // B's notebook undo (z): one step back to the original source, and the
  // diff is back over the cell in both.
  await peer.keyboard.press('Escape');
  await peer.keyboard.press('z');
  for (const client of [peer, page]) {
    await expect
      .poll(async () => (await sources(client))[1], { timeout: 30_000 })
      .toBe(BROKEN);
    await expect(replacing(client)).toHaveCount(1, { timeout: 30_000 });
  }
  await expect
    .poll(async () => (await notebookAgentMetadata(peer))?.turns?.[0]?.status)
    .toBe('pending');

  // A rejects it: the cell is as it was before the request, for both.
  await replacing(page).locator('button.jp-DataAgent-reject').click();
  for (const client of [page, peer]) {
    await expect(replacing(client)).toHaveCount(0, { timeout: 30_000 });
    await expect(client.locator('.jp-DataAgent-cellDiff')).toHaveCount(0);
  }
  await expect.poll(() => notebookCells(peer)).toEqual(before);
  expect(await notebookCells(page)).toEqual(before);
  await expect
    .poll(async () => (await notebookAgentMetadata(peer))?.turns?.[0]?.status)
    .toBe('rejected');
  await expect.poll(() => posted.length).toBeGreaterThanOrEqual(2);
  expect(who(posted)).toEqual([
    ['Fix the error in cell 2', 'accepted', 'B'],
    ['Fix the error in cell 2', 'rejected', 'A']
  ]);
  await peer.context().close();
});

test('two clients: the candidate either one shows is the one both see and decide', async ({
  page,
  browser,
  tmpPath,
  waitForApplication
}) => {
  // A's turns are scripted (three candidates each, MockServer); the
  // notebook, the collaboration and both clients' decisions are real.
  const server = new MockServer();
  await server.install(page);
  const name = 'cycle-together.ipynb';
  await sharedNotebook(page, tmpPath, name, [DF_CODE, BROKEN]);
  const peer = await secondClient(browser, tmpPath, waitForApplication, name);
  const posted = postedDecisions({ A: page, B: peer });
  const fixes = ['mean', 'median', 'max'].map((f, i) => ({
    ...CANDIDATES[0],
    code: `df["delay"].${f}()`,
    steps: [],
    explanation: `Fix ${i + 1}`
  }));
  const count = (client: Page) =>
    client.locator(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-DataAgent-suggestionCount'
    );
  const shownFix = (client: Page) =>
    replacing(client).locator('.jp-DataAgent-cellDiff .cm-changedLine').last();

  // An edit with three candidates: both show the first, as a diff.
  await openPanel(page);
  await (await page.notebook.getCellLocator(1))!.click({ button: 'right' });
  await page
    .locator('.lm-Menu')
    .getByText('Fix the error in this cell')
    .click();
  await expect.poll(() => server.bodies.length).toBe(1);
  await server.send(
    'job1',
    finishEvents('job1', 1, fixes, { turnId: 'turn-fix-rtc' })
  );
  for (const client of [page, peer]) {
    await expect(replacing(client)).toHaveCount(1, { timeout: 30_000 });
    await expect(count(client)).toHaveText('1 / 3');
    await expect(shownFix(client)).toContainText('mean()');
  }

  // A shows the next one, then B the next and back: each time both toolbars
  // and both diffs show the same candidate; the cell itself is untouched.
  const step = async (client: Page, action: string, shown: string) => {
    await replacing(client).locator(`button.jp-DataAgent-${action}`).click();
    for (const c of [page, peer]) {
      await expect(count(c)).toHaveText(shown, { timeout: 30_000 });
    }
  };
  await step(page, 'next', '2 / 3');
  await expect(shownFix(peer)).toContainText('median()');
  await step(peer, 'next', '3 / 3');
  await expect(shownFix(page)).toContainText('max()');
  await step(peer, 'previous', '2 / 3');
  await expect(shownFix(page)).toContainText('median()');
  await expect(shownFix(peer)).toContainText('median()');
  expect(await sources(page)).toEqual([DF_CODE, BROKEN]);

  // B accepts: the cell holds the candidate both were shown.
  await replacing(peer).locator('button.jp-DataAgent-accept').click();
  for (const client of [peer, page]) {
    await expect(replacing(client)).toHaveCount(0, { timeout: 30_000 });
    await expect
      .poll(() => sources(client))
      .toEqual([DF_CODE, 'df["delay"].median()']);
  }

  // New cells with three candidates: B shows the next one, A accepts it.
  await page.notebook.selectCells(1);
  await ask(page, 'What is the mean delay per airline?');
  await expect.poll(() => server.bodies.length).toBe(2);
  await server.send(
    'job2',
    finishEvents('job2', 1, CANDIDATES, { turnId: 'turn-new-rtc' })
  );
  for (const client of [page, peer]) {
    await expect(suggestions(client)).toHaveCount(1, { timeout: 30_000 });
    await expect(count(client)).toHaveText('1 / 3');
  }
  await bar(peer).locator('button.jp-DataAgent-next').click();
  for (const client of [peer, page]) {
    await expect(count(client)).toHaveText('2 / 3', { timeout: 30_000 });
    await expect
      .poll(async () => (await sources(client))[2])
      .toBe(CANDIDATES[1].code);
  }
  await bar(page).locator('button.jp-DataAgent-accept').click();
  for (const client of [page, peer]) {
    await expect(suggestions(client)).toHaveCount(0, { timeout: 30_000 });
  }
  expect(await sources(peer)).toEqual([
    DF_CODE,
    'df["delay"].median()',
    CANDIDATES[1].code
  ]);

  // Each decision names the candidate decided on, whoever chose it.
  await expect.poll(() => posted.length).toBeGreaterThanOrEqual(2);
  expect(posted).toEqual([
    {
      intent: 'Fix the error in cell 2',
      decision: 'accepted',
      client: 'B',
      candidate: 1,
      code: 'df["delay"].median()'
    },
    {
      intent: 'What is the mean delay per airline?',
      decision: 'accepted',
      client: 'A',
      candidate: 1,
      code: CANDIDATES[1].code
    }
  ]);
  await peer.context().close();
});
