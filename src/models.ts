/**
 * What the front end adds to the wire types of the server API.
 *
 * The types themselves are generated (src/wire.ts, from the JSON Schema of
 * the server's pydantic models in src/wire.schema.json); the server
 * validates every event against the same models before it sends it. Here:
 * names for the types the UI talks about, the words it shows for them, the
 * lenient reader of a confinement verdict stored in notebook metadata (data
 * from a file, not from the server), and the output helpers.
 */
import type {
  Confinement,
  ExecResult,
  JobPoll,
  OutputItem,
  ServerLimits,
  StrategyInfo
} from './wire';

export const API_VERSION = 1;

/**
 * The longest question the server takes by default (server/models.py
 * MAX_INTENT_CHARS): used until `GET config` answered with its `limits`.
 */
export const MAX_INTENT_CHARS = 20_000;

/**
 * What the server accepts (`GET config`'s `limits`); null while unknown. A
 * limit the server did not send (an older server) is left unchecked here.
 */
export type Limits = Partial<ServerLimits> | null;

/**
 * Why a question cannot be sent as it is, in words; null when it can. Checked
 * before posting, so a pasted table does not travel to the server to be
 * refused. `max`: the server's `max_intent_chars`, when it said.
 */
export function intentProblem(
  intent: string,
  max: number = MAX_INTENT_CHARS
): string | null {
  const length = intent.trim().length;
  if (length <= max) {
    return null;
  }
  const n = (x: number) => x.toLocaleString('en-US');
  return (
    `The question is ${n(length)} characters long; the server takes at most ` +
    `${n(max)}. Shorten it, or put the long text in a cell and ` +
    'ask about that cell.'
  );
}

/** The server's longest question: its limit, else the default. */
export function maxIntentChars(limits: Limits): number {
  const max = limits?.max_intent_chars;
  return typeof max === 'number' && max > 0 ? max : MAX_INTENT_CHARS;
}

/**
 * A knob's value (samples, budget) within what the server accepts: at least
 * 1, at most `max` where the server said; null (the server's default) stays.
 */
export function clampKnob(
  value: number | null,
  max: number | null | undefined
): number | null {
  if (value === null || !Number.isFinite(value)) {
    return null;
  }
  const low = Math.max(1, Math.floor(value));
  return typeof max === 'number' && max >= 1 ? Math.min(low, max) : low;
}

/** A strategy name, as the server's catalog lists it (`GET config`). */
export type Strategy = StrategyInfo['name'];

/** The strategy that answers in words about the active cell (no code, no cell). */
export const EXPLAIN: Strategy = 'explain';

/** A job's status, as `GET jobs/<id>` and the terminal events say it. */
export type JobStatus = JobPoll['status'];

export type ConfinementStatus = Confinement['status'];

/** The badge's words for each status. */
export const CONFINEMENT_LABELS: Record<ConfinementStatus, string> = {
  confined: 'confined',
  partial: 'partially confined',
  not_executed: 'not executed'
};

/**
 * Where a turn's copies ran, in words (the server's
 * ``kernel.policy.TRANSPORT_WORDS``); empty before copies were asked for.
 */
export const TRANSPORT_LABELS: Record<Confinement['transport'], string> = {
  '': '',
  local: 'copies: local',
  'kernel channel': 'copies: over the kernel channel',
  'in process': 'copies: local, forked by the kernel itself',
  replay: "copies: a replay kernel on the server's machine",
  none: 'copies: none'
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

const CONFINEMENT_STATUSES: ConfinementStatus[] = [
  'confined',
  'partial',
  'not_executed'
];

function isRecord(value: unknown): value is Record<string, unknown> {
  return !!value && typeof value === 'object' && !Array.isArray(value);
}

function asText(value: unknown): string {
  if (Array.isArray(value)) {
    return value.map(v => String(v)).join('');
  }
  return typeof value === 'string' ? value : '';
}

/**
 * A confinement verdict read leniently (from notebook metadata, which any
 * tool may have written); null when it is absent or has no status we know
 * (an unknown status is not shown as a guess).
 */
export function parseConfinement(raw: unknown): Confinement | null {
  if (!isRecord(raw)) {
    return null;
  }
  const status = raw.status as ConfinementStatus;
  if (!CONFINEMENT_STATUSES.includes(status)) {
    return null;
  }
  const layers: Confinement['layers'] = Array.isArray(raw.layers)
    ? raw.layers
        .filter(isRecord)
        .filter(l => typeof l.name === 'string')
        .map(l => ({
          name: String(l.name),
          on: l.on === true,
          detail: asText(l.detail)
        }))
    : [];
  const missing: string[] = Array.isArray(raw.missing)
    ? raw.missing.filter((m: unknown): m is string => typeof m === 'string')
    : layers.filter(l => !l.on).map(l => l.name);
  return {
    policy: raw.policy === 'warn' ? 'warn' : 'require',
    status,
    // Never claim execution for a turn whose status says it did not run.
    execute: status === 'not_executed' ? false : raw.execute !== false,
    message: asText(raw.message),
    layers,
    missing,
    // An unknown transport (a newer server) is not named rather than guessed.
    transport:
      typeof raw.transport === 'string' && raw.transport in TRANSPORT_LABELS
        ? (raw.transport as Confinement['transport'])
        : ''
  };
}

/** An nbformat v4 output, as rendermime's OutputAreaModel expects it. */
export type NbformatOutput = Record<string, unknown> & { output_type: string };

/**
 * Turn a server output into a strict nbformat v4 output (the server sends
 * dataclass dumps where unused fields are null).
 */
export function toNbformatOutput(
  out: Partial<OutputItem>
): NbformatOutput | null {
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
          ? { execution_count: null }
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
  result: Pick<
    ExecResult,
    'status' | 'outputs' | 'ename' | 'evalue' | 'traceback' | 'limit'
  > | null
): NbformatOutput[] {
  if (!result) {
    return [];
  }
  const outputs = result.outputs
    .map(toNbformatOutput)
    .filter((o): o is NbformatOutput => o !== null);
  const hasError = outputs.some(o => o.output_type === 'error');
  if (result.status !== 'ok' && !hasError) {
    const ename =
      result.ename ||
      (result.status === 'timeout'
        ? 'Timeout'
        : result.status === 'died'
          ? 'ProcessDied'
          : 'Error');
    const evalue =
      result.evalue ||
      (result.limit ? `the ${result.limit} limit was reached` : result.status);
    outputs.push({
      output_type: 'error',
      ename,
      evalue,
      traceback: result.traceback?.length
        ? result.traceback
        : [`${ename}: ${evalue}`]
    });
  }
  return outputs;
}
