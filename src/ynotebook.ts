/**
 * The Yjs adapter: the suggestion machine's cell changes applied to the
 * notebook's shared model (one transaction, one undoable step), and the
 * notebook's cells read back as the machine sees them (the cells tagged
 * with a turn, sources, anchors).
 */
import type { NotebookPanel } from '@jupyterlab/notebook';

import { ICellAgentMetadata, METADATA_KEY, readCellTag } from './metadata';
import type { CellChange, IAnchor, IObservedCell } from './suggestions';

/** A cell tagged with a turn, as the machine observes it, with its type. */
export type ITaggedCell = IObservedCell & { cell_type: 'code' | 'markdown' };

/** What `apply` edits on a shared cell. */
interface IEditableCell {
  setSource(s: string): void;
  setMetadata(k: string, v: any): void;
  deleteMetadata(k: string): void;
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

  /** Below this cell; below `fallback` (the active cell) when it is gone. */
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
        cell_type: cell.type === 'markdown' ? 'markdown' : 'code'
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
    if (tag) {
      cell.setMetadata(METADATA_KEY, { ...tag });
    } else {
      cell.deleteMetadata(METADATA_KEY);
    }
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
      case 'setTag':
        if (change.tag) {
          byId.get(change.id)?.setMetadata(METADATA_KEY, { ...change.tag });
        } else {
          byId.get(change.id)?.deleteMetadata(METADATA_KEY);
        }
        break;
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
          metadata: { [METADATA_KEY]: { ...cell.tag } },
          ...(cell.cell_type === 'code'
            ? { outputs: [], execution_count: null }
            : {})
        } as any);
        order.splice(at, 0, cell.id);
        break;
      }
    }
  }
}
