/**
 * The conversation of one notebook: requests sent from the panel or a cell
 * command, their streamed jobs, and the turns stored in the notebook.
 * The sidebar shows the session of the current notebook.
 */
import { NotebookPanel } from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { endJob, initialJob, isFinished, preferredIndex } from './events';
import { ExchangeJobs } from './exchangejobs';
import {
  EditKind,
  IEditedCell,
  cellEdit,
  editKindFor,
  editQuestion
} from './celledit';
import {
  ExchangeList,
  IExchange,
  IRetryRequest,
  toSuggestionCandidate,
  turnOfExchange
} from './exchange';
import {
  ITurn,
  METADATA_KEY,
  newTurnId,
  orderTimeline,
  readCellTag,
  storeChoice,
  storedChoice
} from './metadata';
import {
  API_VERSION,
  Limits,
  Strategy,
  intentProblem,
  maxIntentChars
} from './models';
import { SuggestionController } from './notebook';
import { ProposalPlacement } from './proposalplacement';
import { AgentActivity, Proposal, proposalTurnId } from './proposals';
import { showCells } from './reveal';
import { IAgentSettings, requestStrategy, turnOptions } from './settings';
import { isEditIntent } from './suggestions';
import { IOutsideTurn, OutsideTurns, ownTurns } from './turnlist';
import type { NotebookCell } from './wire';

export type { IExchange, IRetryRequest } from './exchange';
export { toSuggestionCandidate } from './exchange';

export type { IAgentSettings } from './settings';
export { DEFAULT_SETTINGS } from './settings';

export interface ISendOptions {
  /** The user's words; may be empty for a Fix or Improve (`edit`). */
  intent: string;
  strategy?: Strategy;
  /** The cell the request is about; the active cell when absent. */
  cellId?: string | null;
  samples?: number | null;
  budget?: number | null;
  autoInsert?: boolean;
  /**
   * Fix or Improve the cell: sent as a typed edit (the cell, its error or
   * output, `intent` as the user's instruction), and the suggestion
   * replaces that cell. When absent: a pinned code cell with an edit intent
   * ("rewrite …") is an edit too.
   */
  edit?: EditKind;
  /** Wait for the kernel's running cell, start from its state (`fresh_state`). */
  freshState?: boolean;
}

let exchangeCounter = 0;

/** One entry of the conversation, in order. */
export interface ITimelineEntry {
  /** The turn stored in the notebook; null: not stored (yet). */
  turn: ITurn | null;
  /** The panel's live request for it, if any. */
  exchange: IExchange | null;
  /** The outside agent's proposal it shows, as the server has it now. */
  proposal: Proposal | null;
  /** A turn on this notebook started elsewhere (`%%agent`, MCP, ACP, another tab). */
  outside: IOutsideTurn | null;
}

export class NotebookSession implements IDisposable {
  constructor(
    readonly panel: NotebookPanel,
    private _settings: () => IAgentSettings,
    private _limits: () => Limits = () => null
  ) {
    this.suggestions = new SuggestionController(panel);
    this.suggestions.changed.connect(() => this._changed.emit(), this);
    this._proposals = new ProposalPlacement(panel, this.suggestions, () =>
      this._changed.emit()
    );
    this._outside = new OutsideTurns({
      path: () => this.panel.context.localPath,
      onChange: () => this._changed.emit()
    });
    panel.context.pathChanged.connect(() => {
      this._proposals.reset();
      this._outside.reset();
      this._changed.emit();
    }, this);
  }

  readonly suggestions: SuggestionController;

  /**
   * The strategy picked in this notebook's composer: remembered in the
   * notebook's metadata (next to the turns), else the settings' default.
   */
  get strategy(): Strategy {
    return (
      (storedChoice(this.panel.model, 'strategy') as Strategy | null) ??
      this._settings().defaultStrategy
    );
  }

  set strategy(value: Strategy) {
    const model = this.panel.model;
    if (model && value !== this.strategy) {
      storeChoice(model, this.suggestions.conversation, 'strategy', value);
    }
  }

  /** Intents sent from this notebook, oldest first (composer history). */
  get intentHistory(): string[] {
    return this.timeline()
      .filter(
        ({ turn, proposal, outside }) => !proposal && !outside && !turn?.agent
      )
      .map(({ turn, exchange }) => exchange?.intent ?? turn?.intent ?? '');
  }

  /** What each outside agent did on this notebook (the server's counts). */
  get agentActivity(): readonly AgentActivity[] {
    return this._proposals.activity;
  }

  /** Why a pending proposal is not shown in the notebook; null: it is (or can be). */
  proposalBlocked(proposalId: string): string | null {
    return this._proposals.blocked(proposalId);
  }

  /**
   * Ask the server again for this notebook's turns from every source: when
   * the sidebar shows this notebook, and after each turn ends.
   */
  refreshTurns(): Promise<void> {
    return this._outside.refresh();
  }

  /** Load a turn started elsewhere and show its result (or hide it again). */
  openOutsideTurn(jobId: string, open = true): Promise<void> {
    if (!open) {
      this._outside.close(jobId);
      return Promise.resolve();
    }
    return this._outside.open(jobId);
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  get exchanges(): readonly IExchange[] {
    return this._exchanges.all;
  }

  get running(): IExchange | null {
    return this._exchanges.all.find(e => !isFinished(e.job)) ?? null;
  }

  /**
   * The model picked in the composer (one of the server's `models`); null:
   * the server's configured model. Remembered in the notebook's metadata,
   * as the strategy is, so it is kept over a reload.
   */
  get model(): string | null {
    return storedChoice(this.panel.model, 'model') || null;
  }

  set model(value: string | null) {
    const model = this.panel.model;
    if (model && value !== this.model) {
      storeChoice(model, this.suggestions.conversation, 'model', value);
      this._changed.emit();
    }
  }

  /** The cell a panel question is pinned to ("Ask about this cell"). */
  get pinnedCellId(): string | null {
    return this._pinned;
  }

  set pinnedCellId(id: string | null) {
    this._pinned = id;
    this._changed.emit();
  }

  /**
   * Stored turns in order, each with its live exchange where there is one;
   * requests not stored (yet) in the place of the time they were asked.
   */
  timeline(): ITimelineEntry[] {
    type Live = { turnId: string | null; created: number } & (
      | { exchange: IExchange }
      | { proposal: Proposal }
      | { outside: IOutsideTurn }
    );
    const proposals = this._proposals.proposals;
    const byId = new Map(proposals.map(p => [p.id, p]));
    // A pending proposal that cannot be placed is shown with its reason.
    const unplaced: Live[] = proposals
      .filter(p => this._proposals.blocked(p.id) !== null)
      .map(p => ({
        turnId: proposalTurnId(p.id),
        created: p.created * 1000,
        proposal: p
      }));
    const outside: Live[] = this._outside
      .visible(
        ownTurns(
          this.suggestions.conversation.turns,
          this._exchanges.all,
          this.suggestions.store.cleared
        )
      )
      .map(t => ({
        turnId: t.summary.turn_id,
        created: t.summary.started * 1000,
        outside: t
      }));
    const live: Live[] = [
      ...this._exchanges.all.map(e => ({
        turnId: e.turnId,
        created: e.created,
        exchange: e
      })),
      ...unplaced,
      ...outside
    ];
    return orderTimeline(this.suggestions.conversation.turns, live).map(
      ({ turn, item }) => {
        const other = item && 'outside' in item ? item.outside : null;
        return {
          turn,
          exchange:
            item && 'exchange' in item
              ? item.exchange
              : other?.replay.kind === 'shown'
                ? other.replay.exchange
                : null,
          proposal:
            (item && 'proposal' in item ? item.proposal : null) ??
            (turn?.proposal_id ? (byId.get(turn.proposal_id) ?? null) : null),
          outside: other
        };
      }
    );
  }

  cellIndex(cellId: string | null): number {
    if (!cellId) {
      return -1;
    }
    const cells = this.panel.model?.sharedModel.cells ?? [];
    return cells.findIndex(c => c.getId() === cellId);
  }

  /** A cell of the notebook as nbformat JSON (unsaved edits included). */
  private _cellJSON(cellId: string | null): IEditedCell | null {
    const index = this.cellIndex(cellId);
    if (index < 0) {
      return null;
    }
    const json = this.panel.model!.sharedModel.cells[index].toJSON();
    return { ...(json as IEditedCell), id: cellId };
  }

  async send(options: ISendOptions): Promise<void> {
    const words = options.intent.trim();
    if (this.running || (!words && !options.edit)) {
      return;
    }
    const settings = this._settings();
    const limits = this._limits();
    const model = this.panel.model!;
    const notebook = this.panel.content;
    const strategy = requestStrategy(options, this.strategy, settings);
    const cellId =
      options.cellId ?? this._pinned ?? notebook.activeCell?.model.id ?? null;
    let activeIndex = this.cellIndex(cellId);
    // Only a code cell is edited in place; a request about another asks in words.
    const cell = this._cellJSON(cellId);
    const editable = cell?.cell_type === 'code' ? cell : null;
    const editKind: EditKind | null = !editable
      ? null
      : (options.edit ??
        (!!this._pinned && cellId === this._pinned && isEditIntent(words)
          ? editKindFor(editable, words)
          : null));
    if (!words && !editKind) {
      return;
    }
    const intent = editKind
      ? editQuestion(editKind, activeIndex, words)
      : words;
    if (activeIndex < 0) {
      activeIndex = Math.max(0, notebook.activeCellIndex);
    }
    const exchange: IExchange = {
      key: `x${++exchangeCounter}`,
      intent,
      strategy,
      job: initialJob(),
      turnId: null,
      anchorCellId: cellId,
      editCellId: editKind ? cellId : null,
      editKind,
      instruction: editKind ? words : '',
      selected: 0,
      autoInsert: options.autoInsert ?? settings.autoInsert,
      created: Date.now()
    };
    this._exchanges.add(exchange);
    this._pinned = null;
    this._changed.emit();
    const problem = intentProblem(words, maxIntentChars(limits));
    if (problem) {
      // Refused here, in words, rather than by the server.
      this._jobs.setJob(exchange.key, job => endJob(job, 'error', problem));
      return;
    }

    const opts = turnOptions(options, settings, limits);
    const stored = model.getMetadata(METADATA_KEY);
    await this._jobs.start(exchange.key, {
      version: API_VERSION,
      notebook_path: this.panel.context.path,
      // Unsaved edits, outputs, ids and cell metadata (prior turns) included.
      cells: model.sharedModel.toJSON().cells as NotebookCell[],
      active_index: activeIndex,
      kernel_id: this.panel.sessionContext.session?.kernel?.id ?? null,
      // An edit says what to do in its typed fields; the words go with it.
      intent: editKind ? '' : words,
      strategy,
      options: opts,
      ...(this.model ? { model: this.model } : {}),
      // The answer replaces that cell: the model rewrites it in full.
      ...(editKind && editable
        ? { edit: cellEdit(editable, editKind, words) }
        : {}),
      ...(stored ? { metadata: { [METADATA_KEY]: stored } } : {})
    });
  }

  /** Stop the running request (an analysis: after its step, then outright). */
  async stop(): Promise<void> {
    if (this.running) {
      await this._jobs.stop(this.running);
    }
  }

  /** The running turn stops waiting for a busy kernel ("answer now"). */
  async answerFromText(): Promise<void> {
    if (this.running) {
      await this._jobs.answerFromText(this.running);
    }
  }

  /**
   * Ask the same question again, with the same strategy, about the same
   * cell; a turn that edited a cell edits it again (while it exists), with
   * the cell as it is now. `freshState`: after the cell running in the
   * kernel ends, from the state it leaves.
   */
  retry(request: IRetryRequest): void {
    const strategy = request.strategy as Strategy;
    const freshState = request.freshState || undefined;
    const editCellId = request.editCellId ?? null;
    const cell = this._cellJSON(editCellId);
    if (editCellId && cell?.cell_type === 'code') {
      // A turn stored without its kind: the question was the instruction.
      const words = request.editKind
        ? (request.instruction ?? '')
        : request.intent;
      void this.send({
        intent: words,
        strategy,
        cellId: editCellId,
        edit: request.editKind ?? editKindFor(cell, words),
        freshState
      });
      return;
    }
    const about = request.cellId;
    void this.send({
      intent: request.intent,
      strategy,
      cellId: about && this.cellIndex(about) >= 0 ? about : undefined,
      freshState
    });
  }

  /** The notebook's cells that hold a turn's code (suggested or decided). */
  turnCellIds(turnId: string): string[] {
    const state = this.suggestions.suggestion(turnId);
    const ids = state?.cells.length
      ? state.cells.map(c => c.id)
      : (this.suggestions.conversation.turns.find(t => t.turn_id === turnId)
          ?.cell_ids ?? []);
    return ids.filter(id => this.cellIndex(id) >= 0);
  }

  /**
   * Scroll the notebook to a turn's cells; `select` also makes them the
   * active cell and selection (the "Show in notebook" link).
   */
  showInNotebook(turnId: string, select = true): boolean {
    const indices = this.turnCellIds(turnId)
      .map(id => this.cellIndex(id))
      .sort((a, b) => a - b);
    if (indices.length) {
      showCells(this.panel.content, indices, select);
    }
    return indices.length > 0;
  }

  /**
   * Forget this notebook's conversation: the panel's requests and the turns
   * stored in the notebook. Pending suggestions are rejected (their cells
   * go); accepted cells stay, with their pointer to a turn now gone.
   */
  clearConversation(): void {
    if (this.running) {
      return;
    }
    for (const turnId of this.suggestions.pendingTurns) {
      this.suggestions.reject(turnId);
    }
    this._exchanges.clear();
    this.suggestions.store.clear(this._outside.clearTime());
    this._changed.emit();
  }

  /** Show candidate `index` in the panel and, if placed, in the notebook. */
  select(exchange: IExchange, index: number): void {
    const current = this._replaceExchange(exchange.key, { selected: index });
    if (
      current?.turnId &&
      this.suggestions.suggestion(current.turnId)?.status === 'suggested'
    ) {
      this.suggestions.select(current.turnId, index);
    }
    this._changed.emit();
  }

  /** Place candidate `index` of an exchange as a suggestion below its cell. */
  insert(
    exchange: IExchange,
    index: number,
    anchorCellId?: string | null
  ): boolean {
    const current =
      this._exchanges.get(exchange.key) ?? this._outside.exchange(exchange.key);
    if (!current?.turnId || !current.job.candidates.length) {
      return false;
    }
    const turnId = current.turnId;
    const chosen = this._replaceExchange(current.key, { selected: index })!;
    if (!this.suggestions.store.turn(turnId)) {
      // A turn started elsewhere is kept in the notebook once inserted.
      this.suggestions.recordTurn(turnOfExchange(chosen));
    }
    const ok = this.suggestions.insert({
      turnId,
      intent: current.intent,
      candidates: current.job.candidates.map(toSuggestionCandidate),
      index,
      mode: this._settings().insertMode,
      anchorCellId:
        anchorCellId === undefined ? this._activeCellId() : anchorCellId,
      replaceCellId: current.editCellId
    });
    if (ok && this.suggestions.suggestion(turnId)?.status === 'suggested') {
      // In a long notebook the suggestion may land out of sight: bring it
      // into view, without taking the keyboard from where it is.
      requestAnimationFrame(() => this.showInNotebook(turnId, false));
    }
    this._changed.emit();
    return ok;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._proposals.dispose();
    this._outside.dispose();
    this._jobs.dispose();
    this.suggestions.dispose();
    Signal.clearData(this);
  }

  private _activeCellId(): string | null {
    const active = this.panel.content.activeCell;
    if (!active) {
      return null;
    }
    // Below a pending suggestion, not inside it.
    const tag = readCellTag(active.model.metadata);
    const state = tag ? this.suggestions.suggestion(tag.turn_id) : null;
    if (state?.status === 'suggested' && state.cells.length) {
      return state.cells[state.cells.length - 1].id;
    }
    return active.model.id;
  }

  /** The job is done: store the turn, and offer the preferred candidate. */
  private _finish(key: string): void {
    const done = this._exchanges.get(key);
    if (!done) {
      return;
    }
    const job = done.job;
    const exchange = this._exchanges.replace(key, {
      turnId: job.turnId ?? newTurnId(),
      selected: preferredIndex(job)
    })!;
    if (
      this.panel.isDisposed ||
      (!job.candidates.length && !job.result?.answer)
    ) {
      this._changed.emit();
      return;
    }
    // An answer in words is stored too: it comes back after a reload.
    this.suggestions.recordTurn(turnOfExchange(exchange));
    if (!job.candidates.length) {
      this._changed.emit();
      return;
    }
    if (exchange.autoInsert) {
      const anchor =
        this.cellIndex(exchange.anchorCellId) >= 0
          ? exchange.anchorCellId
          : undefined;
      this.insert(exchange, exchange.selected, anchor);
    }
    this._changed.emit();
  }

  /** An exchange of the panel's or a replayed one, replaced by a changed copy. */
  private _replaceExchange(
    key: string,
    patch: Partial<Omit<IExchange, 'key'>>
  ): IExchange | null {
    return (
      this._exchanges.replace(key, patch) ?? this._outside.replace(key, patch)
    );
  }

  private _proposals: ProposalPlacement;
  private _outside: OutsideTurns;
  private _exchanges = new ExchangeList();
  private _jobs = new ExchangeJobs(this._exchanges, {
    changed: () => this._changed.emit(),
    done: key => this._finish(key),
    store: exchange => {
      this.suggestions.recordTurn(turnOfExchange(exchange));
      this._changed.emit();
    },
    canStore: () => !this.panel.isDisposed && !!this.panel.model,
    // Turns started elsewhere meanwhile show up after each of ours.
    ended: () => void this.refreshTurns()
  });
  private _pinned: string | null = null;
  private _changed = new Signal<this, void>(this);
  private _disposed = false;
}
