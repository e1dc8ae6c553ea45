/**
 * A question longer than the server takes (MAX_INTENT_CHARS in
 * server/models.py) is refused in the composer, in words, before anything
 * is posted. JupyterLab's first-start news question (a toast at the bottom
 * right) does not cover Ask.
 */
import { expect, galata, test } from '@jupyterlab/galata';

import { openPanel, panel, screenshotPath } from './helpers';

test('a question over 20,000 characters is refused before it is sent', async ({
  page
}) => {
  await page.notebook.createNew('long-question.ipynb');
  await openPanel(page);
  const posted: string[] = [];
  page.on('request', request => {
    if (
      request.url().includes('/jupyter-data-agent/turns') &&
      request.method() === 'POST'
    ) {
      posted.push(request.url());
    }
  });
  const input = panel(page).locator('.jp-DataAgent-input');
  await input.fill('Summarize this table: ' + 'x'.repeat(20_000));
  const problem = panel(page).locator('.jp-DataAgent-intentProblem');
  await expect(problem).toHaveText(
    'The question is 20,022 characters long; the server takes at most ' +
      '20,000. Shorten it, or put the long text in a cell and ask about ' +
      'that cell.'
  );
  await expect(input).toHaveAttribute('aria-invalid', 'true');
  const send = panel(page).locator('.jp-DataAgent-send');
  await expect(send).toBeDisabled();
  // And looks it: dimmed, with a not-allowed cursor.
  const look = () =>
    send.evaluate(node => {
      const style = getComputedStyle(node);
      return { opacity: Number(style.opacity), cursor: style.cursor };
    });
  expect(await look()).toEqual({ opacity: 0.45, cursor: 'not-allowed' });
  await input.press('Enter');
  await expect(panel(page).locator('.jp-DataAgent-exchange')).toHaveCount(0);
  expect(posted).toEqual([]);

  // Shortened to the limit, it goes.
  await input.fill('x'.repeat(20_000));
  await expect(problem).toHaveCount(0);
  await expect(send).toBeEnabled();
  expect((await look()).opacity).toBe(1);
});

test.describe('on a first start, with the news question shown', () => {
  // Galata answers the question in its settings; a new user has not.
  test.use({
    mockSettings: {
      ...galata.DEFAULT_SETTINGS,
      '@jupyterlab/apputils-extension:notification': {
        checkForUpdates: false,
        fetchNews: 'none'
      }
    }
  });

  test("JupyterLab's news toast does not cover Ask", async ({ page }) => {
    await page.notebook.createNew('news-toast.ipynb');
    const toast = page.locator('.jp-toastContainer .Toastify__toast', {
      hasText: 'official Jupyter news'
    });
    await expect(toast).toBeVisible();
    await openPanel(page);
    const input = panel(page).locator('.jp-DataAgent-input');
    await input.fill('Which airline is late most often?');
    const send = panel(page).locator('.jp-DataAgent-send');
    await expect(send).toBeEnabled();
    // What a click at the middle of Ask would reach.
    const hit = () =>
      send.evaluate(node => {
        const box = node.getBoundingClientRect();
        const at = document.elementFromPoint(
          box.left + box.width / 2,
          box.top + box.height / 2
        );
        return !!at && node.contains(at);
      });
    await expect.poll(hit).toBe(true);
    // The toast is still there, beside the panel rather than over it.
    await expect(toast).toBeVisible();
    const toastBox = (await toast.boundingBox())!;
    const panelBox = (await panel(page).boundingBox())!;
    expect(toastBox.x + toastBox.width).toBeLessThanOrEqual(panelBox.x);
    await page.screenshot({ path: screenshotPath('news-toast-beside.png') });
    // The control: where JupyterLab puts it, it covers Ask.
    await page.evaluate(() =>
      document.body.classList.remove('jp-DataAgent-toastsLeft')
    );
    await expect.poll(hit).toBe(false);
    await page.evaluate(() =>
      document.body.classList.add('jp-DataAgent-toastsLeft')
    );
    // A real click, no force: Playwright checks nothing else would get it.
    await send.click({ timeout: 10_000 });
    await expect(panel(page).locator('.jp-DataAgent-exchange')).toHaveCount(1);
  });
});
