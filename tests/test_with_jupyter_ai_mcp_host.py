"""Our MCP tools on Jupyter AI's MCP host (issue 38), in the venv with Jupyter AI 3.2 (``.ci/run``).

A real Jupyter server with this package and jupyter-server-mcp (on an
ephemeral port, found from its runtime info file), which loads our tools
through the ``jupyter_server_mcp.tools`` entry point next to Jupyter AI's; a
real kernel behind a real notebook; the mcp SDK 1.x's own Streamable HTTP
client, as the agents Jupyter AI runs speak it. The port has no login: the
tools act as the server's one principal, and refuse where users are told apart.
Skipped where jupyter-server-mcp is absent.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from importlib.metadata import entry_points

import pytest

pytest.importorskip("jupyter_server_mcp")

from mcp import ClientSession  # the SDK 1.x here
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import Implementation

from jupyter_data_agent.mcp.host import RENAMED, TOOLS
from jupyter_data_agent.server.state import agent_state
from tests.conftest import agent_server_config
from tests.notebook_helpers import NOTEBOOK, live_value, open_notebook
from tests.notebook_helpers import TOOLS as ROUTE_TOOLS
from tests.test_server import NS, on_server_loop

#: Our tools as this host lists them (read_notebook is Jupyter AI's own there).
OUR_TOOLS = {RENAMED.get(name, name) for name in ROUTE_TOOLS}


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=lambda request: "```python\ndf.shape\n```")


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    config = agent_server_config(model_server, monkeypatch)
    config["ServerApp"]["jpserver_extensions"]["jupyter_server_mcp"] = True
    config["MCPExtensionApp"] = {"mcp_port": 0}
    return config


def test_the_entry_point_names_every_tool():
    """What jupyter-server-mcp reads: our entry point's list, one "module:function" per tool."""
    (ours,) = [ep for ep in entry_points(group="jupyter_server_mcp.tools") if ep.name == "jupyter_data_agent"]
    assert ours.load() == TOOLS
    assert {spec.rsplit(":", 1)[1] for spec in TOOLS} == OUR_TOOLS


@asynccontextmanager
async def host(serverapp):
    """jupyter-server-mcp's host started as the server starts it (pytest-jupyter runs no start hooks),
    and an MCP session on its URL as its runtime info file publishes it."""
    (app,) = serverapp.extension_manager.extension_apps["jupyter_server_mcp"]
    await app.start_extension()
    try:
        info = json.loads(app._runtime_info_path.read_text())
        assert info["port"] != 0 and info["url"].endswith("/mcp"), info
        async with streamablehttp_client(info["url"]) as (read, write, _), ClientSession(
                read, write, client_info=Implementation(name="claude-code", title="Claude Code",
                                                        version="1.0")) as session:
            await session.initialize()
            yield session
    finally:
        await app.stop_extension()


def answer(result) -> dict:
    assert not result.isError, result.content[0].text
    body = json.loads(result.content[0].text)
    assert result.structuredContent == body
    return body


def refused(result) -> str:
    assert result.isError, result.content[0].text[:500]
    return result.content[0].text


@on_server_loop
async def test_our_tools_on_jupyter_ais_host(jp_fetch, jp_serverapp, jp_root_dir):
    km, kc = await open_notebook(jp_fetch, jp_serverapp, jp_root_dir)
    try:
        async with host(jp_serverapp) as session:
            listed = (await session.list_tools()).tools
            names = [t.name for t in listed]
            print("\ntools on Jupyter AI's MCP host:", ", ".join(names))
            # ours, next to Jupyter AI's notebook tools, each with its schema and output schema
            assert OUR_TOOLS <= set(names) and "read_notebook_cells" in names, names
            schemas = {t.name: t for t in listed}
            assert len(names) == len(set(names)) and "file_path" in schemas["read_notebook"].inputSchema[
                "properties"], "Jupyter AI's read_notebook is still its own"
            assert "from" in schemas["try_code"].inputSchema["properties"]
            assert all(schemas[n].outputSchema["type"] == "object" for n in OUR_TOOLS)

            # try_code: a real copy runs it, with progress; the user's kernel is unchanged
            progress: list[str] = []

            async def said(done, total, message):
                progress.append(message or "")

            tried = answer(await session.call_tool("try_code", {
                "notebook": NOTEBOOK, "code": "df['a'] = df['a'] * 10\nprint('in a copy')\ndf['a'].sum()"},
                progress_callback=said))
            assert tried["status"] == "ok" and tried["stdout"] == "in a copy\n", tried
            assert tried["value"]["preview"] == 60 and tried["handle"], tried
            assert "df" in json.dumps(tried["namespace"]), tried["namespace"]
            assert progress and progress[0].startswith("starting"), progress
            assert await live_value(kc, "int(df['a'].sum())") == "6"
            # and a child of that copy, by handle (the argument named "from")
            child = answer(await session.call_tool("try_code", {
                "notebook": NOTEBOOK, "code": "int(df['a'].max())", "from": tried["handle"]}))
            assert child["value"]["preview"] == 30 and child["from"] == tried["handle"], child

            # propose_cell: a pending proposal of the server's user, under the client's name
            made = answer(await session.call_tool("propose_cell", {
                "notebook": NOTEBOOK, "code": "df['a'].max()", "explanation": "The largest a.",
                "after_cell": "c1"}))
            assert made["status"] == "pending" and made["ran"] and made["output"]["value"]["preview"] == 3, made
            r = await jp_fetch(NS, "proposals", params={"notebook_path": NOTEBOOK})
            (proposal,) = json.loads(r.body)["proposals"]
            assert (proposal["id"], proposal["status"], proposal["agent"]) == (made["proposal_id"], "pending",
                                                                                "Claude Code"), proposal

            # bad input: words the agent can act on
            words = refused(await session.call_tool("propose_cell", {
                "notebook": NOTEBOOK, "code": "1", "after_cell": "no-such-cell"}))
            assert "No cell 'no-such-cell' in work/flights.ipynb (as last saved); its cells are: m1, c1." in words
            page = answer(await session.call_tool("read_notebook_pages", {"notebook": NOTEBOOK}))
            assert [c["id"] for c in page["cells"]] == ["m1", "c1"] and page["next_start"] is None, page
            words = refused(await session.call_tool("read_notebook_pages", {"notebook": "notes.txt"}))
            assert "'notes.txt' is not a notebook (.ipynb)." in words, words

            # where the server tells users apart, the port cannot say who calls: every tool refuses
            state = agent_state(jp_serverapp.web_app.settings)
            state.owner_scope = "user"
            try:
                words = refused(await session.call_tool("list_notebooks", {}))
            finally:
                state.owner_scope = "auto"
            assert "has no login, so it cannot say which user calls" in words, words
            assert "/jupyter-data-agent/mcp" in words and "token" in words, words
    finally:
        kc.stop_channels()
