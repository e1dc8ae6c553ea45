import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  showDialog,
  Dialog,
  MainAreaWidget,
  Notification
} from '@jupyterlab/apputils';
import { ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

// The sidebar, its sessions and the config request are set up at activation:
// nothing here can wait for a lazy import.
/* eslint-disable jupyter/prefer-lazy-imports */
import { keepKeyboardInNotebook } from './cellfocus';
import { activateCellOnContextMenu, explainQuestion } from './cellmenu';
import { configTable } from './configtable';
import { getConfig, reloadValueModel } from './handler';
import { executorPlugin } from './executor';
import { inlinePlugin } from './inline';
import { warmPlugin } from './warm';
import { noRequestRegistry } from './norequests';
import { EXPLAIN, Limits, Strategy } from './models';
import { AgentSidebar, PANEL_ID } from './panel';
import { ISendOptions, NotebookSession } from './session';
import { DEFAULT_SETTINGS, IAgentSettings, readSettings } from './settings';
/* eslint-enable jupyter/prefer-lazy-imports */
import type { AgentTokensPanel } from './agenttokens';

const PLUGIN_ID = 'jupyter-data-agent:plugin';

export namespace CommandIDs {
  export const showConfig = 'jupyter-data-agent:show-config';
  export const open = 'jupyter-data-agent:open';
  export const askCell = 'jupyter-data-agent:ask-cell';
  export const explainCell = 'jupyter-data-agent:explain-cell';
  export const fixCell = 'jupyter-data-agent:fix-cell';
  export const improveCell = 'jupyter-data-agent:improve-cell';
  export const accept = 'jupyter-data-agent:accept';
  export const acceptAndRun = 'jupyter-data-agent:accept-and-run';
  export const reject = 'jupyter-data-agent:reject';
  export const next = 'jupyter-data-agent:next-candidate';
  export const previous = 'jupyter-data-agent:previous-candidate';
  export const undo = 'jupyter-data-agent:undo';
  export const stop = 'jupyter-data-agent:stop';
  export const reloadValueModel = 'jupyter-data-agent:reload-value-model';
  export const manageTokens = 'jupyter-data-agent:manage-agent-tokens';
  export const connectModel = 'jupyter-data-agent:connect-model';
}

/** What the command palette and the API learn about a command's arguments: none. */
const NO_ARGS = { args: { type: 'object', properties: {} } };

const agentIcon = new LabIcon({
  name: 'jupyter-data-agent:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M4 4h16a2 2 0 0 1 2 2v9a2 2 0 0 1-2 2h-7l-5 4v-4H4a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2zm2 4v2h2V8H6zm5 0v2h2V8h-2zm5 0v2h2V8h-2zm-9 4.5c1.4 1.3 3.1 2 5 2s3.6-.7 5-2l-1-1.1c-1.1 1-2.5 1.6-4 1.6s-2.9-.6-4-1.6l-1 1.1z"/>' +
    '</g></svg>'
});

function hasError(panel: NotebookPanel | null): boolean {
  const cell = panel?.content.activeCell;
  if (!cell || cell.model.type !== 'code') {
    return false;
  }
  const outputs = (cell.model as ICodeCellModel).outputs;
  for (let i = 0; i < outputs.length; i++) {
    if (outputs.get(i).type === 'error') {
      return true;
    }
  }
  return false;
}

/**
 * A session for each notebook once its context is ready, disposed with it;
 * the sidebar follows the current notebook, and commands re-check their state.
 */
function trackSessions(
  context: {
    app: JupyterFrontEnd;
    tracker: INotebookTracker;
    sidebar: AgentSidebar;
    sessions: Map<NotebookPanel, NotebookSession>;
    sessionFor: (panel: NotebookPanel | null) => NotebookSession | null;
  },
  create: (panel: NotebookPanel) => NotebookSession
): void {
  const { app, tracker, sidebar, sessions, sessionFor } = context;
  tracker.widgetAdded.connect((_, panel) => {
    void panel.context.ready.then(() => {
      if (panel.isDisposed || sessions.has(panel)) {
        return;
      }
      // The conversation (and any pending suggestion) comes back from metadata.
      const session = create(panel);
      sessions.set(panel, session);
      const contextMenu = activateCellOnContextMenu(panel.content);
      panel.disposed.connect(() => {
        contextMenu.dispose();
        sessions.delete(panel);
        if (sidebar.session === session) {
          sidebar.session = null;
        }
        session.dispose();
      });
      if (tracker.currentWidget === panel) {
        sidebar.session = session;
      }
      app.commands.notifyCommandChanged();
    });
  });
  tracker.currentChanged.connect((_, panel) => {
    sidebar.session = sessionFor(panel);
    app.commands.notifyCommandChanged();
  });
  tracker.activeCellChanged.connect(() => app.commands.notifyCommandChanged());
}

/** What the command groups share: the app, the sidebar and the current notebook's session. */
interface ICommandContext {
  app: JupyterFrontEnd;
  tracker: INotebookTracker;
  sidebar: AgentSidebar;
  current: () => NotebookSession | null;
  openPanel: () => void;
  activeCellId: () => string | null;
  canRun: (name: Strategy) => boolean;
}

/** The configuration dialog, opening the chat, and the requests about the active cell. */
function registerCellCommands(context: ICommandContext): void {
  const { app, tracker, current, openPanel, activeCellId, canRun } = context;
  const { commands } = app;
  commands.addCommand(CommandIDs.showConfig, {
    describedBy: NO_ARGS,
    label: 'Data Agent: Show Model Configuration',
    execute: async () => {
      try {
        const config = await getConfig();
        await showDialog({
          title: 'Data Agent',
          body: new Widget({
            node: configTable(config, current()?.model ?? null)
          }),
          buttons: [Dialog.okButton()]
        });
      } catch (error) {
        await showDialog({
          title: 'Data Agent: server extension not reachable',
          body: `${error}. Is the jupyter_data_agent server extension enabled? Check \`jupyter server extension list\`.`,
          buttons: [Dialog.okButton()]
        });
      }
    }
  });
  commands.addCommand(CommandIDs.open, {
    describedBy: NO_ARGS,
    label: 'Data Agent: Open Chat',
    caption: 'Ask the Data Agent about the current notebook',
    icon: agentIcon,
    execute: openPanel
  });
  commands.addCommand(CommandIDs.askCell, {
    describedBy: NO_ARGS,
    label: 'Ask about this cell',
    caption: 'Ask the Data Agent a question about the active cell',
    icon: agentIcon,
    isEnabled: () => !!current() && !!activeCellId(),
    execute: () => {
      const session = current();
      if (!session) {
        return;
      }
      session.pinnedCellId = activeCellId();
      openPanel();
    }
  });
  /** A request about the active cell, from a command on it. */
  const askAboutCell = (options: Omit<ISendOptions, 'cellId'>) => {
    const session = current();
    if (!session) {
      return;
    }
    openPanel();
    void session.send({ ...options, cellId: activeCellId() });
  };
  commands.addCommand(CommandIDs.explainCell, {
    describedBy: NO_ARGS,
    label: 'Explain this cell',
    caption:
      'Ask the Data Agent to explain the active cell (an answer in words)',
    isEnabled: () =>
      !!current() && !!activeCellId() && !current()?.running && canRun(EXPLAIN),
    // The cell (source, outputs, error) goes as the active one; the answer
    // is Markdown read in the panel, and no cell is inserted.
    execute: () =>
      askAboutCell({
        intent: explainQuestion(current()?.cellIndex(activeCellId()) ?? -1),
        strategy: EXPLAIN,
        autoInsert: false
      })
  });
  commands.addCommand(CommandIDs.fixCell, {
    describedBy: NO_ARGS,
    label: 'Fix the error in this cell',
    caption:
      'The error output is sent as context; the fix comes back as a suggestion',
    isEnabled: () =>
      !!current() && hasError(tracker.currentWidget) && !current()?.running,
    // The cell and its error go as a typed edit; the fix replaces the
    // cell, shown as a diff over it.
    execute: () => askAboutCell({ intent: '', edit: 'fix' })
  });
  commands.addCommand(CommandIDs.improveCell, {
    describedBy: NO_ARGS,
    label: 'Improve this cell',
    caption:
      'Suggest a clearer, more idiomatic version of the active code cell, shown as a diff',
    isEnabled: () =>
      !!current() &&
      tracker.currentWidget?.content.activeCell?.model.type === 'code' &&
      !current()?.running,
    // The cell and its text output go as a typed edit.
    execute: () => askAboutCell({ intent: '', edit: 'improve' })
  });
}

/** The first of a turn's cells still in the notebook, if any. */
function firstCellOf(session: NotebookSession, turnId: string): string | null {
  const state = session.suggestions.suggestion(turnId);
  const panel = session.panel.content;
  const present = new Set(panel.widgets.map(c => c.model.id));
  return state?.cells.find(c => present.has(c.id))?.id ?? null;
}

/** Accept, run, reject, cycle and undo the suggestion; stop the request. */
function registerSuggestionCommands(context: ICommandContext): void {
  const { commands } = context.app;
  const { current } = context;
  // `focusFirst`: the keyboard goes to the turn's first cell (the accepted
  // one); else it stays on the active cell (reject makes it the cell the
  // suggestion hung from).
  const onSuggestion = (
    label: string,
    run: (session: NotebookSession, turnId: string) => unknown,
    focusFirst = false
  ) => ({
    label,
    describedBy: NO_ARGS,
    isEnabled: () => !!current()?.suggestions.currentTurn(),
    execute: async () => {
      const session = current();
      const turnId = session?.suggestions.currentTurn();
      if (session && turnId) {
        await keepKeyboardInNotebook(
          session.panel.content,
          () => run(session, turnId),
          () => (focusFirst ? firstCellOf(session, turnId) : null)
        );
      }
    }
  });
  commands.addCommand(
    CommandIDs.accept,
    onSuggestion('Accept Suggestion', (s, id) => s.suggestions.accept(id), true)
  );
  commands.addCommand(
    CommandIDs.acceptAndRun,
    onSuggestion('Accept Suggestion and Run', (s, id) =>
      s.suggestions.acceptAndRun(id)
    )
  );
  commands.addCommand(
    CommandIDs.reject,
    onSuggestion('Reject Suggestion', (s, id) => s.suggestions.reject(id))
  );
  commands.addCommand(
    CommandIDs.next,
    onSuggestion('Next Candidate', (s, id) => s.suggestions.cycle(id, 1))
  );
  commands.addCommand(
    CommandIDs.previous,
    onSuggestion('Previous Candidate', (s, id) => s.suggestions.cycle(id, -1))
  );
  commands.addCommand(CommandIDs.undo, {
    describedBy: NO_ARGS,
    label: 'Undo Last Suggestion Action',
    isEnabled: () => !!current(),
    // The keyboard stays on the active cell: where the suggestion hung from
    // (an undone reject) or the cell taken back (an undone accept).
    execute: async () => {
      const session = current();
      if (session) {
        await keepKeyboardInNotebook(session.panel.content, () =>
          session.suggestions.undo()
        );
      }
    }
  });
  commands.addCommand(CommandIDs.stop, {
    describedBy: NO_ARGS,
    label: 'Stop the Running Request',
    isEnabled: () => !!current()?.running,
    execute: () => current()?.stop()
  });
}

/** Reloading the value model and the agent tokens tab. */
function registerToolCommands(context: ICommandContext): void {
  const { app, sidebar } = context;
  const { commands } = app;
  commands.addCommand(CommandIDs.reloadValueModel, {
    describedBy: NO_ARGS,
    label: 'Data Agent: Reload Value Model',
    caption:
      'Search turns use the newest value model trained by `jupyter-data-agent train-value`',
    execute: async () => {
      try {
        const reply = await reloadValueModel();
        Notification.success(
          `Search turns are guided by ${reply.value_model}.`,
          { autoClose: 5000 }
        );
      } catch (error) {
        Notification.error(`The value model was not reloaded: ${error}`);
      }
    }
  });

  // Outside agents' scoped tokens, in a tab of their own (agenttokens.tsx).
  let tokensWidget: MainAreaWidget<AgentTokensPanel> | null = null;
  commands.addCommand(CommandIDs.manageTokens, {
    describedBy: NO_ARGS,
    label: 'Data Agent: Manage Agent Tokens',
    caption:
      'Make, list and revoke the tokens of outside agents (Claude Code, Codex, Cursor)',
    execute: async () => {
      if (!tokensWidget || tokensWidget.isDisposed) {
        // Loaded when first opened: nothing at startup needs it.
        const { createTokensWidget } = await import('./agenttokens');
        if (!tokensWidget || tokensWidget.isDisposed) {
          tokensWidget = createTokensWidget(agentIcon);
          app.shell.add(tokensWidget, 'main');
        }
      }
      // The tab forwards its activation: the keyboard goes to the name field.
      app.shell.activateById(tokensWidget.id);
    }
  });
  sidebar.manageTokens = () => void commands.execute(CommandIDs.manageTokens);
}

/** What the sidebar shows from GET config; `setLimits` gets the server's limits. */
function loadConfig(
  app: JupyterFrontEnd,
  sidebar: AgentSidebar,
  setLimits: (limits: Limits) => void
): Promise<void> {
  return getConfig()
    .then(config => {
      sidebar.strategies = {
        catalog: config.strategies,
        available: config.capabilities.strategies
      };
      sidebar.price = config.price ?? null;
      sidebar.prices = config.prices ?? {};
      const limits = config.limits ?? null;
      setLimits(limits);
      sidebar.limits = limits;
      sidebar.models = config.models ?? [];
      sidebar.modelInfo = config.model_info ?? null;
      app.commands.notifyCommandChanged();
    })
    .catch(reason =>
      console.warn('jupyter-data-agent: no server config', reason)
    );
}

/** "Connect a model": the dialog; the sidebar's config is read again once connected. */
function registerConnectCommand(
  app: JupyterFrontEnd,
  sidebar: AgentSidebar,
  reload: () => Promise<void>
): void {
  app.commands.addCommand(CommandIDs.connectModel, {
    label: 'Data Agent: Connect a Model…',
    caption:
      'Use a model served on this machine (Ollama, LM Studio, vLLM, llama.cpp) or an OpenAI-compatible endpoint',
    describedBy: NO_ARGS,
    execute: async () => {
      const { ConnectModelBody } = await import('./components/ConnectModel');
      const body = new ConnectModelBody(() => void reload());
      await showDialog({
        title: 'Connect a model',
        body,
        buttons: [Dialog.cancelButton({ label: 'Close' })],
        focusNodeSelector: '.jp-DataAgent-connectUrl'
      });
    }
  });
  sidebar.connectModel = () =>
    void app.commands.execute(CommandIDs.connectModel);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'An AI pair programmer for data science: a chat sidebar tied to the notebook, explained candidates offered as suggested cells.',
  autoStart: true,
  requires: [INotebookTracker, IRenderMimeRegistry],
  optional: [ICommandPalette, ISettingRegistry, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    rendermime: IRenderMimeRegistry,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null
  ) => {
    let settings: IAgentSettings = { ...DEFAULT_SETTINGS };
    // What the server accepts (GET config); null until it answered. A
    // samples or budget setting above its limit is used as that limit.
    let limits: Limits = null;
    const sessions = new Map<NotebookPanel, NotebookSession>();

    // Candidate outputs and model text load nothing (norequests.ts).
    const sidebar = new AgentSidebar(
      noRequestRegistry(rendermime),
      () => settings
    );
    sidebar.title.icon = agentIcon;
    sidebar.title.caption = 'Data Agent';
    app.shell.add(sidebar, 'right', { rank: 600 });
    restorer?.add(sidebar, PANEL_ID);

    // The strategy chooser is built from the server's one catalog; until it
    // answers (or if it cannot), the current strategy alone is offered and a
    // request fails with the server's own explanation.
    // Read again once another model is connected.
    const reloadConfig = () =>
      loadConfig(app, sidebar, value => (limits = value));
    void reloadConfig();
    registerConnectCommand(app, sidebar, reloadConfig);
    const canRun = (name: Strategy) =>
      !sidebar.strategies || sidebar.strategies.available.includes(name);

    const sessionFor = (panel: NotebookPanel | null): NotebookSession | null =>
      (panel && sessions.get(panel)) ?? null;
    const current = () => sessionFor(tracker.currentWidget);

    trackSessions(
      { app, tracker, sidebar, sessions, sessionFor },
      panel =>
        new NotebookSession(
          panel,
          () => settings,
          () => limits
        )
    );

    const openPanel = () => {
      app.shell.activateById(sidebar.id);
      // After the panel is shown and rendered.
      requestAnimationFrame(() => sidebar.focusInput());
    };

    const activeCellId = () =>
      tracker.currentWidget?.content.activeCell?.model.id ?? null;

    const context: ICommandContext = {
      app,
      tracker,
      sidebar,
      current,
      openPanel,
      activeCellId,
      canRun
    };
    registerCellCommands(context);
    registerSuggestionCommands(context);
    registerToolCommands(context);

    if (palette) {
      const category = 'Data Agent';
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category });
      }
    }

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(loaded => {
          const apply = () => {
            const previous = settings.defaultStrategy;
            settings = readSettings(loaded);
            if (previous !== settings.defaultStrategy) {
              for (const session of sessions.values()) {
                if (!session.running) {
                  session.strategy = settings.defaultStrategy;
                }
              }
            }
            sidebar.refresh();
          };
          apply();
          loaded.changed.connect(apply);
        })
        .catch(reason => {
          console.error(
            'Failed to load settings for jupyter-data-agent.',
            reason
          );
        });
    }
    console.log('JupyterLab extension jupyter-data-agent is activated!');
  }
};

export default [plugin, inlinePlugin, executorPlugin, warmPlugin];
