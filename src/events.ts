/**
 * Job events -> what the panel shows for one request. Pure, so the stream
 * handling (ordering, duplicates, the final result replacing the streamed
 * candidates) is tested without a server or a DOM.
 */
import {
  ICandidate,
  IConfinement,
  IJobEvent,
  ISearchResult,
  JobStatus,
  parseCandidate,
  parseConfinement
} from './models';

export type JobViewStatus = 'starting' | 'running' | JobStatus;

export interface IProgressLine {
  seq: number;
  type: IJobEvent['type'];
  message: string;
}

export interface ISearchProgress {
  iterations?: number;
  nodes?: number;
  best_value?: number | null;
  answers?: { answer: string; votes: number }[];
}

export interface IJobView {
  jobId: string | null;
  status: JobViewStatus;
  lastSeq: number;
  progress: IProgressLine[];
  /** The latest progress message: the one line shown while running. */
  message: string;
  waitingForKernel: boolean;
  search: ISearchProgress | null;
  candidates: ICandidate[];
  result: ISearchResult | null;
  /** Index into `candidates` the strategy chose, if any. */
  chosen: number | null;
  turnId: string | null;
  /** The verdict on this turn's kernel copies, once the server sent it. */
  confinement: IConfinement | null;
  error: string | null;
}

/** Bound on kept progress lines: an MCTS run can emit thousands. */
export const MAX_PROGRESS_LINES = 200;

export function initialJob(jobId: string | null = null): IJobView {
  return {
    jobId,
    status: jobId ? 'running' : 'starting',
    lastSeq: -1,
    progress: [],
    message: jobId ? 'Started' : 'Sending the notebook…',
    waitingForKernel: false,
    search: null,
    candidates: [],
    result: null,
    chosen: null,
    turnId: null,
    confinement: null,
    error: null
  };
}

export function isFinished(job: IJobView): boolean {
  return job.status === 'done' || job.status === 'error' || job.status === 'cancelled';
}

function parseResult(raw: unknown): ISearchResult | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const data = raw as Record<string, any>;
  const candidates = (Array.isArray(data.candidates) ? data.candidates : [])
    .map(parseCandidate)
    .filter((c: ICandidate | null): c is ICandidate => c !== null);
  const chosen =
    typeof data.chosen === 'number' && data.chosen >= 0 && data.chosen < candidates.length
      ? data.chosen
      : null;
  return {
    strategy: String(data.strategy ?? ''),
    answer: typeof data.answer === 'string' ? data.answer : null,
    chosen,
    candidates,
    stats: { ...(data.stats ?? {}) },
    protections: data.protections ?? null
  };
}

function searchProgress(
  previous: ISearchProgress | null,
  data: Record<string, any>
): ISearchProgress | null {
  const keys = ['iterations', 'nodes', 'best_value', 'answers'];
  if (!keys.some(k => k in data)) {
    return previous;
  }
  const next: ISearchProgress = { ...(previous ?? {}) };
  if (typeof data.iterations === 'number') {
    next.iterations = data.iterations;
  }
  if (typeof data.nodes === 'number') {
    next.nodes = data.nodes;
  }
  if ('best_value' in data) {
    next.best_value = typeof data.best_value === 'number' ? data.best_value : null;
  }
  if (Array.isArray(data.answers)) {
    next.answers = data.answers
      .filter((a: any) => a && typeof a === 'object')
      .map((a: any) => ({ answer: String(a.answer ?? ''), votes: Number(a.votes) || 0 }));
  }
  return next;
}

/** Apply one event. Events at or below `lastSeq` (replays) change nothing. */
export function reduceJob(state: IJobView, event: IJobEvent): IJobView {
  if (typeof event.seq !== 'number' || event.seq <= state.lastSeq || isFinished(state)) {
    return state;
  }
  const data = event.data && typeof event.data === 'object' ? event.data : {};
  const next: IJobView = {
    ...state,
    jobId: state.jobId ?? event.job_id ?? null,
    status: 'running',
    lastSeq: event.seq
  };
  if (event.message) {
    next.progress = [
      ...state.progress,
      { seq: event.seq, type: event.type, message: event.message }
    ].slice(-MAX_PROGRESS_LINES);
  }
  if ((event.type === 'progress' || event.type === 'log') && data.state === 'confinement') {
    // Once per turn, before candidates run (or are shown unrun).
    next.confinement = parseConfinement(data.confinement) ?? state.confinement;
  }
  switch (event.type) {
    case 'progress':
      next.message = event.message || state.message;
      next.waitingForKernel = data.state === 'waiting_for_kernel';
      next.search = searchProgress(state.search, data);
      break;
    case 'candidate': {
      const candidate = parseCandidate(data.candidate);
      if (candidate) {
        const index =
          typeof data.index === 'number' && data.index >= 0
            ? data.index
            : state.candidates.length;
        const candidates = state.candidates.slice();
        candidates[index] = candidate;
        // A sparse array would break rendering; holes come from out-of-order indices.
        next.candidates = Array.from(candidates, c => c).filter(
          (c): c is ICandidate => !!c
        );
      }
      next.waitingForKernel = false;
      break;
    }
    case 'log':
      break;
    case 'done': {
      const result = parseResult(data.result);
      next.status = 'done';
      next.waitingForKernel = false;
      next.message = event.message || 'Done';
      next.result = result;
      if (result) {
        // The final list is authoritative (ranked, deduplicated, scored).
        next.candidates = result.candidates;
        next.chosen = result.chosen;
      }
      next.turnId = typeof data.turn_id === 'string' && data.turn_id ? data.turn_id : state.turnId;
      // The final verdict wins over the streamed one.
      next.confinement = parseConfinement(data.confinement) ?? state.confinement;
      break;
    }
    case 'error':
      next.waitingForKernel = false;
      if (data.state === 'cancelled') {
        // A stop the user asked for is not a failure.
        next.status = 'cancelled';
        next.error = null;
        next.message = event.message || 'Stopped';
      } else {
        next.status = 'error';
        next.error = event.message || 'The request failed.';
        next.message = next.error;
      }
      break;
  }
  return next;
}

/** The stream ended without a done/error event (cancelled, or lost). */
export function endJob(state: IJobView, status: JobStatus, reason?: string): IJobView {
  if (isFinished(state)) {
    return state;
  }
  if (status === 'done') {
    return { ...state, status: 'done', waitingForKernel: false };
  }
  const error = status === 'cancelled' ? null : reason || 'The request failed.';
  return {
    ...state,
    status,
    waitingForKernel: false,
    error,
    message: status === 'cancelled' ? 'Stopped' : error ?? ''
  };
}

/** The candidate to offer first: the strategy's choice, else the first one. */
export function preferredIndex(job: IJobView): number {
  return job.chosen ?? 0;
}
