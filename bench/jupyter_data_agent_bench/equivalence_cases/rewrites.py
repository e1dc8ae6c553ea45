"""Rewrites: the same answer in another representation (each must compare equal to the reference).

Each returns ``None`` where it is not meaningful for the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .values import _float_dtype, _is_scalar, _map_columns, is_default_index

FLOAT_NOISE = 1e-9  # relative: far inside any float tolerance


def to_frame(x: Any) -> Any:
    return x.to_frame() if isinstance(x, pd.Series) else None


def squeeze(x: Any) -> Any:
    return x.iloc[:, 0] if isinstance(x, pd.DataFrame) and x.shape[1] == 1 else None


def reset_index(x: Any) -> Any:
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index):
        return None
    try:
        return x.reset_index()
    except ValueError:  # a level name collides with a column
        return None


def to_numpy(x: Any) -> Any:
    if isinstance(x, (pd.Index, pd.api.extensions.ExtensionArray)) or (
            isinstance(x, (pd.Series, pd.DataFrame)) and is_default_index(x.index)):
        return x.to_numpy()
    return None


def tolist(x: Any) -> Any:
    if isinstance(x, pd.Index) or (isinstance(x, pd.Series) and is_default_index(x.index)):
        return x.tolist()
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)) and x.ndim == 1:
        return x.tolist()
    return list(x) if isinstance(x, tuple) else None


def to_array(x: Any) -> Any:
    if not isinstance(x, (list, tuple)) or not x or any(isinstance(v, (list, tuple, dict)) for v in x):
        return None
    return np.array(x)


def rename_columns(x: Any) -> Any:
    """New header names (plain string headers only: a pivot's column labels are data)."""
    if isinstance(x, pd.Series):
        return x.rename("value" if x.name is None else f"{x.name}_v")
    if isinstance(x, pd.DataFrame) and not isinstance(x.columns, pd.MultiIndex) and x.columns.name is None \
            and all(isinstance(c, str) for c in x.columns):
        return x.rename(columns=lambda c: f"{c}_v")
    return None


def rename_axis(x: Any) -> Any:
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index):
        return None
    return x.rename_axis([f"key{i}" if n is None else f"{n}_k" for i, n in enumerate(x.index.names)])


def reorder_columns(x: Any) -> Any:
    return x.iloc[:, ::-1] if isinstance(x, pd.DataFrame) and x.shape[1] >= 2 else None


def astype_object(x: Any) -> Any:
    if isinstance(x, pd.DataFrame):
        return None if all(d == np.dtype(object) for d in x.dtypes) else x.astype(object)
    if isinstance(x, (pd.Series, np.ndarray, pd.api.extensions.ExtensionArray)):
        return None if x.dtype == np.dtype(object) else x.astype(object)
    return None


def float_noise(x: Any) -> Any:
    """Floats times (1 + 1e-9): another summation order."""
    return _map_columns(x, _float_dtype, lambda v: v * (1 + FLOAT_NOISE))


def numpy_python(x: Any) -> Any:
    """A numpy scalar as the Python one and back; a Timestamp as a ``datetime``."""
    if isinstance(x, pd.Timestamp):
        return x.to_pydatetime()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (bool, int, float, str)):
        return np.array(x)[()]
    return None


def one_element(x: Any) -> Any:
    return [x] if _is_scalar(x) and x is not None else None


def strip_pad(x: Any) -> Any:
    return f"  {x}\n" if isinstance(x, str) else None


def dict_series(x: Any) -> Any:
    return pd.Series(x) if isinstance(x, dict) and x else None


def dict_reorder(x: Any) -> Any:
    return dict(reversed(list(x.items()))) if isinstance(x, dict) and len(x) >= 2 else None


def reset_reorder(x: Any) -> Any:
    """Keys as columns, columns reversed, object dtype: three rewrites at once."""
    y = reset_index(x)
    return None if y is None else y.iloc[:, ::-1].astype(object)


REWRITES: dict[str, Callable[[Any], Any]] = {
    "to_frame": to_frame,
    "squeeze": squeeze,
    "reset_index": reset_index,
    "to_numpy": to_numpy,
    "tolist": tolist,
    "to_array": to_array,
    "rename_columns": rename_columns,
    "rename_axis": rename_axis,
    "reorder_columns": reorder_columns,
    "astype_object": astype_object,
    "float_noise": float_noise,
    "numpy_python": numpy_python,
    "one_element": one_element,
    "strip_pad": strip_pad,
    "dict_series": dict_series,
    "dict_reorder": dict_reorder,
    "reset_reorder": reset_reorder,
}
