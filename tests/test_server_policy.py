"""The server turn under the confinement policy, and what a turn may never leak or hold.

A real Jupyter server, real kernels and the real OpenAI SDK against the local
OpenAI-protocol server, as in ``test_server.py`` (whose helpers these tests
reuse). Each test may change the server's configuration through the
``server_overrides`` fixture (parametrized indirectly).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from tests.test_server import (
    KEY,
    NS,
    confinement_of,
    on_server_loop,
    poll,
    post_turn,
    replies,
    start_kernel,
    states,
    stream_events,
    wait_no_children,
    warm_root_pids,
)

NO_SECCOMP = {"DataAgent": {"snapshot_limits": {"seccomp": False}}}


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


@pytest.fixture
def server_overrides(request) -> dict:
    """``{"DataAgent": {...}, "DataAgentExtension": {...}}`` merged into the config."""
    return getattr(request, "param", {})


@pytest.fixture
def jp_server_config(model_server, monkeypatch, server_overrides):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_BACKEND",
                 "JUPYTER_DATA_AGENT_MODEL", "JUPYTER_DATA_AGENT_CONFINEMENT"):
        monkeypatch.delenv(name, raising=False)
    model_server.clear()
    model_server.delay = 0.0
    model_server.reply = replies
    config = {
        "ServerApp": {"jpserver_extensions": {"jupyter_data_agent": True}},
        "DataAgent": {"backend": "openai", "base_url": model_server.base_url, "api_key": KEY,
                      "model": "test-model", "max_retries": 0},
        "DataAgentExtension": {"kernel_wait_notice_s": 1.0},
    }
    for section, values in server_overrides.items():
        config.setdefault(section, {}).update(values)
    return config


# -- the confinement policy ----------------------------------------------------------


@pytest.mark.parametrize("server_overrides", [NO_SECCOMP], indirect=True)
@on_server_loop
async def test_require_generates_but_does_not_run_in_partial_copies(
        server_overrides, jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"])
        assert events[-1]["type"] == "done", events[-1]
        report = confinement_of(events)
        assert report["policy"] == "require" and report["status"] == "not_executed"
        assert report["execute"] is False and report["missing"] == ["seccomp"]
        assert "seccomp" in report["message"] and "confinement = 'warn'" in report["message"]
        seccomp = next(layer for layer in report["layers"] if layer["name"] == "seccomp")
        assert seccomp == {"name": "seccomp", "on": False, "detail": "disabled by configuration"}
        # Generated, explained, not run: no preview, and no copy left.
        cand = [e for e in events if e["type"] == "candidate"][0]["data"]["candidate"]
        assert "big = df[df['a'] > 1]" in cand["code"] and cand["result"] is None
        assert await wait_no_children(km, but=warm_root_pids(jp_serverapp)) == []
        # The old per-turn warning is gone: one report, one place.
        assert "partial_confinement" not in states(events)
    finally:
        kc.stop_channels()


@pytest.mark.parametrize("server_overrides", [{"DataAgent": {**NO_SECCOMP["DataAgent"],
                                                              "confinement": "warn"}}],
                         indirect=True)
@on_server_loop
async def test_warn_runs_and_lists_what_is_missing(server_overrides, jp_fetch, jp_ws_fetch,
                                                   jp_serverapp):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"])
        assert events[-1]["type"] == "done", events[-1]
        report = confinement_of(events)
        assert report["policy"] == "warn" and report["status"] == "partial"
        assert report["execute"] is True and report["missing"] == ["seccomp"]
        cand = [e for e in events if e["type"] == "candidate"][0]["data"]["candidate"]
        assert cand["result"]["status"] == "ok"
        assert await wait_no_children(km, but=warm_root_pids(jp_serverapp)) == []
    finally:
        kc.stop_channels()


@on_server_loop
async def test_no_kernel_reports_not_executed_with_the_reason(jp_fetch, jp_ws_fetch):
    events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=None))["job_id"])
    assert events[-1]["type"] == "done"
    report = confinement_of(events)
    assert report["status"] == "not_executed" and report["layers"] == []
    assert "the notebook has no running kernel" in report["message"]


# -- capacity: a cancelled turn stuck in a model call frees its slot at once --------


@pytest.mark.parametrize("server_overrides", [{"DataAgentExtension": {"max_concurrent_jobs": 1}}],
                         indirect=True)
@on_server_loop
async def test_cancel_frees_the_slot_of_a_turn_stuck_in_the_model(server_overrides, jp_fetch,
                                                                   jp_ws_fetch, model_server):
    no_kernel = {"options": {"use_live_state": False}}
    model_server.delay = 60.0  # the first turn's model call hangs
    stuck = (await post_turn(jp_fetch, **no_kernel))["job_id"]
    deadline = time.monotonic() + 60
    while not model_server.generation_requests:
        assert time.monotonic() < deadline, "the first turn never called the model"
        await asyncio.sleep(0.1)
    model_server.delay = 0.0  # read once per request: only the first one hangs
    queued = (await post_turn(jp_fetch, **no_kernel))["job_id"]
    while "queued" not in states((await poll(jp_fetch, queued))["events"]):
        assert time.monotonic() < deadline, "the second turn should wait for the only slot"
        await asyncio.sleep(0.1)

    started = time.monotonic()
    r = await jp_fetch(NS, "jobs", stuck, "cancel", method="POST", body="{}")
    assert json.loads(r.body)["status"] == "cancelled"
    events = await stream_events(jp_ws_fetch, queued, timeout=30)
    assert events[-1]["type"] == "done", events[-1]
    assert time.monotonic() - started < 15, "the queued turn waited for the abandoned model call"
    assert len(model_server.generation_requests) == 2


# -- secrets ---------------------------------------------------------------------------


def leaky_replies(request) -> str:
    """A candidate that prints the key encoded three ways, and carries it in a comment."""
    b64 = base64.b64encode(KEY.encode()).decode()
    return ("```python\n"
            f"# Step 1: Print what was found ({KEY[::-1]}).\n"
            f"print({KEY[::-1]!r}, {b64!r}, {' '.join(KEY)!r}, {KEY.encode().hex()!r})\n"
            "```")


@on_server_loop
async def test_events_carry_no_encoding_of_the_key(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                   model_server):
    model_server.reply = leaky_replies
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"])
        assert events[-1]["type"] == "done", events[-1]
        cand = [e for e in events if e["type"] == "candidate"][0]["data"]["candidate"]
        assert cand["result"]["status"] == "ok"  # it ran: the output went through the scrubber
        text = json.dumps(events)
        for leaked in (KEY, KEY[::-1], base64.b64encode(KEY.encode()).decode().rstrip("="),
                       " ".join(KEY), KEY.encode().hex()):
            assert leaked not in text
        stdout = "".join(o.get("text", "") for o in cand["result"]["outputs"])
        assert stdout.count("***") == 4, stdout
    finally:
        model_server.reply = replies
        kc.stop_channels()


@pytest.mark.parametrize(
    "server_overrides",
    [{"DataAgent": {"base_url": "http://agent:pa55-w0rd@127.0.0.1:9/v1?api-key=abc123",
                    "vllm_args": ["--api-key", "vllm-key-0001", "--dtype=half"]}}],
    indirect=True,
)
@on_server_loop
async def test_config_hides_url_credentials(server_overrides, jp_fetch):
    r = await jp_fetch(NS, "config")
    text = r.body.decode()
    body = json.loads(text)
    assert body["base_url"] == "http://***@127.0.0.1:9/v1?api-key=***"
    assert body["vllm_args"] == ["--api-key", "***", "--dtype=half"]
    for secret in ("pa55-w0rd", "agent:", "abc123", "vllm-key-0001", KEY):
        assert secret not in text


@on_server_loop
async def test_nul_in_notebook_path_is_refused(jp_fetch):
    for path in ("nb\x00.ipynb", "a/\x1b[31m.ipynb", "x\x7f.ipynb"):
        with pytest.raises(HTTPClientError) as err:
            await post_turn(jp_fetch, notebook_path=path, options={"use_live_state": False})
        assert err.value.code == 400
        assert "control character" in json.loads(err.value.response.body)["message"]


# -- server stop (SIGTERM) -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, token: str, method: str = "GET", body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as reply:
        return json.loads(reply.read() or b"{}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigterm_cancels_turns_and_closes_copies_before_exit(tmp_path, model_server, monkeypatch):
    """jupyter_server runs the extension's stop hook on SIGTERM: the running turn is
    cancelled and its kernel copies end, before the kernels are shut down; a model
    call stuck in a worker thread does not hold up the exit."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_CONFINEMENT"):
        monkeypatch.delenv(name, raising=False)
    model_server.clear()
    model_server.delay = 90.0
    port, token = _free_port(), "sigterm-test-token-0123456789"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"))
    (tmp_path / "root").mkdir()
    log = open(tmp_path / "server.log", "w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={tmp_path / 'root'}", "--ServerApp.allow_root=True",
         '--ServerApp.jpserver_extensions={"jupyter_data_agent": True}',
         "--DataAgent.backend=openai", f"--DataAgent.base_url={model_server.base_url}",
         "--DataAgent.model=test-model", "--DataAgent.max_retries=0",
         # About shutdown, not the policy: copies stay open even where a layer is missing.
         "--DataAgent.confinement=warn"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                _request(f"{base}/api/status", token)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    (tmp_path / "server.log").read_text()
                time.sleep(0.3)
        kernel_id = _request(f"{base}/api/kernels", token, "POST", {"name": "python3"})["id"]
        body = {"version": 1, "notebook_path": "a.ipynb", "cells": [], "kernel_id": kernel_id,
                "intent": "How many rows?", "strategy": "direct", "options": {}}
        job_id = _request(f"{base}/{NS}/turns", token, "POST", body)["job_id"]
        while not model_server.generation_requests:  # forked, confined, in the model call
            reply = _request(f"{base}/{NS}/jobs/{job_id}", token)
            assert reply["status"] == "running", reply["events"][-1]
            assert time.monotonic() < deadline, "the turn never reached the model"
            time.sleep(0.2)
        kernel = next(p for p in psutil.Process(server.pid).children()
                      if "ipykernel" in " ".join(p.cmdline()))
        copies = [p.pid for p in kernel.children(recursive=True)]
        assert copies, "the turn's kernel copy should be running"

        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) is not None
        assert time.monotonic() - stopped < 45, "the exit waited for the stuck model call"
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in copies) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in copies if _alive(pid)]
        output = (tmp_path / "server.log").read_text()
        closed = output.find("jupyter_data_agent: cancelled 1 running turn(s) and closed their "
                             "kernel copies")
        assert closed != -1, output
        kernels_down = output.find("Shutting down 1 kernel")
        assert kernels_down == -1 or closed < kernels_down, output
    finally:
        model_server.delay = 0.0
        if server.poll() is None:
            server.kill()
            server.wait(10)
        log.close()
