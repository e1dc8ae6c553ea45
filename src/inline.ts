/**
 * Inline (ghost-text) completion in notebook cells through JupyterLab's
 * inline completer (`IInlineCompletionProvider`, JupyterLab >= 4.1).
 *
 * The server (`POST complete`) builds the prompt from the cells above, the
 * live kernel's DataFrame schemas and the text around the cursor, and
 * streams the ghost text as newline-delimited JSON. JupyterLab debounces
 * the requests (the provider's `debouncerDelay`); each new request aborts
 * the one before it, which stops generation on the server. Nothing here
 * waits on the editor: `fetch` answers at once with an empty, incomplete
 * item and `stream` fills it in.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  CompletionHandler,
  ICompletionProviderManager,
  IInlineCompletionContext,
  IInlineCompletionItem,
  IInlineCompletionList,
  IInlineCompletionProvider
} from '@jupyterlab/completer';
import { URLExt } from '@jupyterlab/coreutils';
import { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

// index.ts loads './handler' at start for the sidebar: a lazy import would gain nothing.
// eslint-disable-next-line jupyter/prefer-lazy-imports
import { API_NAMESPACE, getConfig } from './handler';
import type { InlineCompletionChunk, InlineCompletionRequest } from './wire';

export const INLINE_PROVIDER_ID = 'jupyter-data-agent:inline';
const SETTINGS_PLUGIN_ID = 'jupyter-data-agent:plugin';
/** Pause after the last keystroke before asking (JupyterLab's debouncer). */
export const DEBOUNCE_MS = 250;

/**
 * Newline-delimited JSON as it arrives: the complete lines parsed, the
 * unfinished tail kept for the next chunk.
 */
export function splitLines(buffer: string): {
  lines: InlineCompletionChunk[];
  rest: string;
} {
  const parts = buffer.split('\n');
  const rest = parts.pop() ?? '';
  const lines = parts
    .filter(line => line.trim())
    .map(line => JSON.parse(line) as InlineCompletionChunk);
  return { lines, rest };
}

/** Whether the text before the cursor is worth a completion. */
export function worthCompleting(prefix: string): boolean {
  const line = prefix.slice(prefix.lastIndexOf('\n') + 1);
  if (!prefix.trim()) {
    return false;
  }
  // An empty line right after a blank line: the user is between thoughts.
  if (!line.trim() && /\n\s*\n\s*$/.test(prefix)) {
    return false;
  }
  return true;
}

/** Only the newest request lives: starting one aborts the one before. */
export class LatestRequest {
  private controller: AbortController | null = null;

  start(): AbortSignal {
    this.abort();
    this.controller = new AbortController();
    return this.controller.signal;
  }

  abort(): void {
    this.controller?.abort();
    this.controller = null;
  }
}

/**
 * The cells above `index`, as the server reads them: sources, and the code
 * cells' execution counts (a cell run since the server last read the
 * kernel's DataFrames makes it read them again).
 */
export function cellsAbove(
  cells: ReadonlyArray<{
    cell_type: string;
    source: string;
    id?: string;
    execution_count?: number | null;
  }>,
  index: number
): InlineCompletionRequest['cells'] {
  return cells.slice(0, Math.max(0, index)).map(cell => ({
    cell_type: (['code', 'markdown', 'raw'].includes(cell.cell_type)
      ? cell.cell_type
      : 'raw') as 'code' | 'markdown' | 'raw',
    source: cell.source,
    id: cell.id ?? null,
    metadata: {},
    outputs: [],
    execution_count:
      cell.cell_type === 'code' ? (cell.execution_count ?? null) : null
  }));
}

/** The cells above `index` of a notebook, read from its shared model (see `cellsAbove`). */
export function notebookCellsAbove(
  model: INotebookModel,
  index: number
): InlineCompletionRequest['cells'] {
  const cells = model.sharedModel.cells.map(c => ({
    cell_type: c.cell_type,
    source: c.getSource(),
    id: c.getId(),
    execution_count:
      c.cell_type === 'code'
        ? ((c as { execution_count?: number | null }).execution_count ?? null)
        : null
  }));
  return cellsAbove(cells, index);
}

/** The text of a ghost-text stream: each chunk's delta appended, until done or error. */
export async function* readGhostText(
  response: Response
): AsyncGenerator<{ text: string; error?: string }> {
  if (!response.body) {
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let text = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        break;
      }
      buffer += decoder.decode(value, { stream: true });
      const { lines, rest } = splitLines(buffer);
      buffer = rest;
      for (const chunk of lines) {
        if (chunk.error) {
          yield { text, error: chunk.error };
          return;
        }
        if (chunk.delta) {
          text += chunk.delta;
          yield { text };
        }
      }
    }
  } finally {
    reader.releaseLock();
  }
}

interface IPending {
  response: Promise<Response>;
  signal: AbortSignal;
}

export class DataAgentInlineProvider implements IInlineCompletionProvider {
  readonly identifier = INLINE_PROVIDER_ID;
  readonly name = 'Data Agent';
  /** JupyterLab's own per-provider settings, with our defaults. */
  readonly schema = {
    default: { debouncerDelay: DEBOUNCE_MS, timeout: 20000 }
  };

  constructor(
    private readonly enabled: () => boolean,
    private readonly serverSettings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  async fetch(
    request: CompletionHandler.IRequest,
    context: IInlineCompletionContext
  ): Promise<IInlineCompletionList<IInlineCompletionItem>> {
    const panel = context.widget;
    if (!this.enabled() || !(panel instanceof NotebookPanel)) {
      return { items: [] };
    }
    const notebook = panel.content;
    const cell = notebook.activeCell;
    const model = notebook.model;
    // The request concerns the active cell's editor (not a console, not a file).
    if (
      !cell ||
      !model ||
      cell.model.sharedModel.getSource() !== request.text
    ) {
      return { items: [] };
    }
    const prefix = request.text.slice(0, request.offset);
    const suffix = request.text.slice(request.offset);
    if (!worthCompleting(prefix)) {
      this.latest.abort();
      return { items: [] };
    }
    const body: InlineCompletionRequest = {
      version: 1,
      notebook_path: panel.context.path,
      cells: notebookCellsAbove(model, notebook.activeCellIndex),
      prefix,
      suffix,
      kernel_id:
        context.session?.kernel?.id ??
        panel.sessionContext.session?.kernel?.id ??
        null
    };
    const signal = this.latest.start();
    const url = URLExt.join(
      this.serverSettings.baseUrl,
      API_NAMESPACE,
      'complete'
    );
    const response = ServerConnection.makeRequest(
      url,
      { method: 'POST', body: JSON.stringify(body), signal },
      this.serverSettings
    );
    response.catch(() => undefined); // read (and reported) in stream()
    const token = `${INLINE_PROVIDER_ID}:${++this.counter}`;
    this.pending.set(token, { response, signal });
    return { items: [{ insertText: '', isIncomplete: true, token }] };
  }

  async *stream(
    token: string
  ): AsyncGenerator<{ response: IInlineCompletionItem }> {
    const pending = this.pending.get(token);
    this.pending.delete(token);
    if (!pending) {
      return;
    }
    try {
      const response = await pending.response;
      if (!response.ok) {
        const message = await response.text();
        yield { response: { insertText: '', error: { message } } };
        return;
      }
      for await (const { text, error } of readGhostText(response)) {
        yield {
          response: {
            insertText: text,
            error: error ? { message: error } : undefined
          }
        };
      }
    } catch (error) {
      if (!pending.signal.aborted) {
        console.warn('jupyter-data-agent: inline completion failed', error);
      }
    }
  }

  private readonly latest = new LatestRequest();
  private readonly pending = new Map<string, IPending>();
  private counter = 0;
}

/**
 * Registers the provider. It answers only when the server serves inline
 * completion (`GET config`: c.DataAgent.inline_completion) and the user has
 * not switched it off (the extension's `inlineCompletion` setting).
 */
export const inlinePlugin: JupyterFrontEndPlugin<void> = {
  id: INLINE_PROVIDER_ID,
  description: 'Ghost-text completion in notebook cells from the Data Agent.',
  autoStart: true,
  requires: [ICompletionProviderManager],
  optional: [ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    manager: ICompletionProviderManager,
    settingRegistry: ISettingRegistry | null
  ) => {
    let served = false;
    let wanted = true;
    manager.registerInlineProvider(
      new DataAgentInlineProvider(() => served && wanted)
    );
    getConfig()
      .then(config => {
        served = Boolean(config.capabilities.inline_completion);
      })
      .catch(reason =>
        console.warn('jupyter-data-agent: no inline completion', reason)
      );
    settingRegistry
      ?.load(SETTINGS_PLUGIN_ID)
      .then(settings => {
        const read = () => {
          wanted = settings.get('inlineCompletion').composite !== false;
        };
        read();
        settings.changed.connect(read);
      })
      .catch(() => undefined);
  }
};
