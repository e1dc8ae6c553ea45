/**
 * Wire types of the server API (`<baseUrl>/jupyter-data-agent/`).
 *
 * They mirror the server's models (search/base.py `Candidate.to_json`,
 * `SearchResult.to_json`, kernel/results.py `ExecResult`, and the job event
 * envelope). Every message carries `version`; readers are lenient about
 * fields they do not know so a newer server does not break an older UI.
 */

export const API_VERSION = 1;

export type Strategy = 'direct' | 'vote' | 'react' | 'mcts';

/** What the strategy selector offers, in words a data scientist uses. */
export const STRATEGY_LABELS: Record<Strategy, string> = {
  direct: 'Quick',
  vote: 'Verified',
  react: 'Agent',
  mcts: 'Search'
};

export interface ITurnOptions {
  samples?: number;
  budget?: number;
  temperature?: number;
  use_live_state?: boolean;
}

/** Body of `POST turns`. `cells` are nbformat v4 cells, unsaved edits included. */
export interface ITurnRequest {
  version: number;
  notebook_path: string;
  cells: Record<string, unknown>[];
  active_index: number;
  kernel_id: string | null;
  intent: string;
  strategy: Strategy;
  options: ITurnOptions;
  /**
   * Notebook metadata the server may read: the stored turns (with their
   * decisions) under `jupyter_data_agent`, as context/turns.py reads them.
   */
  metadata?: Record<string, unknown>;
}

export interface ITurnAccepted {
  job_id: string;
  /** The id the turn will be stored under (also in the `done` event). */
  turn_id?: string;
}

export interface IStep {
  number: number;
  explanation: string;
  code: string;
}

/** One nbformat-like output as the server sends it (fields may be null). */
export interface IWireOutput {
  output_type: string;
  name?: string | null;
  text?: string | string[] | null;
  data?: Record<string, unknown> | null;
  metadata?: Record<string, unknown> | null;
  ename?: string | null;
  evalue?: string | null;
  traceback?: string[] | null;
  execution_count?: number | null;
  truncated?: boolean;
}

export type ExecStatus = 'ok' | 'error' | 'timeout' | 'died';

export interface IExecResult {
  status: ExecStatus;
  outputs: IWireOutput[];
  value?: unknown;
  ename?: string | null;
  evalue?: string | null;
  traceback?: string[];
  duration_s?: number;
  limit?: string | null;
}

export interface ICandidate {
  code: string;
  steps: IStep[];
  explanation: string;
  result: IExecResult | null;
  score: number | null;
  support: number;
  repaired: boolean;
  meta: Record<string, unknown>;
}

export interface ISearchStats {
  iterations: number;
  nodes: number;
  model_calls: number;
  prompt_tokens: number;
  completion_tokens: number;
  executions: number;
  wall_time_s: number;
  value: number | null;
}

export interface ISearchResult {
  strategy: string;
  answer: string | null;
  chosen: number | null;
  candidates: ICandidate[];
  stats: ISearchStats;
  protections: Record<string, unknown> | null;
}

/** One confinement layer of the kernel copies (kernel/results.py `Protections.layers`). */
export interface IConfinementLayer {
  name: string;
  on: boolean;
  /** What the layer does when on; why it is off otherwise. */
  detail: string;
}

export type ConfinementPolicy = 'require' | 'warn';
export type ConfinementStatus = 'confined' | 'partial' | 'not_executed';

/**
 * The verdict on one turn's kernel copies (kernel/policy.py `Confinement`):
 * sent once per turn as a progress event with `state: "confinement"`, and
 * again in the `done` event next to the result.
 */
export interface IConfinement {
  policy: ConfinementPolicy;
  status: ConfinementStatus;
  /** Whether candidates were executed in the copies. */
  execute: boolean;
  message: string;
  layers: IConfinementLayer[];
  missing: string[];
}

/** The badge's words for each status. */
export const CONFINEMENT_LABELS: Record<ConfinementStatus, string> = {
  confined: 'confined',
  partial: 'partially confined',
  not_executed: 'not executed'
};

/** Layer names as a data scientist reads them. */
export const LAYER_LABELS: Record<string, string> = {
  landlock_fs: 'Files (Landlock)',
  landlock_net: 'Network (Landlock)',
  seccomp: 'System calls (seccomp)',
  capabilities: 'Capabilities dropped',
  descriptors: 'Inherited files closed',
  shared_mappings: 'Shared memory made private',
  secrets: 'Secrets removed',
  processes: 'Child processes ended',
  limits: 'CPU, memory and size limits'
};

const CONFINEMENT_STATUSES: ConfinementStatus[] = ['confined', 'partial', 'not_executed'];

/**
 * A confinement verdict read leniently; null when it is absent or has no
 * status we know (an unknown status is not shown as a guess).
 */
export function parseConfinement(raw: unknown): IConfinement | null {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
    return null;
  }
  const data = raw as Record<string, any>;
  if (!CONFINEMENT_STATUSES.includes(data.status)) {
    return null;
  }
  const status = data.status as ConfinementStatus;
  const layers: IConfinementLayer[] = Array.isArray(data.layers)
    ? data.layers
        .filter((l: unknown) => l && typeof l === 'object' && typeof (l as any).name === 'string')
        .map((l: any) => ({ name: String(l.name), on: l.on === true, detail: asText(l.detail) }))
    : [];
  const missing: string[] = Array.isArray(data.missing)
    ? data.missing.filter((m: unknown): m is string => typeof m === 'string')
    : layers.filter(l => !l.on).map(l => l.name);
  return {
    policy: data.policy === 'warn' ? 'warn' : 'require',
    status,
    // Never claim execution for a turn whose status says it did not run.
    execute: status === 'not_executed' ? false : data.execute !== false,
    message: asText(data.message),
    layers,
    missing
  };
}

export type JobEventType = 'progress' | 'candidate' | 'log' | 'done' | 'error';

export interface IJobEvent {
  version: number;
  job_id: string;
  seq: number;
  type: JobEventType;
  message: string;
  data: Record<string, any>;
}

export type JobStatus = 'running' | 'done' | 'error' | 'cancelled';

/** `GET jobs/<id>?after=<seq>`: the polling fallback of the event socket. */
export interface IJobPoll {
  status: JobStatus;
  events: IJobEvent[];
}

/** `GET config`. Never holds a secret. */
export interface IAgentConfig {
  version: number;
  backend: string;
  model: string;
  base_url: string;
  api_key_set: boolean;
  capabilities: { strategies?: string[]; chat?: boolean; [key: string]: unknown };
  [key: string]: unknown;
}

function asNumber(value: unknown, fallback: number): number {
  return typeof value === 'number' && isFinite(value) ? value : fallback;
}

function asText(value: unknown): string {
  if (Array.isArray(value)) {
    return value.map(v => String(v)).join('');
  }
  return typeof value === 'string' ? value : '';
}

/** A candidate read leniently: missing fields get safe defaults. */
export function parseCandidate(raw: unknown): ICandidate | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const data = raw as Record<string, any>;
  const code = asText(data.code);
  const steps: IStep[] = Array.isArray(data.steps)
    ? data.steps
        .filter((s: unknown) => s && typeof s === 'object')
        .map((s: any, i: number) => ({
          number: asNumber(s.number, i + 1),
          explanation: asText(s.explanation),
          code: asText(s.code)
        }))
    : [];
  const explanation =
    asText(data.explanation) ||
    steps
      .filter(s => s.explanation)
      .map(s => `Step ${s.number}: ${s.explanation}`)
      .join('\n');
  let result: IExecResult | null = null;
  if (data.result && typeof data.result === 'object') {
    const r = data.result as Record<string, any>;
    result = {
      status: (['ok', 'error', 'timeout', 'died'].includes(r.status)
        ? r.status
        : 'error') as ExecStatus,
      outputs: Array.isArray(r.outputs) ? r.outputs : [],
      value: r.value,
      ename: r.ename ?? null,
      evalue: r.evalue ?? null,
      traceback: Array.isArray(r.traceback) ? r.traceback : [],
      duration_s: asNumber(r.duration_s, 0),
      limit: r.limit ?? null
    };
  }
  return {
    code,
    steps,
    explanation,
    result,
    score: typeof data.score === 'number' ? data.score : null,
    support: asNumber(data.support, 1),
    repaired: !!data.repaired,
    meta: data.meta && typeof data.meta === 'object' ? data.meta : {}
  };
}

/**
 * Turn a server output into a strict nbformat v4 output, the shape
 * rendermime's OutputAreaModel expects (the server sends dataclass dumps
 * where unused fields are null).
 */
export function toNbformatOutput(
  out: IWireOutput
): Record<string, unknown> | null {
  switch (out.output_type) {
    case 'stream':
      return {
        output_type: 'stream',
        name: out.name === 'stderr' ? 'stderr' : 'stdout',
        text: asText(out.text)
      };
    case 'error':
      return {
        output_type: 'error',
        ename: out.ename ?? 'Error',
        evalue: out.evalue ?? '',
        traceback: Array.isArray(out.traceback) ? out.traceback : []
      };
    case 'execute_result':
    case 'display_data':
      return {
        output_type: out.output_type,
        data: out.data ?? {},
        metadata: out.metadata ?? {},
        ...(out.output_type === 'execute_result'
          ? { execution_count: out.execution_count ?? null }
          : {})
      };
    default:
      return null;
  }
}

/**
 * What to show under a candidate: its outputs, plus the failure as an error
 * output when the copy timed out or died (those leave no error output).
 */
export function previewOutputs(
  result: IExecResult | null
): Record<string, unknown>[] {
  if (!result) {
    return [];
  }
  const outputs = result.outputs
    .map(toNbformatOutput)
    .filter((o): o is Record<string, unknown> => o !== null);
  const hasError = outputs.some(o => o.output_type === 'error');
  if (result.status !== 'ok' && !hasError) {
    const ename =
      result.ename ||
      (result.status === 'timeout' ? 'Timeout' : result.status === 'died' ? 'ProcessDied' : 'Error');
    const evalue =
      result.evalue ||
      (result.limit ? `the ${result.limit} limit was reached` : result.status);
    outputs.push({
      output_type: 'error',
      ename,
      evalue,
      traceback: result.traceback?.length ? result.traceback : [`${ename}: ${evalue}`]
    });
  }
  return outputs;
}
