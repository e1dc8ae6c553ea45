"""Speed of ``same_answer``/``covers`` on a 1M-row frame and a 2,000-column frame, forms included."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class SpeedRow:
    """Seconds (medians): forms of both values, the comparisons on forms, and end to end on the values."""

    case: str
    form_s: float
    same_s: float
    covers_s: float
    total_s: float  # same_answer on the two Python values, forms included
    same: bool
    covers: bool
    expected: bool


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def speed_pairs(rows: int = 1_000_000, wide: tuple[int, int] = (1000, 2000)) -> list[tuple[str, Any, Any, bool]]:
    """(name, a, b, same?) — a 1M-row frame vs one whose last text cell differs; a wide frame vs its equal
    copy and vs a copy with one column changed."""
    import pandas as pd

    rng = np.random.default_rng(0)
    long = pd.DataFrame({"id": np.arange(rows), "x": rng.normal(size=rows), "k": rng.integers(0, 100, rows),
                         "name": [f"item {i}" for i in range(rows)]})
    long_b = long.copy()
    long_b.iat[-1, 3] = "item changed"
    w = pd.DataFrame(rng.normal(size=wide), columns=[f"c{j}" for j in range(wide[1])])
    w_changed = w.copy()
    w_changed.isetitem(wide[1] // 2, w.iloc[:, wide[1] // 2] + 1.0)
    return [(f"{rows:,} rows x 4 columns, last text cell differs", long, long_b, False),
            (f"{wide[0]:,} rows x {wide[1]:,} columns, equal copy", w, w.copy(), True),
            (f"{wide[0]:,} rows x {wide[1]:,} columns, one column changed", w, w_changed, False)]


def _median_timed(repeats: int, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """The result and the median time of ``repeats`` calls (the machine may be shared)."""
    runs = [_timed(fn, *args) for _ in range(max(1, repeats))]
    return runs[0][0], statistics.median(t for _, t in runs)


def speed_lines(pairs: Sequence[tuple[str, Any, Any, bool]], repeats: int = 3) -> list[SpeedRow]:
    """Median of ``repeats`` timings of each step."""
    from jupyter_data_agent.search.equivalence import as_form, covers, same_answer

    out = []
    for name, a, b, expected in pairs:
        fa, form_a = _median_timed(repeats, as_form, a)
        fb, form_b = _median_timed(repeats, as_form, b)
        same, same_s = _median_timed(repeats, same_answer, fa, fb)
        cov, covers_s = _median_timed(repeats, covers, fb, fa)
        _, total_s = _median_timed(repeats, same_answer, a, b)
        out.append(SpeedRow(name, form_a + form_b, same_s, covers_s, total_s, bool(same), bool(cov), expected))
    return out
