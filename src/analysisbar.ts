/**
 * The review bar of an analysis: on the first cell of its one suggestion,
 * in place of the suggestion bar. Accept all, Accept & Run (all), Reject
 * all; a step selector with Accept up to step k and Drop step k; Re-run
 * later steps once a step's code was edited. Plain DOM; the controller
 * (notebook.ts) renders it from the suggestion's state.
 */
import { Widget } from '@lumino/widgets';

import { IAnalysisStep, stepsShown } from './analysis';
import { barButton } from './barbutton';
import { ISuggestionState } from './suggestions';

const BAR_CLASS = 'jp-DataAgent-suggestionBar';

/** What the review bar asks the controller to do. */
export type AnalysisAction =
  | { kind: 'accept'; upTo: number | null; run: boolean }
  | { kind: 'drop'; step: number }
  | { kind: 'reject' }
  | { kind: 'rerun' };

/** What the bar shows besides the suggestion's state. */
export interface IAnalysisBarView {
  /** The first step whose code the user changed; null: none. */
  editedStep: number | null;
  /** A re-run of the later steps is under way. */
  rerunning: boolean;
}

export class AnalysisBar extends Widget {
  constructor(private _onAction: (action: AnalysisAction) => void) {
    super();
    this.addClass(BAR_CLASS);
    this.addClass('jp-DataAgent-analysisBar');
    this.node.setAttribute('role', 'toolbar');
    this.node.setAttribute('aria-label', 'Data Agent analysis review');
    const head = document.createElement('div');
    head.className = 'jp-DataAgent-suggestionHead';
    const label = document.createElement('span');
    label.className = 'jp-DataAgent-suggestionLabel';
    label.textContent = 'Analysis by Data Agent';
    this._count = document.createElement('span');
    this._count.className = 'jp-DataAgent-suggestionCount';
    const buttons = document.createElement('span');
    buttons.className = 'jp-DataAgent-suggestionButtons';
    const make = (
      name: string,
      text: string,
      title: string,
      action: () => AnalysisAction,
      cls = ''
    ) =>
      barButton(
        buttons,
        name,
        text,
        title,
        () => this._onAction(action()),
        cls
      );
    make(
      'accept',
      'Accept all',
      'Keep every step, without running it (Ctrl+Shift+Enter)',
      () => ({ kind: 'accept', upTo: null, run: false }),
      'jp-mod-accept'
    );
    make(
      'acceptAndRun',
      'Accept & Run',
      'Keep every step and run them in order in your kernel, stopping at the first error',
      () => ({ kind: 'accept', upTo: null, run: true }),
      'jp-mod-accept'
    );
    make(
      'reject',
      'Reject all',
      'Remove the whole analysis (Ctrl+Shift+Backspace)',
      () => ({ kind: 'reject' }),
      'jp-mod-reject'
    );
    head.append(label, this._count, buttons);

    const steps = document.createElement('div');
    steps.className = 'jp-DataAgent-analysisSteps';
    const selectLabel = document.createElement('label');
    selectLabel.textContent = 'Step ';
    this._select = document.createElement('select');
    this._select.className = 'jp-DataAgent-analysisStepSelect';
    this._select.setAttribute('aria-label', 'Step');
    this._select.addEventListener('mousedown', e => e.stopPropagation());
    selectLabel.appendChild(this._select);
    const stepButtons = document.createElement('span');
    stepButtons.className = 'jp-DataAgent-suggestionButtons';
    const step = () => Number(this._select.value);
    const more = (
      name: string,
      text: string,
      title: string,
      action: () => AnalysisAction
    ) => {
      const button = make(name, text, title, action);
      stepButtons.appendChild(button);
      return button;
    };
    more(
      'acceptUpTo',
      'Accept up to this step',
      'Keep the steps up to the one chosen; the later ones go',
      () => ({ kind: 'accept', upTo: step(), run: false })
    );
    more(
      'dropStep',
      'Drop this step',
      'Remove the chosen step from the analysis',
      () => ({ kind: 'drop', step: step() })
    );
    this._rerun = more(
      'rerun',
      'Re-run later steps',
      'Run the steps after your edit again, in kernel copies from the edited step',
      () => ({ kind: 'rerun' })
    );
    steps.append(selectLabel, stepButtons);
    this._explanation = document.createElement('div');
    this._explanation.className = 'jp-DataAgent-suggestionExplanation';
    this.node.append(head, steps, this._explanation);
  }

  render(state: ISuggestionState, view: IAnalysisBarView): void {
    this.node.dataset.turnId = state.turnId;
    const analysis: IAnalysisStep[] =
      state.candidates[state.index]?.analysis ?? [];
    const shown = stepsShown(state.cells);
    this._count.textContent = `${shown.length} step${shown.length === 1 ? '' : 's'}`;
    const titles = new Map(analysis.map(s => [s.number, s.title]));
    const wanted = shown.map(n => `${n}`).join(',');
    if (this._options !== wanted) {
      const previous = this._select.value;
      this._select.replaceChildren(
        ...shown.map(n => {
          const option = document.createElement('option');
          option.value = String(n);
          const title = titles.get(n);
          option.textContent = title ? `${n}. ${title}` : String(n);
          return option;
        })
      );
      this._select.value = shown.includes(Number(previous))
        ? previous
        : String(shown[shown.length - 1] ?? '');
      this._options = wanted;
    }
    this._rerun.disabled = view.editedStep === null || view.rerunning;
    this._rerun.textContent = view.rerunning
      ? 'Re-running…'
      : view.editedStep === null
        ? 'Re-run later steps'
        : `Re-run from step ${view.editedStep}`;
    const failed = analysis.filter(
      s => shown.includes(s.number) && s.status !== 'ok'
    );
    this._explanation.textContent =
      `${state.intent}` +
      (failed.length
        ? ` — step ${failed.map(s => s.number).join(', ')} did not run cleanly in its copy.`
        : '');
  }

  private _count: HTMLElement;
  private _select: HTMLSelectElement;
  private _options = '';
  private _rerun: HTMLButtonElement;
  private _explanation: HTMLElement;
}
