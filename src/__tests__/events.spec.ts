import { endJob, initialJob, preferredIndex, reduceJob } from '../events';
import { IJobEvent, parseConfinement, previewOutputs, toNbformatOutput } from '../models';

const event = (seq: number, type: IJobEvent['type'], message = '', data: any = {}): IJobEvent => ({
  version: 1,
  job_id: 'j1',
  seq,
  type,
  message,
  data
});

const candidate = (code: string, status = 'ok') => ({
  code,
  steps: [{ number: 1, explanation: 'Count rows', code }],
  explanation: 'Step 1: Count rows',
  result: {
    status,
    outputs: [
      {
        output_type: 'execute_result',
        name: null,
        text: null,
        data: { 'text/plain': '3' },
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
    limit: null
  },
  score: null,
  support: 1,
  repaired: false,
  meta: {}
});

describe('job event reducer', () => {
  it('streams progress, candidates and the final result', () => {
    let job = initialJob('j1');
    job = reduceJob(job, event(1, 'progress', 'Reading the kernel', { state: 'waiting_for_kernel' }));
    expect(job.waitingForKernel).toBe(true);
    expect(job.message).toBe('Reading the kernel');
    job = reduceJob(job, event(2, 'candidate', 'Candidate 1', { index: 0, candidate: candidate('len(df)') }));
    expect(job.waitingForKernel).toBe(false);
    expect(job.candidates.map(c => c.code)).toEqual(['len(df)']);
    job = reduceJob(
      job,
      event(3, 'done', 'Done', {
        turn_id: 'abc',
        result: {
          strategy: 'vote',
          answer: null,
          chosen: 1,
          candidates: [candidate('len(df)'), candidate('df.shape[0]')],
          stats: { iterations: 0 },
          protections: null
        }
      })
    );
    expect(job.status).toBe('done');
    expect(job.turnId).toBe('abc');
    expect(job.candidates).toHaveLength(2);
    expect(preferredIndex(job)).toBe(1);
    expect(job.progress.map(p => p.seq)).toEqual([1, 2, 3]);
  });

  it('ignores replayed and out-of-date events', () => {
    let job = reduceJob(initialJob('j1'), event(5, 'progress', 'five'));
    const same = reduceJob(job, event(5, 'progress', 'again'));
    expect(same).toBe(job);
    job = reduceJob(job, event(4, 'progress', 'old'));
    expect(job.message).toBe('five');
  });

  it('keeps search statistics across progress events', () => {
    let job = reduceJob(initialJob('j1'), event(1, 'progress', 'iteration 1', { iterations: 1, nodes: 3 }));
    job = reduceJob(
      job,
      event(2, 'progress', 'iteration 2', {
        iterations: 2,
        best_value: 0.5,
        answers: [{ answer: '42', votes: 2 }]
      })
    );
    expect(job.search).toEqual({
      iterations: 2,
      nodes: 3,
      best_value: 0.5,
      answers: [{ answer: '42', votes: 2 }]
    });
  });

  it('records errors and nothing after the end', () => {
    let job = reduceJob(initialJob('j1'), event(1, 'error', 'The model server is not reachable'));
    expect(job.status).toBe('error');
    expect(job.error).toBe('The model server is not reachable');
    const after = reduceJob(job, event(2, 'progress', 'late'));
    expect(after).toBe(job);
    expect(endJob(job, 'cancelled')).toBe(job);
  });

  it('ends a job cancelled without a final event', () => {
    const job = endJob(reduceJob(initialJob('j1'), event(1, 'progress', 'x')), 'cancelled');
    expect(job.status).toBe('cancelled');
    expect(job.error).toBeNull();
    expect(endJob(initialJob(), 'error', 'HTTP 400: no kernel').error).toBe('HTTP 400: no kernel');
  });
});

describe('output preview', () => {
  it('turns dataclass dumps into strict nbformat outputs', () => {
    expect(
      toNbformatOutput({ output_type: 'stream', name: 'stdout', text: 'hi\n', data: {}, ename: null })
    ).toEqual({ output_type: 'stream', name: 'stdout', text: 'hi\n' });
    expect(
      toNbformatOutput({ output_type: 'display_data', data: { 'image/png': 'AAA' }, metadata: null })
    ).toEqual({ output_type: 'display_data', data: { 'image/png': 'AAA' }, metadata: {} });
    expect(toNbformatOutput({ output_type: 'unknown' })).toBeNull();
  });

  it('shows a timeout as an error output', () => {
    const outputs = previewOutputs({
      status: 'timeout',
      outputs: [],
      limit: 'timeout',
      traceback: []
    });
    expect(outputs).toEqual([
      {
        output_type: 'error',
        ename: 'Timeout',
        evalue: 'the timeout limit was reached',
        traceback: ['Timeout: the timeout limit was reached']
      }
    ]);
  });
});

describe('stopping and turn ids', () => {
  it('reads a cancelled error event as a stop, not a failure', () => {
    const job = reduceJob(initialJob('j1'), event(1, 'error', 'Cancelled', { state: 'cancelled' }));
    expect(job.status).toBe('cancelled');
    expect(job.error).toBeNull();
  });

  it('keeps the turn id from the 202 reply when done has none', () => {
    const job = reduceJob(
      { ...initialJob('j1'), turnId: 'from-202' },
      event(1, 'done', 'Done', { result: { candidates: [] } })
    );
    expect(job.turnId).toBe('from-202');
  });
});

describe('confinement verdict', () => {
  const LAYERS = [
    'landlock_fs',
    'landlock_net',
    'seccomp',
    'capabilities',
    'descriptors',
    'shared_mappings',
    'secrets',
    'processes',
    'limits'
  ];
  const verdict = (status: string, off: string[] = [], policy = 'require') => ({
    policy,
    status,
    execute: status !== 'not_executed',
    message: `copies: ${status}`,
    layers: LAYERS.map(name => ({
      name,
      on: !off.includes(name),
      detail: off.includes(name) ? `${name} is not available here` : `${name} on`
    })),
    missing: off
  });

  it('is read from the progress event and kept through candidates', () => {
    let job = initialJob('j1');
    expect(job.confinement).toBeNull();
    job = reduceJob(
      job,
      event(1, 'progress', 'Kernel copies: partially confined', {
        state: 'confinement',
        confinement: verdict('partial', ['seccomp'], 'warn')
      })
    );
    expect(job.confinement).toEqual({
      policy: 'warn',
      status: 'partial',
      execute: true,
      message: 'copies: partial',
      layers: expect.any(Array),
      missing: ['seccomp']
    });
    expect(job.confinement!.layers).toHaveLength(9);
    expect(job.confinement!.layers.find(l => l.name === 'seccomp')).toEqual({
      name: 'seccomp',
      on: false,
      detail: 'seccomp is not available here'
    });
    // Other progress events leave it alone.
    job = reduceJob(job, event(2, 'progress', 'Searching', { state: 'searching', iterations: 1 }));
    job = reduceJob(job, event(3, 'candidate', 'Candidate 1', { index: 0, candidate: candidate('len(df)') }));
    expect(job.confinement?.status).toBe('partial');
  });

  it('takes the done event’s verdict as final, and keeps the streamed one when done has none', () => {
    let job = reduceJob(
      initialJob('j1'),
      event(1, 'progress', '', { state: 'confinement', confinement: verdict('confined') })
    );
    const kept = reduceJob(job, event(2, 'done', 'Done', { result: { candidates: [] }, turn_id: 't' }));
    expect(kept.confinement?.status).toBe('confined');
    job = reduceJob(
      job,
      event(2, 'done', 'Done', {
        result: { candidates: [] },
        turn_id: 't',
        confinement: verdict('not_executed', ['seccomp', 'landlock_net'])
      })
    );
    expect(job.confinement).toMatchObject({
      status: 'not_executed',
      execute: false,
      missing: ['seccomp', 'landlock_net']
    });
  });

  it('reads the verdict from done alone (no progress event seen, e.g. a late socket)', () => {
    const job = reduceJob(
      initialJob('j1'),
      event(7, 'done', 'Done', { result: { candidates: [] }, confinement: verdict('confined') })
    );
    expect(job.confinement?.status).toBe('confined');
    expect(job.confinement?.missing).toEqual([]);
  });

  it('ignores malformed verdicts and a replayed event', () => {
    let job = reduceJob(
      initialJob('j1'),
      event(1, 'progress', '', { state: 'confinement', confinement: verdict('confined') })
    );
    for (const bad of [null, 'confined', [], { status: 'safe' }, { layers: [] }]) {
      job = reduceJob(job, event(job.lastSeq + 1, 'progress', '', { state: 'confinement', confinement: bad }));
      expect(job.confinement?.status).toBe('confined');
    }
    const replay = reduceJob(
      job,
      event(1, 'progress', '', { state: 'confinement', confinement: verdict('partial', ['seccomp']) })
    );
    expect(replay).toBe(job);
  });

  it('reads leniently and never claims a not-executed turn ran', () => {
    expect(
      parseConfinement({
        status: 'not_executed',
        execute: true,
        layers: [{ name: 'seccomp', on: 'yes' }, { on: true }, 'landlock_fs'],
        message: ['not ', 'run']
      })
    ).toEqual({
      policy: 'require',
      status: 'not_executed',
      execute: false,
      message: 'not run',
      layers: [{ name: 'seccomp', on: false, detail: '' }],
      missing: ['seccomp']
    });
    expect(parseConfinement({ status: 'confined', policy: 'warn' })).toMatchObject({
      policy: 'warn',
      execute: true,
      layers: [],
      missing: []
    });
    expect(parseConfinement(undefined)).toBeNull();
  });
});
