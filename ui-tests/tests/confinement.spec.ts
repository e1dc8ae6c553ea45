/**
 * The confinement badge of each turn, and candidate output treated as data.
 *
 * The badge is checked against a scripted server (exact verdicts, every
 * state) and against the real server (whatever verdict this machine's
 * kernel copies earn). The HTML check runs a candidate that writes a
 * <script> and an onerror= handler in a real kernel copy: neither may run in
 * the page, after the turn or after accepting it.
 */
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';

import type { Candidate, Confinement } from '../../src/wire';

import {
  CANDIDATES,
  MockServer,
  ask,
  event,
  finishEvents,
  notebookAgentMetadata,
  notebookCells,
  notebookWithDf,
  openPanel,
  panel,
  reloadAndReopen,
  screenshotPath
} from './helpers';

/** The layers and what each does (kernel/results.py LAYERS). */
const LAYERS: Record<string, string> = {
  landlock_fs:
    "files outside scratch are read-only; devices (but null, zero, full, random, urandom), other processes' /proc files and every Jupyter runtime dir unreadable",
  landlock_net: 'TCP connect and bind are denied',
  seccomp:
    'no new sockets, ptrace, memfds, SysV or POSIX IPC, metadata changes, namespaces or calls on other processes',
  capabilities: 'every capability dropped, no new privileges',
  descriptors: 'every descriptor inherited from the kernel is closed',
  shared_mappings: 'shared memory maps of the kernel are private in the copy',
  secrets:
    'environment reduced to an allow-list; secret values and the session key wiped from memory',
  processes: 'every process a candidate starts ends with its copy',
  limits: 'CPU, memory, file size and output bounded; wall-clock timeout'
};
const WHY_OFF: Record<string, string> = {
  seccomp: 'libseccomp.so.2 not found',
  shared_mappings: 'could not read /proc/self/maps',
  landlock_net: 'Landlock ABI 3 has no network rules'
};
const BADGE_TEXTS = ['confined', 'partially confined', 'not executed'];

function verdict(
  status: Confinement['status'],
  off: string[],
  policy: Confinement['policy'] = 'require'
): Confinement {
  const messages = {
    confined: 'candidates run in fully confined copies of your kernel.',
    partial: `candidates run in copies missing: ${off.join(', ')}. Candidate code may reach what those layers guard.`,
    not_executed:
      `candidates were generated but not run, because kernel copies cannot be fully confined here (missing: ${off.join(', ')}). ` +
      "To run them anyway, set c.DataAgent.confinement = 'warn'."
  };
  return {
    policy,
    status,
    execute: status !== 'not_executed',
    message: messages[status],
    layers: Object.entries(LAYERS).map(([name, what]) => ({
      name,
      on: !off.includes(name),
      detail: off.includes(name)
        ? (WHY_OFF[name] ?? 'not available here')
        : what
    })),
    missing: off
  };
}

const HTML_PAYLOAD =
  '<b class="jda-card">jda html card</b><script>window.__jdaPwned = 1</script>' +
  '<img src=x onerror="window.__jdaPwned2 = 1">';

/** A candidate whose output is hostile HTML (and JavaScript), as a copy would send it. */
const HOSTILE: Candidate = {
  ...CANDIDATES[0],
  code: `# Step 1: Show an HTML card\nfrom IPython.display import HTML, display\ndisplay(HTML(${JSON.stringify(HTML_PAYLOAD)}))`,
  steps: [
    { number: 1, explanation: 'Show an HTML card', code: 'display(HTML(...))' }
  ],
  explanation: 'Step 1: Show an HTML card',
  result: {
    ...CANDIDATES[0].result!,
    outputs: [
      {
        output_type: 'display_data',
        name: null,
        text: null,
        ename: null,
        evalue: null,
        data: {
          'text/html': HTML_PAYLOAD,
          'application/javascript': 'window.__jdaPwned = 1;',
          'text/plain': '<IPython.core.display.HTML object>'
        },
        metadata: {},
        traceback: [],
        truncated: false
      }
    ]
  }
};

/** Drag the splitter left of the right sidebar until the sidebar is `width` wide. */
async function widenSidebar(page: Page, width: number): Promise<void> {
  const box = await panel(page).boundingBox();
  const handle = page
    .locator('#jp-main-split-panel > .lm-SplitPanel-handle:not(.lm-mod-hidden)')
    .last();
  const grip = await handle.boundingBox();
  if (!box || !grip || box.width >= width) {
    return;
  }
  await page.mouse.move(grip.x + grip.width / 2, grip.y + grip.height / 2);
  await page.mouse.down();
  await page.mouse.move(
    grip.x + grip.width / 2 - (width - box.width),
    grip.y + grip.height / 2,
    { steps: 5 }
  );
  await page.mouse.up();
}

async function pwned(
  page: Page
): Promise<{ script: unknown; onerror: unknown }> {
  return page.evaluate(() => ({
    script: (window as any).__jdaPwned,
    onerror: (window as any).__jdaPwned2
  }));
}

async function expectNotPwned(page: Page): Promise<void> {
  // onerror fires asynchronously once the broken image fails: give it time.
  await page.waitForTimeout(1000);
  expect(await pwned(page)).toEqual({ script: undefined, onerror: undefined });
}

async function finish(
  server: MockServer,
  jobId: string,
  candidates: Candidate[],
  confinement: Confinement
) {
  await server.send(jobId, [
    event(jobId, 1, 'progress', 'Kernel copies checked', {
      state: 'confinement',
      confinement
    }),
    ...finishEvents(jobId, 2, candidates, { confinement })
  ]);
}

test.describe('against a scripted server', () => {
  test.use({ viewport: { width: 1280, height: 1000 } });

  test('the badge shows per turn, lists the layers on hover and keyboard focus, and survives a reload', async ({
    page
  }) => {
    const server = new MockServer();
    await server.install(page);
    await notebookWithDf(page, 'confinement.ipynb');
    await openPanel(page);
    await widenSidebar(page, 360);

    // A turn in fully confined copies.
    await ask(page, 'What is the mean delay per airline?');
    await expect.poll(() => server.bodies.length).toBe(1);
    await server.send('job1', [
      event('job1', 1, 'progress', 'Kernel copies checked', {
        state: 'confinement',
        confinement: verdict('confined', [])
      })
    ]);
    const first = panel(page).locator('.jp-DataAgent-exchange').nth(0);
    const badge1 = first.locator('.jp-DataAgent-confinement');
    // Shown as soon as the verdict streams in, before the turn is done.
    await expect(badge1).toHaveText('confined');
    await finish(server, 'job1', [CANDIDATES[0]], verdict('confined', []));
    await expect(
      page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion')
    ).toHaveCount(1);
    await expect(badge1).toHaveClass(/jp-mod-confined/);
    await expect(first.locator('.jp-DataAgent-status')).toContainText(
      'ran in 0.04 s'
    );
    await page
      .locator('.jp-DataAgent-suggestionBar button.jp-DataAgent-accept')
      .click();

    // A turn in partially confined copies (policy "warn").
    await ask(page, 'How many flights are in the table?');
    await expect.poll(() => server.bodies.length).toBe(2);
    await finish(
      server,
      'job2',
      [CANDIDATES[0]],
      verdict('partial', ['seccomp', 'shared_mappings'], 'warn')
    );
    const second = panel(page).locator('.jp-DataAgent-exchange').nth(1);
    const badge2 = second.locator('.jp-DataAgent-confinement');
    await expect(badge2).toHaveText('partially confined');
    await expect(badge2).toHaveClass(/jp-mod-partial/);

    // Hover: the list of layers, each on or off with its detail.
    const details2 = second.locator('.jp-DataAgent-confinementDetails');
    await expect(details2).toBeHidden();
    // Question row at the top, so the screenshot shows the whole list.
    await second.evaluate(node => node.scrollIntoView({ block: 'start' }));
    await badge2.hover();
    await expect(details2).toBeVisible();
    await expect(details2.locator('.jp-DataAgent-layer')).toHaveCount(9);
    await expect(
      details2.locator('.jp-DataAgent-layer.jp-mod-off')
    ).toHaveCount(2);
    const seccomp = details2.locator('[data-layer="seccomp"]');
    await expect(seccomp).toContainText('off');
    await expect(seccomp).toContainText('libseccomp.so.2 not found');
    await expect(details2.locator('[data-layer="landlock_fs"]')).toContainText(
      'on'
    );
    await expect(details2).toContainText('policy “warn”');
    await panel(page).screenshot({
      path: screenshotPath('confinement-badge.png')
    });
    await page.mouse.move(0, 0);
    await expect(details2).toBeHidden();

    // Keyboard: the badge is a tab stop with a label, described by the list.
    await panel(page).locator('.jp-DataAgent-input').focus();
    const label = await badge2.getAttribute('aria-label');
    expect(label).toBe(
      'Kernel copies: partially confined, 7 of 9 layers on, policy warn'
    );
    const describedBy = await badge2.getAttribute('aria-describedby');
    expect(describedBy).toBeTruthy();
    await expect(page.locator(`#${describedBy}`)).toHaveAttribute(
      'role',
      'tooltip'
    );
    // Shift+Tab from the question box walks back through the conversation to the badge.
    let reached = false;
    for (let i = 0; i < 15 && !reached; i++) {
      await page.keyboard.press('Shift+Tab');
      reached = await badge2.evaluate(node => node === document.activeElement);
    }
    expect(reached).toBe(true);
    await expect(details2).toBeVisible();
    await expect(details2.locator('.jp-DataAgent-layer')).toHaveCount(9);
    await page.keyboard.press('Escape');
    await expect(details2).toBeHidden();

    // Stored with the turn: back after a reload, from the notebook alone.
    const stored = await notebookAgentMetadata(page);
    expect(stored.turns.map((t: any) => t.confinement?.status)).toEqual([
      'confined',
      'partial'
    ]);
    expect(stored.turns[1].confinement.missing).toEqual([
      'seccomp',
      'shared_mappings'
    ]);
    await page.notebook.save();
    await reloadAndReopen(page, 'confinement.ipynb');
    await openPanel(page);
    const turns = panel(page).locator('.jp-DataAgent-exchange');
    await expect(turns).toHaveCount(2);
    await expect(turns.nth(0).locator('.jp-DataAgent-confinement')).toHaveText(
      'confined'
    );
    const reloaded = turns.nth(1).locator('.jp-DataAgent-confinement');
    await expect(reloaded).toHaveText('partially confined');
    await reloaded.hover();
    await expect(
      turns.nth(1).locator('.jp-DataAgent-layer.jp-mod-off')
    ).toHaveCount(2);
  });

  test('a turn that was not executed does not pretend it ran, and its HTML runs no script', async ({
    page
  }) => {
    const server = new MockServer();
    await server.install(page);
    await notebookWithDf(page, 'not-executed.ipynb');
    await openPanel(page);

    await ask(page, 'Show an HTML card');
    await expect.poll(() => server.bodies.length).toBe(1);
    // Even if a (confused) server sent a result, "not executed" wins.
    await finish(
      server,
      'job1',
      [HOSTILE],
      verdict('not_executed', ['seccomp', 'landlock_net'])
    );
    const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
    const badge = exchange.locator('.jp-DataAgent-confinement');
    await expect(badge).toHaveText('not executed');
    await expect(badge).toHaveClass(/jp-mod-missing/);
    await expect(exchange.locator('.jp-DataAgent-status')).toHaveText(
      'not run'
    );
    await expect(exchange).not.toContainText('ran in');
    await expect(exchange.locator('.jp-DataAgent-noOutput')).toContainText(
      'Not executed: candidates were generated but not run'
    );
    await expect(exchange.locator('.jp-DataAgent-output')).toHaveCount(0);
    await expectNotPwned(page);
  });

  test('hostile HTML in an executed candidate is shown as data: no script, no handler', async ({
    page
  }) => {
    const server = new MockServer();
    await server.install(page);
    await notebookWithDf(page, 'hostile-mock.ipynb');
    await openPanel(page);

    await ask(page, 'Show an HTML card');
    await expect.poll(() => server.bodies.length).toBe(1);
    await finish(
      server,
      'job1',
      [HOSTILE],
      verdict('partial', ['seccomp'], 'warn')
    );
    const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
    await expect(exchange.locator('.jp-DataAgent-output')).toContainText(
      'jda html card'
    );
    await expect(exchange.locator('.jp-DataAgent-output script')).toHaveCount(
      0
    );
    await expect(
      exchange.locator('.jp-DataAgent-output [onerror]')
    ).toHaveCount(0);
    await expectNotPwned(page);

    await page
      .locator('.jp-DataAgent-suggestionBar button.jp-DataAgent-accept')
      .click();
    await expect(
      page.locator('.jp-Notebook .jp-Cell.jp-DataAgent-suggestion')
    ).toHaveCount(0);
    await expectNotPwned(page);
  });
});

test.describe('against the real server', () => {
  test.beforeEach(async ({ page }) => {
    const probe = await page.request.post('/jupyter-data-agent/turns', {
      data: {}
    });
    test.skip(
      probe.status() === 404,
      'the server has no POST /jupyter-data-agent/turns yet'
    );
  });

  async function htmlTurn(page: IJupyterLabPageFixture) {
    await notebookWithDf(page, 'hostile.ipynb');
    await openPanel(page);
    await ask(page, 'Show the flights as an HTML card');
    const suggestion = page.locator(
      '.jp-Notebook .jp-Cell.jp-DataAgent-suggestion'
    );
    await expect(suggestion).toHaveCount(1, { timeout: 90_000 });
    return suggestion;
  }

  test('a candidate writing <script> and onerror= runs neither in the page', async ({
    page
  }) => {
    const suggestion = await htmlTurn(page);
    const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
    await expect(suggestion.locator('.jp-InputArea')).toContainText(
      '__jdaPwned'
    );
    await expect(exchange.locator('.jp-DataAgent-status')).toBeVisible();

    // Where the copy ran it, its HTML is shown as inert data.
    const output = exchange.locator('.jp-DataAgent-output');
    if (await output.count()) {
      await expect(output).toContainText('jda html card');
      await expect(output.locator('script')).toHaveCount(0);
      await expect(output.locator('[onerror]')).toHaveCount(0);
    }
    await expectNotPwned(page);

    // Accept (not run): the cell is kept, still nothing runs in the page.
    await suggestion.locator('button.jp-DataAgent-accept').click();
    await expect(suggestion).toHaveCount(0);
    const cells = await notebookCells(page);
    expect(cells[1].source).toContain('__jdaPwned');
    await expectNotPwned(page);

    // Every turn carries a verdict; which one depends on this machine's kernel.
    const badge = exchange.locator('.jp-DataAgent-confinement');
    await expect(badge).toBeVisible();
    const text = (await badge.textContent())?.trim() ?? '';
    expect(BADGE_TEXTS).toContain(text);
    await badge.focus();
    await expect(
      exchange.locator('.jp-DataAgent-confinementDetails')
    ).toBeVisible();
    await expect(exchange.locator('.jp-DataAgent-layer')).toHaveCount(9);
    await panel(page).screenshot({
      path: screenshotPath('confinement-badge-real-server.png')
    });
    if (text === 'not executed') {
      await expect(exchange.locator('.jp-DataAgent-status')).toHaveText(
        'not run'
      );
      await expect(output).toHaveCount(0);
    } else {
      // It ran in a copy (the UI config sets the "warn" policy): the test was not vacuous.
      await expect(output).toContainText('jda html card');
    }
    const stored = await notebookAgentMetadata(page);
    expect(['confined', 'partial', 'not_executed']).toContain(
      stored.turns[0].confinement?.status
    );
  });
});
