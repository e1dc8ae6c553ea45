/**
 * The conversation stored in notebook metadata under `jupyter_data_agent`.
 *
 * The front end is the one writer; jupyter_data_agent/context/turns.py reads
 * it for the prompt builder (prior turns). tests/data/turns.golden.ipynb is
 * the format both sides are tested against (jest golden.spec.ts, pytest).
 */
import { parseConfinement } from './models';
import { IStoredOutput, asString, parsePreview } from './previews';
import { storedChanges } from './nsdiff';
import type { IUsage } from './usage';
import type { Confinement, ContextReport } from './wire';

export const METADATA_KEY = 'jupyter_data_agent';
export const METADATA_VERSION = 1;

export type TurnStatus = 'pending' | 'accepted' | 'rejected' | 'edited';

export interface ITurn {
  turn_id: string;
  intent: string;
  code: string;
  status: TurnStatus;
  cell_ids: string[];
  candidates: string[];
  created: number | null;
  /**
   * Front-end extras, optional so the Python side (which ignores unknown
   * keys) reads these turns unchanged: one explanation per candidate, the
   * strategy that produced them, and the verdict on the kernel copies that
   * ran (or did not run) them, so the badge survives a reload.
   */
  explanations?: string[];
  /** Each candidate's explained steps, listed as the live panel lists them. */
  steps?: IStoredStepNote[][];
  strategy?: string;
  confinement?: Confinement;
  /** The cell an edit turn ("fix this cell") replaces instead of adding one. */
  edits_cell?: string;
  /** An edit turn's request: Fix or Improve, and the user's words if any (a retry sends them again). */
  edit_kind?: 'fix' | 'improve';
  instruction?: string;
  /** Why the turn gave nothing to decide on: it failed, or was stopped. */
  failure?: ITurnFailure;
  /**
   * Each candidate's executed outputs (nbformat v4), bounded by
   * boundPreviews so the notebook file stays small; null: not executed.
   */
  previews?: (IStoredOutput[] | null)[];
  /** The answer in words (Explain, or a question answered without code). */
  answer?: string;
  /** What the turn cost, and how full its prompt was (the usage footer and gauge). */
  usage?: IStoredUsage;
  context?: ContextReport;
  /** How each candidate ran in its copy (the "ran in" chip, the vote); null: not run. */
  runs?: (IStoredRun | null)[];
  /** The sizes of the answer classes that voted, largest first (the vote line). */
  classes?: number[];
  /** An outside agent's proposal (proposals.ts): who proposed it, and its id on the server. */
  agent?: string;
  proposal_id?: string;
  /**
   * An analysis's steps (analysis.ts), so its review works again after a
   * reload; their outputs are in the cells, not here.
   */
  analysis?: IStoredStep[];
}

/** One explained step of a candidate's cell (its `# Step N` comment). */
export interface IStoredStepNote {
  number: number;
  explanation: string;
}

/** One step of an analysis as stored with its turn. */
export interface IStoredStep {
  number: number;
  title: string;
  explanation: string;
  code: string;
  /** The existing cell it edits; null: a new cell. */
  cell_id: string | null;
  status: string;
}

/** A turn's cost as the usage footer shows it, stored as it is, with the model it ran on. */
export type IStoredUsage = IUsage;

/** How one candidate ran in its copy, and what the vote said of it. */
export interface IStoredRun {
  status: 'ok' | 'error' | 'timeout' | 'died';
  duration_s: number;
  ename: string | null;
  limit: string | null;
  support: number;
  repaired: boolean;
  changes?: string; // what running it will change (nsdiff.ts); absent: not known
}

/** A stopped or failed turn keeps its place and its reason. */
export interface ITurnFailure {
  status: 'error' | 'cancelled';
  reason: string;
}

/** An nbformat v4 output as stored in a turn's previews. */

export interface INotebookAgentMetadata {
  version: number;
  turns: ITurn[];
}

export interface ICellAgentMetadata {
  turn_id: string;
  intent: string;
  status: TurnStatus;
  /** The step of an analysis this cell belongs to (1-based). */
  step?: number;
}

const STATUSES: TurnStatus[] = ['pending', 'accepted', 'rejected', 'edited'];

function asStringList(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter((item): item is string => typeof item === 'string')
    : [];
}

/** Read one turn leniently: unknown or missing fields get defaults. */
export function parseTurn(raw: unknown): ITurn | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const data = raw as Record<string, unknown>;
  const intent = asString(data.intent);
  const turnId = asString(data.turn_id);
  if (!intent || !turnId) {
    return null;
  }
  const status = STATUSES.includes(data.status as TurnStatus)
    ? (data.status as TurnStatus)
    : 'pending';
  const confinement = parseConfinement(data.confinement);
  const failure = parseFailure(data.failure);
  const previews = Array.isArray(data.previews)
    ? data.previews.map(parsePreview)
    : null;
  return {
    turn_id: turnId,
    intent,
    code: asString(data.code),
    status,
    cell_ids: asStringList(data.cell_ids),
    candidates: asStringList(data.candidates),
    created: typeof data.created === 'number' ? data.created : null,
    ...(Array.isArray(data.explanations)
      ? {
          explanations: data.explanations.map(e =>
            typeof e === 'string' ? e : ''
          )
        }
      : {}),
    ...(Array.isArray(data.steps)
      ? {
          steps: data.steps.map(list =>
            Array.isArray(list)
              ? list.map(parseStepNote).filter(n => n !== null)
              : []
          )
        }
      : {}),
    ...(typeof data.strategy === 'string' ? { strategy: data.strategy } : {}),
    ...(typeof data.edits_cell === 'string' && data.edits_cell
      ? { edits_cell: data.edits_cell }
      : {}),
    ...(data.edit_kind === 'fix' || data.edit_kind === 'improve'
      ? { edit_kind: data.edit_kind }
      : {}),
    ...(typeof data.instruction === 'string' && data.instruction
      ? { instruction: data.instruction }
      : {}),
    ...(typeof data.answer === 'string' && data.answer
      ? { answer: data.answer }
      : {}),
    ...(parseUsage(data.usage) ?? {}),
    ...(data.context && typeof data.context === 'object'
      ? { context: data.context as ContextReport }
      : {}),
    ...(Array.isArray(data.runs) ? { runs: data.runs.map(parseRun) } : {}),
    ...(Array.isArray(data.classes)
      ? {
          classes: data.classes.filter(
            (n): n is number => typeof n === 'number' && n > 0
          )
        }
      : {}),
    ...(typeof data.agent === 'string' && data.agent
      ? { agent: data.agent }
      : {}),
    ...(typeof data.proposal_id === 'string' && data.proposal_id
      ? { proposal_id: data.proposal_id }
      : {}),
    ...(confinement ? { confinement } : {}),
    ...(failure ? { failure } : {}),
    ...(previews ? { previews } : {}),
    ...(Array.isArray(data.analysis)
      ? { analysis: data.analysis.map(parseStep).filter(s => s !== null) }
      : {})
  };
}

function parseStepNote(raw: unknown): IStoredStepNote | null {
  const data = (raw ?? {}) as Record<string, unknown>;
  return typeof data.number === 'number' &&
    Number.isInteger(data.number) &&
    typeof data.explanation === 'string' &&
    data.explanation
    ? { number: data.number, explanation: data.explanation }
    : null;
}

function parseStep(raw: unknown): IStoredStep | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const data = raw as Record<string, unknown>;
  if (typeof data.number !== 'number' || !Number.isInteger(data.number)) {
    return null;
  }
  return {
    number: data.number,
    title: asString(data.title),
    explanation: asString(data.explanation),
    code: asString(data.code),
    cell_id:
      typeof data.cell_id === 'string' && data.cell_id ? data.cell_id : null,
    status: asString(data.status, 'ok')
  };
}

const USAGE_KEYS = [
  'promptTokens',
  'completionTokens',
  'modelCalls',
  'wallTimeS',
  'modelTimeS',
  'turns'
] as const;

function parseUsage(raw: unknown): { usage: IStoredUsage } | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const data = raw as Record<string, unknown>;
  const usage = {} as IStoredUsage;
  for (const key of USAGE_KEYS) {
    const value = data[key];
    usage[key] = typeof value === 'number' && value >= 0 ? value : 0;
  }
  if (typeof data.model === 'string' && data.model) {
    usage.model = data.model;
  }
  return { usage };
}

const RUN_STATUSES = ['ok', 'error', 'timeout', 'died'];

function parseRun(raw: unknown): IStoredRun | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const data = raw as Record<string, unknown>;
  if (!RUN_STATUSES.includes(data.status as string)) {
    return null;
  }
  return {
    status: data.status as IStoredRun['status'],
    duration_s: typeof data.duration_s === 'number' ? data.duration_s : 0,
    ename: typeof data.ename === 'string' ? data.ename : null,
    limit: typeof data.limit === 'string' ? data.limit : null,
    support: typeof data.support === 'number' ? data.support : 1,
    repaired: data.repaired === true,
    ...storedChanges(data.changes)
  };
}

function parseFailure(raw: unknown): ITurnFailure | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const data = raw as Record<string, unknown>;
  const status = data.status === 'cancelled' ? 'cancelled' : 'error';
  return { status, reason: asString(data.reason) };
}

/**
 * The panel's order: stored turns in their order, with live requests that
 * have no stored turn yet placed by the time they were asked. `created`
 * of a live item is in milliseconds, a turn's in seconds (as Python writes).
 */
export function orderTimeline<
  T extends { turnId: string | null; created: number }
>(
  turns: readonly ITurn[],
  live: readonly T[]
): { turn: ITurn | null; item: T | null }[] {
  const byTurn = new Map<string, T>();
  for (const item of live) {
    if (item.turnId) {
      byTurn.set(item.turnId, item);
    }
  }
  const stored = new Set(turns.map(t => t.turn_id));
  const out: { turn: ITurn | null; item: T | null }[] = turns.map(turn => ({
    turn,
    item: byTurn.get(turn.turn_id) ?? null
  }));
  for (const item of live) {
    if (item.turnId && stored.has(item.turnId)) {
      continue;
    }
    // Before the first stored turn asked after it (turns without a time
    // are passed over); else at the end.
    const at = out.findIndex(
      entry =>
        entry.turn !== null &&
        entry.turn.created !== null &&
        entry.turn.created * 1000 > item.created
    );
    out.splice(at < 0 ? out.length : at, 0, { turn: null, item });
  }
  return out;
}

/** The conversation of a notebook; an empty one when absent or malformed. */
export function readConversation(
  metadata: Record<string, unknown> | undefined
): INotebookAgentMetadata {
  const raw = metadata?.[METADATA_KEY] as Record<string, unknown> | undefined;
  const turns = Array.isArray(raw?.turns)
    ? (raw!.turns as unknown[])
        .map(parseTurn)
        .filter((turn): turn is ITurn => turn !== null)
    : [];
  return { version: METADATA_VERSION, turns };
}

/**
 * When the conversation was last cleared (seconds since the epoch; 0:
 * never): turns listed by the server that started before stay hidden.
 */
export function clearedAt(
  metadata: Record<string, unknown> | undefined
): number {
  const raw = metadata?.[METADATA_KEY] as Record<string, unknown> | undefined;
  return typeof raw?.cleared === 'number' ? raw.cleared : 0;
}

/** A new conversation with `turn` added or replaced (matched by turn_id). */
export function upsertTurn(
  conversation: INotebookAgentMetadata,
  turn: ITurn
): INotebookAgentMetadata {
  const turns = conversation.turns.filter(t => t.turn_id !== turn.turn_id);
  const index = conversation.turns.findIndex(t => t.turn_id === turn.turn_id);
  if (index >= 0) {
    turns.splice(index, 0, turn);
  } else {
    turns.push(turn);
  }
  return { version: METADATA_VERSION, turns };
}

/** A new conversation with the status of one turn changed. */
export function setTurnStatus(
  conversation: INotebookAgentMetadata,
  turnId: string,
  status: TurnStatus
): INotebookAgentMetadata {
  return {
    version: METADATA_VERSION,
    turns: conversation.turns.map(turn =>
      turn.turn_id === turnId ? { ...turn, status } : turn
    )
  };
}

/** What a solution cell carries so prompts can show it as a prior turn. */
export function cellMetadataFor(turn: ITurn): ICellAgentMetadata {
  return { turn_id: turn.turn_id, intent: turn.intent, status: turn.status };
}

/** The pointer a cell carries to its turn, or null when it has none. */
export function readCellTag(
  metadata: Record<string, unknown> | undefined
): ICellAgentMetadata | null {
  const raw = metadata?.[METADATA_KEY] as Record<string, unknown> | undefined;
  if (!raw || typeof raw !== 'object' || !asString(raw.turn_id)) {
    return null;
  }
  const status = STATUSES.includes(raw.status as TurnStatus)
    ? (raw.status as TurnStatus)
    : 'pending';
  const step = raw.step;
  return {
    turn_id: asString(raw.turn_id),
    intent: asString(raw.intent),
    status,
    ...(typeof step === 'number' && Number.isInteger(step) && step > 0
      ? { step }
      : {})
  };
}

/** Seconds since the epoch, as Python's time.time() writes `created`. */
export function nowSeconds(now: number = Date.now()): number {
  return now / 1000;
}

/** A fresh turn id: sortable by time, unique within a notebook. */
export function newTurnId(now: number = Date.now()): string {
  const random = Math.random().toString(36).slice(2, 8);
  return `t${now.toString(36)}-${random}`;
}

/** A new conversation with some fields of one turn replaced. */
export function updateTurn(
  conversation: INotebookAgentMetadata,
  turnId: string,
  patch: Partial<Omit<ITurn, 'turn_id'>>
): INotebookAgentMetadata {
  return {
    version: METADATA_VERSION,
    turns: conversation.turns.map(turn =>
      turn.turn_id === turnId ? { ...turn, ...patch } : turn
    )
  };
}

/**
 * The value to store under METADATA_KEY: store-level keys we do not know
 * are kept and a newer version is not downgraded.
 */
export function conversationValue(
  previous: unknown,
  conversation: INotebookAgentMetadata
): Record<string, unknown> {
  const store =
    previous && typeof previous === 'object' && !Array.isArray(previous)
      ? { ...(previous as Record<string, unknown>) }
      : {};
  const version =
    typeof store.version === 'number' && store.version > METADATA_VERSION
      ? store.version
      : METADATA_VERSION;
  return {
    ...store,
    version,
    turns: conversation.turns.map(turn => {
      const copy: Record<string, unknown> = { ...turn };
      if (turn.confinement) {
        // Plain JSON, not shared with the live job's view.
        copy.confinement = {
          ...turn.confinement,
          layers: turn.confinement.layers.map(layer => ({ ...layer })),
          missing: [...turn.confinement.missing]
        };
      }
      return copy;
    })
  };
}

/** What the notebook's metadata is read and written through. */
interface IMetadataHolder {
  getMetadata(key: string): unknown;
  setMetadata(key: string, value: unknown): void;
}

/** A composer choice (`strategy`, `model`) remembered next to the turns; null: none. */
export function storedChoice(
  model: IMetadataHolder | null | undefined,
  key: 'strategy' | 'model'
): string | null {
  const stored = model?.getMetadata(METADATA_KEY) as
    Record<string, unknown> | undefined;
  return typeof stored?.[key] === 'string' ? (stored[key] as string) : null;
}

/** Remember a composer choice in the notebook (null or '': forget it). */
export function storeChoice(
  model: IMetadataHolder,
  conversation: INotebookAgentMetadata,
  key: 'strategy' | 'model',
  value: string | null
): void {
  const stored = conversationValue(
    model.getMetadata(METADATA_KEY),
    conversation
  );
  delete stored[key];
  model.setMetadata(METADATA_KEY, value ? { ...stored, [key]: value } : stored);
}
