/**
 * The review of an analysis suggestion (many cells, one per step), beside
 * the suggestion controller (notebook.ts): accept its steps up to one (and
 * run them in order), drop a step, and re-run the steps after an edited one
 * in kernel copies on the server. The state machine is analysisreview.ts;
 * the controller lends its states, cells and transitions (`IHost`).
 */
import { Notification } from '@jupyterlab/apputils';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';

import { ExistingCells } from './analysis';
import { AnalysisAction } from './analysisbar';
import {
  acceptUpTo,
  dropStep,
  editedFrom,
  isAnalysis,
  replaceFrom
} from './analysisreview';
import { rerunAnalysis } from './handler';
import { ISuggestionState, ITransition, defaultIdFactory } from './suggestions';

export namespace AnalysisController {
  /** What the suggestion controller lends the review. */
  export interface IHost {
    readonly panel: NotebookPanel;
    state(turnId: string): ISuggestionState | null;
    /** Apply a transition; `toRun`: the accepted cells are run next. */
    run(result: ITransition, toRun?: boolean): boolean;
    sources(state: ISuggestionState): Record<string, string>;
    existing(turnId: string): ExistingCells;
    indexOf(cellId: string): number;
    /** Redraw the suggestion bars (a re-run started or ended). */
    decorate(): void;
  }

  /** What an analysis's bar shows. */
  export interface IView {
    editedStep: number | null;
    rerunning: boolean;
  }
}

export class AnalysisController {
  constructor(private _host: AnalysisController.IHost) {}

  /**
   * Accept an analysis's steps up to `upTo` (all: null); with `run`, the
   * accepted cells then run in order in the live kernel, stopping at the
   * first error. Returns whether every accepted cell ran (or, without
   * `run`, whether the accept happened).
   */
  async acceptSteps(
    turnId: string,
    upTo: number | null,
    run: boolean
  ): Promise<boolean> {
    const host = this._host;
    const state = host.state(turnId);
    if (!state || !isAnalysis(state)) {
      return false;
    }
    const ok = host.run(acceptUpTo(state, upTo, host.sources(state)), run);
    if (!ok || !run) {
      return ok;
    }
    const accepted = host.state(turnId);
    return this._runInOrder(
      accepted?.status === 'accepted' ? accepted.cells.map(c => c.id) : []
    );
  }

  /** Drop one step of a pending analysis. */
  dropStep(turnId: string, step: number): boolean {
    const state = this._host.state(turnId);
    return state
      ? this._host.run(dropStep(state, step, this._host.sources(state)))
      : false;
  }

  /**
   * The steps after the first edited one run again in copies (the
   * server's analysis endpoint); their cells are replaced. An expired
   * turn is said in words, and the user's edit stays.
   */
  async rerun(turnId: string): Promise<boolean> {
    const host = this._host;
    const state = host.state(turnId);
    if (!state || state.status !== 'suggested' || this._rerunning.has(turnId)) {
      return false;
    }
    const edited = editedFrom(state, host.sources(state));
    if (!edited) {
      return false;
    }
    this._rerunning.add(turnId);
    host.decorate();
    try {
      const reply = await rerunAnalysis(turnId, {
        version: 1,
        from_step: edited.fromStep,
        steps: edited.steps
      });
      const now = host.state(turnId);
      if (!now || now.status !== 'suggested') {
        return false;
      }
      return host.run(
        replaceFrom(
          now,
          edited.fromStep,
          reply.steps,
          defaultIdFactory,
          host.sources(now),
          host.existing(turnId)
        )
      );
    } catch (error) {
      Notification.warning(rerunFailure(error), { autoClose: 8000 });
      return false;
    } finally {
      this._rerunning.delete(turnId);
      host.decorate();
    }
  }

  /** What the analysis bar of a turn shows: the step edited, a re-run under way. */
  view(turnId: string): AnalysisController.IView {
    const state = this._host.state(turnId);
    const edited = state ? editedFrom(state, this._host.sources(state)) : null;
    return {
      editedStep: edited?.fromStep ?? null,
      rerunning: this._rerunning.has(turnId)
    };
  }

  /** A button of the analysis bar; `reject` is the controller's own. */
  async onAction(
    turnId: string,
    action: AnalysisAction,
    reject: (turnId: string) => void
  ): Promise<void> {
    switch (action.kind) {
      case 'accept':
        await this.acceptSteps(turnId, action.upTo, action.run);
        break;
      case 'drop':
        this.dropStep(turnId, action.step);
        return;
      case 'reject':
        reject(turnId);
        break;
      case 'rerun':
        await this.rerun(turnId);
        return;
    }
    const notebook = this._host.panel.content;
    notebook.mode = 'command';
    notebook.activeCell?.node.focus();
  }

  /** Run these cells one by one in the live kernel; stop at the first failure. */
  private async _runInOrder(ids: readonly string[]): Promise<boolean> {
    const panel = this._host.panel;
    const notebook = panel.content;
    for (const id of ids) {
      const index = this._host.indexOf(id);
      if (index < 0) {
        continue;
      }
      notebook.activeCellIndex = index;
      notebook.deselectAll();
      if (!(await NotebookActions.run(notebook, panel.sessionContext))) {
        return false;
      }
    }
    return true;
  }

  private _rerunning = new Set<string>();
}

/** Why the later steps could not be re-run, in words. */
function rerunFailure(error: unknown): string {
  const status =
    error instanceof ServerConnection.ResponseError ? error.response.status : 0;
  if (status === 409) {
    return 'The kernel copies of this analysis expired; re-ask. Your edit is kept.';
  }
  if (status === 404) {
    return 'The server no longer knows this analysis; re-ask. Your edit is kept.';
  }
  return `The later steps could not be re-run: ${error instanceof Error ? error.message : String(error)}`;
}
