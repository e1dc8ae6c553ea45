/**
 * Job events -> what the panel shows for one request. Pure, so the stream
 * handling (ordering, duplicates, `done` naming a candidate already sent)
 * is tested without a server or a DOM.
 *
 * The server validates every event against the wire models before it sends
 * it (src/wire.ts is generated from them), so the reducer reads them as
 * typed. Candidates arrive only as `candidate` events, each at its index;
 * `done` carries their count and the index of the chosen one.
 */
import { IPlanStep, planOf } from './analysis';
import { JobStatus } from './models';
import type {
  AnswerVotes,
  Candidate,
  Confinement,
  DoneResult,
  JobEvent,
  ProgressData,
  StateAgeData
} from './wire';

export type JobViewStatus = 'starting' | 'running' | JobStatus;

export interface IProgressLine {
  seq: number;
  type: JobEvent['type'];
  message: string;
  /** The progress state, where the event had one. */
  state?: string;
}

/** The text of the completion being generated, shown until its candidate arrives. */
export interface IStreamedText {
  candidate: number | null;
  text: string;
}

export interface ISearchProgress {
  iterations?: number;
  nodes?: number;
  best_value?: number | null;
  answers?: AnswerVotes[];
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
  /** An analysis's plan and each step's status, as last sent; null: none. */
  plan: IPlanStep[] | null;
  /** The candidates received, in the order of their index on the server. */
  candidates: Candidate[];
  /** The server's index of each entry of `candidates`. */
  candidateIndex: number[];
  /** The outcome from `done`: strategy, answer, chosen index, count, stats. */
  result: DoneResult | null;
  /** Position in `candidates` of the one the strategy chose, if any. */
  chosen: number | null;
  turnId: string | null;
  /** The verdict on this turn's kernel copies, once the server sent it. */
  confinement: Confinement | null;
  /**
   * The kernel state the turn started from, where it was not the live
   * kernel's now (a cell was running): its age; null: the live state.
   */
  stateAge: StateAgeData | null;
  /** Streamed text of the candidate being written; null once it arrived. */
  streaming: IStreamedText | null;
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
    plan: null,
    candidates: [],
    candidateIndex: [],
    result: null,
    chosen: null,
    turnId: null,
    confinement: null,
    stateAge: null,
    streaming: null,
    error: null
  };
}

/** Elapsed seconds as "7 s", "1 min 05 s", "1 h 02 min". */
export function formatElapsed(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) {
    return `${Math.floor(s / 60)} min ${pad(s % 60)} s`;
  }
  return `${Math.floor(s / 3600)} h ${pad(Math.floor((s % 3600) / 60))} min`;
}

export function isFinished(job: IJobView): boolean {
  return (
    job.status === 'done' ||
    job.status === 'error' ||
    job.status === 'cancelled'
  );
}

function searchProgress(
  previous: ISearchProgress | null,
  data: ProgressData
): ISearchProgress | null {
  const { iterations, nodes, best_value, answers } = data;
  if (
    iterations === undefined &&
    nodes === undefined &&
    best_value === undefined &&
    answers === undefined
  ) {
    return previous;
  }
  const next: ISearchProgress = { ...(previous ?? {}) };
  if (typeof iterations === 'number') {
    next.iterations = iterations;
  }
  if (typeof nodes === 'number') {
    next.nodes = nodes;
  }
  if (best_value !== undefined) {
    next.best_value = best_value;
  }
  if (answers) {
    next.answers = answers;
  }
  return next;
}

/** Put `candidate` at server index `index`, keeping the list in index order. */
function placeCandidate(
  state: IJobView,
  index: number,
  candidate: Candidate
): Pick<IJobView, 'candidates' | 'candidateIndex'> {
  const candidates = state.candidates.slice();
  const candidateIndex = state.candidateIndex.slice();
  const at = candidateIndex.indexOf(index);
  if (at >= 0) {
    candidates[at] = candidate;
  } else {
    let pos = candidateIndex.findIndex(i => i > index);
    pos = pos < 0 ? candidateIndex.length : pos;
    candidates.splice(pos, 0, candidate);
    candidateIndex.splice(pos, 0, index);
  }
  return { candidates, candidateIndex };
}

/** Apply one event. Events at or below `lastSeq` (replays) change nothing. */
export function reduceJob(state: IJobView, event: JobEvent): IJobView {
  if (
    typeof event.seq !== 'number' ||
    event.seq <= state.lastSeq ||
    isFinished(state)
  ) {
    return state;
  }
  const next: IJobView = {
    ...state,
    jobId: state.jobId ?? event.job_id ?? null,
    status: 'running',
    lastSeq: event.seq
  };
  if (event.message) {
    const line: IProgressLine = {
      seq: event.seq,
      type: event.type,
      message: event.message
    };
    if (event.type === 'progress' && event.data.state) {
      line.state = event.data.state;
    }
    const last = state.progress[state.progress.length - 1];
    // "generating: N tokens, S s" updates its own line rather than adding one a second.
    const kept =
      line.state === 'generating' && last?.state === 'generating'
        ? state.progress.slice(0, -1)
        : state.progress;
    next.progress = [...kept, line].slice(-MAX_PROGRESS_LINES);
  }
  switch (event.type) {
    case 'progress': {
      const data = event.data;
      next.message = event.message || state.message;
      next.waitingForKernel = data.state === 'waiting_for_kernel';
      next.search = searchProgress(state.search, data);
      // The whole plan each time: re-planned steps replace the rest.
      next.plan = planOf(data) ?? state.plan;
      if (data.state === 'confinement' && data.confinement) {
        // Once per turn, before candidates run (or are shown unrun).
        next.confinement = data.confinement;
      }
      if (data.state === 'state_age' && data.state_age) {
        // Kept for the turn's note, after the progress line has moved on.
        next.stateAge = data.state_age;
      }
      break;
    }
    case 'delta': {
      const { text, candidate, start } = event.data;
      const previous = state.streaming;
      next.streaming =
        start || !previous || previous.candidate !== candidate
          ? { candidate, text }
          : { candidate, text: previous.text + text };
      break;
    }
    case 'candidate':
      next.streaming = null;
      Object.assign(
        next,
        placeCandidate(state, event.data.index, event.data.candidate)
      );
      next.waitingForKernel = false;
      break;
    case 'log':
      break;
    case 'done': {
      const result = event.data.result;
      next.status = 'done';
      next.waitingForKernel = false;
      next.streaming = null;
      next.message = event.message || 'Done';
      next.result = result;
      // `chosen` is the server's index of a candidate event already received.
      const at =
        result.chosen === null
          ? -1
          : state.candidateIndex.indexOf(result.chosen);
      next.chosen = at >= 0 ? at : null;
      // A candidate event went out as it ran; the vote counted it afterwards.
      // So did its evidence: the vote adds the answer's checks (agreement among them).
      const support = result.support ?? [];
      const checks = result.checks ?? [];
      if (support.length || checks.length) {
        next.candidates = state.candidates.map((c, i) => {
          const final = support[state.candidateIndex[i]];
          const finalChecks = checks[state.candidateIndex[i]];
          const changed = {
            ...(typeof final === 'number' && final !== c.support
              ? { support: final }
              : {}),
            ...(Array.isArray(finalChecks) ? { checks: finalChecks } : {})
          };
          return Object.keys(changed).length ? { ...c, ...changed } : c;
        });
      }
      next.turnId = event.data.turn_id || state.turnId;
      // The final verdict wins over the streamed one.
      next.confinement = event.data.confinement ?? state.confinement;
      break;
    }
    case 'error':
      next.waitingForKernel = false;
      next.streaming = null;
      if (event.data.state === 'cancelled') {
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
export function endJob(
  state: IJobView,
  status: JobStatus,
  reason?: string
): IJobView {
  if (isFinished(state)) {
    return state;
  }
  if (status === 'done') {
    return {
      ...state,
      status: 'done',
      waitingForKernel: false,
      streaming: null
    };
  }
  const error = status === 'cancelled' ? null : reason || 'The request failed.';
  return {
    ...state,
    status,
    waitingForKernel: false,
    streaming: null,
    error,
    message: status === 'cancelled' ? 'Stopped' : (error ?? '')
  };
}

/** The candidate to offer first: the strategy's choice, else the first one. */
export function preferredIndex(job: IJobView): number {
  return job.chosen ?? 0;
}
