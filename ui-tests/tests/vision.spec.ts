/**
 * Plots to vision models: a question about a chart, asked in the sidebar with
 * the plot's cell selected, reaches the model with the chart as an image part
 * (OpenAI content parts) and with its text summary (title, axes, series) read
 * from the live kernel. The UI test server declares its model vision-capable
 * (ui-tests/jupyter_server_test_config.py); the request is read back from the
 * OpenAI-protocol test server's log.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  ask,
  notebookWithDf,
  openPanel,
  screenshotPath,
  loggedRequests,
  logLength
} from './helpers';

// Matches the "What does the plot show" rule of fixtures/replies.json; the
// suffix tells this test's requests from any other in the shared log.
const INTENT = 'What does the plot show about the airlines? (vision)';

const PLOT_CODE = [
  'import matplotlib.pyplot as plt',
  'fig, ax = plt.subplots(figsize=(4, 3))',
  'df.groupby("airline")["delay"].mean().plot.bar(ax=ax, title="Mean delay per airline")',
  'ax.set_ylabel("delay (min)");'
].join('\n');

function requestsFor(intent: string, from: number): any[] {
  return loggedRequests(from).filter(req =>
    JSON.stringify(req.body).includes(intent)
  );
}

test('a question about a plot sends the plot as an image part with its summary', async ({
  page
}) => {
  await notebookWithDf(page, 'vision.ipynb');
  await page.notebook.addCell('code', PLOT_CODE);
  await page.notebook.runCell(1, true);
  const plot = page
    .locator('.jp-Notebook .jp-Cell')
    .nth(1)
    .locator('.jp-OutputArea-output img');
  await expect(plot).toBeVisible();
  // The plot's cell is the active one: the question is about it.
  await page.notebook.selectCells(1);
  await openPanel(page);

  const from = logLength();
  await ask(page, INTENT);
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toBeVisible({ timeout: 90_000 });
  await expect(suggestion).toContainText('mean delay of each airline');

  const requests = requestsFor(INTENT, from);
  expect(requests.length).toBeGreaterThan(0);
  const messages: any[] = requests[0].body.messages;
  const user = messages[messages.length - 1];
  // OpenAI content parts: the text, then the plot as a PNG data URL.
  expect(Array.isArray(user.content)).toBe(true);
  const images = user.content.filter((p: any) => p.type === 'image_url');
  expect(images).toHaveLength(1);
  expect(images[0].image_url.url).toMatch(
    /^data:image\/png;base64,[A-Za-z0-9+/]{1000,}={0,2}$/
  );
  const text: string = user.content.find((p: any) => p.type === 'text').text;
  expect(text).toContain('attached as images');
  // The summary read from the figure the cell's `fig` holds in the kernel.
  expect(text).toContain('[plot: figure with 1 axes]');
  expect(text).toContain("'Mean delay per airline'");
  expect(text).toContain("y 'delay (min)'");
  expect(text).toContain("x categories 'AA', 'DL', 'UA'");
  // Earlier messages (the system prompt) stay plain strings.
  expect(typeof messages[0].content).toBe('string');

  await page.screenshot({ path: screenshotPath('vision-plot.png') });
});
