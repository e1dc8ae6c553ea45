/**
 * The conversation of one notebook: requests sent from the panel or a cell
 * command, their streamed jobs, and the turns stored in the notebook.
 * The sidebar shows the session of the current notebook.
 */
import { NotebookPanel } from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import {
  IJobView,
  endJob,
  initialJob,
  isFinished,
  preferredIndex,
  reduceJob
} from './events';
import {
  JobStream,
  answerWithoutKernel,
  cancelJob,
  finishJob,
  startTurn
} from './handler';
import { ANALYSIS } from './analysis';
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
  METADATA_VERSION,
  conversationValue,
  newTurnId,
  orderTimeline,
  readCellTag
} from './metadata';
import {
  API_VERSION,
  Limits,
  Strategy,
  intentProblem,
  maxIntentChars
} from './models';
import { SuggestionController } from './notebook';
import { ProposalPoller } from './proposalpoller';
import {
  AgentActivity,
  IPollState,
  Proposal,
  isLeader,
  planProposals,
  proposalCandidate,
  proposalTurnId,
  turnOfProposal
} from './proposals';
import { revealBlock } from './reveal';
import { IAgentSettings, requestStrategy, turnOptions } from './settings';
import { isEditIntent } from './suggestions';
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
}

export class NotebookSession implements IDisposable {
  constructor(
    readonly panel: NotebookPanel,
    private _settings: () => IAgentSettings,
    private _limits: () => Limits = () => null
  ) {
    this.suggestions = new SuggestionController(panel);
    this.suggestions.changed.connect(() => this._changed.emit(), this);
    panel.context.pathChanged.connect(() => {
      this._proposals.reset();
      this._changed.emit();
    }, this);
    this._proposals = new ProposalPoller({
      path: () => this.panel.context.localPath,
      onPoll: (state, changed) => this._onProposals(state, changed)
    });
    this._proposals.start();
  }

  readonly suggestions: SuggestionController;

  /**
   * The strategy picked in this notebook's composer: remembered in the
   * notebook's metadata (next to the turns), else the settings' default.
   */
  get strategy(): Strategy {
    const stored = this.panel.model?.getMetadata(METADATA_KEY) as
      Record<string, unknown> | undefined;
    return typeof stored?.strategy === 'string'
      ? (stored.strategy as Strategy)
      : this._settings().defaultStrategy;
  }

  set strategy(value: Strategy) {
    const model = this.panel.model;
    if (!model || value === this.strategy) {
      return;
    }
    const stored = model.getMetadata(METADATA_KEY);
    model.setMetadata(METADATA_KEY, {
      ...conversationValue(stored, this.suggestions.conversation),
      strategy: value
    });
  }

  /** Intents sent from this notebook, oldest first (composer history). */
  get intentHistory(): string[] {
    return this.timeline()
      .filter(({ turn, proposal }) => !proposal && !turn?.agent)
      .map(({ turn, exchange }) => exchange?.intent ?? turn?.intent ?? '');
  }

  /** What each outside agent did on this notebook (the server's counts). */
  get agentActivity(): readonly AgentActivity[] {
    return this._proposals.state.activity;
  }

  /** Why a pending proposal is not shown in the notebook; null: it is (or can be). */
  proposalBlocked(proposalId: string): string | null {
    return this._blocked.get(proposalId) ?? null;
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
    const stored = this.panel.model?.getMetadata(METADATA_KEY) as
      Record<string, unknown> | undefined;
    return typeof stored?.model === 'string' && stored.model
      ? stored.model
      : null;
  }

  set model(value: string | null) {
    const model = this.panel.model;
    if (!model || value === this.model) {
      return;
    }
    const stored = conversationValue(
      model.getMetadata(METADATA_KEY),
      this.suggestions.conversation
    );
    delete stored.model;
    model.setMetadata(
      METADATA_KEY,
      value ? { ...stored, model: value } : stored
    );
    this._changed.emit();
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
    type Live =
      | { turnId: string | null; created: number; exchange: IExchange }
      | { turnId: string | null; created: number; proposal: Proposal };
    const proposals = this._proposals.state.proposals;
    const byId = new Map(proposals.map(p => [p.id, p]));
    // A pending proposal that cannot be placed is shown with its reason.
    const unplaced: Live[] = proposals
      .filter(p => this._blocked.has(p.id))
      .map(p => ({
        turnId: proposalTurnId(p.id),
        created: p.created * 1000,
        proposal: p
      }));
    const live: Live[] = [
      ...this._exchanges.all.map(e => ({
        turnId: e.turnId,
        created: e.created,
        exchange: e
      })),
      ...unplaced
    ];
    return orderTimeline(this.suggestions.conversation.turns, live).map(
      ({ turn, item }) => ({
        turn,
        exchange: item && 'exchange' in item ? item.exchange : null,
        proposal:
          (item && 'proposal' in item ? item.proposal : null) ??
          (turn?.proposal_id ? (byId.get(turn.proposal_id) ?? null) : null)
      })
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
      this._setJob(exchange.key, job => endJob(job, 'error', problem));
      return;
    }

    const opts = turnOptions(options, settings, limits);
    const stored = model.getMetadata(METADATA_KEY);
    try {
      const { job_id, turn_id } = await startTurn({
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
      this._setJob(exchange.key, job => ({
        ...job,
        jobId: job_id,
        turnId: turn_id ?? null,
        status: 'running',
        message: 'Started'
      }));
      this._follow(exchange.key, job_id);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this._setJob(exchange.key, job => endJob(job, 'error', reason));
      this._recordFailure(exchange.key);
    }
  }

  async stop(): Promise<void> {
    const exchange = this.running;
    if (!exchange) {
      return;
    }
    const key = exchange.key;
    const jobId = exchange.job.jobId;
    if (!jobId) {
      this._setJob(key, job => endJob(job, 'cancelled'));
      this._recordFailure(key);
      return;
    }
    if (exchange.strategy === ANALYSIS && !this._finishing.has(key)) {
      // The analysis ends after the step in progress, with `done` and the
      // verified steps so far: reviewed like a whole one. A second Stop
      // cancels it outright.
      this._finishing.add(key);
      this._setJob(key, job => ({
        ...job,
        message: 'Stopping after the step in progress…'
      }));
      try {
        await finishJob(jobId);
        return;
      } catch (error) {
        // A server without it: stopped as any other turn.
        console.warn('jupyter-data-agent: finish failed', error);
      }
    }
    this._setJob(key, job => ({ ...job, message: 'Stopping…' }));
    try {
      await cancelJob(jobId);
    } catch (error) {
      console.warn('jupyter-data-agent: cancel failed', error);
    }
    // The stream reports the end; if it is already gone, end here.
    window.setTimeout(() => {
      const current = this._exchanges.get(key);
      if (current && !isFinished(current.job)) {
        this._streams.get(key)?.dispose();
        this._setJob(key, job => endJob(job, 'cancelled'));
        this._recordFailure(key);
      }
    }, 5000);
  }

  /** The running turn stops waiting for a busy kernel ("answer now"). */
  async answerFromText(): Promise<void> {
    const exchange = this.running;
    const jobId = exchange?.job.jobId;
    if (!exchange || !jobId || !exchange.job.waitingForKernel) {
      return;
    }
    this._setJob(exchange.key, job => ({
      ...job,
      message: 'Answering from the notebook text…'
    }));
    try {
      await answerWithoutKernel(jobId);
    } catch (error) {
      console.warn('jupyter-data-agent: could not stop waiting', error);
    }
  }

  /**
   * Ask the same question again, with the same strategy, about the same
   * cell; a turn that edited a cell edits it again (while it exists), with
   * the cell as it is now.
   */
  retry(request: IRetryRequest): void {
    const strategy = request.strategy as Strategy;
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
        edit: request.editKind ?? editKindFor(cell, words)
      });
      return;
    }
    const about = request.cellId;
    void this.send({
      intent: request.intent,
      strategy,
      cellId: about && this.cellIndex(about) >= 0 ? about : undefined
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
    if (!indices.length) {
      return false;
    }
    const notebook = this.panel.content;
    const first = indices[0];
    const last = indices[indices.length - 1];
    if (select) {
      notebook.mode = 'command';
      notebook.activeCellIndex = first;
      notebook.deselectAll();
      for (const i of indices) {
        notebook.select(notebook.widgets[i]);
      }
    }
    // The last cell first, then the first (both rendered, in a windowed
    // notebook), then the block: whole when it fits, else from its top,
    // where the bar is.
    void notebook
      .scrollToItem(last, 'smart')
      .then(() => notebook.scrollToItem(first, 'smart'))
      .then(() => {
        const top = notebook.widgets[first]?.node;
        const bottom = notebook.widgets[last]?.node;
        if (top && bottom) {
          revealBlock(notebook.outerNode, top, bottom);
        }
      })
      .catch(() => undefined);
    return true;
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
    const model = this.panel.model;
    if (model) {
      model.setMetadata(
        METADATA_KEY,
        conversationValue(model.getMetadata(METADATA_KEY), {
          version: METADATA_VERSION,
          turns: []
        })
      );
    }
    this._changed.emit();
  }

  /** Show candidate `index` in the panel and, if placed, in the notebook. */
  select(exchange: IExchange, index: number): void {
    const current = this._exchanges.replace(exchange.key, { selected: index });
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
    const current = this._exchanges.get(exchange.key);
    if (!current?.turnId || !current.job.candidates.length) {
      return false;
    }
    const turnId = current.turnId;
    this._exchanges.replace(current.key, { selected: index });
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
    for (const stream of this._streams.values()) {
      stream.dispose();
    }
    this._streams.clear();
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

  private _follow(key: string, jobId: string): void {
    const stream = new JobStream({
      jobId,
      onEvent: event => {
        const before = this._exchanges.get(key)?.job.status;
        const after = this._setJob(key, job => reduceJob(job, event));
        if (before !== 'done' && after?.job.status === 'done') {
          this._finish(key);
        }
      },
      onEnd: (status, reason) => {
        this._setJob(key, job => endJob(job, status, reason));
        this._streams.delete(key);
        this._recordFailure(key);
      }
    });
    this._streams.set(key, stream);
    stream.start();
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

  /**
   * A stopped or failed request is stored too, so it keeps its place in
   * the conversation and its reason after a reload. One refused before it
   * was sent (an intent too long) is not: it never became a turn.
   */
  private _recordFailure(key: string): void {
    const current = this._exchanges.get(key);
    const job = current?.job;
    if (
      !current ||
      !job ||
      (job.status !== 'error' && job.status !== 'cancelled') ||
      current.turnId ||
      this.panel.isDisposed ||
      !this.panel.model
    ) {
      return;
    }
    const exchange = this._exchanges.replace(key, {
      turnId: job.turnId ?? newTurnId(current.created)
    })!;
    this.suggestions.recordTurn(turnOfExchange(exchange));
    this._changed.emit();
  }

  /** A new job view for an exchange; nothing happens when it did not change. */
  private _setJob(
    key: string,
    update: (job: IJobView) => IJobView
  ): IExchange | null {
    const current = this._exchanges.get(key);
    if (!current) {
      return null;
    }
    const job = update(current.job);
    if (job === current.job) {
      return current;
    }
    const next = this._exchanges.replace(key, { job });
    this._changed.emit();
    return next;
  }

  /**
   * After each answer of the proposals poll: place the pending proposals
   * not in the notebook yet (once: their tag or stored turn says they are),
   * and note those that cannot be placed.
   */
  private _onProposals(state: IPollState, changed: boolean): void {
    const model = this.panel.model;
    if (this._disposed || !model) {
      return;
    }
    const now = Date.now();
    for (const p of state.proposals) {
      if (!this._firstSeen.has(p.id)) {
        this._firstSeen.set(p.id, now);
      }
    }
    const cells = model.sharedModel.cells;
    const awareness = (
      model.sharedModel as unknown as {
        awareness?: { clientID: number; getStates(): Map<number, unknown> };
      }
    ).awareness;
    const plan = planProposals(state.proposals, {
      hasTurn: id => !!this.suggestions.store.turn(id),
      hasTaggedCell: id => this.suggestions.hasTaggedCells(id),
      cellType: id => cells.find(c => c.getId() === id)?.cell_type ?? null,
      leader: isLeader(
        awareness?.clientID,
        awareness?.getStates().keys() ?? []
      ),
      firstSeen: this._firstSeen,
      now
    });
    for (const proposal of plan.place) {
      this._placeProposal(proposal);
    }
    const blockedBefore = [...this._blocked.entries()].join('|');
    this._blocked = plan.blocked;
    if (
      changed ||
      plan.place.length ||
      blockedBefore !== [...plan.blocked.entries()].join('|')
    ) {
      this._changed.emit();
    }
  }

  /** A proposal as a suggestion: below its cell (else last), or over the cell it edits. */
  private _placeProposal(proposal: Proposal): void {
    const cells = this.panel.model?.sharedModel.cells ?? [];
    const after =
      proposal.after_cell_id && this.cellIndex(proposal.after_cell_id) >= 0
        ? proposal.after_cell_id
        : (cells[cells.length - 1]?.getId() ?? null);
    const turn = turnOfProposal(proposal);
    this.suggestions.recordTurn(turn);
    this.suggestions.insert({
      turnId: turn.turn_id,
      intent: turn.intent,
      candidates: [proposalCandidate(proposal)],
      index: 0,
      mode: 'single',
      anchorCellId: after,
      replaceCellId: proposal.kind === 'edit' ? proposal.cell_id : null
    });
  }

  private _proposals: ProposalPoller;
  private _firstSeen = new Map<string, number>();
  private _blocked = new Map<string, string>();
  private _exchanges = new ExchangeList();
  private _streams = new Map<string, JobStream>();
  /** Analyses asked to finish after their step (a second Stop cancels). */
  private _finishing = new Set<string>();
  private _pinned: string | null = null;
  private _changed = new Signal<this, void>(this);
  private _disposed = false;
}
