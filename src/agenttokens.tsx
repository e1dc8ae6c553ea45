/**
 * The agent token manager: a tab, opened from the sidebar ("Agents…") or
 * the command palette, that lists the outside agents' scoped tokens (GET
 * agent-tokens: name, created, last used), makes one (POST: the token is
 * shown this once, with the MCP snippets for Claude Code, Codex and Cursor)
 * and revokes one (DELETE, after a confirmation). The same store as
 * `jupyter-data-agent token create/list/revoke`.
 */
import {
  Clipboard,
  Dialog,
  MainAreaWidget,
  showDialog
} from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { LabIcon, ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import {
  MAX_NAME,
  TokenForm,
  TokenTable,
  TokensNote,
  describeError,
  formatCreated,
  formatLastUsed,
  useTokenList
} from './agenttokenlist';
import { API_NAMESPACE, requestAPI } from './handler';

export { MAX_NAME, describeError, formatCreated, formatLastUsed };

type Message = Parameters<ReactWidget['processMessage']>[0];

export const TOKENS_WIDGET_ID = 'jupyter-data-agent-agent-tokens';

/** One token as listed (never the token itself). */
export interface IAgentToken {
  id: string;
  name: string;
  /** ISO 8601, UTC. */
  created: string;
  /** Seconds since the epoch of its last request since the server started; null: none. */
  last_used: number | null;
}

/** A token just made: the only time the server shows the token. */
export interface ICreatedToken {
  id: string;
  name: string;
  created: string;
  token: string;
}

/** The three calls the manager makes (a fake one in tests). */
export interface IAgentTokensAPI {
  list(): Promise<IAgentToken[]>;
  create(name: string): Promise<ICreatedToken>;
  revoke(id: string): Promise<void>;
}

/** The agent-tokens routes, through ServerConnection like every other call. */
export function agentTokensAPI(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): IAgentTokensAPI {
  return {
    list: async () =>
      (
        await requestAPI<{ tokens: IAgentToken[] }>(
          'agent-tokens',
          {},
          settings
        )
      ).tokens,
    create: (name: string) =>
      requestAPI<ICreatedToken>(
        'agent-tokens',
        { method: 'POST', body: JSON.stringify({ name }) },
        settings
      ),
    revoke: async (id: string) => {
      await requestAPI<unknown>(
        URLExt.join('agent-tokens', encodeURIComponent(id)),
        { method: 'DELETE' },
        settings
      );
    }
  };
}

/** The MCP server's address under this server's base URL. */
export function mcpUrl(baseUrl: string): string {
  return URLExt.join(baseUrl, API_NAMESPACE, 'mcp');
}

/** What an MCP client needs, ready to paste. */
export interface ISnippet {
  client: string;
  /** Where it goes, in words. */
  where: string;
  text: string;
}

export function claudeCodeSnippet(url: string, token: string): string {
  return `claude mcp add --transport http jupyter-data-agent ${url} --header "Authorization: token ${token}"`;
}

/** Claude Code's command, Codex's and Cursor's configuration. */
export function mcpSnippets(url: string, token: string): ISnippet[] {
  return [
    {
      client: 'Claude Code',
      where: 'Run in a terminal:',
      text: claudeCodeSnippet(url, token)
    },
    {
      client: 'Codex',
      where: 'Add to ~/.codex/config.toml:',
      text: [
        '[mcp_servers.jupyter-data-agent]',
        `url = "${url}"`,
        `http_headers = { Authorization = "token ${token}" }`
      ].join('\n')
    },
    {
      client: 'Cursor',
      where: 'Add to ~/.cursor/mcp.json (or .cursor/mcp.json in a project):',
      text: JSON.stringify(
        {
          mcpServers: {
            'jupyter-data-agent': {
              url,
              headers: { Authorization: `token ${token}` }
            }
          }
        },
        null,
        2
      )
    }
  ];
}

/** A button that copies `text` and says so for a moment. */
function CopyButton(props: { text: string; label: string }): JSX.Element {
  const [copied, setCopied] = React.useState(false);
  React.useEffect(() => {
    if (!copied) {
      return;
    }
    const timer = setTimeout(() => setCopied(false), 2000);
    return () => clearTimeout(timer);
  }, [copied]);
  return (
    <button
      type="button"
      className="jp-mod-styled jp-mod-reject jp-DataAgent-tokenCopy"
      aria-label={props.label}
      title={props.label}
      onClick={() => {
        Clipboard.copyToSystem(props.text);
        setCopied(true);
      }}
    >
      {copied ? 'Copied' : 'Copy'}
    </button>
  );
}

/** The token just made, shown once, with the snippets to paste it into an agent. */
function NewToken(props: {
  created: ICreatedToken;
  baseUrl: string;
  onDone: () => void;
}): JSX.Element {
  const { created } = props;
  const snippets = mcpSnippets(mcpUrl(props.baseUrl), created.token);
  const [client, setClient] = React.useState(snippets[0].client);
  const snippet = snippets.find(s => s.client === client) ?? snippets[0];
  return (
    <section
      className="jp-DataAgent-tokenNew"
      aria-labelledby="jp-DataAgent-tokenNewTitle"
    >
      <h3 id="jp-DataAgent-tokenNewTitle">Token for {created.name}</h3>
      <p className="jp-DataAgent-tokenWarning" role="note">
        Copy it now: it is not shown again (the server keeps only its hash). If
        it is lost, revoke it and make another.
      </p>
      <div className="jp-DataAgent-tokenRow">
        <input
          className="jp-mod-styled jp-DataAgent-tokenValue"
          aria-label={`The token for ${created.name}`}
          readOnly
          value={created.token}
          onFocus={event => event.currentTarget.select()}
        />
        <CopyButton text={created.token} label="Copy the token" />
      </div>
      <div className="jp-DataAgent-tokenRow">
        <label htmlFor="jp-DataAgent-tokenClient">Connect</label>
        <select
          id="jp-DataAgent-tokenClient"
          className="jp-mod-styled"
          value={client}
          onChange={event => setClient(event.currentTarget.value)}
        >
          {snippets.map(s => (
            <option key={s.client} value={s.client}>
              {s.client}
            </option>
          ))}
        </select>
      </div>
      <p className="jp-DataAgent-tokenWhere">{snippet.where}</p>
      <div className="jp-DataAgent-tokenRow">
        <pre
          className="jp-DataAgent-tokenSnippet"
          aria-label={`${snippet.client} configuration`}
        >
          {snippet.text}
        </pre>
        <CopyButton
          text={snippet.text}
          label={`Copy the ${snippet.client} ${snippet.client === 'Claude Code' ? 'command' : 'configuration'}`}
        />
      </div>
      <button
        type="button"
        className="jp-mod-styled jp-mod-reject jp-DataAgent-tokenDone"
        onClick={props.onDone}
      >
        Done, hide the token
      </button>
    </section>
  );
}

export interface IAgentTokensViewProps {
  api: IAgentTokensAPI;
  /** This server's base URL (ServerConnection's settings), for the snippets. */
  baseUrl: string;
  /** Ask before revoking; the default is JupyterLab's dialog. */
  confirmRevoke?: (token: IAgentToken) => Promise<boolean>;
  /** The clock for "last used" (tests). */
  now?: () => number;
}

async function confirmRevokeDialog(token: IAgentToken): Promise<boolean> {
  const result = await showDialog({
    title: `Revoke the token for ${token.name}?`,
    body:
      `${token.name} is refused from its next request on. ` +
      'To connect it again, make a new token.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Revoke' })]
  });
  return result.button.accept;
}

/** What an agent token is for and what it cannot reach. */
function TokensIntro(): JSX.Element {
  return (
    <p className="jp-DataAgent-tokensIntro">
      Give each outside agent (Claude Code, Codex, Cursor, an ACP client) a
      token of its own instead of the server&apos;s. It reaches only the Data
      Agent&apos;s MCP server and what the ACP agent needs: it cannot open your
      kernels or files, or accept its own proposals. Revoke it to cut the agent
      off.
    </p>
  );
}

/** The list, the form to make a token, and the token just made. */
export function AgentTokensView(props: IAgentTokensViewProps): JSX.Element {
  const { api } = props;
  const now = props.now ?? Date.now;
  const confirmRevoke = props.confirmRevoke ?? confirmRevokeDialog;
  const { tokens, listError, setListError, reload, mounted, setTick } =
    useTokenList(api);
  const [name, setName] = React.useState('');
  const [busy, setBusy] = React.useState(false);
  const [formError, setFormError] = React.useState<string | null>(null);
  const [created, setCreated] = React.useState<ICreatedToken | null>(null);
  const [revoking, setRevoking] = React.useState<string | null>(null);

  const onCreate = async (event: React.FormEvent) => {
    event.preventDefault();
    const wanted = name.trim();
    if (!wanted) {
      setFormError(
        'Give the agent a name, such as "Claude Code": the list and the sidebar show it.'
      );
      return;
    }
    setBusy(true);
    setFormError(null);
    try {
      const made = await api.create(wanted);
      if (!mounted.current) {
        return;
      }
      setCreated(made);
      setName('');
      await reload();
    } catch (error) {
      if (mounted.current) {
        setFormError(describeError(error, 'make the token'));
      }
    } finally {
      if (mounted.current) {
        setBusy(false);
      }
    }
  };

  const onRevoke = async (token: IAgentToken) => {
    if (!(await confirmRevoke(token))) {
      return;
    }
    setRevoking(token.id);
    setListError(null);
    try {
      await api.revoke(token.id);
      if (mounted.current && created?.id === token.id) {
        setCreated(null);
      }
    } catch (error) {
      if (mounted.current) {
        setListError(
          describeError(error, `revoke the token for ${token.name}`)
        );
      }
    } finally {
      if (mounted.current) {
        setRevoking(null);
        await reload();
      }
    }
  };

  return (
    <div className="jp-DataAgent-tokens">
      <h2>Agent tokens</h2>
      <TokensIntro />
      <TokenForm
        name={name}
        setName={setName}
        busy={busy}
        formError={formError}
        setFormError={setFormError}
        onCreate={onCreate}
      />
      {created && (
        <NewToken
          key={created.id}
          created={created}
          baseUrl={props.baseUrl}
          onDone={() => setCreated(null)}
        />
      )}
      {listError && (
        <p className="jp-DataAgent-tokenError" role="alert">
          {listError}
        </p>
      )}
      {tokens === null ? (
        !listError && <p className="jp-DataAgent-tokensNone">Loading…</p>
      ) : tokens.length === 0 ? (
        <p className="jp-DataAgent-tokensNone">
          No agent tokens yet: make one above.
        </p>
      ) : (
        <TokenTable
          tokens={tokens}
          now={now}
          revoking={revoking}
          onRevoke={onRevoke}
        />
      )}
      <TokensNote
        onRefresh={() => {
          setTick(t => t + 1);
          void reload();
        }}
      />
    </div>
  );
}

/** The manager's content: a ReactWidget around the view. */
export class AgentTokensPanel extends ReactWidget {
  constructor(
    private _api: IAgentTokensAPI = agentTokensAPI(),
    private _baseUrl: string = ServerConnection.makeSettings().baseUrl
  ) {
    super();
    this.addClass('jp-DataAgent-tokensPanel');
  }

  /** Put the keyboard in the name field, once React has rendered it. */
  focusName(frames = 30): void {
    const input = this.node.querySelector<HTMLInputElement>(
      '.jp-DataAgent-tokenName'
    );
    if (input) {
      input.focus();
    } else if (frames > 0 && !this.isDisposed) {
      requestAnimationFrame(() => this.focusName(frames - 1));
    }
  }

  /** Opened or its tab picked: the keyboard goes to the name field. */
  protected onActivateRequest(msg: Message): void {
    super.onActivateRequest(msg);
    this.focusName();
  }

  protected render(): JSX.Element {
    return <AgentTokensView api={this._api} baseUrl={this._baseUrl} />;
  }
}

/** A main-area tab for the manager. */
export function createTokensWidget(
  icon?: LabIcon
): MainAreaWidget<AgentTokensPanel> {
  const content = new AgentTokensPanel();
  const widget = new MainAreaWidget({ content });
  widget.id = TOKENS_WIDGET_ID;
  widget.title.label = 'Agent Tokens';
  widget.title.caption = 'Data Agent: tokens for outside agents (MCP, ACP)';
  widget.title.closable = true;
  if (icon) {
    widget.title.icon = icon;
  }
  return widget;
}
