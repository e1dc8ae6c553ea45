"""``jupyter-data-agent acp`` end to end: the ACP SDK's client side drives the agent over stdio.

A real Jupyter server (pytest-jupyter's, with this extension), a real kernel behind a
notebook session, the OpenAI-protocol test server as the model, and the agent as the
subprocess an ACP client (jupyter-ai's persona host, Zed, a JetBrains IDE) would start.
A prompt becomes a turn; progress and the candidates stream as ACP updates; the chosen
candidate arrives as a proposal in the notebook, pending the user's Accept; the live
kernel is not touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import acp
import nbformat
import pytest

from tests.notebook_helpers import NOTEBOOK, open_notebook
from tests.test_server import (  # noqa: F401 -- pytest fixtures, used by name
    jp_server_config,
    model_server,
    on_server_loop,
)

REPO = Path(__file__).resolve().parents[1]


class RecordingClient:
    """The ACP client's side: records what the agent streams; grants nothing."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if getattr(u, "session_update", "") == kind]

    def texts(self, kind: str) -> str:
        return "".join(u.content.text for u in self.updates
                       if getattr(u, "session_update", "") == kind and getattr(u.content, "type", "") == "text")


@pytest.mark.timeout(240)
@on_server_loop
async def test_a_prompt_becomes_a_turn_and_a_pending_proposal(jp_fetch, jp_serverapp, jp_root_dir):
    _, kc = await open_notebook(jp_fetch, jp_serverapp, jp_root_dir)
    try:
        env = {**os.environ, "JUPYTER_DATA_AGENT_SERVER_URL": jp_serverapp.connection_url.rstrip("/"),
               "JUPYTER_DATA_AGENT_TOKEN": jp_serverapp.identity_provider.token,
               "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        client = RecordingClient()
        async with acp.spawn_agent_process(lambda agent: client, sys.executable, "-m", "jupyter_data_agent.cli",
                                           "acp", env=env, cwd=str(jp_root_dir)) as (conn, _proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION,
                                         client_info=acp.schema.Implementation(name="test-ide", version="1"))
            assert init.agent_info.name == "jupyter-data-agent"
            session = await conn.new_session(cwd=str(jp_root_dir), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[
                acp.text_block(f"/vote @{NOTEBOOK} How many rows have a above 1?")])
        assert reply.stop_reason == "end_turn"
        thoughts, said = client.texts("agent_thought_chunk"), client.texts("agent_message_chunk")
        assert "Running the vote strategy." in thoughts, thoughts
        assert "len(big)" in said and f"Proposed as a new cell in {NOTEBOOK}" in said, said
        # the reply: the chosen candidate's code once, and its answer (the run's value: 2 rows)
        assert said.count("len(big)") == 1 and said.count("```python") == 1, said
        assert "**Answer:** 2" in said, said
        # the slash commands, as Zed lists them
        commands = client.of("available_commands_update")
        assert len(commands) == 1, client.updates
        offered = {c.name: c.description for c in commands[0].available_commands}
        assert set(offered) == {"vote", "search", "analysis", "react", "quick"} and all(offered.values())
        # each run in a copy is an execute tool call that completes with what the run gave
        starts, ends = client.of("tool_call"), client.of("tool_call_update")
        assert starts and len(starts) == len(ends), client.updates
        assert {s.kind for s in starts} == {"execute"} and starts[0].title == "Run candidate 1 in a copy"
        assert {s.tool_call_id for s in starts} == {e.tool_call_id for e in ends}
        assert {e.status for e in ends} == {"completed"}
        outputs = [c.content.text for e in ends for c in e.content]
        assert "```python\n# Step 1" in outputs[0] and outputs[1] == "2", outputs
        r = await jp_fetch("jupyter-data-agent", "proposals", params={"notebook_path": NOTEBOOK})
        proposals = json.loads(r.body)["proposals"]
        assert len(proposals) == 1, proposals
        proposal = proposals[0]
        assert proposal["status"] == "pending" and proposal["kind"] == "cell"
        assert "len(big)" in proposal["code"] and proposal["agent"] == "Data Agent (ACP, test-ide)"
        assert proposal["id"] in said
        # the turn is the notebook's, listed with the agent that asked (issue 36)
        r = await jp_fetch("jupyter-data-agent", "turns", params={"notebook_path": NOTEBOOK})
        assert [(t["source"], t["agent"], t["status"]) for t in json.loads(r.body)["turns"]] == [
            ("acp", "Data Agent (ACP, test-ide)", "done")]
        # run in a copy before it was proposed, never in the live kernel
        assert proposal["result"] and proposal["result"]["status"] == "ok", proposal
        user = await kc.execute("", user_expressions={"r": "'big' in globals()"}, reply=True, timeout=30)
        assert user["content"]["user_expressions"]["r"]["data"]["text/plain"] == "False"
        # the notebook file is as it was: the proposal waits for the user's Accept
        assert len(nbformat.read(jp_root_dir / NOTEBOOK, as_version=4).cells) == 2
    finally:
        kc.stop_channels()


@pytest.mark.timeout(120)
@on_server_loop
async def test_without_a_notebook_the_agent_says_which_to_name(jp_fetch, jp_serverapp, jp_root_dir):
    env = {**os.environ, "JUPYTER_DATA_AGENT_SERVER_URL": jp_serverapp.connection_url.rstrip("/"),
           "JUPYTER_DATA_AGENT_TOKEN": jp_serverapp.identity_provider.token,
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    client = RecordingClient()
    async with acp.spawn_agent_process(lambda agent: client, sys.executable, "-m", "jupyter_data_agent.cli",
                                       "acp", env=env, cwd=str(jp_root_dir)) as (conn, _proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(jp_root_dir), mcp_servers=[])
        reply = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("Which city is first?")])
    assert reply.stop_reason == "end_turn"
    assert "Name the notebook with @path.ipynb (open notebooks: none is open)" in client.texts("agent_message_chunk")


def agent_env(jp_serverapp, **overrides: str) -> dict:
    """The agent process's environment: this server and its token, unless ``overrides`` say otherwise."""
    return {**os.environ, "JUPYTER_DATA_AGENT_SERVER_URL": jp_serverapp.connection_url.rstrip("/"),
            "JUPYTER_DATA_AGENT_TOKEN": jp_serverapp.identity_provider.token,
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
            **overrides}


async def ask(env: dict, cwd: Path, *blocks: Any) -> tuple[Any, RecordingClient]:
    """One prompt to a fresh agent process: (its reply, what it streamed)."""
    client = RecordingClient()
    async with acp.spawn_agent_process(lambda agent: client, sys.executable, "-m", "jupyter_data_agent.cli",
                                       "acp", env=env, cwd=str(cwd)) as (conn, _proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        reply = await conn.prompt(session_id=session.session_id, prompt=list(blocks))
    return reply, client


@pytest.mark.timeout(180)
@on_server_loop
async def test_what_stops_a_turn_is_said_in_words_without_the_token(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """A refused token, a server that is down, a notebook outside the root or not there: each a
    message the IDE shows in the thread and the end of the turn, not JSON-RPC's "Internal error"."""
    token = jp_serverapp.identity_provider.token
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"
    outside = tmp_path / "elsewhere" / "other.ipynb"
    (jp_root_dir / "work").mkdir(exist_ok=True)
    cases = [
        (agent_env(jp_serverapp, JUPYTER_DATA_AGENT_TOKEN="wrong-token-1234"), f"@{NOTEBOOK} Count the rows",
         "refused the token (403): check JUPYTER_DATA_AGENT_TOKEN"),
        (agent_env(jp_serverapp, JUPYTER_DATA_AGENT_SERVER_URL=down), f"@{NOTEBOOK} Count the rows",
         f"cannot reach JupyterLab at {down}: ConnectError"),
        (agent_env(jp_serverapp), f"@{outside} Count the rows",
         f"{outside} is outside the root of the Jupyter server"),
        (agent_env(jp_serverapp), f"@{jp_root_dir}/work/missing.ipynb Count the rows",
         "There is no notebook work/missing.ipynb under the server's root"),
    ]
    for env, text, words in cases:
        reply, client = await ask(env, jp_root_dir, acp.text_block(text))
        said = client.texts("agent_message_chunk")
        assert reply.stop_reason == "end_turn" and words in said, said
        assert token not in said and "wrong-token-1234" not in said, said


@pytest.mark.timeout(240)
@on_server_loop
async def test_an_absolute_file_uri_is_the_open_notebook_under_the_root(jp_fetch, jp_serverapp, jp_root_dir):
    """Zed links a notebook by its absolute file URI: it is the open notebook with its kernel."""
    _, kc = await open_notebook(jp_fetch, jp_serverapp, jp_root_dir)
    try:
        uri = (jp_root_dir / NOTEBOOK).resolve().as_uri()
        reply, client = await ask(agent_env(jp_serverapp), jp_root_dir,
                                  acp.text_block("/quick How many rows have a above 1?"),
                                  acp.resource_link_block(name="flights.ipynb", uri=uri))
        said = client.texts("agent_message_chunk")
        assert reply.stop_reason == "end_turn" and f"Proposed as a new cell in {NOTEBOOK}" in said, said
        assert "**Answer:** 2" in said and "not open in JupyterLab" not in client.texts("agent_thought_chunk")
        r = await jp_fetch("jupyter-data-agent", "notebooks")
        assert json.loads(r.body)["root"] == os.path.realpath(jp_serverapp.root_dir)
    finally:
        kc.stop_channels()


@pytest.mark.timeout(180)
@on_server_loop
async def test_a_cancel_is_cancelled(jp_fetch, jp_serverapp, jp_root_dir, model_server):  # noqa: F811
    """The IDE's Stop: the prompt ends with stop reason "cancelled" and no "turn failed" message."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", id="c1")]
    (jp_root_dir / "work").mkdir(exist_ok=True)
    nbformat.write(nb, str(jp_root_dir / NOTEBOOK))
    model_server.delay = 20.0  # the turn sits in the model call
    client = RecordingClient()
    async with acp.spawn_agent_process(lambda agent: client, sys.executable, "-m", "jupyter_data_agent.cli",
                                       "acp", env=agent_env(jp_serverapp), cwd=str(jp_root_dir)) as (conn, _proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(jp_root_dir), mcp_servers=[])
        asked = asyncio.ensure_future(conn.prompt(session_id=session.session_id, prompt=[
            acp.text_block(f"/quick @{NOTEBOOK} What is x?")]))
        for _ in range(200):  # until the turn is under way
            if client.of("agent_thought_chunk") and len(client.texts("agent_thought_chunk")) > 80:
                break
            await asyncio.sleep(0.1)
        await conn.cancel(session_id=session.session_id)
        reply = await asyncio.wait_for(asked, 60)
    assert reply.stop_reason == "cancelled" and client.texts("agent_thought_chunk").endswith("Cancelled.\n")
    assert "failed" not in client.texts("agent_message_chunk"), client.texts("agent_message_chunk")


def test_an_analysis_plan_is_an_acp_plan_and_its_runs_are_tool_calls():
    """An analysis's progress (as the server validates it) becomes the IDE's plan checklist; a
    candidate that ran without a "running" step still shows as a finished tool call."""
    from jupyter_data_agent.mcp.acp_updates import TurnView
    from jupyter_data_agent.turn.events import validate_event

    plan = [{"number": 1, "title": "Load the flights", "status": "ok"},
            {"number": 2, "title": "Average delay per airline", "status": "running"},
            {"number": 3, "title": "Plot it", "status": "pending"}]
    event = validate_event({"version": 1, "job_id": "j1", "seq": 4, "type": "progress",
                            "message": "step 2 of 3: running", "data": {"state": "step", "turn": 2, "plan": plan}})
    view = TurnView("j1")
    updates = view.updates(event)
    assert [u.session_update for u in updates] == ["plan", "agent_thought_chunk"]
    assert [(e.content, e.status) for e in updates[0].entries] == [
        ("Step 1: Load the flights", "completed"), ("Step 2: Average delay per airline", "in_progress"),
        ("Step 3: Plot it", "pending")]
    again = view.updates(event)  # the same plan is not sent again
    assert [u.session_update for u in again] == ["agent_thought_chunk"]
    failed = {"code": "df.plot()", "result": {"status": "error", "outputs": [], "ename": "KeyError",
                                              "evalue": "'delay'"}}
    [call] = view.updates({"type": "candidate", "message": "analysis finished",
                           "data": {"index": 0, "candidate": failed}})
    assert call.session_update == "tool_call" and call.status == "failed" and call.kind == "execute"
    assert call.content[1].content.text == "KeyError: 'delay'"
