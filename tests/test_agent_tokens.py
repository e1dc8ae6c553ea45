"""Scoped agent tokens: what an outside agent's token opens, and everything it does not.

Issue 34 finding B: the token the README had users give Claude Code was the
server's own, so an agent could write notebooks through ``/api/contents``,
run code in the live kernel over its channels and accept its own proposal.
An agent token (``jupyter-data-agent token create``) is tried here against
every route of a real server (read from its router, jupyter_server's and
JupyterLab's included): outside the agent routes it gets no further than
no token at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat

import nbformat
import pytest
import tornado.websocket
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.routing import PathMatches

from jupyter_data_agent.store.agent_tokens import AgentTokenStore
from tests.test_handler_auth import Route, fill_path, route_rules, status_of
from tests.test_server import NS, on_server_loop

pytest.importorskip("mcp")

from tests.test_mcp import NOTEBOOK, SETUP, client, data, error_text, open_notebook, url

# -- the store -------------------------------------------------------------------------------


def test_tokens_are_kept_hashed_in_a_private_file_and_revoked_at_once(tmp_path):
    store = AgentTokenStore(tmp_path / "agent_tokens.json")
    record, token = store.create("  Claude   Code ", "alice")
    assert record.name == "Claude Code" and token.startswith("jda_" + record.id)
    text = (tmp_path / "agent_tokens.json").read_text()
    assert token not in text and token.split("_", 2)[2] not in text  # "jda_<id>_<secret>" (the secret may hold "_")
    assert stat.S_IMODE(os.stat(tmp_path / "agent_tokens.json").st_mode) == 0o600
    other = AgentTokenStore(tmp_path / "agent_tokens.json")  # the server, reading what the CLI wrote
    assert other.verify(token) == record
    assert other.verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert other.verify("jda_" + record.id) is None and other.verify("") is None
    with pytest.raises(ValueError, match="name"):
        store.create("   ", "alice")
    assert [t.name for t in store.revoke("Claude Code")] == ["Claude Code"]
    assert other.verify(token) is None
    with pytest.raises(ValueError, match="No agent token"):
        store.revoke(record.id)


# -- a real server -----------------------------------------------------------------------------


@pytest.fixture
def tokens_path(tmp_path):
    return tmp_path / "tokens" / "agent_tokens.json"


@pytest.fixture
def jp_server_config(monkeypatch, tokens_path):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_BACKEND", "JUPYTER_DATA_AGENT_MODEL",
                 "JUPYTER_DATA_AGENT_CONFINEMENT"):
        monkeypatch.delenv(name, raising=False)
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_data_agent": True, "jupyterlab": True}},
        "DataAgent": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-unused",
                      "model": "test-model", "max_retries": 0},
        "DataAgentExtension": {"agent_tokens_path": str(tokens_path)},
    }


@pytest.fixture
def server(jp_serverapp, http_server_client, jp_http_port, jp_root_dir):
    return jp_serverapp, jp_http_port, jp_root_dir


def every_route(web_app) -> list[Route]:
    """Every route of the server (all packages); those whose path cannot be filled are left out."""
    found: dict[tuple[str, type], Route] = {}
    values = {"path": "/work/flights.ipynb", "kernel_id": "00000000-0000-0000-0000-000000000000",
              "session_id": "x", "checkpoint_id": "x", "section_name": "x"}
    for matcher, handler in route_rules(web_app.default_router):
        if not isinstance(matcher, PathMatches):
            continue
        pattern = matcher.regex.pattern
        try:
            path = fill_path(pattern)
        except AssertionError:
            path = _fill_named(pattern, values)
            if path is None:
                continue
        found.setdefault((pattern, handler), Route(pattern, handler, path))
    return sorted(found.values(), key=lambda r: r.pattern)


def _fill_named(pattern: str, values: dict[str, str]) -> str | None:
    """``pattern`` with each named group (nested groups and all) replaced by a plausible value."""
    import re

    from tornado.util import re_unescape

    body, out, i = pattern.removeprefix("^").removesuffix("$"), "", 0
    while (start := body.find("(?P<", i)) >= 0:
        name = body[start + 4:body.index(">", start)]
        depth, j = 0, start
        while True:
            if body[j] == "\\":
                j += 2
                continue
            depth += {"(": 1, ")": -1}.get(body[j], 0)
            j += 1
            if depth == 0:
                break
        out += body[i:start] + values.get(name, "x")
        i = j
    try:
        path = re_unescape(out + body[i:])
    except ValueError:
        return None
    return path if re.fullmatch(pattern.removesuffix("$"), path) else None


AGENT_ROUTES = {  # (handler, method): what an agent's token is for
    ("MCPHandler", "POST"), ("MCPHandler", "GET"), ("MCPHandler", "HEAD"), ("MCPHandler", "DELETE"),
    ("TurnsHandler", "POST"), ("TurnsHandler", "GET"), ("TurnsHandler", "HEAD"),
    ("JobHandler", "GET"), ("JobHandler", "HEAD"), ("JobEventsHandler", "WEBSOCKET"),
    ("CancelHandler", "POST"), ("FinishHandler", "POST"), ("ConfigHandler", "GET"), ("ConfigHandler", "HEAD"),
    ("ProposalsHandler", "POST"), ("ProposalsHandler", "GET"), ("ProposalsHandler", "HEAD"),
    ("ProposalHandler", "GET"), ("ProposalHandler", "HEAD"), ("NotebooksHandler", "GET"),
    ("NotebooksHandler", "HEAD"),
}


@on_server_loop
async def test_an_agent_token_reaches_the_agent_routes_and_nothing_else(server, jp_fetch, tokens_path):
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    record, token = AgentTokenStore(tokens_path).create("Claude Code", "me")
    try:
        # What it is for: the MCP tools, copies, proposals under the token's name.
        async with client(app, port, token=token) as c:
            out = data(await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": "df.a.sum()"}))
            assert out["value"]["preview"] == 6
            proposed = data(await c.call_tool("propose_cell", {"notebook": NOTEBOOK, "code": "df.a.sum()"}))
        listed = json.loads((await jp_fetch(NS, "proposals", params={"notebook_path": NOTEBOOK})).body)
        assert [p["agent"] for p in listed["proposals"]] == ["Claude Code"]
        auth = {"Authorization": f"token {token}"}
        opened = json.loads((await jp_fetch(NS, "notebooks", headers=auth)).body)["notebooks"]
        assert [n["path"] for n in opened] == [NOTEBOOK]
        saved = json.loads((await jp_fetch(NS, "notebooks", params={"path": NOTEBOOK}, headers=auth)).body)
        assert saved["content"]["cells"][1]["source"] == SETUP

        # What it is not for, named: the decision on its own proposal, the live kernel, the files.
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(NS, "proposals", proposed["proposal_id"], "decision", method="POST", headers=auth,
                           body=json.dumps({"decision": "accepted"}))
        assert err.value.code == 403
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("api", "contents", "work", "evil.ipynb", method="PUT", headers=auth,
                           body=json.dumps({"type": "notebook", "content": nbformat.v4.new_notebook()}))
        assert err.value.code == 403 and not (root / "work" / "evil.ipynb").exists()
        channels = HTTPRequest(f"ws://127.0.0.1:{port}{app.base_url}api/kernels/{km.kernel_id}/channels",
                               headers=auth, request_timeout=30)
        with pytest.raises(HTTPClientError) as err:
            await tornado.websocket.websocket_connect(channels)
        assert err.value.code == 403
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(NS, "agent-tokens", method="POST", headers=auth, body=json.dumps({"name": "more"}))
        assert err.value.code == 403

        # Every route of the server: outside the agent routes, the token is worth no token at all.
        routes = every_route(app.web_app)
        assert len(routes) > 40 and any(r.handler.__name__ == "ContentsHandler" for r in routes)
        async def probe(route, method, with_token=None):
            try:  # JupyterLab's licenses route never answers an anonymous GET (its 403 fails)
                return await asyncio.wait_for(status_of(port, route, method, token=with_token), 15)
            except (asyncio.TimeoutError, HTTPClientError):
                return None

        better, probed = [], 0
        for route in routes:
            for method in route.methods:
                if (route.handler.__name__, method) in AGENT_ROUTES:
                    continue
                if await probe(route, method) in (401, 403):  # refused without a token
                    probed += 1
                    code = await probe(route, method, token)
                    if code not in (401, 403):
                        better.append(f"{method} {route.pattern} ({route.handler.__name__}) -> {code}")
        assert probed > 40 and better == []
    finally:
        kc.stop_channels()


@on_server_loop
async def test_a_wrong_or_revoked_agent_token_is_refused(server, jp_fetch, tokens_path):
    app, port, root = server
    store = AgentTokenStore(tokens_path)
    record, token = store.create("Codex", "me")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}

    async def initialize(with_token: str) -> int:
        r = await AsyncHTTPClient().fetch(url(app, port), method="POST", body=json.dumps(init), raise_error=False,
                                          headers={"Authorization": f"token {with_token}",
                                                   "Content-Type": "application/json",
                                                   "Accept": "application/json, text/event-stream"},
                                          request_timeout=30)
        return r.code

    assert await initialize(token) == 200
    assert await initialize(token[:-2] + "zz") in (401, 403)
    # made and revoked in the browser, for the user (the agent's own token cannot)
    made = json.loads((await jp_fetch(NS, "agent-tokens", method="POST", body=json.dumps({"name": "Cursor"}))).body)
    assert made["token"].startswith("jda_") and await initialize(made["token"]) == 200
    listing = json.loads((await jp_fetch(NS, "agent-tokens")).body)["tokens"]
    assert {t["name"] for t in listing} == {"Codex", "Cursor"} and all("token" not in t for t in listing)
    assert next(t for t in listing if t["name"] == "Codex")["last_used"] is not None
    await jp_fetch(NS, "agent-tokens", made["id"], method="DELETE")
    assert await initialize(made["token"]) in (401, 403)
    store.revoke("Codex")  # from a terminal: the running server sees it at once
    assert await initialize(token) in (401, 403)
    async with client(app, port) as c:  # the server's own token is unaffected
        assert "No notebook" in error_text(await c.call_tool("read_notebook", {"notebook": "nope.ipynb"}))
