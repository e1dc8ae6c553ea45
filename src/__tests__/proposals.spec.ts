/**
 * Outside agents' proposals: the polling reducer and its back-off, which
 * pending proposals are placed (each once), the labels, the stored turn,
 * and the poller's pace (visible page, errors, hidden page).
 */
import { readConversation, upsertTurn } from '../metadata';
import { ProposalPoller } from '../proposalpoller';
import {
  EMPTY_POLL,
  FOLLOWER_GRACE_MS,
  INotebookView,
  MAX_POLL_INTERVAL_MS,
  POLL_INTERVAL_MS,
  Proposal,
  ProposalsReply,
  activityLine,
  isLeader,
  nextPollDelay,
  planProposals,
  proposalIdOf,
  proposalIntent,
  proposalTurnId,
  reducePoll,
  suggestionLabel,
  turnOfProposal
} from '../proposals';

function proposal(id: string, patch: Partial<Proposal> = {}): Proposal {
  return {
    id,
    notebook_path: 'nb.ipynb',
    kind: 'cell',
    code: 'df.describe()',
    explanation: 'Summarize df',
    agent: 'Claude Code',
    after_cell_id: 'c1',
    cell_id: null,
    status: 'pending',
    final_source: null,
    result: {
      status: 'ok',
      outputs: [
        {
          output_type: 'stream',
          name: 'stdout',
          text: 'hello\n',
          data: {},
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
      duration_s: 0.1,
      pid: 1,
      limit: null,
      truncated: false,
      namespace: null
    },
    note: '',
    created: 1700000000,
    decided: null,
    ...patch
  };
}

function reply(
  proposals: Proposal[],
  activity = [{ agent: 'Claude Code', tries: 4, proposals: 1 }]
): ProposalsReply {
  return { proposals, activity };
}

function view(patch: Partial<INotebookView> = {}): INotebookView {
  return {
    hasTurn: () => false,
    hasTaggedCell: () => false,
    cellType: id => (id === 'c1' ? 'code' : id === 'md' ? 'markdown' : null),
    leader: true,
    firstSeen: new Map(),
    now: 100_000,
    ...patch
  };
}

describe('labels', () => {
  it('names the agent in the suggestion bar', () => {
    expect(suggestionLabel('Claude Code', false)).toBe(
      'Suggested by Claude Code'
    );
    expect(suggestionLabel(null, false)).toBe('Suggested by Data Agent');
    expect(suggestionLabel('Codex', true)).toBe('Suggested edit by Codex');
    expect(suggestionLabel(null, true)).toBe('Suggested edit of this cell');
  });

  it('says what each agent did, in words', () => {
    expect(activityLine({ agent: 'Claude Code', tries: 4, proposals: 1 })).toBe(
      'Claude Code: 4 tries in copies, 1 proposal'
    );
    expect(activityLine({ agent: 'Codex', tries: 1, proposals: 0 })).toBe(
      'Codex: 1 try in copies, 0 proposals'
    );
  });

  it('maps proposal ids to turn ids and back', () => {
    expect(proposalTurnId('abc')).toBe('proposal-abc');
    expect(proposalIdOf('proposal-abc')).toBe('abc');
    expect(proposalIdOf('t123-x')).toBeNull();
    expect(proposalIdOf('proposal-')).toBeNull();
    expect(proposalIdOf(null)).toBeNull();
  });

  it('makes the question line from the explanation, else the kind', () => {
    expect(proposalIntent(proposal('a', { explanation: 'One\nTwo' }))).toBe(
      'One'
    );
    expect(proposalIntent(proposal('a', { explanation: '' }))).toBe(
      'Claude Code proposes a cell'
    );
    expect(
      proposalIntent(proposal('a', { explanation: ' ', kind: 'edit' }))
    ).toBe('Claude Code proposes an edit');
  });
});

describe('turnOfProposal', () => {
  it('stores the proposal as a pending turn the notebook reads back', () => {
    const p = proposal('p1', { kind: 'edit', cell_id: 'c1' });
    const turn = turnOfProposal(p);
    expect(turn).toMatchObject({
      turn_id: 'proposal-p1',
      intent: 'Summarize df',
      code: 'df.describe()',
      status: 'pending',
      candidates: ['df.describe()'],
      explanations: ['Summarize df'],
      agent: 'Claude Code',
      proposal_id: 'p1',
      edits_cell: 'c1',
      created: 1700000000
    });
    expect(turn.previews?.[0]?.[0]).toMatchObject({
      output_type: 'stream',
      text: 'hello\n'
    });
    // What the notebook holds parses back with the agent and id.
    const stored = readConversation({
      jupyter_data_agent: JSON.parse(
        JSON.stringify(upsertTurn({ version: 1, turns: [] }, turn))
      )
    });
    expect(stored.turns[0].agent).toBe('Claude Code');
    expect(stored.turns[0].proposal_id).toBe('p1');
    expect(stored.turns[0].edits_cell).toBe('c1');
  });

  it('keeps no preview for a proposal that did not run', () => {
    const turn = turnOfProposal(proposal('p2', { result: null }));
    expect(turn.previews).toEqual([null]);
    expect(turn.edits_cell).toBeUndefined();
  });
});

describe('reducePoll', () => {
  it('takes the answer, and keeps the same state when nothing changed', () => {
    const a = proposal('a');
    const first = reducePoll(EMPTY_POLL, {
      type: 'loaded',
      reply: reply([a])
    });
    expect(first.proposals).toEqual([a]);
    expect(first.activity).toEqual([
      { agent: 'Claude Code', tries: 4, proposals: 1 }
    ]);
    const again = reducePoll(first, {
      type: 'loaded',
      reply: JSON.parse(JSON.stringify(reply([a])))
    });
    expect(again).toBe(first);
  });

  it('keeps unchanged proposals as the same objects', () => {
    const first = reducePoll(EMPTY_POLL, {
      type: 'loaded',
      reply: reply([proposal('a'), proposal('b')])
    });
    const next = reducePoll(first, {
      type: 'loaded',
      reply: reply([
        proposal('a'),
        proposal('b', { status: 'accepted', decided: 2 })
      ])
    });
    expect(next).not.toBe(first);
    expect(next.proposals[0]).toBe(first.proposals[0]);
    expect(next.proposals[1].status).toBe('accepted');
    expect(next.activity).toBe(first.activity);
  });

  it('counts failures, keeps what it had, and an answer resets them', () => {
    const first = reducePoll(EMPTY_POLL, {
      type: 'loaded',
      reply: reply([proposal('a')])
    });
    const failed = reducePoll(first, { type: 'failed', error: 'offline' });
    const twice = reducePoll(failed, { type: 'failed', error: 'offline' });
    expect(twice.failures).toBe(2);
    expect(twice.error).toBe('offline');
    expect(twice.proposals).toBe(first.proposals);
    const back = reducePoll(twice, {
      type: 'loaded',
      reply: reply([proposal('a')])
    });
    expect(back.failures).toBe(0);
    expect(back.error).toBeNull();
    expect(back.proposals[0]).toBe(first.proposals[0]);
  });

  it('backs off after errors, up to a minute', () => {
    expect(nextPollDelay({ failures: 0 })).toBe(POLL_INTERVAL_MS);
    expect(nextPollDelay({ failures: 1 })).toBe(2 * POLL_INTERVAL_MS);
    expect(nextPollDelay({ failures: 3 })).toBe(8 * POLL_INTERVAL_MS);
    expect(nextPollDelay({ failures: 40 })).toBe(MAX_POLL_INTERVAL_MS);
  });
});

describe('planProposals', () => {
  it('places pending proposals that are not in the notebook yet', () => {
    const plan = planProposals([proposal('a'), proposal('b')], view());
    expect(plan.place.map(p => p.id)).toEqual(['a', 'b']);
    expect(plan.blocked.size).toBe(0);
  });

  it('never places one twice: a tagged cell or a stored turn says it is there', () => {
    const plan = planProposals(
      [proposal('a'), proposal('b'), proposal('c')],
      view({
        hasTaggedCell: id => id === 'proposal-a',
        hasTurn: id => id === 'proposal-b'
      })
    );
    expect(plan.place.map(p => p.id)).toEqual(['c']);
  });

  it('does not place one already decided on the server', () => {
    const plan = planProposals(
      [
        proposal('a', { status: 'accepted' }),
        proposal('b', { status: 'rejected' }),
        proposal('c', { status: 'edited' })
      ],
      view()
    );
    expect(plan.place).toEqual([]);
    expect(plan.blocked.size).toBe(0);
  });

  it('blocks an edit whose cell is gone or is not code, with the reason', () => {
    const plan = planProposals(
      [
        proposal('gone', {
          kind: 'edit',
          cell_id: 'nope',
          after_cell_id: null
        }),
        proposal('md', { kind: 'edit', cell_id: 'md', after_cell_id: null }),
        proposal('ok', { kind: 'edit', cell_id: 'c1', after_cell_id: null })
      ],
      view()
    );
    expect(plan.place.map(p => p.id)).toEqual(['ok']);
    expect(plan.blocked.get('gone')).toMatch(/no longer in the notebook/);
    expect(plan.blocked.get('md')).toMatch(/not a code cell/);
  });

  it('a cell proposal whose anchor is gone is still placed (at the end)', () => {
    const plan = planProposals(
      [proposal('a', { after_cell_id: 'gone' })],
      view()
    );
    expect(plan.place.map(p => p.id)).toEqual(['a']);
  });

  it('in a shared notebook, only the leader places at once; others after a grace', () => {
    const seen = new Map([['a', 100_000]]);
    const follower = view({ leader: false, firstSeen: seen });
    expect(planProposals([proposal('a')], follower).place).toEqual([]);
    const later = view({
      leader: false,
      firstSeen: seen,
      now: 100_000 + FOLLOWER_GRACE_MS
    });
    expect(planProposals([proposal('a')], later).place.map(p => p.id)).toEqual([
      'a'
    ]);
  });

  it('picks the lowest collaborator id as the leader', () => {
    expect(isLeader(5, [5])).toBe(true);
    expect(isLeader(5, [9, 5, 7])).toBe(true);
    expect(isLeader(5, [9, 5, 3])).toBe(false);
    expect(isLeader(undefined, [1])).toBe(true);
  });
});

describe('ProposalPoller', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  /** Run the timer due now and let the request's promise settle. */
  async function step(ms: number): Promise<void> {
    await jest.advanceTimersByTimeAsync(ms);
  }

  it('polls every interval while visible, reports each answer', async () => {
    const fetch = jest.fn(async () => reply([proposal('a')]));
    const onPoll = jest.fn();
    const poller = new ProposalPoller({
      path: () => 'nb.ipynb',
      onPoll,
      fetch,
      visible: () => true
    });
    poller.start();
    await step(0);
    expect(fetch).toHaveBeenCalledTimes(1);
    expect(fetch).toHaveBeenLastCalledWith('nb.ipynb');
    expect(onPoll).toHaveBeenLastCalledWith(poller.state, true);
    await step(POLL_INTERVAL_MS);
    expect(fetch).toHaveBeenCalledTimes(2);
    // The same answer: reported, as not changed.
    expect(onPoll).toHaveBeenLastCalledWith(poller.state, false);
    poller.dispose();
    await step(POLL_INTERVAL_MS * 5);
    expect(fetch).toHaveBeenCalledTimes(2);
  });

  it('backs off while the server fails, and comes back to pace', async () => {
    let fail = true;
    const fetch = jest.fn(async () => {
      if (fail) {
        throw new Error('502');
      }
      return reply([]);
    });
    const onPoll = jest.fn();
    const poller = new ProposalPoller({
      path: () => 'nb.ipynb',
      onPoll,
      fetch,
      visible: () => true
    });
    poller.start();
    await step(0);
    expect(fetch).toHaveBeenCalledTimes(1);
    expect(poller.state.failures).toBe(1);
    await step(2 * POLL_INTERVAL_MS - 1);
    expect(fetch).toHaveBeenCalledTimes(1);
    await step(1);
    expect(fetch).toHaveBeenCalledTimes(2);
    expect(poller.state.failures).toBe(2);
    fail = false;
    await step(4 * POLL_INTERVAL_MS);
    expect(fetch).toHaveBeenCalledTimes(3);
    expect(poller.state.failures).toBe(0);
    expect(onPoll).toHaveBeenCalledTimes(1);
    await step(POLL_INTERVAL_MS);
    expect(fetch).toHaveBeenCalledTimes(4);
    poller.dispose();
  });

  it('asks nothing while the page is hidden, and at once when shown', async () => {
    let visible = false;
    const fetch = jest.fn(async () => reply([]));
    const poller = new ProposalPoller({
      path: () => 'nb.ipynb',
      onPoll: () => undefined,
      fetch,
      visible: () => visible
    });
    poller.start();
    await step(POLL_INTERVAL_MS * 10);
    expect(fetch).not.toHaveBeenCalled();
    visible = true;
    document.dispatchEvent(new Event('visibilitychange'));
    await step(0);
    expect(fetch).toHaveBeenCalledTimes(1);
    poller.dispose();
  });
});

describe('ConversationStore and proposals', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  function fakePanel() {
    const metadata: Record<string, unknown> = {};
    return {
      context: { path: 'nb.ipynb' },
      model: {
        getMetadata: (key: string) => metadata[key],
        setMetadata: (key: string, value: unknown) => {
          metadata[key] = value;
        }
      }
    };
  }

  it('sends decisions on a proposal to the proposal, an edit once typing pauses', async () => {
    const handler = await import('../handler');
    const toProposal = jest
      .spyOn(handler, 'postProposalDecision')
      .mockResolvedValue({} as any);
    const toDecisions = jest
      .spyOn(handler, 'postDecision')
      .mockResolvedValue({} as any);
    const { ConversationStore } = await import('../conversation');
    const store = new ConversationStore(fakePanel() as any);
    const turn = turnOfProposal(proposal('p1'));
    store.recordTurn(turn);
    const decide = (status: any, code: string) =>
      store.decide({
        turnId: turn.turn_id,
        intent: turn.intent,
        status,
        code
      });
    decide('accepted', 'df.describe()');
    expect(toProposal).toHaveBeenLastCalledWith('p1', {
      version: 1,
      decision: 'accepted',
      final_source: 'df.describe()'
    });
    // Typing after the Accept: only the last source goes, once it pauses.
    decide('edited', 'df.describe().T');
    decide('edited', 'df.describe().T.round(1)');
    expect(toProposal).toHaveBeenCalledTimes(1);
    jest.advanceTimersByTime(1000);
    expect(toProposal).toHaveBeenCalledTimes(2);
    expect(toProposal).toHaveBeenLastCalledWith('p1', {
      version: 1,
      decision: 'edited',
      final_source: 'df.describe().T.round(1)'
    });
    decide('rejected', '');
    expect(toProposal).toHaveBeenLastCalledWith('p1', {
      version: 1,
      decision: 'rejected',
      final_source: ''
    });
    // Never the training store's decisions endpoint.
    expect(toDecisions).not.toHaveBeenCalled();
    toProposal.mockRestore();
    toDecisions.mockRestore();
  });
});
