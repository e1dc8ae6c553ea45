"""Mutations: a different answer close to the reference (each must not compare equal to it).

Each returns ``None`` where it is not meaningful for the value.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .values import (
    _float_dtype,
    _int_dtype,
    _is_float,
    _is_number,
    _is_scalar,
    _map_columns,
    _n_rows,
    _rows,
    identical,
    is_default_index,
    is_missing,
    mutate_one,
)

FLOAT_WRONG = 1e-4  # relative: far outside it


def _bump(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return not v
    if _is_float(v):
        return v + max(1.0, abs(v) * FLOAT_WRONG)
    return v + 1


def off_by_one(x: Any) -> Any:
    """One value (the last one) off by one; a flipped bool."""
    return mutate_one(x, lambda v: _is_number(v) or isinstance(v, (bool, np.bool_)), _bump)


def int_plus_one(x: Any) -> Any:
    """Every integer of a collection + 1 (a count off by one everywhere)."""
    if _is_scalar(x) or _n_rows(x) < 2:
        return None
    return _map_columns(x, _int_dtype, lambda v: v + 1)


def swap_columns(x: Any) -> Any:
    """The values of two same-dtype columns swapped, headers kept."""
    if not isinstance(x, pd.DataFrame):
        return None
    for j in range(x.shape[1]):
        for k in range(j + 1, x.shape[1]):
            a, b = x.iloc[:, j], x.iloc[:, k]
            if a.dtype == b.dtype and not a.reset_index(drop=True).equals(b.reset_index(drop=True)):
                y = x.copy()
                y.isetitem(j, b.to_numpy())
                y.isetitem(k, a.to_numpy())
                return y
    return None


def shuffle_index(x: Any) -> Any:
    """Group keys permuted: every value now sits under another key."""
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index) or len(x) < 2:
        return None
    n = len(x)
    perm = np.roll(np.arange(n), 1) if n < 4 else np.random.default_rng(0).permutation(n)
    if (perm == np.arange(n)).any():
        perm = np.roll(np.arange(n), 1)
    y = x.copy()
    y.index = x.index[perm]
    return y


def nan_to_zero(x: Any) -> Any:
    """Missing numbers reported as 0."""
    if _is_scalar(x):
        return 0.0 if isinstance(x, (float, np.floating)) and math.isnan(x) else None
    if isinstance(x, (list, tuple)):
        return mutate_one(x, lambda v: isinstance(v, (float, np.floating)) and math.isnan(v), lambda v: 0.0)
    return _map_columns(x, _float_dtype, lambda v: np.nan_to_num(v, nan=0.0) if isinstance(v, np.ndarray)
                        else v.fillna(0.0))


def _other_label(v: Any, present: set) -> Any:
    if isinstance(v, str):
        new: Any = v + "_x"
    elif isinstance(v, (pd.Timestamp, dt.date, np.datetime64)):
        new = pd.Timestamp(v) + pd.Timedelta(days=1)
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            new = new.date()
    elif isinstance(v, pd.Interval):
        new = pd.Interval(v.left + 1, v.right + 1, closed=v.closed)
    elif _is_number(v):
        new = v + 1
    else:
        return None
    while new in present:
        new = _other_label(new, set())
    return new


def wrong_key(x: Any) -> Any:
    """The first row's group key (its outer level) replaced by a label that is not there."""
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index) or not len(x):
        return None
    idx = x.index
    level = idx.levels[0] if isinstance(idx, pd.MultiIndex) else idx
    first = idx[0][0] if isinstance(idx, pd.MultiIndex) else idx[0]
    new = _other_label(first, set(level))
    if new is None:
        return None
    y = x.copy()
    if isinstance(idx, pd.MultiIndex):
        y.index = idx.set_levels(level.where(level != first, new) if not isinstance(level, pd.CategoricalIndex)
                                 else level.rename_categories({first: new}), level=0)
    elif isinstance(idx, pd.CategoricalIndex):
        y.index = idx.rename_categories({first: new})
    else:
        labels = list(idx)
        labels[0] = new
        y.index = pd.Index(labels, name=idx.name)
    return y


def order_flip(x: Any) -> Any:
    """Rows in the opposite order (ascending for descending)."""
    if _n_rows(x) < 2:
        return None
    y = _rows(x, slice(None, None, -1))
    a, b = (x, y) if not isinstance(x, (pd.Series, pd.DataFrame)) else (x.reset_index(drop=True),
                                                                      y.reset_index(drop=True))
    return None if identical(a, b) else y


def truncate(x: Any) -> Any:
    """A long result cut to its first rows (all but the last; 1,000 of a longer one)."""
    n = _n_rows(x)
    return _rows(x, slice(0, min(n - 1, 1000))) if n >= 20 else None


def wrong_rounding(x: Any) -> Any:
    """Floats rounded to one decimal, where that is a visible change."""
    def round1(v: Any) -> Any:
        return np.round(v, 1) if isinstance(v, np.ndarray) else (v.round(1) if hasattr(v, "round") else round(v, 1))

    y = _map_columns(x, _float_dtype, round1)
    return y if _beyond_tolerance(x, y) else None


def _float_values(x: Any) -> np.ndarray:
    if isinstance(x, pd.DataFrame):
        cols = [x.iloc[:, j].to_numpy(dtype=float) for j in range(x.shape[1]) if _float_dtype(x.iloc[:, j].dtype)]
        return np.concatenate(cols) if cols else np.array([])
    if isinstance(x, (pd.Series, np.ndarray)):
        return np.asarray(x, dtype=float).ravel() if _float_dtype(x.dtype) else np.array([])
    if isinstance(x, (list, tuple)):
        parts = [_float_values(v) for v in x]
        return np.concatenate(parts) if parts else np.array([])
    if isinstance(x, dict):
        return _float_values(list(x.values()))
    return np.array([float(x)]) if _is_float(x) else np.array([])


def _beyond_tolerance(x: Any, y: Any, factor: float = 100.0) -> bool:
    """Some float moved by more than ``factor`` times the comparison tolerance (rtol 1e-6, atol 1e-8)."""
    a, b = _float_values(x), _float_values(y)
    if a.shape != b.shape or not a.size:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.nan_to_num(np.abs(a - b) - factor * (1e-8 + 1e-6 * np.abs(a)), nan=-1.0).max() > 0)


def string_changed(x: Any) -> Any:
    """One text value (the last one) in another case, or with a letter added."""
    def change(s: str) -> str:
        return next((t for t in (s.upper(), s.lower()) if t != s), s + "x")

    return mutate_one(x, lambda v: isinstance(v, str) and bool(v.strip()), change)


def datetime_shift(x: Any) -> Any:
    """One date (the last one) a day off."""
    return mutate_one(x, lambda v: isinstance(v, (pd.Timestamp, pd.Timedelta, np.datetime64)) and not is_missing(v),
                      lambda v: v + pd.Timedelta(days=1))


MUTATIONS: dict[str, Callable[[Any], Any]] = {
    "off_by_one": off_by_one,
    "int_plus_one": int_plus_one,
    "swap_columns": swap_columns,
    "shuffle_index": shuffle_index,
    "nan_to_zero": nan_to_zero,
    "wrong_key": wrong_key,
    "order_flip": order_flip,
    "truncate": truncate,
    "wrong_rounding": wrong_rounding,
    "string_changed": string_changed,
    "datetime_shift": datetime_shift,
}
