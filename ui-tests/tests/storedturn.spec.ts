/**
 * A turn whose suggestion is still pending when the notebook is reloaded
 * (issue 40, m5): the panel's stored view keeps Accept and Reject, and the
 * chosen candidate's explained steps stay a numbered list.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  CANDIDATES,
  DF_CODE,
  MockServer,
  ask,
  finishEvents,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen
} from './helpers';

test('a pending turn read back after a reload keeps its buttons and its steps', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'stored-pending.ipynb');
  await openPanel(page);
  await ask(page, 'What is the mean delay per airline?');
  await expect.poll(() => server.bodies.length).toBe(1);
  await server.send(
    'job1',
    finishEvents('job1', 1, CANDIDATES.slice(0, 1), {
      turnId: 'turn-pending'
    })
  );
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);

  await page.notebook.save();
  await reloadAndReopen(page, 'stored-pending.ipynb');
  await openPanel(page);
  await expect(suggestion).toHaveCount(1);
  const turn = panel(page).locator('.jp-DataAgent-exchange');
  await expect(turn).toHaveCount(1);
  // Its two explained steps, listed as before the reload.
  await expect(turn.locator('.jp-DataAgent-steps li')).toHaveText([
    CANDIDATES[0].steps[0].explanation,
    CANDIDATES[0].steps[1].explanation
  ]);
  // Reject from the panel, as before the reload: the notebook as it was.
  await turn.locator('.jp-DataAgent-panelReject').click();
  await expect(suggestion).toHaveCount(0);
  await expect
    .poll(async () => (await notebookCells(page)).map(c => c.source))
    .toEqual([DF_CODE]);
  await expect(
    turn.locator('.jp-DataAgent-chip.jp-mod-rejected')
  ).toBeVisible();
  await expect(turn.locator('.jp-DataAgent-panelAccept')).toHaveCount(0);
});
