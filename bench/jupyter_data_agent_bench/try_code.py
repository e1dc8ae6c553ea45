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
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .copy_transport import quantile
from .kernel_copy import fmt_size, parse_size
from .loop import JupyterServer, ready_client

CELL = "float(x[:1000].sum()) + len(x)"
NOTEBOOK = "bench.ipynb"


class Server(JupyterServer):
    """``jupyter server`` with the extension (no model: the tools need none), in a folder of its own."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="jda-bench-try-")
        root = Path(self.dir.name)
        import nbformat

        nbformat.write(nbformat.v4.new_notebook(), str(root / NOTEBOOK))
        super().__init__(root=root, data_dir=root / "data", model_url="", log_path=root / "server.log",
                         runtime_dir=root / "runtime", confinement="require",  # copies as users get them
                         agent_args=["--MCPExtension.max_try_handles_per_user=16"])
        self.start()

    def kernel_client(self):
        """A client of the notebook session's kernel (a session is opened for it), once it answers."""
        session = self.call("POST", "api/sessions", {"path": NOTEBOOK, "name": NOTEBOOK, "type": "notebook",
                                                     "kernel": {"name": "python3"}}, timeout=120)
        assert self.runtime_dir is not None
        return ready_client(self.runtime_dir / f"kernel-{session['kernel']['id']}.json")

    def close(self) -> None:
        self.stop()
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
    async with Client(streamable_http_client(server.url + "/jupyter-data-agent/mcp", http_client=http)) as c:
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
