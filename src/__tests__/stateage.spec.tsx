/**
 * A turn that started from the kernel's state before a running cell says so
 * on the turn, after its progress line has moved on, and its button asks the
 * same question again waiting for the cell (`fresh_state`).
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { ExchangeView } from '../components/ExchangeView';
import { IJobView, initialJob, reduceJob } from '../events';
import type { IExchange, IRetryRequest } from '../exchange';
import { NotebookSession } from '../session';
import type { JobEvent, StateAgeData } from '../wire';

jest.mock('../components/Progress', () => ({ Progress: () => null }));

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

const AGE: StateAgeData = {
  as_of: '2025-01-01T12:00:00+0000',
  running: true,
  executions_since: 1,
  note: "the state after the cell that ended at 12:00:00; a cell is running now in the notebook's kernel"
};

const event = (
  seq: number,
  type: JobEvent['type'],
  message: string,
  data: object
): JobEvent =>
  ({ version: 1, job_id: 'j', seq, type, message, data }) as JobEvent;

/** A turn that started from the state before the running cell, then ended. */
function agedJob(finished: boolean): IJobView {
  let job = reduceJob(
    initialJob('j'),
    event(
      1,
      'progress',
      "Starting from the kernel's state before the running cell",
      {
        state: 'state_age',
        state_age: AGE
      }
    )
  );
  job = reduceJob(
    job,
    event(2, 'progress', 'Searching', { state: 'searching' })
  );
  if (finished) {
    job = reduceJob(
      job,
      event(3, 'done', 'Done', {
        turn_id: 't',
        result: {
          strategy: 'direct',
          answer: null,
          chosen: null,
          count: 0,
          stats: {}
        }
      })
    );
  }
  return job;
}

function exchange(job: IJobView): IExchange {
  return {
    key: 'x',
    intent: 'How many rows are above 1?',
    strategy: 'direct',
    job,
    turnId: 't',
    anchorCellId: 'cell-1',
    editCellId: null,
    editKind: null,
    instruction: '',
    selected: 0,
    autoInsert: false,
    created: 0
  };
}

describe('the state age note', () => {
  let host: Widget | null = null;
  const retry = jest.fn();
  afterEach(() => {
    React.act(() => host?.dispose());
    host = null;
    retry.mockReset();
  });

  const show = (job: IJobView, busy = false): HTMLElement => {
    const session = { retry } as unknown as NotebookSession;
    host = ReactWidget.create(
      <ExchangeView
        session={session}
        exchange={exchange(job)}
        rendermime={null as any}
        strategies={null}
        prices={{}}
        suggestion={null}
        turnStatus={null}
        storedConfinement={null}
        editCellIndex={-1}
        turnCells={0}
        busy={busy}
      />
    );
    React.act(() => Widget.attach(host!, document.body));
    return host.node;
  };

  it('is not shown for a turn on the live state', () => {
    const node = show(
      reduceJob(initialJob('j'), event(1, 'progress', 'Searching', {}))
    );
    expect(node.querySelector('.jp-DataAgent-stateAge')).toBeNull();
  });

  it('says the finished turn ran on the state before the running cell', () => {
    const node = show(agedJob(true));
    const note = node.querySelector('.jp-DataAgent-stateAge');
    expect(note?.getAttribute('role')).toBe('note');
    expect(note?.textContent).toContain(
      `Ran on the kernel's state before your running cell: ${AGE.note}.`
    );
  });

  it('waits for the cell and asks again with the fresh state', () => {
    const node = show(agedJob(true));
    const button = node.querySelector(
      '.jp-DataAgent-stateAge button'
    ) as HTMLButtonElement;
    expect(button.type).toBe('button'); // a tab stop, Enter and Space click it
    expect(button.textContent).toBe('Wait for the cell and run again');
    expect(button.disabled).toBe(false);
    React.act(() => button.click());
    expect(retry).toHaveBeenCalledTimes(1);
    expect(retry).toHaveBeenCalledWith({
      intent: 'How many rows are above 1?',
      strategy: 'direct',
      cellId: 'cell-1',
      editCellId: null,
      editKind: null,
      instruction: '',
      freshState: true
    });
  });

  it('says "Running on" while the turn runs, its button off until it ends', () => {
    const node = show(agedJob(false), true);
    expect(node.querySelector('.jp-DataAgent-stateAge')?.textContent).toContain(
      "Running on the kernel's state before your running cell"
    );
    const button = node.querySelector(
      '.jp-DataAgent-stateAge button'
    ) as HTMLButtonElement;
    expect(button.disabled).toBe(true);
    React.act(() => button.click());
    expect(retry).not.toHaveBeenCalled();
  });
});

describe('NotebookSession.retry with the fresh state', () => {
  /** The session's retry on a notebook whose cell `cell-1` is a code cell. */
  const retryOn = (request: IRetryRequest) => {
    const fake = {
      send: jest.fn(),
      cellIndex: (id: string | null) => (id === 'cell-1' ? 0 : -1),
      _cellJSON: (id: string | null) =>
        id === 'cell-1' ? { cell_type: 'code', source: 'df', id } : null
    };
    NotebookSession.prototype.retry.call(fake, request);
    return fake.send;
  };

  it('sends the same question, asking to wait for the cell', () => {
    const send = retryOn({
      intent: 'How many rows?',
      strategy: 'direct',
      cellId: 'cell-1',
      freshState: true
    });
    expect(send).toHaveBeenCalledWith({
      intent: 'How many rows?',
      strategy: 'direct',
      cellId: 'cell-1',
      freshState: true
    });
  });

  it('edits the same cell again, asking to wait for the cell', () => {
    const send = retryOn({
      intent: 'Fix cell 1',
      strategy: 'direct',
      editCellId: 'cell-1',
      editKind: 'fix',
      instruction: '',
      freshState: true
    });
    expect(send.mock.calls[0][0]).toMatchObject({
      cellId: 'cell-1',
      edit: 'fix',
      freshState: true
    });
  });

  it('a plain retry does not ask for it', () => {
    const send = retryOn({ intent: 'How many rows?', strategy: 'direct' });
    expect(send.mock.calls[0][0].freshState).toBeUndefined();
  });
});
