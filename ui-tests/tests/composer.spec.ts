/**
 * A question longer than the server takes (MAX_INTENT_CHARS in
 * server/models.py) is refused in the composer, in words, before anything
 * is posted.
 */
import { expect, test } from '@jupyterlab/galata';

import { openPanel, panel } from './helpers';

test('a question over 20,000 characters is refused before it is sent', async ({
  page
}) => {
  await page.notebook.createNew('long-question.ipynb');
  await openPanel(page);
  const posted: string[] = [];
  page.on('request', request => {
    if (request.url().includes('/jupyter-data-agent/turns')) {
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
