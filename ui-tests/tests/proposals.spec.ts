/**
 * Outside agents' proposals (issue 25): cells and edits proposed by an
 * agent over MCP appear once in the notebook as suggestions labelled with
 * the agent's name, and in the sidebar with their output and Accept /
 * Reject; the decision goes back to the server.
 *
 * First against a scripted proposals API (routes played in the browser),
 * then end to end: a Python script acting as an MCP client (the SDK's
 * Streamable HTTP client) proposes a cell and an edit to the real server.
 */
import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';
import { execFile } from 'child_process';
import * as path from 'path';
import { promisify } from 'util';

import type { Proposal, ProposalsReply } from '../../src/wire';
import {
  DF_CODE,
  notebookCells,
  notebookJson,
  openPanel,
  panel,
  reloadAndReopen,
  screenshotPath
} from './helpers';

const run = promisify(execFile);

const AGENT_SCRIPT = path.resolve(__dirname, '..', 'fixtures', 'mcp_agent.py');

const SUM = 'df["delay"].sum()';

/** A notebook: the DataFrame cell (`df-cell`) and a sum of its delays (`sum-cell`). */
function twoCells(): string {
  return notebookJson([
    {
      cell_type: 'code',
      execution_count: null,
      id: 'df-cell',
      metadata: {},
      outputs: [],
      source: DF_CODE
    },
    {
      cell_type: 'code',
      execution_count: null,
      id: 'sum-cell',
      metadata: {},
      outputs: [],
      source: SUM
    }
  ]);
}

async function openNotebook(
  page: IJupyterLabPageFixture,
  tmpPath: string,
  name: string
): Promise<void> {
  await page.contents.uploadContent(twoCells(), 'text', `${tmpPath}/${name}`);
  await page.filebrowser.refresh();
  expect(await page.notebook.open(name)).toBe(true);
}

function suggestions(page: Page) {
  return page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-suggestion'
  );
}

function proposalEntry(page: Page, id: string) {
  return panel(page).locator(
    `.jp-DataAgent-proposal[data-proposal-id="${id}"]`
  );
}

const STREAM = (text: string) => ({
  output_type: 'stream',
  name: 'stdout',
  text,
  data: {},
  metadata: {},
  ename: null,
  evalue: null,
  traceback: [],
  truncated: false
});

function proposal(id: string, patch: Partial<Proposal>): Proposal {
  return {
    id,
    notebook_path: '',
    kind: 'cell',
    code: '',
    explanation: '',
    agent: 'Claude Code',
    after_cell_id: null,
    cell_id: null,
    status: 'pending',
    final_source: null,
    result: null,
    note: '',
    created: Date.now() / 1000,
    decided: null,
    ...patch
  };
}

/** The proposals API, played in the browser: the list, and decisions. */
class MockProposals {
  proposals: Proposal[] = [];
  activity: ProposalsReply['activity'] = [];
  /** GET proposals requests served, with the notebook each named. */
  gets: string[] = [];
  decisions: { id: string; body: any }[] = [];

  async install(page: Page): Promise<void> {
    await page.route(/\/jupyter-data-agent\/proposals(\?.*)?$/, route => {
      const url = new URL(route.request().url());
      this.gets.push(url.searchParams.get('notebook_path') ?? '');
      const body: ProposalsReply = {
        proposals: this.proposals,
        activity: this.activity
      };
      return route.fulfill({
        status: 200,
        contentType: 'application/json',
        body: JSON.stringify(body)
      });
    });
    await page.route(
      /\/jupyter-data-agent\/proposals\/[^/?]+\/decision(\?.*)?$/,
      route => {
        const id = decodeURIComponent(
          route.request().url().split('/proposals/')[1].split('/')[0]
        );
        const body = route.request().postDataJSON();
        this.decisions.push({ id, body });
        const found = this.proposals.find(p => p.id === id)!;
        found.status = body.decision;
        found.final_source =
          body.decision === 'rejected' ? null : body.final_source;
        found.decided = Date.now() / 1000;
        return route.fulfill({
          status: 200,
          contentType: 'application/json',
          body: JSON.stringify({ proposal: found })
        });
      }
    );
  }

  /** Wait until the page asked `n` more times: every answer seen was acted on. */
  async polled(n: number): Promise<void> {
    const from = this.gets.length;
    await expect
      .poll(() => this.gets.length, { timeout: 30_000 })
      .toBeGreaterThanOrEqual(from + n);
  }
}

test.describe('against a scripted proposals API', () => {
  test('proposals appear once, labelled, with Accept and Reject; decisions go back', async ({
    page,
    tmpPath
  }) => {
    const api = new MockProposals();
    const MEAN = 'df.groupby("airline")["delay"].mean()';
    const MEDIAN = 'df["delay"].median()';
    api.proposals = [
      proposal('p-cell', {
        code: MEAN,
        explanation: 'The mean delay of each airline.',
        after_cell_id: 'df-cell',
        result: {
          status: 'ok',
          outputs: [STREAM('AA 20.0\nDL 5.0\nUA 20.0\n')],
          value: null,
          ename: null,
          evalue: null,
          traceback: [],
          duration_s: 0.05,
          pid: 7,
          limit: null,
          truncated: false,
          namespace: null
        }
      }),
      proposal('p-edit', {
        kind: 'edit',
        agent: 'Codex',
        code: MEDIAN,
        explanation: 'The median resists the outliers.',
        cell_id: 'sum-cell'
      }),
      proposal('p-gone', {
        kind: 'edit',
        code: 'print(1)',
        explanation: 'Edits a cell that was deleted.',
        cell_id: 'deleted-cell'
      }),
      proposal('p-decided', {
        code: 'df.tail()',
        explanation: 'Decided in another window.',
        status: 'rejected',
        decided: Date.now() / 1000
      })
    ];
    api.activity = [
      { agent: 'Claude Code', tries: 4, proposals: 3 },
      { agent: 'Codex', tries: 0, proposals: 1 }
    ];
    await api.install(page);
    await openNotebook(page, tmpPath, 'proposals-mocked.ipynb');
    await openPanel(page);

    // The cell below df-cell, and the edit as a diff over sum-cell.
    await expect(suggestions(page)).toHaveCount(2);
    let cells = await notebookCells(page);
    expect(cells.map(c => c.id)).toEqual([
      'df-cell',
      expect.any(String),
      'sum-cell'
    ]);
    expect(cells[1].source).toBe(MEAN);
    expect(cells[1].metadata.jupyter_data_agent).toMatchObject({
      turn_id: 'proposal-p-cell',
      status: 'pending'
    });
    expect(cells[2].source).toBe(SUM);
    const cellBar = suggestions(page)
      .nth(0)
      .locator('.jp-DataAgent-suggestionBar');
    await expect(cellBar.locator('.jp-DataAgent-suggestionLabel')).toHaveText(
      'Suggested by Claude Code'
    );
    const edited = page.locator(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-replacing'
    );
    await expect(edited.locator('.jp-DataAgent-suggestionLabel')).toHaveText(
      'Suggested edit by Codex'
    );
    await expect(edited.locator('.cm-changedLine').last()).toContainText(
      'median'
    );
    expect(api.gets[0]).toMatch(/proposals-mocked\.ipynb$/);

    // The sidebar: one line per agent, each proposal with its agent, the
    // output it gave in a copy, and the one that cannot be shown, why.
    const lines = panel(page).locator('.jp-DataAgent-agentActivity');
    await expect(lines).toHaveText([
      'Claude Code: 4 tries in copies, 3 proposals',
      'Codex: 0 tries in copies, 1 proposal'
    ]);
    const cellEntry = proposalEntry(page, 'p-cell');
    await expect(cellEntry.locator('.jp-DataAgent-agentName')).toHaveText(
      'Claude Code'
    );
    await expect(cellEntry.locator('.jp-DataAgent-explanation')).toContainText(
      'The mean delay of each airline.'
    );
    await expect(cellEntry.locator('.jp-DataAgent-output')).toContainText(
      'DL 5.0'
    );
    await expect(
      proposalEntry(page, 'p-edit').locator('.jp-DataAgent-agentName')
    ).toHaveText('Codex');
    await expect(
      proposalEntry(page, 'p-edit').locator('.jp-DataAgent-editsCell')
    ).toHaveText('edits cell 3');
    await expect(
      proposalEntry(page, 'p-gone').locator('.jp-DataAgent-blocked')
    ).toContainText('no longer in the notebook');
    await expect(proposalEntry(page, 'p-decided')).toHaveCount(0);
    await page.screenshot({ path: screenshotPath('proposals-mocked.png') });

    // Polled again and again: still placed once.
    await api.polled(2);
    await expect(suggestions(page)).toHaveCount(2);
    expect(await notebookCells(page)).toHaveLength(3);

    // Saved and reloaded: the tags say they are there; nothing is added.
    await page.notebook.save();
    await reloadAndReopen(page, 'proposals-mocked.ipynb');
    await openPanel(page);
    await api.polled(2);
    await expect(suggestions(page)).toHaveCount(2);
    cells = await notebookCells(page);
    expect(cells).toHaveLength(3);
    await expect(
      proposalEntry(page, 'p-cell').locator('.jp-DataAgent-agentName')
    ).toHaveText('Claude Code');
    // Labelled after the reload too (from the stored turn).
    await expect(
      suggestions(page).nth(0).locator('.jp-DataAgent-suggestionLabel')
    ).toHaveText('Suggested by Claude Code');

    // Accept from the sidebar with the keyboard: the cell stays, decided.
    const accept = proposalEntry(page, 'p-cell').locator(
      '.jp-DataAgent-panelAccept'
    );
    await accept.focus();
    await page.keyboard.press('Enter');
    await expect(suggestions(page)).toHaveCount(1);
    await expect
      .poll(() => api.decisions.filter(d => d.id === 'p-cell').length)
      .toBe(1);
    expect(api.decisions[0].body).toEqual({
      version: 1,
      decision: 'accepted',
      final_source: MEAN
    });
    await expect(
      proposalEntry(page, 'p-cell').locator(
        '.jp-DataAgent-chip.jp-mod-accepted'
      )
    ).toBeVisible();

    // Reject the edit from its suggestion bar: the cell keeps its code.
    await edited.locator('.jp-DataAgent-reject').click();
    await expect(suggestions(page)).toHaveCount(0);
    await expect
      .poll(() => api.decisions.filter(d => d.id === 'p-edit').length)
      .toBe(1);
    expect(api.decisions.find(d => d.id === 'p-edit')!.body).toMatchObject({
      decision: 'rejected'
    });
    cells = await notebookCells(page);
    expect(cells.map(c => c.source)).toEqual([DF_CODE, MEAN, SUM]);

    // An edit of the accepted cell is reported, with what it holds now.
    const CHANGED = `${MEAN}.round(1)`;
    await page.notebook.setCell(1, 'code', CHANGED);
    // Sent once typing pauses: the last word is the cell's code.
    await expect
      .poll(
        () =>
          api.decisions.filter(d => d.id === 'p-cell').pop()?.body.final_source
      )
      .toBe(CHANGED);
    expect(
      api.decisions.filter(d => d.id === 'p-cell').pop()!.body.decision
    ).toBe('edited');

    // Decided proposals are not placed again.
    await api.polled(2);
    await expect(suggestions(page)).toHaveCount(0);
    expect(await notebookCells(page)).toHaveLength(3);
  });
});

test.describe('end to end, an MCP client proposing to the real server', () => {
  test('a script proposes a cell and an edit; Accept inserts, Reject leaves the cell', async ({
    page,
    tmpPath,
    baseURL
  }) => {
    test.setTimeout(240_000);
    const name = 'proposals-mcp.ipynb';
    await openNotebook(page, tmpPath, name);
    // The live kernel holds df: the copies the agent runs in start from it.
    await page.notebook.runCell(0, true);
    await openPanel(page);
    const notebook = `${tmpPath}/${name}`;
    const mcpUrl = `${baseURL}/jupyter-data-agent/mcp`;
    const agent = async (...args: string[]) => {
      const { stdout } = await run('python', [AGENT_SCRIPT, mcpUrl, ...args], {
        timeout: 120_000
      });
      return JSON.parse(stdout.trim().split('\n').pop()!);
    };
    const ids = await agent('propose', notebook, 'df-cell', 'sum-cell');
    expect(typeof ids.cell).toBe('string');
    expect(typeof ids.edit).toBe('string');

    // Both appear, labelled with the agent's name from its client info.
    await expect(suggestions(page)).toHaveCount(2, { timeout: 30_000 });
    await expect(
      suggestions(page).nth(0).locator('.jp-DataAgent-suggestionLabel')
    ).toHaveText('Suggested by Claude Code');
    const edited = page.locator(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-DataAgent-replacing'
    );
    await expect(edited.locator('.jp-DataAgent-suggestionLabel')).toHaveText(
      'Suggested edit by Claude Code'
    );
    await expect(panel(page).locator('.jp-DataAgent-agentActivity')).toHaveText(
      ['Claude Code: 1 try in copies, 2 proposals']
    );
    const cellEntry = proposalEntry(page, ids.cell);
    await expect(cellEntry.locator('.jp-DataAgent-agentName')).toHaveText(
      'Claude Code'
    );
    // The output it gave in a copy of the live kernel.
    await expect(cellEntry.locator('.jp-DataAgent-output')).toContainText('DL');
    await page.screenshot({ path: screenshotPath('proposals-mcp.png') });

    // Accept the cell from its suggestion bar: it is in the notebook.
    await suggestions(page)
      .nth(0)
      .locator('.jp-DataAgent-suggestionBar .jp-DataAgent-accept')
      .click();
    // Reject the edit from the sidebar: the cell keeps its code.
    await proposalEntry(page, ids.edit)
      .locator('.jp-DataAgent-panelReject')
      .click();
    await expect(suggestions(page)).toHaveCount(0);
    const cells = await notebookCells(page);
    expect(cells.map(c => c.source)).toEqual([
      DF_CODE,
      'df.groupby("airline")["delay"].mean()',
      SUM
    ]);

    // The agent learns the decisions: proposal_status, and the REST API.
    await expect
      .poll(async () => (await agent('status', ids.cell)).status, {
        timeout: 30_000
      })
      .toBe('accepted');
    const status = await agent('status', ids.cell);
    expect(status.final_source).toBe('df.groupby("airline")["delay"].mean()');
    expect((await agent('status', ids.edit)).status).toBe('rejected');
    const reply = await page.request.get(
      `${baseURL}/jupyter-data-agent/proposals/${ids.edit}`
    );
    expect(reply.ok()).toBe(true);
    expect((await reply.json()).proposal.status).toBe('rejected');
  });
});
