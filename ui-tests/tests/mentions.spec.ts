/**
 * `@variable` mentions and the context gauge, against the real server and
 * a real kernel: the popup lists the kernel's frames (GET variables), the
 * keyboard picks one, and the prompt the OpenAI-protocol test server
 * received (its request log) gives that frame's full schema first; the
 * turn's footer shows how full the prompt was and what was cut.
 */
import { expect, test } from '@jupyterlab/galata';

import {
  notebookWithDf,
  openPanel,
  panel,
  screenshotPath,
  loggedRequests,
  logLength,
  promptOf
} from './helpers';

const WIDE_CODE =
  "wide = pd.DataFrame({f'c{i}': [i, i + 1] for i in range(30)})\nwide.shape";

test('@d offers the kernel frames, the keyboard picks df and df comes first in full', async ({
  page
}) => {
  await notebookWithDf(page, 'mentions.ipynb');
  await page.notebook.addCell('code', WIDE_CODE);
  await page.notebook.runCell(1, true);
  await openPanel(page);

  const input = panel(page).locator('.jp-DataAgent-input');
  await input.click();
  await input.pressSequentially('What is the mean delay per airline in @d');

  const list = panel(page).getByRole('listbox', {
    name: 'DataFrames and Series in the kernel'
  });
  await expect(list).toBeVisible({ timeout: 30_000 });
  const options = list.getByRole('option');
  // Names starting with "d" first, then those containing it.
  await expect(options).toHaveText([
    /@df\s*DataFrame · 5 × 2 · airline, delay/,
    /@wide/
  ]);
  await expect(options.first()).toHaveAttribute('aria-selected', 'true');
  await expect(input).toHaveAttribute(
    'aria-activedescendant',
    (await options.first().getAttribute('id'))!
  );
  // ↓ moves to wide, ↑ back to df.
  await input.press('ArrowDown');
  await expect(options.nth(1)).toHaveAttribute('aria-selected', 'true');
  await input.press('ArrowUp');
  await expect(options.first()).toHaveAttribute('aria-selected', 'true');
  await panel(page).screenshot({ path: screenshotPath('mention-popup.png') });

  // Enter picks (it does not send while the popup is open).
  await input.press('Enter');
  await expect(list).toHaveCount(0);
  await expect(input).toHaveValue('What is the mean delay per airline in @df ');

  // Escape closes a popup without picking.
  await input.pressSequentially('vs @w');
  await expect(list).toBeVisible();
  await input.press('Escape');
  await expect(list).toHaveCount(0);
  await expect(input).toHaveValue(
    'What is the mean delay per airline in @df vs @w'
  );
  for (let i = 0; i < 'vs @w'.length; i++) {
    await input.press('Backspace');
  }
  await input.pressSequentially('?');

  const from = logLength();
  await input.press('Enter');
  const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
  const footer = exchange.locator('.jp-DataAgent-usage');
  await expect(footer).toBeVisible({ timeout: 90_000 });

  const prompts = loggedRequests(from)
    .map(promptOf)
    .filter(p => p.includes('What is the mean delay per airline in @df ?'));
  expect(prompts.length).toBeGreaterThan(0);
  const prompt = prompts[0];
  // The live schema block is the last one (exemplars have their own before it).
  const schema = prompt
    .slice(prompt.lastIndexOf('# Schema of Dataframes:'))
    .split('\n');
  expect(schema[1]).toBe('# Columns in df with example values:');
  // Every column with several distinct example values.
  expect(schema[2]).toBe('# airline (AA, UA, DL), delay (10, 25, 30)');
  expect(schema[3]).toMatch(
    /^# df: 5 rows x 2 columns; dtypes: airline=\w+, delay=int64$/
  );
  expect(schema[4]).toBe('# Other DataFrames (summary):');
  expect(schema[5]).toBe(
    '# wide: 2 rows x 30 columns; columns: c0, c1, c2, c3, c4, c5, ... (24 more)'
  );

  // The context gauge: the fill, and what was cut, on hover.
  const gauge = footer.getByRole('meter', { name: 'Context used' });
  await expect(gauge).toBeVisible();
  await expect(gauge).toContainText(/context \d+%/);
  await expect(gauge).toContainText('cut');
  // Its tooltip appears on hover (and on keyboard focus) and lists the cuts.
  const tip = footer.getByRole('tooltip');
  await expect(tip).toBeHidden();
  await gauge.hover();
  await expect(tip).toBeVisible();
  await expect(gauge).toHaveAttribute(
    'aria-describedby',
    (await tip.getAttribute('id'))!
  );
  const title = (await tip.innerText()) ?? '';
  expect(title).toMatch(
    /^Prompt: [\d,]+ of [\d,]+ tokens \(\d+% of the prompt budget\)/
  );
  expect(title).toContain('In full, first: @df');
  expect(title).toContain(
    'wide: summarized (6 of 30 columns named); mention @wide for all'
  );
  const max = Number(await gauge.getAttribute('aria-valuemax'));
  const now = Number(await gauge.getAttribute('aria-valuenow'));
  expect(max).toBeGreaterThan(0);
  expect(now).toBeGreaterThan(0);
  expect(now).toBeLessThanOrEqual(max);

  await exchange.screenshot({ path: screenshotPath('context-gauge.png') });
  await page.mouse.move(0, 0);
  await expect(tip).toBeHidden();
  await gauge.focus();
  await expect(tip).toBeVisible();
});
