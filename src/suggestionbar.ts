/**
 * The suggestion bar: the small toolbar on the first cell of a suggestion
 * (its label, the candidate count, its explanation and the buttons: Accept,
 * Accept & Run, Reject, previous and next candidate), and the marks on the
 * notebook's cells that go with it (the suggestion class, the diff over a
 * cell an edit replaces). Plain DOM; the controller (notebook.ts) renders
 * them from the suggestions' states.
 */
import { Cell } from '@jupyterlab/cells';
import { IDisposable } from '@lumino/disposable';
import { PanelLayout, Widget } from '@lumino/widgets';

import { AnalysisAction, AnalysisBar, IAnalysisBarView } from './analysisbar';
import { barButton } from './barbutton';
import { CellDiffView, REPLACING_CLASS, cellLanguage } from './celldiff';
import { readCellTag } from './metadata';
import { NAMESPACE_TITLE, codeSpans } from './nsdiff';
import { suggestionLabel } from './proposals';
import { ISuggestionState } from './suggestions';

export const SUGGESTION_CLASS = 'jp-DataAgent-suggestion';
const BAR_CLASS = 'jp-DataAgent-suggestionBar';

/** What the cell toolbar asks the controller to do. */
export type SuggestionAction =
  'accept' | 'acceptAndRun' | 'reject' | 'next' | 'previous';

/** The small toolbar on the first cell of a suggestion. */
export class SuggestionBar extends Widget {
  constructor(private _onAction: (action: SuggestionAction) => void) {
    super();
    this.addClass(BAR_CLASS);
    this.node.setAttribute('role', 'toolbar');
    this.node.setAttribute('aria-label', 'Data Agent suggestion');
    const head = document.createElement('div');
    head.className = 'jp-DataAgent-suggestionHead';
    const label = document.createElement('span');
    label.className = 'jp-DataAgent-suggestionLabel';
    label.textContent = 'Suggested by Data Agent';
    this._label = label;
    this._count = document.createElement('span');
    this._count.className = 'jp-DataAgent-suggestionCount';
    const buttons = document.createElement('span');
    buttons.className = 'jp-DataAgent-suggestionButtons';
    const make = (
      action: SuggestionAction,
      text: string,
      title: string,
      cls = ''
    ) =>
      barButton(
        buttons,
        action,
        text,
        title,
        () => this._onAction(action),
        cls
      );
    this._prev = make('previous', '‹', 'Previous candidate (Alt+P)');
    this._next = make('next', '›', 'Next candidate (Alt+N)');
    make(
      'accept',
      'Accept',
      'Keep this code (Ctrl+Shift+Enter)',
      'jp-mod-accept'
    );
    make(
      'acceptAndRun',
      'Accept & Run',
      'Keep and run it (Alt+Shift+Enter)',
      'jp-mod-accept'
    );
    this._reject = make(
      'reject',
      'Reject',
      'Remove the suggestion (Ctrl+Shift+Backspace)',
      'jp-mod-reject'
    );
    head.append(label, this._count, buttons);
    this._warning = document.createElement('div');
    this._warning.className = 'jp-DataAgent-suggestionWarning';
    this._warning.setAttribute('role', 'alert');
    this._explanation = document.createElement('div');
    this._explanation.className = 'jp-DataAgent-suggestionExplanation';
    this._changes = document.createElement('div');
    this._changes.className = 'jp-DataAgent-changes';
    this._changes.title = NAMESPACE_TITLE;
    this.node.append(head, this._warning, this._explanation, this._changes);
  }

  /** `agent`: the outside agent that proposed it; null: the Data Agent. */
  render(state: ISuggestionState, agent: string | null = null): void {
    const n = state.candidates.length;
    this._count.textContent = n > 1 ? `${state.index + 1} / ${n}` : '';
    // One candidate: nothing to cycle through.
    this._prev.hidden = n < 2;
    this._next.hidden = n < 2;
    const candidate = state.candidates[state.index];
    this._warning.textContent = candidate?.warning ?? '';
    this._warning.hidden = !candidate?.warning;
    const text =
      candidate?.explanation ||
      (candidate?.steps ?? [])
        .filter(s => s.explanation)
        .map(s => `Step ${s.number}: ${s.explanation}`)
        .join('\n');
    this._explanation.textContent = text || state.intent;
    renderChanges(this._changes, candidate?.changes ?? '');
    this.node.dataset.turnId = state.turnId;
    const edit = !!state.target;
    this.toggleClass('jp-mod-edit', edit);
    this._label.textContent = suggestionLabel(agent, edit);
    this.toggleClass('jp-mod-agent', !!agent);
    this._reject.title = edit
      ? 'Keep the cell as it is (Ctrl+Shift+Backspace)'
      : 'Remove the suggestion (Ctrl+Shift+Backspace)';
  }

  private _label: HTMLElement;
  private _reject: HTMLButtonElement;
  private _count: HTMLElement;
  private _prev: HTMLButtonElement;
  private _next: HTMLButtonElement;
  private _explanation: HTMLElement;
  private _warning: HTMLElement;
  private _changes: HTMLElement;
}

/** What running the candidate will change, names in code font; hidden when not known. */
function renderChanges(node: HTMLElement, changes: string): void {
  node.hidden = !changes;
  const label = document.createElement('span');
  label.className = 'jp-DataAgent-changesLabel';
  label.textContent = 'If run: ';
  node.replaceChildren(
    ...(changes ? [label] : []),
    ...codeSpans(changes).map(part => {
      if (!part.code) {
        return document.createTextNode(part.text);
      }
      const code = document.createElement('code');
      code.className = 'jp-DataAgent-changesName';
      code.textContent = part.text;
      return code;
    })
  );
}

/** The toolbars and diffs on one notebook's suggestion cells. */
/** An analysis's review bar: its actions, and what it shows besides the state. */
export interface IAnalysisReview {
  onAction(turnId: string, action: AnalysisAction): void;
  view(turnId: string): IAnalysisBarView;
}

export class SuggestionDecorations implements IDisposable {
  constructor(
    private _onAction: (turnId: string, action: SuggestionAction) => void,
    private _agentOf: (turnId: string) => string | null = () => null,
    private _review: IAnalysisReview | null = null
  ) {}

  get isDisposed(): boolean {
    return this._disposed;
  }

  /**
   * Mark pending suggestion cells (of `cells`, the notebook's) and give the
   * first one of each suggestion its toolbar; an edit's cell shows its diff.
   * `present`: whether a cell id is still in the notebook.
   */
  decorate(
    cells: readonly Cell[],
    states: ReadonlyMap<string, ISuggestionState>,
    present: (id: string) => boolean
  ): void {
    const firstOf = new Map<string, string>();
    for (const state of states.values()) {
      if (state.status === 'suggested') {
        const first = state.cells.find(c => present(c.id));
        if (first) {
          firstOf.set(state.turnId, first.id);
        }
      }
    }
    const seen = new Set<Cell>();
    for (const cell of cells) {
      const tag = readCellTag(cell.model.metadata);
      const state = tag ? states.get(tag.turn_id) : undefined;
      const pending =
        !!tag && tag.status === 'pending' && state?.status === 'suggested';
      cell.toggleClass(SUGGESTION_CLASS, pending);
      const replacing =
        pending && state?.target?.id === cell.model.id ? state : null;
      // An analysis step that edits this existing cell.
      const stepEdit =
        pending && state?.cells.find(c => c.id === cell.model.id)?.edits
          ? state.candidates[state.index]?.analysis?.find(
              s => s.number === tag!.step
            )
          : undefined;
      cell.toggleClass(REPLACING_CLASS, !!replacing || !!stepEdit);
      if (replacing) {
        this._showDiff(cell, replacing.candidates[replacing.index]?.code ?? '');
      } else if (stepEdit) {
        this._showDiff(cell, stepEdit.code);
      }
      // An analysis's cells say which step they are (styles, tests).
      if (pending && tag!.step) {
        cell.node.dataset.agentStep = String(tag!.step);
      } else {
        delete cell.node.dataset.agentStep;
      }
      if (pending && firstOf.get(tag!.turn_id) === cell.model.id) {
        const turnId = tag!.turn_id;
        const analysis =
          !!this._review && !!state!.candidates[state!.index]?.analysis?.length;
        let bar = this._bars.get(cell);
        if (bar && bar instanceof AnalysisBar !== analysis) {
          bar.dispose();
          bar = undefined;
        }
        if (!bar || bar.isDisposed) {
          // Owned by this._bars: disposed when its suggestion goes.
          bar = analysis
            ? // eslint-disable-next-line jupyter/require-disposable-ownership
              new AnalysisBar(action => this._review!.onAction(turnId, action))
            : // eslint-disable-next-line jupyter/require-disposable-ownership
              new SuggestionBar(action => this._onAction(turnId, action));
          (cell.layout as PanelLayout).insertWidget(0, bar);
          this._bars.set(cell, bar);
        }
        if (bar instanceof AnalysisBar) {
          bar.render(state!, this._review!.view(turnId));
        } else {
          bar.render(state!, this._agentOf(turnId));
        }
        seen.add(cell);
      }
    }
    for (const [cell, bar] of [...this._bars.entries()]) {
      if (!seen.has(cell)) {
        bar.dispose();
        this._bars.delete(cell);
      }
    }
    for (const [cell, diff] of [...this._diffs.entries()]) {
      if (!cell.hasClass(REPLACING_CLASS) || cell.isDisposed) {
        diff.dispose();
        this._diffs.delete(cell);
      }
    }
  }

  /** `candidate` as a diff against the cell's source, below the toolbar. */
  private _showDiff(cell: Cell, candidate: string): void {
    let diff = this._diffs.get(cell);
    if (!diff || diff.isDisposed) {
      // Owned by this._diffs: disposed when the cell stops being replaced.
      // eslint-disable-next-line jupyter/require-disposable-ownership
      diff = new CellDiffView();
      const layout = cell.layout as PanelLayout;
      const bar = this._bars.get(cell);
      const at = bar ? layout.widgets.indexOf(bar) + 1 : 0;
      layout.insertWidget(at, diff);
      this._diffs.set(cell, diff);
    }
    diff.render(
      cell.model.sharedModel.getSource(),
      candidate.replace(/\s+$/, ''),
      cellLanguage(cell)
    );
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    for (const bar of this._bars.values()) {
      bar.dispose();
    }
    this._bars.clear();
    for (const diff of this._diffs.values()) {
      diff.dispose();
    }
    this._diffs.clear();
  }

  private _bars = new Map<Cell, SuggestionBar | AnalysisBar>();
  private _diffs = new Map<Cell, CellDiffView>();
  private _disposed = false;
}
