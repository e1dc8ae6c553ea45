/**
 * The conversation stored in notebook metadata under `jupyter_data_agent`.
 *
 * Mirrors jupyter_data_agent/context/turns.py so a notebook written by the
 * front end is read by the prompt builder (prior turns) and the trainer
 * (decisions), and the other way round.
 */
import { parseConfinement } from './models';
import type { Confinement } from './wire';

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
  strategy?: string;
  confinement?: Confinement;
}

export interface INotebookAgentMetadata {
  version: number;
  turns: ITurn[];
}

export interface ICellAgentMetadata {
  turn_id: string;
  intent: string;
  status: TurnStatus;
}

const STATUSES: TurnStatus[] = ['pending', 'accepted', 'rejected', 'edited'];

function asString(value: unknown, fallback = ''): string {
  return typeof value === 'string' ? value : fallback;
}

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
    ...(typeof data.strategy === 'string' ? { strategy: data.strategy } : {}),
    ...(confinement ? { confinement } : {})
  };
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
  return {
    turn_id: asString(raw.turn_id),
    intent: asString(raw.intent),
    status
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
 * The value to store under METADATA_KEY: like the Python side's
 * write_turns, keys we do not know are kept and a newer version is not
 * downgraded.
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
