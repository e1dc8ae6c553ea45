"""try_code (the MCP tool) and sidebar turns vs the same cell in the live kernel, at several state sizes.

    python -m jupyter_data_agent_bench.try_code [--sizes 10MB,1GB] [--calls 15] [--json PATH]

Two real Jupyter servers with this extension run side by side in one run: W with
warm roots (the default) and C with them off (``warm_root_idle_s=0``: every fresh
copy forks the live kernel, the behaviour before warm roots), both on one local
model (the tests' OpenAI-protocol server) that answers every request with the same
cell, so a turn's time is the server's. Each server's notebook session has a
kernel holding a state of each size (a NumPy array of random floats, every page
touched). Per size, p50 and p90 of ``--calls`` calls, the first five rows taken in
turn in one loop so that the machine's load falls on all alike, ``PAUSE_S`` apart
(an agent's calls come seconds apart: what a call leaves to do in the background,
closing a copy made for C's try or forking the next spare, is not the next row's):

- ``live (websocket)``: the cell in a live kernel through the server's kernel
  websocket (execute request to reply and idle), what the notebook UI costs;
- ``live (ZMQ)``: the same through a kernel client;
- ``try_code fresh, warm root``: the MCP tool on W through the SDK's client, end
  to end (HTTP, a child of the kernel's warm root (forked ahead), the run with
  its namespace diff, the reply);
- ``try_code fresh, no warm root``: the same on C: a confined fork of the live kernel;
- ``try_code from``: on W, from the first try's handle (a child of that copy);
- ``first copy of a Vote turn`` / ``Direct turn``, on W and on C (``--turns`` each,
  after one not counted): ``POST turns`` to the first candidate event carrying
  its run's result;
- ``busy kernel``: one fresh try while a user's cell runs, on W (it answers at
  once and says the state's age) and on C (it waits for the cell, at most
  ``--busy-cap`` seconds).

The live rows run in a third kernel with the same state (a second notebook on C)
that no copy is forked from: a cell run in W's kernel would make its warm root
stale, and one in C's would pay the copy-on-write faults of the fork just made.
No row changes the state. The ratios printed are the targets of issue 37: a fresh
try within 3x the live websocket cell, a try ``from`` a handle within 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .copy_transport import quantile
from .kernel_copy import fmt_size, parse_size
from .try_code_rows import (
    CELL,
    LIVE_NOTEBOOK,
    REPLY,
    KernelSocket,
    Server,
    Tries,
    busy_try,
    current_root,
    first_candidate,
    run_zmq,
)

LIVE_WS, LIVE_ZMQ = "live (websocket)", "live (ZMQ)"
FRESH_WARM, FRESH_COLD, FROM = "try_code fresh, warm root", "try_code fresh, no warm root", "try_code from"
BUSY_WARM, BUSY_COLD = "busy kernel: try_code fresh, warm root", "busy kernel: try_code fresh, no warm root"
STRATEGIES = ("vote", "direct")
#: Seconds between two calls of the row loop.
PAUSE_S = 0.25


async def seconds(call: Awaitable[tuple[float, dict]]) -> float:
    return (await call)[0]


def turn_row(strategy: str, warm: bool) -> str:
    return f"first copy of a {strategy.capitalize()} turn, {'warm root' if warm else 'no warm root'}"


#: The rows taken in turn in one loop, ``--calls`` each.
LOOP_ROWS = (LIVE_WS, LIVE_ZMQ, FRESH_WARM, FRESH_COLD, FROM)
#: Every row, in the table's order.
ROWS = (*LOOP_ROWS, BUSY_WARM, BUSY_COLD,
        *(turn_row(s, w) for s in STRATEGIES for w in (True, False)))
#: The targets: (row, its short name, bound) of p50 over ``live (websocket)``'s.
TARGETS = ((FRESH_WARM, "fresh try (warm root)", 3.0), (FROM, "try from a handle", 2.0))


@dataclass
class Side:
    """One server, its notebook's kernel and the clients that reach it."""

    server: Server
    kernel_id: str
    kc: Any  # a ZMQ client of the kernel (loop.ready_client)
    tries: Tries


def setup(size: int) -> str:
    return f"import numpy as np\nx = np.random.default_rng(0).random({size // 8})\nx += 0  # every page touched"


def stats(size: int, row: str, xs: list[float], **extra: Any) -> dict:
    return {"size": size, "row": row, "p50_ms": 1000 * quantile(xs, 0.5), "p90_ms": 1000 * quantile(xs, 0.9),
            "n": len(xs), **extra}


async def bench_size(warm: Side, cold: Side, live: Any, ws: KernelSocket, size: int, calls: int, turns: int,
                     cap: float, log: Callable[[str], None]) -> list[dict]:
    """Every row at one state size; ``live``: the ZMQ client of the live rows' kernel, ``ws`` its socket."""
    for kc in (warm.kc, cold.kc, live):
        run_zmq(kc, setup(size))
    log(f"{fmt_size(size)} of state in the three kernels")
    _, first = await warm.tries.call()  # makes the warm root; its handle is the base of ``from``
    await cold.tries.call()  # the first fork of a kernel sets up its snapshot server
    await current_root(warm.server, warm.kernel_id)
    await ws.execute(CELL)
    got: dict[str, list[float]] = {r: [] for r in LOOP_ROWS}
    row_calls: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        (LIVE_WS, lambda: ws.execute(CELL)),
        (LIVE_ZMQ, lambda: asyncio.to_thread(run_zmq, live, CELL)),
        (FRESH_WARM, lambda: seconds(warm.tries.call())),
        (FRESH_COLD, lambda: seconds(cold.tries.call())),
        (FROM, lambda: seconds(warm.tries.call({"from": first["handle"]}))),
    ]
    for _ in range(calls):
        for row, call in row_calls:
            await asyncio.sleep(PAUSE_S)
            got[row].append(await call())
    log(f"{fmt_size(size)}: {calls} calls of each live and try_code row")
    for strategy in STRATEGIES:
        got.update({turn_row(strategy, is_warm): [] for is_warm in (True, False)})
        for side in (warm, cold):  # a server's first turn of a strategy sets up its model client
            await first_candidate(side.server, side.kernel_id, strategy)
        for _ in range(turns):
            for side, is_warm in ((warm, True), (cold, False)):
                got[turn_row(strategy, is_warm)].append(await first_candidate(side.server, side.kernel_id, strategy))
        log(f"{fmt_size(size)}: {turns} {strategy} turns on each server")
    rows = [stats(size, row, xs) for row, xs in got.items()]
    for side, row in ((warm, BUSY_WARM), (cold, BUSY_COLD)):
        busy = await busy_try(side.server, side.kernel_id, side.kc, side.tries, cap)
        rows.append(stats(size, row, [busy.pop("s")], cap_s=cap, **busy))
    log(f"{fmt_size(size)}: busy kernel rows")
    return sorted(rows, key=lambda r: ROWS.index(r["row"]))


def ratios(rows: list[dict]) -> list[dict]:
    """Per size, each target's p50 over ``live (websocket)``'s p50, and whether it is met."""
    out = []
    for size in dict.fromkeys(r["size"] for r in rows):
        p50 = {r["row"]: r["p50_ms"] for r in rows if r["size"] == size}
        for row, _, bound in TARGETS:
            ratio = p50[row] / p50[LIVE_WS]
            out.append({"size": size, "ratio": f"{row} / {LIVE_WS}", "p50_ratio": ratio, "target": bound,
                        "met": ratio <= bound})
    return out


def cell(r: dict) -> str:
    if r["row"] in (BUSY_WARM, BUSY_COLD):
        said = f"timeout > {r['cap_s']:g} s" if r["timed_out"] else f"{r['p50_ms']:.0f}"
        return f"{said}, state age {'said' if r['state_age'] else 'not said'}"
    return f"{r['p50_ms']:.1f} ({r['p90_ms']:.1f})"


def table(rows: list[dict], ratio_rows: list[dict]) -> str:
    """Rows down, sizes across: p50 (p90) ms; the busy rows' one call; the targets' ratios."""
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    by = {(r["size"], r["row"]): r for r in rows}
    lines = [(row, [cell(by[s, row]) for s in sizes]) for row in ROWS]
    for row, short, bound in TARGETS:
        got = [next(x for x in ratio_rows if x["size"] == s and x["ratio"] == f"{row} / {LIVE_WS}") for s in sizes]
        lines.append((f"p50 {short} / live websocket (<= {bound:g}x)",
                      [f"{x['p50_ratio']:.1f}x, {'met' if x['met'] else 'not met'}" for x in got]))
    head = ("p50 (p90) ms", [fmt_size(s) for s in sizes])
    name_w = max(len(n) for n, _ in [head, *lines])
    col_w = [max(len(cells[i]) for _, cells in [head, *lines]) for i in range(len(sizes))]

    def fmt(name: str, cells: list[str]) -> str:
        return f"{name:<{name_w}} | " + " | ".join(c.rjust(w) for c, w in zip(cells, col_w))

    out = [fmt(*head)]
    return "\n".join([*out, "-" * len(out[0]), *(fmt(n, c) for n, c in lines)])


async def run(sizes: list[int], calls: int, turns: int, cap: float, log: Callable[[str], None]) -> list[dict]:
    from .model_server import OpenAITestServer  # the checkout's tests/ (see model_server)

    with ExitStack() as stack:
        model = stack.enter_context(OpenAITestServer(reply=REPLY, models=None))
        sides = []
        for warm_roots in (True, False):
            server = Server(model.base_url, warm_roots)
            stack.callback(server.close)
            server.start()
            kernel_id, kc = server.open_notebook()
            stack.callback(kc.stop_channels)
            sides.append(Side(server, kernel_id, kc, Tries(server)))
        warm, cold = sides
        live_id, live = cold.server.open_notebook(LIVE_NOTEBOOK)  # no warm root watches it, no copy forks it
        stack.callback(live.stop_channels)
        async with AsyncExitStack() as clients:
            for side in sides:
                await side.tries.open(clients)
            ws = await KernelSocket(cold.server, live_id).open()
            clients.callback(ws.close)
            rows = []
            for size in sizes:
                rows += await bench_size(warm, cold, live, ws, size, calls, turns, cap, log)
            return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sizes", default="10MB,1GB", help="comma-separated state sizes (default 10MB,1GB)")
    p.add_argument("--calls", type=int, default=15, help="calls per size of each live and try_code row (default 15)")
    p.add_argument("--turns", type=int, default=None, help="turns per size, strategy and server (default: --calls)")
    p.add_argument("--busy-cap", type=float, default=10.0,
                   help="seconds the busy-kernel try may wait for the user's cell (default 10)")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    from jupyter_data_agent.mcp.sdk import route_off, server_unavailable

    if (why := server_unavailable()) is not None:  # the try_code rows need our MCP route
        print(f"try_code: {route_off(why)}", file=sys.stderr)
        return 2
    turns = args.calls if args.turns is None else args.turns
    load_before = os.getloadavg()
    rows = asyncio.run(run([parse_size(s) for s in args.sizes.split(",")], args.calls, turns, args.busy_cap,
                           lambda m: print(m, file=sys.stderr, flush=True)))
    ratio_rows = ratios(rows)
    load = {"before": load_before, "after": os.getloadavg()}
    print(f"load average (1, 5, 15 min): before {' '.join(f'{x:.2f}' for x in load['before'])}, "
          f"after {' '.join(f'{x:.2f}' for x in load['after'])}; {os.cpu_count()} cores")
    print(table(rows, ratio_rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"calls": args.calls, "turns": turns,
                                               "busy_cap_s": args.busy_cap, "load_avg": load, "rows": rows,
                                               "ratios": ratio_rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
