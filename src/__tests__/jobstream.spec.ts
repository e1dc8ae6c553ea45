/**
 * JobStream against a fake WebSocket and a fake fetch: a dropped socket is
 * opened again asking only for what came after the last event seen, and
 * polling takes over where no socket opens; through every switch each
 * event arrives once, in order, and none is lost.
 */
import { ServerConnection } from '@jupyterlab/services';

import { JobStream, eventsUrl } from '../handler';
import type { JobEvent } from '../wire';

/** A WebSocket the test drives: open, deliver, drop. */
class FakeSocket {
  static all: FakeSocket[] = [];

  constructor(readonly url: string) {
    FakeSocket.all.push(this);
  }

  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: string }) => void) | null = null;
  onclose: ((event: unknown) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  closed = false;

  /** The server accepted the socket. */
  open(): void {
    this.onopen?.({});
  }

  /** The server sends these events. */
  send(...events: JobEvent[]): void {
    for (const event of events) {
      this.onmessage?.({ data: JSON.stringify(event) });
    }
  }

  /** The connection went (or never came): the browser fires close. */
  drop(): void {
    this.onclose?.({ code: 1006 });
  }

  /** The stream closed it. */
  close(): void {
    this.closed = true;
  }
}

/** A socket that can never be opened: it closes without opening. */
class RefusedSocket extends FakeSocket {
  constructor(url: string) {
    super(url);
    setTimeout(() => this.drop(), 0);
  }
}

function event(seq: number, type: JobEvent['type'] = 'progress'): JobEvent {
  const data =
    type === 'done'
      ? {
          result: {
            strategy: 'direct',
            answer: null,
            chosen: null,
            candidates: 0,
            stats: {}
          },
          turn_id: 't1'
        }
      : { state: 'generating' };
  return {
    version: 1,
    job_id: 'job1',
    seq,
    type,
    message: `event ${seq}`,
    data
  } as unknown as JobEvent;
}

/** The server side of polling: each GET reveals the next batch of the job's events. */
class FakeServer {
  constructor(
    private _batches: { events: JobEvent[]; status: string }[],
    private _failures = 0
  ) {}

  /** The `after` of each GET (null: none, every event). */
  afters: (string | null)[] = [];

  fetch = async (request: Request): Promise<Response> => {
    const url = new URL(request.url);
    expect(url.pathname).toBe('/jupyter-data-agent/jobs/job1');
    this.afters.push(url.searchParams.get('after'));
    if (this._failures > 0) {
      this._failures -= 1;
      throw new TypeError('network down');
    }
    const after = Number(url.searchParams.get('after') ?? '0');
    const batch = this._batches[Math.min(this._step, this._batches.length - 1)];
    this._step += 1;
    this._seen.push(...batch.events);
    const body = {
      version: 1,
      job_id: 'job1',
      status: batch.status,
      // What a server holds: every event so far, those after `after` sent.
      events: this._seen.filter(e => e.seq > after)
    };
    return new Response(JSON.stringify(body), {
      status: 200,
      headers: { 'Content-Type': 'application/json' }
    });
  };

  private _step = 0;
  private _seen: JobEvent[] = [];
}

function settings(
  socket: typeof FakeSocket,
  server?: FakeServer
): ServerConnection.ISettings {
  return ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/',
    wsUrl: 'ws://localhost:8888/',
    token: '',
    appendToken: false,
    WebSocket: socket as unknown as typeof WebSocket,
    fetch: (server?.fetch ??
      (() => Promise.reject(new Error('no polling expected')))) as any
  });
}

/** Follow job1 and record what the stream hands over. */
function follow(options: ServerConnection.ISettings) {
  const seen: number[] = [];
  const ends: { status: string; reason?: string }[] = [];
  const stream = new JobStream({
    jobId: 'job1',
    settings: options,
    onEvent: e => seen.push(e.seq),
    onEnd: (status, reason) => ends.push({ status, reason }),
    pollIntervalMs: 5,
    reconnectDelayMs: 1
  });
  stream.start();
  return { stream, seen, ends };
}

async function until(condition: () => boolean, ms = 2000): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > ms) {
      throw new Error('timed out waiting');
    }
    await new Promise(resolve => setTimeout(resolve, 2));
  }
}

beforeEach(() => {
  FakeSocket.all = [];
});

describe('eventsUrl', () => {
  it('asks for the events after the last one seen, and adds the token where wanted', () => {
    const base = settings(FakeSocket);
    expect(eventsUrl('job1', base)).toBe(
      'ws://localhost:8888/jupyter-data-agent/jobs/job1/events'
    );
    expect(eventsUrl('job1', base, 7)).toBe(
      'ws://localhost:8888/jupyter-data-agent/jobs/job1/events?after=7'
    );
    const withToken = ServerConnection.makeSettings({
      wsUrl: 'ws://localhost:8888/',
      token: 'sec ret',
      appendToken: true
    });
    expect(eventsUrl('job1', withToken, 3)).toBe(
      'ws://localhost:8888/jupyter-data-agent/jobs/job1/events?after=3&token=sec%20ret'
    );
  });
});

describe('JobStream', () => {
  it('delivers the events of one socket once each, and ends on done', async () => {
    const { seen, ends } = follow(settings(FakeSocket));
    const socket = FakeSocket.all[0];
    socket.open();
    socket.send(event(1), event(2), event(2), event(1), event(3, 'done'));
    expect(seen).toEqual([1, 2, 3]);
    expect(ends).toEqual([{ status: 'done', reason: undefined }]);
    expect(socket.closed).toBe(true);
    // Nothing after the end: no reconnect, no duplicate end.
    socket.send(event(4));
    socket.drop();
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(FakeSocket.all).toHaveLength(1);
    expect(seen).toEqual([1, 2, 3]);
    expect(ends).toHaveLength(1);
  });

  it('reconnects after the socket drops, replaying only after the last seq seen', async () => {
    const { seen, ends } = follow(settings(FakeSocket));
    expect(FakeSocket.all[0].url).not.toContain('after=');
    const first = FakeSocket.all[0];
    first.open();
    first.send(event(1), event(2));
    first.drop();

    await until(() => FakeSocket.all.length === 2);
    const second = FakeSocket.all[1];
    expect(second.url).toBe(
      'ws://localhost:8888/jupyter-data-agent/jobs/job1/events?after=2'
    );
    second.open();
    // A replay that overlaps what arrived before changes nothing.
    second.send(event(2), event(3), event(4));
    second.drop();

    await until(() => FakeSocket.all.length === 3);
    const third = FakeSocket.all[2];
    expect(third.url).toContain('?after=4');
    third.open();
    third.send(event(5), event(6, 'done'));

    expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
    expect(ends).toEqual([{ status: 'done', reason: undefined }]);
    expect(third.closed).toBe(true);
  });

  it('polls when the websocket cannot connect', async () => {
    const server = new FakeServer([
      { events: [event(1), event(2)], status: 'running' },
      { events: [], status: 'running' },
      { events: [event(3), event(4, 'done')], status: 'done' }
    ]);
    const { seen, ends } = follow(settings(RefusedSocket, server));
    await until(() => ends.length > 0);
    expect(seen).toEqual([1, 2, 3, 4]);
    expect(ends).toEqual([{ status: 'done', reason: undefined }]);
    // One socket tried; then GET jobs/<id>, each time after the last seq.
    expect(FakeSocket.all).toHaveLength(1);
    expect(server.afters).toEqual([null, '2', '2']);
  });

  it('falls back to polling when the socket cannot even be made', async () => {
    class Throwing {
      constructor() {
        throw new Error('blocked');
      }
    }
    const server = new FakeServer([
      { events: [event(1), event(2, 'done')], status: 'done' }
    ]);
    const { seen, ends } = follow(
      settings(Throwing as unknown as typeof FakeSocket, server)
    );
    await until(() => ends.length > 0);
    expect(seen).toEqual([1, 2]);
    expect(server.afters).toEqual([null]);
  });

  it('hands a dropped stream to polling when no new socket opens, losing and repeating nothing', async () => {
    const server = new FakeServer([
      // The server replays from `after`; 3 was sent while the socket went down.
      { events: [event(1), event(2), event(3)], status: 'running' },
      { events: [event(4), event(5, 'done')], status: 'done' }
    ]);
    const { seen, ends } = follow(settings(FakeSocket, server));
    const first = FakeSocket.all[0];
    first.open();
    first.send(event(1), event(2));
    first.drop();
    await until(() => FakeSocket.all.length === 2);
    // The new socket never opens.
    FakeSocket.all[1].drop();
    await until(() => ends.length > 0);
    expect(seen).toEqual([1, 2, 3, 4, 5]);
    expect(server.afters).toEqual(['2', '3']);
    expect(ends).toEqual([{ status: 'done', reason: undefined }]);
  });

  it('polls after sockets that keep dropping with nothing delivered', async () => {
    const server = new FakeServer([
      { events: [event(1), event(2, 'done')], status: 'done' }
    ]);
    const { seen, ends } = follow(settings(FakeSocket, server));
    for (let i = 0; i < 4; i++) {
      await until(() => FakeSocket.all.length === i + 1);
      FakeSocket.all[i].open();
      FakeSocket.all[i].drop();
    }
    await until(() => ends.length > 0);
    // The first socket and three reconnects, then polling.
    expect(FakeSocket.all).toHaveLength(4);
    expect(seen).toEqual([1, 2]);
  });

  it('ends with an error when polling keeps failing', async () => {
    const server = new FakeServer([{ events: [], status: 'running' }], 5);
    const { seen, ends } = follow(settings(RefusedSocket, server));
    await until(() => ends.length > 0, 5000);
    expect(seen).toEqual([]);
    expect(ends[0].status).toBe('error');
    expect(ends[0].reason).toContain("lost the job's event stream");
  });

  it('stops when disposed: no reconnect, no event', async () => {
    const { stream, seen, ends } = follow(settings(FakeSocket));
    const first = FakeSocket.all[0];
    first.open();
    first.send(event(1));
    stream.dispose();
    expect(first.closed).toBe(true);
    first.send(event(2));
    first.drop();
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(FakeSocket.all).toHaveLength(1);
    expect(seen).toEqual([1]);
    expect(ends).toEqual([]);
  });
});
