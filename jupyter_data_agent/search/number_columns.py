"""Number columns within tolerance: cell by cell, by sketch past the form's budget, and paired by probe.

``equivalence`` decides whether two answers are the same; this module holds what it does with number
columns: the tolerance (``RTOL``/``ATOL``), the vectorised cell comparison, the sketch comparison (what two
columns within tolerance everywhere must show, ``kernel.answer_form.num_sketch``), and the pairing of many
columns by *probes* (each column's sampled values and its position-weighted sums over 16 row blocks) so that
comparing two wide frames stays about linear in the columns. The block sums are part of the probe because
sampled values alone collide: in a mostly-zero frame most columns sample only zeros.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ..kernel.answer_form import MAX_SKETCH_BLOCKS, SKETCH_BLOCKS, num_sketch
from .deadline import check

__all__ = ["ATOL", "RTOL", "Numbers", "array", "arrays_same", "near_probes", "num", "sketches_agree"]

RTOL = 1e-6
ATOL = 1e-8
_EPS = 2.220446049250313e-16


def num(v: Any) -> float | int:
    """A form's number: ints past 64 bits and infinities travel as text."""
    if not isinstance(v, str):
        return v
    try:
        return int(v)
    except ValueError:
        return float(v)


def array(values: list) -> Any:
    """A form's numbers as floats: numpy reads None as NaN and the text of infinities and big ints."""
    import numpy as np  # a dependency; imported late, as most answers hold no numbers

    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([math.nan if v is None else num(v) for v in values], dtype=np.float64)


class Numbers:
    """Each number column's values, sketch and probe as arrays, built once per comparison: pairing columns
    by value compares one column with many. Keyed by ``id``: the columns must outlive it."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], Any] = {}

    def of(self, col: dict) -> Any:
        """The values as an array, or ``None`` past the form's budget."""
        if "values" not in col or col["kind"] != "num":
            return None
        key = ("v", id(col))
        if key not in self._cache:
            self._cache[key] = array(col["values"])
        return self._cache[key]

    def sketch(self, col: dict) -> tuple | None:
        """The column's sketch as arrays (mask digest, sample, weighted sums, absolute sums): kept in the form
        past its budget, else computed from the values in the finest blocks."""
        key = ("s", id(col))
        if key not in self._cache:
            sketch = col.get("sketch")
            if sketch is None:
                x = self.of(col)
                sketch = None if x is None else num_sketch(x, MAX_SKETCH_BLOCKS)
            if sketch is None or "wsums" not in sketch:  # a form from before the weighted sums: no sketch
                self._cache[key] = None
            else:
                self._cache[key] = (sketch["mask"], array(sketch["sample"]), array(sketch["wsums"]),
                                    array(sketch["abs"]))
        return self._cache[key]

    def probe(self, col: dict) -> tuple | None:
        """The sampled values, and the weighted and absolute sums over ``SKETCH_BLOCKS`` row blocks (fewer for
        a short column): what two columns within tolerance must share; ``None`` without values or sketch."""
        key = ("p", id(col))
        if key not in self._cache:
            x = self.of(col)
            sk = self.sketch(col) if x is None else None
            if x is not None:
                s = num_sketch(x, SKETCH_BLOCKS)
                sk = (None, array(s["sample"]), array(s["wsums"]), array(s["abs"]))
            if sk is None:
                self._cache[key] = None
            else:
                blocks = _pow2(min(col["n"], SKETCH_BLOCKS))
                w, a = sk[2], sk[3]
                if not blocks or len(w) % blocks:
                    self._cache[key] = None
                else:
                    self._cache[key] = (sk[1], w.reshape(blocks, -1).sum(axis=1), a.reshape(blocks, -1).sum(axis=1))
        return self._cache[key]


def _pow2(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1) if n > 0 else 0


@functools.lru_cache(maxsize=64)
def block_rows(n: int, blocks: int) -> Any:
    """The rows in each of ``blocks`` blocks of a column of ``n`` (as the sketch cuts them)."""
    import numpy as np

    return np.diff((np.arange(blocks + 1) * n) // blocks).astype(np.float64)


def arrays_same(a: Any, b: Any) -> bool:
    """Equal within tolerance, cell by cell (NaN only NaN; integral values exactly), vectorised."""
    import numpy as np

    ma, mb = np.isnan(a), np.isnan(b)
    if not np.array_equal(ma, mb):
        return False
    a, b = a[~ma], b[~mb]
    exact = a == b
    if exact.all():
        return True
    ia = np.isfinite(a) & (a == np.round(a))
    ib = np.isfinite(b) & (b == np.round(b))
    if np.any(~exact & ia & ib):
        return False  # two integral values that differ
    with np.errstate(all="ignore"):
        close = np.abs(a - b) <= ATOL + RTOL * np.maximum(np.abs(a), np.abs(b))
    return bool(np.all(exact | (close & np.isfinite(a) & np.isfinite(b))))


def _sums_close(wa: Any, wb: Any, absa: Any, absb: Any, rows: Any) -> Any:
    """Per block: weighted sums no further apart than the cells' tolerances summed (all weights are in
    [0.5, 1), so ``|sum w (a - b)| <= sum |a - b| <= (rows * ATOL + RTOL * sum |a|) / (1 - RTOL)``), plus the
    sums' own rounding."""
    import numpy as np

    with np.errstate(all="ignore"):
        bound = (rows * ATOL + RTOL * np.maximum(absa, absb)) / (1 - RTOL)
        slack = 4 * rows * _EPS * (absa + absb)
        return (wa == wb) | (np.abs(wa - wb) <= bound + slack)


def sketches_agree(sa: tuple, sb: tuple, n: int) -> bool:
    """What two columns within tolerance everywhere must show: the same missing cells, the sampled values
    within tolerance, and each block's weighted sums within its cells' tolerances summed (so rows that
    trade places show). The finer sketch is summed to the coarser one's blocks (powers of two nest)."""
    (mask_a, sample_a, suma, absa), (mask_b, sample_b, sumb, absb) = sa, sb
    if mask_a != mask_b or not arrays_same(sample_a, sample_b):
        return False
    blocks = min(len(suma), len(sumb))
    if not blocks or len(suma) % blocks or len(sumb) % blocks:
        return False
    suma, absa = suma.reshape(blocks, -1).sum(axis=1), absa.reshape(blocks, -1).sum(axis=1)
    sumb, absb = sumb.reshape(blocks, -1).sum(axis=1), absb.reshape(blocks, -1).sum(axis=1)
    return bool(_sums_close(suma, sumb, absa, absb, block_rows(n, blocks)).all())


def near_probes(left: list[tuple], right: list[tuple], n: int) -> list[list[int]]:
    """For each left probe, the right probes it may equal: sampled values within tolerance (NaN only NaN) and
    weighted block sums within their bound.

    The right probes are sorted on their most varied entry; each left probe looks only at those inside its
    window there (``|a - b| <= ATOL + RTOL * max(|a|, |b|)`` implies ``|a - b| <= (ATOL + RTOL * |a|) /
    (1 - RTOL)``; a block sum's window is its bound from the left side's absolute sum) and then checks the
    rest: about linear, not every pair."""
    import numpy as np

    ls, lw, la = (np.array([p[k] for p in left], dtype=np.float64) for k in range(3))
    rs, rw, ra = (np.array([p[k] for p in right], dtype=np.float64) for k in range(3))
    rows = block_rows(n, lw.shape[1]) if lw.shape[1] else np.zeros(0)
    lv, rv = np.hstack([ls, lw]), np.hstack([rs, rw])
    key = max(range(rv.shape[1]), key=lambda c: len(np.unique(rv[:, c])))
    col = rv[:, key]
    finite = np.flatnonzero(np.isfinite(col))
    order = finite[np.argsort(col[finite], kind="stable")]
    ordered = col[order]
    exact: dict[str, list[int]] = {}
    for k in np.flatnonzero(~np.isfinite(col)).tolist():
        exact.setdefault(repr(float(col[k])), []).append(k)
    values = lv[:, key]
    with np.errstate(all="ignore"):
        if key < ls.shape[1]:
            width = (ATOL + RTOL * np.abs(values)) / (1 - RTOL)
        else:
            b = key - ls.shape[1]
            room = (rows[b] * ATOL + RTOL * la[:, b]) / (1 - RTOL)
            width = room + 4 * rows[b] * _EPS * (2 * la[:, b] + room)
        width = width * (1 + 1e-9)
    lo = np.searchsorted(ordered, values - width, "left")
    hi = np.searchsorted(ordered, values + width, "right")
    out: list[list[int]] = []
    for i, v in enumerate(values.tolist()):
        check()
        pool = order[lo[i]:hi[i]] if math.isfinite(v) else np.array(exact.get(repr(v), []), dtype=np.int64)
        if not len(pool):
            out.append([])
            continue
        a, b = ls[i][None, :], rs[pool]
        with np.errstate(all="ignore"):
            ok = ((a == b) | (np.isnan(a) & np.isnan(b)) |
                  (np.abs(a - b) <= ATOL + RTOL * np.maximum(np.abs(a), np.abs(b)))).all(axis=1)
        ok &= _sums_close(lw[i][None, :], rw[pool], la[i][None, :], ra[pool], rows).all(axis=1)
        out.append(pool[ok].tolist())
    return out
