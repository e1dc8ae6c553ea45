/**
 * The thin adapter between the suggestion state machine (suggestions.ts)
 * and a NotebookPanel: applies cell changes in one shared-model transaction,
 * marks suggestion cells, records decisions in notebook metadata, and
 * reconciles with changes made by the notebook's own undo or by the user.
 */
import { Cell, ICellModel } from '@jupyterlab/cells';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';
import { PanelLayout, Widget } from '@lumino/widgets';

import { CellDiffView, REPLACING_CLASS, cellLanguage } from './celldiff';
import { postDecision } from './handler';
import {
  INotebookAgentMetadata,
  ITurn,
  METADATA_KEY,
  TurnStatus,
  conversationValue,
  readCellTag,
  readConversation,
  updateTurn,
  upsertTurn
} from './metadata';
import {
  CellChange,
  IAnchor,
  IReplaceTarget,
  ISuggestionCandidate,
  ISuggestionState,
  IObservedCell,
  ITransition,
  InsertMode,
  accept,
  cycle,
  emptySuggestion,
  insert,
  observe,
  reject,
  restore,
  select,
  solutionCode,
  undo
} from './suggestions';

export const SUGGESTION_CLASS = 'jp-DataAgent-suggestion';
const BAR_CLASS = 'jp-DataAgent-suggestionBar';

/** What the cell toolbar asks the controller to do. */
export type SuggestionAction =
  'accept' | 'acceptAndRun' | 'reject' | 'next' | 'previous';

/** The small toolbar on the first cell of a suggestion. */
class SuggestionBar extends Widget {
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
    ) => {
      const button = document.createElement('button');
      button.type = 'button';
      button.className = `jp-Button jp-mod-styled jp-mod-small jp-DataAgent-${action} ${cls}`;
      button.textContent = text;
      button.title = title;
      button.dataset.action = action;
      // Keep the notebook from treating the click as a cell selection drag.
      button.addEventListener('mousedown', event => event.stopPropagation());
      button.addEventListener('click', event => {
        event.preventDefault();
        event.stopPropagation();
        this._onAction(action);
      });
      buttons.appendChild(button);
      return button;
    };
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
    this._explanation = document.createElement('div');
    this._explanation.className = 'jp-DataAgent-suggestionExplanation';
    this.node.append(head, this._explanation);
  }

  render(state: ISuggestionState): void {
    const n = state.candidates.length;
    this._count.textContent = n > 1 ? `${state.index + 1} / ${n}` : '';
    this._prev.disabled = n < 2;
    this._next.disabled = n < 2;
    const candidate = state.candidates[state.index];
    const text =
      candidate?.explanation ||
      (candidate?.steps ?? [])
        .filter(s => s.explanation)
        .map(s => `Step ${s.number}: ${s.explanation}`)
        .join('\n');
    this._explanation.textContent = text || state.intent;
    this.node.dataset.turnId = state.turnId;
    const edit = !!state.target;
    this.toggleClass('jp-mod-edit', edit);
    this._label.textContent = edit
      ? 'Suggested edit of this cell'
      : 'Suggested by Data Agent';
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
}

export namespace SuggestionController {
  export interface IInsertOptions {
    turnId: string;
    intent: string;
    candidates: ISuggestionCandidate[];
    index: number;
    mode: InsertMode;
    /** Insert below this cell; the active cell when absent or gone. */
    anchorCellId?: string | null;
    /**
     * Replace this code cell instead (an edit turn): shown as a diff over
     * it. Falls back to inserting below when the cell is gone or is not code.
     */
    replaceCellId?: string | null;
  }
}

/** One per notebook panel. */
export class SuggestionController implements IDisposable {
  constructor(readonly panel: NotebookPanel) {
    const model = panel.model!;
    model.cells.changed.connect(this._scheduleSync, this);
    model.contentChanged.connect(this._scheduleSync, this);
    model.metadataChanged.connect(this._onNotebookMetadata, this);
    for (let i = 0; i < model.cells.length; i++) {
      this._watchCell(model.cells.get(i));
    }
    model.cells.changed.connect((_, change) => {
      if (change.type === 'add' || change.type === 'set') {
        change.newValues.forEach(cell => this._watchCell(cell));
      }
    }, this);
    panel.content.activeCellChanged.connect(() => this._changed.emit(), this);
    this._restoreAll();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Fired when suggestions or the stored conversation change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get conversation(): INotebookAgentMetadata {
    return readConversation({
      [METADATA_KEY]: this.panel.model?.getMetadata(METADATA_KEY)
    });
  }

  suggestion(turnId: string): ISuggestionState | null {
    return this._states.get(turnId) ?? null;
  }

  /** Turn ids with a live suggestion (status suggested), oldest first. */
  get pendingTurns(): string[] {
    return [...this._states.values()]
      .filter(s => s.status === 'suggested')
      .map(s => s.turnId);
  }

  /**
   * The suggestion keyboard commands act on: the one holding the active
   * cell, else the one inserted last.
   */
  currentTurn(): string | null {
    const active = this.panel.content.activeCell;
    const tag = active ? readCellTag(active.model.metadata) : null;
    if (tag && this._states.get(tag.turn_id)?.status === 'suggested') {
      return tag.turn_id;
    }
    return (
      this._lastTouched
        .filter(id => this._states.get(id)?.status === 'suggested')
        .pop() ?? null
    );
  }

  /** Store (or update) a turn in notebook metadata. */
  recordTurn(turn: ITurn): void {
    this._writeConversation(upsertTurn(this.conversation, turn));
  }

  insert(options: SuggestionController.IInsertOptions): boolean {
    const previous =
      this._states.get(options.turnId) ??
      emptySuggestion(options.turnId, options.intent, options.mode);
    if (previous.status === 'suggested') {
      return this._run(select(previous, options.index));
    }
    const target = this._targetOf(options.replaceCellId, options.turnId);
    const result = insert(previous, {
      candidates: options.candidates,
      index: options.index,
      mode: options.mode,
      anchor: this._anchorBelow(options.anchorCellId),
      target
    });
    return this._run(result);
  }

  /**
   * The cell an edit turn replaces, as it is now; null when it cannot be
   * replaced (gone, not code, or another turn's suggested new cell). A
   * pending edit of the same cell is rejected first: the newer one wins.
   */
  private _targetOf(
    cellId: string | null | undefined,
    turnId: string
  ): IReplaceTarget | null {
    const index = cellId ? this._indexOf(cellId) : -1;
    if (index < 0) {
      return null;
    }
    const cell = this.panel.model!.sharedModel.cells[index];
    if (cell.cell_type !== 'code') {
      return null;
    }
    const tag = readCellTag(cell.metadata as Record<string, unknown>);
    const owner = tag ? this._states.get(tag.turn_id) : null;
    const pending =
      tag?.turn_id !== turnId && owner?.status === 'suggested' ? owner : null;
    if (pending && pending.target?.id !== cell.getId()) {
      // Another turn's suggested new cell: not replaced under it.
      return null;
    }
    if (pending) {
      // A newer edit of the same cell supersedes the one still shown.
      this.reject(pending.turnId);
    }
    return {
      id: cell.getId(),
      original: cell.getSource(),
      tag: readCellTag(cell.metadata as Record<string, unknown>)
    };
  }

  cycle(turnId: string | null, delta: 1 | -1): boolean {
    const state = turnId ? this._states.get(turnId) : null;
    return state ? this._run(cycle(state, delta)) : false;
  }

  select(turnId: string, index: number): boolean {
    const state = this._states.get(turnId);
    return state ? this._run(select(state, index)) : false;
  }

  accept(turnId: string | null): boolean {
    const state = turnId ? this._states.get(turnId) : null;
    if (!state) {
      return false;
    }
    return this._run(accept(state, this._sources(state)));
  }

  async acceptAndRun(turnId: string | null): Promise<boolean> {
    const state = turnId ? this._states.get(turnId) : null;
    this._acceptingToRun = true;
    try {
      if (!state || !this.accept(turnId)) {
        return false;
      }
    } finally {
      this._acceptingToRun = false;
    }
    const notebook = this.panel.content;
    const indices = state.cells
      .map(c => this._indexOf(c.id))
      .filter(i => i >= 0)
      .sort((a, b) => a - b);
    if (!indices.length) {
      return true;
    }
    notebook.activeCellIndex = indices[0];
    notebook.deselectAll();
    notebook.extendContiguousSelectionTo(indices[indices.length - 1]);
    await NotebookActions.run(notebook, this.panel.sessionContext);
    return true;
  }

  reject(turnId: string | null): boolean {
    const state = turnId ? this._states.get(turnId) : null;
    if (!state || state.status !== 'suggested') {
      return false;
    }
    if (state.target) {
      // The cell stays where it is, as it is: only the suggestion goes.
      return this._run(reject(state, { sources: this._sources(state) }));
    }
    const first = state.cells.map(c => this._indexOf(c.id)).filter(i => i >= 0);
    const start = first.length ? Math.min(...first) : -1;
    const cells = this.panel.model!.sharedModel.cells;
    const anchor: IAnchor | undefined =
      start >= 0
        ? { afterId: start > 0 ? cells[start - 1].getId() : null, index: start }
        : undefined;
    const ok = this._run(
      reject(state, { sources: this._sources(state), anchor })
    );
    if (ok && anchor) {
      // Back to the cell the suggestion hung from, as before the insert.
      const notebook = this.panel.content;
      const back = anchor.afterId ? this._indexOf(anchor.afterId) : 0;
      if (back >= 0 && back < notebook.widgets.length) {
        notebook.activeCellIndex = back;
      }
    }
    return ok;
  }

  /** Undo the last suggestion operation of this turn (or the last one touched). */
  undo(turnId?: string | null): boolean {
    const id = turnId ?? this._lastTouched[this._lastTouched.length - 1];
    const state = id ? this._states.get(id) : null;
    return state ? this._run(undo(state)) : false;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.clearTimeout(this._syncTimer);
    for (const bar of this._bars.values()) {
      bar.dispose();
    }
    this._bars.clear();
    for (const diff of this._diffs.values()) {
      diff.dispose();
    }
    this._diffs.clear();
    Signal.clearData(this);
  }

  // ---------------------------------------------------------------------

  private _run(result: ITransition): boolean {
    const before = this._states.get(result.state.turnId);
    if (result.state === before && !result.changes.length) {
      return false;
    }
    this._states.set(result.state.turnId, result.state);
    this._touch(result.state.turnId);
    this._apply(result.changes, result.state, result.decision);
    this._decorate();
    this._changed.emit();
    return true;
  }

  private _touch(turnId: string): void {
    this._lastTouched = this._lastTouched.filter(id => id !== turnId);
    this._lastTouched.push(turnId);
  }

  private _indexOf(id: string): number {
    const cells = this.panel.model?.sharedModel.cells ?? [];
    return cells.findIndex(c => c.getId() === id);
  }

  private _sources(state: ISuggestionState): Record<string, string> {
    const sources: Record<string, string> = {};
    const cells = this.panel.model!.sharedModel.cells;
    for (const spec of state.cells) {
      const cell = cells.find(c => c.getId() === spec.id);
      if (cell) {
        sources[spec.id] = cell.getSource();
      }
    }
    return sources;
  }

  private _anchorBelow(cellId?: string | null): IAnchor {
    const cells = this.panel.model!.sharedModel.cells;
    let index = cellId ? this._indexOf(cellId) : -1;
    if (index < 0) {
      index = this.panel.content.activeCellIndex;
    }
    if (index < 0 || index >= cells.length) {
      return {
        afterId: cells.length ? cells[cells.length - 1].getId() : null,
        index: cells.length
      };
    }
    return { afterId: cells[index].getId(), index: index + 1 };
  }

  /**
   * Apply the changes and record the decision as one undoable step: the
   * notebook's own undo (z / Ctrl+Z) then reverts exactly this operation.
   */
  private _apply(
    changes: CellChange[],
    state: ISuggestionState,
    decision: TurnStatus | null
  ): void {
    const model = this.panel.model!;
    const shared = model.sharedModel;
    const undoManager = (shared as any).undoManager as
      { stopCapturing?: () => void } | undefined;
    // `shared.cells` is only refreshed when the transaction ends, so
    // positions are tracked here while the changes are applied.
    const order = shared.cells.map(c => c.getId());
    const byId = new Map(shared.cells.map(c => [c.getId(), c]));
    undoManager?.stopCapturing?.();
    shared.transact(() => {
      for (const change of changes) {
        this._applyOne(change, order, byId);
      }
      if (decision) {
        this._recordDecision(state, decision);
      }
    });
    undoManager?.stopCapturing?.();
  }

  private _applyOne(
    change: CellChange,
    order: string[],
    byId: Map<
      string,
      {
        setSource(s: string): void;
        setMetadata(k: string, v: any): void;
        deleteMetadata(k: string): void;
      }
    >
  ): void {
    const shared = this.panel.model!.sharedModel;
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

  private _recordDecision(state: ISuggestionState, decision: TurnStatus): void {
    const conversation = this.conversation;
    const existing = conversation.turns.find(t => t.turn_id === state.turnId);
    // An edit turn's cell holds the candidate only once accepted.
    const placed =
      state.cells.length && (!state.target || state.status === 'accepted');
    const code = placed
      ? solutionCode(state.cells)
      : (state.candidates[state.index]?.code ?? existing?.code ?? '');
    const patch: Partial<ITurn> = {
      status: decision,
      code,
      cell_ids: state.cells.length
        ? state.cells.map(c => c.id)
        : (existing?.cell_ids ?? []),
      ...(state.target ? { edits_cell: state.target.id } : {})
    };
    if (decision === 'accepted') {
      this._acceptedCode.set(state.turnId, code);
    }
    if (existing?.status !== decision) {
      this._postDecision(state, decision, code);
    }
    if (existing) {
      this._writeConversation(updateTurn(conversation, state.turnId, patch));
    } else {
      this._writeConversation(
        upsertTurn(conversation, {
          turn_id: state.turnId,
          intent: state.intent,
          code,
          status: decision,
          cell_ids: patch.cell_ids ?? [],
          candidates: state.candidates.map(c => c.code),
          created: Date.now() / 1000,
          ...(state.target ? { edits_cell: state.target.id } : {})
        })
      );
    }
  }

  /**
   * Tell the server (its decisions store trains the value model). Never in
   * the user's way: a server without the store, or offline, is ignored.
   */
  private _postDecision(
    state: ISuggestionState,
    decision: TurnStatus,
    code: string
  ): void {
    if (decision === 'pending') {
      return;
    }
    const candidate = state.candidates[state.index];
    postDecision({
      version: 1,
      turn_id: state.turnId,
      candidate: state.index,
      decision:
        decision === 'accepted' && this._acceptingToRun
          ? 'accepted_run'
          : decision,
      intent: state.intent,
      code: candidate?.code ?? '',
      final_code: code,
      notebook_path: this.panel.context.path
    }).catch(error =>
      console.debug('jupyter-data-agent: decision not recorded', error)
    );
  }

  private _writeConversation(conversation: INotebookAgentMetadata): void {
    const model = this.panel.model;
    if (!model) {
      return;
    }
    model.setMetadata(
      METADATA_KEY,
      conversationValue(model.getMetadata(METADATA_KEY), conversation)
    );
  }

  private _watchCell(cell: ICellModel): void {
    cell.metadataChanged.connect(this._scheduleSync, this);
  }

  private _onNotebookMetadata(_: unknown, change: { key: string }): void {
    if (change.key === METADATA_KEY) {
      this._changed.emit();
    }
  }

  private _scheduleSync(): void {
    if (this._disposed) {
      return;
    }
    window.clearTimeout(this._syncTimer);
    // Coalesces keystrokes and the burst of signals one transaction makes.
    this._syncTimer = window.setTimeout(() => this._sync(), 150);
  }

  /** Cells tagged with a turn, by turn id, in notebook order. */
  private _tagged(): Map<
    string,
    (IObservedCell & { cell_type: 'code' | 'markdown' })[]
  > {
    const byTurn = new Map<
      string,
      (IObservedCell & { cell_type: 'code' | 'markdown' })[]
    >();
    const model = this.panel.model;
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

  private _candidatesOf(turn: ITurn | undefined): ISuggestionCandidate[] {
    return (turn?.candidates ?? []).map((code, i) => ({
      code,
      explanation: turn?.explanations?.[i] ?? '',
      steps: []
    }));
  }

  /** Rebuild suggestions from a (re)opened notebook's tagged cells. */
  private _restoreAll(): void {
    const conversation = this.conversation;
    for (const [turnId, cells] of this._tagged()) {
      if (this._states.has(turnId)) {
        continue;
      }
      const turn = conversation.turns.find(t => t.turn_id === turnId);
      const first = this._indexOf(cells[0].id);
      const sharedCells = this.panel.model!.sharedModel.cells;
      // An edit turn's own cell: its source now is what a reject keeps.
      const edited =
        turn?.edits_cell &&
        cells.length === 1 &&
        cells[0].id === turn.edits_cell
          ? cells[0]
          : null;
      this._states.set(
        turnId,
        restore({
          turnId,
          intent: turn?.intent ?? cells[0].source,
          candidates: this._candidatesOf(turn),
          mode: cells.length > 1 ? 'perStep' : 'single',
          cells,
          anchor: {
            afterId: first > 0 ? sharedCells[first - 1].getId() : null,
            index: Math.max(0, first)
          },
          target: edited
            ? { id: edited.id, original: edited.source, tag: null }
            : null,
          code: turn?.code
        })
      );
      if (turn?.status === 'accepted') {
        this._acceptedCode.set(turnId, turn.code);
      }
    }
    this._decorate();
  }

  private _sync(): void {
    if (this._disposed || !this.panel.model) {
      return;
    }
    this._restoreAll();
    const tagged = this._tagged();
    let changed = false;
    for (const state of [...this._states.values()]) {
      const observed = tagged.get(state.turnId) ?? [];
      const result = observe(state, observed);
      if (result.state !== state) {
        this._states.set(state.turnId, result.state);
        changed = true;
      }
      if (result.decision) {
        this._writeDecisionQuietly(result.state, result.decision);
        changed = true;
      }
      if (this._checkEdited(result.state, observed)) {
        changed = true;
      }
    }
    this._decorate();
    if (changed) {
      this._changed.emit();
    }
  }

  /** Bookkeeping the user did not do: kept out of the undo history. */
  private _writeDecisionQuietly(
    state: ISuggestionState,
    decision: TurnStatus
  ): void {
    const current = this.conversation.turns.find(
      t => t.turn_id === state.turnId
    );
    if (current?.status === decision) {
      return;
    }
    this.panel.model!.sharedModel.transact(
      () => this._recordDecision(state, decision),
      false
    );
  }

  /**
   * An accepted turn whose cells no longer hold the accepted code is
   * "edited"; the edited code is stored (it is what the user wanted).
   */
  private _checkEdited(
    state: ISuggestionState,
    observed: IObservedCell[]
  ): boolean {
    if (state.status !== 'accepted' || !observed.length) {
      return false;
    }
    const turn = this.conversation.turns.find(t => t.turn_id === state.turnId);
    if (!turn || (turn.status !== 'accepted' && turn.status !== 'edited')) {
      return false;
    }
    const code = solutionCode(
      (observed as (IObservedCell & { cell_type?: string })[]).map(c => ({
        cell_type: c.cell_type ?? 'code',
        source: c.source
      }))
    );
    const acceptedCode = this._acceptedCode.get(state.turnId) ?? turn.code;
    const status: TurnStatus = code === acceptedCode ? 'accepted' : 'edited';
    if (status === turn.status && code === turn.code) {
      return false;
    }
    if (turn.status === 'accepted' && status === 'accepted') {
      return false;
    }
    const shared = this.panel.model!.sharedModel;
    shared.transact(() => {
      this._writeConversation(
        updateTurn(this.conversation, state.turnId, { status, code })
      );
      for (const cell of observed) {
        const index = this._indexOf(cell.id);
        if (index >= 0 && cell.status !== status) {
          shared.cells[index].setMetadata(METADATA_KEY, {
            turn_id: state.turnId,
            intent: state.intent,
            status
          });
        }
      }
    }, false);
    return true;
  }

  /** Mark pending suggestion cells and give the first one its toolbar. */
  private _decorate(): void {
    const notebook = this.panel.content;
    const firstOf = new Map<string, string>();
    for (const state of this._states.values()) {
      if (state.status === 'suggested') {
        const present = state.cells.find(c => this._indexOf(c.id) >= 0);
        if (present) {
          firstOf.set(state.turnId, present.id);
        }
      }
    }
    const seen = new Set<Cell>();
    for (const cell of notebook.widgets) {
      const tag = readCellTag(cell.model.metadata);
      const state = tag ? this._states.get(tag.turn_id) : undefined;
      const pending =
        !!tag && tag.status === 'pending' && state?.status === 'suggested';
      cell.toggleClass(SUGGESTION_CLASS, pending);
      const replacing =
        pending && state?.target?.id === cell.model.id ? state : null;
      cell.toggleClass(REPLACING_CLASS, !!replacing);
      if (replacing) {
        this._showDiff(cell, replacing);
      }
      if (pending && firstOf.get(tag!.turn_id) === cell.model.id) {
        let bar = this._bars.get(cell);
        if (!bar || bar.isDisposed) {
          const turnId = tag!.turn_id;
          // Owned by this._bars: disposed when its suggestion goes.
          // eslint-disable-next-line jupyter/require-disposable-ownership
          bar = new SuggestionBar(
            action => void this._onBarAction(turnId, action)
          );
          (cell.layout as PanelLayout).insertWidget(0, bar);
          this._bars.set(cell, bar);
        }
        bar.render(state!);
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

  /** The candidate as a diff against the cell's source, below the toolbar. */
  private _showDiff(cell: Cell, state: ISuggestionState): void {
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
    const candidate = state.candidates[state.index]?.code ?? '';
    diff.render(
      cell.model.sharedModel.getSource(),
      candidate.replace(/\s+$/, ''),
      cellLanguage(cell)
    );
  }

  private async _onBarAction(
    turnId: string,
    action: SuggestionAction
  ): Promise<void> {
    switch (action) {
      case 'accept':
        this.accept(turnId);
        break;
      case 'acceptAndRun':
        await this.acceptAndRun(turnId);
        break;
      case 'reject':
        this.reject(turnId);
        break;
      case 'next':
        this.cycle(turnId, 1);
        break;
      case 'previous':
        this.cycle(turnId, -1);
        break;
    }
    if (action !== 'next' && action !== 'previous') {
      // Leave the keyboard in the notebook, ready for the next command.
      this.panel.content.mode = 'command';
      this.panel.content.activeCell?.node.focus();
    }
  }

  private _states = new Map<string, ISuggestionState>();
  private _acceptedCode = new Map<string, string>();
  private _acceptingToRun = false;
  private _bars = new Map<Cell, SuggestionBar>();
  private _diffs = new Map<Cell, CellDiffView>();
  private _lastTouched: string[] = [];
  private _changed = new Signal<this, void>(this);
  private _syncTimer = 0;
  private _disposed = false;
}
