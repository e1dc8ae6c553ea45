/**
 * The sidebar for a newcomer (issue 40), against a scripted server: the
 * whole suggest → reject → undo → accept loop with the keyboard alone (the
 * focus stays in a notebook cell, so `z` and the next shortcut act); the
 * confinement list never stands over the composer; the composer's controls
 * fit a 250 px panel; and no text of the sidebar or the suggestion bar is
 * below WCAG AA contrast (axe), in the light theme and the dark one.
 */
import AxeBuilder from '@axe-core/playwright';
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';

import type { Confinement } from '../../src/wire';

import {
  CANDIDATES,
  MockServer,
  PANEL_ID,
  ask,
  event,
  finishEvents,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  useDarkTheme
} from './helpers';

const INTENT = 'What is the mean delay per airline?';

/** Where the keyboard is: the index of the notebook cell holding the focus. */
async function focusedCell(
  page: Page
): Promise<{ index: number; commandMode: boolean; tag: string }> {
  return page.evaluate(() => {
    const active = document.activeElement;
    const notebook = (window as any).jupyterapp.shell.currentWidget?.content;
    const widgets: any[] = notebook?.widgets ?? [];
    const index = widgets.findIndex(w => active && w.node.contains(active));
    return {
      index,
      commandMode: notebook?.mode === 'command',
      tag: active ? active.tagName + '.' + active.className : 'none'
    };
  });
}

/** The keyboard is on cell `index` (or any cell: -1), in command mode. */
async function expectFocusInCell(page: Page, index = -1): Promise<void> {
  await expect
    .poll(async () => {
      const f = await focusedCell(page);
      return f.commandMode && (index < 0 ? f.index >= 0 : f.index === index);
    })
    .toBe(true);
}

/** Drag the splitter left of the right sidebar until the panel is `width` wide. */
async function sidebarWidth(page: Page, width: number): Promise<number> {
  const handle = page
    .locator('#jp-main-split-panel > .lm-SplitPanel-handle:not(.lm-mod-hidden)')
    .last();
  await expect(async () => {
    const box = await panel(page).boundingBox();
    const grip = await handle.boundingBox();
    expect(box && grip).toBeTruthy();
    if (Math.abs(box!.width - width) > 2) {
      const x = grip!.x + grip!.width / 2;
      const y = grip!.y + grip!.height / 2;
      await page.mouse.move(x, y);
      await page.mouse.down();
      await page.mouse.move(x + (box!.width - width), y, { steps: 5 });
      await page.mouse.up();
    }
    const now = await panel(page).boundingBox();
    expect(Math.abs(now!.width - width)).toBeLessThanOrEqual(2);
  }).toPass({ timeout: 30_000 });
  return (await panel(page).boundingBox())!.width;
}

/** A verdict with layers off (warn text) and on (success text) to show. */
function partial(): Confinement {
  const names = [
    'landlock_fs',
    'landlock_net',
    'seccomp',
    'capabilities',
    'descriptors',
    'shared_mappings',
    'secrets',
    'processes',
    'limits'
  ];
  const off = ['seccomp', 'shared_mappings'];
  return {
    policy: 'warn',
    status: 'partial',
    execute: true,
    message: `candidates run in copies missing: ${off.join(', ')}.`,
    layers: names.map(name => ({
      name,
      on: !off.includes(name),
      detail: off.includes(name) ? 'not available here' : 'on in the copy'
    })),
    missing: off
  };
}

/** A notebook with `df`, the panel open and one finished turn suggested. */
async function finishedTurn(
  page: IJupyterLabPageFixture,
  name: string,
  confinement?: Confinement
): Promise<MockServer> {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, name);
  await openPanel(page);
  await ask(page, INTENT);
  await expect.poll(() => server.bodies.length).toBe(1);
  await server.send('job1', [
    event('job1', 1, 'progress', 'Generating candidates'),
    ...finishEvents('job1', 2, [CANDIDATES[0]], {
      turnId: 'turn-keys',
      confinement
    })
  ]);
  await expect(
    page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion')
  ).toHaveCount(1);
  await expect(page.locator('.jp-DataAgent-suggestionBar')).toBeVisible();
  return server;
}

test('ask, reject, undo and accept with the keyboard alone, the focus in the notebook', async ({
  page
}) => {
  const server = new MockServer();
  await server.install(page);
  await notebookWithDf(page, 'keys.ipynb');
  const before = (await notebookCells(page)).map(c => c.source);

  // The chat from the command palette, the question typed, Enter sends it.
  await page.keyboard.press('Control+Shift+C');
  await page.keyboard.type('Data Agent: Open Chat');
  await expect(
    page.locator('.lm-CommandPalette-item.lm-mod-active')
  ).toContainText('Open Chat');
  await page.keyboard.press('Enter');
  const input = panel(page).locator('.jp-DataAgent-input');
  await expect(input).toBeFocused();
  await page.keyboard.type(INTENT);
  await page.keyboard.press('Enter');
  await expect.poll(() => server.bodies.length).toBe(1);
  await server.send(
    'job1',
    finishEvents('job1', 1, [CANDIDATES[0]], { turnId: 'turn-keys' })
  );
  const suggestion = page.locator(
    '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
  );
  await expect(suggestion).toHaveCount(1);
  let cells = await notebookCells(page);
  expect(cells.map(c => c.source)).toContain(CANDIDATES[0].code);

  // Escape leaves the composer for the notebook, in command mode; `j` walks
  // down to the suggested cell (the one the keyboard is on is removed next).
  await expect(input).toBeFocused();
  await page.keyboard.press('Escape');
  await expectFocusInCell(page);
  const onSuggestion = () =>
    page.evaluate(
      () =>
        !!document.activeElement?.closest('.jp-Cell.jp-DataAgent-suggestion')
    );
  for (let i = 0; i < 5 && !(await onSuggestion()); i++) {
    await page.keyboard.press('j');
  }
  expect(await onSuggestion()).toBe(true);

  // Reject: the suggestion goes, the keyboard stays on a cell (not the body).
  await page.keyboard.press('Control+Shift+Backspace');
  await expect(suggestion).toHaveCount(0);
  await expect
    .poll(async () => (await notebookCells(page)).map(c => c.source))
    .toEqual(before);
  await expectFocusInCell(page);
  expect(await page.evaluate(() => document.activeElement?.tagName)).not.toBe(
    'BODY'
  );

  // `z`, the notebook's undo, brings the suggestion back...
  await page.keyboard.press('z');
  await expect(suggestion).toHaveCount(1);
  cells = await notebookCells(page);
  const at = cells.findIndex(c => c.source === CANDIDATES[0].code);
  expect(at).toBeGreaterThanOrEqual(0);
  expect(cells[at].metadata.jupyter_data_agent.status).toBe('pending');
  await expectFocusInCell(page);

  // ...and the next shortcut accepts it; the keyboard is on the accepted cell.
  await page.keyboard.press('Control+Shift+Enter');
  await expect(suggestion).toHaveCount(0);
  cells = await notebookCells(page);
  expect(cells[at].source).toBe(CANDIDATES[0].code);
  expect(cells[at].metadata.jupyter_data_agent.status).toBe('accepted');
  await expectFocusInCell(page, at);

  // `z` again takes the acceptance back: the suggestion is pending once more.
  await page.keyboard.press('z');
  await expect(suggestion).toHaveCount(1);
  await expect
    .poll(
      async () =>
        (await notebookCells(page))[at].metadata.jupyter_data_agent.status
    )
    .toBe('pending');
  await expectFocusInCell(page);

  // Accepted from the composer, the keyboard stays in the composer.
  await input.focus();
  await page.keyboard.press('Control+Shift+Enter');
  await expect(suggestion).toHaveCount(0);
  await expect(input).toBeFocused();
});

test('the confinement list keeps off the composer, and Ask stays clickable', async ({
  page
}) => {
  const server = await finishedTurn(page, 'popover.ipynb', partial());
  await sidebarWidth(page, 250);
  const badge = panel(page).locator('.jp-DataAgent-confinement');
  const details = panel(page).locator('.jp-DataAgent-confinementDetails');
  const composer = panel(page).locator('.jp-DataAgent-composer');
  const input = panel(page).locator('.jp-DataAgent-input');
  const send = panel(page).locator('.jp-DataAgent-send');

  // Hover: the list opens, within the conversation, above the composer.
  await badge.hover();
  await expect(details).toBeVisible();
  const list = (await details.boundingBox())!;
  const box = (await composer.boundingBox())!;
  expect(list.y + list.height).toBeLessThanOrEqual(box.y + 1);

  // Onto the list, then onward: it closes once the pointer leaves the badge.
  await page.mouse.move(list.x + list.width / 2, list.y + list.height - 4);
  await expect(details).toBeHidden();

  // A click keeps it open (focus); Ask is still clickable (no
  // actionability wait: nothing lies over it).
  await badge.click();
  await expect(details).toBeVisible();
  const open = (await details.boundingBox())!;
  expect(open.y + open.height).toBeLessThanOrEqual(box.y + 1);
  await input.click({ timeout: 5_000 });
  await page.keyboard.type('How many flights are there?');
  await send.click({ timeout: 5_000 });
  await expect.poll(() => server.bodies.length).toBe(2);
  await expect(details).toBeHidden();
});

test('the composer fits a 250 px panel: Ask stays on the pickers row', async ({
  page
}) => {
  await finishedTurn(page, 'narrow.ipynb');
  const width = await sidebarWidth(page, 250);
  expect(Math.round(width)).toBe(250);
  const controls = panel(page).locator('.jp-DataAgent-controls');
  const strategy = panel(page).locator('.jp-DataAgent-strategy');
  const send = panel(page).locator('.jp-DataAgent-send');
  await panel(page).locator('.jp-DataAgent-input').fill(INTENT);
  // Every strategy of the catalog (its knobs shown): one row, inside the panel.
  for (const name of ['direct', 'vote', 'react', 'mcts']) {
    await strategy.locator('select').selectOption(name);
    await expect(async () => {
      const s = (await strategy.boundingBox())!;
      const a = (await send.boundingBox())!;
      const c = (await controls.boundingBox())!;
      const p = (await panel(page).boundingBox())!;
      // Ask on the strategy's row (their boxes overlap vertically).
      expect(a.y).toBeLessThan(s.y + s.height);
      expect(s.y).toBeLessThan(a.y + a.height);
      // Nothing sticks out of the panel.
      expect(c.x + c.width).toBeLessThanOrEqual(p.x + p.width + 0.5);
      expect(a.x + a.width).toBeLessThanOrEqual(p.x + p.width + 0.5);
    }).toPass({ timeout: 10_000 });
  }
});

/** The contrast ratio of the composer's placeholder on its background. */
async function placeholderContrast(page: Page): Promise<number> {
  return page.evaluate(() => {
    const input = document.querySelector('.jp-DataAgent-input')!;
    const canvas = document.createElement('canvas').getContext('2d')!;
    const rgba = (css: string): number[] => {
      // The canvas resolves any CSS colour (color-mix, color()) to rgba.
      canvas.clearRect(0, 0, 1, 1);
      canvas.fillStyle = css;
      canvas.fillRect(0, 0, 1, 1);
      const d = canvas.getImageData(0, 0, 1, 1).data;
      return [d[0], d[1], d[2], d[3] / 255];
    };
    const over = (fg: number[], bg: number[]) =>
      fg.slice(0, 3).map((c, i) => c * fg[3] + bg[i] * (1 - fg[3]));
    // The input's background over the composer's (opaque) one.
    const composer = rgba(
      getComputedStyle(input.closest('.jp-DataAgent-composer')!).backgroundColor
    );
    const bg = over(rgba(getComputedStyle(input).backgroundColor), composer);
    const fg = over(rgba(getComputedStyle(input, '::placeholder').color), bg);
    const lum = (rgb: number[]) => {
      const [r, g, b] = rgb.map(v => {
        const c = v / 255;
        return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
      });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    return (hi + 0.05) / (lo + 0.05);
  });
}

/** Axe's colour-contrast violations in the sidebar and the suggestion bar. */
async function contrastViolations(page: Page, selectors: string[]) {
  // JupyterLab's body is 0 px high with overflow hidden (#main is placed
  // absolutely): axe would take every text as clipped away and check none.
  await page.evaluate(() => {
    document.body.style.minHeight = '100vh';
  });
  let builder = new AxeBuilder({ page }).withRules(['color-contrast']);
  for (const selector of selectors) {
    builder = builder.include(selector);
  }
  const results = await builder.analyze();
  // Checked, not passed over: axe could tell the colours of the panel's text.
  expect(results.passes.length).toBeGreaterThan(0);
  return results.violations.flatMap(v =>
    v.nodes.map(n => `${n.target.join(' ')}: ${n.failureSummary}`)
  );
}

for (const theme of ['light', 'dark']) {
  test(`no text below WCAG AA contrast in the sidebar and the suggestion bar (${theme} theme)`, async ({
    page
  }) => {
    await finishedTurn(page, `contrast-${theme}.ipynb`, partial());
    if (theme === 'dark') {
      await useDarkTheme(page);
    }
    await expect(panel(page).locator('.jp-DataAgent-usage')).toBeVisible();
    await expect(
      panel(page).locator('.jp-DataAgent-confinement.jp-mod-partial')
    ).toBeVisible();
    // Theme colours transition: wait until the panel's colour settles.
    await expect
      .poll(() =>
        panel(page).evaluate(node => getComputedStyle(node).backgroundColor)
      )
      .toBe(theme === 'dark' ? 'rgb(33, 33, 33)' : 'rgb(255, 255, 255)');

    // The placeholder (the composer's only keyboard help): axe skips it.
    expect(await placeholderContrast(page)).toBeGreaterThanOrEqual(4.5);

    expect(
      await contrastViolations(page, [
        `#${PANEL_ID}`,
        '.jp-DataAgent-suggestionBar'
      ])
    ).toEqual([]);

    // The layers list (on in green, off in red), opened from the keyboard.
    await panel(page).locator('.jp-DataAgent-confinement').focus();
    await expect(
      panel(page).locator('.jp-DataAgent-confinementDetails')
    ).toBeVisible();
    expect(
      await contrastViolations(page, ['.jp-DataAgent-confinementDetails'])
    ).toEqual([]);
  });
}

for (const theme of ['light', 'dark']) {
  test(`a running turn's progress, elapsed time and log read at WCAG AA (${theme} theme)`, async ({
    page
  }) => {
    const server = new MockServer();
    await server.install(page);
    await notebookWithDf(page, `progress-${theme}.ipynb`);
    if (theme === 'dark') {
      await useDarkTheme(page);
    }
    await openPanel(page);
    await ask(page, INTENT);
    await expect.poll(() => server.bodies.length).toBe(1);
    await server.send('job1', [
      event('job1', 1, 'progress', 'Generating candidates'),
      event('job1', 2, 'log', 'Read 1 DataFrame schema')
    ]);
    const progress = panel(page).locator('.jp-DataAgent-progress');
    await expect(progress.locator('.jp-DataAgent-elapsed')).toBeVisible();
    await progress.locator('.jp-DataAgent-log summary').click();
    await expect(
      progress.locator('.jp-DataAgent-log li.jp-mod-log')
    ).toBeVisible();
    await expect
      .poll(() =>
        panel(page).evaluate(node => getComputedStyle(node).backgroundColor)
      )
      .toBe(theme === 'dark' ? 'rgb(33, 33, 33)' : 'rgb(255, 255, 255)');
    expect(await contrastViolations(page, ['.jp-DataAgent-progress'])).toEqual(
      []
    );
  });
}
