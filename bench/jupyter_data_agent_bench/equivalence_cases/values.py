"""What the variants need to know of a value and to change in it: missing values, default
indexes, strict identity, its cells (the last first), its columns by dtype, its rows."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd


def is_default_index(idx: pd.Index) -> bool:
    """An unnamed 0..n-1 carries no information (a filtered frame's row labels, or group keys that happen
    to be 0..n-1 under the group column's name, do)."""
    return not isinstance(idx, pd.MultiIndex) and idx.name is None and pd.api.types.is_integer_dtype(idx.dtype) \
        and bool((idx == np.arange(len(idx))).all())


def is_missing(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
        and not is_missing(v)


def _is_float(v: Any) -> bool:
    return isinstance(v, (float, np.floating)) and not is_missing(v)


def _is_scalar(x: Any) -> bool:
    return not isinstance(x, (list, tuple, dict, set)) and pd.api.types.is_scalar(x)


def identical(a: Any, b: Any) -> bool:
    """Strictly the same object value (type, labels, dtypes, values, NaN in place)."""
    if type(a) is not type(b):
        return False
    try:
        if isinstance(a, pd.DataFrame):
            return _labels_identical(a.columns, b.columns) and _labels_identical(a.index, b.index) \
                and a.dtypes.equals(b.dtypes) and a.equals(b)
        if isinstance(a, pd.Index):
            return _labels_identical(a, b)
        if isinstance(a, pd.Series):
            return a.dtype == b.dtype and a.equals(b) and _labels_identical(a.index, b.index) and a.name == b.name
        if isinstance(a, pd.api.extensions.ExtensionArray):
            return a.dtype == b.dtype and pd.Series(a).equals(pd.Series(b))
        if isinstance(a, np.ndarray):
            return a.dtype == b.dtype and a.shape == b.shape and bool(pd.Series(a.ravel()).equals(
                pd.Series(b.ravel())))
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
        if is_missing(a) and is_missing(b):
            return True
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _labels_identical(a: pd.Index, b: pd.Index) -> bool:
    """``Index.equals`` ignores names and dtype; here they count."""
    return a.equals(b) and list(a.names) == list(b.names) and a.dtype == b.dtype


def _positions(x: Any) -> Iterator[tuple]:
    """Cell positions from the last row backwards (right to left): the mutations' targets."""
    if isinstance(x, pd.DataFrame):
        for i in range(len(x) - 1, -1, -1):
            for j in range(x.shape[1] - 1, -1, -1):
                yield (i, j)
    elif isinstance(x, np.ndarray) and x.ndim == 2:
        for i in range(x.shape[0] - 1, -1, -1):
            for j in range(x.shape[1] - 1, -1, -1):
                yield (i, j)
    elif isinstance(x, dict):
        for k in reversed(list(x)):
            yield (k,)
    elif isinstance(x, (pd.Series, np.ndarray, pd.api.extensions.ExtensionArray, list, tuple)):
        for i in range(len(x) - 1, -1, -1):
            yield (i,)


def _get(x: Any, pos: tuple) -> Any:
    if isinstance(x, (pd.DataFrame, pd.Series)):
        return x.iat[pos]
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)):
        return x[pos]
    return x[pos[0]]


def _set(x: Any, pos: tuple, v: Any) -> Any:
    if isinstance(x, (pd.DataFrame, pd.Series)):
        y = x.copy()
        y.iat[pos] = v
        return y
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)):
        y = x.copy()
        y[pos if isinstance(x, np.ndarray) else pos[0]] = v
        return y
    if isinstance(x, dict):
        return {**x, pos[0]: v}
    items = list(x)
    items[pos[0]] = v
    return type(x)(items) if isinstance(x, tuple) else items


def _categorical(x: Any, pos: tuple) -> bool:
    if isinstance(x, pd.DataFrame):
        return isinstance(x.iloc[:, pos[1]].dtype, pd.CategoricalDtype)
    return isinstance(x, pd.Series) and isinstance(x.dtype, pd.CategoricalDtype)


def mutate_one(x: Any, pred: Callable[[Any], bool], change: Callable[[Any], Any],
               limit: int = 200_000) -> Any:
    """``x`` with its last cell satisfying ``pred`` replaced by ``change(cell)`` (None: no such cell)."""
    if _is_scalar(x):
        return change(x) if pred(x) else None
    for n, pos in enumerate(_positions(x)):
        if n >= limit:
            break
        v = _get(x, pos)
        if pred(v) and not _categorical(x, pos):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    return _set(x, pos, change(v))
                except (TypeError, ValueError):
                    continue
    return None


def _map_columns(x: Any, pred: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every Series/column/array/element whose dtype (or value) satisfies ``pred``."""
    if isinstance(x, pd.DataFrame):
        y = x.copy()
        for j in range(x.shape[1]):
            if pred(x.iloc[:, j].dtype):
                y.isetitem(j, fn(x.iloc[:, j]))
        return y
    if isinstance(x, (pd.Series, np.ndarray, pd.api.extensions.ExtensionArray)):
        return fn(x) if pred(x.dtype) else x
    if isinstance(x, (list, tuple)):
        items = [_map_columns(v, pred, fn) for v in x]
        return tuple(items) if isinstance(x, tuple) else items
    if isinstance(x, dict):
        return {k: _map_columns(v, pred, fn) for k, v in x.items()}
    if _is_scalar(x) and not is_missing(x) and pred(np.asarray(x).dtype) and not isinstance(x, (bool, np.bool_)):
        return fn(x)
    return x


def _float_dtype(d: Any) -> bool:
    return pd.api.types.is_float_dtype(d)


def _int_dtype(d: Any) -> bool:
    return pd.api.types.is_integer_dtype(d) and not pd.api.types.is_bool_dtype(d)


def _n_rows(x: Any) -> int:
    if isinstance(x, (pd.DataFrame, pd.Series, list, tuple, pd.api.extensions.ExtensionArray)) or (
            isinstance(x, np.ndarray) and x.ndim >= 1):
        return len(x)
    return 0


def _rows(x: Any, rows: slice) -> Any:
    if isinstance(x, (pd.DataFrame, pd.Series)):
        return x.iloc[rows]
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)):
        return x[rows].copy()
    return type(x)(x[rows]) if isinstance(x, tuple) else list(x[rows])
