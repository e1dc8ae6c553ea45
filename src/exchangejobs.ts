/**
 * The jobs of a session's requests: each followed on its event stream,
 * stopped (an analysis first asked to end after its step), or told to stop
 * waiting for a busy kernel. A job's view changes only through `setJob`;
 * a request that failed or was stopped is stored as a turn too.
 */
import { IDisposable } from '@lumino/disposable';

import { ANALYSIS } from './analysis';
import { IJobView, endJob, isFinished, reduceJob } from './events';
import { ExchangeList, IExchange } from './exchange';
import {
  JobStream,
  answerWithoutKernel,
  cancelJob,
  finishJob,
  startTurn
} from './handler';
import { newTurnId } from './metadata';
import type { TurnRequest } from './wire';

export namespace ExchangeJobs {
  export interface IHooks {
    /** An exchange's job changed. */
    changed: () => void;
    /** A job is done: its turn is stored and its candidate offered. */
    done: (key: string) => void;
    /** Store a failed or stopped request's turn (it has its turn id). */
    store: (exchange: IExchange) => void;
    /** Whether a turn can be stored now (the notebook is open). */
    canStore: () => boolean;
    /** A job's stream ended, however it ended. */
    ended: () => void;
  }
}

export class ExchangeJobs implements IDisposable {
  constructor(
    private _exchanges: ExchangeList,
    private _hooks: ExchangeJobs.IHooks
  ) {}

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** A new job view for an exchange; nothing happens when it did not change. */
  setJob(key: string, update: (job: IJobView) => IJobView): IExchange | null {
    const current = this._exchanges.get(key);
    if (!current) {
      return null;
    }
    const job = update(current.job);
    if (job === current.job) {
      return current;
    }
    const next = this._exchanges.replace(key, { job });
    this._hooks.changed();
    return next;
  }

  /** Send a request's turn and follow its job; a refusal ends it with the reason. */
  async start(key: string, body: TurnRequest): Promise<void> {
    try {
      const { job_id, turn_id } = await startTurn(body);
      this.setJob(key, job => ({
        ...job,
        jobId: job_id,
        turnId: turn_id ?? null,
        status: 'running',
        message: 'Started'
      }));
      this._follow(key, job_id);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this.setJob(key, job => endJob(job, 'error', reason));
      this.recordFailure(key);
    }
  }

  /** Follow a started job's events until it ends. */
  private _follow(key: string, jobId: string): void {
    const stream = new JobStream({
      jobId,
      onEvent: event => {
        const before = this._exchanges.get(key)?.job.status;
        const after = this.setJob(key, job => reduceJob(job, event));
        if (before !== 'done' && after?.job.status === 'done') {
          this._hooks.done(key);
        }
      },
      onEnd: (status, reason) => {
        this.setJob(key, job => endJob(job, status, reason));
        this._streams.delete(key);
        this.recordFailure(key);
        this._hooks.ended();
      }
    });
    this._streams.set(key, stream);
    stream.start();
  }

  /**
   * Stop a request: an analysis ends after the step in progress (a second
   * Stop cancels it outright), any other is cancelled.
   */
  async stop(exchange: IExchange): Promise<void> {
    const key = exchange.key;
    const jobId = exchange.job.jobId;
    if (!jobId) {
      this.setJob(key, job => endJob(job, 'cancelled'));
      this.recordFailure(key);
      return;
    }
    if (exchange.strategy === ANALYSIS && !this._finishing.has(key)) {
      // The analysis ends after the step in progress, with `done` and the
      // verified steps so far: reviewed like a whole one.
      this._finishing.add(key);
      this.setJob(key, job => ({
        ...job,
        message: 'Stopping after the step in progress…'
      }));
      try {
        await finishJob(jobId);
        return;
      } catch (error) {
        // A server without it: stopped as any other turn.
        console.warn('jupyter-data-agent: finish failed', error);
      }
    }
    this.setJob(key, job => ({ ...job, message: 'Stopping…' }));
    try {
      await cancelJob(jobId);
    } catch (error) {
      console.warn('jupyter-data-agent: cancel failed', error);
    }
    // The stream reports the end; if it is already gone, end here.
    window.setTimeout(() => {
      const current = this._exchanges.get(key);
      if (current && !isFinished(current.job)) {
        this._streams.get(key)?.dispose();
        this.setJob(key, job => endJob(job, 'cancelled'));
        this.recordFailure(key);
      }
    }, 5000);
  }

  /** The request stops waiting for a busy kernel ("answer now"). */
  async answerFromText(exchange: IExchange): Promise<void> {
    const jobId = exchange.job.jobId;
    if (!jobId || !exchange.job.waitingForKernel) {
      return;
    }
    this.setJob(exchange.key, job => ({
      ...job,
      message: 'Answering from the notebook text…'
    }));
    try {
      await answerWithoutKernel(jobId);
    } catch (error) {
      console.warn('jupyter-data-agent: could not stop waiting', error);
    }
  }

  /**
   * A stopped or failed request is stored too, so it keeps its place in
   * the conversation and its reason after a reload. One refused before it
   * was sent (an intent too long) is not: it never became a turn.
   */
  recordFailure(key: string): void {
    const current = this._exchanges.get(key);
    const job = current?.job;
    if (
      !current ||
      !job ||
      (job.status !== 'error' && job.status !== 'cancelled') ||
      current.turnId ||
      !this._hooks.canStore()
    ) {
      return;
    }
    const exchange = this._exchanges.replace(key, {
      turnId: job.turnId ?? newTurnId(current.created)
    })!;
    this._hooks.store(exchange);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    for (const stream of this._streams.values()) {
      stream.dispose();
    }
    this._streams.clear();
  }

  private _streams = new Map<string, JobStream>();
  /** Analyses asked to finish after their step (a second Stop cancels). */
  private _finishing = new Set<string>();
  private _disposed = false;
}
