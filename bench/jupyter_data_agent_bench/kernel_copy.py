"""Kernel copies: fork snapshot vs replay sandbox, side by side.

    python -m jupyter_data_agent_bench.kernel_copy [--sizes 10MB,200MB,1GB] [--repeats N]

For each size a real kernel builds its state the way a notebook would: read a
CSV with pandas, transform it, concat copies until the DataFrames hold about
that many bytes. Then, in one run, it measures:

- time to obtain a ready copy: ``root.fork()`` of a fork tree (and the cost
  of the tree's root, forked from the kernel through a silent execute
  request) vs a replay sandbox (new kernel + re-running the notebook cells);
- round trip of a trivial cell in a copy vs in the kernel itself;
- extra memory (USS) of an idle copy, vs the state size.

Targets (from the issue): fork copy median <= 20 ms at 1 GB; >= 100x faster
than replay at 200 MB; an idle copy adds <= 5% of the state size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pandas as pd

from jupyter_data_agent.kernel import rpc
from jupyter_data_agent.kernel.forktree.copy_process import uss as process_uss
from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.host.replay import ReplayTree
from jupyter_data_agent.kernel.results import Limits

BASE_ROWS = 100_000
TRIVIAL = "1 + 1"


def parse_size(s: str) -> int:
    s = s.strip().upper()
    for unit, mult in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10), ("B", 1)):
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * mult)
    return int(s)


def fmt_size(n: float) -> str:
    return f"{n / (1 << 30):.2f} GB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MB"


def write_csv(path: str) -> None:
    rng = np.random.default_rng(0)
    n = BASE_ROWS
    airlines = np.array(["AA", "DL", "UA", "WN", "B6", "AS", "NK", "F9"])
    airports = np.array(["JFK", "LAX", "ORD", "ATL", "DFW", "DEN", "SFO", "SEA", "BOS", "MIA"])
    pd.DataFrame({
        "date": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 365, n), unit="D"),
        "airline": airlines[rng.integers(0, len(airlines), n)],
        "origin": airports[rng.integers(0, len(airports), n)],
        "dest": airports[rng.integers(0, len(airports), n)],
        "delay": rng.normal(10, 30, n).round(1),
        "distance": rng.integers(100, 3000, n),
        "passengers": rng.integers(20, 300, n),
    }).to_csv(path, index=False)


PREFIX_CELLS = [
    "import pandas as pd\nimport numpy as np",
    "raw = pd.read_csv('flights.csv', parse_dates=['date'])",
    "raw['month'] = raw['date'].dt.month\n"
    "raw['delay_h'] = raw['delay'] / 60\n"
    "for col in ['airline', 'origin', 'dest']:\n"
    "    raw[col] = raw[col].astype('category')\n"
    "raw = raw[raw['distance'] > 0].reset_index(drop=True)",
]


def scale_cells(k: int) -> list[str]:
    return [
        f"df = pd.concat([raw.assign(rep=i) for i in range({k})], ignore_index=True)",
        "df['delay_z'] = (df['delay'] - df['delay'].mean()) / df['delay'].std()\n"
        "summary = df.groupby(['airline', 'month'], observed=True)['delay'].mean()",
    ]


STATE_EXPR = ("int(df.memory_usage(deep=True).sum() + raw.memory_usage(deep=True).sum()"
              " + summary.memory_usage(deep=True))")


def kernel_run(kc, code: str, timeout: float = 1800) -> None:
    reply = kc.execute(code, reply=True, timeout=timeout)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply['content'].get('evalue')}\n{code}")


def size_at_least(row: dict, n: int) -> bool:
    return row["target_bytes"] >= n


def median_ms(xs) -> float:
    return statistics.median(xs) * 1000


def bench_size(target: int, repeats: int, replay_repeats: int, log) -> dict:
    d = tempfile.mkdtemp(prefix="jda-bench-")
    write_csv(os.path.join(d, "flights.csv"))
    km, kc = start_kernel(cwd=d)
    out: dict = {"target_bytes": target}
    try:
        t0 = time.perf_counter()
        for c in PREFIX_CELLS:
            kernel_run(kc, c)
        per_copy = rpc.call(kc, "int(raw.memory_usage(deep=True).sum())", timeout=600)
        # state = raw + k copies of raw that also get 'rep' and 'delay_z' (16 B/row)
        k = max(1, round((target - per_copy) / (per_copy + 16 * BASE_ROWS)))
        cells = PREFIX_CELLS + scale_cells(k)
        for c in scale_cells(k):
            kernel_run(kc, c)
        out["notebook_run_s"] = time.perf_counter() - t0
        out["state_bytes"] = state = rpc.call(kc, STATE_EXPR, timeout=600)
        out["kernel_uss"] = process_uss(km.provisioner.process.pid)
        log(f"  state {fmt_size(state)} (concat x{k}), notebook ran in "
            f"{out['notebook_run_s']:.1f} s")

        # round trip of a trivial cell in the kernel itself
        rtt_kernel = []
        for _ in range(max(repeats, 10)):
            t0 = time.perf_counter()
            kc.execute(TRIVIAL, reply=True, timeout=60)
            rtt_kernel.append(time.perf_counter() - t0)
        out["rtt_kernel_ms"] = median_ms(rtt_kernel)

        # ---- fork snapshots
        roots = []
        for _ in range(3):
            t0 = time.perf_counter()
            tree = SnapshotTree.from_blocking_client(kc, notebook_dir=d,
                                                     limits=Limits(timeout_s=120))
            roots.append(time.perf_counter() - t0)
            if len(roots) < 3:
                tree.close()
        out["fork_root_ms"] = median_ms(roots)
        out["protections"] = tree.protections.summary()
        # the same copies with no confinement layer at all, measured interleaved
        bare_roots = []
        for _ in range(3):
            t0 = time.perf_counter()
            bare = SnapshotTree.from_blocking_client(kc, notebook_dir=d,
                                                     limits=Limits(timeout_s=120, confine=False))
            bare_roots.append(time.perf_counter() - t0)
            if len(bare_roots) < 3:
                bare.close()
        out["bare_root_ms"] = median_ms(bare_roots)
        fork_t, bare_t, rtt_cold, rtt_warm, uss = [], [], [], [], []
        try:
            for _ in range(repeats):
                t0 = time.perf_counter()
                b = bare.root.fork()
                bare_t.append(time.perf_counter() - t0)
                b.close()
                t0 = time.perf_counter()
                c = tree.root.fork()
                fork_t.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                r = c.exec(TRIVIAL)
                rtt_cold.append(time.perf_counter() - t0)
                assert r.ok and r.value.value == 2, r.text()
                t0 = time.perf_counter()
                c.exec(TRIVIAL)
                rtt_warm.append(time.perf_counter() - t0)
                uss.append(c.memory())
                c.close()
            # a copy really holds the state
            c = tree.root.fork()
            assert c.exec("len(df)").value.value == k * BASE_ROWS
            c.close()
        finally:
            tree.close()
            bare.close()
        out["bare_copy_ms"] = median_ms(bare_t)
        out["fork_copy_ms"] = median_ms(fork_t)
        out["fork_copy_p90_ms"] = sorted(fork_t)[int(0.9 * (len(fork_t) - 1))] * 1000
        out["rtt_copy_cold_ms"] = median_ms(rtt_cold)
        out["rtt_copy_ms"] = median_ms(rtt_warm)
        out["fork_idle_uss"] = statistics.median(uss)
        log(f"  fork: copy {out['fork_copy_ms']:.1f} ms, root {out['fork_root_ms']:.1f} ms, "
            f"idle USS {fmt_size(out['fork_idle_uss'])}")
    finally:
        stop_kernel(km, kc)

    # ---- replay sandbox (the user's kernel is gone: no competition for RAM)
    ready, rtt_replay, uss_replay = [], [], []
    for _ in range(replay_repeats):
        t0 = time.perf_counter()
        rt = ReplayTree.start(cells, notebook_dir=d, limits=Limits(timeout_s=1800))
        ready.append(time.perf_counter() - t0)
        try:
            rt.root.exec(TRIVIAL)
            t0 = time.perf_counter()
            rt.root.exec(TRIVIAL)
            rtt_replay.append(time.perf_counter() - t0)
            uss_replay.append(rt.root.memory())
        finally:
            rt.close()
    out["replay_copy_s"] = statistics.median(ready)
    out["rtt_replay_ms"] = median_ms(rtt_replay)
    out["replay_uss"] = statistics.median(uss_replay)
    log(f"  replay: copy {out['replay_copy_s']:.2f} s")
    shutil.rmtree(d, ignore_errors=True)
    return out


def print_table(rows: list[dict]) -> None:
    hdr = ["state", "fork copy ms (p90)", "tree root ms", "replay copy s", "replay/fork",
           "cell RTT copy ms", "cell RTT kernel ms", "idle copy USS", "USS % state",
           "replay USS"]
    lines = []
    for r in rows:
        lines.append([
            fmt_size(r["state_bytes"]),
            f"{r['fork_copy_ms']:.1f} ({r['fork_copy_p90_ms']:.1f})",
            f"{r['fork_root_ms']:.1f}",
            f"{r['replay_copy_s']:.2f}",
            f"{r['replay_copy_s'] * 1000 / r['fork_copy_ms']:.0f}x",
            f"{r['rtt_copy_ms']:.1f} (cold {r['rtt_copy_cold_ms']:.1f})",
            f"{r['rtt_kernel_ms']:.1f}",
            fmt_size(r["fork_idle_uss"]),
            f"{100 * r['fork_idle_uss'] / r['state_bytes']:.2f}%",
            fmt_size(r["replay_uss"]),
        ])
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(hdr)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(hdr, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for l in lines:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(l, widths)) + " |")


def print_layers(rows: list[dict]) -> None:
    """What confinement costs: the same kernel, with every layer and with none."""
    print("| state | copy ms, all layers | copy ms, no layers | added per copy ms "
          "| tree root ms, all layers | tree root ms, no layers |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {fmt_size(r['state_bytes'])} | {r['fork_copy_ms']:.2f} | {r['bare_copy_ms']:.2f} "
              f"| {r['fork_copy_ms'] - r['bare_copy_ms']:+.2f} | {r['fork_root_ms']:.1f} "
              f"| {r['bare_root_ms']:.1f} |")


def check_targets(rows: list[dict]) -> list[str]:
    msgs = []
    for r in rows:
        if size_at_least(r, 1 << 30):
            added = r["fork_copy_ms"] - r["bare_copy_ms"]
            msgs.append(f"confinement added per copy at {fmt_size(r['state_bytes'])}: "
                        f"{added:+.2f} ms (target <= 2 ms): {'PASS' if added <= 2 else 'FAIL'}")
        size = r["target_bytes"]
        speedup = r["replay_copy_s"] * 1000 / r["fork_copy_ms"]
        pct = 100 * r["fork_idle_uss"] / r["state_bytes"]
        if size >= 1 << 30:
            msgs.append(f"fork copy median at {fmt_size(r['state_bytes'])}: "
                        f"{r['fork_copy_ms']:.1f} ms (target <= 20 ms): "
                        f"{'PASS' if r['fork_copy_ms'] <= 20 else 'FAIL'}")
        if 150 << 20 <= size <= 300 << 20:
            msgs.append(f"speedup over replay at {fmt_size(r['state_bytes'])}: {speedup:.0f}x "
                        f"(target >= 100x): {'PASS' if speedup >= 100 else 'FAIL'}")
        msgs.append(f"idle copy USS at {fmt_size(r['state_bytes'])}: {pct:.2f}% of state "
                    f"(target <= 5%): {'PASS' if pct <= 5 else 'FAIL'}")
    return msgs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10MB,200MB,1GB")
    ap.add_argument("--repeats", type=int, default=15, help="fork measurements per size")
    ap.add_argument("--replay-repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the raw numbers here")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    rows = []
    for s in args.sizes.split(","):
        log(f"size {s}:")
        rows.append(bench_size(parse_size(s), args.repeats, args.replay_repeats, log))
    print()
    print_table(rows)
    print()
    print_layers(rows)
    print()
    print(f"protections: {rows[-1]['protections']}")
    for m in check_targets(rows):
        print(m)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
