/**
 * Warm the local model's prompt cache ahead of the user (`POST warm`).
 *
 * The server evaluates the start of the next prompt -- the cells, the schema --
 * so that the next sidebar turn or ghost text reads only the user's words
 * before its first token. Sent, debounced, when the composer gets focus or a
 * cell has run (`turn`), and when a cell gets focus (`inline`). Fire and
 * forget: a refusal (an endpoint model, the model busy) is not an error.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  INotebookTracker,
  NotebookActions,
  NotebookPanel
} from '@jupyterlab/notebook';

import { INPUT_CLASS } from './components/Composer';
// eslint-disable-next-line jupyter/prefer-lazy-imports
import { requestAPI } from './handler';
import { notebookCellsAbove } from './inline';
import { METADATA_KEY } from './metadata';
import type { NotebookCell, WarmRequest } from './wire';

/** Quiet time before a warm request: focus moving through cells sends one. */
export const WARM_DEBOUNCE_MS = 400;

/** The body of `POST warm` for `panel` now; null without a notebook model. */
export function warmBody(
  panel: NotebookPanel,
  kind: WarmRequest['kind']
): WarmRequest | null {
  const model = panel.content.model;
  if (!model) {
    return null;
  }
  const active = panel.content.activeCellIndex;
  const kernelId = panel.sessionContext.session?.kernel?.id ?? null;
  if (kind === 'inline') {
    return {
      version: 1,
      kind,
      notebook_path: panel.context.path,
      cells: notebookCellsAbove(model, active),
      active_index: null,
      kernel_id: kernelId,
      metadata: {}
    };
  }
  const stored = model.getMetadata(METADATA_KEY);
  return {
    version: 1,
    kind,
    notebook_path: panel.context.path,
    cells: model.sharedModel.toJSON().cells as NotebookCell[],
    active_index: active >= 0 ? active : null,
    kernel_id: kernelId,
    metadata: stored ? { [METADATA_KEY]: stored } : {}
  };
}

/** One pending request per kind, sent after `WARM_DEBOUNCE_MS` of quiet. */
export class Warmer {
  constructor(
    private readonly send: (body: WarmRequest) => Promise<unknown>,
    private readonly delayMs = WARM_DEBOUNCE_MS
  ) {}

  request(panel: NotebookPanel | null, kind: WarmRequest['kind']): void {
    if (!panel) {
      return;
    }
    clearTimeout(this.timers.get(kind));
    this.timers.set(
      kind,
      setTimeout(() => {
        this.timers.delete(kind);
        const body = warmBody(panel, kind);
        if (body) {
          this.send(body).catch(() => undefined);
        }
      }, this.delayMs)
    );
  }

  dispose(): void {
    this.timers.forEach(timer => clearTimeout(timer));
    this.timers.clear();
  }

  private readonly timers = new Map<
    WarmRequest['kind'],
    ReturnType<typeof setTimeout>
  >();
}

export const warmPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-data-agent:warm',
  description: "Warms the local model's prompt cache ahead of the user.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const warmer = new Warmer(body =>
      requestAPI('warm', { method: 'POST', body: JSON.stringify(body) })
    );
    tracker.activeCellChanged.connect(() =>
      warmer.request(tracker.currentWidget, 'inline')
    );
    NotebookActions.executed.connect((_, { notebook }) => {
      const panel = tracker.find(p => p.content === notebook) ?? null;
      warmer.request(panel, 'turn');
    });
    document.addEventListener('focusin', event => {
      const target = event.target as HTMLElement | null;
      if (target?.classList?.contains(INPUT_CLASS)) {
        warmer.request(tracker.currentWidget, 'turn');
      }
    });
  }
};
