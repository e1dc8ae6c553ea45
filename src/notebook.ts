/**
 * The thin adapter between the suggestion state machine (suggestions.ts)
 * and a NotebookPanel: runs its transitions, applies their cell changes
 * through the Yjs adapter (ynotebook.ts), records decisions through the
 * conversation store (conversation.ts), marks suggestion cells and gives
 * them their toolbar (suggestionbar.ts) and diff, and reconciles with
 * changes made by the notebook's own undo or by the user.
 */
import { Notification } from '@jupyterlab/apputils';
import { ICellModel } from '@jupyterlab/cells';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { ExistingCells, restoredSteps, stepDecisions } from './analysis';
import { AnalysisAction } from './analysisbar';
import {
  acceptUpTo,
  dropStep,
  editedFrom,
  isAnalysis,
  originalAnalysis,
  replaceFrom,
  withStepEdits
} from './analysisreview';
import { ConversationStore } from './conversation';
import { runWarning } from './exchange';
import { rerunAnalysis } from './handler';
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
  restore,
  defaultIdFactory,
  select,
  solutionCode,
  undo
} from './suggestions';
import { LocalEdits, SharedCells, touchesTurn } from './ynotebook';

export { SUGGESTION_CLASS } from './suggestionbar';
export type { SuggestionAction } from './suggestionbar';

/** A shared cell's outputs and execution count, as nbformat has them. */
function outputsOf(cell: { toJSON(): unknown }): {
  outputs: Record<string, unknown>[];
  executionCount: number | null;
} {
  const json = cell.toJSON() as {
    outputs?: Record<string, unknown>[];
    execution_count?: number | null;
  };
  return {
    outputs: json.outputs ?? [],
    executionCount: json.execution_count ?? null
  };
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
      into: target ? null : this._emptyCell(anchor.afterId)
    });
    return this._run(result);
  }

  /**
   * The anchor cell when it is an empty code cell (no source, no outputs,
   * no turn's tag): the new cell the user asked from, which the
   * suggestion takes rather than leaving it empty above.
   */
  private _emptyCell(id: string | null): string | null {
    const index = id ? this._cells.indexOf(id) : -1;
    const cell = index >= 0 ? this._cells.cells[index] : null;
    if (
      !cell ||
      cell.cell_type !== 'code' ||
      cell.getSource().trim() ||
      readCellTag(cell.metadata as Record<string, unknown>)
    ) {
      return null;
    }
    return outputsOf(cell).outputs.length ? null : cell.getId();
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
    const index = cellId ? this._cells.indexOf(cellId) : -1;
    if (index < 0) {
      return null;
    }
    const cell = this._cells.cells[index];
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
      tag: readCellTag(cell.metadata as Record<string, unknown>),
      ...outputsOf(cell)
    };
  }

  /** An edit's target with the outputs its cell shows now. */
  private _withOutputs(target: IReplaceTarget): IReplaceTarget {
    const index = this._cells.indexOf(target.id);
    return index < 0
      ? target
      : { ...target, ...outputsOf(this._cells.cells[index]) };
  }

  /**
   * The existing code cells an analysis may edit, as they are now; not
   * another turn's pending suggestion (it is not edited under it).
   */
  private _existing(turnId: string): ExistingCells {
    return id => {
      const index = this._cells.indexOf(id);
      const cell = index >= 0 ? this._cells.cells[index] : null;
      if (!cell || cell.cell_type !== 'code') {
        return null;
      }
      const tag = readCellTag(cell.metadata as Record<string, unknown>);
      const owner =
        tag && tag.turn_id !== turnId ? this._states.get(tag.turn_id) : null;
      if (owner?.status === 'suggested') {
        return null;
      }
      return { original: cell.getSource(), tag };
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
    if (isAnalysis(state)) {
      return this._run(acceptUpTo(state, null, this._sources(state)));
    }
    // What the cell shows now (it may have run since) is what undo puts back.
    const current = state.target
      ? { ...state, target: this._withOutputs(state.target) }
      : state;
    return this._run(accept(current, this._sources(state)));
  }

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
    const state = this._states.get(turnId);
    if (!state || !isAnalysis(state)) {
      return false;
    }
    this._acceptingToRun = run;
    let ok: boolean;
    try {
      ok = this._run(acceptUpTo(state, upTo, this._sources(state)));
    } finally {
      this._acceptingToRun = false;
    }
    if (!ok || !run) {
      return ok;
    }
    const accepted = this._states.get(turnId);
    return this._runInOrder(
      accepted?.status === 'accepted' ? accepted.cells.map(c => c.id) : []
    );
  }

  /** Drop one step of a pending analysis. */
  dropStep(turnId: string, step: number): boolean {
    const state = this._states.get(turnId);
    return state
      ? this._run(dropStep(state, step, this._sources(state)))
      : false;
  }

  /**
   * The steps after the first edited one run again in copies (the
   * server's analysis endpoint); their cells are replaced. An expired
   * turn is said in words, and the user's edit stays.
   */
  async rerunAnalysis(turnId: string): Promise<boolean> {
    const state = this._states.get(turnId);
    if (!state || state.status !== 'suggested' || this._rerunning.has(turnId)) {
      return false;
    }
    const edited = editedFrom(state, this._sources(state));
    if (!edited) {
      return false;
    }
    this._rerunning.add(turnId);
    this._decorate();
    try {
      const reply = await rerunAnalysis(turnId, {
        version: 1,
        from_step: edited.fromStep,
        steps: edited.steps
      });
      const now = this._states.get(turnId);
      if (!now || now.status !== 'suggested') {
        return false;
      }
      return this._run(
        replaceFrom(
          now,
          edited.fromStep,
          reply.steps,
          defaultIdFactory,
          this._sources(now),
          this._existing(turnId)
        )
      );
    } catch (error) {
      const status =
        error instanceof ServerConnection.ResponseError
          ? error.response.status
          : 0;
      Notification.warning(
        status === 409
          ? 'The kernel copies of this analysis expired; re-ask. Your edit is kept.'
          : status === 404
            ? 'The server no longer knows this analysis; re-ask. Your edit is kept.'
            : `The later steps could not be re-run: ${error instanceof Error ? error.message : String(error)}`,
        { autoClose: 8000 }
      );
      return false;
    } finally {
      this._rerunning.delete(turnId);
      this._decorate();
    }
  }

  /** Run these cells one by one in the live kernel; stop at the first failure. */
  private async _runInOrder(ids: readonly string[]): Promise<boolean> {
    const notebook = this.panel.content;
    for (const id of ids) {
      const index = this._cells.indexOf(id);
      if (index < 0) {
        continue;
      }
      notebook.activeCellIndex = index;
      notebook.deselectAll();
      if (!(await NotebookActions.run(notebook, this.panel.sessionContext))) {
        return false;
      }
    }
    return true;
  }

  async acceptAndRun(turnId: string | null): Promise<boolean> {
    if (turnId && isAnalysis(this._states.get(turnId) ?? null)) {
      return this.acceptSteps(turnId, null, true);
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
      // Back to the cell the suggestion hung from, as before the insert
      // (the empty cell it took, given back).
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

  private _candidatesOf(turn: ITurn | undefined): ISuggestionCandidate[] {
    return (turn?.candidates ?? []).map((code, i) => {
      const warning = runWarning(turn?.runs?.[i] ?? null);
      return {
        code,
        explanation: turn?.explanations?.[i] ?? '',
        steps: [],
        ...(warning ? { warning } : {}),
        // An analysis has one candidate: its steps come back with it.
        ...(i === 0 && turn?.analysis?.length
          ? { analysis: restoredSteps(turn.analysis) }
          : {})
      };
    });
  }

  /** Rebuild suggestions from a (re)opened notebook's tagged cells. */
  private _restoreAll(): void {
    const conversation = this.conversation;
    for (const [turnId, cells] of this._cells.tagged()) {
      if (this._states.has(turnId)) {
        continue;
      }
      const turn = conversation.turns.find(t => t.turn_id === turnId);
      const first = this._cells.indexOf(cells[0].id);
      // An edit turn's own cell: its source now is what a reject keeps.
      const edited =
        turn?.edits_cell &&
        cells.length === 1 &&
        cells[0].id === turn.edits_cell
          ? cells[0]
          : null;
      const restored = restore({
        turnId,
        intent: turn?.intent ?? cells[0].source,
        candidates: this._candidatesOf(turn),
        mode: cells.length > 1 ? 'perStep' : 'single',
        cells,
        anchor: this._cells.anchorAt(first),
        target: edited
          ? this._withOutputs({
              id: edited.id,
              original: edited.source,
              tag: null
            })
          : null,
        code: turn?.code
      });
      this._states.set(turnId, withStepEdits(restored));
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
    if (state.status !== 'accepted' || !observed.length) {
      return false;
    }
    const turn = this.store.turn(state.turnId);
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
      this.panel.content.mode = 'command';
      this.panel.content.activeCell?.node.focus();
    }
  }

  private _cells: SharedCells;
  private _localEdits: LocalEdits;
  private _states = new Map<string, ISuggestionState>();
  private _acceptedCode = new Map<string, string>();
  private _acceptingToRun = false;
  private _rerunning = new Set<string>();
  private _decorations = new SuggestionDecorations(
    (turnId, action) => void this._onBarAction(turnId, action),
    // An outside agent's proposal is labelled with the agent's name.
    turnId =>
      proposalIdOf(turnId) ? (this.store.turn(turnId)?.agent ?? null) : null,
    {
      onAction: (turnId, action) => void this._onAnalysisAction(turnId, action),
      view: turnId => {
        const state = this._states.get(turnId);
        const edited = state ? editedFrom(state, this._sources(state)) : null;
        return {
          editedStep: edited?.fromStep ?? null,
          rerunning: this._rerunning.has(turnId)
        };
      }
    }
  );

  private async _onAnalysisAction(
    turnId: string,
    action: AnalysisAction
  ): Promise<void> {
    switch (action.kind) {
      case 'accept':
        await this.acceptSteps(turnId, action.upTo, action.run);
        break;
      case 'drop':
        this.dropStep(turnId, action.step);
        return;
      case 'reject':
        this.reject(turnId);
        break;
      case 'rerun':
        await this.rerunAnalysis(turnId);
        return;
    }
    this.panel.content.mode = 'command';
    this.panel.content.activeCell?.node.focus();
  }
  private _lastTouched: string[] = [];
  private _changed = new Signal<this, void>(this);
  private _syncTimer = 0;
  private _disposed = false;
}
