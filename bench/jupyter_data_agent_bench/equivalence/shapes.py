"""Comparison time at every shape up to 1,000 x 2,000, where nothing pairs by name or digest.

    python -m jupyter_data_agent_bench.equivalence.shapes [--repeats 3]

For each shape, a frame of normal floats against (a) its copy with every value times (1 + 1e-9), columns
reversed and renamed (so columns pair only by value: the worst case of the assignment), (b) the same with
one cell changed by 1, (c) a float32 round trip of it (relative error up to 6e-8, inside the tolerance);
plus single columns past the form's cell budget (100,000 and 1,000,000 rows) with the same variants. It
reports the median time of ``same_answer`` and ``covers`` on the two finished forms (what a vote does per
pair; the forms are built once per candidate, in its copy, and timed apart) and the verdicts. Target
(issue 27): no comparison over 1 s; the verdicts right at every size.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .speed import _median_timed, _timed

SHAPES = ((1, 2000), (24, 2000), (50, 1000), (200, 2000), (1000, 200), (1000, 1000), (1000, 2000),
          (100_000, 1), (1_000_000, 1))
TARGET_S = 1.0


@dataclass
class ShapeRow:
    rows: int
    cols: int
    variant: str
    form_s: float  # both forms
    same_s: float
    covers_s: float
    same: bool
    covers: bool
    expected: bool


def variants(a: pd.DataFrame) -> list[tuple[str, pd.DataFrame, bool]]:
    """(name, variant, same answer?) of ``a``: nothing in them pairs by name or digest."""
    names = [f"c{j}" for j in range(a.shape[1])]
    noisy = pd.DataFrame(a.to_numpy()[:, ::-1] * (1 + 1e-9), columns=names)
    changed = noisy.copy()
    changed.iat[len(a) // 2, a.shape[1] // 2] += 1.0
    f32 = pd.DataFrame(a.to_numpy()[:, ::-1].astype(np.float32).astype(np.float64), columns=names)
    return [("1e-9 noise, columns reversed and renamed", noisy, True), ("the same, one cell + 1", changed, False),
            ("float32 round trip, reversed and renamed", f32, True)]


def measure(shapes: Sequence[tuple[int, int]] = SHAPES, repeats: int = 3, seed: int = 0) -> list[ShapeRow]:
    from jupyter_data_agent.search.equivalence import as_form, covers, same_answer

    rng = np.random.default_rng(seed)
    out = []
    for rows, cols in shapes:
        a = pd.DataFrame(rng.normal(size=(rows, cols)) * 100)
        fa, ta = _timed(as_form, a)
        for name, b, expected in variants(a):
            fb, tb = _timed(as_form, b)
            same, same_s = _median_timed(repeats, same_answer, fa, fb)
            cov, covers_s = _median_timed(repeats, covers, fb, fa)
            out.append(ShapeRow(rows, cols, name, ta + tb, same_s, covers_s, bool(same), bool(cov), expected))
    return out


def markdown(rows: Sequence[ShapeRow]) -> str:
    lines = ["| rows x columns | variant | forms of both s | same_answer s | covers s | verdicts |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        ok = r.same == r.expected and r.covers == r.expected
        lines.append(f"| {r.rows:,} x {r.cols:,} | {r.variant} | {r.form_s:.2f} | {r.same_s:.3f} | {r.covers_s:.3f} "
                     f"| same={r.same} covers={r.covers} ({'right' if ok else 'WRONG'}) |")
    worst = max((max(r.same_s, r.covers_s) for r in rows), default=0.0)
    wrong = sum(not (r.same == r.expected and r.covers == r.expected) for r in rows)
    lines.append(f"\nSlowest comparison: {worst:.3f} s (target <= {TARGET_S:.0f} s); wrong verdicts: {wrong}.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timings per comparison (the median is reported)")
    args = ap.parse_args(argv)
    print(markdown(measure(repeats=args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
