/**
 * The review of an analysis in the notebook, DOM-free: the operations on
 * its one suggestion (accept up to step k, drop step k, the steps after an
 * edit replaced by the ones the server re-ran), as transitions of the
 * suggestion machine (suggestions.ts). Each is one transaction of cell
 * changes; after an accept, the extension's Undo goes back to the notebook
 * as it was before the analysis was placed (one undo reverts the whole
 * change, not each review step).
 */
import {
  ExistingCells,
  IAnalysisStep,
  IRerunStep,
  acceptedMarkdown,
  analysisCells,
  stepOutputs,
  stepsShown
} from './analysis';
import { TurnStatus } from './metadata';
import {
  ICellSpec,
  IExistingCell,
  IdFactory,
  ISuggestionState,
  ITransition,
  absorbSources,
  transitionTo
} from './suggestions';

/** The analysis shown by a suggestion (its current candidate's), or []. */
export function shownAnalysis(state: ISuggestionState): IAnalysisStep[] {
  return state.candidates[state.index]?.analysis ?? [];
}

/** The analysis as it came from the server (before any re-run). */
export function originalAnalysis(state: ISuggestionState): IAnalysisStep[] {
  const candidate = state.candidates[state.index];
  return candidate?.originalAnalysis ?? candidate?.analysis ?? [];
}

export function isAnalysis(state: ISuggestionState | null): boolean {
  return !!state && shownAnalysis(state).length > 0;
}

function unchanged(state: ISuggestionState): ITransition {
  return { state, changes: [], decision: null };
}

/**
 * After an accept the review's own steps are folded away: undo returns to
 * the last snapshot without this turn's cells, the notebook before the
 * analysis was placed.
 */
function beforePlaced(
  result: ITransition,
  before: ISuggestionState
): ITransition {
  const history = before.history;
  let at = history.length - 1;
  while (at >= 0 && history[at].status === 'suggested') {
    at--;
  }
  // Placed before this page loaded (a reopened notebook): its history
  // starts at the review, so the notebook before it is "none of its cells".
  const placed =
    at >= 0
      ? history.slice(0, at + 1)
      : [
          {
            status: 'none' as const,
            index: before.index,
            anchor: before.anchor,
            cells: []
          }
        ];
  return { ...result, state: { ...result.state, history: placed } };
}

/** Accept the steps up to `upTo` (all: null); the later ones go. */
export function acceptUpTo(
  state: ISuggestionState,
  upTo: number | null,
  sources?: Record<string, string>
): ITransition {
  if (state.status !== 'suggested') {
    return unchanged(state);
  }
  const current = absorbSources(state, sources);
  const status: TurnStatus = 'accepted';
  const byNumber = new Map(shownAnalysis(current).map(s => [s.number, s]));
  const kept = current.cells.filter(
    c => upTo === null || (c.tag.step ?? 0) <= upTo
  );
  const place = new Map(stepsShown(kept).map((n, i) => [n, i + 1]));
  const cells = kept.map(c => ({
    ...c,
    // An edited existing cell takes the step's code now, and its output
    // from the copy (none known after a reload: cleared, not left stale).
    ...(c.edits
      ? {
          source: (byNumber.get(c.tag.step ?? 0)?.code ?? c.source).replace(
            /\s+$/,
            ''
          ),
          outputs: stepOutputs(byNumber.get(c.tag.step ?? 0))
        }
      : {}),
    ...(c.cell_type === 'markdown' && typeof c.tag.step === 'number'
      ? { source: acceptedMarkdown(c.source, place.get(c.tag.step) ?? 0) }
      : {}),
    tag: { ...c.tag, status }
  }));
  const result = cells.length
    ? transitionTo(current, { ...current, status: 'accepted', cells }, status)
    : transitionTo(
        current,
        { ...current, status: 'rejected', cells: [] },
        'rejected'
      );
  return beforePlaced(result, current);
}

/** Drop step `step` (its cells go; the rest stays suggested). */
export function dropStep(
  state: ISuggestionState,
  step: number,
  sources?: Record<string, string>
): ITransition {
  if (state.status !== 'suggested') {
    return unchanged(state);
  }
  const current = absorbSources(state, sources);
  const cells = current.cells.filter(c => c.tag.step !== step);
  if (cells.length === current.cells.length) {
    return unchanged(state);
  }
  if (!cells.length) {
    return transitionTo(
      current,
      { ...current, status: 'rejected', cells: [] },
      'rejected'
    );
  }
  return transitionTo(current, { ...current, cells }, null);
}

/**
 * The first step whose code cell the user changed (the one to re-run
 * from), with the steps from there as the analysis endpoint takes them
 * (dropped steps left out); null when no step's code was changed.
 */
export function editedFrom(
  state: ISuggestionState,
  sources: Record<string, string>
): { fromStep: number; steps: IRerunStep[] } | null {
  const byNumber = new Map(shownAnalysis(state).map(s => [s.number, s]));
  const codeOf = new Map<number, string>();
  for (const cell of state.cells) {
    // An existing cell's edit is shown as a diff, not edited in review.
    if (
      cell.cell_type === 'code' &&
      typeof cell.tag.step === 'number' &&
      !cell.edits
    ) {
      codeOf.set(cell.tag.step, sources[cell.id] ?? cell.source);
    }
  }
  const shown = stepsShown(state.cells);
  const first = shown.find(
    n =>
      codeOf.has(n) &&
      (codeOf.get(n) ?? '').trim() !== (byNumber.get(n)?.code ?? '').trim()
  );
  if (first === undefined) {
    return null;
  }
  const steps = shown
    .filter(n => n >= first)
    .map(n => ({
      code: codeOf.get(n) ?? byNumber.get(n)?.code ?? '',
      cell_id: byNumber.get(n)?.cell_id ?? null,
      title: byNumber.get(n)?.title ?? '',
      explanation: byNumber.get(n)?.explanation ?? ''
    }));
  return { fromStep: first, steps };
}

/**
 * The steps from `fromStep`, re-run in copies (the endpoint's reply),
 * replace the cells of those steps; the analysis shown becomes the steps
 * before `fromStep` plus the new ones.
 */
export function replaceFrom(
  state: ISuggestionState,
  fromStep: number,
  steps: readonly IAnalysisStep[],
  newId: IdFactory,
  sources?: Record<string, string>,
  existing?: ExistingCells
): ITransition {
  if (state.status !== 'suggested') {
    return unchanged(state);
  }
  const current = absorbSources(state, sources);
  const kept: ICellSpec[] = current.cells.filter(
    c => (c.tag.step ?? 0) < fromStep
  );
  // An existing cell edited again keeps its original (what it holds now).
  const edited = new Map(
    current.cells.filter(c => c.edits).map(c => [c.id, c.edits!])
  );
  const cells = [
    ...kept,
    ...analysisCells(
      current,
      steps,
      'pending',
      newId,
      id => edited.get(id) ?? existing?.(id) ?? null
    )
  ];
  const candidates = current.candidates.slice();
  const candidate = candidates[current.index];
  candidates[current.index] = {
    ...candidate,
    analysis: [
      ...shownAnalysis(current).filter(s => s.number < fromStep),
      ...steps
    ],
    // What the steps were first: the decisions say which ones were edited.
    originalAnalysis: originalAnalysis(current)
  };
  return transitionTo(current, { ...current, candidates, cells }, null);
}

/**
 * A pending analysis rebuilt from a reopened notebook: the existing cells
 * its steps edit hold their own source until accepted, so that is what a
 * reject or an undo gives back (their earlier tag is not known).
 */
export function withStepEdits(
  state: ISuggestionState,
  outputs: (
    id: string
  ) => Pick<IExistingCell, 'outputs' | 'executionCount'> | null = () => null
): ISuggestionState {
  const edits = new Set(
    shownAnalysis(state)
      .map(s => s.cell_id)
      .filter(id => id !== null)
  );
  if (!edits.size || state.status !== 'suggested') {
    return state;
  }
  return {
    ...state,
    cells: state.cells.map(c =>
      edits.has(c.id) && !c.edits
        ? {
            ...c,
            edits: { original: c.source, tag: null, ...(outputs(c.id) ?? {}) }
          }
        : c
    )
  };
}
