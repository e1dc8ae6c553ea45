import {
  endJob,
  formatElapsed,
  initialJob,
  preferredIndex,
  reduceJob
} from '../events';
import {
  parseConfinement,
  previewOutputs,
  toNbformatOutput,
  TRANSPORT_LABELS
} from '../models';
import type {
  Candidate,
  CandidateEvent,
  Confinement,
  DeltaEvent,
  DoneEvent,
  DoneResult,
  ErrorEvent,
  LogEvent,
  ProgressData,
  ProgressEvent
} from '../wire';

const JOB = 'j1';

const progress = (
  seq: number,
  message = '',
  data: ProgressData = {}
): ProgressEvent => ({
  version: 1,
  job_id: JOB,
  seq,
  type: 'progress',
  message,
  data
});

const log = (seq: number, message: string): LogEvent => ({
  version: 1,
  job_id: JOB,
  seq,
  type: 'log',
  message,
  data: {}
});

const failed = (
  seq: number,
  message: string,
  state: 'error' | 'cancelled' = 'error'
): ErrorEvent => ({
  version: 1,
  job_id: JOB,
  seq,
  type: 'error',
  message,
  data: { state }
});

const candidate = (code: string, status: 'ok' | 'error' = 'ok'): Candidate => ({
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
    pid: 42,
    limit: null,
    truncated: false,
    namespace: null
  },
  score: null,
  support: 1,
  repaired: false,
  meta: {},
  trace: [],
  analysis: [],
  checks: [],
  namespace: null
});

const sent = (
  seq: number,
  index: number,
  c: Candidate,
  message = `Candidate ${index + 1}`
): CandidateEvent => ({
  version: 1,
  job_id: JOB,
  seq,
  type: 'candidate',
  message,
  data: { index, candidate: c }
});

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

const verdict = (
  status: Confinement['status'],
  off: string[] = [],
  policy: Confinement['policy'] = 'require'
): Confinement => ({
  policy,
  status,
  execute: status !== 'not_executed',
  message: `copies: ${status}`,
  layers: LAYERS.map(name => ({
    name,
    on: !off.includes(name),
    detail: off.includes(name) ? `${name} is not available here` : `${name} on`
  })),
  missing: off,
  transport: 'local'
});

const STATS = {
  iterations: 0,
  nodes: 1,
  model_calls: 1,
  prompt_tokens: 900,
  completion_tokens: 120,
  reused_tokens: 0,
  executions: 1,
  wall_time_s: 1.2,
  model_time_s: 0.9,
  value: null,
  classes: [],
  estimator: '',
  transport: 'local' as const,
  context: null,
  unspent: 0,
  samples: 0
};

/** The `done` event as the server sends it: a count and an index, never the candidates. */
const done = (
  seq: number,
  result: Partial<DoneResult> = {},
  extra: { turn_id?: string; confinement?: Confinement } = {}
): DoneEvent => ({
  version: 1,
  job_id: JOB,
  seq,
  type: 'done',
  message: 'Done',
  data: {
    result: {
      strategy: 'direct',
      answer: null,
      chosen: null,
      candidates: 0,
      stats: STATS,
      protections: null,
      ...result
    },
    turn_id: extra.turn_id ?? '',
    confinement: extra.confinement ?? verdict('confined')
  }
});

describe('job event reducer', () => {
  it('streams progress and candidates; done names the chosen one by index', () => {
    let job = initialJob(JOB);
    job = reduceJob(
      job,
      progress(1, 'Reading the kernel', { state: 'waiting_for_kernel' })
    );
    expect(job.waitingForKernel).toBe(true);
    expect(job.message).toBe('Reading the kernel');
    job = reduceJob(job, sent(2, 0, candidate('len(df)')));
    expect(job.waitingForKernel).toBe(false);
    expect(job.candidates.map(c => c.code)).toEqual(['len(df)']);
    job = reduceJob(job, sent(3, 1, candidate('df.shape[0]')));
    job = reduceJob(
      job,
      done(
        4,
        { strategy: 'vote', chosen: 1, candidates: 2 },
        { turn_id: 'abc' }
      )
    );
    expect(job.status).toBe('done');
    expect(job.turnId).toBe('abc');
    // The candidates are the ones the candidate events brought.
    expect(job.candidates.map(c => c.code)).toEqual(['len(df)', 'df.shape[0]']);
    expect(job.chosen).toBe(1);
    expect(preferredIndex(job)).toBe(1);
    expect(job.result).toMatchObject({
      strategy: 'vote',
      candidates: 2,
      chosen: 1
    });
    expect(job.progress.map(p => p.seq)).toEqual([1, 2, 3, 4]);
  });

  it('keeps candidates in index order whatever order they arrive in', () => {
    let job = initialJob(JOB);
    job = reduceJob(job, sent(1, 2, candidate('third')));
    job = reduceJob(job, sent(2, 0, candidate('first')));
    job = reduceJob(job, sent(3, 1, candidate('second')));
    expect(job.candidates.map(c => c.code)).toEqual([
      'first',
      'second',
      'third'
    ]);
    expect(job.candidateIndex).toEqual([0, 1, 2]);
    // The same index again replaces (a repaired candidate), it does not add.
    job = reduceJob(
      job,
      sent(4, 1, { ...candidate('second, fixed'), repaired: true })
    );
    expect(job.candidates.map(c => c.code)).toEqual([
      'first',
      'second, fixed',
      'third'
    ]);
    job = reduceJob(job, done(5, { chosen: 2, candidates: 3 }));
    expect(job.chosen).toBe(2);
    expect(job.candidates[job.chosen!].code).toBe('third');
  });

  it('maps the chosen index to the position of a candidate that arrived', () => {
    // Index 0 was never received (a lost frame): index 1 is at position 0.
    let job = reduceJob(initialJob(JOB), sent(1, 1, candidate('only')));
    job = reduceJob(job, done(2, { chosen: 1, candidates: 2 }));
    expect(job.chosen).toBe(0);
    expect(job.candidates[preferredIndex(job)].code).toBe('only');
    // A chosen index nothing was sent for is no choice.
    const none = reduceJob(
      reduceJob(initialJob(JOB), sent(1, 0, candidate('a'))),
      done(2, { chosen: 3, candidates: 1 })
    );
    expect(none.chosen).toBeNull();
    expect(preferredIndex(none)).toBe(0);
  });

  it("takes each candidate's final vote support from done (N1)", () => {
    // Candidates 0 and 1 went out as they ran (support 1); the repaired
    // twin of 0 went out after the vote, which put 0, 2 and 3 in one class.
    let job = initialJob(JOB);
    job = reduceJob(job, sent(1, 0, candidate('print(3)')));
    job = reduceJob(job, sent(2, 1, candidate('1/0')));
    job = reduceJob(job, sent(3, 2, candidate('print(1 + 2)')));
    job = reduceJob(job, sent(4, 3, { ...candidate('print(3)'), support: 3 }));
    const before = job.candidates;
    job = reduceJob(
      job,
      done(5, { chosen: 0, candidates: 4, support: [3, 1, 3, 3] })
    );
    expect(job.candidates.map(c => c.support)).toEqual([3, 1, 3, 3]);
    // Those that did not change stay the same objects.
    expect(job.candidates[1]).toBe(before[1]);
    expect(job.candidates[3]).toBe(before[3]);
  });

  it("takes each candidate's final checks from done: a minority fails agreement (m1)", () => {
    // The candidate events went out with the probes' checks only ("checks 6/6").
    const probes = ['rows', 'nan', 'dtype', 'empty', 'index', 'range'].map(
      name => ({ name, passed: true, detail: '' })
    );
    let job = initialJob(JOB);
    job = reduceJob(job, sent(1, 0, { ...candidate('3'), checks: probes }));
    job = reduceJob(job, sent(2, 1, { ...candidate('2'), checks: probes }));
    const lost = {
      name: 'agree',
      passed: false,
      detail: '1 of 2 answers agree; the vote picked another answer'
    };
    const won = { name: 'agree', passed: true, detail: '1 of 2 answers agree' };
    job = reduceJob(
      job,
      done(3, {
        chosen: 0,
        candidates: 2,
        support: [1, 1],
        checks: [
          [...probes, won],
          [...probes, lost]
        ]
      })
    );
    expect(job.candidates[1].checks[6]).toEqual(lost);
    expect(job.candidates[0].checks).toHaveLength(7);
  });

  it('reads an explanation: prose in answer, no candidate, nothing chosen', () => {
    let job = reduceJob(
      initialJob(JOB),
      progress(1, 'Running the explain strategy.', {
        state: 'searching',
        strategy: 'explain'
      })
    );
    job = reduceJob(
      job,
      done(2, {
        strategy: 'explain',
        answer: 'This cell **groups** the flights by airline.',
        chosen: null,
        candidates: 0
      })
    );
    expect(job.status).toBe('done');
    expect(job.candidates).toEqual([]);
    expect(job.chosen).toBeNull();
    expect(job.result?.answer).toBe(
      'This cell **groups** the flights by airline.'
    );
    expect(job.result?.strategy).toBe('explain');
  });

  it('ignores replayed and out-of-date events', () => {
    let job = reduceJob(initialJob(JOB), progress(5, 'five'));
    const same = reduceJob(job, progress(5, 'again'));
    expect(same).toBe(job);
    job = reduceJob(job, progress(4, 'old'));
    expect(job.message).toBe('five');
    // A replayed candidate after the end changes nothing either.
    job = reduceJob(job, done(6));
    expect(reduceJob(job, sent(7, 0, candidate('late')))).toBe(job);
  });

  it('keeps search statistics across progress events', () => {
    let job = reduceJob(
      initialJob(JOB),
      progress(1, 'iteration 1', { iterations: 1, nodes: 3 })
    );
    job = reduceJob(
      job,
      progress(2, 'iteration 2', {
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
    // Progress without statistics leaves them alone.
    job = reduceJob(job, progress(3, 'asking the model', { samples: 1 }));
    expect(job.search?.iterations).toBe(2);
  });

  it('records errors and nothing after the end', () => {
    let job = reduceJob(initialJob(JOB), log(1, 'a note'));
    job = reduceJob(job, failed(2, 'The model server is not reachable'));
    expect(job.status).toBe('error');
    expect(job.error).toBe('The model server is not reachable');
    const after = reduceJob(job, progress(3, 'late'));
    expect(after).toBe(job);
    expect(endJob(job, 'cancelled')).toBe(job);
  });

  it('ends a job cancelled without a final event', () => {
    const job = endJob(
      reduceJob(initialJob(JOB), progress(1, 'x')),
      'cancelled'
    );
    expect(job.status).toBe('cancelled');
    expect(job.error).toBeNull();
    expect(endJob(initialJob(), 'error', 'HTTP 400: no kernel').error).toBe(
      'HTTP 400: no kernel'
    );
  });
});

describe('output preview', () => {
  it('turns dataclass dumps into strict nbformat outputs', () => {
    expect(
      toNbformatOutput({
        output_type: 'stream',
        name: 'stdout',
        text: 'hi\n',
        data: {},
        ename: null
      })
    ).toEqual({ output_type: 'stream', name: 'stdout', text: 'hi\n' });
    expect(
      toNbformatOutput({
        output_type: 'display_data',
        data: { 'image/png': 'AAA' },
        metadata: {}
      })
    ).toEqual({
      output_type: 'display_data',
      data: { 'image/png': 'AAA' },
      metadata: {}
    });
    expect(
      toNbformatOutput({ output_type: 'unknown' } as unknown as Parameters<
        typeof toNbformatOutput
      >[0])
    ).toBeNull();
  });

  it('shows a timeout as an error output', () => {
    const outputs = previewOutputs({
      status: 'timeout',
      outputs: [],
      ename: null,
      evalue: null,
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
    const job = reduceJob(initialJob(JOB), failed(1, 'Cancelled', 'cancelled'));
    expect(job.status).toBe('cancelled');
    expect(job.error).toBeNull();
  });

  it('keeps the turn id from the 202 reply when done has none', () => {
    const job = reduceJob({ ...initialJob(JOB), turnId: 'from-202' }, done(1));
    expect(job.turnId).toBe('from-202');
  });
});

describe('state age', () => {
  const age = {
    as_of: '2025-01-01T12:00:00+0000',
    running: true,
    executions_since: 1,
    note: "the state after the cell that ended at 12:00:00; a cell is running now in the notebook's kernel"
  };

  it('is none while the turn runs on the live state', () => {
    const job = reduceJob(
      initialJob(JOB),
      progress(1, 'Read 1 DataFrame schema(s)', { state: 'schema_ready' })
    );
    expect(job.stateAge).toBeNull();
  });

  it('is kept from the state_age event through later events and done', () => {
    let job = reduceJob(
      initialJob(JOB),
      progress(1, "Starting from the kernel's state before the running cell", {
        state: 'state_age',
        state_age: age
      })
    );
    expect(job.stateAge).toEqual(age);
    job = reduceJob(job, progress(2, 'Searching', { state: 'searching' }));
    job = reduceJob(job, sent(3, 0, candidate('len(df)')));
    job = reduceJob(job, done(4));
    expect(job.status).toBe('done');
    // The progress line moved on; the turn still says what state it ran on.
    expect(job.message).not.toContain('before the running cell');
    expect(job.stateAge).toEqual(age);
    // A replayed event changes nothing.
    expect(reduceJob(job, progress(1, '', { state: 'state_age' }))).toBe(job);
  });
});

describe('confinement verdict', () => {
  it('is read from the progress event and kept through candidates', () => {
    let job = initialJob(JOB);
    expect(job.confinement).toBeNull();
    job = reduceJob(
      job,
      progress(1, 'Kernel copies: partially confined', {
        state: 'confinement',
        confinement: verdict('partial', ['seccomp'], 'warn')
      })
    );
    expect(job.confinement).toEqual(verdict('partial', ['seccomp'], 'warn'));
    expect(job.confinement!.layers).toHaveLength(9);
    expect(job.confinement!.layers.find(l => l.name === 'seccomp')).toEqual({
      name: 'seccomp',
      on: false,
      detail: 'seccomp is not available here'
    });
    // Other progress events leave it alone.
    job = reduceJob(
      job,
      progress(2, 'Searching', { state: 'searching', iterations: 1 })
    );
    job = reduceJob(job, sent(3, 0, candidate('len(df)')));
    expect(job.confinement?.status).toBe('partial');
  });

  it('takes the done event’s verdict as final', () => {
    let job = reduceJob(
      initialJob(JOB),
      progress(1, '', {
        state: 'confinement',
        confinement: verdict('confined')
      })
    );
    job = reduceJob(
      job,
      done(
        2,
        {},
        {
          turn_id: 't',
          confinement: verdict('not_executed', ['seccomp', 'landlock_net'])
        }
      )
    );
    expect(job.confinement).toMatchObject({
      status: 'not_executed',
      execute: false,
      missing: ['seccomp', 'landlock_net']
    });
  });

  it('reads the verdict from done alone (no progress event seen, e.g. a late socket)', () => {
    const job = reduceJob(
      initialJob(JOB),
      done(7, {}, { confinement: verdict('confined') })
    );
    expect(job.confinement?.status).toBe('confined');
    expect(job.confinement?.missing).toEqual([]);
  });

  it('ignores a replayed verdict', () => {
    const job = reduceJob(
      initialJob(JOB),
      progress(1, '', {
        state: 'confinement',
        confinement: verdict('confined')
      })
    );
    const replay = reduceJob(
      job,
      progress(1, '', {
        state: 'confinement',
        confinement: verdict('partial', ['seccomp'])
      })
    );
    expect(replay).toBe(job);
  });

  it('reads a stored verdict leniently and never claims a not-executed turn ran', () => {
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
      missing: ['seccomp'],
      transport: ''
    });
    // Where the copies ran is kept when the server names a known transport.
    expect(
      parseConfinement({ status: 'confined', transport: 'kernel channel' })
        ?.transport
    ).toBe('kernel channel');
    expect(
      TRANSPORT_LABELS[
        parseConfinement({ status: 'confined', transport: 'kernel channel' })!
          .transport
      ]
    ).toBe('copies: over the kernel channel');
    expect(
      parseConfinement({ status: 'confined', transport: 'carrier pigeon' })
        ?.transport
    ).toBe('');
    expect(
      parseConfinement({ status: 'confined', policy: 'warn' })
    ).toMatchObject({
      policy: 'warn',
      execute: true,
      layers: [],
      missing: []
    });
    for (const bad of [
      null,
      'confined',
      [],
      { status: 'safe' },
      { layers: [] }
    ]) {
      expect(parseConfinement(bad)).toBeNull();
    }
    expect(parseConfinement(undefined)).toBeNull();
  });
});

const delta = (
  seq: number,
  text: string,
  start = false,
  index: number | null = 0
): DeltaEvent => ({
  version: 1,
  job_id: JOB,
  seq,
  type: 'delta',
  message: '',
  data: { text, candidate: index, start }
});

describe('streamed text', () => {
  it('accumulates deltas and is replaced by the candidate', () => {
    let job = initialJob(JOB);
    job = reduceJob(job, delta(1, '```python\n', true));
    job = reduceJob(job, delta(2, '# Step 1: Count'));
    job = reduceJob(job, delta(3, ' rows\n'));
    expect(job.streaming).toEqual({
      candidate: 0,
      text: '```python\n# Step 1: Count rows\n'
    });
    // Deltas add no progress line.
    expect(job.progress).toEqual([]);
    job = reduceJob(job, sent(4, 0, candidate('len(df)')));
    expect(job.streaming).toBeNull();
    expect(job.candidates.map(c => c.code)).toEqual(['len(df)']);
  });

  it('starts over on a new generation or another candidate', () => {
    let job = initialJob(JOB);
    job = reduceJob(job, delta(1, 'first', true, null));
    job = reduceJob(job, delta(2, ' try', false, null));
    job = reduceJob(job, delta(3, 'again', true, null));
    expect(job.streaming?.text).toBe('again');
    job = reduceJob(job, delta(4, 'other', false, 1));
    expect(job.streaming).toEqual({ candidate: 1, text: 'other' });
  });

  it('is dropped when the turn ends', () => {
    const job = reduceJob(initialJob(JOB), delta(1, 'x = 1', true));
    expect(
      reduceJob(job, failed(2, 'Stopped', 'cancelled')).streaming
    ).toBeNull();
    expect(endJob(job, 'cancelled').streaming).toBeNull();
    expect(endJob(job, 'done').streaming).toBeNull();
  });

  it('keeps one "generating" progress line, updated in place', () => {
    let job = initialJob(JOB);
    job = reduceJob(
      job,
      progress(1, 'asking the model (prompt 1,840 tokens)', {
        state: 'prompt',
        prompt_tokens: 1840
      })
    );
    job = reduceJob(
      job,
      progress(2, 'generating: 12 tokens, 1 s', {
        state: 'generating',
        tokens: 12,
        elapsed_s: 1
      })
    );
    job = reduceJob(
      job,
      progress(3, 'generating: 30 tokens, 2 s', {
        state: 'generating',
        tokens: 30,
        elapsed_s: 2
      })
    );
    expect(job.message).toBe('generating: 30 tokens, 2 s');
    expect(job.progress.map(l => l.message)).toEqual([
      'asking the model (prompt 1,840 tokens)',
      'generating: 30 tokens, 2 s'
    ]);
  });
});

describe('elapsed time', () => {
  it.each([
    [0, '0 s'],
    [6.9, '6 s'],
    [59, '59 s'],
    [60, '1 min 00 s'],
    [125, '2 min 05 s'],
    [3600, '1 h 00 min'],
    [3725, '1 h 02 min'],
    [-3, '0 s']
  ])('formats %p seconds as %p', (seconds, text) => {
    expect(formatElapsed(seconds)).toBe(text);
  });
});
