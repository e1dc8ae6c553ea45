/**
 * The agent tokens list of the manager: reading it, its table, the form that
 * makes a token, and the words for times and failures. Split out of
 * `agenttokens.tsx`, which composes them into the view.
 */
import { ServerConnection } from '@jupyterlab/services';
import * as React from 'react';

import type { IAgentToken, IAgentTokensAPI } from './agenttokens';

/** The longest agent name the server keeps (store.agent_tokens.MAX_NAME). */
export const MAX_NAME = 80;

/** "never", "just now", "5 minutes ago", "yesterday", "3 days ago". */
export function formatLastUsed(
  lastUsed: number | null | undefined,
  now: number = Date.now()
): string {
  if (lastUsed === null || lastUsed === undefined || !isFinite(lastUsed)) {
    return 'never';
  }
  const seconds = Math.max(0, Math.round(now / 1000 - lastUsed));
  const plural = (n: number, unit: string) =>
    `${n} ${unit}${n === 1 ? '' : 's'} ago`;
  if (seconds < 45) {
    return 'just now';
  }
  if (seconds < 45 * 60) {
    return plural(Math.max(1, Math.round(seconds / 60)), 'minute');
  }
  if (seconds < 22 * 3600) {
    return plural(Math.max(1, Math.round(seconds / 3600)), 'hour');
  }
  const days = Math.max(1, Math.round(seconds / 86400));
  return days === 1 ? 'yesterday' : plural(days, 'day');
}

/** The creation time in the browser's locale; the server's text if it is no date. */
export function formatCreated(iso: string): string {
  const date = new Date(iso);
  return isNaN(date.getTime())
    ? iso
    : date.toLocaleString(undefined, {
        dateStyle: 'medium',
        timeStyle: 'short'
      });
}

/** A failed call in words: the server's own reason where it gave one. */
export function describeError(error: unknown, doing: string): string {
  if (error instanceof ServerConnection.NetworkError) {
    return `Could not ${doing}: the Jupyter server cannot be reached. Is it running?`;
  }
  if (error instanceof ServerConnection.ResponseError) {
    const status = error.response.status;
    const reason = (error.message || '').trim();
    if (status === 404 && !reason.startsWith('No agent token')) {
      return `Could not ${doing}: the server has no agent tokens route. Is the jupyter_data_agent server extension enabled and up to date?`;
    }
    if (status === 401 || status === 403) {
      return `Could not ${doing}: the server refused (${status}). Agent tokens are made from your own browser session, not with an agent's token.`;
    }
    return `Could not ${doing}: ${reason || `the server answered ${status}`}`;
  }
  return `Could not ${doing}: ${error}`;
}

/**
 * The tokens, re-read now and every 30 seconds ("last used" moves on while
 * the tab is open); `mounted` tells the view's async handlers it is still there.
 */
export function useTokenList(api: IAgentTokensAPI) {
  const [tokens, setTokens] = React.useState<IAgentToken[] | null>(null);
  const [listError, setListError] = React.useState<string | null>(null);
  const [, setTick] = React.useState(0);
  const mounted = React.useRef(true);
  React.useEffect(
    () => () => {
      mounted.current = false;
    },
    []
  );

  const reload = React.useCallback(async () => {
    try {
      const listed = await api.list();
      if (mounted.current) {
        setTokens(listed);
        setListError(null);
      }
    } catch (error) {
      if (mounted.current) {
        setListError(describeError(error, 'list the agent tokens'));
      }
    }
  }, [api]);

  React.useEffect(() => {
    void reload();
    // "last used" moves on while the tab is open.
    const timer = setInterval(() => {
      void reload();
      setTick(t => t + 1);
    }, 30 * 1000);
    return () => clearInterval(timer);
  }, [reload]);

  return { tokens, listError, setListError, reload, mounted, setTick };
}

/** The form that makes a token for a named agent, and what went wrong. */
export function TokenForm(props: {
  name: string;
  setName: (name: string) => void;
  busy: boolean;
  formError: string | null;
  setFormError: (error: string | null) => void;
  onCreate: (event: React.FormEvent) => Promise<void>;
}) {
  const { name, setName, busy, formError, setFormError, onCreate } = props;
  return (
    <>
      <form
        className="jp-DataAgent-tokenForm"
        onSubmit={event => void onCreate(event)}
      >
        <label htmlFor="jp-DataAgent-tokenName">Agent name</label>
        <input
          id="jp-DataAgent-tokenName"
          className="jp-mod-styled jp-DataAgent-tokenName"
          type="text"
          placeholder="Claude Code"
          maxLength={MAX_NAME}
          value={name}
          aria-invalid={formError ? true : undefined}
          aria-describedby={
            formError ? 'jp-DataAgent-tokenFormError' : undefined
          }
          onChange={event => {
            setName(event.currentTarget.value);
            setFormError(null);
          }}
        />
        <button
          type="submit"
          className="jp-mod-styled jp-mod-accept"
          disabled={busy}
        >
          {busy ? 'Making…' : 'Make a token'}
        </button>
      </form>
      {formError && (
        <p
          id="jp-DataAgent-tokenFormError"
          className="jp-DataAgent-tokenError"
          role="alert"
        >
          {formError}
        </p>
      )}
    </>
  );
}

/** The tokens made for agents, each with when it was last used and Revoke. */
export function TokenTable(props: {
  tokens: IAgentToken[];
  now: () => number;
  revoking: string | null;
  onRevoke: (token: IAgentToken) => Promise<void>;
}) {
  const { tokens, now, revoking, onRevoke } = props;
  return (
    <table className="jp-DataAgent-tokenTable">
      <caption>Tokens made for agents</caption>
      <thead>
        <tr>
          <th scope="col">Agent</th>
          <th scope="col">Created</th>
          <th scope="col" title="Since the Jupyter server started">
            Last used
          </th>
          <th scope="col">
            <span className="jp-DataAgent-srOnly">Actions</span>
          </th>
        </tr>
      </thead>
      <tbody>
        {tokens.map(token => (
          <tr key={token.id} data-token-id={token.id}>
            <td className="jp-DataAgent-tokenAgent">{token.name}</td>
            <td title={token.created}>{formatCreated(token.created)}</td>
            <td
              title={
                token.last_used
                  ? new Date(token.last_used * 1000).toLocaleString()
                  : 'Not since the Jupyter server started'
              }
            >
              {formatLastUsed(token.last_used, now())}
            </td>
            <td>
              <button
                type="button"
                className="jp-mod-styled jp-mod-warn jp-DataAgent-tokenRevoke"
                aria-label={`Revoke the token for ${token.name}`}
                disabled={revoking === token.id}
                onClick={() => void onRevoke(token)}
              >
                {revoking === token.id ? 'Revoking…' : 'Revoke'}
              </button>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Where "last used" counts from, Refresh, and the same list from a terminal. */
export function TokensNote(props: { onRefresh: () => void }): JSX.Element {
  return (
    <p className="jp-DataAgent-tokensNote">
      Last use counts from the Jupyter server&apos;s start.{' '}
      <button
        type="button"
        className="jp-DataAgent-link jp-DataAgent-tokensRefresh"
        onClick={props.onRefresh}
      >
        Refresh
      </button>
      <br />
      The same tokens from a terminal:{' '}
      <code>jupyter-data-agent token list</code>.
    </p>
  );
}
