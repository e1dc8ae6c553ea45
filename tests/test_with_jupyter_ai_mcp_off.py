"""Our MCP route beside Jupyter AI 3.2 (issue 38), in its venv (``.ci/run``: mcp SDK 1.x).

Jupyter AI's jupyter-server-mcp pins ``mcp<2`` and our MCP server needs 2.3+: a
real Jupyter server with this package loads both its extension points all the
same, the try handles' limits (every surface's) still come from
``c.MCPExtension``, the server log says once why the route is off and where the
tools are, the route answers 404 with those words in JSON (what an MCP client
shows), and the sidebar's routes work. Skipped where the SDK 2 is installed:
``tests/test_mcp.py`` serves the route there.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from importlib.metadata import version

import pytest

if importlib.util.find_spec("mcp_types") is not None:
    pytest.skip("the mcp SDK 2 is installed here, so our MCP route runs (tests/test_mcp.py); this is the "
                "venv beside Jupyter AI, with mcp 1.x", allow_module_level=True)

from tornado.httpclient import HTTPClientError

from jupyter_data_agent.mcp.extension import MCPExtension
from jupyter_data_agent.mcp.sdk import server_unavailable
from jupyter_data_agent.server.state import agent_state
from jupyter_data_agent.store.agent_tokens import AgentTokenStore
from tests.conftest import agent_server_config
from tests.test_server import NS, on_server_loop

OFF = "The Data Agent's MCP route /jupyter-data-agent/mcp is off"
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "1"}}})
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=lambda request: "```python\ndf.shape\n```")


@pytest.fixture
def tokens_path(tmp_path):
    return tmp_path / "tokens" / "agent_tokens.json"


@pytest.fixture
def jp_server_config(model_server, monkeypatch, tokens_path):
    config = agent_server_config(model_server, monkeypatch, {"agent_tokens_path": str(tokens_path)})
    config["MCPExtension"] = {
        "try_handle_ttl_s": 42.0, "max_try_handles_per_user": 5,  # applied: every surface's tries
        "max_sessions_per_user": 3,  # the route's alone: named in the warning
        # the extension's log reaches pytest's capture (traitlets keeps an app's log to itself)
        "logging_config": {"loggers": {"MCPExtension": {"propagate": True}}},
    }
    return config


async def fetch_status(jp_fetch, *parts: str, **kwargs) -> tuple[int, dict]:
    try:
        reply = await jp_fetch(*parts, **kwargs)
    except HTTPClientError as exc:
        assert exc.response is not None
        reply = exc.response
    return reply.code, json.loads(reply.body) if reply.body else {}


@on_server_loop
async def test_the_route_is_off_in_words_and_the_sidebar_works(jp_fetch, jp_serverapp, tokens_path, caplog):
    why = server_unavailable()
    assert why == (f"the mcp SDK here is {version('mcp')}; it needs 2.3 or later "
                   "(Jupyter AI's jupyter-server-mcp pins mcp<2)")
    # both extension points linked and loaded (their settings applied, their routes answer below);
    # the try handles' limits are c.MCPExtension's
    package = jp_serverapp.extension_manager.extensions["jupyter_data_agent"]
    assert package.enabled and len(package.extension_points) == 2
    assert all(point.linked for point in package.extension_points.values())
    assert any(isinstance(app, MCPExtension) for app in jp_serverapp.extension_manager.extension_apps[
        "jupyter_data_agent"])
    limits = agent_state(jp_serverapp.web_app.settings).tries.limits
    assert (limits.ttl_s, limits.max_handles_per_user) == (42.0, 5)
    # nothing of the SDK 2 was imported on the way
    assert "jupyter_data_agent.mcp.bridge" not in sys.modules and "jupyter_data_agent.mcp.tools" not in sys.modules

    # said once at startup: why, where the tools are, and the setting that goes unused
    said = [r for r in caplog.get_records("setup") if OFF in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING", [r.getMessage() for r in said]
    message = said[0].getMessage()
    assert f"is off: {why};" in message
    assert "jupyter-server-mcp's MCP host" in message and "jupyter_server_mcp.tools entry point" in message
    assert message.endswith("Not applied, without the route: c.MCPExtension.max_sessions_per_user.")

    # an MCP client's first request: 404 with the same words, with or without the trailing slash
    for route in ("mcp", "mcp/"):
        status, body = await fetch_status(jp_fetch, NS, route, method="POST", body=INITIALIZE,
                                          headers=MCP_HEADERS)
        assert status == 404 and body["message"].startswith(f"{OFF}: {why};"), (route, status, body)
    status, body = await fetch_status(jp_fetch, NS, "mcp", method="GET", headers=MCP_HEADERS)
    assert status == 404 and OFF in body["message"]
    # an agent's token (what MCP clients are given) gets the words too, not a refusal
    _, token = AgentTokenStore(tokens_path).create("Claude Code", "me")
    status, body = await fetch_status(jp_fetch, NS, "mcp", method="POST", body=INITIALIZE,
                                      headers={**MCP_HEADERS, "Authorization": f"token {token}"})
    assert status == 404 and OFF in body["message"], (status, body)
    # without a token: refused, and nothing about this server's packages
    status, body = await fetch_status(jp_fetch, NS, "mcp", method="POST", body=INITIALIZE,
                                      headers={**MCP_HEADERS, "Authorization": "token not-a-token"})
    assert status == 403 and version("mcp") not in json.dumps(body), (status, body)

    # the sidebar's routes are as ever
    status, config = await fetch_status(jp_fetch, NS, "config")
    assert status == 200 and config["model"] == "test-model" and config["strategies"], config
