/**
 * Exchanges are immutable and ExchangeView is memoized: an event for one
 * request re-renders that request's view, and not the others'.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { Conversation } from '../components/Conversation';
import { initialJob, reduceJob } from '../events';
import { ExchangeList, IExchange } from '../exchange';
import type { NotebookSession } from '../session';
import type { ISuggestionState } from '../suggestions';
import type { JobEvent } from '../wire';

/** Progress renders once per render of its exchange's view: count those. */
const renders: string[] = [];
jest.mock('../components/Progress', () => ({
  Progress: (props: { job: { jobId: string | null } }) => {
    renders.push(props.job.jobId ?? '?');
    return null;
  }
}));

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

function exchange(key: string, jobId: string): IExchange {
  return {
    key,
    intent: `Question ${key}`,
    strategy: 'direct',
    job: { ...initialJob(jobId), status: 'running' },
    turnId: `turn-${key}`,
    anchorCellId: null,
    editCellId: null,
    editKind: null,
    instruction: '',
    selected: 0,
    autoInsert: false,
    created: 0
  };
}

function progress(jobId: string, seq: number): JobEvent {
  return {
    version: 1,
    job_id: jobId,
    seq,
    type: 'progress',
    message: `step ${seq}`,
    data: { state: 'generating' }
  } as unknown as JobEvent;
}

/** The session as the conversation reads it: its exchanges, no stored turns. */
class FakeSession {
  list = new ExchangeList();
  states = new Map<string, ISuggestionState>();
  get exchanges(): readonly IExchange[] {
    return this.list.all;
  }
  timeline() {
    return this.exchanges.map(exchange => ({ turn: null, exchange }));
  }
  get running() {
    return this.exchanges[0] ?? null;
  }
  suggestions = {
    suggestion: (turnId: string) => this.states.get(turnId) ?? null
  };
  cellIndex() {
    return -1;
  }
  turnCellIds() {
    return [];
  }
}

/** The server's prices: one object while they stay the same, as the panel keeps them. */
const PRICES = { price: null, prices: {} };

/** Renders the conversation afresh on each update, as the sidebar does. */
class Host extends ReactWidget {
  constructor(private _session: FakeSession) {
    super();
  }
  protected render(): JSX.Element {
    return (
      <Conversation
        session={this._session as unknown as NotebookSession}
        rendermime={null as any}
        strategies={null}
        prices={PRICES}
      />
    );
  }
}

describe('ExchangeView re-renders', () => {
  let host: Host;
  let session: FakeSession;

  const render = () =>
    React.act(() => {
      MessageLoop.sendMessage(host, Widget.Msg.UpdateRequest);
    });

  /** What the session does on an event (NotebookSession._setJob). */
  const update = (key: string, event: JobEvent) => {
    const current = session.list.get(key)!;
    const job = reduceJob(current.job, event);
    if (job !== current.job) {
      session.list.replace(key, { job });
    }
  };

  beforeEach(() => {
    renders.length = 0;
    session = new FakeSession();
    session.list.add(exchange('a', 'job-a'));
    session.list.add(exchange('b', 'job-b'));
    host = new Host(session);
    React.act(() => Widget.attach(host, document.body));
  });

  afterEach(() => {
    React.act(() => host.dispose());
  });

  it('renders only the exchange an event was for', () => {
    render();
    expect(renders).toEqual(['job-a', 'job-b']);
    renders.length = 0;

    update('a', progress('job-a', 1));
    render();
    expect(renders).toEqual(['job-a']);

    update('b', progress('job-b', 1));
    update('b', progress('job-b', 2));
    render();
    expect(renders).toEqual(['job-a', 'job-b']);
    expect(host.node.querySelectorAll('.jp-DataAgent-exchange')).toHaveLength(
      2
    );
  });

  it('renders none when nothing changed, and none for a replayed event', () => {
    render();
    renders.length = 0;
    render();
    expect(renders).toEqual([]);
    // A replay (seq already seen) leaves the job, and so the exchange, as it was.
    const before = session.exchanges[0];
    update('a', progress('job-a', 1));
    const after = session.exchanges[0];
    update('a', progress('job-a', 1));
    expect(session.exchanges[0]).toBe(after);
    expect(after).not.toBe(before);
    renders.length = 0;
    render();
    render();
    expect(renders).toEqual(['job-a']);
  });

  it('re-renders an exchange whose suggestion changed, and only that one', () => {
    render();
    renders.length = 0;
    session.states.set('turn-b', {
      turnId: 'turn-b',
      intent: 'Question b',
      candidates: [],
      mode: 'single',
      target: null,
      status: 'suggested',
      index: 0,
      anchor: { afterId: null, index: 0 },
      cells: [],
      history: []
    });
    render();
    expect(renders).toEqual(['job-b']);
  });
});

describe('ExchangeList', () => {
  it('replaces an exchange by a changed copy, never changing one in place', () => {
    const list = new ExchangeList();
    const a = exchange('a', 'job-a');
    const b = exchange('b', 'job-b');
    list.add(a);
    list.add(b);
    const before = list.all;
    const next = list.replace('a', { selected: 2 });
    expect(next).not.toBe(a);
    expect(next).toMatchObject({ key: 'a', selected: 2 });
    expect(a.selected).toBe(0);
    expect(list.all).not.toBe(before);
    expect(list.all[0]).toBe(next);
    expect(list.all[1]).toBe(b);
    expect(list.get('a')).toBe(next);
    expect(list.replace('gone', { selected: 1 })).toBeNull();
    list.clear();
    expect(list.all).toEqual([]);
  });
});
