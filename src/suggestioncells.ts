/**
 * The cells of a suggestion, DOM-free: the candidates as they become cells
 * (one code cell, or a markdown cell per step then its code), and the cell
 * changes that turn one layout of a turn's cells into another (a diff, so
 * undo is "diff back"). The state machine in suggestions.ts is built on
 * these; the notebook adapter applies the changes (ynotebook.ts).
 */
import type { IAnalysisStep } from './analysis';
import { ICellAgentMetadata, TurnStatus } from './metadata';
import { inertMarkdown } from './norequests';

export type InsertMode = 'single' | 'perStep';

export interface ISuggestionStep {
  number: number;
  explanation: string;
  code: string;
}

export interface ISuggestionCandidate {
  code: string;
  explanation: string;
  steps: ISuggestionStep[];
  /** Why its bar warns before it is kept: it raised or was stopped in its copy. */
  warning?: string;
  /** What running it will change (`nsdiff.namespaceChanges`); absent: not known. */
  changes?: string;
  /** An analysis (analysis.ts): its steps become the cells. */
  analysis?: IAnalysisStep[];
  /** The analysis as it came, before the review re-ran steps. */
  originalAnalysis?: IAnalysisStep[];
}

/** One cell this suggestion owns, as it should be in the notebook. */
export interface ICellSpec {
  id: string;
  cell_type: 'code' | 'markdown';
  source: string;
  /** Written to cell.metadata.jupyter_data_agent (the Python side's pointer). */
  tag: ICellAgentMetadata;
  /** A code cell's outputs when inserted (an analysis step's, from its copy). */
  outputs?: Record<string, unknown>[];
  /**
   * An existing cell this layout edits (an analysis step): what it holds
   * without the change, restored when the layout drops it.
   */
  edits?: IExistingCell;
}

/**
 * An existing cell as it is without a suggestion: its source and tag, and
 * the outputs it shows (put back when a layout that showed the step's own
 * outputs on it goes; unknown after a reload: left as they are).
 */
export interface IExistingCell {
  original: string;
  tag: ICellAgentMetadata | null;
  outputs?: readonly Record<string, unknown>[];
  executionCount?: number | null;
}

/** Where the first cell goes: after `afterId`, or at `index` if that cell is gone. */
export interface IAnchor {
  afterId: string | null;
  index: number;
}

export type CellChange =
  | { op: 'insert'; afterId: string | null; index: number; cell: ICellSpec }
  | { op: 'remove'; id: string }
  | { op: 'setSource'; id: string; source: string }
  | { op: 'setTag'; id: string; tag: ICellAgentMetadata | null }
  | {
      op: 'setOutputs';
      id: string;
      outputs: Record<string, unknown>[];
      executionCount: number | null;
    };

/** The existing cell a replace-mode suggestion edits. */
export interface IReplaceTarget {
  id: string;
  /** Its source while no suggestion is shown: what reject and undo restore. */
  original: string;
  /** The tag it carried before this turn (an earlier turn's), or none. */
  tag: ICellAgentMetadata | null;
  /**
   * Its outputs (nbformat) and execution count while no suggestion is
   * shown: what undo puts back when an accept cleared them.
   */
  outputs?: readonly Record<string, unknown>[];
  executionCount?: number | null;
}

export type IdFactory = () => string;

/** nbformat 4.5 cell ids: 1-64 chars of [a-zA-Z0-9-_]. */
export function defaultIdFactory(): string {
  const random = () => Math.random().toString(16).slice(2, 10).padEnd(8, '0');
  return `jda-${random()}${random()}`;
}

export function tagFor(
  state: { turnId: string; intent: string },
  status: TurnStatus
): ICellAgentMetadata {
  return { turn_id: state.turnId, intent: state.intent, status };
}

/**
 * The cells of one candidate. `single`: one code cell (its `# Step N:`
 * comments carry the explanation). `perStep`: a markdown cell per step
 * explanation followed by that step's code. Ids of `reuse` are kept, in
 * order, for cells of the same type, so cycling edits cells in place.
 */
export function layoutCells(
  state: { turnId: string; intent: string },
  candidate: ISuggestionCandidate,
  mode: InsertMode,
  status: TurnStatus,
  newId: IdFactory,
  reuse: ICellSpec[] = []
): ICellSpec[] {
  const wanted: { cell_type: 'code' | 'markdown'; source: string }[] = [];
  if (mode === 'perStep' && candidate.steps.some(s => s.code.trim())) {
    for (const step of candidate.steps) {
      if (step.explanation.trim()) {
        wanted.push({
          cell_type: 'markdown',
          source: inertMarkdown(
            `**Step ${step.number}.** ${step.explanation.trim()}`
          )
        });
      }
      if (step.code.trim()) {
        wanted.push({
          cell_type: 'code',
          source: step.code.replace(/\s+$/, '')
        });
      }
    }
  } else {
    wanted.push({
      cell_type: 'code',
      source: candidate.code.replace(/\s+$/, '')
    });
  }
  const tag = tagFor(state, status);
  // Greedy in-order matching by type: a kept cell keeps its place and id.
  let next = 0;
  return wanted.map(cell => {
    let reused: ICellSpec | undefined;
    for (let k = next; k < reuse.length; k++) {
      if (reuse[k].cell_type === cell.cell_type) {
        reused = reuse[k];
        next = k + 1;
        break;
      }
    }
    // A reused cell that was an existing one (an empty cell the suggestion
    // took) stays one: a reject gives it back as it was.
    const edits = reused?.edits;
    return {
      id: reused?.id ?? newId(),
      cell_type: cell.cell_type,
      source: cell.source,
      tag: { ...tag },
      ...(edits ? { edits } : {})
    };
  });
}

function sameTag(
  a: ICellAgentMetadata | null,
  b: ICellAgentMetadata | null
): boolean {
  if (!a || !b) {
    return a === b;
  }
  return (
    a.turn_id === b.turn_id &&
    a.intent === b.intent &&
    a.status === b.status &&
    a.step === b.step
  );
}

/**
 * Replace mode's diff: the target cell always exists; with no cells in the
 * layout it holds the target's original source, tag and outputs (a layout
 * cell without `outputs` leaves the target's as they are).
 */
export function diffTarget(
  from: ICellSpec[],
  to: ICellSpec[],
  target: IReplaceTarget
): CellChange[] {
  const rest: {
    source: string;
    tag: ICellAgentMetadata | null;
    outputs?: ICellSpec['outputs'];
  } = {
    source: target.original,
    tag: target.tag
  };
  const before = from[0] ?? rest;
  const after = to[0] ?? rest;
  const changes: CellChange[] = [];
  const outputsBefore = before.outputs ?? target.outputs;
  const outputsAfter = after.outputs ?? target.outputs;
  if (
    outputsAfter &&
    JSON.stringify(outputsBefore ?? []) !== JSON.stringify(outputsAfter)
  ) {
    changes.push({
      op: 'setOutputs',
      id: target.id,
      outputs: outputsAfter.map(o => ({ ...o })),
      // Cleared outputs go with their count, as JupyterLab's Clear Outputs.
      executionCount: after.outputs ? null : (target.executionCount ?? null)
    });
  }
  if (before.source !== after.source) {
    changes.push({ op: 'setSource', id: target.id, source: after.source });
  }
  if (!sameTag(before.tag, after.tag)) {
    changes.push({
      op: 'setTag',
      id: target.id,
      tag: after.tag ? { ...after.tag } : null
    });
  }
  return changes;
}

/**
 * The changes that turn `from` into `to` (both: this turn's cells in
 * notebook order). Removals first, then in-place edits, then insertions in
 * order, each placed after its predecessor in `to` (or the anchor).
 */
export function diffCells(
  from: ICellSpec[],
  to: ICellSpec[],
  anchor: IAnchor
): CellChange[] {
  const toIds = new Set(to.map(c => c.id));
  const fromById = new Map(from.map(c => [c.id, c]));
  const removals: CellChange[] = [];
  const edits: CellChange[] = [];
  // An existing cell a layout edits is never inserted or removed: it gets
  // the layout's source and tag, and back its own when the layout drops it.
  const restyle = (
    id: string,
    source: string,
    was: string,
    tag: ICellAgentMetadata | null
  ) => {
    if (source !== was) {
      edits.push({ op: 'setSource', id, source });
    }
    edits.push({ op: 'setTag', id, tag: tag ? { ...tag } : null });
  };
  // A layout's outputs on an existing cell (an analysis step's own, from
  // its copy) replace what the cell shows; when the layout goes, the
  // cell's own come back.
  const showOutputs = (
    id: string,
    outputs: readonly Record<string, unknown>[] | undefined,
    was: readonly Record<string, unknown>[] | undefined,
    executionCount: number | null
  ) => {
    if (outputs && JSON.stringify(outputs) !== JSON.stringify(was ?? [])) {
      edits.push({
        op: 'setOutputs',
        id,
        outputs: outputs.map(o => ({ ...o })),
        executionCount
      });
    }
  };
  for (const c of from) {
    if (!toIds.has(c.id)) {
      if (c.edits) {
        restyle(c.id, c.edits.original, c.source, c.edits.tag);
        if (c.outputs) {
          showOutputs(
            c.id,
            c.edits.outputs,
            c.outputs,
            c.edits.executionCount ?? null
          );
        }
      } else {
        removals.push({ op: 'remove', id: c.id });
      }
    }
  }
  const inserts: CellChange[] = [];
  let previous: string | null = anchor.afterId;
  let placed = 0;
  to.forEach(cell => {
    const old = fromById.get(cell.id);
    if (old) {
      if (old.source !== cell.source) {
        edits.push({ op: 'setSource', id: cell.id, source: cell.source });
      }
      if (!sameTag(old.tag, cell.tag)) {
        edits.push({ op: 'setTag', id: cell.id, tag: { ...cell.tag } });
      }
      if (cell.edits) {
        showOutputs(
          cell.id,
          cell.outputs,
          old.outputs ?? cell.edits.outputs,
          null
        );
      }
    } else if (cell.edits) {
      restyle(cell.id, cell.source, cell.edits.original, cell.tag);
      showOutputs(cell.id, cell.outputs, cell.edits.outputs, null);
    } else {
      inserts.push({
        op: 'insert',
        afterId: previous,
        index: anchor.index + placed,
        cell: { ...cell, tag: { ...cell.tag } }
      });
    }
    if (!cell.edits) {
      // New cells follow each other; an edited cell stays where it is.
      previous = cell.id;
      placed++;
    }
  });
  return [...removals, ...edits, ...inserts];
}

/** The code a turn ends up with: its code cells, in order. */
export function solutionCode(
  cells: { cell_type: string; source: string }[]
): string {
  return cells
    .filter(c => c.cell_type === 'code')
    .map(c => c.source)
    .join('\n\n');
}
