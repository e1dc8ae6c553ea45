/**
 * The sidebar chat panel. It renders the session of the current notebook;
 * code is highlighted and outputs rendered by JupyterLab's own rendermime,
 * so the panel follows the theme and renders outputs like the notebook.
 * The views it is made of are in components/.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { IServerStrategies } from './components/common';
import { Composer, INPUT_CLASS } from './components/Composer';
import { ModelLine } from './components/ConnectModel';
import { Conversation } from './components/Conversation';
import { AgentActivityLines } from './components/ProposalView';
import { SessionUsageLine } from './components/UsageLine';
import { Limits } from './models';
import { IAgentSettings, NotebookSession } from './session';
import { withinLimits } from './settings';
import { ToastRoom } from './toastroom';
import { IPrices, IUsage, sessionUsage, usageOfResult } from './usage';
import type { ModelInfo, ModelPrice } from './wire';

export { disposeHosted } from './components/LuminoHost';
export { voteSummary } from './components/CandidateView';
export type { IVoteSummary } from './components/CandidateView';
export { ConfinementBadge } from './components/ConfinementBadge';
export type { IServerStrategies } from './components/common';

export const PANEL_ID = 'jupyter-data-agent-panel';

type Message = Parameters<Widget['processMessage']>[0];

/** Ask first, then forget the notebook's conversation (accepted cells stay). */
async function confirmClear(session: NotebookSession): Promise<void> {
  const result = await showDialog({
    title: 'Clear the conversation?',
    body:
      `The Data Agent's turns stored in ${PathExt.basename(session.panel.context.localPath)} ` +
      'are removed, and pending suggestions are rejected. Accepted cells stay in the notebook.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Clear' })]
  });
  if (result.button.accept) {
    session.clearConversation();
  }
}

/** The sidebar widget; `session` follows the current notebook. */
export class AgentSidebar extends ReactWidget {
  constructor(
    private _rendermime: IRenderMimeRegistry,
    private _settings: () => IAgentSettings
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-DataAgent-panel');
  }

  dispose(): void {
    this._toasts.dispose();
    super.dispose();
  }

  // JupyterLab's toasts stay clear of Ask / Stop (toastroom.ts).
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._toasts.update();
    // Turns started elsewhere (%%agent, MCP, ACP) since it was last shown.
    void this._session?.refreshTurns();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._toasts.update();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._toasts.update();
  }

  get session(): NotebookSession | null {
    return this._session;
  }

  set session(session: NotebookSession | null) {
    if (session === this._session) {
      return;
    }
    this._session?.changed.disconnect(this._onChanged, this);
    this._session = session;
    session?.changed.connect(this._onChanged, this);
    if (this.isVisible) {
      void session?.refreshTurns();
    }
    this.update();
  }

  /** Put the keyboard in the question box. */
  focusInput(): void {
    const input = this.node.querySelector<HTMLTextAreaElement>(
      `.${INPUT_CLASS}`
    );
    input?.focus();
  }

  /** What the server offers and can run (from GET config). */
  get strategies(): IServerStrategies | null {
    return this._strategies;
  }

  set strategies(value: IServerStrategies | null) {
    this._strategies = value;
    this.update();
  }

  /** The models a turn may name (GET config); the picker shows when more than one. */
  get models(): string[] {
    return this._models;
  }

  set models(value: string[]) {
    this._models = value;
    this.update();
  }

  /** What the server accepts (GET config's limits); null until it answered. */
  get limits(): Limits {
    return this._limits;
  }

  set limits(value: Limits) {
    this._limits = value;
    this.update();
  }

  /** The configured model's price (GET config); null: no cost is shown. */
  get price(): ModelPrice | null {
    return this._price;
  }

  set price(value: ModelPrice | null) {
    this._price = value;
    this._priceConfig = { price: value, prices: this._priceConfig.prices };
    this.update();
  }

  /** The price of each offered model that has one (GET config): a turn's cost is its own model's. */
  set prices(value: { [model: string]: ModelPrice | undefined }) {
    this._priceConfig = { price: this._price, prices: value };
    this.update();
  }

  /** Opens the agent token manager ("Agents…"); null: no way in is shown. */
  get manageTokens(): (() => void) | null {
    return this._manageTokens;
  }

  set manageTokens(value: (() => void) | null) {
    this._manageTokens = value;
    this.update();
  }

  /** Which model answers (GET config's model_info); null until the server answered. */
  set modelInfo(value: ModelInfo | null) {
    this._modelInfo = value;
    this.update();
  }

  /** Opens "Connect a model"; null: no way in is shown. */
  set connectModel(value: (() => void) | null) {
    this._connectModel = value;
    this.update();
  }

  /** Re-render after a settings change. */
  refresh(): void {
    this.update();
  }

  protected render(): JSX.Element {
    const session = this._session;
    if (!session || session.isDisposed) {
      return (
        <div className="jp-DataAgent-empty">
          Open a notebook to ask the Data Agent about it.
          <ModelLine info={this._modelInfo} connect={this._connectModel} />
          {this._manageTokens && (
            <p>
              <button
                type="button"
                className="jp-DataAgent-link jp-DataAgent-connectAgent"
                title="Give an outside agent (Claude Code, Codex, Cursor) a token of its own"
                onClick={this._manageTokens}
              >
                Connect an agent…
              </button>
            </p>
          )}
        </div>
      );
    }
    const prices = this._priceConfig;
    const total = sessionUsage(sessionTurns(session), prices);
    return (
      <div className="jp-DataAgent-body">
        <div className="jp-DataAgent-header" title={session.panel.context.path}>
          <span className="jp-DataAgent-title">Data Agent</span>
          <span className="jp-DataAgent-notebook">
            {PathExt.basename(session.panel.context.localPath)}
          </span>
          <span className="jp-DataAgent-spacer" />
          {this._manageTokens && (
            <button
              type="button"
              className="jp-DataAgent-link jp-DataAgent-connectAgent"
              title="Connect an outside agent (Claude Code, Codex, Cursor): manage agent tokens"
              onClick={this._manageTokens}
            >
              Agents…
            </button>
          )}
          {session.timeline().length > 0 && (
            <button
              type="button"
              className="jp-DataAgent-link jp-DataAgent-clear"
              title="Clear this notebook's conversation"
              disabled={!!session.running}
              onClick={() => void confirmClear(session)}
            >
              Clear
            </button>
          )}
        </div>
        <ModelLine info={this._modelInfo} connect={this._connectModel} />
        {total && (
          <SessionUsageLine className="jp-DataAgent-total" session={total} />
        )}
        <AgentActivityLines activity={session.agentActivity} />
        <Conversation
          session={session}
          rendermime={this._rendermime}
          strategies={this._strategies}
          prices={prices}
        />
        <Composer
          key={session.panel.id}
          session={session}
          settings={withinLimits(this._settings(), this._limits)}
          strategies={this._strategies}
          models={this._models}
          limits={this._limits}
        />
      </div>
    );
  }

  private _onChanged(): void {
    this.update();
  }

  private _session: NotebookSession | null = null;
  private _toasts = new ToastRoom(this.node);
  private _strategies: IServerStrategies | null = null;
  private _modelInfo: ModelInfo | null = null;
  private _connectModel: (() => void) | null = null;
  private _price: ModelPrice | null = null;
  /** One object while the prices stay the same: the memoized turn views compare it. */
  private _priceConfig: IPrices = { price: null, prices: {} };
  private _models: string[] = [];
  private _limits: Limits = null;
  private _manageTokens: (() => void) | null = null;
}

/**
 * The usage of each of the notebook's own turns (null: not finished): the
 * live request's result, else what the stored turn kept, so the session
 * total is the same after a reload. Turns started elsewhere are not counted.
 */
function sessionTurns(session: NotebookSession): (IUsage | null)[] {
  return session
    .timeline()
    .filter(entry => !entry.outside)
    .map(entry => {
      const result = entry.exchange?.job.result;
      return result ? usageOfResult(result) : (entry.turn?.usage ?? null);
    });
}
