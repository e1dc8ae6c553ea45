"""What a user waits for, through a real Jupyter server with the embedded model.

    python -m jupyter_data_agent_bench.runtime --runtimes none --second-turn [--agent-turn]

``--second-turn``: the second sidebar turn in the same notebook. A real
``jupyter server`` subprocess with this extension and its defaults (the
embedded GGUF on llama.cpp, served by the model service), a real kernel
(``POST /api/kernels``) holding a sales table, and a notebook of cells run in
that kernel with their outputs, such that a turn's prompt is ~1,600 tokens.
As in the sidebar: turn 1 (``POST turns``, direct, the composer's default);
its candidate accepted as a new cell and run in the kernel; a ghost-text
request while the user typed that cell (``POST complete``: it takes the
model's cache, as in real use); then, in the ``warm`` variant only, the
front end's ``POST warm`` (``kind: turn``, sent when a cell has run or the
composer gets focus: ``src/warm.ts``); then turn 2 with a new intent. Time to
first token: from sending ``POST turns`` to the first non-empty ``delta``
event on the job's websocket (``jobs/<id>/events``), which is what the sidebar
shows. Turn 2 is cancelled after its first token. Each round uses a fresh
kernel and notebook; rounds alternate cold / warm in one server.

``--agent-turn``: kernel start + one ``%%agent`` turn, the way a user meets
it: a fresh server (its model service not loaded yet), ``POST /api/kernels``,
``%load_ext jupyter_data_agent`` and one ``%%agent`` question on a small
table, with the server's defaults; wall time from the kernel request to the
magic's reply. Once idle and once beside a numpy matmul loop in another
process (a user's other kernel computing).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import AsyncIterator
from contextlib import aclosing, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .contention import MATMUL  # the same loop as the contention rows
from .loop import NS, JupyterServer

SALES_ROWS = 240
SETUP = (
    "import numpy as np\nimport pandas as pd\n"
    "rng = np.random.default_rng(0)\n"
    f"sales = pd.DataFrame({{'region': rng.choice(['north', 'south', 'east', 'west'], {SALES_ROWS}),\n"
    f"                      'month': rng.integers(1, 13, {SALES_ROWS}),\n"
    f"                      'product': rng.choice(['tea', 'coffee', 'cocoa', 'juice'], {SALES_ROWS}),\n"
    f"                      'units': rng.integers(1, 50, {SALES_ROWS}),\n"
    f"                      'price': rng.uniform(1, 9, {SALES_ROWS}).round(2)}})\n"
    "sales['amount'] = sales['units'] * sales['price']\nsales.shape"
)
ANALYSIS = [
    "by_region = sales.groupby('region')['amount'].agg(['sum', 'mean', 'count'])\nby_region",
    "share = sales.groupby('product')['units'].sum() / sales['units'].sum()\nshare.round(3)",
    "sales['big'] = sales['amount'] > sales['amount'].quantile(0.9)\nsales['big'].value_counts()",
]
INTENT_1 = "Which region sells the most coffee in total?"
INTENT_2 = "Plot the monthly amount for each product as lines"
TYPED = "sales.groupby("  # what the user typed in the accepted cell: one ghost-text request
AGENT_SETUP = "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Rome', 'Oslo', 'Lima'], " \
              "'temp': [3.5, 18.0, 5.0, 19.5]})\n%load_ext jupyter_data_agent"
AGENT_QUESTION = "%%agent\nWhat is the mean temp per city?"


@dataclass
class SecondTurn:
    warm: bool
    turn1_prompt_tokens: int = 0  # over its model calls
    turn1_model_calls: int = 0
    turn1_wall_s: float = 0.0
    warm_s: float = 0.0  # the warm request itself (the user is typing meanwhile)
    warm_prompt_tokens: int = 0
    warm_reason: str = ""
    ttft_s: float = 0.0  # turn 2: POST turns -> first token on the websocket
    error: str = ""


@dataclass
class AgentTurn:
    situation: str
    kernel_s: float = 0.0  # POST /api/kernels -> the kernel answers
    turn_s: float = 0.0  # %load_ext + %%agent
    total_s: float = 0.0
    load1: float = 0.0
    error: str = ""
    notes: list[str] = field(default_factory=list)


# -- a kernel of the server, reached through its connection file -------------------------------


class Kernel:
    """A kernel started by the server (``POST /api/kernels``), driven over its connection file."""

    def __init__(self, server: JupyterServer) -> None:
        self.server = server
        self.id = server.call("POST", "api/kernels", {"name": "python3"})["id"]
        self.client = server.kernel_client(self.id)

    def run(self, code: str, timeout: float = 600.0) -> tuple[int | None, list[dict], str]:
        """(execution count, nbformat outputs, error) of ``code``."""
        outputs: list[dict] = []

        def keep(msg: dict) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                outputs.append({"output_type": "stream", "name": content["name"], "text": content["text"]})
            elif kind in ("execute_result", "display_data"):
                data = {k: v for k, v in content["data"].items() if k == "text/plain"}
                outputs.append({"output_type": kind, "data": data, "metadata": {},
                                **({"execution_count": content["execution_count"]}
                                   if kind == "execute_result" else {})})
            elif kind == "error":
                outputs.append({"output_type": "error", "ename": content["ename"], "evalue": content["evalue"],
                                "traceback": []})

        reply = self.client.execute_interactive(code, output_hook=keep, timeout=timeout)
        content = reply["content"]
        error = "" if content["status"] == "ok" else f"{content.get('ename')}: {content.get('evalue')}"
        return content.get("execution_count"), outputs, error

    def close(self) -> None:
        self.client.stop_channels()
        with suppress(urllib.error.URLError, ConnectionError):
            self.server.call("DELETE", f"api/kernels/{self.id}")


def _cell(source: str, count: int | None, outputs: list[dict], index: int) -> dict:
    return {"cell_type": "code", "id": f"c{index}", "source": source, "metadata": {},
            "execution_count": count, "outputs": outputs}


# -- one turn, timed on the job's websocket ---------------------------------------------------


async def job_events(server: JupyterServer, job_id: str) -> AsyncIterator[dict]:
    """The job's events off its websocket, as they arrive (the socket closes when the caller stops)."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    url = f"ws://127.0.0.1:{server.port}/{NS}/jobs/{job_id}/events"
    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {server.token}"}))
    try:
        while (raw := await ws.read_message()) is not None:
            yield json.loads(raw)
    finally:
        ws.close()


async def _events(server: JupyterServer, job_id: str, first_only: bool) -> tuple[list[dict], float | None]:
    """The job's events, and when (``perf_counter``) the first non-empty delta arrived."""
    events: list[dict] = []
    first: float | None = None
    async with aclosing(job_events(server, job_id)) as stream:
        async for event in stream:
            events.append(event)
            if first is None and event["type"] == "delta" and event["data"]["text"].strip():
                first = time.perf_counter()
                if first_only:
                    break
            if event["type"] in ("done", "error"):
                break
    return events, first


def turn(server: JupyterServer, body: dict, first_only: bool = False) -> tuple[float, float, list[dict]]:
    """(time to first token, wall time, events) of one sidebar turn; cancelled after the first
    token when ``first_only``."""
    start = time.perf_counter()
    accepted = server.call("POST", f"{NS}/turns", body)
    events, first = asyncio.run(_events(server, accepted["job_id"], first_only))
    if first_only:
        with suppress(urllib.error.URLError, ConnectionError):
            server.call("POST", f"{NS}/jobs/{accepted['job_id']}/cancel", {})
    return (first - start) if first else 0.0, time.perf_counter() - start, events


def _ghost_text(server: JupyterServer, body: dict) -> str:
    """``POST complete`` (a newline-delimited JSON stream): the ghost text."""
    import urllib.request

    req = urllib.request.Request(f"{server.url}/{NS}/complete", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"token {server.token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        lines = [json.loads(line) for line in r.read().splitlines() if line.strip()]
    return next((line.get("text") or "" for line in lines if line.get("done")), "")


def _notebook(kernel: Kernel) -> list[dict]:
    cells: list[dict] = [{"cell_type": "markdown", "id": "m0", "metadata": {},
                          "source": "# Sales review\nUnits and amounts per region, month and product."}]
    for source in [SETUP, *ANALYSIS]:
        count, outputs, error = kernel.run(source)
        if error:
            raise RuntimeError(f"a notebook cell failed: {error}")
        cells.append(_cell(source, count, outputs, len(cells)))
    return cells


def second_turn(server: JupyterServer, warm: bool) -> SecondTurn:
    result = SecondTurn(warm)
    kernel = Kernel(server)
    try:
        cells = _notebook(kernel)
        body = {"version": 1, "notebook_path": "sales.ipynb", "kernel_id": kernel.id, "strategy": "direct"}
        _, wall, events = turn(server, {**body, "cells": cells, "active_index": len(cells) - 1,
                                        "intent": INTENT_1})
        result.turn1_wall_s = wall
        done = next((e for e in events if e["type"] == "done"), None)
        if done is None:
            result.error = f"turn 1 ended without a result: {events[-1] if events else 'no events'}"
            return result
        stats = done["data"]["result"]["stats"]
        result.turn1_prompt_tokens, result.turn1_model_calls = stats["prompt_tokens"], stats.get("model_calls", 0)
        code = next((e["data"]["candidate"]["code"] for e in events if e["type"] == "candidate"), "") or TYPED
        # The user types in the accepted cell (one ghost-text request), then runs it.
        _ghost_text(server, {"version": 1, "notebook_path": "sales.ipynb", "cells": cells, "prefix": TYPED,
                             "suffix": "", "kernel_id": kernel.id})
        count, outputs, _ = kernel.run(code)
        cells.append(_cell(code, count, outputs, len(cells)))
        if warm:
            start = time.perf_counter()
            reply = server.call("POST", f"{NS}/warm", {"version": 1, "kind": "turn", "notebook_path": "sales.ipynb",
                                                      "cells": cells, "active_index": len(cells) - 1,
                                                      "kernel_id": kernel.id, "metadata": {}}, timeout=300)
            result.warm_s = time.perf_counter() - start
            result.warm_prompt_tokens = reply.get("prompt_tokens", 0)
            result.warm_reason = reply.get("reason", "")
        result.ttft_s, _, _ = turn(server, {**body, "cells": cells, "active_index": len(cells) - 1,
                                            "intent": INTENT_2}, first_only=True)
    except Exception as exc:  # noqa: BLE001 -- one failed round is reported, the others still count
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        kernel.close()
    return result


@contextmanager
def served(extra_args: list[str] | None = None):
    """A fresh ``jupyter server`` with this extension and its default (embedded) model."""
    with tempfile.TemporaryDirectory(prefix="jda-first-token-") as tmp:
        root, runtime = Path(tmp) / "root", Path(tmp) / "runtime"
        root.mkdir()
        server = JupyterServer(root=root, data_dir=Path(tmp) / "data", model_url="",
                               log_path=Path(tmp) / "server.log", runtime_dir=runtime,
                               agent_args=list(extra_args or []))
        try:
            yield server.start()
        except Exception:
            print(Path(server.log_path).read_text(errors="replace")[-3000:], file=sys.stderr)
            raise
        finally:
            server.stop()


def measure_second_turn(rounds: int, log=print) -> list[SecondTurn]:
    out: list[SecondTurn] = []
    with served() as server:
        for i in range(rounds):
            for warm in (False, True):
                out.append(second_turn(server, warm))
                log(f"second turn, round {i + 1}, {'warm' if warm else 'cold'}: {json.dumps(asdict(out[-1]))}")
    return out


# -- kernel start + one %%agent turn -----------------------------------------------------------


def agent_turn(situation: str, extra_args: list[str] | None = None) -> AgentTurn:
    """``situation``: "idle", or "matmul" (a numpy matmul loop in another process meanwhile)."""
    import os

    result = AgentTurn(situation)
    beside = subprocess.Popen([sys.executable, "-c", MATMUL]) if situation == "matmul" else None
    try:
        with served(extra_args) as server:
            if beside is not None:
                time.sleep(1.0)
            result.load1 = os.getloadavg()[0]
            start = time.perf_counter()
            kernel = Kernel(server)
            result.kernel_s = time.perf_counter() - start
            try:
                error = kernel.run(AGENT_SETUP)[2]
                count, outputs, error2 = kernel.run(AGENT_QUESTION) if not error else (None, [], "")
                result.total_s = time.perf_counter() - start
                result.turn_s = result.total_s - result.kernel_s
                result.error = error or error2
                text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
                if "jupyter-data-agent:" in text:
                    result.notes.append(text.strip().splitlines()[-1][:200])
            finally:
                kernel.close()
    except Exception as exc:  # noqa: BLE001 -- reported in the table
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if beside is not None:
            beside.kill()
            beside.wait()
    return result


# -- tables -----------------------------------------------------------------------------------


def _stat(xs: list[float]) -> str:
    if not xs:
        return "–"
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"


def second_turn_table(results: list[SecondTurn]) -> str:
    lines = ["| variant | rounds | turn 2's prompt up to the intent | time to first token of turn 2 (median) "
             "| the warm request (off the user's clock) |", "|---|---|---|---|---|"]
    prefix = sorted({r.warm_prompt_tokens for r in results if r.warm_prompt_tokens})
    for warm in (False, True):
        ok = [r for r in results if r.warm == warm and not r.error]
        lines.append(f"| {'warm on cell run / composer focus' if warm else 'no warm'} | {len(ok)} "
                     f"| {', '.join(map(str, prefix)) or '–'} tokens | {_stat([r.ttft_s for r in ok])} "
                     f"| {_stat([r.warm_s for r in ok]) if warm else '–'} |")
    lines += [f"\n{'warm' if r.warm else 'cold'} round failed: {r.error}" for r in results if r.error]
    return "\n".join(lines)


def agent_turn_table(results: list[AgentTurn]) -> str:
    lines = ["| situation | load avg (1 min) | kernel start | `%load_ext` + `%%agent` | total |",
             "|---|---|---|---|---|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.situation} | {r.load1:.1f} | – | – | – ({r.error}) |")
        else:
            lines.append(f"| {r.situation} | {r.load1:.1f} | {r.kernel_s:.1f} s | {r.turn_s:.1f} s "
                         f"| {r.total_s:.1f} s |")
    return "\n".join(lines)
