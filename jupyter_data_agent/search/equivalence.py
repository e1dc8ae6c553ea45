"""Fuzzy output equivalence in the style of ARCADE (Yin et al., 2022).

Notebook answers are judged by the *value* a cell produces, and the same
answer comes in many shapes (a Series vs. a one-column frame, a list vs. an
ndarray, ``np.float64`` vs. ``float``).  Self-consistency voting and
evaluation both need to treat those as one answer, so comparison is lenient
about containers, headers and index but strict about values.

Rules, applied in order by :func:`outputs_match` (prediction, reference):

1. Normalisation: numpy scalars become Python values (``np.datetime64`` ->
   ``pd.Timestamp``); a float NaN becomes ``0.0``.  Inside arrays, Series, frames and value lists every
   missing marker (NaN, None, pd.NA, NaT) counts as 0, since pandas uses
   them interchangeably; a bare scalar ``None`` still only equals ``None``
   (a cell that produced nothing is not the answer 0).
2. Strict equality: same type and ``DataFrame.equals`` / ``np.array_equal`` /
   ``==``.
3. Scalars: numbers (not ``bool``) match within ``atol=1e-5`` (plus
   ``rtol=1e-5``, the ``np.allclose`` rule, so large floats are not held to
   an absolute bound they cannot represent); ``bool`` only equals ``bool``;
   strings compare exactly **after stripping surrounding whitespace** (a
   trailing newline is a formatting artefact, not a different answer; case
   and inner whitespace still count); a string never equals a number.
4. A one-element collection (list, tuple, set, ndarray, Series, 1x1 frame)
   matches a scalar, in either direction.
5. A Series compared with a DataFrame becomes ``to_frame().reset_index()``
   (the reference keeps a default ``RangeIndex`` out, since it carries no
   information).
6. Two DataFrames with the same row count, where the prediction has at least
   as many columns, match when every reference column equals (as a value
   vector, rows in the given order, float tolerance) some predicted column.
   Headers are ignored, a predicted column may serve several reference
   columns, and the levels of a non-default predicted index count as extra
   predicted columns (the same idea as rule 5).
7. Other collection pairs (list, tuple, set, ndarray, Series, DataFrame,
   Index) compare as value arrays ignoring headers and index: equal shapes
   (after squeezing length-1 axes) and ``np.allclose(atol=1e-5)`` for numeric
   data, element-wise fuzzy equality otherwise.  Sets are sorted first (both
   sides), since their iteration order is arbitrary.
8. Dicts: dict vs. dict needs the same keys and matching values; a dict vs.
   another collection is compared as ``pd.Series(dict)``.

Everything else, and any exception raised while comparing, is ``False``.
:func:`outputs_match` is asymmetric (rule 6); :func:`equivalent` requires a
match both ways and is what :func:`cluster` uses. :func:`majority` is the one
self-consistency pick (``vote``, ``mcts``, the ARCADE benchmark).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["ATOL", "RTOL", "cluster", "equivalent", "majority", "outputs_match"]

ATOL = 1e-5
RTOL = 1e-5
_MAX_DEPTH = 40


# --------------------------------------------------------------------------
# normalisation helpers


def _normalize(x: Any) -> Any:
    if isinstance(x, np.datetime64):
        return pd.Timestamp(x)
    if isinstance(x, np.timedelta64):
        return pd.Timedelta(x)
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and math.isnan(x):
        return 0.0
    return x


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, bool)


def _is_collection(x: Any) -> bool:
    return isinstance(
        x, (list, tuple, set, frozenset, dict, np.ndarray, pd.Series, pd.DataFrame, pd.Index)
    )


def _default_index(idx: pd.Index) -> bool:
    return (
        isinstance(idx, pd.RangeIndex)
        and idx.start == 0
        and idx.step == 1
        and idx.name is None
    )


def _size(x: Any) -> int:
    if isinstance(x, (np.ndarray, pd.Series, pd.DataFrame, pd.Index)):
        return int(x.size)
    return len(x)


def _single(x: Any) -> Any:
    """The only element of a one-element collection."""
    if isinstance(x, (np.ndarray, pd.Series, pd.DataFrame, pd.Index)):
        return np.asarray(x, dtype=object).ravel()[0]
    if isinstance(x, dict):
        return next(iter(x.values()))
    return next(iter(x))


def _sorted_list(xs: Any) -> list:
    items = [_normalize(v) for v in xs]
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


# --------------------------------------------------------------------------
# strict and scalar comparison


def _strict_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    try:
        if isinstance(a, (pd.DataFrame, pd.Series, pd.Index)):
            return bool(a.equals(b))
        if isinstance(a, np.ndarray):
            return a.shape == b.shape and bool(np.array_equal(a, b))
        r = a == b
        return isinstance(r, (bool, np.bool_)) and bool(r)
    except Exception:
        return False


def _scalar_match(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        try:
            fa, fb = complex(a), complex(b)
        except (TypeError, ValueError, OverflowError):
            return False
        if fa == fb:
            return True
        return abs(fa - fb) <= ATOL + RTOL * abs(fb)
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a.strip() == b.strip()
    if a is None or b is None:
        return a is b
    if _is_number(a) != _is_number(b):
        return False
    try:
        r = a == b
    except Exception:
        return False
    return isinstance(r, (bool, np.bool_)) and bool(r)


# --------------------------------------------------------------------------
# array comparison


def _is_missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _numeric(arr: np.ndarray) -> np.ndarray | None:
    """A float/complex copy of ``arr`` with missing values as 0, or None.

    Bools are deliberately not numeric, matching the scalar rule.
    """
    kind = arr.dtype.kind
    if kind in "iu":
        return arr.astype(np.float64)
    if kind in "fc":
        out = arr.astype(np.complex128 if kind == "c" else np.float64)
        return np.where(np.isnan(out), 0, out)
    if kind != "O" or arr.size == 0:
        return None
    vals = []
    seen_number = False
    for v in arr.ravel():
        if isinstance(v, np.generic):
            v = v.item()
        if _is_missing(v):
            vals.append(0)
        elif _is_number(v):
            seen_number = True
            vals.append(v)
        else:
            return None  # bail out on the first non-number
    if not seen_number:
        return None
    for dt in (np.float64, np.complex128):
        try:
            return np.array(vals, dtype=dt).reshape(arr.shape)
        except (TypeError, ValueError, OverflowError):
            continue
    return None


def _quick_equal(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.array_equal(a, b))
    except Exception:
        return False


def _to_array(x: Any) -> np.ndarray | None:
    try:
        if isinstance(x, pd.DataFrame):
            return x.to_numpy()
        if isinstance(x, (pd.Series, pd.Index)):
            return x.to_numpy()
        if isinstance(x, np.ndarray):
            return np.asarray(x)  # np.matrix never squeezes to 1-D
        if isinstance(x, (set, frozenset)):
            return _array_from_list(_sorted_list(x))
        if isinstance(x, (list, tuple)):
            return _array_from_list(list(x))
    except Exception:
        return None
    return None


def _array_from_list(xs: list) -> np.ndarray | None:
    # dtype=object: letting numpy pick a dtype would turn [1, "a"] into strings
    if any(isinstance(v, (dict, pd.DataFrame, pd.Series, set, frozenset)) for v in xs):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            arr = np.asarray(xs, dtype=object)
        except (ValueError, TypeError):
            return None
    if arr.dtype.kind == "O" and arr.ndim == 1 and any(_is_collection(v) for v in xs):
        return None  # ragged: compare element-wise instead
    return arr


def _arrays_match(a: np.ndarray, b: np.ndarray, depth: int) -> bool:
    if a.shape != b.shape:
        a, b = np.squeeze(a), np.squeeze(b)
        if a.shape != b.shape:
            return False
    if a.size == 0:
        return True
    na, nb = _numeric(a), _numeric(b)
    if na is not None and nb is not None:
        return bool(np.allclose(na, nb, atol=ATOL, rtol=RTOL))
    if _quick_equal(a, b):
        return True
    # lazy, so a mismatching column fails at its first differing element
    return all(
        _match(_missing_to_zero(x), _missing_to_zero(y), depth + 1)
        for x, y in zip(a.ravel(), b.ravel())
    )


def _missing_to_zero(v: Any) -> Any:
    """Inside arrays, Series and frames every missing marker counts as 0."""
    v = _normalize(v)
    if v is None or v is pd.NA or v is pd.NaT:
        return 0.0
    return v


def _vectors_match(a: np.ndarray, b: np.ndarray, depth: int) -> bool:
    return len(a) == len(b) and _arrays_match(a, b, depth)


# --------------------------------------------------------------------------
# frames


def _series_to_frame(s: pd.Series, *, keep_default_index: bool) -> pd.DataFrame:
    if not keep_default_index and _default_index(s.index):
        return s.to_frame()
    return s.to_frame().reset_index(allow_duplicates=True)


def _frame_columns(df: pd.DataFrame, *, with_index: bool) -> list[np.ndarray]:
    cols = [df.iloc[:, i].to_numpy() for i in range(df.shape[1])]
    if with_index and not _default_index(df.index):
        levels = [
            df.index.get_level_values(i).to_numpy() for i in range(df.index.nlevels)
        ]
        cols = levels + cols
    return cols


def _frames_match(pred: pd.DataFrame, ref: pd.DataFrame, depth: int) -> bool:
    if len(pred) != len(ref):
        return False
    if ref.shape[1] == 0:
        return pred.shape[1] == 0
    pcols = _frame_columns(pred, with_index=True)
    rcols = _frame_columns(ref, with_index=False)
    if len(pcols) < len(rcols):
        return False
    return all(any(_vectors_match(p, r, depth) for p in pcols) for r in rcols)


# --------------------------------------------------------------------------
# dispatcher


def _match(pred: Any, ref: Any, depth: int = 0) -> bool:
    if depth > _MAX_DEPTH:
        return False
    pred, ref = _normalize(pred), _normalize(ref)
    if pred is ref or _strict_equal(pred, ref):
        return True
    pc, rc = _is_collection(pred), _is_collection(ref)
    if not pc and not rc:
        return _scalar_match(pred, ref)
    if pc != rc:  # rule 4
        coll, other = (pred, ref) if pc else (ref, pred)
        try:
            if _size(coll) != 1:
                return False
            elem = _single(coll)
        except Exception:
            return False
        return _match(elem, other, depth + 1) if pc else _match(other, elem, depth + 1)

    # both collections
    if isinstance(pred, dict) and isinstance(ref, dict):
        if set(pred) != set(ref):
            return False
        return all(_match(pred[k], ref[k], depth + 1) for k in ref)
    if isinstance(pred, dict):
        pred = pd.Series(pred, dtype=object)
    if isinstance(ref, dict):
        ref = pd.Series(ref, dtype=object)

    if isinstance(pred, pd.Series) and isinstance(ref, pd.DataFrame):
        pred = _series_to_frame(pred, keep_default_index=True)
    elif isinstance(ref, pd.Series) and isinstance(pred, pd.DataFrame):
        ref = _series_to_frame(ref, keep_default_index=False)
    if isinstance(pred, pd.DataFrame) and isinstance(ref, pd.DataFrame):
        return _frames_match(pred, ref, depth)

    if isinstance(pred, (set, frozenset)) or isinstance(ref, (set, frozenset)):
        pred, ref = _sorted_list(pred), _sorted_list(ref)
    a, b = _to_array(pred), _to_array(ref)
    if a is not None and b is not None:
        return _arrays_match(a, b, depth)
    # ragged or nested containers: compare element by element
    pl, rl = _as_list(pred), _as_list(ref)
    if pl is None or rl is None or len(pl) != len(rl):
        return False
    return all(_match(x, y, depth + 1) for x, y in zip(pl, rl))


def _as_list(x: Any) -> list | None:
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, (np.ndarray, pd.Series, pd.Index)):
        return list(np.asarray(x, dtype=object).ravel()) if np.ndim(x) <= 1 else [
            row for row in np.asarray(x, dtype=object)
        ]
    if isinstance(x, pd.DataFrame):
        return [row for row in x.to_numpy(dtype=object)]
    return None


# --------------------------------------------------------------------------
# public API


def outputs_match(prediction: object, reference: object) -> bool:
    """True if ``prediction`` answers ``reference`` under the ARCADE rules.

    Asymmetric: extra predicted frame columns are allowed, missing reference
    columns are not.  Never raises.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(_match(prediction, reference))
    except Exception:
        return False


def equivalent(a: object, b: object) -> bool:
    """Symmetric equivalence (a match in both directions), for clustering."""
    return outputs_match(a, b) and outputs_match(b, a)


def cluster(values: Sequence[object], same: Callable[[Any, Any], bool] = equivalent
            ) -> list[list[int]]:
    """Group indices of equal values (``same``); largest group first.

    Fuzzy equivalence is not transitive, so grouping is greedy and
    deterministic: each value joins the first existing group whose first
    member it is equivalent to.  Ties in size go to the group that appeared
    first.
    """
    groups: list[list[int]] = []
    for i, v in enumerate(values):
        for g in groups:
            if same(values[g[0]], v):
                g.append(i)
                break
        else:
            groups.append([i])
    return sorted(groups, key=lambda g: (-len(g), g[0]))


def majority(answers: Sequence[object], same: Callable[[Any, Any], bool] = equivalent
             ) -> list[list[int]]:
    """Self-consistency: the groups of equal answers, the winner first.

    ``None`` (a candidate that raised or showed nothing) never votes: two
    silent cells must not out-vote the one that computed the answer.
    """
    voters = [i for i, a in enumerate(answers) if a is not None]
    return [[voters[j] for j in g] for g in cluster([answers[i] for i in voters], same)]
