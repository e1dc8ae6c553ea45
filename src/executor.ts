/**
 * A suggestion the user has not accepted cannot run.
 *
 * A pending suggestion is a code cell in the notebook, so Run All, Run
 * Selected, Restart & Run All and every other command would send the
 * model's code to the real kernel (and trust its outputs). JupyterLab runs
 * every cell through one `INotebookCellExecutor`; this extension provides it
 * in place of the stock one, and skips a code cell whose tag says `pending`
 * with a notice. Accept (or Accept & Run) clears the tag first, so the
 * accepted cell runs as any other.
 *
 * The last plugin registered for the token wins, so every other provider is
 * disabled in package.json: JupyterLab's, and jupyter-collaboration's
 * (`@jupyter/docprovider-extension:notebook-cell-executor`, registered
 * after this one: with it, pending suggestions ran). Its server-side
 * execution (`YDocExtension.server_side_execution`) is then off: cells run
 * over the kernel's websocket, as they do without it.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { INotebookCellExecutor, runCell } from '@jupyterlab/notebook';

// eslint-disable-next-line jupyter/prefer-lazy-imports -- a constant, needed on every run
import { METADATA_KEY } from './metadata';

/** True for a code cell holding a suggestion that is not accepted yet. */
export function isPendingSuggestion(model: {
  type: string;
  getMetadata(key: string): unknown;
}): boolean {
  if (model.type !== 'code') {
    return false;
  }
  const tag = model.getMetadata(METADATA_KEY) as
    { status?: unknown } | undefined;
  return !!tag && typeof tag === 'object' && tag.status === 'pending';
}

let lastNotice = 0;

/** `runCell`, except for pending suggestions: they are skipped, and the user told why. */
export async function runAcceptedCell(
  options: INotebookCellExecutor.IRunCellOptions
): Promise<boolean> {
  if (isPendingSuggestion(options.cell.model)) {
    const now = Date.now();
    if (now - lastNotice > 2000) {
      lastNotice = now;
      Notification.info(
        'A Data Agent suggestion was not run: accept it first (Accept, or Accept & Run).',
        { autoClose: 5000 }
      );
    }
    return true; // the other cells of Run All go on
  }
  return runCell(options);
}

export const executorPlugin: JupyterFrontEndPlugin<INotebookCellExecutor> = {
  id: 'jupyter-data-agent:cell-executor',
  description:
    'Runs notebook cells like JupyterLab does, except Data Agent suggestions not yet accepted.',
  autoStart: true,
  provides: INotebookCellExecutor,
  activate: (_app: JupyterFrontEnd): INotebookCellExecutor =>
    Object.freeze({ runCell: runAcceptedCell })
};
