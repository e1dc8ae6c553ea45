"""A shared server: each user's rights, and one user's load never reaching another user.

A real Jupyter server with an identity provider that names three users and
an authorizer that refuses ``carol`` the ``execute`` right on kernels (as a
deployment gives read-only viewers), a real kernel behind alice's notebook,
and the MCP SDK's own client. What is attacked: every route that runs code
in a copy checks the execute right; an MCP session is ended only by its
owner; one user's sessions, tries and turns are bounded so another user's
go on.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from tests.test_server import NS, on_server_loop

pytest.importorskip("mcp")

from tests.test_mcp import NOTEBOOK, client, data, error_text, url
from tests.test_mcp import open_notebook as open_mcp_notebook

TOKENS = {"alice-token": "alice", "bob-token": "bob", "carol-token": "carol"}
ALICE = {"Authorization": "token alice-token"}
BOB = {"Authorization": "token bob-token"}
CAROL = {"Authorization": "token carol-token"}


class ThreeUsers(IdentityProvider):
    def get_user(self, handler):
        name = TOKENS.get(self.get_token(handler) or "")
        if name is None:
            return None
        handler._token_authenticated = True
        return User(username=name)


class CarolMayNotExecute(Authorizer):
    """Carol may read, not run code in kernels (not even in copies)."""

    def is_authorized(self, handler, user, action, resource):
        return not (user.username == "carol" and action == "execute" and resource == "kernels")


@pytest.fixture
def jp_server_config(monkeypatch, tmp_path):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_BACKEND", "JUPYTER_DATA_AGENT_MODEL",
                 "JUPYTER_DATA_AGENT_CONFINEMENT"):
        monkeypatch.delenv(name, raising=False)
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_data_agent": True},
                      "identity_provider_class": ThreeUsers, "authorizer_class": CarolMayNotExecute},
        "DataAgent": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-unused",
                      "model": "test-model", "max_retries": 0},
        "DataAgentExtension": {"max_concurrent_tries": 3, "max_concurrent_tries_per_user": 2,
                               "agent_tokens_path": str(tmp_path / "agent_tokens.json")},
        "MCPExtension": {"max_sessions_per_user": 3},
    }


@pytest.fixture
def server(jp_serverapp, http_server_client, jp_http_port, jp_root_dir):
    return jp_serverapp, jp_http_port, jp_root_dir


async def open_notebook(jp_fetch, app, root):
    """Alice's saved notebook, its kernel running with ``SETUP``'s state and a secret it alone holds."""
    km, kc = await open_mcp_notebook(jp_fetch, app, root, headers=ALICE)
    reply = await kc.execute("secret_of_alice = 'only-in-the-live-kernel'", reply=True, timeout=120)
    assert reply["content"]["status"] == "ok", reply["content"]
    return km, kc


async def mcp_post(app, port, token: str, body: dict, session: str | None = None):
    headers = {"Authorization": f"token {token}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-06-18"}
    if session:
        headers["Mcp-Session-Id"] = session
    return await AsyncHTTPClient().fetch(url(app, port), method="POST", body=json.dumps(body), headers=headers,
                                         raise_error=False, request_timeout=60)


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}


# -- the execute right -----------------------------------------------------------------


@on_server_loop
async def test_a_user_refused_execute_cannot_run_code_through_a_proposal(server, jp_fetch):
    """Finding C: POST proposals ran carol's code in a copy of alice's kernel."""
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    try:
        body = json.dumps({"notebook_path": NOTEBOOK, "kind": "cell", "code": "print(secret_of_alice)",
                           "explanation": "x", "agent": "carol's agent"})
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch(NS, "proposals", method="POST", body=body, headers=CAROL)
        assert refused.value.code == 403
        assert "only-in-the-live-kernel" not in refused.value.response.body.decode()
        for route, kwargs in ((("variables",), {"params": {"kernel_id": km.kernel_id}}),):
            with pytest.raises(HTTPClientError) as err:
                await jp_fetch(NS, *route, headers=CAROL, **kwargs)
            assert err.value.code == 403
        async with client(app, port, token="carol-token") as c:
            assert "may not run code" in error_text(await c.call_tool(
                "try_code", {"notebook": NOTEBOOK, "code": "secret_of_alice"}))
            assert "may not run code" in error_text(await c.call_tool(
                "propose_cell", {"notebook": NOTEBOOK, "code": "secret_of_alice"}))
        # nor can her agent: a token never holds more than the user who made it
        from jupyter_data_agent.store.agent_tokens import AgentTokenStore

        identity = app.web_app.settings["jupyter_data_agent"].agent_identity
        _, carols_agent = AgentTokenStore(identity.store.path).create("Carol's agent", "carol")
        async with client(app, port, token=carols_agent) as c:
            assert "may not run code" in error_text(await c.call_tool(
                "try_code", {"notebook": NOTEBOOK, "code": "secret_of_alice"}))
        # alice may: her proposal ran in a copy first
        r = await jp_fetch(NS, "proposals", method="POST", body=body, headers=ALICE)
        assert r.code == 201
        assert "only-in-the-live-kernel" in json.dumps(json.loads(r.body)["proposal"]["result"])
    finally:
        kc.stop_channels()


# -- MCP sessions --------------------------------------------------------------------------


@on_server_loop
async def test_a_session_is_ended_only_by_its_owner(server, jp_fetch):
    """Finding H: bob's DELETE with alice's session id closed alice's copies."""
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    tries = app.web_app.settings["jupyter_data_agent"].tries
    try:
        # the handshake era (a session id), as Claude Code, Codex and Cursor connect today
        async with client(app, port, token="alice-token", mode="legacy") as c:
            first = data(await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": "n = 41"}))
            handle = first["handle"]
            session = tries.handles[handle].session
            assert session
            r = await AsyncHTTPClient().fetch(url(app, port), method="DELETE", raise_error=False,
                                              headers={**BOB, "Mcp-Session-Id": session}, request_timeout=30)
            assert r.code == 404
            assert handle in tries.handles
            again = data(await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": "n + 1", "from": handle}))
            assert again["status"] == "ok" and again["value"]["preview"] == 42
    finally:
        kc.stop_channels()


@on_server_loop
async def test_one_users_sessions_are_bounded_and_another_user_still_opens_one(server):
    """Finding D: one user's sessions filled the SDK's pool for everyone."""
    app, port, root = server
    service = app.web_app.settings["jupyter_data_agent_mcp"]
    opened = []
    for _ in range(8):
        r = await mcp_post(app, port, "alice-token", INIT)
        assert r.code == 200, r.body
        opened.append(r.headers["Mcp-Session-Id"])
    open_now = service._open()
    alices = [s for s in opened if s in open_now]
    assert alices == opened[-3:], "alice holds more than her 3 sessions, or lost her newest"
    r = await mcp_post(app, port, "bob-token", INIT)
    assert r.code == 200 and r.headers["Mcp-Session-Id"] in service._open()
    # an evicted session answers 404 (the client opens a new one), the kept ones work
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert (await mcp_post(app, port, "alice-token", ping, session=opened[0])).code == 404
    assert (await mcp_post(app, port, "alice-token", ping, session=opened[-1])).code == 200


# -- tries -----------------------------------------------------------------------------------


@on_server_loop
async def test_one_users_slow_tries_do_not_hold_up_anothers(server, jp_fetch):
    """Finding E: alice's 34 slow tries made bob's ``2+2`` wait 98.9 s (one shared pool)."""
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    tries = app.web_app.settings["jupyter_data_agent"].tries
    try:
        async with client(app, port, token="alice-token") as a, client(app, port, token="bob-token") as b:
            slow = [asyncio.ensure_future(a.call_tool("try_code", {"notebook": NOTEBOOK, "timeout": 120,
                                                                   "code": "import time; time.sleep(8); 1"}))
                    for _ in range(5)]
            deadline = time.monotonic() + 120

            def alice() -> tuple[int, int]:
                return tries._slots.held.get("user:alice", 0), tries._slots.waiting("user:alice")

            while alice() != (2, 3) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert alice() == (2, 3)  # two running, three in her own line
            quick = data(await b.call_tool("try_code", {"notebook": NOTEBOOK, "code": "2 + 2"}))
            assert quick["value"]["preview"] == 4
            assert sum(t.done() for t in slow) <= 2, "bob's try waited behind alice's queued ones"
            results = [data(r) for r in await asyncio.gather(*slow)]
            assert all(r["status"] == "ok" for r in results)
    finally:
        kc.stop_channels()


# -- MCP tasks ------------------------------------------------------------------------------


@on_server_loop
async def test_a_task_id_names_nothing_for_another_user(server, jp_fetch):
    """The Tasks extension: bob can neither read nor cancel alice's task by its id."""
    from mcp.shared.exceptions import MCPError

    from tests.test_mcp_tasks import CancelTask, GetTask, TaskParams, Tasks, TaskState

    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    hers = Tasks()
    try:
        async with client(app, port, token="alice-token", extensions=[hers]) as a, \
                client(app, port, token="bob-token", extensions=[Tasks()]) as b:
            call = asyncio.ensure_future(a.call_tool("try_code", {"notebook": NOTEBOOK, "timeout": 60,
                                                                  "code": "import time; time.sleep(4); 'hers'"}))
            deadline = time.monotonic() + 60
            while not hers.handles and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            task_id = hers.handles[0].task_id
            for request in (GetTask, CancelTask):
                with pytest.raises(MCPError, match="No task"):
                    await b.session.send_request(request(params=TaskParams(task_id=task_id)), TaskState)
            out = data(await call)
            assert "hers" in json.dumps(out["value"]) and hers.polls[-1].status == "completed"
    finally:
        kc.stop_channels()
