"""``@DataAgent`` in Jupyter AI's chat (issue 38), in the venv with Jupyter AI 3.2 (``.ci/run``).

A real Jupyter server with jupyterlab_chat, Jupyter AI's router and persona
manager and this package; the chat is driven through its own websocket as the
browser does, the persona is loaded from this package's entry point, and the
model is the local OpenAI-protocol server. Skipped where Jupyter AI is absent.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

pytest.importorskip("jupyter_ai_persona_manager")

from jupyter_data_agent.mcp.persona import WORKING
from tests.conftest import agent_server_config
from tests.notebook_helpers import NOTEBOOK, live_value, open_notebook
from tests.test_server import NS, on_server_loop

PERSONA_ID = "jupyter-ai-personas::jupyter_data_agent::DataAgentPersona"
CHAT = "work/ask.chat"
ANSWER = ("```python\n# Step 1: Count the rows where a is above 1.\nbig_rows = int((df['a'] > 1).sum())\n"
          "print(big_rows)\n```")


PROSE = ("The column `a` holds small whole numbers (1 to 3); `city` names a city per row. "
         "<img src=x onerror=alert(1)>")


def reply(request) -> str:
    return PROSE if "What do the columns hold" in request.prompt else ANSWER


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=reply)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    config = agent_server_config(model_server, monkeypatch)
    config["ServerApp"]["jpserver_extensions"].update(
        {"jupyterlab_chat": True, "jupyter_ai_router": True, "jupyter_ai_persona_manager": True})
    return config


def test_the_entry_point_loads_a_base_persona():
    """What Jupyter AI's persona manager loads: this package's ``jupyter_ai.personas`` entry point."""
    from importlib.metadata import entry_points

    from jupyter_ai_persona_manager import BasePersona

    (ours,) = [ep for ep in entry_points(group="jupyter_ai.personas") if ep.value.startswith("jupyter_data_agent")]
    persona = ours.load()
    assert issubclass(persona, BasePersona) and not getattr(persona, "__abstractmethods__", None)


async def open_chat(jp_ws_fetch, jp_serverapp, root_dir):
    """The chat's websocket, once the persona manager of this chat has loaded our persona."""
    (root_dir / CHAT).parent.mkdir(exist_ok=True)
    ws = await jp_ws_fetch("api", "chat", "ws", CHAT)
    for _ in range(300):
        managers = jp_serverapp.web_app.settings.get("jupyter-ai", {}).get("persona-managers", {})
        if any(PERSONA_ID in m.personas for m in managers.values()):
            return ws
        await asyncio.sleep(0.1)
    raise AssertionError(f"no persona manager loaded {PERSONA_ID}: {list(managers)}")


async def ask(ws, body: str, timeout: float = 180.0) -> list[str]:
    """Send ``body`` to the persona; every body its reply had, up to the last (no longer progress)."""
    ws.write_message(json.dumps({"type": "client", "action": "send", "id": uuid.uuid4().hex, "body": body,
                                 "sender": {"username": "analyst"}, "metadata": {"to_persona": PERSONA_ID}}))
    seen: list[str] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, f"no final reply; the persona wrote: {seen}"
        frame = await asyncio.wait_for(ws.read_message(), left)
        assert frame is not None, f"the chat closed; the persona wrote: {seen}"
        data = json.loads(frame)
        message = data.get("message") or {}
        if data.get("action") == "message" and message.get("sender") == PERSONA_ID:
            seen.append(message["body"])
            if not message["body"].startswith(WORKING):
                return seen


@on_server_loop
async def test_a_data_agent_message_becomes_a_pending_suggestion(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                 jp_root_dir, model_server):
    km, kc = await open_notebook(jp_fetch, jp_serverapp, jp_root_dir)
    try:
        ws = await open_chat(jp_ws_fetch, jp_serverapp, jp_root_dir)
        bodies = await ask(ws, f"@DataAgent /vote how many rows have a above 1? @file:{NOTEBOOK}")
        final = bodies[-1]
        print("\n@DataAgent replied:\n" + "\n---\n".join(bodies))
        assert len(bodies) >= 2, bodies  # the progress first, then the answer, in the same message
        assert "big_rows = int((df['a'] > 1).sum())" in final and "2" in final, final
        assert "candidates agree on this answer" in final and f"Placed in **{NOTEBOOK}**" in final, final
        r = await jp_fetch(NS, "proposals", params={"notebook_path": NOTEBOOK})
        (proposal,) = json.loads(r.body)["proposals"]
        assert proposal["status"] == "pending" and proposal["agent"] == "Jupyter AI: DataAgent"
        assert "big_rows" in proposal["code"] and proposal["result"]["status"] == "ok", proposal
        # the candidates ran in copies: the live kernel has no big_rows until the user accepts
        assert await live_value(kc, "'big_rows' in globals()") == "False"
        turns = json.loads((await jp_fetch(NS, "turns", params={"notebook_path": NOTEBOOK})).body)["turns"]
        assert [(t["source"], t["strategy"], t["status"]) for t in turns] == [("jupyter-ai", "vote", "done")]
        ws.close()
    finally:
        kc.stop_channels()


@on_server_loop
async def test_a_question_without_code_gets_words_and_no_suggestion(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                    jp_root_dir):
    km, kc = await open_notebook(jp_fetch, jp_serverapp, jp_root_dir)
    try:
        ws = await open_chat(jp_ws_fetch, jp_serverapp, jp_root_dir)
        final = (await ask(ws, "@DataAgent /direct What do the columns hold?"))[-1]
        print("\n@DataAgent replied:\n" + final)
        assert final.startswith("The column `a` holds small whole numbers") and "Placed in" not in final, final
        assert "<img" not in final and "&lt;img src=x" in final  # the model's HTML shown as text
        r = await jp_fetch(NS, "proposals", params={"notebook_path": NOTEBOOK})
        assert json.loads(r.body)["proposals"] == []
        ws.close()
    finally:
        kc.stop_channels()


@on_server_loop
async def test_a_message_it_cannot_use_is_answered_in_words(jp_ws_fetch, jp_serverapp, jp_root_dir):
    ws = await open_chat(jp_ws_fetch, jp_serverapp, jp_root_dir)
    (unknown,) = await ask(ws, "@DataAgent /frobnicate the data")
    assert unknown.startswith("Unknown command /frobnicate") and "/vote" in unknown, unknown
    (nothing_open,) = (await ask(ws, "@DataAgent what is the mean of a?"))[-1:]
    assert "No notebook is open with a running kernel" in nothing_open, nothing_open
    ws.close()
