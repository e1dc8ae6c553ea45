/**
 * One declaration per setting: the sidebar's Samples and Budget inputs stop
 * where the server does. The UI test server sets c.DataAgent.max_samples = 12
 * and max_budget = 150 (ui-tests/jupyter_server_test_config.py), other than
 * the defaults, and the real server's `GET config` is all the sidebar reads.
 */
import { expect, test } from '@jupyterlab/galata';

import { notebookWithDf, openPanel, panel } from './helpers';

test('the sidebar takes its limits from the server configuration', async ({
  page
}) => {
  await notebookWithDf(page, 'limits.ipynb');
  await openPanel(page);
  const sidebar = panel(page);
  const strategy = sidebar.locator('.jp-DataAgent-strategy select');
  const knob = (name: string) =>
    sidebar.locator('.jp-DataAgent-number', { hasText: name }).locator('input');

  await strategy.selectOption('vote');
  await expect(knob('samples')).toHaveAttribute('max', '12');

  await strategy.selectOption('mcts');
  await expect(knob('samples')).toHaveAttribute('max', '12');
  await expect(knob('budget')).toHaveAttribute('max', '150');
  // The server's default (40 iterations) is within its limit and shown as is.
  await expect(knob('budget')).toHaveValue('40');
});
