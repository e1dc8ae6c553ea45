"""try_code (the MCP tool) vs the same cell in the live kernel, at several kernel state sizes.

    python -m jupyter_data_agent_bench.try_code [--sizes 10MB,1GB] [--calls 100] [--json PATH]

A real Jupyter server with this extension runs in a subprocess; a notebook
session's kernel holds a state of each size (a NumPy array of random floats,
every page touched). Then, per size:

- ``live``: the cell run in the live kernel by a kernel client (execute
  request to reply), what running it in the notebook costs;
- ``try_code``: the MCP tool through the SDK's Streamable HTTP client, end to
  end: HTTP, a fresh confined fork of the live kernel, the namespace
  fingerprint before and after, the run, the reply;
- ``try_code from``: the same from the first call's handle (a child of that copy).

p50 and p90 of ``--calls`` calls each. The live kernel never changes: the
cell only reads the state.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from .copy_transport import quantile
from .kernel_copy import fmt_size, parse_size

CELL = "float(x[:1000].sum()) + len(x)"
NOTEBOOK = "bench.ipynb"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``jupyter server`` with the extension, in a folder of its own."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="jda-bench-try-")
        root = Path(self.dir.name)
        self.runtime = root / "runtime"
        self.port, self.token = _free_port(), secrets.token_hex(16)
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.runtime)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={self.port}",
             f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={root}",
             "--ServerApp.jpserver_extensions={'jupyter_data_agent': True}",
             "--DataAgentExtension.max_try_handles_per_user=16"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import nbformat

        nbformat.write(nbformat.v4.new_notebook(), str(root / NOTEBOOK))
        deadline = time.monotonic() + 120
        while True:
            try:
                self.request("GET", "api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(self.url + path, method=method, data=None if body is None else
                                     json.dumps(body).encode(), headers={"Authorization": f"token {self.token}",
                                                                         "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read() or b"{}")

    def kernel_client(self):
        """A client of the notebook session's kernel (a session is opened for it)."""
        from jupyter_client import BlockingKernelClient

        session = self.request("POST", "api/sessions", {"path": NOTEBOOK, "name": NOTEBOOK, "type": "notebook",
                                                        "kernel": {"name": "python3"}})
        kc = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{session['kernel']['id']}.json"))
        kc.load_connection_file()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        return kc

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.dir.cleanup()


def run_live(kc, code: str) -> float:
    t0 = time.perf_counter()
    reply = kc.execute_interactive(code, store_history=False, output_hook=lambda msg: None, timeout=600)
    assert reply["content"]["status"] == "ok", reply["content"]
    return time.perf_counter() - t0


async def run_tries(server: Server, calls: int) -> tuple[list[float], list[float]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"token {server.token}"}, timeout=httpx2.Timeout(60, read=600))
    fresh, child = [], []
    async with Client(streamable_http_client(server.url + "jupyter-data-agent/mcp", http_client=http)) as c:
        async def call(args: dict) -> tuple[float, dict]:
            t0 = time.perf_counter()
            result = await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": CELL, **args})
            took = time.perf_counter() - t0
            data = json.loads(result.content[0].text)
            assert not result.is_error and data["status"] == "ok", result.content[0].text[:500]
            return took, data

        _, first = await call({})  # warm-up; its handle is the base of ``from``
        for _ in range(calls):
            fresh.append((await call({}))[0])
            base = first["handle"]
            took, _ = await call({"from": base})
            child.append(took)
    return fresh, child


def bench_size(server: Server, kc, size: int, calls: int, log) -> dict:
    code = (f"import numpy as np\nx = np.random.default_rng(0).random({size // 8})\n"
            "x += 0  # every page touched")
    run_live(kc, code)
    log(f"{fmt_size(size)} of state in the kernel")
    live = [run_live(kc, CELL) for _ in range(calls)]
    fresh, child = asyncio.run(run_tries(server, calls))
    row = {"size": size}
    for name, xs in (("live", live), ("try_code", fresh), ("try_code_from", child)):
        row[name] = {"p50_ms": 1000 * quantile(xs, 0.5), "p90_ms": 1000 * quantile(xs, 0.9), "n": len(xs)}
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'state':>8} | {'live p50':>9} {'p90':>8} | {'try_code p50':>12} {'p90':>8} | "
          f"{'from p50':>9} {'p90':>8}  (ms)")
    for r in rows:
        print(f"{fmt_size(r['size']):>8} | {r['live']['p50_ms']:9.1f} {r['live']['p90_ms']:8.1f} | "
              f"{r['try_code']['p50_ms']:12.1f} {r['try_code']['p90_ms']:8.1f} | "
              f"{r['try_code_from']['p50_ms']:9.1f} {r['try_code_from']['p90_ms']:8.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10MB,1GB", help="comma-separated state sizes (default 10MB,1GB)")
    p.add_argument("--calls", type=int, default=100, help="calls per size and path (default 100)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    server = Server()
    rows = []
    try:
        kc = server.kernel_client()
        try:
            for size in (parse_size(s) for s in args.sizes.split(",")):
                rows.append(bench_size(server, kc, size, args.calls, lambda m: print(m, file=sys.stderr)))
        finally:
            kc.stop_channels()
    finally:
        server.close()
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
