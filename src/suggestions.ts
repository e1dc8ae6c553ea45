/**
 * The life of one suggestion (the cells offered for one turn), DOM-free.
 *
 *   none --insert--> suggested(candidates, index) --accept--> accepted
 *                     |  ^ cycle(next/prev)         \--reject--> rejected
 *   rejected --insert--> suggested;  undo: back one operation from any state.
 *
 * Every operation returns the new state plus the exact cell changes that
 * turn the notebook's cells for this turn from the old layout into the new
 * one (computed by one diff, so undo is just "diff back to the previous
 * layout"). The adapter in notebook.ts applies them in one shared-model
 * transaction; `observe` folds in changes made behind our back (the
 * notebook's own undo, the user deleting a cell).
 *
 * Replace mode (a `target` cell: "fix/improve this cell"): the suggestion
 * owns an existing cell instead of new ones. While suggested the cell keeps
 * its source (the candidate is shown as a diff over it) and carries this
 * turn's tag; accept writes the candidate into it; reject and undo put back
 * the source and tag it had, so one undo restores the original exactly.
 * Accepting a fix of a cell that shows an error clears its outputs: the
 * traceback came from the code the fix replaced (undo puts it back).
 *
 * An empty cell at the anchor (the new cell the user asked from) is taken
 * by a one-cell suggestion instead of being left empty above it; reject
 * and undo give it back empty.
 */
import { ExistingCells, analysisCells } from './analysis';
import { hasErrorOutput } from './celledit';
import { TurnStatus } from './metadata';
import {
  CellChange,
  IAnchor,
  ICellSpec,
  IReplaceTarget,
  ISuggestionCandidate,
  IdFactory,
  InsertMode,
  defaultIdFactory,
  diffCells,
  diffTarget,
  layoutCells,
  solutionCode,
  tagFor
} from './suggestioncells';

export type {
  CellChange,
  IAnchor,
  ICellSpec,
  IExistingCell,
  IReplaceTarget,
  ISuggestionCandidate,
  ISuggestionStep,
  IdFactory,
  InsertMode
} from './suggestioncells';
export {
  defaultIdFactory,
  diffCells,
  diffTarget,
  layoutCells,
  solutionCode
} from './suggestioncells';

export type SuggestionStatus = 'none' | 'suggested' | 'accepted' | 'rejected';

/**
 * Does this request edit the cell it is about (rather than add a new one)?
 * "Fix …", "rewrite …", "refactor …": the words a user starts an edit with.
 */
export function isEditIntent(intent: string): boolean {
  return /^\s*(please\s+)?(fix|rewrite|re-write|improve|refactor|change|edit|optimi[sz]e|clean\s*up|tidy|simplify|speed\s*up|correct|debug|modify|update|rename|vectori[sz]e)\b/i.test(
    intent
  );
}

interface ISnapshot {
  status: SuggestionStatus;
  index: number;
  anchor: IAnchor;
  cells: ICellSpec[];
}

export interface ISuggestionState extends ISnapshot {
  turnId: string;
  intent: string;
  candidates: ISuggestionCandidate[];
  mode: InsertMode;
  /** The cell this suggestion replaces; null: it inserts new cells. */
  target: IReplaceTarget | null;
  /** Earlier snapshots, newest last: what `undo` returns to. */
  history: ISnapshot[];
}

export interface ITransition {
  state: ISuggestionState;
  changes: CellChange[];
  /** The turn status to record, or null when the decision did not change. */
  decision: TurnStatus | null;
}

export function emptySuggestion(
  turnId: string,
  intent: string,
  mode: InsertMode = 'single',
  target: IReplaceTarget | null = null
): ISuggestionState {
  return {
    turnId,
    intent,
    candidates: [],
    mode,
    target,
    status: 'none',
    index: 0,
    anchor: { afterId: null, index: 0 },
    cells: [],
    history: []
  };
}

function statusToTurn(status: SuggestionStatus): TurnStatus {
  return status === 'accepted'
    ? 'accepted'
    : status === 'rejected'
      ? 'rejected'
      : 'pending';
}

/** The single cell of a replace-mode layout: the target, with `source`. */
function targetCell(
  state: { turnId: string; intent: string },
  target: IReplaceTarget,
  source: string,
  status: TurnStatus
): ICellSpec {
  return {
    id: target.id,
    cell_type: 'code',
    source,
    tag: tagFor(state, status)
  };
}

/** The candidate's code as it goes into a cell. */
function cellSource(candidate: ISuggestionCandidate): string {
  return candidate.code.replace(/\s+$/, '');
}

function snapshot(state: ISuggestionState): ISnapshot {
  return {
    status: state.status,
    index: state.index,
    anchor: state.anchor,
    cells: state.cells
  };
}

/**
 * The transition from `previous` to `next`: the cell changes between their
 * layouts, `previous` kept in the history (what undo returns to).
 */
export function transitionTo(
  previous: ISuggestionState,
  next: Omit<ISuggestionState, 'history'>,
  decision: TurnStatus | null
): ITransition {
  const changes = next.target
    ? diffTarget(previous.cells, next.cells, next.target)
    : diffCells(previous.cells, next.cells, next.anchor);
  return {
    state: { ...next, history: [...previous.history, snapshot(previous)] },
    changes,
    decision
  };
}

function unchanged(state: ISuggestionState): ITransition {
  return { state, changes: [], decision: null };
}

/** Fold the notebook's current sources into the state (the user's edits). */
export function absorbSources(
  state: ISuggestionState,
  sources: Record<string, string> | undefined
): ISuggestionState {
  if (!sources) {
    return state;
  }
  const cells = state.cells.map(c =>
    c.id in sources && sources[c.id] !== c.source
      ? { ...c, source: sources[c.id] }
      : c
  );
  return { ...state, cells };
}

export interface IInsertOptions {
  candidates: ISuggestionCandidate[];
  index: number;
  mode: InsertMode;
  anchor: IAnchor;
  newId?: IdFactory;
  /** Replace this cell (its current source and tag) instead of inserting. */
  target?: IReplaceTarget | null;
  /** The existing cells an analysis's steps may edit, as they are now. */
  existing?: ExistingCells;
  /**
   * An empty code cell (the anchor's, without outputs) a suggestion in
   * `single` mode takes instead of adding a cell below it.
   */
  into?: string | null;
}

/** The one-cell layout placed into the empty cell `into`, kept as an edit of it. */
function intoEmpty(
  cells: ICellSpec[],
  into: string | null | undefined
): ICellSpec[] {
  if (!into || cells.length !== 1 || cells[0].cell_type !== 'code') {
    return cells;
  }
  return [{ ...cells[0], id: into, edits: { original: '', tag: null } }];
}

/** Place candidate `index` as a suggestion (from none or rejected). */
export function insert(
  state: ISuggestionState,
  options: IInsertOptions
): ITransition {
  if (state.status === 'suggested' || state.status === 'accepted') {
    return unchanged(state);
  }
  if (!options.candidates.length) {
    return unchanged(state);
  }
  const index = Math.max(
    0,
    Math.min(options.index, options.candidates.length - 1)
  );
  const target = options.target === undefined ? state.target : options.target;
  const analysis = options.candidates[index].analysis;
  const newId = options.newId ?? defaultIdFactory;
  const cells = target
    ? [targetCell(state, target, target.original, 'pending')]
    : analysis?.length
      ? analysisCells(state, analysis, 'pending', newId, options.existing)
      : intoEmpty(
          layoutCells(
            state,
            options.candidates[index],
            options.mode,
            'pending',
            newId
          ),
          options.mode === 'single' ? options.into : null
        );
  return transitionTo(
    { ...state, target },
    {
      ...state,
      target,
      candidates: options.candidates,
      mode: options.mode,
      status: 'suggested',
      index,
      anchor: options.anchor,
      cells
    },
    'pending'
  );
}

/** Show candidate `index` in place of the current one. */
export function select(
  state: ISuggestionState,
  index: number,
  newId: IdFactory = defaultIdFactory
): ITransition {
  const n = state.candidates.length;
  if (state.status !== 'suggested' || n === 0) {
    return unchanged(state);
  }
  const target = ((index % n) + n) % n;
  if (target === state.index) {
    return unchanged(state);
  }
  if (state.target) {
    // The cell is untouched while suggested: only the diff shown changes.
    return transitionTo(state, { ...state, index: target }, null);
  }
  const cells = layoutCells(
    state,
    state.candidates[target],
    state.mode,
    'pending',
    newId,
    state.cells
  );
  return transitionTo(state, { ...state, index: target, cells }, null);
}

/** Next (+1) or previous (-1) candidate, wrapping around. */
export function cycle(
  state: ISuggestionState,
  delta: 1 | -1,
  newId: IdFactory = defaultIdFactory
): ITransition {
  return select(state, state.index + delta, newId);
}

/** Keep the cells (with whatever edits the user made) and drop the marking. */
export function accept(
  state: ISuggestionState,
  sources?: Record<string, string>
): ITransition {
  if (state.status !== 'suggested') {
    return unchanged(state);
  }
  const current = absorbSources(state, sources);
  const candidate = state.candidates[state.index];
  const cells =
    current.target && candidate
      ? [
          {
            ...targetCell(
              state,
              current.target,
              cellSource(candidate),
              'accepted'
            ),
            // The traceback belongs to the code the fix replaced.
            ...(hasErrorOutput({ outputs: current.target.outputs })
              ? { outputs: [] }
              : {})
          }
        ]
      : current.cells.map(c => ({
          ...c,
          tag: tagFor(state, 'accepted')
        }));
  return transitionTo(
    current,
    { ...current, status: 'accepted', cells },
    'accepted'
  );
}

/**
 * Remove the suggestion's cells. `anchor` is where the first cell sits now
 * (the user may have moved things), so undo puts the cells back there.
 */
export function reject(
  state: ISuggestionState,
  observed?: { sources?: Record<string, string>; anchor?: IAnchor }
): ITransition {
  if (state.status !== 'suggested') {
    return unchanged(state);
  }
  let current = absorbSources(state, observed?.sources);
  if (observed?.anchor) {
    current = { ...current, anchor: observed.anchor };
  }
  if (current.target && current.cells.length) {
    // What the cell holds now (edits made while suggested) is what stays.
    current = {
      ...current,
      target: { ...current.target, original: current.cells[0].source }
    };
  }
  return transitionTo(
    current,
    { ...current, status: 'rejected', cells: [] },
    'rejected'
  );
}

/** Undo the last operation: the notebook goes back to the previous layout. */
export function undo(state: ISuggestionState): ITransition {
  if (!state.history.length) {
    return unchanged(state);
  }
  const previous = state.history[state.history.length - 1];
  const changes = state.target
    ? diffTarget(state.cells, previous.cells, state.target)
    : diffCells(state.cells, previous.cells, previous.anchor);
  return {
    state: { ...state, ...previous, history: state.history.slice(0, -1) },
    changes,
    decision: statusToTurn(previous.status)
  };
}

/**
 * Follow the candidate a collaborator chose (real-time collaboration): the
 * turn's stored `code` is the candidate a pending suggestion shows, written
 * by whichever client cycled. The cells were changed by that client; only
 * the index (the toolbar's count, an edit's diff, what Accept records)
 * follows. No cell changes, no history.
 */
export function follow(
  state: ISuggestionState,
  code: string | undefined
): ISuggestionState {
  if (state.status !== 'suggested' || !code?.trim()) {
    return state;
  }
  const wanted = code.trim();
  if (state.candidates[state.index]?.code.trim() === wanted) {
    return state;
  }
  const found = state.candidates.findIndex(c => c.code.trim() === wanted);
  return found < 0 ? state : { ...state, index: found };
}

export interface IObservedCell {
  id: string;
  source: string;
  status: TurnStatus;
  /** The analysis step its tag names, if any. */
  step?: number;
  /** Its type, where the observer knows it (the notebook adapter does). */
  cell_type?: ICellSpec['cell_type'];
}

/**
 * Reconcile with what the notebook holds for this turn (cells tagged with
 * its turn id, in notebook order) after changes we did not make: the
 * notebook's undo/redo re-inserting, removing or re-tagging cells, or the
 * user deleting them. Produces no cell changes; may change the decision.
 */
export function observe(
  state: ISuggestionState,
  observed: IObservedCell[]
): ITransition {
  const present = new Map(observed.map(c => [c.id, c]));
  const known = new Set(state.cells.map(c => c.id));
  const ours = state.cells.filter(c => present.has(c.id));
  // Cells we once owned that came back (undo of a reject, redo of an insert).
  const returned = observed.filter(c => !known.has(c.id));
  const keep = (
    cells: ICellSpec[],
    status: SuggestionStatus,
    decision: TurnStatus | null
  ) => ({
    state: { ...state, cells, status },
    changes: [] as CellChange[],
    decision
  });
  // The tag as seen, keeping the analysis step it names.
  const seenTag = (c: IObservedCell) =>
    c.step
      ? { ...tagFor(state, c.status), step: c.step }
      : tagFor(state, c.status);
  const toSpec = (
    c: IObservedCell,
    cellType: ICellSpec['cell_type']
  ): ICellSpec => ({
    id: c.id,
    cell_type: cellType,
    source: c.source,
    tag: seenTag(c)
  });
  const typeOf = (c: IObservedCell): ICellSpec['cell_type'] => {
    if (c.cell_type) {
      return c.cell_type;
    }
    for (const s of [...state.history].reverse()) {
      const found = s.cells.find(k => k.id === c.id);
      if (found) {
        return found.cell_type;
      }
    }
    return 'code';
  };
  const refreshed = (cells: ICellSpec[]) =>
    cells.map(c => {
      const seen = present.get(c.id)!;
      return { ...c, source: seen.source, tag: seenTag(seen) };
    });

  if (state.status === 'suggested' || state.status === 'accepted') {
    if (!ours.length && !returned.length) {
      // Every cell is gone: from suggested that is a rejection; an accepted
      // turn stays accepted (deleting later does not undo the decision).
      return state.status === 'suggested'
        ? keep([], 'rejected', 'rejected')
        : keep([], 'accepted', null);
    }
    // Cells that came back (the notebook's undo of a partial accept) rejoin, in order.
    const cells = returned.length
      ? observed.map(c =>
          known.has(c.id)
            ? refreshed([state.cells.find(k => k.id === c.id)!])[0]
            : toSpec(c, typeOf(c))
        )
      : refreshed(ours);
    const statuses = new Set(observed.map(c => c.status));
    if (
      state.status === 'suggested' &&
      statuses.size === 1 &&
      statuses.has('accepted')
    ) {
      return keep(cells, 'accepted', 'accepted');
    }
    if (
      state.status === 'accepted' &&
      statuses.size === 1 &&
      statuses.has('pending')
    ) {
      return keep(cells, 'suggested', 'pending');
    }
    return keep(cells, state.status, null);
  }
  // none / rejected: cells tagged with this turn reappeared.
  if (!observed.length) {
    return unchanged(state);
  }
  const cells = observed.map(c => toSpec(c, typeOf(c)));
  const accepted = observed.every(
    c => c.status === 'accepted' || c.status === 'edited'
  );
  return keep(
    cells,
    accepted ? 'accepted' : 'suggested',
    accepted ? 'accepted' : 'pending'
  );
}

export interface IRestoreOptions {
  turnId: string;
  intent: string;
  candidates: ISuggestionCandidate[];
  mode: InsertMode;
  /** The cells tagged with this turn, in notebook order, with their types. */
  cells: (IObservedCell & { cell_type: ICellSpec['cell_type'] })[];
  anchor: IAnchor;
  /** The cell an edit turn replaces (`edits_cell` in the turn). */
  target?: IReplaceTarget | null;
  /** The turn's stored code: finds the current candidate of an edit turn. */
  code?: string;
}

/**
 * Rebuild a suggestion from a reopened notebook. Cycling works again when
 * the turn kept its candidates; the current one is found by its code.
 */
export function restore(options: IRestoreOptions): ISuggestionState {
  const pending = options.cells.some(c => c.status === 'pending');
  const code = solutionCode(
    options.cells.map(c => ({
      ...c,
      tag: { turn_id: options.turnId, intent: options.intent, status: c.status }
    }))
  );
  const wanted = options.target && options.code ? options.code : code;
  const found = options.candidates.findIndex(
    c => c.code.trim() === wanted.trim()
  );
  return {
    turnId: options.turnId,
    intent: options.intent,
    candidates: options.candidates,
    mode: options.mode,
    target: options.target ?? null,
    status: options.cells.length
      ? pending
        ? 'suggested'
        : 'accepted'
      : 'none',
    index: found >= 0 ? found : 0,
    anchor: options.anchor,
    cells: options.cells.map(c => ({
      id: c.id,
      cell_type: c.cell_type,
      source: c.source,
      tag: {
        turn_id: options.turnId,
        intent: options.intent,
        status: c.status,
        ...(c.step ? { step: c.step } : {})
      }
    })),
    history: []
  };
}
