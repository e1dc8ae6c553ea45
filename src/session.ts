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
  startTurn
} from './handler';
import {
  ITurn,
  METADATA_KEY,
  METADATA_VERSION,
  boundPreviews,
  conversationValue,
  newTurnId,
  nowSeconds,
  orderTimeline,
  readCellTag
} from './metadata';
import { API_VERSION, Strategy, intentProblem, previewOutputs } from './models';
import type { Candidate, NotebookCell, TurnOptions } from './wire';
import { SuggestionController } from './notebook';
import { ISuggestionCandidate, InsertMode, isEditIntent } from './suggestions';

export interface IAgentSettings {
  defaultStrategy: Strategy;
  /** null: the server's default for the strategy (its catalog says which). */
  samples: number | null;
  budget: number | null;
  insertMode: InsertMode;
  autoInsert: boolean;
  temperature: number | null;
}

export const DEFAULT_SETTINGS: IAgentSettings = {
  defaultStrategy: 'direct',
  samples: null,
  budget: null,
  insertMode: 'single',
  autoInsert: true,
  temperature: null
};

/** One request and what came back, as the panel shows it. */
export interface IExchange {
  key: string;
  intent: string;
  strategy: Strategy;
  job: IJobView;
  /** The turn id once the job is done (server's, or made here). */
  turnId: string | null;
  /** The cell the question was about: suggestions go below it. */
  anchorCellId: string | null;
  /** The cell this request edits: its suggestion replaces it (as a diff). */
  editCellId: string | null;
  /** Candidate shown in the panel. */
  selected: number;
  autoInsert: boolean;
  created: number;
}

export interface ISendOptions {
  intent: string;
  strategy?: Strategy;
  /** The cell the request is about; the active cell when absent. */
  cellId?: string | null;
  samples?: number | null;
  budget?: number | null;
  autoInsert?: boolean;
  /**
   * The request edits its cell ("fix", "improve"): the suggestion replaces
   * that cell. When absent: a pinned cell with an edit intent ("rewrite …").
   */
  editCell?: boolean;
}

export function toSuggestionCandidate(
  candidate: Candidate
): ISuggestionCandidate {
  return {
    code: candidate.code,
    explanation: candidate.explanation,
    steps: candidate.steps.map(s => ({ ...s }))
  };
}

let exchangeCounter = 0;

export class NotebookSession implements IDisposable {
  constructor(
    readonly panel: NotebookPanel,
    private _settings: () => IAgentSettings
  ) {
    this.suggestions = new SuggestionController(panel);
    this.suggestions.changed.connect(() => this._changed.emit(), this);
    panel.context.pathChanged.connect(() => this._changed.emit(), this);
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
    return this.timeline().map(
      ({ turn, exchange }) => exchange?.intent ?? turn?.intent ?? ''
    );
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  get exchanges(): readonly IExchange[] {
    return this._exchanges;
  }

  get running(): IExchange | null {
    return this._exchanges.find(e => !isFinished(e.job)) ?? null;
  }

  /**
   * The model picked in the composer (one of the server's `models`); null:
   * the server's configured model.
   */
  model: string | null = null;

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
  timeline(): { turn: ITurn | null; exchange: IExchange | null }[] {
    return orderTimeline(
      this.suggestions.conversation.turns,
      this._exchanges
    ).map(({ turn, item }) => ({ turn, exchange: item }));
  }

  cellIndex(cellId: string | null): number {
    if (!cellId) {
      return -1;
    }
    const cells = this.panel.model?.sharedModel.cells ?? [];
    return cells.findIndex(c => c.getId() === cellId);
  }

  async send(options: ISendOptions): Promise<void> {
    const intent = options.intent.trim();
    if (!intent || this.running) {
      return;
    }
    const settings = this._settings();
    const model = this.panel.model!;
    const notebook = this.panel.content;
    const strategy = options.strategy ?? this.strategy;
    const cellId =
      options.cellId ?? this._pinned ?? notebook.activeCell?.model.id ?? null;
    let activeIndex = this.cellIndex(cellId);
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
      editCellId:
        (options.editCell ??
        (!!this._pinned && cellId === this._pinned && isEditIntent(intent)))
          ? cellId
          : null,
      selected: 0,
      autoInsert: options.autoInsert ?? settings.autoInsert,
      created: Date.now()
    };
    this._exchanges.push(exchange);
    this._pinned = null;
    this._changed.emit();
    const problem = intentProblem(intent);
    if (problem) {
      // Refused here, in words, rather than by the server.
      this._update(exchange, endJob(exchange.job, 'error', problem));
      return;
    }

    // Knobs left unset take the server's default for the strategy; the
    // server ignores a knob the strategy does not have.
    const opts: TurnOptions = {};
    const samples = options.samples ?? settings.samples;
    const budget = options.budget ?? settings.budget;
    if (samples !== null) {
      opts.samples = samples;
    }
    if (budget !== null) {
      opts.budget = budget;
    }
    if (settings.temperature !== null) {
      opts.temperature = settings.temperature;
    }
    const stored = model.getMetadata(METADATA_KEY);
    try {
      const { job_id, turn_id } = await startTurn({
        version: API_VERSION,
        notebook_path: this.panel.context.path,
        // Unsaved edits, outputs, ids and cell metadata (prior turns) included.
        cells: model.sharedModel.toJSON().cells as NotebookCell[],
        active_index: activeIndex,
        kernel_id: this.panel.sessionContext.session?.kernel?.id ?? null,
        intent,
        strategy,
        options: opts,
        ...(this.model ? { model: this.model } : {}),
        // The answer replaces that cell: the model rewrites it in full.
        ...(exchange.editCellId ? { edit_cell: true } : {}),
        ...(stored ? { metadata: { [METADATA_KEY]: stored } } : {})
      });
      this._update(exchange, {
        ...exchange.job,
        jobId: job_id,
        turnId: turn_id ?? null,
        status: 'running',
        message: 'Started'
      });
      this._follow(exchange, job_id);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this._update(exchange, endJob(exchange.job, 'error', reason));
      this._recordFailure(exchange);
    }
  }

  async stop(): Promise<void> {
    const exchange = this.running;
    if (!exchange) {
      return;
    }
    const jobId = exchange.job.jobId;
    if (!jobId) {
      this._update(exchange, endJob(exchange.job, 'cancelled'));
      this._recordFailure(exchange);
      return;
    }
    this._update(exchange, { ...exchange.job, message: 'Stopping…' });
    try {
      await cancelJob(jobId);
    } catch (error) {
      console.warn('jupyter-data-agent: cancel failed', error);
    }
    // The stream reports the end; if it is already gone, end here.
    window.setTimeout(() => {
      if (!isFinished(exchange.job)) {
        this._streams.get(exchange.key)?.dispose();
        this._update(exchange, endJob(exchange.job, 'cancelled'));
        this._recordFailure(exchange);
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
    this._update(exchange, {
      ...exchange.job,
      message: 'Answering from the notebook text…'
    });
    try {
      await answerWithoutKernel(jobId);
    } catch (error) {
      console.warn('jupyter-data-agent: could not stop waiting', error);
    }
  }

  /**
   * Ask the same question again, with the same strategy, about the same
   * cell; a turn that edited a cell edits it again (while it exists).
   */
  retry(
    intent: string,
    strategy: string,
    cellId?: string | null,
    editCellId?: string | null
  ): void {
    const edit = !!editCellId && this.cellIndex(editCellId) >= 0;
    const about = edit ? editCellId : cellId;
    void this.send({
      intent,
      strategy: strategy as Strategy,
      cellId: about && this.cellIndex(about) >= 0 ? about : undefined,
      editCell: edit
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
    // The last cell first, then the first: the whole block is in view when
    // it fits, and its start when it does not.
    void notebook
      .scrollToItem(last, 'smart')
      .then(() => notebook.scrollToItem(first, 'smart'))
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
    this._exchanges = [];
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
    exchange.selected = index;
    if (
      exchange.turnId &&
      this.suggestions.suggestion(exchange.turnId)?.status === 'suggested'
    ) {
      this.suggestions.select(exchange.turnId, index);
    }
    this._changed.emit();
  }

  /** Place candidate `index` of an exchange as a suggestion below its cell. */
  insert(
    exchange: IExchange,
    index: number,
    anchorCellId?: string | null
  ): boolean {
    if (!exchange.turnId || !exchange.job.candidates.length) {
      return false;
    }
    exchange.selected = index;
    const ok = this.suggestions.insert({
      turnId: exchange.turnId,
      intent: exchange.intent,
      candidates: exchange.job.candidates.map(toSuggestionCandidate),
      index,
      mode: this._settings().insertMode,
      anchorCellId:
        anchorCellId === undefined ? this._activeCellId() : anchorCellId,
      replaceCellId: exchange.editCellId
    });
    if (
      ok &&
      this.suggestions.suggestion(exchange.turnId)?.status === 'suggested'
    ) {
      // In a long notebook the suggestion may land out of sight: bring it
      // into view, without taking the keyboard from where it is.
      const turnId = exchange.turnId;
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

  private _follow(exchange: IExchange, jobId: string): void {
    const stream = new JobStream({
      jobId,
      onEvent: event => {
        const wasDone = exchange.job.status === 'done';
        this._update(exchange, reduceJob(exchange.job, event));
        if (!wasDone && exchange.job.status === 'done') {
          this._finish(exchange);
        }
      },
      onEnd: (status, reason) => {
        this._update(exchange, endJob(exchange.job, status, reason));
        this._streams.delete(exchange.key);
        this._recordFailure(exchange);
      }
    });
    this._streams.set(exchange.key, stream);
    stream.start();
  }

  /** The job is done: store the turn, and offer the preferred candidate. */
  private _finish(exchange: IExchange): void {
    const job = exchange.job;
    exchange.turnId = job.turnId ?? newTurnId();
    exchange.selected = preferredIndex(job);
    if (!job.candidates.length || this.panel.isDisposed) {
      this._changed.emit();
      return;
    }
    this.suggestions.recordTurn(this._turnOf(exchange));
    if (exchange.autoInsert) {
      const anchor =
        this.cellIndex(exchange.anchorCellId) >= 0
          ? exchange.anchorCellId
          : undefined;
      this.insert(exchange, exchange.selected, anchor);
    }
    this._changed.emit();
  }

  /** The turn to store for an exchange: candidates, previews, failure. */
  private _turnOf(exchange: IExchange): ITurn {
    const job = exchange.job;
    const chosen = job.candidates[exchange.selected] ?? job.candidates[0];
    const failed = job.status === 'error' || job.status === 'cancelled';
    return {
      turn_id: exchange.turnId ?? newTurnId(exchange.created),
      intent: exchange.intent,
      code: chosen?.code ?? '',
      status: 'pending',
      cell_ids: [],
      candidates: job.candidates.map(c => c.code),
      created: nowSeconds(exchange.created),
      explanations: job.candidates.map(c => c.explanation),
      strategy: exchange.strategy,
      ...(job.confinement ? { confinement: job.confinement } : {}),
      ...(job.candidates.length
        ? {
            previews: boundPreviews(
              job.candidates.map(c =>
                c.result ? previewOutputs(c.result) : null
              )
            )
          }
        : {}),
      ...(failed
        ? {
            failure: {
              status: job.status as 'error' | 'cancelled',
              reason: job.error ?? ''
            }
          }
        : {})
    };
  }

  /**
   * A stopped or failed request is stored too, so it keeps its place in
   * the conversation and its reason after a reload. One refused before it
   * was sent (an intent too long) is not: it never became a turn.
   */
  private _recordFailure(exchange: IExchange): void {
    const job = exchange.job;
    if (
      (job.status !== 'error' && job.status !== 'cancelled') ||
      exchange.turnId ||
      this.panel.isDisposed ||
      !this.panel.model
    ) {
      return;
    }
    exchange.turnId = job.turnId ?? newTurnId(exchange.created);
    this.suggestions.recordTurn(this._turnOf(exchange));
    this._changed.emit();
  }

  private _update(exchange: IExchange, job: IJobView): void {
    if (job === exchange.job) {
      return;
    }
    exchange.job = job;
    this._changed.emit();
  }

  private _exchanges: IExchange[] = [];
  private _streams = new Map<string, JobStream>();
  private _pinned: string | null = null;
  private _changed = new Signal<this, void>(this);
  private _disposed = false;
}
