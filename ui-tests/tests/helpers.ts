import { IJupyterLabPageFixture } from '@jupyterlab/galata';
import { Page, WebSocketRoute, expect } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

import type {
  AgentConfig,
  Candidate,
  Confinement,
  DoneResult,
  JobEvent,
  StrategyInfo
} from '../../src/wire';

export const PANEL_ID = 'jupyter-data-agent-panel';
export const SCREENSHOTS = path.resolve(__dirname, '..', 'screenshots');
/** Every request the OpenAI-protocol test server received (playwright.config.js). */
export const OPENAI_LOG = path.resolve(
  __dirname,
  '..',
  'logs',
  process.env.JDA_UI_LOG || 'openai-requests.jsonl'
);

/** How many lines the request log holds: a mark to read later requests from. */
export function logLength(): number {
  return fs.existsSync(OPENAI_LOG)
    ? fs
        .readFileSync(OPENAI_LOG, 'utf-8')
        .split('\n')
        .filter(line => line.trim()).length
    : 0;
}

/** The model requests (POST) the test server logged, from log line `from` on. */
export function loggedRequests(from = 0): any[] {
  if (!fs.existsSync(OPENAI_LOG)) {
    return [];
  }
  return fs
    .readFileSync(OPENAI_LOG, 'utf-8')
    .split('\n')
    .filter(line => line.trim())
    .slice(from)
    .map(line => JSON.parse(line))
    .filter(req => req.method === 'POST');
}

/** A logged request's prompt: its chat messages' text (image parts left out) or its completion prompt. */
export function promptOf(req: any): string {
  const text = (content: any): string =>
    Array.isArray(content)
      ? content
          .filter(part => part.type === 'text')
          .map(part => part.text)
          .join('\n')
      : String(content ?? '');
  return req.body.messages
    ? req.body.messages.map((m: any) => text(m.content)).join('\n')
    : String(req.body.prompt ?? '');
}

export const DF_CODE = [
  'import pandas as pd',
  'df = pd.DataFrame({"airline": ["AA", "UA", "AA", "DL", "UA"], "delay": [10, 25, 30, 5, 15]})',
  'df'
].join('\n');

/**
 * A notebook file (nbformat 4.5) with these cells and a Python kernel, to
 * upload: no rename dialog, unlike createNew. A string is one code cell
 * with id `df-cell`.
 */
export function notebookJson(
  cells: string | Record<string, unknown>[]
): string {
  const list =
    typeof cells === 'string'
      ? [
          {
            cell_type: 'code',
            execution_count: null,
            id: 'df-cell',
            metadata: {},
            outputs: [],
            source: cells
          }
        ]
      : cells;
  return JSON.stringify({
    cells: list,
    metadata: {
      kernelspec: {
        display_name: 'Python 3 (ipykernel)',
        language: 'python',
        name: 'python3'
      }
    },
    nbformat: 4,
    nbformat_minor: 5
  });
}

export function screenshotPath(name: string): string {
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  return path.join(SCREENSHOTS, name);
}

/** A new notebook whose first cell made `df` in the kernel. */
export async function notebookWithDf(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  await page.notebook.createNew(name);
  await page.notebook.setCell(0, 'code', DF_CODE);
  await page.notebook.runCell(0, true);
  // In this notebook: an earlier one may show the same table in a hidden tab.
  await expect(
    page
      .locator(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output table'
      )
      .first()
  ).toBeVisible();
}

/**
 * Reload the page and get back to the notebook, restored from the workspace.
 *
 * Galata's readiness check expects a Launcher tab, so wait for the splash to
 * go instead: only then has the workspace restored (or not) the notebook, and
 * opening it a second time cannot race the restore.
 */
export async function reloadAndReopen(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  await page.reload({ waitForIsReady: false });
  await page.waitForSelector('#jupyterlab-splash', {
    state: 'detached',
    timeout: 120 * 1000
  });
  if (!(await page.notebook.isOpen(name))) {
    await page.notebook.open(name);
  }
  // Its tab current: the workspace may restore another document in front.
  await activateNotebook(page, name);
  // The notebook on show: a panel the workspace restored behind it (another
  // tab, hidden by Lumino or by a hidden ancestor) also matches
  // `.jp-NotebookPanel` and may come first (seen in CI: its first cell stayed
  // "hidden" while the notebook on show had its cells in view), so wait for
  // a visible cell.
  await expect(
    page
      .locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell >> visible=true')
      .first()
  ).toBeVisible();
}

/**
 * Bring a notebook's tab to the front, under load too.
 *
 * Galata's `notebook.activate` clicks the tab once and waits 15 s for it to be
 * selected; on a loaded 2-core machine, a workspace still restoring after a
 * reload can put another document in front after that click (seen in CI). So
 * wait for the restore, then click until the tab is selected.
 */
export async function activateNotebook(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  await page.evaluate(() => window.jupyterapp.restored);
  const tab = page.activity.getTabLocator(name);
  await expect(async () => {
    await tab.click();
    await expect(tab).toHaveAttribute('aria-selected', 'true', {
      timeout: 5_000
    });
  }).toPass({ timeout: 60_000 });
}

export async function openPanel(page: IJupyterLabPageFixture): Promise<void> {
  if (!(await page.locator(`#${PANEL_ID}`).isVisible())) {
    await page.sidebar.openTab(PANEL_ID);
  }
  await expect(page.locator(`#${PANEL_ID}`)).toBeVisible();
}

export function panel(page: Page) {
  return page.locator(`#${PANEL_ID}`);
}

export async function ask(page: Page, intent: string): Promise<void> {
  const input = panel(page).locator('.jp-DataAgent-input');
  await input.fill(intent);
  await input.press('Enter');
}

/** The current notebook's cells as nbformat JSON (unsaved state included). */
export async function notebookCells(page: Page): Promise<any[]> {
  return page.evaluate(() => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    return widget.content.model.sharedModel.toJSON().cells;
  });
}

export async function notebookAgentMetadata(page: Page): Promise<any> {
  return page.evaluate(() => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    return widget.content.model.getMetadata('jupyter_data_agent');
  });
}

/** Switch JupyterLab to its dark theme and wait until it applies. */
export async function useDarkTheme(page: Page): Promise<void> {
  await page.evaluate(() =>
    (window as any).jupyterapp.commands.execute('apputils:change-theme', {
      theme: 'JupyterLab Dark'
    })
  );
  await expect(page.locator('body')).toHaveAttribute(
    'data-jp-theme-light',
    'false',
    { timeout: 30_000 }
  );
}

export async function execute(
  page: Page,
  command: string,
  args: any = {}
): Promise<void> {
  await page.evaluate(
    ({ command, args }) =>
      (window as any).jupyterapp.commands.execute(command, args),
    { command, args }
  );
}

export const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAABgAAAAMCAIAAAD3UuoiAAAAJUlEQVR4nGOQL9+CFf0nETDgMohUC0g2CBfCadCo10a9NhBeAwDjZhZ/X/v50wAAAABJRU5ErkJggg==';

const TABLE =
  '<table class="dataframe"><thead><tr><th>airline</th><th>delay</th></tr></thead>' +
  '<tbody><tr><td>AA</td><td>20.0</td></tr><tr><td>DL</td><td>5.0</td></tr>' +
  '<tr><td>UA</td><td>20.0</td></tr></tbody></table>';

/** Candidates as the server sends them (search/base.py Candidate.to_json, typed by src/wire.ts). */
export const CANDIDATES: Candidate[] = [
  {
    code: '# Step 1: Group the flights by airline\nby_airline = df.groupby("airline")\n# Step 2: Average the delay of each airline\nby_airline["delay"].mean().to_frame()',
    steps: [
      {
        number: 1,
        explanation: 'Group the flights by airline',
        code: 'by_airline = df.groupby("airline")'
      },
      {
        number: 2,
        explanation: 'Average the delay of each airline',
        code: 'by_airline["delay"].mean().to_frame()'
      }
    ],
    explanation:
      'Step 1: Group the flights by airline\nStep 2: Average the delay of each airline',
    result: {
      status: 'ok',
      outputs: [
        {
          output_type: 'execute_result',
          name: null,
          text: null,
          data: {
            'text/html': TABLE,
            'text/plain': 'airline\nAA 20.0\nDL 5.0\nUA 20.0'
          },
          metadata: {},
          ename: null,
          evalue: null,
          traceback: [],
          truncated: false
        }
      ],
      value: null,
      ename: null,
      evalue: null,
      traceback: [],
      duration_s: 0.04,
      pid: 101,
      limit: null,
      truncated: false,
      namespace: null
    },
    score: 0.8,
    support: 3,
    repaired: false,
    meta: {},
    trace: []
  },
  {
    code: '# Step 1: Plot the mean delay per airline\ndf.groupby("airline")["delay"].mean().plot.bar()',
    steps: [
      {
        number: 1,
        explanation: 'Plot the mean delay per airline',
        code: 'df.groupby("airline")["delay"].mean().plot.bar()'
      }
    ],
    explanation: 'Step 1: Plot the mean delay per airline',
    result: {
      status: 'ok',
      outputs: [
        {
          output_type: 'display_data',
          name: null,
          text: null,
          data: { 'image/png': PNG, 'text/plain': '<Figure size 640x480>' },
          metadata: {},
          ename: null,
          evalue: null,
          traceback: [],
          truncated: false
        }
      ],
      value: null,
      ename: null,
      evalue: null,
      traceback: [],
      duration_s: 0.3,
      pid: 102,
      limit: null,
      truncated: false,
      namespace: null
    },
    score: 0.5,
    support: 1,
    repaired: false,
    meta: {},
    trace: []
  },
  {
    code: '# Step 1: Average the late column\ndf["late"].mean()',
    steps: [
      {
        number: 1,
        explanation: 'Average the late column',
        code: 'df["late"].mean()'
      }
    ],
    explanation: 'Step 1: Average the late column',
    result: {
      status: 'error',
      outputs: [
        {
          output_type: 'error',
          name: null,
          text: null,
          data: {},
          metadata: {},
          ename: 'KeyError',
          evalue: "'late'",
          traceback: ["\u001b[0;31mKeyError\u001b[0m: 'late'"],
          truncated: false
        }
      ],
      value: null,
      ename: 'KeyError',
      evalue: "'late'",
      traceback: ["KeyError: 'late'"],
      duration_s: 0.01,
      pid: 103,
      limit: null,
      truncated: false,
      namespace: null
    },
    score: -1,
    support: 1,
    repaired: false,
    meta: {},
    trace: []
  }
];

export function event(
  jobId: string,
  seq: number,
  type: string,
  message: string,
  data: any = {}
): JobEvent {
  return { version: 1, job_id: jobId, seq, type, message, data } as JobEvent;
}

/** Every strategy the server knows, with its knobs' defaults (turn/resolve.py catalog). */
export const CATALOG: StrategyInfo[] = [
  {
    name: 'direct',
    label: 'Direct',
    summary: 'One candidate, step by step (fastest).',
    samples: null,
    budget: null
  },
  {
    name: 'vote',
    label: 'Vote',
    summary: 'Several candidates, run and voted on by their outputs.',
    samples: 5,
    budget: null
  },
  {
    name: 'react',
    label: 'Agent',
    summary: 'Thinks, runs a cell, reads the output, and goes on (ReAct).',
    samples: null,
    budget: 10
  },
  {
    name: 'mcts',
    label: 'Search',
    summary:
      'Several whole candidates as the vote draws them, then more where they disagree.',
    samples: 3,
    budget: 40
  },
  {
    name: 'explain',
    label: 'Explain',
    summary: 'An answer in words about the active cell; no cell is inserted.',
    samples: null,
    budget: null
  }
];

/** `GET config` of the scripted server: every strategy available. */
export const CONFIG: AgentConfig = {
  version: 1,
  backend: 'openai',
  model: 'scripted-model',
  base_url: null,
  api_key_set: true,
  model_info: { name: 'scripted-model', kind: 'openai', note: 'mocked' },
  strategies: CATALOG,
  capabilities: {
    strategies: CATALOG.map(s => s.name),
    chat: true,
    live_state: true,
    events: 'websocket',
    // Mocked pages answer no completion requests.
    inline_completion: false
  },
  limits: {
    max_samples: 32,
    max_budget: 1000,
    max_intent_chars: 20000,
    max_concurrent_jobs: 2
  },
  price: null,
  models: ['scripted-model'],
  prices: {}
};

/** A fully confined verdict, as the real server sends it with `done`. */
export const CONFINED: Confinement = {
  policy: 'require',
  status: 'confined',
  execute: true,
  message: 'candidates run in fully confined copies of your kernel.',
  layers: [],
  missing: []
};

/**
 * The end of a turn as the server sends it: each candidate as a
 * `candidate` event (from `seq` on), then `done`, which refers to them by
 * index and count and never repeats them.
 */
export function finishEvents(
  jobId: string,
  seq: number,
  candidates: Candidate[],
  options: {
    turnId?: string;
    chosen?: number | null;
    result?: Partial<DoneResult>;
    confinement?: Confinement;
  } = {}
): JobEvent[] {
  const sent = candidates.map((candidate, index) =>
    event(jobId, seq + index, 'candidate', `Candidate ${index + 1}`, {
      index,
      candidate
    })
  );
  const done = event(jobId, seq + candidates.length, 'done', 'Done', {
    turn_id: options.turnId ?? `turn-${jobId}`,
    confinement: options.confinement ?? CONFINED,
    result: {
      strategy: 'direct',
      answer: null,
      chosen:
        options.chosen === undefined
          ? candidates.length
            ? 0
            : null
          : options.chosen,
      candidates: candidates.length,
      stats: {
        iterations: 0,
        nodes: candidates.length,
        model_calls: 1,
        prompt_tokens: 900,
        completion_tokens: 120,
        executions: candidates.length,
        wall_time_s: 1.2,
        value: null
      },
      protections: null,
      ...options.result
    }
  });
  return [...sent, done];
}

/**
 * Plays the server API in the browser (REST routes + the events socket),
 * so the UI is tested on its own, whatever the server does.
 */
export class MockServer {
  bodies: any[] = [];
  sockets = new Map<string, WebSocketRoute>();
  /** Jobs whose socket is refused, to exercise the polling fallback. */
  pollOnly = new Set<string>();
  events = new Map<string, JobEvent[]>();
  pollStatus = new Map<string, string>();
  cancelled: string[] = [];

  /** Call first: the page is reloaded so the socket route applies to it. */
  async install(
    page: IJupyterLabPageFixture,
    config: AgentConfig = CONFIG
  ): Promise<void> {
    // The strategies on offer come from here, not from the real server.
    await page.route(/\/jupyter-data-agent\/config(\?.*)?$/, route =>
      route.fulfill({
        status: 200,
        contentType: 'application/json',
        body: JSON.stringify(config)
      })
    );
    // ServerConnection adds a cache-busting query to some requests.
    await page.route(/\/jupyter-data-agent\/turns(\?.*)?$/, async route => {
      if (route.request().method() === 'GET') {
        // The notebook's turns from elsewhere (GET turns): none here.
        await route.fulfill({
          status: 200,
          contentType: 'application/json',
          body: JSON.stringify({ version: 1, turns: [] })
        });
        return;
      }
      this.bodies.push(route.request().postDataJSON());
      const id = `job${this.bodies.length}`;
      await route.fulfill({
        status: 202,
        contentType: 'application/json',
        body: JSON.stringify({ job_id: id })
      });
    });
    await page.routeWebSocket(
      /\/jupyter-data-agent\/jobs\/[^/]+\/events/,
      ws => {
        const id = decodeURIComponent(
          ws.url().split('/jobs/')[1].split('/')[0]
        );
        if (this.pollOnly.has(id)) {
          void ws.close({ code: 1011, reason: 'no sockets here' });
          return;
        }
        this.sockets.set(id, ws);
      }
    );
    await page.route(
      /\/jupyter-data-agent\/jobs\/[^/?]+(\?.*)?$/,
      async route => {
        const url = new URL(route.request().url());
        const id = decodeURIComponent(url.pathname.split('/jobs/')[1]);
        const after = Number(url.searchParams.get('after') ?? -1);
        const events = (this.events.get(id) ?? []).filter(e => e.seq > after);
        await route.fulfill({
          status: 200,
          contentType: 'application/json',
          body: JSON.stringify({
            status: this.pollStatus.get(id) ?? 'running',
            events
          })
        });
      }
    );
    await page.route(
      /\/jupyter-data-agent\/jobs\/[^/]+\/cancel(\?.*)?$/,
      async route => {
        const id = decodeURIComponent(
          route.request().url().split('/jobs/')[1].split('/')[0]
        );
        this.cancelled.push(id);
        await route.fulfill({
          status: 200,
          contentType: 'application/json',
          body: '{"status": "cancelled"}'
        });
      }
    );
    // Socket routes only reach pages loaded after they were set.
    await page.reload();
  }

  async send(jobId: string, events: JobEvent[]): Promise<void> {
    await expect.poll(() => this.sockets.has(jobId)).toBe(true);
    const ws = this.sockets.get(jobId)!;
    for (const e of events) {
      ws.send(JSON.stringify(e));
    }
  }
}

/** An expression's repr in the current notebook's own kernel ('NameError' etc. when it raised). */
export async function kernelRepr(
  page: Page,
  expression: string
): Promise<string> {
  return page.evaluate(async expr => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    const kernel = widget.sessionContext.session.kernel;
    const reply = await kernel.requestExecute({
      code: '',
      silent: true,
      store_history: false,
      user_expressions: { v: expr }
    }).done;
    const v = reply.content.user_expressions.v;
    return v.status === 'ok' ? v.data['text/plain'] : `${v.ename}`;
  }, expression);
}
