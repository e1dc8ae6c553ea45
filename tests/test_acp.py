"""``jupyter-data-agent acp`` end to end: the ACP SDK's client side drives the agent over stdio.

A real Jupyter server (pytest-jupyter's, with this extension), a real kernel behind a
notebook session, the OpenAI-protocol test server as the model, and the agent as the
subprocess an ACP client (jupyter-ai's persona host, Zed, a JetBrains IDE) would start.
A prompt becomes a turn; progress and the candidates stream as ACP updates; the chosen
candidate arrives as a proposal in the notebook, pending the user's Accept; the live
kernel is not touched.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import acp
import nbformat
import pytest

from tests.test_mcp import NOTEBOOK, open_notebook
from tests.test_server import (  # noqa: F401 -- pytest fixtures, used by name
    jp_server_config,
    model_server,
    on_server_loop,
)

pytest_plugins = ["pytest_jupyter.jupyter_server"]

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
        r = await jp_fetch("jupyter-data-agent", "proposals", params={"notebook_path": NOTEBOOK})
        proposals = json.loads(r.body)["proposals"]
        assert len(proposals) == 1, proposals
        proposal = proposals[0]
        assert proposal["status"] == "pending" and proposal["kind"] == "cell"
        assert "len(big)" in proposal["code"] and proposal["agent"] == "Data Agent (ACP, test-ide)"
        assert proposal["id"] in said
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
