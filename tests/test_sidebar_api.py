"""The server parts of the sidebar: answering from the notebook text while the
kernel is busy, and the turn fields the sidebar stores in the notebook
(failure, bounded previews), which the Python readers must keep and ignore.

Real Jupyter server and kernels; the model is the OpenAI-protocol test server
(shared with tests/test_server.py).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_data_agent.context.notebook import from_notebook
from jupyter_data_agent.context.turns import read_turns
from tests.test_server import (
    NS,
    STEP_REPLY,
    on_server_loop,
    poll_until,
    post_turn,
    start_kernel,
    states,
    stream_events,
)


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    """Serves the configured model and one alternative (c.DataAgent.models)."""
    return model_server_factory(reply=STEP_REPLY, models=["test-model", "big-model", "other-model"])


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    from tests.conftest import agent_server_config

    model_server.clear()
    return agent_server_config(model_server, monkeypatch, {"kernel_wait_notice_s": 1.0},
                               models=["big-model", "test-model", " "],
                               prices={"big-model": {"input": 2.5, "output": 10}})


async def config(jp_fetch) -> dict:
    return json.loads((await jp_fetch(NS, "config")).body)


@on_server_loop
async def test_config_offers_the_configured_models(jp_fetch):
    # The configured model first, no duplicates or blanks.
    assert (await config(jp_fetch))["models"] == ["test-model", "big-model"]


@on_server_loop
async def test_a_turn_runs_on_the_model_it_names(jp_fetch, jp_ws_fetch, model_server):
    job_id = (await post_turn(jp_fetch, model="big-model"))["job_id"]
    events = await stream_events(jp_ws_fetch, job_id)
    assert events[-1]["type"] == "done"
    assert [r.body.get("model") for r in model_server.generation_requests] == ["big-model"]
    # Without a model: the configured one.
    model_server.clear()
    job_id = (await post_turn(jp_fetch))["job_id"]
    assert (await stream_events(jp_ws_fetch, job_id))[-1]["type"] == "done"
    assert [r.body.get("model") for r in model_server.generation_requests] == ["test-model"]


@on_server_loop
async def test_each_turn_keeps_the_model_it_ran_on_and_its_tokens(jp_fetch, jp_ws_fetch):
    """M1 (issue 40): a turn's cost is its own model's price, not the one picked later, so the
    ``done`` result and ``GET turns`` name the model each turn ran on, with its token counts."""
    reply = await config(jp_fetch)
    assert reply["price"] is None and reply["prices"] == {"big-model": {"input": 2.5, "output": 10}}
    done = {}
    for model in ("big-model", None):
        job_id = (await post_turn(jp_fetch, **({"model": model} if model else {})))["job_id"]
        events = await stream_events(jp_ws_fetch, job_id)
        assert events[-1]["type"] == "done"
        done[job_id] = events[-1]["data"]["result"]
    assert [r["model"] for r in done.values()] == ["big-model", "test-model"]
    for result in done.values():
        stats = result["stats"]
        assert stats["model_calls"] == 1 and stats["prompt_tokens"] > 0 and stats["completion_tokens"] > 0
    listed = json.loads((await jp_fetch(NS, "turns", params={"notebook_path": "analysis.ipynb"})).body)
    models = {t["job_id"]: t["model"] for t in listed["turns"] if t["job_id"] in done}
    assert models == {job_id: result["model"] for job_id, result in done.items()}


@on_server_loop
async def test_a_model_not_offered_is_refused_in_words(jp_fetch, model_server):
    # Served by the endpoint, but not offered by this server's configuration.
    with pytest.raises(HTTPClientError) as err:
        await post_turn(jp_fetch, model="other-model")
    assert err.value.code == 400
    message = json.loads(err.value.response.body)["message"]
    assert "'other-model' is not offered" in message and "test-model, big-model" in message
    assert model_server.generation_requests == []


@on_server_loop
async def test_a_busy_kernel_can_be_skipped(jp_fetch, jp_ws_fetch, jp_serverapp):
    """The panel's "answer from the notebook text now": the turn stops waiting
    and goes on without live state, long before the running cell ends."""
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        kc.execute("import time; time.sleep(60)")
        await asyncio.sleep(0.5)
        started = time.monotonic()
        job_id = (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"]
        events = await poll_until(jp_fetch, job_id,
                                  lambda e: e["data"].get("state") == "waiting_for_kernel")
        assert "waiting_for_kernel" in states(events)

        r = await jp_fetch(NS, "jobs", job_id, "no-kernel", method="POST", body="{}")
        assert json.loads(r.body)["status"] == "running"

        events = await stream_events(jp_ws_fetch, job_id)
        assert events[-1]["type"] == "done"
        assert time.monotonic() - started < 45, "the turn still waited for the kernel"
        got = states(events)
        assert got.index("waiting_for_kernel") < got.index("no_kernel")
        assert "kernel_ready" not in got
        notice = next(e for e in events if e["data"].get("state") == "no_kernel")
        assert "notebook text" in notice["message"]
        cand = next(e for e in events if e["type"] == "candidate")["data"]["candidate"]
        assert cand["result"] is None  # nothing ran: there was no kernel copy

        # Too late now: the turn has ended.
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(NS, "jobs", job_id, "no-kernel", method="POST", body="{}")
        assert err.value.code == 409
    finally:
        await km.interrupt_kernel()
        kc.stop_channels()


@on_server_loop
async def test_no_kernel_for_an_unknown_job_is_404(jp_fetch):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "jobs", "no-such-job", "no-kernel", method="POST", body="{}")
    assert err.value.code == 404


def _stored_by_the_sidebar() -> dict:
    """A notebook as the sidebar writes it (tests/data/turns.golden.ipynb holds
    every kind of turn): a stopped turn, then a pending one with a bounded
    preview (src/metadata.ts boundPreviews)."""
    return {
        "cells": [
            {"cell_type": "code", "id": "c1", "source": "len(df)", "metadata": {
                "jupyter_data_agent": {"turn_id": "t2", "intent": "How many rows?",
                                       "status": "pending"}},
             "outputs": [], "execution_count": None},
        ],
        "metadata": {"jupyter_data_agent": {
            "version": 1,
            "strategy": "vote",
            "turns": [
                {"turn_id": "t1", "intent": "List the airlines", "code": "", "status": "pending",
                 "cell_ids": [], "candidates": [], "created": 1.0, "explanations": [],
                 "strategy": "direct", "failure": {"status": "cancelled", "reason": ""}},
                {"turn_id": "t2", "intent": "How many rows?", "code": "len(df)",
                 "status": "pending", "cell_ids": ["c1"], "candidates": ["len(df)"],
                 "created": 2.0, "explanations": ["Count the rows."], "strategy": "direct",
                 "previews": [[{"output_type": "execute_result", "data": {"text/plain": "5"},
                                "metadata": {}, "execution_count": None}]]},
            ],
        }},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_a_failed_turn_does_not_reach_the_prompt_as_a_solution():
    nb = _stored_by_the_sidebar()
    context = from_notebook(nb)
    by_id = {t.turn_id: t for t in context.turns}
    assert by_id["t1"].code == "" and by_id["t1"].cell_ids == []
    assert by_id["t1"].extra["failure"]["status"] == "cancelled"
    # Malformed sidebar fields are kept as they were, never fail the read.
    nb["metadata"]["jupyter_data_agent"]["turns"][0]["previews"] = "oops"
    assert read_turns(nb)[0].extra["previews"] == "oops"
