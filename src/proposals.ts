/**
 * Outside agents' proposals (Claude Code, Codex, an ACP persona…), DOM-free:
 * the polled list and its back-off, which pending proposals to place in the
 * notebook (each one once, whichever client or reload sees it), the turn a
 * placed proposal is stored as, and the words the sidebar shows.
 *
 * A proposal is placed as a suggestion whose turn id is `proposal-<id>`:
 * the tag that id leaves in cell metadata (and the turn stored in notebook
 * metadata) says it is already there, so nothing places it twice.
 */
import { ITurn, nowSeconds } from './metadata';
import { boundPreviews } from './previews';
import { previewOutputs } from './models';
import { ISuggestionCandidate } from './suggestions';
import type {
  AgentActivity,
  Candidate,
  Proposal,
  ProposalsReply
} from './wire';

export type { AgentActivity, Proposal, ProposalsReply } from './wire';

/** The turn id of a proposal's suggestion (cell tags, stored turn). */
export const PROPOSAL_TURN_PREFIX = 'proposal-';

export function proposalTurnId(proposalId: string): string {
  return `${PROPOSAL_TURN_PREFIX}${proposalId}`;
}

/** The proposal a turn id stands for; null: one of the sidebar's own turns. */
export function proposalIdOf(turnId: string | null | undefined): string | null {
  return turnId?.startsWith(PROPOSAL_TURN_PREFIX)
    ? turnId.slice(PROPOSAL_TURN_PREFIX.length) || null
    : null;
}

/** The suggestion bar's label: who suggests it. */
export function suggestionLabel(agent: string | null, edit: boolean): string {
  if (edit) {
    return agent ? `Suggested edit by ${agent}` : 'Suggested edit of this cell';
  }
  return `Suggested by ${agent || 'Data Agent'}`;
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** "Claude Code: 4 tries in copies, 1 proposal". */
export function activityLine(activity: AgentActivity): string {
  return (
    `${activity.agent}: ${plural(activity.tries, 'try', 'tries')} in copies, ` +
    plural(activity.proposals, 'proposal', 'proposals')
  );
}

/** What the question line of a proposal's turn says. */
export function proposalIntent(proposal: Proposal): string {
  const first = proposal.explanation.trim().split('\n')[0]?.trim() ?? '';
  if (first) {
    return first.length > 200 ? `${first.slice(0, 199)}…` : first;
  }
  return proposal.kind === 'edit'
    ? `${proposal.agent} proposes an edit`
    : `${proposal.agent} proposes a cell`;
}

/** The proposal as the one candidate of a suggestion. */
export function proposalCandidate(proposal: Proposal): ISuggestionCandidate {
  return { code: proposal.code, explanation: proposal.explanation, steps: [] };
}

/** The proposal as a candidate the sidebar's candidate view renders. */
export function proposalAsCandidate(proposal: Proposal): Candidate {
  return {
    code: proposal.code,
    steps: [],
    explanation: proposal.explanation,
    result: proposal.result,
    score: null,
    support: 1,
    repaired: false,
    meta: {},
    trace: [],
    analysis: [],
    checks: [],
    // Its run's own report (``result.namespace``) is not the typed diff a turn's candidate carries.
    namespace: null
  };
}

/** The turn a placed proposal is stored as (notebook metadata). */
export function turnOfProposal(proposal: Proposal): ITurn {
  return {
    turn_id: proposalTurnId(proposal.id),
    intent: proposalIntent(proposal),
    code: proposal.code,
    status: 'pending',
    cell_ids: [],
    candidates: [proposal.code],
    created: proposal.created || nowSeconds(),
    explanations: [proposal.explanation],
    agent: proposal.agent,
    proposal_id: proposal.id,
    ...(proposal.kind === 'edit' && proposal.cell_id
      ? { edits_cell: proposal.cell_id }
      : {}),
    previews: boundPreviews([
      proposal.result ? previewOutputs(proposal.result) : null
    ])
  };
}

// -- polling ---------------------------------------------------------------

/** Polling while the page is visible, and how it backs off after errors. */
export const POLL_INTERVAL_MS = 2000;
export const MAX_POLL_INTERVAL_MS = 60_000;

export interface IPollState {
  /** The notebook's proposals, oldest first (the server's last answer). */
  proposals: readonly Proposal[];
  activity: readonly AgentActivity[];
  /** Failed requests in a row. */
  failures: number;
  /** The last failure, in words; null after an answer. */
  error: string | null;
}

export type PollEvent =
  { type: 'loaded'; reply: ProposalsReply } | { type: 'failed'; error: string };

export const EMPTY_POLL: IPollState = {
  proposals: [],
  activity: [],
  failures: 0,
  error: null
};

/** The fields that change; the code's run in a copy is fixed when it is filed. */
function sameProposal(a: Proposal, b: Proposal): boolean {
  return (
    a.id === b.id &&
    a.status === b.status &&
    a.decided === b.decided &&
    a.code === b.code &&
    a.note === b.note &&
    a.final_source === b.final_source &&
    (a.result === null) === (b.result === null)
  );
}

function sameActivity(
  a: readonly AgentActivity[],
  b: readonly AgentActivity[]
): boolean {
  return (
    a.length === b.length &&
    a.every(
      (x, i) =>
        x.agent === b[i].agent &&
        x.tries === b[i].tries &&
        x.proposals === b[i].proposals
    )
  );
}

/**
 * The next state; the same object when nothing changed (no re-render).
 * Proposals that did not change stay the same objects.
 */
export function reducePoll(state: IPollState, event: PollEvent): IPollState {
  if (event.type === 'failed') {
    return { ...state, failures: state.failures + 1, error: event.error };
  }
  const reply = event.reply;
  const previous = new Map(state.proposals.map(p => [p.id, p]));
  const proposals = (reply.proposals ?? []).map(p => {
    const old = previous.get(p.id);
    return old && sameProposal(old, p) ? old : p;
  });
  const activity = reply.activity ?? [];
  const same =
    state.failures === 0 &&
    proposals.length === state.proposals.length &&
    proposals.every((p, i) => p === state.proposals[i]) &&
    sameActivity(activity, state.activity);
  if (same) {
    return state;
  }
  return {
    proposals,
    activity: sameActivity(activity, state.activity)
      ? state.activity
      : activity,
    failures: 0,
    error: null
  };
}

/** How long to wait before the next request: doubled per failure, capped. */
export function nextPollDelay(
  state: Pick<IPollState, 'failures'>,
  base = POLL_INTERVAL_MS
): number {
  const factor = 2 ** Math.min(state.failures, 10);
  return Math.min(base * factor, MAX_POLL_INTERVAL_MS);
}

// -- placing ---------------------------------------------------------------

/** What the notebook holds, as far as placing proposals goes. */
export interface INotebookView {
  /** A turn with this id is stored in the notebook (placed once already). */
  hasTurn(turnId: string): boolean;
  /** A cell carries this turn's tag (placed by this or another client). */
  hasTaggedCell(turnId: string): boolean;
  /** The cell's type, or null when it is not in the notebook. */
  cellType(cellId: string): string | null;
  /**
   * This client places new proposals at once (in a shared notebook, one
   * client does); the others wait `graceMs` after first seeing one.
   */
  leader: boolean;
  /** When this client first saw each proposal (ms), and the time now. */
  firstSeen: ReadonlyMap<string, number>;
  now: number;
}

/** How long a client that is not the leader waits before placing one itself. */
export const FOLLOWER_GRACE_MS = 8000;

export interface IPlan {
  /** Pending proposals to place now, oldest first. */
  place: Proposal[];
  /** Pending proposals that cannot be placed, with the reason in words. */
  blocked: Map<string, string>;
}

/**
 * Which pending proposals to place in the notebook now. One decided on the
 * server, one already placed (a tagged cell, a stored turn), or one this
 * client is waiting on (not the leader) is not placed; an edit whose cell
 * is gone, or is not a code cell, is blocked with the reason.
 */
export function planProposals(
  proposals: readonly Proposal[],
  view: INotebookView,
  graceMs = FOLLOWER_GRACE_MS
): IPlan {
  const place: Proposal[] = [];
  const blocked = new Map<string, string>();
  for (const proposal of proposals) {
    if (proposal.status !== 'pending') {
      continue;
    }
    const turnId = proposalTurnId(proposal.id);
    if (view.hasTurn(turnId) || view.hasTaggedCell(turnId)) {
      continue;
    }
    if (proposal.kind === 'edit') {
      const type = proposal.cell_id ? view.cellType(proposal.cell_id) : null;
      if (type === null) {
        blocked.set(
          proposal.id,
          'The cell it edits is no longer in the notebook: it is not shown there.'
        );
        continue;
      }
      if (type !== 'code') {
        blocked.set(
          proposal.id,
          'The cell it edits is not a code cell: it is not shown there.'
        );
        continue;
      }
    }
    const seen = view.firstSeen.get(proposal.id) ?? view.now;
    if (!view.leader && view.now - seen < graceMs) {
      continue;
    }
    place.push(proposal);
  }
  return { place, blocked };
}

/** Is this the client that places proposals: the lowest collaborator id. */
export function isLeader(
  ownId: number | null | undefined,
  ids: Iterable<number>
): boolean {
  if (ownId === null || ownId === undefined) {
    return true;
  }
  for (const id of ids) {
    if (id < ownId) {
      return false;
    }
  }
  return true;
}
