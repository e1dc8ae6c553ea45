/**
 * What the panel shows again after a reload (N3) and a question answered
 * in words (N6): the stored turn keeps the answer, the usage and gauge, how
 * each candidate ran and the vote, and the cell an edit replaces.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { Conversation } from '../components/Conversation';
import { initialJob, reduceJob } from '../events';
import { IExchange, turnOfExchange } from '../exchange';
import { ITurn, parseTurn } from '../metadata';
import type { NotebookSession } from '../session';
import type { Candidate, JobEvent, SearchStats } from '../wire';

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

/** A rendermime whose renderers show their source as text. */
class TextRenderer extends Widget {
  renderModel(model: { data: Record<string, unknown> }): Promise<void> {
    this.node.textContent = String(
      model.data['text/markdown'] ?? model.data['text/plain'] ?? ''
    );
    return Promise.resolve();
  }
}
const rendermime = {
  createRenderer: () => new TextRenderer(),
  preferredMimeType: () => 'text/plain'
} as any;

const STATS: SearchStats = {
  iterations: 0,
  nodes: 3,
  model_calls: 1,
  prompt_tokens: 1200,
  completion_tokens: 90,
  executions: 3,
  wall_time_s: 4.5,
  model_time_s: 3.1,
  classes: [2, 1],
  context: {
    prompt_tokens: 1200,
    window: 4096,
    cells_dropped: 0,
    exemplars_dropped: 0,
    outputs_cut: 0,
    over_budget: false,
    mentioned: [],
    frames_cut: []
  }
} as unknown as SearchStats;

function candidate(code: string, support: number, status = 'ok'): Candidate {
  return {
    code,
    steps: [],
    explanation: '',
    result: {
      status,
      outputs: [],
      value: null,
      ename: status === 'error' ? 'KeyError' : null,
      evalue: null,
      traceback: [],
      duration_s: 0.25,
      pid: null,
      limit: null,
      truncated: false,
      namespace: null
    },
    score: null,
    support,
    repaired: code.includes('fixed'),
    meta: {},
    trace: [],
    analysis: []
  } as unknown as Candidate;
}

function doneEvent(
  seq: number,
  candidates: number,
  answer: string | null,
  chosen: number | null
): JobEvent {
  return {
    version: 1,
    job_id: 'j',
    seq,
    type: 'done',
    message: 'Done',
    data: {
      result: {
        strategy: 'vote',
        answer,
        chosen,
        candidates,
        stats: STATS,
        protections: null,
        model: 'big-model'
      },
      turn_id: 't1',
      confinement: null
    }
  } as unknown as JobEvent;
}

function exchangeWith(
  candidates: Candidate[],
  answer: string | null,
  edit = false
): IExchange {
  let job = initialJob('j');
  candidates.forEach((c, i) => {
    job = reduceJob(job, {
      version: 1,
      job_id: 'j',
      seq: i + 1,
      type: 'candidate',
      message: '',
      data: { index: i, candidate: c }
    } as JobEvent);
  });
  job = reduceJob(
    job,
    doneEvent(
      candidates.length + 1,
      candidates.length,
      answer,
      candidates.length ? 0 : null
    )
  );
  return {
    key: 'x1',
    intent: 'How many rows?',
    strategy: 'vote',
    job,
    turnId: 't1',
    anchorCellId: 'c1',
    editCellId: edit ? 'c2' : null,
    editKind: edit ? 'fix' : null,
    instruction: '',
    selected: 0,
    autoInsert: false,
    created: 1000
  };
}

/** Stored, written to the notebook as JSON and read back. */
function reloaded(exchange: IExchange): ITurn {
  return parseTurn(JSON.parse(JSON.stringify(turnOfExchange(exchange))))!;
}

class FakeSession {
  constructor(
    private _turn: ITurn | null,
    private _exchange: IExchange | null = null
  ) {}
  timeline() {
    return [{ turn: this._turn, exchange: this._exchange, proposal: null }];
  }
  get running() {
    return null;
  }
  strategy = 'direct';
  suggestions = { suggestion: () => null };
  cellIndex(id: string | null) {
    return id === 'c2' ? 1 : -1;
  }
  turnCellIds() {
    return [];
  }
}

class Host extends ReactWidget {
  constructor(private _session: FakeSession) {
    super();
  }
  protected render(): JSX.Element {
    return (
      <Conversation
        session={this._session as unknown as NotebookSession}
        rendermime={rendermime}
        strategies={null}
        prices={{
          price: null,
          prices: { 'big-model': { input: 1, output: 2 } }
        }}
      />
    );
  }
}

function show(session: FakeSession): Host {
  const host = new Host(session);
  React.act(() => {
    Widget.attach(host, document.body);
    MessageLoop.sendMessage(host, Widget.Msg.UpdateRequest);
  });
  return host;
}

describe('a turn read back after a reload', () => {
  let host: Host | null = null;
  afterEach(() => {
    React.act(() => host?.dispose());
    host = null;
  });

  it('keeps the vote, how each candidate ran, the usage and the gauge', () => {
    const turn = reloaded(
      exchangeWith(
        [
          candidate('len(df)', 2),
          candidate('df.x', 1, 'error'),
          candidate('len(df) # fixed', 2)
        ],
        null,
        true
      )
    );
    expect(turn.runs?.map(r => r?.support)).toEqual([2, 1, 2]);
    expect(turn.classes).toEqual([2, 1]);
    expect(turn.usage?.promptTokens).toBe(1200);
    // The model it ran on is stored with it: its cost after a reload is that model's (M1).
    expect(turn.usage?.model).toBe('big-model');
    expect(turn.context?.window).toBe(4096);
    expect(turn.edits_cell).toBe('c2');

    host = show(new FakeSession(turn));
    const node = host.node;
    expect(node.querySelector('.jp-DataAgent-editsCell')?.textContent).toBe(
      'edits cell 2'
    );
    expect(node.querySelector('.jp-DataAgent-status')?.textContent).toBe(
      'ran in 0.25 s'
    );
    expect(node.querySelector('.jp-DataAgent-facts')?.textContent).toContain(
      '2 of 3 agree (classes 2 · 1)'
    );
    expect(node.querySelector('.jp-DataAgent-usage')?.textContent).toContain(
      '1,200'
    );
    expect(node.querySelector('.jp-DataAgent-usage')?.textContent).toContain(
      '≈ $'
    );
    expect(node.querySelector('.jp-DataAgent-gauge')).not.toBeNull();
    // The non-chosen candidates can be read: tab 2 shows the one that raised.
    const tabs = node.querySelectorAll<HTMLButtonElement>('.jp-DataAgent-tab');
    expect(tabs.length).toBe(3);
    React.act(() => tabs[1].click());
    expect(node.querySelector('.jp-DataAgent-code')?.textContent).toContain(
      'df.x'
    );
    expect(node.querySelector('.jp-DataAgent-status')?.textContent).toBe(
      'error: KeyError'
    );
    React.act(() => tabs[2].click());
    expect(node.querySelector('.jp-DataAgent-facts')?.textContent).toContain(
      'repaired'
    );
  });

  it('keeps an answer in words (Explain, or a question answered without code)', () => {
    const prose = 'The **delay** column is in minutes.';
    const turn = reloaded(exchangeWith([], prose));
    expect(turn.answer).toBe(prose);
    host = show(new FakeSession(turn));
    expect(host.node.querySelector('.jp-DataAgent-prose')?.textContent).toBe(
      prose
    );
    expect(host.node.querySelector('.jp-DataAgent-usage')).not.toBeNull();
    // No empty candidate bar under an answer.
    expect(host.node.querySelector('.jp-DataAgent-candidateBar')).toBeNull();
  });
});

describe('a live answer in words (N6)', () => {
  it('is shown as the answer, not "No candidate came back"', () => {
    const exchange = exchangeWith([], 'It is in minutes.');
    const host = show(new FakeSession(null, exchange));
    expect(host.node.querySelector('.jp-DataAgent-prose')?.textContent).toBe(
      'It is in minutes.'
    );
    expect(host.node.textContent).not.toContain('No candidate came back');
    React.act(() => host.dispose());
  });
});

describe('a rejected turn', () => {
  it('offers one Insert button, not two', () => {
    const exchange = exchangeWith([candidate('len(df)', 1)], null);
    const turn = { ...turnOfExchange(exchange), status: 'rejected' as const };
    const host = show(new FakeSession(turn, exchange));
    const inserts = Array.from(host.node.querySelectorAll('button')).filter(
      b => b.textContent === 'Insert'
    );
    expect(inserts.length).toBe(1);
    React.act(() => host.dispose());
  });
});

describe('a pending turn after a reload (m5)', () => {
  /** A session whose notebook still holds the turn's suggestion. */
  class PlacedSession extends FakeSession {
    decided: string[] = [];
    suggestions = {
      suggestion: () => ({ status: 'suggested', index: 0 }),
      accept: (id: string) => this.decided.push(`accept ${id}`),
      reject: (id: string) => this.decided.push(`reject ${id}`)
    } as any;
  }

  it('keeps its Accept and Reject, and its steps as a list', () => {
    const stepped = {
      ...candidate('# Step 1: load\nx = 1\n# Step 2: count\nlen(df)', 1),
      steps: [
        { number: 1, explanation: 'Load the table.', code: 'x = 1' },
        { number: 2, explanation: 'Count its rows.', code: 'len(df)' }
      ],
      explanation: 'Step 1: Load the table.\nStep 2: Count its rows.'
    } as Candidate;
    const turn = reloaded(exchangeWith([stepped], null));
    expect(turn.steps).toEqual([
      [
        { number: 1, explanation: 'Load the table.' },
        { number: 2, explanation: 'Count its rows.' }
      ]
    ]);
    const session = new PlacedSession(turn);
    const host = show(session);
    const items = host.node.querySelectorAll('.jp-DataAgent-steps li');
    expect(Array.from(items).map(li => li.textContent)).toEqual([
      'Load the table.',
      'Count its rows.'
    ]);
    const accept = host.node.querySelector<HTMLButtonElement>(
      '.jp-DataAgent-panelAccept'
    );
    const reject = host.node.querySelector<HTMLButtonElement>(
      '.jp-DataAgent-panelReject'
    );
    React.act(() => reject!.click());
    React.act(() => accept!.click());
    expect(session.decided).toEqual(['reject t1', 'accept t1']);
    React.act(() => host.dispose());
  });

  it('a turn stored before steps were kept still shows its explanation', () => {
    const turn = parseTurn({
      turn_id: 't0',
      intent: 'q',
      code: 'x',
      status: 'pending',
      cell_ids: [],
      candidates: ['x'],
      created: 1,
      explanations: ['Step 1: one.'],
      steps: [[{ number: 'x' }, 'junk']]
    })!;
    expect(turn.steps).toEqual([[]]);
    const host = show(new FakeSession(turn));
    expect(
      host.node.querySelector('.jp-DataAgent-explanation')?.textContent
    ).toBe('Step 1: one.');
    React.act(() => host.dispose());
  });
});
