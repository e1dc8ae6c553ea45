/**
 * Polls one notebook's outside-agent proposals (`GET proposals`) every
 * POLL_INTERVAL_MS while the page is visible; a hidden page stops asking
 * and asks again as soon as it is shown. Failures back off (doubling, up to
 * a minute) and an answer brings the normal pace back. The state is the
 * reducer's (proposals.ts); the owner hears every answer.
 */
import { IDisposable } from '@lumino/disposable';

import { getProposals } from './handler';
import {
  EMPTY_POLL,
  IPollState,
  POLL_INTERVAL_MS,
  ProposalsReply,
  nextPollDelay,
  reducePoll
} from './proposals';

export namespace ProposalPoller {
  export interface IOptions {
    /** The notebook's path as the server knows it (read at each request). */
    path: () => string;
    /** After each answer: the state, and whether it changed. */
    onPoll: (state: IPollState, changed: boolean) => void;
    /** The request (tests replace it). */
    fetch?: (path: string) => Promise<ProposalsReply>;
    intervalMs?: number;
    /** Whether the page is visible (tests replace it). */
    visible?: () => boolean;
  }
}

export class ProposalPoller implements IDisposable {
  constructor(options: ProposalPoller.IOptions) {
    this._options = options;
    this._fetch = options.fetch ?? (path => getProposals(path));
    this._visible =
      options.visible ??
      (() =>
        typeof document === 'undefined' ||
        document.visibilityState !== 'hidden');
    if (typeof document !== 'undefined') {
      document.addEventListener('visibilitychange', this._onVisibility);
    }
  }

  get state(): IPollState {
    return this._state;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Ask now (and go on polling). */
  start(): void {
    this._schedule(0);
  }

  /** Forget what was seen (the notebook was renamed) and ask again. */
  reset(): void {
    this._state = EMPTY_POLL;
    this._schedule(0);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.clearTimeout(this._timer);
    if (typeof document !== 'undefined') {
      document.removeEventListener('visibilitychange', this._onVisibility);
    }
  }

  private _schedule(delay: number): void {
    if (this._disposed) {
      return;
    }
    window.clearTimeout(this._timer);
    this._timer = window.setTimeout(() => void this._tick(), delay);
  }

  private async _tick(): Promise<void> {
    if (this._disposed || this._inFlight) {
      return;
    }
    if (!this._visible()) {
      // Hidden: nothing to ask until the page is shown again.
      this._paused = true;
      return;
    }
    this._inFlight = true;
    const path = this._options.path();
    let next: IPollState;
    try {
      const reply = await this._fetch(path);
      next = reducePoll(this._state, { type: 'loaded', reply });
    } catch (error) {
      next = reducePoll(this._state, {
        type: 'failed',
        error: error instanceof Error ? error.message : String(error)
      });
    } finally {
      this._inFlight = false;
    }
    if (this._disposed) {
      return;
    }
    if (path !== this._options.path()) {
      // Renamed while asking: the answer is about the old path.
      this._schedule(0);
      return;
    }
    const changed = next !== this._state;
    this._state = next;
    if (!next.failures) {
      this._options.onPoll(next, changed);
    }
    this._schedule(
      nextPollDelay(next, this._options.intervalMs ?? POLL_INTERVAL_MS)
    );
  }

  private _onVisibility = (): void => {
    if (this._paused && this._visible()) {
      this._paused = false;
      this._schedule(0);
    }
  };

  private _options: ProposalPoller.IOptions;
  private _fetch: (path: string) => Promise<ProposalsReply>;
  private _visible: () => boolean;
  private _state: IPollState = EMPTY_POLL;
  private _timer = 0;
  private _inFlight = false;
  private _paused = false;
  private _disposed = false;
}
