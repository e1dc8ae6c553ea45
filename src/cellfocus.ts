/**
 * Where the keyboard goes after a suggestion command (Accept, Reject, undo)
 * run from the keyboard: back to a notebook cell in command mode, so that
 * the notebook's `z` and the next suggestion shortcut act. Removing the
 * focused suggestion cell would otherwise leave the focus on the page body,
 * where no shortcut of the notebook applies.
 */
import { Notebook, NotebookActions } from '@jupyterlab/notebook';

/** Whether the keyboard is in `notebook` or nowhere (the page body). */
export function keyboardInNotebook(notebook: Notebook): boolean {
  const active = document.activeElement;
  return !active || active === document.body || notebook.node.contains(active);
}

/**
 * Make `cellId` (when given and present) the active cell and put the
 * keyboard on the active cell, in command mode.
 */
export async function focusNotebookCell(
  notebook: Notebook,
  cellId: string | null = null
): Promise<void> {
  if (notebook.isDisposed) {
    return;
  }
  if (cellId) {
    const index = notebook.widgets.findIndex(c => c.model.id === cellId);
    if (index >= 0 && index !== notebook.activeCellIndex) {
      notebook.activeCellIndex = index;
    }
  }
  notebook.deselectAll();
  // Setting the mode refocuses only a notebook that still holds the focus.
  notebook.mode = 'command';
  const index = notebook.activeCellIndex;
  if (index >= 0) {
    // A windowed notebook renders the cell once it is scrolled to.
    await notebook.scrollToItem(index, 'smart').catch(() => undefined);
  }
  await NotebookActions.focusActiveCell(notebook);
}

/**
 * Run a suggestion command; when it came from the notebook (or the focus
 * had already been lost), put the keyboard back on a cell afterwards: the
 * one `cellAfter` names, else the active one. From the composer the focus
 * stays there, where the same commands have their own keys.
 */
export async function keepKeyboardInNotebook<T>(
  notebook: Notebook,
  run: () => T | Promise<T>,
  cellAfter: () => string | null = () => null
): Promise<T> {
  const wasInNotebook = keyboardInNotebook(notebook);
  const result = await run();
  if (wasInNotebook || keyboardInNotebook(notebook)) {
    await focusNotebookCell(notebook, cellAfter());
  }
  return result;
}
