/**
 * What the notebook's cells are to a suggestion: the empty cell it takes,
 * the cell an edit replaces (with the outputs it shows), the cells an
 * analysis may edit, and the suggestion a reopened notebook's tagged cells
 * stand for. Read from the shared cells (ynotebook.ts); the suggestion
 * controller (notebook.ts) acts on what these say.
 */
import { ExistingCells, restoredSteps } from './analysis';
import { withStepEdits } from './analysisreview';
import { runWarning } from './exchange';
import { ITurn, TurnStatus, readCellTag } from './metadata';
import {
  IObservedCell,
  IReplaceTarget,
  ISuggestionCandidate,
  ISuggestionState,
  restore,
  solutionCode
} from './suggestions';
import { ITaggedCell, SharedCells } from './ynotebook';

/** The suggestion of a turn, if any (the controller's states). */
export type StateOf = (turnId: string) => ISuggestionState | undefined;

/** A shared cell's outputs and execution count, as nbformat has them. */
export function outputsOf(cell: { toJSON(): unknown }): {
  outputs: Record<string, unknown>[];
  executionCount: number | null;
} {
  const json = cell.toJSON() as {
    outputs?: Record<string, unknown>[];
    execution_count?: number | null;
  };
  return {
    outputs: json.outputs ?? [],
    executionCount: json.execution_count ?? null
  };
}

/**
 * The anchor cell when it is an empty code cell (no source, no outputs,
 * no turn's tag): the new cell the user asked from, which the
 * suggestion takes rather than leaving it empty above.
 */
export function emptyCell(
  cells: SharedCells,
  id: string | null
): string | null {
  const index = id ? cells.indexOf(id) : -1;
  const cell = index >= 0 ? cells.cells[index] : null;
  if (
    !cell ||
    cell.cell_type !== 'code' ||
    cell.getSource().trim() ||
    readCellTag(cell.metadata as Record<string, unknown>)
  ) {
    return null;
  }
  return outputsOf(cell).outputs.length ? null : cell.getId();
}

/**
 * The cell an edit turn replaces, as it is now; null when it cannot be
 * replaced (gone, not code, or another turn's suggested new cell).
 * `supersedes`: a pending edit of the same cell, which the newer one
 * replaces (the caller rejects it first).
 */
export function targetOf(
  cells: SharedCells,
  cellId: string | null | undefined,
  turnId: string,
  stateOf: StateOf
): { target: IReplaceTarget; supersedes: string | null } | null {
  const index = cellId ? cells.indexOf(cellId) : -1;
  if (index < 0) {
    return null;
  }
  const cell = cells.cells[index];
  if (cell.cell_type !== 'code') {
    return null;
  }
  const tag = readCellTag(cell.metadata as Record<string, unknown>);
  const owner = tag ? stateOf(tag.turn_id) : undefined;
  const pending =
    tag?.turn_id !== turnId && owner?.status === 'suggested' ? owner : null;
  if (pending && pending.target?.id !== cell.getId()) {
    // Another turn's suggested new cell: not replaced under it.
    return null;
  }
  return {
    target: {
      id: cell.getId(),
      original: cell.getSource(),
      tag,
      ...outputsOf(cell)
    },
    supersedes: pending ? pending.turnId : null
  };
}

/** The outputs a cell shows now, by id; null: no such cell. */
export function cellOutputs(
  cells: SharedCells
): (id: string) => ReturnType<typeof outputsOf> | null {
  return id => {
    const index = cells.indexOf(id);
    return index < 0 ? null : outputsOf(cells.cells[index]);
  };
}

/** An edit's target with the outputs its cell shows now. */
export function withOutputs(
  cells: SharedCells,
  target: IReplaceTarget
): IReplaceTarget {
  const index = cells.indexOf(target.id);
  return index < 0 ? target : { ...target, ...outputsOf(cells.cells[index]) };
}

/**
 * The existing code cells an analysis may edit, as they are now; not
 * another turn's pending suggestion (it is not edited under it).
 */
export function existingCells(
  cells: SharedCells,
  turnId: string,
  stateOf: StateOf
): ExistingCells {
  return id => {
    const index = cells.indexOf(id);
    const cell = index >= 0 ? cells.cells[index] : null;
    if (!cell || cell.cell_type !== 'code') {
      return null;
    }
    const tag = readCellTag(cell.metadata as Record<string, unknown>);
    const owner = tag && tag.turn_id !== turnId ? stateOf(tag.turn_id) : null;
    if (owner?.status === 'suggested') {
      return null;
    }
    return { original: cell.getSource(), tag, ...outputsOf(cell) };
  };
}

/** A stored turn's candidates as suggestion candidates (an analysis with its steps). */
export function candidatesOf(turn: ITurn | undefined): ISuggestionCandidate[] {
  return (turn?.candidates ?? []).map((code, i) => {
    const warning = runWarning(turn?.runs?.[i] ?? null);
    const changes = turn?.runs?.[i]?.changes;
    return {
      code,
      explanation: turn?.explanations?.[i] ?? '',
      steps: [],
      ...(warning ? { warning } : {}),
      ...(changes ? { changes } : {}),
      // An analysis has one candidate: its steps come back with it.
      ...(i === 0 && turn?.analysis?.length
        ? { analysis: restoredSteps(turn.analysis) }
        : {})
    };
  });
}

/** The suggestion a (re)opened notebook's cells tagged with one turn stand for. */
export function restoredState(
  cells: SharedCells,
  turnId: string,
  tagged: ITaggedCell[],
  turn: ITurn | undefined
): ISuggestionState {
  const first = cells.indexOf(tagged[0].id);
  // An edit turn's own cell: its source now is what a reject keeps.
  const edited =
    turn?.edits_cell && tagged.length === 1 && tagged[0].id === turn.edits_cell
      ? tagged[0]
      : null;
  // An analysis's steps that edit cells: what those cells show now is theirs.
  const restored = restore({
    turnId,
    intent: turn?.intent ?? tagged[0].source,
    candidates: candidatesOf(turn),
    mode: tagged.length > 1 ? 'perStep' : 'single',
    cells: tagged,
    anchor: cells.anchorAt(first),
    target: edited
      ? withOutputs(cells, {
          id: edited.id,
          original: edited.source,
          tag: null
        })
      : null,
    code: turn?.code
  });
  return withStepEdits(restored, cellOutputs(cells));
}

/**
 * What an accepted turn's cells say now: "edited" when they no longer hold
 * the accepted code, "accepted" again when the user undid their edits;
 * null when nothing is to be recorded.
 */
export function editedDecision(
  observed: readonly IObservedCell[],
  turn: ITurn,
  acceptedCode: string
): { status: TurnStatus; code: string } | null {
  if (
    !observed.length ||
    (turn.status !== 'accepted' && turn.status !== 'edited')
  ) {
    return null;
  }
  const code = solutionCode(
    (observed as (IObservedCell & { cell_type?: string })[]).map(c => ({
      cell_type: c.cell_type ?? 'code',
      source: c.source
    }))
  );
  const status: TurnStatus = code === acceptedCode ? 'accepted' : 'edited';
  if (status === turn.status && code === turn.code) {
    return null;
  }
  if (turn.status === 'accepted' && status === 'accepted') {
    return null;
  }
  return { status, code };
}
