import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';

import { JobStatus } from './models';
import type {
  AgentConfig,
  AnalysisRevised,
  AnalysisRevision,
  CancelReply,
  DecisionRecorded,
  DecisionRequest,
  JobEvent,
  JobPoll,
  ProposalDecisionRequest,
  ProposalReply,
  ProposalsReply,
  TurnAccepted,
  TurnList,
  TurnRequest,
  ValueModelReply,
  VariablesReply
} from './wire';

export type { AgentConfig } from './wire';

/** Namespace of every server endpoint of the extension. */
export const API_NAMESPACE = 'jupyter-data-agent';

/**
 * Call a server endpoint of the extension.
 *
 * Goes through ServerConnection so the server's auth token and XSRF cookie
 * are sent the same way JupyterLab's own requests send them.
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const requestUrl = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(requestUrl, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: unknown = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // Not JSON: keep the text so the error below can show it.
    }
  }
  if (!response.ok) {
    const message =
      data && typeof data === 'object' && 'message' in data
        ? String(data.message)
        : String(data);
    throw new ServerConnection.ResponseError(response, message);
  }
  return data as T;
}

export function getConfig(): Promise<AgentConfig> {
  return requestAPI<AgentConfig>('config');
}

export function startTurn(body: TurnRequest): Promise<TurnAccepted> {
  return requestAPI<TurnAccepted>('turns', {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/** Record what the user did with a candidate (the server's local store; training data). */
export function postDecision(body: DecisionRequest): Promise<DecisionRecorded> {
  return requestAPI<DecisionRecorded>('decisions', {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/** Outside agents' proposals for one notebook, oldest first, and their activity. */
export function getProposals(
  notebookPath: string,
  settings?: ServerConnection.ISettings
): Promise<ProposalsReply> {
  return requestAPI<ProposalsReply>(
    `proposals?notebook_path=${encodeURIComponent(notebookPath)}`,
    {},
    settings
  );
}

/**
 * The user's turns on one notebook from every source (sidebar, `%%agent`,
 * MCP, ACP, Jupyter AI), newest first; an older server answers 404.
 */
export function getTurnList(
  notebookPath: string,
  settings?: ServerConnection.ISettings
): Promise<TurnList> {
  return requestAPI<TurnList>(
    `turns?notebook_path=${encodeURIComponent(notebookPath)}`,
    {},
    settings
  );
}

/** One proposal as the server has it now. */
export function getProposal(proposalId: string): Promise<ProposalReply> {
  return requestAPI<ProposalReply>(
    URLExt.join('proposals', encodeURIComponent(proposalId))
  );
}

/** The user's Accept, Reject, or edit after an Accept of a proposal. */
export function postProposalDecision(
  proposalId: string,
  body: ProposalDecisionRequest
): Promise<ProposalReply> {
  return requestAPI<ProposalReply>(
    URLExt.join('proposals', encodeURIComponent(proposalId), 'decision'),
    { method: 'POST', body: JSON.stringify(body) }
  );
}

/** Search turns from now on use the newest trained value model. */
export function reloadValueModel(): Promise<ValueModelReply> {
  return requestAPI<ValueModelReply>('value-model/reload', {
    method: 'POST',
    body: '{}'
  });
}

/** The kernel's DataFrames and Series, for the composer's `@` mentions. */
export function getVariables(kernelId: string): Promise<VariablesReply> {
  return requestAPI<VariablesReply>(
    `variables?kernel_id=${encodeURIComponent(kernelId)}`
  );
}

export function cancelJob(jobId: string): Promise<CancelReply> {
  return requestAPI<CancelReply>(
    URLExt.join('jobs', encodeURIComponent(jobId), 'cancel'),
    { method: 'POST', body: '{}' }
  );
}

/**
 * Stop an analysis after the step in progress: it ends with `done` and the
 * verified steps so far (other strategies are cancelled: `cancelJob`).
 */
export function finishJob(jobId: string): Promise<unknown> {
  return requestAPI<unknown>(
    URLExt.join('jobs', encodeURIComponent(jobId), 'finish'),
    { method: 'POST', body: '{}' }
  );
}

/**
 * Re-run an analysis's steps from an edited one, in a chain of copies from
 * the step before it. 409: the turn's copies expired.
 */
export function rerunAnalysis(
  turnId: string,
  body: AnalysisRevision
): Promise<AnalysisRevised> {
  return requestAPI<AnalysisRevised>(
    URLExt.join('turns', encodeURIComponent(turnId), 'analysis'),
    { method: 'POST', body: JSON.stringify(body) }
  );
}

/**
 * Stop waiting for a busy kernel: the turn goes on from the notebook text
 * (no DataFrame schemas, nothing run), as after the server's wait limit.
 */
export function answerWithoutKernel(jobId: string): Promise<CancelReply> {
  return requestAPI<CancelReply>(
    URLExt.join('jobs', encodeURIComponent(jobId), 'no-kernel'),
    { method: 'POST', body: '{}' }
  );
}

export function pollJob(
  jobId: string,
  after: number,
  settings?: ServerConnection.ISettings
): Promise<JobPoll> {
  const path = URLExt.join('jobs', encodeURIComponent(jobId));
  // Without `after` the server sends every event: no guess about where seq starts.
  return requestAPI<JobPoll>(
    after >= 0 ? `${path}?after=${after}` : path,
    {},
    settings
  );
}

/**
 * The events socket URL, with the token appended the way kernels do it;
 * `after`: the last event already seen (a reconnect), so the server replays
 * only the ones after it.
 */
export function eventsUrl(
  jobId: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings(),
  after = -1
): string {
  const url = URLExt.join(
    settings.wsUrl,
    API_NAMESPACE,
    'jobs',
    encodeURIComponent(jobId),
    'events'
  );
  const query: string[] = [];
  if (after >= 0) {
    query.push(`after=${after}`);
  }
  // Same rule as @jupyterlab/services' kernel sockets: cookies authenticate
  // same-host sockets; the token is only added where the server wants it.
  if (settings.appendToken && settings.token) {
    query.push(`token=${encodeURIComponent(settings.token)}`);
  }
  return query.length ? `${url}?${query.join('&')}` : url;
}

export namespace JobStream {
  export interface IOptions {
    jobId: string;
    /** Every event once, in `seq` order. */
    onEvent: (event: JobEvent) => void;
    /** The job ended (done, error, cancelled) or the stream gave up. */
    onEnd?: (status: JobStatus, reason?: string) => void;
    settings?: ServerConnection.ISettings;
    pollIntervalMs?: number;
    /** Wait before opening a new socket after one dropped (times the attempt). */
    reconnectDelayMs?: number;
  }
}

/** Sockets opened in a row after drops, with no event between, before polling. */
const MAX_RECONNECTS = 3;

/**
 * Follows one job: the websocket first. A socket that drops before the job
 * ends is opened again with `?after=<last seq>`, so the server replays only
 * what was missed; where a socket cannot be opened at all (or keeps
 * dropping), `GET jobs/<id>?after=<seq>` polling takes over. Events are
 * deduplicated by `seq`, so switching transport mid-stream is safe: none
 * is delivered twice, none is lost.
 */
export class JobStream implements IDisposable {
  constructor(options: JobStream.IOptions) {
    this._options = options;
    this._settings = options.settings ?? ServerConnection.makeSettings();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  get lastSeq(): number {
    return this._lastSeq;
  }

  start(): void {
    this._connect();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.clearTimeout(this._reconnectTimer);
    this._closeSocket();
  }

  private _connect(): void {
    if (this._disposed || this._ended) {
      return;
    }
    let socket: WebSocket;
    try {
      socket = new this._settings.WebSocket(
        eventsUrl(this._options.jobId, this._settings, this._lastSeq)
      );
    } catch {
      void this._poll();
      return;
    }
    let opened = false;
    this._socket = socket;
    socket.onopen = () => {
      opened = true;
    };
    socket.onmessage = msg => {
      opened = true;
      try {
        this._deliver(JSON.parse(String(msg.data)) as JobEvent);
      } catch (error) {
        console.warn('jupyter-data-agent: bad event', error);
      }
    };
    socket.onclose = () => {
      this._socket = null;
      if (this._ended || this._disposed) {
        return;
      }
      if (!opened || this._reconnects >= MAX_RECONNECTS) {
        // No socket to be had (a proxy without websockets): poll instead.
        void this._poll();
        return;
      }
      this._reconnects += 1;
      const delay = (this._options.reconnectDelayMs ?? 500) * this._reconnects;
      this._reconnectTimer = window.setTimeout(() => this._connect(), delay);
    };
  }

  private _closeSocket(): void {
    if (this._socket) {
      this._socket.onclose = null;
      this._socket.onmessage = null;
      this._socket.onopen = null;
      this._socket.close();
      this._socket = null;
    }
  }

  private _deliver(event: JobEvent): void {
    if (this._disposed || this._ended || typeof event?.seq !== 'number') {
      return;
    }
    if (event.seq <= this._lastSeq) {
      return;
    }
    this._lastSeq = event.seq;
    // The stream moves: a later drop starts a fresh round of reconnects.
    this._reconnects = 0;
    this._options.onEvent(event);
    if (event.type === 'done' || event.type === 'error') {
      this._end(event.type === 'done' ? 'done' : 'error');
    }
  }

  private _end(status: JobStatus, reason?: string): void {
    if (this._ended) {
      return;
    }
    this._ended = true;
    window.clearTimeout(this._reconnectTimer);
    this._closeSocket();
    this._options.onEnd?.(status, reason);
  }

  private async _poll(): Promise<void> {
    if (this._polling) {
      return;
    }
    this._polling = true;
    const base = this._options.pollIntervalMs ?? 500;
    let delay = base;
    let failures = 0;
    while (!this._disposed && !this._ended) {
      try {
        const reply = await pollJob(
          this._options.jobId,
          this._lastSeq,
          this._settings
        );
        failures = 0;
        for (const event of reply.events ?? []) {
          this._deliver(event);
        }
        if (reply.status !== 'running') {
          this._end(reply.status);
          break;
        }
        delay = reply.events?.length ? base : Math.min(delay * 1.5, 3000);
      } catch (error) {
        failures += 1;
        if (failures >= 5) {
          this._end('error', `lost the job's event stream: ${error}`);
          break;
        }
        delay = Math.min(delay * 2, 5000);
      }
      await new Promise(resolve => setTimeout(resolve, delay));
    }
    this._polling = false;
  }

  private _options: JobStream.IOptions;
  private _settings: ServerConnection.ISettings;
  private _socket: WebSocket | null = null;
  private _lastSeq = -1;
  private _reconnects = 0;
  private _reconnectTimer = 0;
  private _ended = false;
  private _polling = false;
  private _disposed = false;
}
