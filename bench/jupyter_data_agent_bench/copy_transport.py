"""Kernel copies: the local transport vs the kernel channel, side by side on one kernel.

    python -m jupyter_data_agent_bench.copy_transport [--sizes 10MB,1GB] [--repeats N] [--json PATH]

A kernel of this machine holds a state of each size (a NumPy array of random
floats, every page touched). Two trees of copies are opened on it at once,
the way the server opens them (``kernel.handle``): ``ClientHandle`` (the
server talks to each copy over a Unix socket) and ``ChannelHandle`` (the
copies' client runs in the kernel, driven over comm messages on the
kernel's own channels, as for a kernel behind a gateway). Each repeat, in
alternation, forks a copy of the tree's root and runs one small cell in it:

- ``fork``: ``root.fork()`` until the copy is ready;
- ``exec``: one cell reading the state, in that copy;
- ``fork+exec``: both, which is what each candidate of a turn costs.

p50 and p90 per transport, and the ratio channel/local of the p50s, from the
same run. Both trees run on this machine: what the channel adds here is the
relay (comm messages through the kernel's ZMQ sockets and its thread pool);
a gateway adds its websocket hop (``tests/test_gateway.py`` prints its turn
times).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence

from jupyter_data_agent.kernel import rpc
from jupyter_data_agent.kernel.host.handle import ChannelHandle, ClientHandle
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.results import Limits

from .kernel_copy import fmt_size, parse_size

CELL = "float(x[:1000].sum()) + len(x)"
TRANSPORTS = (ClientHandle, ChannelHandle)


def quantile(xs: Sequence[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class _Loop:
    """The event loop the async clients live on (a server's), in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _handle(kind, km, loop: _Loop):
    from jupyter_client import AsyncKernelClient

    async def client():
        kc = AsyncKernelClient(**km.get_connection_info(session=False))
        kc.session.key = km.session.key
        kc.start_channels(shell=True, iopub=kind is ChannelHandle, stdin=False, hb=False,
                          control=kind is ChannelHandle)
        return kc

    return kind(loop.run(client()), loop.loop, notebook_dir=None, fork_timeout_s=120)


def bench_size(size: int, repeats: int, log) -> dict:
    km, kc = start_kernel(cwd=tempfile.mkdtemp(prefix="jda-bench-transport-"))
    loop = _Loop()
    handles, trees = [], {}
    out: dict = {"target_bytes": size}
    try:
        reply = kc.execute(f"import numpy as np\nx = np.random.default_rng(0).random({size // 8})",
                           reply=True, timeout=600)
        assert reply["content"]["status"] == "ok", reply["content"]
        out["state_bytes"] = rpc.call(kc, "int(x.nbytes)", timeout=60)
        expected = rpc.call(kc, CELL, timeout=60)
        for kind in TRANSPORTS:
            handle = _handle(kind, km, loop)
            handles.append(handle)
            t0 = time.perf_counter()
            trees[kind.transport] = loop.run(handle.fork(Limits(timeout_s=120), max_live=4))
            out[f"{kind.transport}: tree root ms"] = (time.perf_counter() - t0) * 1000
        times: dict[str, dict[str, list[float]]] = {t: {"fork": [], "exec": [], "fork+exec": []} for t in trees}
        for i in range(repeats):
            for name in (list(trees) if i % 2 == 0 else list(reversed(trees))):
                t0 = time.perf_counter()
                copy = trees[name].root.fork()
                t1 = time.perf_counter()
                result = copy.exec(CELL)
                t2 = time.perf_counter()
                copy.close()
                if result.status != "ok" or result.value is None or result.value.value != expected:
                    raise RuntimeError(f"{name}: the copy answered {result.text()!r}, not {expected!r}")
                times[name]["fork"].append(t1 - t0)
                times[name]["exec"].append(t2 - t1)
                times[name]["fork+exec"].append(t2 - t0)
        for name, by_step in times.items():
            for step, xs in by_step.items():
                out[f"{name}: {step} p50 ms"] = statistics.median(xs) * 1000
                out[f"{name}: {step} p90 ms"] = quantile(xs, 0.9) * 1000
        out["channel/local fork+exec p50"] = (out["kernel channel: fork+exec p50 ms"]
                                              / out["local: fork+exec p50 ms"])
        log(f"  {fmt_size(out['state_bytes'])}: fork+exec p50 local {out['local: fork+exec p50 ms']:.1f} ms, "
            f"kernel channel {out['kernel channel: fork+exec p50 ms']:.1f} ms")
    finally:
        for tree in trees.values():
            tree.close()
        for handle in handles:
            handle.close()
        loop.run(asyncio.sleep(0.2))  # the channel's reader ends before its loop does
        loop.close()
        stop_kernel(km, kc)
    return out


def print_table(rows: list[dict]) -> None:
    print("| state | transport | fork p50 (p90) ms | exec p50 (p90) ms | fork+exec p50 (p90) ms | tree root ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        for name in ("local", "kernel channel"):
            cells = [f"{r[f'{name}: {s} p50 ms']:.1f} ({r[f'{name}: {s} p90 ms']:.1f})"
                     for s in ("fork", "exec", "fork+exec")]
            print(f"| {fmt_size(r['state_bytes'])} | {name} | " + " | ".join(cells)
                  + f" | {r[f'{name}: tree root ms']:.0f} |")
    for r in rows:
        print(f"\n{fmt_size(r['state_bytes'])}: kernel channel / local, fork+exec p50 = "
              f"{r['channel/local fork+exec p50']:.2f}x")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10MB,1GB", help="comma-separated state sizes (default 10MB,1GB)")
    p.add_argument("--repeats", type=int, default=30, help="copies per transport and size (default 30)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    rows = []
    for size in (parse_size(s) for s in args.sizes.split(",")):
        print(f"state {fmt_size(size)}:", flush=True)
        rows.append(bench_size(size, args.repeats, lambda m: print(m, flush=True)))
    print_table(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
