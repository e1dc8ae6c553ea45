"""The ways ``bench try_code`` runs one cell, each measured end to end as its user meets it.

Kept apart from the command (``try_code``), which only orders the rows and prints them:
a server of this extension with warm roots on or off (``Server``), the notebook UI's
kernel websocket (``KernelSocket``), the MCP tool through the SDK's client
(``Tries``), a sidebar turn to its first candidate that ran (``first_candidate``), and
a try while a user's cell runs (``busy_try``).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .loop import NS, JupyterServer

CELL = "float(x[:1000].sum()) + len(x)"  # reads the state, changes nothing
NOTEBOOK = "bench.ipynb"  # the tries' and turns' notebook
LIVE_NOTEBOOK = "live.ipynb"  # the live rows' (``try_code``: a kernel no copy is forked from)
MODEL = "bench-model"
#: What the local model answers to every request: the same cell, so a turn's time is the server's.
REPLY = f"```python\n# Step 1: Read the state.\n{CELL}\n```"
INTENT = "What is the sum of the first 1000 values of x, plus its length?"
#: The user's cell during the busy rows; interrupted once the row is measured.
BUSY_CELL = "import time\ntime.sleep(30)"


class Server(JupyterServer):
    """``jupyter server`` with the extension in a folder of its own: the local model at
    ``model_url`` (turns need one; the tools do not), copies confined as users get them, and
    warm roots on (the default, ``c.DataAgentExtension.warm_root_idle_s``) or off (0: every
    fresh copy forks the live kernel, the behaviour before warm roots)."""

    def __init__(self, model_url: str, warm_roots: bool) -> None:
        import nbformat

        self.warm_roots = warm_roots
        self.dir = tempfile.TemporaryDirectory(prefix="jda-bench-try-")
        root = Path(self.dir.name)
        for name in (NOTEBOOK, LIVE_NOTEBOOK):
            nbformat.write(nbformat.v4.new_notebook(), str(root / name))
        agent = ["--DataAgent.backend=openai", f"--DataAgent.base_url={model_url}", f"--DataAgent.model={MODEL}",
                 "--DataAgent.max_retries=0", "--MCPExtension.max_try_handles_per_user=16"]
        if not warm_roots:
            agent.append("--DataAgentExtension.warm_root_idle_s=0")
        super().__init__(root=root, data_dir=root / "data", model_url=model_url, log_path=root / "server.log",
                         runtime_dir=root / "runtime", confinement="require", agent_args=agent)

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):]

    def open_notebook(self, path: str = NOTEBOOK) -> tuple[str, Any]:
        """A notebook's session (its kernel id), and a ZMQ client of that kernel once it answers."""
        session = self.call("POST", "api/sessions", {"path": path, "name": path, "type": "notebook",
                                                     "kernel": {"name": "python3"}}, timeout=120)
        kernel_id = session["kernel"]["id"]
        return kernel_id, self.kernel_client(kernel_id)

    def warm_root(self, kernel_id: str) -> dict | None:
        """The kernel's warm root as the server reports it (``GET warm-roots``); None: none kept."""
        roots = self.call("GET", f"{NS}/warm-roots")["warm_roots"]
        return next((r for r in roots if r["kernel_id"] == kernel_id), None)

    def close(self) -> None:
        self.stop()
        self.dir.cleanup()


async def until(what: str, predicate: Callable[[], Any], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


async def current_root(server: Server, kernel_id: str) -> None:
    """Wait until the server keeps a warm root of the kernel's state now (made once it is idle)."""
    await until("the kernel's warm root", lambda: (server.warm_root(kernel_id) or {}).get("current"))


def run_zmq(kc, code: str) -> float:
    """``live (ZMQ)``: a kernel client's execute request to its reply (and the idle status)."""
    t0 = time.perf_counter()
    reply = kc.execute_interactive(code, store_history=False, output_hook=lambda msg: None, timeout=600)
    took = time.perf_counter() - t0
    assert reply["content"]["status"] == "ok", reply["content"]
    return took


async def _connect(server: Server, path: str):
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    request = HTTPRequest(f"{server.ws_url}/{path}", headers={"Authorization": f"token {server.token}"},
                          request_timeout=120)
    return await websocket_connect(request, max_message_size=64 << 20)


class KernelSocket:
    """The notebook UI's way to its kernel: the server's websocket ``api/kernels/<id>/channels``
    (tornado's client, the server's token), one connection kept open as JupyterLab keeps it."""

    def __init__(self, server: Server, kernel_id: str) -> None:
        self.server, self.kernel_id = server, kernel_id
        self.session = uuid.uuid4().hex
        self.ws: Any = None

    async def open(self) -> KernelSocket:
        self.ws = await _connect(self.server, f"api/kernels/{self.kernel_id}/channels?session_id={self.session}")
        return self

    async def execute(self, code: str) -> float:
        """``live (websocket)``: an execute request to its reply and the kernel's idle status on
        IOPub, when JupyterLab's future for the cell is done; every other message is skipped."""
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "bench", "session": self.session,
                  "date": datetime.now(timezone.utc).isoformat(), "version": "5.3"}
        msg = {"header": header, "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
               "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                           "allow_stdin": False, "stop_on_error": True}}
        t0 = time.perf_counter()
        await self.ws.write_message(json.dumps(msg))
        reply, idle = None, False
        while reply is None or not idle:
            raw = await asyncio.wait_for(self.ws.read_message(), 600)
            if raw is None:
                raise RuntimeError(f"the kernel websocket closed: {self.ws.close_code} {self.ws.close_reason}")
            if isinstance(raw, bytes):  # a message with buffers: never this cell's
                continue
            m = json.loads(raw)
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if m.get("channel") == "shell" and m["msg_type"] == "execute_reply":
                reply = m
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                idle = True
        took = time.perf_counter() - t0
        assert reply["content"]["status"] == "ok", reply["content"]
        return took

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()


class Tries:
    """The MCP tool ``try_code`` on one server, through the SDK's Streamable HTTP client."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.client: Any = None

    async def open(self, stack: AsyncExitStack) -> Tries:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers={"Authorization": f"token {self.server.token}"},
                                  timeout=httpx2.Timeout(60, read=600))
        self.client = await stack.enter_async_context(
            Client(streamable_http_client(self.server.url + "/jupyter-data-agent/mcp", http_client=http)))
        return self

    async def call(self, args: dict | None = None, cap: float | None = None) -> tuple[float, dict]:
        """(seconds, the tool's answer) of one try of ``CELL``; past ``cap`` seconds the SDK gives
        up (and cancels the call): then the answer is ``{"timed_out": True}``."""
        from mcp.shared.exceptions import MCPError

        t0 = time.perf_counter()
        try:
            result = await self.client.call_tool("try_code", {"notebook": NOTEBOOK, "code": CELL, **(args or {})},
                                                 read_timeout_seconds=cap)
        except MCPError as exc:
            if cap is None or "timed out" not in str(exc):
                raise
            return time.perf_counter() - t0, {"timed_out": True}
        took = time.perf_counter() - t0
        text = result.content[0].text
        data = json.loads(text)
        assert not result.is_error and data["status"] == "ok", text[:500]
        return took, data


async def first_candidate(server: Server, kernel_id: str, strategy: str) -> float:
    """Seconds from ``POST turns`` (a sidebar turn on the notebook's kernel) to the first
    ``candidate`` event on the job's websocket that carries the run's result: the turn's first
    copy made and its cell run. The turn is cancelled then (its copies closed) and its
    websocket read to the end, so the next turn starts on a quiet server."""
    body = {"version": 1, "notebook_path": NOTEBOOK, "cells": [], "kernel_id": kernel_id, "intent": INTENT,
            "strategy": strategy, "options": {}}
    t0 = time.perf_counter()
    job = server.call("POST", f"{NS}/turns", body)["job_id"]
    ws = await _connect(server, f"{NS}/jobs/{job}/events")
    try:
        while True:
            raw = await asyncio.wait_for(ws.read_message(), 600)
            event = json.loads(raw) if raw is not None else {"type": "closed", "message": "the socket closed"}
            result = (event.get("data") or {}).get("candidate", {}).get("result") if event["type"] == "candidate" \
                else None
            if result:
                took = time.perf_counter() - t0
                assert result["status"] == "ok", result
                break
            if event["type"] in ("done", "error", "closed"):
                raise RuntimeError(f"{strategy} turn ended before a candidate ran: {event['type']} "
                                   f"{event.get('message', '')}")
        server.call("POST", f"{NS}/jobs/{job}/cancel")
        while await asyncio.wait_for(ws.read_message(), 120) is not None:
            pass
    finally:
        ws.close()
    return took


async def busy_try(server: Server, kernel_id: str, kc, tries: Tries, cap: float) -> dict:
    """A fresh try while the user's cell (``BUSY_CELL``, sent over ZMQ without waiting) runs in the
    live kernel: with a warm root it answers at once from the state before the cell and says
    that state's age (``state``); without one it waits for the cell, here at most ``cap`` seconds.
    The cell is interrupted after."""
    msg_id = kc.execute(BUSY_CELL, store_history=False)
    try:
        await until("the kernel busy", lambda: server.call(
            "GET", f"api/kernels/{kernel_id}")["execution_state"] == "busy", timeout=60)
        if server.warm_roots:  # the server has seen the cell start on IOPub
            await until("the warm root's kernel running", lambda: (server.warm_root(kernel_id) or {}).get("running"),
                        timeout=60)
        took, data = await tries.call({}, cap=cap)
    finally:
        server.call("POST", f"api/kernels/{kernel_id}/interrupt")
        deadline = time.monotonic() + 120
        while kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))["parent_header"].get(
                "msg_id") != msg_id:
            pass
    return {"s": took, "timed_out": bool(data.get("timed_out")), "state_age": "state" in data,
            "state": data.get("state")}
