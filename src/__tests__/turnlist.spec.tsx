/**
 * The sidebar's history of turns started elsewhere (GET turns): the list
 * request and an older server without it, the labels, which listed turns
 * are the sidebar's own, the replay of one from its events (and a job the
 * server no longer keeps), and how an entry renders and opens.
 */
import { ServerConnection } from '@jupyterlab/services';
import { ReactWidget } from '@jupyterlab/ui-components';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { Conversation } from '../components/Conversation';
import { initialJob } from '../events';
import { getTurnList } from '../handler';
import type { NotebookSession } from '../session';
import {
  IOutsideTurn,
  OutsideTurns,
  fetchTurns,
  ownTurns,
  replayExchange,
  replayJob,
  sourceLabel
} from '../turnlist';
import type { Candidate, JobEvent, JobPoll, TurnSummary } from '../wire';

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

function summary(jobId: string, patch: Partial<TurnSummary> = {}): TurnSummary {
  return {
    job_id: jobId,
    turn_id: `t-${jobId}`,
    source: 'magic',
    agent: null,
    strategy: 'vote',
    status: 'done',
    intent: `question ${jobId}`,
    notebook_path: 'nb.ipynb',
    started: 1700000000,
    finished: 1700000005,
    model: 'test-model',
    ...patch
  };
}

function candidate(code: string): Candidate {
  return {
    code,
    steps: [],
    explanation: 'counts the rows',
    result: null,
    score: null,
    support: 1,
    repaired: false,
    meta: {},
    trace: [],
    analysis: []
  } as unknown as Candidate;
}

function events(jobId: string): JobEvent[] {
  return [
    {
      version: 1,
      job_id: jobId,
      seq: 1,
      type: 'candidate',
      message: '',
      data: { index: 0, candidate: candidate('len(df)') }
    },
    {
      version: 1,
      job_id: jobId,
      seq: 2,
      type: 'done',
      message: 'Done',
      data: {
        result: {
          strategy: 'vote',
          answer: null,
          chosen: 0,
          candidates: 1,
          stats: {
            iterations: 0,
            nodes: 1,
            model_calls: 1,
            prompt_tokens: 100,
            completion_tokens: 10,
            executions: 1,
            wall_time_s: 1,
            model_time_s: 0.5,
            classes: [1],
            context: null
          },
          protections: null
        },
        turn_id: `t-${jobId}`,
        confinement: null
      }
    }
  ] as unknown as JobEvent[];
}

function poll(jobId: string, status: JobPoll['status'] = 'done'): JobPoll {
  return { version: 1, job_id: jobId, status, events: events(jobId) };
}

function notFound(): ServerConnection.ResponseError {
  return new ServerConnection.ResponseError(
    new Response('{"message": "no such job"}', { status: 404 }),
    'no such job'
  );
}

describe('GET turns', () => {
  it('asks for one notebook, its path quoted', async () => {
    const urls: string[] = [];
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: (async (request: Request) => {
        urls.push(request.url);
        return new Response(
          JSON.stringify({ version: 1, turns: [summary('j1')] }),
          { status: 200 }
        );
      }) as any
    });
    const reply = await getTurnList('work/my nb.ipynb', settings);
    expect(reply.turns.map(t => t.job_id)).toEqual(['j1']);
    const url = new URL(urls[0]);
    expect(url.pathname).toBe('/jupyter-data-agent/turns');
    expect(url.searchParams.get('notebook_path')).toBe('work/my nb.ipynb');
  });

  it('reads an older server without the endpoint as "no list", not an error', async () => {
    await expect(
      fetchTurns('nb.ipynb', () => Promise.reject(notFound()))
    ).resolves.toBeNull();
    const failed = new ServerConnection.ResponseError(
      new Response('', { status: 500 }),
      'boom'
    );
    await expect(
      fetchTurns('nb.ipynb', () => Promise.reject(failed))
    ).rejects.toBe(failed);
  });
});

describe('labels', () => {
  it('says where each turn was started', () => {
    expect(sourceLabel(summary('a', { source: 'magic' }))).toBe('from %%agent');
    expect(
      sourceLabel(summary('b', { source: 'mcp', agent: 'Claude Code' }))
    ).toBe('from Claude Code (MCP)');
    expect(sourceLabel(summary('c', { source: 'mcp' }))).toBe(
      'from an MCP client (MCP)'
    );
    expect(sourceLabel(summary('d', { source: 'acp', agent: 'Zed' }))).toBe(
      'from Zed (ACP)'
    );
    expect(sourceLabel(summary('e', { source: 'jupyter-ai' }))).toBe(
      'from Jupyter AI'
    );
    expect(sourceLabel(summary('f', { source: 'sidebar' }))).toBe(
      'from the sidebar in another tab'
    );
  });
});

describe('replaying a turn from its events', () => {
  it('gives the candidates and the outcome, as a live turn has them', () => {
    const job = replayJob(poll('j1'));
    expect(job.status).toBe('done');
    expect(job.candidates.map(c => c.code)).toEqual(['len(df)']);
    expect(job.turnId).toBe('t-j1');
    const exchange = replayExchange(summary('j1'), job);
    expect(exchange.key).toBe('outside-j1');
    expect(exchange.turnId).toBe('t-j1');
    expect(exchange.autoInsert).toBe(false);
    expect(exchange.created).toBe(1700000000 * 1000);
  });

  it('ends a job the server says was cancelled', () => {
    const job = replayJob({
      version: 1,
      job_id: 'j2',
      status: 'cancelled',
      events: []
    });
    expect(job.status).toBe('cancelled');
  });
});

describe('OutsideTurns', () => {
  function list(turns: TurnSummary[]) {
    return jest.fn(async () => ({ version: 1 as const, turns }));
  }

  it('lists oldest first and leaves out the sidebar’s own turns', async () => {
    const onChange = jest.fn();
    const turns = new OutsideTurns({
      path: () => 'nb.ipynb',
      onChange,
      // Newest first, as the server sends them.
      list: list([
        summary('live', { source: 'sidebar', started: 30 }),
        summary('mine', { source: 'sidebar', started: 20 }),
        summary('other', { source: 'sidebar', started: 15 }),
        summary('mcp', { source: 'mcp', started: 10 })
      ])
    });
    await turns.refresh();
    expect(onChange).toHaveBeenCalled();
    expect(turns.all.map(t => t.summary.job_id)).toEqual([
      'mcp',
      'other',
      'mine',
      'live'
    ]);
    let liveJob = initialJob('live');
    liveJob = { ...liveJob, turnId: null };
    const own = ownTurns(
      [{ turn_id: 't-mine' }],
      [replayExchange(summary('live'), liveJob)].map(e => ({
        ...e,
        turnId: null
      }))
    );
    // Stored here ("mine") or live here ("live", by its job): not shown again.
    expect(turns.visible(own).map(t => t.summary.job_id)).toEqual([
      'mcp',
      'other'
    ]);
  });

  it('hides every turn started before a clear, replayed or not, on every clock', async () => {
    const turns = new OutsideTurns({
      path: () => 'nb.ipynb',
      onChange: () => undefined,
      // A server clock ahead of the browser's: the clear is after its turns still.
      list: list([
        summary('later', { source: 'mcp', started: 4e9 + 10 }),
        summary('ahead', { source: 'sidebar', started: 4e9 }),
        summary('mcp', { source: 'mcp', started: 10 })
      ]),
      poll: async jobId => poll(jobId)
    });
    await turns.refresh();
    await turns.open('mcp');
    expect(turns.clearTime()).toBe(4e9 + 10);
    const cleared = ownTurns([], [], 4e9);
    expect(turns.visible(cleared).map(t => t.summary.job_id)).toEqual([
      'later'
    ]);
    // Never cleared: all three (none is the sidebar's own).
    expect(turns.visible(ownTurns([], [])).length).toBe(3);
    const now = Date.now() / 1000;
    const early = new OutsideTurns({
      path: () => 'nb.ipynb',
      onChange: () => undefined,
      list: list([summary('old', { started: 10 })])
    });
    await early.refresh();
    expect(early.clearTime()).toBeGreaterThanOrEqual(now);
  });

  it('treats an older server as having no list', async () => {
    const turns = new OutsideTurns({
      path: () => 'nb.ipynb',
      onChange: () => undefined,
      list: () => Promise.reject(notFound())
    });
    await turns.refresh();
    expect(turns.available).toBe(false);
    expect(turns.all).toEqual([]);
  });

  it('drops an answer overtaken by a newer request', async () => {
    let release: (v: unknown) => void = () => undefined;
    const slow = new Promise(resolve => (release = resolve));
    const replies = [
      slow.then(() => ({ version: 1 as const, turns: [summary('old')] })),
      Promise.resolve({ version: 1 as const, turns: [summary('new')] })
    ];
    const turns = new OutsideTurns({
      path: () => 'nb.ipynb',
      onChange: () => undefined,
      list: () => replies.shift()!
    });
    const first = turns.refresh();
    await turns.refresh();
    release(null);
    await first;
    expect(turns.all.map(t => t.summary.job_id)).toEqual(['new']);
  });

  it('replays a turn on demand, keeps it over a refresh, and says when it expired', async () => {
    const polled: string[] = [];
    const turns = new OutsideTurns({
      path: () => 'nb.ipynb',
      onChange: () => undefined,
      list: list([summary('j1'), summary('gone')]),
      poll: async jobId => {
        polled.push(jobId);
        if (jobId === 'gone') {
          throw notFound();
        }
        return poll(jobId);
      }
    });
    await turns.refresh();
    await turns.open('j1');
    await turns.open('gone');
    const replay = turns.all.find(t => t.summary.job_id === 'j1')!.replay;
    expect(replay.kind).toBe('shown');
    expect(turns.exchange('outside-j1')?.job.candidates.length).toBe(1);
    expect(turns.all.find(t => t.summary.job_id === 'gone')!.replay.kind).toBe(
      'expired'
    );
    // A replayed turn stays shown when it is stored here (it was inserted).
    await turns.refresh();
    expect(turns.exchange('outside-j1')).not.toBeNull();
    const own = ownTurns([{ turn_id: 't-j1' }], []);
    expect(turns.visible(own).map(t => t.summary.job_id)).toContain('j1');
    expect(turns.replace('outside-j1', { selected: 0 })?.key).toBe(
      'outside-j1'
    );
    turns.close('j1');
    expect(turns.exchange('outside-j1')).toBeNull();
    expect(polled).toEqual(['j1', 'gone']);
  });
});

/** What Conversation reads of a session, with outside entries only. */
class FakeSession {
  constructor(public outside: IOutsideTurn[]) {}
  opened: [string, boolean][] = [];
  timeline() {
    return this.outside.map(o => ({
      turn: null,
      exchange: o.replay.kind === 'shown' ? o.replay.exchange : null,
      proposal: null,
      outside: o
    }));
  }
  get running() {
    return null;
  }
  strategy = 'vote';
  suggestions = { suggestion: () => null };
  cellIndex() {
    return -1;
  }
  turnCellIds() {
    return [];
  }
  openOutsideTurn(jobId: string, open = true) {
    this.opened.push([jobId, open]);
    return Promise.resolve();
  }
  insert = jest.fn(() => true);
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
        prices={{}}
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

describe('the history shows turns started elsewhere', () => {
  let host: Host | null = null;
  afterEach(() => {
    React.act(() => host?.dispose());
    host = null;
  });

  it('labels each by source, with its question, strategy and status', () => {
    const session = new FakeSession([
      { summary: summary('j1'), replay: { kind: 'closed' } },
      {
        summary: summary('j2', {
          source: 'mcp',
          agent: 'Claude Code',
          strategy: 'react',
          status: 'running'
        }),
        replay: { kind: 'closed' }
      }
    ]);
    host = show(session);
    const entries = host.node.querySelectorAll('.jp-DataAgent-outsideTurn');
    expect(entries.length).toBe(2);
    expect(entries[0].textContent).toContain('from %%agent');
    expect(entries[0].textContent).toContain('question j1');
    expect(entries[0].textContent).toContain('vote · done');
    expect(entries[1].textContent).toContain('from Claude Code (MCP)');
    expect(entries[1].textContent).toContain('react · running');
    // A button: reached and pressed from the keyboard.
    const button = entries[1].querySelector('button')!;
    expect(button.getAttribute('aria-expanded')).toBe('false');
    React.act(() => button.click());
    expect(session.opened).toEqual([['j2', true]]);
  });

  it('shows a replayed result with Insert, and an expired one in words', () => {
    const job = replayJob(poll('j1'));
    const session = new FakeSession([
      {
        summary: summary('j1'),
        replay: { kind: 'shown', exchange: replayExchange(summary('j1'), job) }
      },
      { summary: summary('j3'), replay: { kind: 'expired' } }
    ]);
    host = show(session);
    const [shown, expired] = Array.from(
      host.node.querySelectorAll('.jp-DataAgent-outsideTurn')
    );
    expect(shown.querySelector('button')!.getAttribute('aria-expanded')).toBe(
      'true'
    );
    expect(shown.querySelector('.jp-DataAgent-code')?.textContent).toContain(
      'len(df)'
    );
    const insert = Array.from(shown.querySelectorAll('button')).find(
      b => b.textContent === 'Insert'
    )!;
    React.act(() => insert.click());
    expect(session.insert).toHaveBeenCalledWith(
      expect.objectContaining({ key: 'outside-j1' }),
      0
    );
    expect(expired.textContent).toContain(
      'This turn has expired on the server.'
    );
  });
});
