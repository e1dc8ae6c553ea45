/**
 * One path for a decision: ConversationStore.decide writes the turn in the
 * notebook's metadata and posts the decision to the server's store.
 */
import type { NotebookPanel } from '@jupyterlab/notebook';

import { ConversationStore } from '../conversation';
import { postDecision } from '../handler';
import { ITurn, METADATA_KEY } from '../metadata';

jest.mock('../handler', () => ({
  postDecision: jest.fn(() => Promise.resolve({ recorded: true }))
}));
const posted = postDecision as jest.Mock;

/** A notebook panel as far as the store reads it: metadata and a path. */
function fakePanel() {
  const metadata = new Map<string, unknown>();
  return {
    metadata,
    panel: {
      context: { path: 'work/flights.ipynb' },
      model: {
        getMetadata: (key: string) =>
          JSON.parse(JSON.stringify(metadata.get(key) ?? null)) ?? undefined,
        setMetadata: (key: string, value: unknown) =>
          metadata.set(key, JSON.parse(JSON.stringify(value)))
      }
    } as unknown as NotebookPanel
  };
}

const TURN: ITurn = {
  turn_id: 't1',
  intent: 'Mean delay?',
  code: 'df.delay.mean()',
  status: 'pending',
  cell_ids: [],
  candidates: ['df.delay.mean()', 'df["delay"].mean()'],
  created: 1
};

describe('ConversationStore.decide', () => {
  beforeEach(() => posted.mockClear());

  it('writes the decision to the turn and posts it, once', () => {
    const { panel, metadata } = fakePanel();
    const store = new ConversationStore(panel);
    store.recordTurn(TURN);
    store.decide({
      turnId: 't1',
      intent: 'Mean delay?',
      status: 'accepted',
      code: 'df["delay"].mean()',
      cellIds: ['c9'],
      candidateIndex: 1,
      candidateCode: 'df["delay"].mean()',
      run: true
    });
    expect(store.turn('t1')).toMatchObject({
      status: 'accepted',
      code: 'df["delay"].mean()',
      cell_ids: ['c9'],
      candidates: TURN.candidates
    });
    expect((metadata.get(METADATA_KEY) as any).turns).toHaveLength(1);
    expect(posted).toHaveBeenCalledTimes(1);
    expect(posted).toHaveBeenCalledWith({
      version: 1,
      turn_id: 't1',
      candidate: 1,
      decision: 'accepted_run',
      intent: 'Mean delay?',
      code: 'df["delay"].mean()',
      final_code: 'df["delay"].mean()',
      notebook_path: 'work/flights.ipynb'
    });

    // The same decision again (a sync that saw it) is not posted twice.
    store.decide({
      turnId: 't1',
      intent: 'Mean delay?',
      status: 'accepted',
      code: 'df["delay"].mean()'
    });
    expect(posted).toHaveBeenCalledTimes(1);
    expect(store.turn('t1')?.cell_ids).toEqual(['c9']);
  });

  it('posts an edit of accepted code, but not the way back to accepted', () => {
    const { panel } = fakePanel();
    const store = new ConversationStore(panel);
    store.recordTurn({ ...TURN, status: 'accepted', cell_ids: ['c9'] });
    store.decide({
      turnId: 't1',
      intent: 'Mean delay?',
      status: 'edited',
      code: 'df.delay.mean().round(1)',
      candidateCode: 'df.delay.mean()'
    });
    expect(posted).toHaveBeenCalledTimes(1);
    expect(posted.mock.calls[0][0]).toMatchObject({
      decision: 'edited',
      code: 'df.delay.mean()',
      final_code: 'df.delay.mean().round(1)'
    });
    expect(store.turn('t1')).toMatchObject({
      status: 'edited',
      code: 'df.delay.mean().round(1)',
      cell_ids: ['c9']
    });
    // The user undid their edit: stored, not recorded a second time.
    store.decide({
      turnId: 't1',
      intent: 'Mean delay?',
      status: 'accepted',
      code: 'df.delay.mean()'
    });
    expect(store.turn('t1')?.status).toBe('accepted');
    expect(posted).toHaveBeenCalledTimes(1);
  });

  it('stores a turn it did not know, and never posts "pending"', () => {
    const { panel } = fakePanel();
    const store = new ConversationStore(panel);
    store.decide({
      turnId: 't2',
      intent: 'Plot it',
      status: 'pending',
      code: 'df.plot()',
      cellIds: ['c1'],
      candidates: ['df.plot()'],
      editsCell: 'c0'
    });
    expect(store.turn('t2')).toMatchObject({
      intent: 'Plot it',
      status: 'pending',
      cell_ids: ['c1'],
      candidates: ['df.plot()'],
      edits_cell: 'c0'
    });
    expect(posted).not.toHaveBeenCalled();
    store.decide({
      turnId: 't2',
      intent: 'Plot it',
      status: 'rejected',
      code: 'df.plot()'
    });
    expect(posted).toHaveBeenCalledTimes(1);
    expect(posted.mock.calls[0][0].decision).toBe('rejected');
  });
});
