/**
 * The Yjs adapter: the suggestion machine's cell changes applied to the
 * notebook's shared model (one transaction, one undoable step), and the
 * notebook's cells read back as the machine sees them (the cells tagged
 * with a turn, sources, anchors), with which of their changes this client
 * made itself and which came from a collaborator (real-time collaboration).
 */
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { IDisposable } from '@lumino/disposable';

import { ICellAgentMetadata, METADATA_KEY, readCellTag } from './metadata';
import type { CellChange, IAnchor, IObservedCell } from './suggestions';

/** A cell tagged with a turn, as the machine observes it, with its type. */
export type ITaggedCell = IObservedCell & { cell_type: 'code' | 'markdown' };

/**
 * The cell tag nbclient skips (`nbconvert --execute`, papermill): a pending
 * suggestion saved in the file is not run by tools without this extension,
 * as JupyterLab's executor here does not run it (executor.ts).
 */
export const SKIP_EXECUTION = 'skip-execution';

/** A cell's `tags` with the skip tag while it holds a pending suggestion; null: no tags left. */
export function skipTags(tags: unknown, pending: boolean): string[] | null {
  const kept = (Array.isArray(tags) ? tags : []).filter(
    (t): t is string => typeof t === 'string' && t !== SKIP_EXECUTION
  );
  const out = pending ? [...kept, SKIP_EXECUTION] : kept;
  return out.length ? out : null;
}

/** What `apply` edits on a shared cell (outputs: a code cell's). */
interface IEditableCell {
  readonly cell_type?: string;
  setSource(s: string): void;
  getMetadata?(k: string): any;
  setMetadata(k: string, v: any): void;
  deleteMetadata(k: string): void;
  setOutputs?(outputs: any[]): void;
  setExecutionCount?(count: number | null): void;
}

/** A Yjs shared type, as much as `foldLocalEdits` reads of it. */
export interface IYTypeLike {
  readonly parent: IYTypeLike | null;
  get?(key: string): unknown;
}

/** A Yjs event (of `observeDeep`), as much as `foldLocalEdits` reads of it. */
export interface IYEventLike {
  readonly target: IYTypeLike;
  readonly transaction: { readonly local: boolean };
}

/** What this client changed in the notebook's cells itself. */
export interface ILocalEdits {
  /** Cells whose source, metadata or outputs it changed, by id. */
  cells: Set<string>;
  /** It inserted, removed or moved cells. */
  layout: boolean;
}

export function noLocalEdits(): ILocalEdits {
  return { cells: new Set(), layout: false };
}

/**
 * Fold Yjs events of the notebook's cells array (`cellsType`) into `edits`:
 * the changes made by this client's own transactions. A collaborator's
 * changes arrive as remote transactions (`local` false) and are left out.
 */
export function foldLocalEdits(
  events: readonly IYEventLike[],
  cellsType: IYTypeLike,
  edits: ILocalEdits
): ILocalEdits {
  for (const event of events) {
    if (!event.transaction.local) {
      continue;
    }
    if (event.target === cellsType) {
      edits.layout = true;
      continue;
    }
    // Up from the changed type (a source, a metadata map) to its cell.
    let type: IYTypeLike | null = event.target;
    while (type && type.parent !== cellsType) {
      type = type.parent;
    }
    const id = type?.get?.('id');
    if (typeof id === 'string') {
      edits.cells.add(id);
    }
  }
  return edits;
}

/**
 * Did this client's own edits change a turn's cells? `before`: the ids the
 * suggestion held; `now`: the ids tagged with the turn now, in order.
 * `edits` null: changes are not told apart, so yes.
 */
export function touchesTurn(
  edits: ILocalEdits | null,
  before: readonly string[],
  now: readonly string[]
): boolean {
  if (!edits) {
    return true;
  }
  if (before.some(id => edits.cells.has(id))) {
    return true;
  }
  if (now.some(id => edits.cells.has(id))) {
    return true;
  }
  // Its cells came or went (a delete, a cut, the notebook's undo) as this
  // client reordered the notebook.
  return (
    edits.layout &&
    (before.length !== now.length || before.some((id, i) => id !== now[i]))
  );
}

/**
 * Keeps `ILocalEdits` for one notebook from its shared model's Yjs
 * document, until taken. Without one (a model of another kind) every
 * change counts as this client's, as it does for a notebook of one user.
 */
export class LocalEdits implements IDisposable {
  constructor(sharedModel: unknown) {
    const ydoc = (sharedModel as { ydoc?: IYDocLike } | null)?.ydoc;
    const cells = ydoc?.getArray?.('cells');
    if (cells && typeof cells.observeDeep === 'function') {
      this._cells = cells;
      cells.observeDeep(this._onEvents);
    }
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** This client's edits since the last `take`; null: not told apart. */
  take(): ILocalEdits | null {
    const edits = this._edits;
    this._edits = noLocalEdits();
    return this._cells ? edits : null;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._cells?.unobserveDeep?.(this._onEvents);
    this._cells = null;
  }

  private _onEvents = (events: IYEventLike[]): void => {
    if (this._cells) {
      foldLocalEdits(events, this._cells, this._edits);
    }
  };

  private _cells: IYArrayLike | null = null;
  private _edits = noLocalEdits();
  private _disposed = false;
}

interface IYArrayLike extends IYTypeLike {
  observeDeep?(f: (events: IYEventLike[]) => void): void;
  unobserveDeep?(f: (events: IYEventLike[]) => void): void;
}

interface IYDocLike {
  getArray?(name: string): IYArrayLike | undefined;
}

export class SharedCells {
  constructor(private _panel: NotebookPanel) {}

  private get _shared() {
    return this._panel.model!.sharedModel;
  }

  /** The shared cells, in notebook order (none while the model is gone). */
  get cells() {
    return this._panel.model?.sharedModel.cells ?? [];
  }

  indexOf(id: string): number {
    return this.cells.findIndex(c => c.getId() === id);
  }

  /** The current source of each of these cells still in the notebook. */
  sources(ids: readonly string[]): Record<string, string> {
    const sources: Record<string, string> = {};
    const cells = this.cells;
    for (const id of ids) {
      const cell = cells.find(c => c.getId() === id);
      if (cell) {
        sources[id] = cell.getSource();
      }
    }
    return sources;
  }

  /** Where a cell at `index` sits: after its predecessor, or first. */
  anchorAt(index: number): IAnchor {
    const cells = this.cells;
    return {
      afterId: index > 0 ? cells[index - 1].getId() : null,
      index: Math.max(0, index)
    };
  }

  /**
   * Below this cell; below `fallback` (the active cell) when it is gone.
   * Below the pending suggestions already placed under it too: a newer
   * suggestion goes after the older ones, not stacked above them.
   */
  anchorBelow(cellId: string | null | undefined, fallback: number): IAnchor {
    const cells = this.cells;
    let index = cellId ? this.indexOf(cellId) : -1;
    if (index < 0) {
      index = fallback;
    }
    if (index < 0 || index >= cells.length) {
      return {
        afterId: cells.length ? cells[cells.length - 1].getId() : null,
        index: cells.length
      };
    }
    while (
      index + 1 < cells.length &&
      readCellTag(
        cells[index + 1].getMetadata() as Record<string, unknown> | undefined
      )?.status === 'pending'
    ) {
      index++;
    }
    return { afterId: cells[index].getId(), index: index + 1 };
  }

  /** Cells tagged with a turn, by turn id, in notebook order. */
  tagged(): Map<string, ITaggedCell[]> {
    const byTurn = new Map<string, ITaggedCell[]>();
    const model = this._panel.model;
    if (!model) {
      return byTurn;
    }
    for (let i = 0; i < model.cells.length; i++) {
      const cell = model.cells.get(i);
      const tag = readCellTag(cell.metadata);
      if (!tag) {
        continue;
      }
      const list = byTurn.get(tag.turn_id) ?? [];
      list.push({
        id: cell.id,
        source: cell.sharedModel.getSource(),
        status: tag.status,
        cell_type: cell.type === 'markdown' ? 'markdown' : 'code',
        ...(tag.step ? { step: tag.step } : {})
      });
      byTurn.set(tag.turn_id, list);
    }
    return byTurn;
  }

  /**
   * Apply the changes, and whatever `also` writes (the decision), as one
   * undoable step: the notebook's own undo (z / Ctrl+Z) then reverts
   * exactly this operation.
   */
  apply(changes: readonly CellChange[], also?: () => void): void {
    const shared = this._shared;
    const undoManager = (shared as any).undoManager as
      { stopCapturing?: () => void } | undefined;
    // `shared.cells` is only refreshed when the transaction ends, so
    // positions are tracked here while the changes are applied.
    const order = shared.cells.map(c => c.getId());
    const byId = new Map<string, IEditableCell>(
      shared.cells.map(c => [c.getId(), c])
    );
    undoManager?.stopCapturing?.();
    shared.transact(() => {
      for (const change of changes) {
        this._applyOne(change, order, byId);
      }
      also?.();
    });
    undoManager?.stopCapturing?.();
  }

  /** Bookkeeping the user did not do: kept out of the undo history. */
  quietly(write: () => void): void {
    this._shared.transact(write, false);
  }

  /** Set (or, with null, remove) the turn pointer a cell carries. */
  setTag(id: string, tag: ICellAgentMetadata | null): void {
    const cell = this.cells[this.indexOf(id)];
    if (!cell) {
      return;
    }
    writeTag(cell as unknown as IEditableCell, tag);
  }

  private _applyOne(
    change: CellChange,
    order: string[],
    byId: Map<string, IEditableCell>
  ): void {
    const shared = this._shared;
    switch (change.op) {
      case 'remove': {
        const index = order.indexOf(change.id);
        if (index >= 0) {
          shared.deleteCell(index);
          order.splice(index, 1);
        }
        break;
      }
      case 'setSource':
        byId.get(change.id)?.setSource(change.source);
        break;
      case 'setTag': {
        const cell = byId.get(change.id);
        if (cell) {
          writeTag(cell, change.tag);
        }
        break;
      }
      case 'setOutputs': {
        const cell = byId.get(change.id);
        cell?.setOutputs?.(change.outputs);
        cell?.setExecutionCount?.(change.executionCount);
        break;
      }
      case 'insert': {
        const after = change.afterId ? order.indexOf(change.afterId) : -1;
        const at =
          after >= 0
            ? after + 1
            : Math.max(0, Math.min(change.index, order.length));
        const cell = change.cell;
        shared.insertCell(at, {
          id: cell.id,
          cell_type: cell.cell_type,
          source: cell.source,
          metadata: {
            [METADATA_KEY]: { ...cell.tag },
            ...(cell.cell_type === 'code' && cell.tag.status === 'pending'
              ? { tags: [SKIP_EXECUTION] }
              : {})
          },
          ...(cell.cell_type === 'code'
            ? { outputs: cell.outputs ?? [], execution_count: null }
            : {})
        } as any);
        order.splice(at, 0, cell.id);
        break;
      }
    }
  }
}

/** The turn pointer a cell carries (null: none), and the skip tag that goes with pending. */
function writeTag(cell: IEditableCell, tag: ICellAgentMetadata | null): void {
  if (tag) {
    cell.setMetadata(METADATA_KEY, { ...tag });
  } else {
    cell.deleteMetadata(METADATA_KEY);
  }
  if (cell.cell_type !== 'code' || !cell.getMetadata) {
    return;
  }
  const before = cell.getMetadata('tags');
  const after = skipTags(before, tag?.status === 'pending');
  if (JSON.stringify(after) === JSON.stringify(before ?? null)) {
    return;
  }
  if (after) {
    cell.setMetadata('tags', after);
  } else {
    cell.deleteMetadata('tags');
  }
}
