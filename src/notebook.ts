/**
 * The thin adapter between the suggestion state machine (suggestions.ts)
 * and a NotebookPanel: runs its transitions, applies their cell changes
 * through the Yjs adapter (ynotebook.ts), records decisions through the
 * conversation store (conversation.ts), marks suggestion cells and gives
 * them their toolbar (suggestionbar.ts) and diff, and reconciles with
 * changes made by the notebook's own undo or by the user.
 */
import { ICellModel } from '@jupyterlab/cells';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { focusNotebookCell } from './cellfocus';
import { ExistingCells, stepDecisions } from './analysis';
import { AnalysisController } from './analysiscontroller';
import { acceptUpTo, isAnalysis, originalAnalysis } from './analysisreview';
import { ConversationStore } from './conversation';
import {
  INotebookAgentMetadata,
  ITurn,
  METADATA_KEY,
  TurnStatus,
  readCellTag
} from './metadata';
import { proposalIdOf } from './proposals';
import { SuggestionAction, SuggestionDecorations } from './suggestionbar';
import {
  IReplaceTarget,
  ISuggestionCandidate,
  ISuggestionState,
  IObservedCell,
  ITransition,
  InsertMode,
  accept,
  cycle,
  emptySuggestion,
  follow,
  insert,
  observe,
  reject,
  select,
  solutionCode,
  undo
} from './suggestions';
import {
  editedDecision,
  emptyCell,
  existingCells,
  restoredState,
  targetOf,
  withOutputs
} from './suggestiontargets';
import { LocalEdits, SharedCells, touchesTurn } from './ynotebook';

export { SUGGESTION_CLASS } from './suggestionbar';
export type { SuggestionAction } from './suggestionbar';

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
    this.store = new ConversationStore(panel);
    this._cells = new SharedCells(panel);
    const model = panel.model!;
    this._localEdits = new LocalEdits(model.sharedModel);
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

  /** The notebook's stored conversation (the store: `store`). */
  get conversation(): INotebookAgentMetadata {
    return this.store.conversation;
  }

  /** The turns stored in the notebook, and the one path of a decision. */
  readonly store: ConversationStore;

  /** The review of analysis suggestions (steps accepted, dropped, re-run). */
  readonly analysis = new AnalysisController({
    panel: this.panel,
    state: id => this._states.get(id) ?? null,
    run: (result, toRun = false) => this._runAs(result, toRun),
    sources: state => this._sources(state),
    existing: id => this._existing(id),
    indexOf: id => this._cells.indexOf(id),
    decorate: () => this._decorate()
  });

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

  /** Whether any cell carries this turn's tag (suggested or decided). */
  hasTaggedCells(turnId: string): boolean {
    return this._cells.tagged().has(turnId);
  }

  /** Store (or update) a turn in notebook metadata. */
  recordTurn(turn: ITurn): void {
    this.store.recordTurn(turn);
  }

  insert(options: SuggestionController.IInsertOptions): boolean {
    const previous =
      this._states.get(options.turnId) ??
      emptySuggestion(options.turnId, options.intent, options.mode);
    if (previous.status === 'suggested') {
      return this._run(select(previous, options.index));
    }
    const target = this._targetOf(options.replaceCellId, options.turnId);
    const anchor = this._cells.anchorBelow(
      options.anchorCellId,
      this.panel.content.activeCellIndex
    );
    const result = insert(previous, {
      existing: this._existing(options.turnId),
      candidates: options.candidates,
      index: options.index,
      mode: options.mode,
      anchor,
      target,
      into: target ? null : emptyCell(this._cells, anchor.afterId)
    });
    return this._run(result);
  }

  /** The cell an edit turn replaces; a pending edit of it is rejected first. */
  private _targetOf(
    cellId: string | null | undefined,
    turnId: string
  ): IReplaceTarget | null {
    const found = targetOf(this._cells, cellId, turnId, this._stateOf);
    if (!found?.supersedes) {
      return found?.target ?? null;
    }
    // A newer edit supersedes the shown one: target the cell as rejected.
    this.reject(found.supersedes);
    return targetOf(this._cells, cellId, turnId, this._stateOf)?.target ?? null;
  }

  private _existing(turnId: string): ExistingCells {
    return existingCells(this._cells, turnId, this._stateOf);
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
    if (isAnalysis(state)) {
      return this._run(acceptUpTo(state, null, this._sources(state)));
    }
    // What the cell shows now (it may have run since) is what undo puts back.
    const current = state.target
      ? { ...state, target: withOutputs(this._cells, state.target) }
      : state;
    return this._run(accept(current, this._sources(state)));
  }

  async acceptAndRun(turnId: string | null): Promise<boolean> {
    if (turnId && isAnalysis(this._states.get(turnId) ?? null)) {
      return this.analysis.acceptSteps(turnId, null, true);
    }
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
      .map(c => this._cells.indexOf(c.id))
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
    const first = state.cells
      .map(c => this._cells.indexOf(c.id))
      .filter(i => i >= 0);
    const start = first.length ? Math.min(...first) : -1;
    const anchor = start >= 0 ? this._cells.anchorAt(start) : undefined;
    const ok = this._run(
      reject(state, { sources: this._sources(state), anchor })
    );
    if (ok && anchor) {
      // Back to the cell the suggestion hung from (its empty cell given back).
      const notebook = this.panel.content;
      const from = state.cells[0]?.edits ? state.cells[0].id : anchor.afterId;
      const back = from ? this._cells.indexOf(from) : 0;
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
    this._localEdits.dispose();
    this._decorations.dispose();
    Signal.clearData(this);
  }

  // ---------------------------------------------------------------------

  /** Apply a transition; `toRun`: the cells it accepts are run next. */
  private _runAs(result: ITransition, toRun: boolean): boolean {
    this._acceptingToRun = toRun;
    try {
      return this._run(result);
    } finally {
      this._acceptingToRun = false;
    }
  }

  private _run(result: ITransition): boolean {
    const before = this._states.get(result.state.turnId);
    if (result.state === before && !result.changes.length) {
      return false;
    }
    this._states.set(result.state.turnId, result.state);
    this._touch(result.state.turnId);
    const { state, decision } = result;
    this._cells.apply(result.changes, () => {
      if (decision) {
        this._recordDecision(state, decision);
      } else if (
        state.status === 'suggested' &&
        before &&
        before.index !== state.index &&
        this.store.turn(state.turnId)
      ) {
        // Another candidate shown: the turn says which, so that every
        // client's toolbar, diff and Accept follow (see `follow`).
        this.store.updateTurn(state.turnId, { code: this._turnCode(state) });
      }
    });
    this._decorate();
    this._changed.emit();
    return true;
  }

  private _touch(turnId: string): void {
    this._lastTouched = this._lastTouched.filter(id => id !== turnId);
    this._lastTouched.push(turnId);
  }

  private _sources(state: ISuggestionState): Record<string, string> {
    return this._cells.sources(state.cells.map(c => c.id));
  }

  /**
   * Record a decision on a suggestion through the one path (the
   * conversation store's `decide`: the turn in the notebook, and the
   * server's decisions store). `edited`: the code of an accepted turn the
   * user changed since.
   */
  private _recordDecision(
    state: ISuggestionState,
    decision: TurnStatus,
    edited?: string
  ): void {
    const code = edited ?? this._turnCode(state);
    if (decision === 'accepted' && edited === undefined) {
      this._acceptedCode.set(state.turnId, code);
    }
    const analysis = originalAnalysis(state);
    this.store.decide({
      // An analysis is decided per step (kept, dropped, edited).
      ...(analysis.length && decision !== 'pending'
        ? {
            steps: stepDecisions(
              analysis,
              decision === 'rejected' ? [] : state.cells,
              this._acceptingToRun
            )
          }
        : {}),
      turnId: state.turnId,
      intent: state.intent,
      status: decision,
      code,
      // An edit changes the code of the cells stored: those stay.
      cellIds: edited === undefined ? state.cells.map(c => c.id) : [],
      candidates: state.candidates.map(c => c.code),
      candidateIndex: state.index,
      candidateCode: state.candidates[state.index]?.code ?? '',
      editsCell: edited === undefined ? state.target?.id : null,
      run: this._acceptingToRun
    });
  }

  /** The code a turn holds now: its cells', or the candidate's it shows. */
  private _turnCode(state: ISuggestionState): string {
    // An edit turn's cell holds the candidate only once accepted.
    const placed =
      state.cells.length && (!state.target || state.status === 'accepted');
    return placed
      ? solutionCode(state.cells)
      : (state.candidates[state.index]?.code ??
          this.store.turn(state.turnId)?.code ??
          '');
  }

  private _watchCell(cell: ICellModel): void {
    cell.metadataChanged.connect(this._scheduleSync, this);
  }

  private _onNotebookMetadata(_: unknown, change: { key: string }): void {
    if (change.key === METADATA_KEY) {
      this._changed.emit();
      // A collaborator's choice of candidate arrives in the turn.
      this._scheduleSync();
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

  /** Rebuild suggestions from a (re)opened notebook's tagged cells. */
  private _restoreAll(): void {
    const conversation = this.conversation;
    for (const [turnId, cells] of this._cells.tagged()) {
      if (this._states.has(turnId)) {
        continue;
      }
      const turn = conversation.turns.find(t => t.turn_id === turnId);
      const restored = restoredState(this._cells, turnId, cells, turn);
      this._states.set(turnId, restored);
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
    const tagged = this._cells.tagged();
    const local = this._localEdits.take();
    const turns = this.conversation.turns;
    let changed = false;
    for (const state of [...this._states.values()]) {
      const observed = tagged.get(state.turnId) ?? [];
      const { decision, state: seen } = observe(state, observed);
      // The candidate shown, as whichever client chose it last.
      const next = follow(
        seen,
        turns.find(t => t.turn_id === state.turnId)?.code
      );
      if (next !== state) {
        this._states.set(state.turnId, next);
        changed = true;
      }
      // What a change means (a suggestion deleted is rejected, an accepted
      // cell edited is "edited") is recorded by the client that made it:
      // with real-time collaboration every client sees the change, and the
      // decision must reach the server's store once.
      const ours = touchesTurn(
        local,
        state.cells.map(c => c.id),
        observed.map(c => c.id)
      );
      if (decision && ours) {
        this._writeDecisionQuietly(next, decision);
        changed = true;
      }
      if (ours && this._checkEdited(next, observed)) {
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
    if (this.store.turn(state.turnId)?.status === decision) {
      return;
    }
    this._cells.quietly(() => this._recordDecision(state, decision));
  }

  /**
   * An accepted turn whose cells no longer hold the accepted code is
   * "edited"; the edited code is stored (it is what the user wanted).
   */
  private _checkEdited(
    state: ISuggestionState,
    observed: IObservedCell[]
  ): boolean {
    const turn = this.store.turn(state.turnId);
    const edit =
      state.status === 'accepted' && turn
        ? editedDecision(
            observed,
            turn,
            this._acceptedCode.get(state.turnId) ?? turn.code
          )
        : null;
    if (!edit) {
      return false;
    }
    const { status, code } = edit;
    // A decision like the others (the notebook and the server's store), and
    // the cells' pointers follow; not the user's doing, so not undoable.
    this._cells.quietly(() => {
      this._recordDecision(state, status, code);
      for (const cell of observed) {
        if (cell.status !== status) {
          this._cells.setTag(cell.id, {
            turn_id: state.turnId,
            intent: state.intent,
            status
          });
        }
      }
    });
    return true;
  }

  /** Mark pending suggestion cells; the first one gets the toolbar. */
  private _decorate(): void {
    this._decorations.decorate(
      this.panel.content.widgets,
      this._states,
      id => this._cells.indexOf(id) >= 0
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
      await focusNotebookCell(this.panel.content);
    }
  }

  private _cells: SharedCells;
  private _localEdits: LocalEdits;
  private _states = new Map<string, ISuggestionState>();
  private _acceptedCode = new Map<string, string>();
  private _acceptingToRun = false;
  private _decorations = new SuggestionDecorations(
    (turnId, action) => void this._onBarAction(turnId, action),
    // An outside agent's proposal is labelled with the agent's name.
    turnId =>
      proposalIdOf(turnId) ? (this.store.turn(turnId)?.agent ?? null) : null,
    {
      onAction: (turnId, action) =>
        void this.analysis.onAction(turnId, action, id => this.reject(id)),
      view: turnId => this.analysis.view(turnId)
    }
  );
  private _stateOf = (turnId: string) => this._states.get(turnId);
  private _lastTouched: string[] = [];
  private _changed = new Signal<this, void>(this);
  private _syncTimer = 0;
  private _disposed = false;
}
