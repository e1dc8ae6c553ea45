/**
 * The notebook's turns started elsewhere: `%%agent` cells, MCP and ACP
 * clients, Jupyter AI, or this notebook's sidebar in another tab. The
 * server lists every turn on a notebook (`GET turns?notebook_path=`); the
 * sidebar shows those not in its own history as entries labelled by their
 * source, and replays one on demand from its events (`GET jobs/<id>`), as
 * long as the server keeps the job.
 */
import { ServerConnection } from '@jupyterlab/services';

import { IJobView, endJob, initialJob, isFinished, reduceJob } from './events';
import { IExchange } from './exchange';
import { getTurnList, pollJob } from './handler';
import { Strategy } from './models';
import type { JobPoll, TurnList, TurnSummary } from './wire';

export type { TurnList, TurnSummary } from './wire';

/** What is known of the sidebar's own turns: its history and live requests. */
export interface IOwnTurns {
  turnIds: ReadonlySet<string>;
  jobIds: ReadonlySet<string>;
  /** When the conversation was cleared (seconds; 0: never): older turns are gone too. */
  cleared: number;
}

/** One listed turn and where its replay stands. */
export interface IOutsideTurn {
  readonly summary: TurnSummary;
  readonly replay: ReplayState;
}

/**
 * closed: not asked; loading: its events are on their way; shown: replayed
 * (`exchange` is what the panel shows and inserts from); expired: the
 * server no longer keeps the job; failed: the request failed.
 */
export type ReplayState =
  | { readonly kind: 'closed' }
  | { readonly kind: 'loading' }
  | { readonly kind: 'shown'; readonly exchange: IExchange }
  | { readonly kind: 'expired' }
  | { readonly kind: 'failed'; readonly reason: string };

const CLOSED: ReplayState = { kind: 'closed' };

/** The HTTP status of a failed request; 0: none (network, or not a request). */
function statusOf(error: unknown): number {
  return error instanceof ServerConnection.ResponseError
    ? error.response.status
    : 0;
}

/**
 * The notebook's turns, newest first; null when the server has no such
 * endpoint (an older server answers 404), which is not an error.
 */
export async function fetchTurns(
  path: string,
  fetch: (path: string) => Promise<TurnList> = p => getTurnList(p)
): Promise<TurnSummary[] | null> {
  try {
    const reply = await fetch(path);
    return Array.isArray(reply?.turns) ? reply.turns : [];
  } catch (error) {
    if (statusOf(error) === 404) {
      return null;
    }
    throw error;
  }
}

/** Where a turn was started, as its entry says it. */
export function sourceLabel(turn: TurnSummary): string {
  switch (turn.source) {
    case 'magic':
      return 'from %%agent';
    case 'mcp':
      return `from ${turn.agent || 'an MCP client'} (MCP)`;
    case 'acp':
      return `from ${turn.agent || 'an ACP agent'} (ACP)`;
    case 'jupyter-ai':
      return 'from Jupyter AI';
    case 'sidebar':
      return 'from the sidebar in another tab';
    default:
      return `from ${String(turn.source)}`;
  }
}

/** The sidebar's own turns: stored in the notebook, or asked here. */
export function ownTurns(
  stored: readonly { turn_id: string }[],
  live: readonly IExchange[],
  cleared = 0
): IOwnTurns {
  return {
    cleared,
    turnIds: new Set([
      ...stored.map(t => t.turn_id),
      ...live.map(e => e.turnId ?? e.job.turnId ?? '').filter(Boolean)
    ]),
    jobIds: new Set(live.map(e => e.job.jobId ?? '').filter(Boolean))
  };
}

/** Whether a listed turn is one of the sidebar's own (in its history or live). */
export function isOwnTurn(turn: TurnSummary, own: IOwnTurns): boolean {
  return own.turnIds.has(turn.turn_id) || own.jobIds.has(turn.job_id);
}

/** A job's events read back as the view the panel shows. */
export function replayJob(poll: JobPoll): IJobView {
  let job = initialJob(poll.job_id);
  for (const event of [...(poll.events ?? [])].sort((a, b) => a.seq - b.seq)) {
    job = reduceJob(job, event);
  }
  return poll.status === 'running' || isFinished(job)
    ? job
    : endJob(job, poll.status);
}

/** A replayed turn as an exchange: shown, and inserted from, as the panel's own. */
export function replayExchange(summary: TurnSummary, job: IJobView): IExchange {
  return {
    key: `outside-${summary.job_id}`,
    intent: summary.intent,
    strategy: summary.strategy as Strategy,
    job,
    turnId: job.turnId ?? summary.turn_id,
    anchorCellId: null,
    editCellId: null,
    editKind: null,
    instruction: '',
    selected: job.chosen ?? 0,
    autoInsert: false,
    created: summary.started * 1000
  };
}

export namespace OutsideTurns {
  export interface IOptions {
    /** The notebook's path as the server knows it (read at each request). */
    path: () => string;
    /** After each change of the list or of a replay. */
    onChange: () => void;
    /** The requests (tests replace them). */
    list?: (path: string) => Promise<TurnList>;
    poll?: (jobId: string) => Promise<JobPoll>;
  }
}

/**
 * The listed turns of one notebook, oldest first, and their replays. A
 * refresh keeps the replays of the turns still listed; an answer that
 * arrives after a newer request was sent is dropped.
 */
export class OutsideTurns {
  constructor(options: OutsideTurns.IOptions) {
    this._options = options;
  }

  /** Every listed turn (own ones too: the caller filters), oldest first. */
  get all(): readonly IOutsideTurn[] {
    return this._all;
  }

  /** False when the server has no list of turns (an older server). */
  get available(): boolean {
    return this._available;
  }

  /**
   * The turns to show: not the sidebar's own, unless replayed here, and none
   * started before the conversation was cleared.
   */
  visible(own: IOwnTurns): IOutsideTurn[] {
    return this._all.filter(
      t =>
        t.summary.started > own.cleared &&
        (t.replay.kind === 'shown' || !isOwnTurn(t.summary, own))
    );
  }

  /** When a clear happens now: after every turn listed so far, whatever the clocks say. */
  clearTime(): number {
    return Math.max(
      Date.now() / 1000,
      ...this._all.map(t => t.summary.started)
    );
  }

  /** Ask the server for the notebook's turns again. */
  async refresh(): Promise<void> {
    if (this._disposed) {
      return;
    }
    const request = ++this._request;
    let turns: TurnSummary[] | null;
    try {
      turns = await fetchTurns(this._options.path(), this._options.list);
    } catch (error) {
      // Never in the user's way: the list comes back at the next refresh.
      console.warn('jupyter-data-agent: could not list turns', error);
      return;
    }
    if (this._disposed || request !== this._request) {
      return;
    }
    this._available = turns !== null;
    const before = new Map(this._all.map(t => [t.summary.job_id, t]));
    this._all = [...(turns ?? [])]
      .sort((a, b) => a.started - b.started)
      .map(summary => ({
        summary,
        replay: before.get(summary.job_id)?.replay ?? CLOSED
      }));
    this._options.onChange();
  }

  /** Forget the list (the notebook was renamed) and ask again. */
  reset(): void {
    this._all = [];
    this._options.onChange();
    void this.refresh();
  }

  /** Load a listed turn's events and show its result. */
  async open(jobId: string): Promise<void> {
    const entry = this._all.find(t => t.summary.job_id === jobId);
    if (!entry || entry.replay.kind === 'loading') {
      return;
    }
    this._setReplay(jobId, { kind: 'loading' });
    const poll = this._options.poll ?? (id => pollJob(id, 0));
    let replay: ReplayState;
    try {
      const job = replayJob(await poll(jobId));
      replay = { kind: 'shown', exchange: replayExchange(entry.summary, job) };
    } catch (error) {
      replay =
        statusOf(error) === 404
          ? { kind: 'expired' }
          : {
              kind: 'failed',
              reason: error instanceof Error ? error.message : String(error)
            };
    }
    this._setReplay(jobId, replay);
  }

  /** Hide a replay again. */
  close(jobId: string): void {
    this._setReplay(jobId, CLOSED);
  }

  /** The replayed exchange with this key, if any. */
  exchange(key: string): IExchange | null {
    for (const { replay } of this._all) {
      if (replay.kind === 'shown' && replay.exchange.key === key) {
        return replay.exchange;
      }
    }
    return null;
  }

  /** A replayed exchange replaced by a changed copy; returns it. */
  replace(
    key: string,
    patch: Partial<Omit<IExchange, 'key'>>
  ): IExchange | null {
    const entry = this._all.find(
      t => t.replay.kind === 'shown' && t.replay.exchange.key === key
    );
    if (!entry || entry.replay.kind !== 'shown') {
      return null;
    }
    const exchange = { ...entry.replay.exchange, ...patch };
    this._setReplay(entry.summary.job_id, { kind: 'shown', exchange });
    return exchange;
  }

  dispose(): void {
    this._disposed = true;
  }

  private _setReplay(jobId: string, replay: ReplayState): void {
    if (this._disposed) {
      return;
    }
    this._all = this._all.map(t =>
      t.summary.job_id === jobId ? { ...t, replay } : t
    );
    this._options.onChange();
  }

  private _options: OutsideTurns.IOptions;
  private _all: readonly IOutsideTurn[] = [];
  private _available = true;
  private _request = 0;
  private _disposed = false;
}
