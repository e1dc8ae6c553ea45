/**
 * One request of the panel and what came back: an immutable value. A change
 * (an event of its job, a candidate picked) makes a new exchange, so the
 * panel re-renders the one exchange that changed and no other.
 */
import { analysisOf, storedSteps } from './analysis';
import type { EditKind } from './celledit';
import { IJobView } from './events';
import { IStoredRun, ITurn, newTurnId, nowSeconds } from './metadata';
import { boundPreviews } from './previews';
import { Strategy, previewOutputs } from './models';
import { namespaceChanges } from './nsdiff';
import { ISuggestionCandidate } from './suggestions';
import { usageOfResult } from './usage';
import type { Candidate } from './wire';

/** One request and what came back, as the panel shows it. */
export interface IExchange {
  readonly key: string;
  /** The question as shown: the user's words, or what a command asked. */
  readonly intent: string;
  readonly strategy: Strategy;
  readonly job: IJobView;
  /** The turn id once the job is done (server's, or made here). */
  readonly turnId: string | null;
  /** The cell the question was about: suggestions go below it. */
  readonly anchorCellId: string | null;
  /** The cell this request edits: its suggestion replaces it (as a diff). */
  readonly editCellId: string | null;
  /** Fix or Improve (with `editCellId`); null: not an edit. */
  readonly editKind: EditKind | null;
  /** The user's own words of an edit ('' for a bare Fix or Improve). */
  readonly instruction: string;
  /** Candidate shown in the panel. */
  readonly selected: number;
  readonly autoInsert: boolean;
  readonly created: number;
}

/**
 * A session's exchanges, oldest first. An exchange is replaced by a changed
 * copy, never changed in place: the list is a new array after each change,
 * and the other exchanges stay the same objects.
 */
export class ExchangeList {
  get all(): readonly IExchange[] {
    return this._all;
  }

  /** The exchange with this key as it is now. */
  get(key: string): IExchange | null {
    return this._all.find(e => e.key === key) ?? null;
  }

  add(exchange: IExchange): void {
    this._all = [...this._all, exchange];
  }

  clear(): void {
    this._all = [];
  }

  /** A copy of the exchange with `patch` applied takes its place; returns it. */
  replace(
    key: string,
    patch: Partial<Omit<IExchange, 'key'>>
  ): IExchange | null {
    const at = this._all.findIndex(e => e.key === key);
    if (at < 0) {
      return null;
    }
    const next = { ...this._all[at], ...patch };
    const all = this._all.slice();
    all[at] = next;
    this._all = all;
    return next;
  }

  private _all: readonly IExchange[] = [];
}

/** What "Retry" under a turn asks again. */
export interface IRetryRequest {
  /** The question as shown. */
  intent: string;
  strategy: string;
  /** The cell it was about. */
  cellId?: string | null;
  /** The cell an edit turn replaced: a retry edits it again, while it exists. */
  editCellId?: string | null;
  /** Fix or Improve; unknown for edit turns stored before it was kept. */
  editKind?: EditKind | null;
  /** The user's words of an edit. */
  instruction?: string;
  /** Wait for the cell running in the kernel, and start from its state. */
  freshState?: boolean;
}

export function toSuggestionCandidate(
  candidate: Candidate
): ISuggestionCandidate {
  const warning = runWarning(runOf(candidate));
  const analysis = analysisOf(candidate);
  const changes = namespaceChanges(candidate.namespace);
  return {
    code: candidate.code,
    explanation: candidate.explanation,
    steps: candidate.steps.map(s => ({ ...s })),
    ...(warning ? { warning } : {}),
    ...(changes ? { changes } : {}),
    ...(analysis.length ? { analysis } : {})
  };
}

/** What a suggestion's bar says of a candidate that did not run cleanly; '' when it did. */
export function runWarning(run: IStoredRun | null): string {
  switch (run?.status) {
    case 'error':
      return `It raised ${run.ename ?? 'an error'} in its kernel copy.`;
    case 'timeout':
      return 'It was stopped by the time limit in its kernel copy.';
    case 'died':
      return `It was stopped in its kernel copy${run.limit ? ` (${run.limit} limit)` : ''}.`;
    default:
      return '';
  }
}

/** How a candidate ran, as a turn stores it; null: it did not run. */
export function runOf(candidate: Candidate): IStoredRun | null {
  const result = candidate.result;
  const changes = namespaceChanges(candidate.namespace);
  return result
    ? {
        status: result.status,
        duration_s: result.duration_s,
        ename: result.ename,
        limit: result.limit,
        support: candidate.support,
        repaired: candidate.repaired,
        ...(changes ? { changes } : {})
      }
    : null;
}

/**
 * The turn to store for an exchange: candidates, previews, how they ran,
 * the answer in words, what it cost, failure — what the panel shows again
 * after a reload.
 */
export function turnOfExchange(exchange: IExchange): ITurn {
  const job = exchange.job;
  const chosen = job.candidates[exchange.selected] ?? job.candidates[0];
  const failed = job.status === 'error' || job.status === 'cancelled';
  return {
    turn_id: exchange.turnId ?? newTurnId(exchange.created),
    intent: exchange.intent,
    code: chosen?.code ?? '',
    status: 'pending',
    cell_ids: [],
    candidates: job.candidates.map(c => c.code),
    created: nowSeconds(exchange.created),
    explanations: job.candidates.map(c => c.explanation),
    ...(job.candidates.some(c => c.steps.some(s => s.explanation))
      ? {
          steps: job.candidates.map(c =>
            c.steps
              .filter(s => s.explanation)
              .map(s => ({ number: s.number, explanation: s.explanation }))
          )
        }
      : {}),
    strategy: exchange.strategy,
    ...(exchange.editKind
      ? {
          edit_kind: exchange.editKind,
          ...(exchange.instruction ? { instruction: exchange.instruction } : {})
        }
      : {}),
    ...(exchange.editCellId ? { edits_cell: exchange.editCellId } : {}),
    ...(job.confinement ? { confinement: job.confinement } : {}),
    ...(job.result?.answer ? { answer: job.result.answer } : {}),
    ...(job.result
      ? {
          usage: usageOfResult(job.result),
          ...(job.result.stats.context
            ? { context: job.result.stats.context }
            : {})
        }
      : {}),
    ...(job.candidates.some(c => c.result)
      ? { runs: job.candidates.map(runOf) }
      : {}),
    ...(job.result?.stats.classes?.length
      ? { classes: job.result.stats.classes }
      : {}),
    ...(chosen && analysisOf(chosen).length
      ? { analysis: storedSteps(analysisOf(chosen)) }
      : {}),
    ...(job.candidates.length
      ? {
          previews: boundPreviews(
            job.candidates.map(c =>
              c.result ? previewOutputs(c.result) : null
            )
          )
        }
      : {}),
    ...(failed
      ? {
          failure: {
            status: job.status as 'error' | 'cancelled',
            reason: job.error ?? ''
          }
        }
      : {})
  };
}
