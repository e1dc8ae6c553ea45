/**
 * The agent token manager: "last used" in words, the MCP snippets, errors
 * in words, the agent-tokens calls (through a fake fetch in
 * ServerConnection's settings), and the view: the list, making a token
 * (shown once, with the Claude Code command), Enter submits, a blank name
 * is refused before any call, the server's 400 shown, Revoke after a
 * confirmation.
 */
import { ServerConnection } from '@jupyterlab/services';
import { ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import {
  AgentTokensView,
  IAgentToken,
  IAgentTokensAPI,
  ICreatedToken,
  agentTokensAPI,
  claudeCodeSnippet,
  describeError,
  formatCreated,
  formatLastUsed,
  mcpSnippets,
  mcpUrl
} from '../agenttokens';

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

const NOW = Date.UTC(2026, 10, 28, 12, 0, 0);
const TOKEN = 'jda_0123456789ab_' + 'x'.repeat(43);

describe('formatLastUsed', () => {
  const ago = (seconds: number) => formatLastUsed(NOW / 1000 - seconds, NOW);

  it('says never for a token not used since the server started', () => {
    expect(formatLastUsed(null, NOW)).toBe('never');
    expect(formatLastUsed(undefined, NOW)).toBe('never');
  });

  it('says how long ago, in words', () => {
    expect(ago(0)).toBe('just now');
    expect(ago(30)).toBe('just now');
    expect(ago(60)).toBe('1 minute ago');
    expect(ago(5 * 60)).toBe('5 minutes ago');
    expect(ago(3600)).toBe('1 hour ago');
    expect(ago(3 * 3600)).toBe('3 hours ago');
    expect(ago(86400)).toBe('yesterday');
    expect(ago(4 * 86400)).toBe('4 days ago');
  });

  it('takes a clock a little behind the server for just now', () => {
    expect(formatLastUsed(NOW / 1000 + 5, NOW)).toBe('just now');
  });
});

describe('formatCreated', () => {
  it('shows a date, and the text itself when it is none', () => {
    expect(formatCreated('2026-11-28T02:00:00+00:00')).toMatch(/2026/);
    expect(formatCreated('soon')).toBe('soon');
  });
});

describe('snippets', () => {
  it('puts the MCP server under the base URL', () => {
    expect(mcpUrl('http://localhost:8888/')).toBe(
      'http://localhost:8888/jupyter-data-agent/mcp'
    );
    expect(mcpUrl('https://hub.example.org/user/ada/')).toBe(
      'https://hub.example.org/user/ada/jupyter-data-agent/mcp'
    );
  });

  it("builds Claude Code's command", () => {
    expect(
      claudeCodeSnippet('http://localhost:8888/jupyter-data-agent/mcp', TOKEN)
    ).toBe(
      'claude mcp add --transport http jupyter-data-agent ' +
        'http://localhost:8888/jupyter-data-agent/mcp ' +
        `--header "Authorization: token ${TOKEN}"`
    );
  });

  it("builds Codex's and Cursor's configuration", () => {
    const url = 'http://localhost:8888/jupyter-data-agent/mcp';
    const [claude, codex, cursor] = mcpSnippets(url, TOKEN);
    expect(claude.client).toBe('Claude Code');
    expect(codex.text).toContain(`url = "${url}"`);
    expect(codex.text).toContain(`Authorization = "token ${TOKEN}"`);
    expect(JSON.parse(cursor.text)).toEqual({
      mcpServers: {
        'jupyter-data-agent': {
          url,
          headers: { Authorization: `token ${TOKEN}` }
        }
      }
    });
  });
});

function respond(status: number, body?: unknown): Response {
  return new Response(body === undefined ? null : JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}

describe('describeError', () => {
  it("gives the server's reason for a 400", () => {
    const error = new ServerConnection.ResponseError(
      respond(400),
      'Give the agent a name.'
    );
    expect(describeError(error, 'make the token')).toBe(
      'Could not make the token: Give the agent a name.'
    );
  });

  it('says when the server cannot be reached or has no such route', () => {
    expect(
      describeError(
        new ServerConnection.NetworkError(new TypeError('Failed to fetch')),
        'list the agent tokens'
      )
    ).toMatch(/cannot be reached/);
    expect(
      describeError(
        new ServerConnection.ResponseError(respond(404), 'Not Found'),
        'list the agent tokens'
      )
    ).toMatch(/server extension enabled/);
    expect(
      describeError(
        new ServerConnection.ResponseError(respond(403), 'Forbidden'),
        'list the agent tokens'
      )
    ).toMatch(/refused \(403\)/);
  });
});

describe('agentTokensAPI', () => {
  const calls: { url: string; method: string; body: string | null }[] = [];
  let next: Response;
  const settings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/',
    token: '',
    appendToken: false,
    fetch: (async (request: Request) => {
      calls.push({
        // Without ServerConnection's cache-busting query.
        url: request.url.split('?')[0],
        method: request.method,
        body: request.method === 'GET' ? null : await request.text()
      });
      return next;
    }) as any
  });
  const api = agentTokensAPI(settings);
  beforeEach(() => {
    calls.length = 0;
  });

  it('lists the tokens', async () => {
    const tokens = [
      { id: 'a1', name: 'Claude Code', created: 'c', last_used: null }
    ];
    next = respond(200, { tokens });
    expect(await api.list()).toEqual(tokens);
    expect(calls).toEqual([
      {
        url: 'http://localhost:8888/jupyter-data-agent/agent-tokens',
        method: 'GET',
        body: null
      }
    ]);
  });

  it('makes a token with its name', async () => {
    const made = { id: 'a1', name: 'Codex', created: 'c', token: TOKEN };
    next = respond(201, made);
    expect(await api.create('Codex')).toEqual(made);
    expect(calls[0].method).toBe('POST');
    expect(JSON.parse(calls[0].body!)).toEqual({ name: 'Codex' });
  });

  it('revokes one by id', async () => {
    next = new Response(null, { status: 204 });
    await api.revoke('a1/b');
    expect(calls[0]).toMatchObject({
      url: 'http://localhost:8888/jupyter-data-agent/agent-tokens/a1%2Fb',
      method: 'DELETE'
    });
  });

  it("fails with the server's message", async () => {
    next = respond(400, { message: 'The name is too long.' });
    await expect(api.create('x')).rejects.toThrow('The name is too long.');
  });
});

/** A server in memory, as the agent-tokens routes behave. */
class FakeAPI implements IAgentTokensAPI {
  tokens: IAgentToken[] = [];
  revoked: string[] = [];
  createError: Error | null = null;
  list = jest.fn(async () => this.tokens.map(t => ({ ...t })));
  create = jest.fn(async (name: string): Promise<ICreatedToken> => {
    if (this.createError) {
      throw this.createError;
    }
    const id = `id${this.tokens.length + 1}`;
    const created = '2026-11-28T11:00:00+00:00';
    this.tokens.push({ id, name, created, last_used: null });
    return { id, name, created, token: TOKEN };
  });
  revoke = jest.fn(async (id: string) => {
    this.revoked.push(id);
    this.tokens = this.tokens.filter(t => t.id !== id);
  });
}

describe('AgentTokensView', () => {
  let host: Widget | null = null;
  let node: HTMLElement;
  afterEach(() => {
    React.act(() => host?.dispose());
    host = null;
  });
  const flush = () => React.act(async () => new Promise(r => setTimeout(r)));

  const show = async (
    api: FakeAPI,
    confirmRevoke = async (_: IAgentToken) => true
  ) => {
    host = ReactWidget.create(
      <AgentTokensView
        api={api}
        baseUrl="http://localhost:8888/"
        confirmRevoke={confirmRevoke}
        now={() => NOW}
      />
    );
    React.act(() => Widget.attach(host!, document.body));
    node = host.node;
    await flush();
  };
  const rows = () =>
    Array.from(node.querySelectorAll('tbody tr')).map(row =>
      Array.from(row.querySelectorAll('td'))
        .slice(0, 3)
        .map(td => td.textContent)
    );
  const typeName = (value: string) => {
    const input = node.querySelector<HTMLInputElement>(
      '#jp-DataAgent-tokenName'
    )!;
    React.act(() => {
      const setter = Object.getOwnPropertyDescriptor(
        HTMLInputElement.prototype,
        'value'
      )!.set!;
      setter.call(input, value);
      input.dispatchEvent(new Event('input', { bubbles: true }));
    });
  };
  const submit = async () => {
    React.act(() => {
      node
        .querySelector('form')!
        .dispatchEvent(
          new Event('submit', { bubbles: true, cancelable: true })
        );
    });
    await flush();
  };

  it('lists each token with when it was last used', async () => {
    const api = new FakeAPI();
    api.tokens = [
      {
        id: 'a',
        name: 'Claude Code',
        created: '2026-11-27T10:00:00+00:00',
        last_used: NOW / 1000 - 120
      },
      { id: 'b', name: 'Cursor', created: 'x', last_used: null }
    ];
    await show(api);
    expect(rows().map(r => [r[0], r[2]])).toEqual([
      ['Claude Code', '2 minutes ago'],
      ['Cursor', 'never']
    ]);
    expect(
      node.querySelector('[aria-label="Revoke the token for Cursor"]')
    ).not.toBeNull();
  });

  it('says when there is none yet', async () => {
    await show(new FakeAPI());
    expect(node.textContent).toContain('No agent tokens yet');
  });

  it('makes a token and shows it once with the Claude Code command', async () => {
    const api = new FakeAPI();
    await show(api);
    typeName('  Claude Code ');
    await submit();
    expect(api.create).toHaveBeenCalledWith('Claude Code');
    const value = node.querySelector<HTMLInputElement>(
      '.jp-DataAgent-tokenValue'
    );
    expect(value?.value).toBe(TOKEN);
    expect(node.querySelector('.jp-DataAgent-tokenSnippet')?.textContent).toBe(
      claudeCodeSnippet('http://localhost:8888/jupyter-data-agent/mcp', TOKEN)
    );
    expect(node.textContent).toContain('not shown again');
    expect(rows().map(r => r[0])).toEqual(['Claude Code']);
    expect(
      node.querySelector<HTMLInputElement>('#jp-DataAgent-tokenName')!.value
    ).toBe('');
    // Done: the token is gone from the page.
    React.act(() =>
      node.querySelector<HTMLButtonElement>('.jp-DataAgent-tokenDone')!.click()
    );
    expect(node.querySelector('.jp-DataAgent-tokenValue')).toBeNull();
    expect(node.textContent).not.toContain(TOKEN);
  });

  it('refuses a blank name without asking the server', async () => {
    const api = new FakeAPI();
    await show(api);
    typeName('   ');
    await submit();
    expect(api.create).not.toHaveBeenCalled();
    expect(node.querySelector('[role="alert"]')?.textContent).toMatch(
      /Give the agent a name/
    );
  });

  it("shows the server's reason for a refused name", async () => {
    const api = new FakeAPI();
    api.createError = new ServerConnection.ResponseError(
      respond(400),
      'The name is taken.'
    );
    await show(api);
    typeName('Codex');
    await submit();
    expect(node.querySelector('[role="alert"]')?.textContent).toBe(
      'Could not make the token: The name is taken.'
    );
    expect(node.querySelector('.jp-DataAgent-tokenValue')).toBeNull();
  });

  it('revokes after the confirmation, and not without it', async () => {
    const api = new FakeAPI();
    api.tokens = [{ id: 'a', name: 'Codex', created: 'x', last_used: null }];
    let answer = false;
    const confirm = jest.fn(async () => answer);
    await show(api, confirm);
    const revoke = () =>
      node.querySelector<HTMLButtonElement>('.jp-DataAgent-tokenRevoke')!;
    React.act(() => revoke().click());
    await flush();
    expect(confirm).toHaveBeenCalledTimes(1);
    expect(api.revoke).not.toHaveBeenCalled();
    answer = true;
    React.act(() => revoke().click());
    await flush();
    expect(api.revoked).toEqual(['a']);
    expect(rows()).toEqual([]);
  });
});
