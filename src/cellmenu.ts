/**
 * A right-click on a cell makes it the active cell before the context menu
 * opens, so "Explain this cell", "Fix" and "Improve" act on the cell the
 * user clicked (JupyterLab leaves the active cell where it was).
 */
import { IDisposable } from '@lumino/disposable';

/** The part of a Notebook widget this needs. */
export interface IContextMenuNotebook {
  readonly node: HTMLElement;
  readonly widgets: readonly { readonly node: HTMLElement }[];
  activeCellIndex: number;
}

/** Follow right-clicks on `notebook`'s cells until disposed. */
export function activateCellOnContextMenu(
  notebook: IContextMenuNotebook
): IDisposable {
  const onContextMenu = (event: MouseEvent) => {
    const target = event.target as Node | null;
    if (!target) {
      return;
    }
    const index = notebook.widgets.findIndex(cell =>
      cell.node.contains(target)
    );
    if (index >= 0 && index !== notebook.activeCellIndex) {
      notebook.activeCellIndex = index;
    }
  };
  // Capture: before the menu's own listener reads the active cell.
  notebook.node.addEventListener('contextmenu', onContextMenu, true);
  let disposed = false;
  return {
    get isDisposed() {
      return disposed;
    },
    dispose() {
      if (!disposed) {
        disposed = true;
        notebook.node.removeEventListener('contextmenu', onContextMenu, true);
      }
    }
  };
}

/** What "Explain this cell" asks: it names the cell, as Fix and Improve do. */
export function explainQuestion(index: number): string {
  return index >= 0 ? `Explain cell ${index + 1}` : 'Explain this cell';
}
