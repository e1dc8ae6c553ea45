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
import { JobStream, cancelJob, startTurn } from './handler';
import {
  ITurn,
  METADATA_KEY,
  newTurnId,
  nowSeconds,
  readCellTag
} from './metadata';
import { API_VERSION, Strategy, intentProblem } from './models';
import type { Candidate, NotebookCell, TurnOptions } from './wire';
import { SuggestionController } from './notebook';
import { ISuggestionCandidate, InsertMode } from './suggestions';

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
    this.strategy = _settings().defaultStrategy;
  }

  readonly suggestions: SuggestionController;

  /** The strategy picked in this notebook's composer. */
  strategy: Strategy;

  /** Intents sent from this notebook, oldest first (composer history). */
  get intentHistory(): string[] {
    const stored = this.suggestions.conversation.turns.map(t => t.intent);
    const live = this._exchanges.filter(e => !e.turnId).map(e => e.intent);
    return [...stored, ...live];
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

  /** The cell a panel question is pinned to ("Ask about this cell"). */
  get pinnedCellId(): string | null {
    return this._pinned;
  }

  set pinnedCellId(id: string | null) {
    this._pinned = id;
    this._changed.emit();
  }

  /** Stored turns in order, each with its live exchange where there is one. */
  timeline(): { turn: ITurn | null; exchange: IExchange | null }[] {
    const turns = this.suggestions.conversation.turns;
    const byTurn = new Map(
      this._exchanges.filter(e => e.turnId).map(e => [e.turnId!, e])
    );
    const items: { turn: ITurn | null; exchange: IExchange | null }[] =
      turns.map(turn => ({
        turn,
        exchange: byTurn.get(turn.turn_id) ?? null
      }));
    const stored = new Set(turns.map(t => t.turn_id));
    for (const exchange of this._exchanges) {
      if (!exchange.turnId || !stored.has(exchange.turnId)) {
        items.push({ turn: null, exchange });
      }
    }
    return items;
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
      }
    }, 5000);
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
        anchorCellId === undefined ? this._activeCellId() : anchorCellId
    });
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
    const chosen = job.candidates[exchange.selected] ?? job.candidates[0];
    this.suggestions.recordTurn({
      turn_id: exchange.turnId,
      intent: exchange.intent,
      code: chosen.code,
      status: 'pending',
      cell_ids: [],
      candidates: job.candidates.map(c => c.code),
      created: nowSeconds(exchange.created),
      explanations: job.candidates.map(c => c.explanation),
      strategy: exchange.strategy,
      ...(job.confinement ? { confinement: job.confinement } : {})
    });
    if (exchange.autoInsert) {
      const anchor =
        this.cellIndex(exchange.anchorCellId) >= 0
          ? exchange.anchorCellId
          : undefined;
      this.insert(exchange, exchange.selected, anchor);
    }
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
