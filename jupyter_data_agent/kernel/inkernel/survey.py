"""What else an agent needs of a live kernel: its other variables, and one frame's column statistics.

``kernel.schema`` describes DataFrames for the prompt (names, dtypes, examples);
an outside agent asking through MCP also wants the arrays, scalars, containers
and fitted models around them, and per column the nulls, distinct values and
basic statistics. Both are read the way ``schema.inspect_kernel`` reads frames:
a self-contained function whose *source* travels in one silent
``user_expressions`` request (a ``kernel.handle``'s ``evaluate``), so nothing runs as a cell, no
name is bound in the user namespace, and the kernel needs nothing installed.
Both are bounded in time and size: a frame of millions of rows is counted
exactly where that is one vectorized pass (nulls, min, max, mean, std) and
on a head sample where it needs hashing (distinct values, the top value).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from .. import rpc

__all__ = ["frame_stats", "kernel_objects", "SurveyError"]


class SurveyError(RuntimeError):
    """The kernel could not be read (busy, dead, or the reader failed); the message says which."""


def _jda_survey_objects(ns, max_items=100, max_value_chars=200, time_limit=1.0):
    """Kernel side: the non-frame variables worth naming, as JSON-ready dicts, definition order.

    Scalars carry their value (text cut to ``max_value_chars``), arrays their shape and
    dtype, containers their length, fitted-model-like objects (a class with ``fit`` and
    ``predict`` or ``transform``) their class. Types are read with ``type()``, never an
    instance attribute, so a user ``__getattr__`` or property never runs. Self-contained.
    """
    import math
    import sys
    import time

    deadline = time.monotonic() + time_limit
    np = sys.modules.get("numpy")
    pd = sys.modules.get("pandas")
    frames = (pd.DataFrame, pd.Series) if pd is not None else ()
    limit = max(int(max_value_chars), 8)
    out = []
    for name, obj in list(ns.items()):
        if time.monotonic() > deadline:
            break
        if not isinstance(name, str) or name.startswith("_") or name in ("In", "Out", "exit", "quit"):
            continue
        t = type(obj)
        try:
            if frames and issubclass(t, frames):
                continue
            entry = None
            if t is bool or (np is not None and issubclass(t, np.bool_)):
                entry = {"kind": "scalar", "value": bool(obj)}
            elif t is int or (np is not None and issubclass(t, np.integer)):
                n = int(obj)
                entry = {"kind": "scalar", "value": n if abs(n) < 2 ** 53 else str(n)[:limit]}
            elif t is float or (np is not None and issubclass(t, np.floating)):
                v = float(obj)
                entry = {"kind": "scalar", "value": v if math.isfinite(v) else repr(v)}
            elif t is str:
                entry = {"kind": "scalar", "value": obj[:limit], "length": len(obj)}
                if len(obj) > limit:
                    entry["truncated"] = True
            elif np is not None and issubclass(t, np.ndarray):
                entry = {"kind": "ndarray", "shape": [int(n) for n in obj.shape], "dtype": str(obj.dtype)}
            elif issubclass(t, (list, tuple, dict, set, frozenset)):
                entry = {"kind": "container", "length": len(obj)}
            elif not isinstance(obj, type) and callable(getattr(t, "fit", None)) and (
                    callable(getattr(t, "predict", None)) or callable(getattr(t, "transform", None))):
                state = getattr(obj, "__dict__", None)
                fitted = isinstance(state, dict) and any(
                    isinstance(k, str) and k.endswith("_") and not k.startswith("_") for k in state)
                entry = {"kind": "model", "fitted": fitted}
            if entry is None:
                continue
            entry = {"name": name, "type": (t.__module__ + "." + t.__qualname__)[:200]
                     if t.__module__ not in ("builtins",) else t.__qualname__, **entry}
            out.append(entry)
        except Exception:  # noqa: BLE001 -- runs on user objects, which may raise anything: skip it
            continue
    return out[-int(max_items):]


def _jda_frame_stats(ns, name, max_columns=200, time_limit=2.0, sample_rows=200_000, max_value_chars=80):
    """Kernel side: per column of the frame (or Series) ``name``: nulls, distinct values, and
    min/max/mean/std (numbers) or the top value and its count (others); None when ``name``
    is no frame. Nulls and the number statistics cover every row; distinct values and the
    top value the first ``sample_rows`` (said in ``sampled_rows``). Self-contained."""
    import math
    import sys
    import time

    pd = sys.modules.get("pandas")
    obj = ns.get(name)
    if pd is None or not issubclass(type(obj), (pd.DataFrame, pd.Series)):
        return None
    deadline = time.monotonic() + time_limit
    limit = max(int(max_value_chars), 8)
    is_frame = issubclass(type(obj), pd.DataFrame)
    rows = int(obj.shape[0])
    sampled = rows > sample_rows
    ptypes = pd.api.types

    def number(v):
        try:
            if v is None or v is pd.NaT:
                return None
            if hasattr(v, "isoformat"):
                return v.isoformat()[:limit]
            f = float(v)
            if not math.isfinite(f):
                return None
            return int(f) if isinstance(v, int) or (hasattr(v, "dtype") and v.dtype.kind in "iu") else f
        except Exception:  # noqa: BLE001 -- a value that is no number: its text
            return str(v)[:limit]

    def column(col):
        info: dict = {}
        try:
            info["nulls"] = int(col.isna().sum())
        except Exception:  # noqa: BLE001 -- runs on user objects
            info["nulls"] = None
        head = col.iloc[:sample_rows] if sampled else col
        try:
            info["nunique"] = int(head.nunique(dropna=True))
        except Exception:  # noqa: BLE001 -- unhashable cells (lists, dicts): not counted
            info["nunique"] = None
        numeric = ptypes.is_numeric_dtype(col.dtype) and not ptypes.is_bool_dtype(col.dtype)
        timelike = ptypes.is_datetime64_any_dtype(col.dtype) or ptypes.is_timedelta64_dtype(col.dtype)
        try:
            if numeric or timelike:
                info["min"], info["max"] = number(col.min()), number(col.max())
                if numeric:
                    info["mean"], info["std"] = number(col.mean()), number(col.std())
            else:
                counts = head.value_counts(dropna=True)
                if len(counts):
                    top = counts.index[0]
                    text = top if isinstance(top, str) else str(top)
                    info["top"], info["top_count"] = text[:limit], int(counts.iloc[0])
        except Exception as exc:  # noqa: BLE001 -- runs on user objects, which may raise anything
            info["error"] = type(exc).__name__
        return info

    columns, total = [], int(obj.shape[1]) if is_frame else 1
    for i in range(min(total, int(max_columns))):
        if time.monotonic() > deadline:
            break
        columns.append(column(obj.iloc[:, i] if is_frame else obj))
    return {"rows": rows, "sampled_rows": sample_rows if sampled else None, "columns": columns,
            "truncated": len(columns) < total}


def _expression(fn: Callable[..., Any], *args: Any) -> str:
    """``fn`` called on the user namespace, as one expression whose value is its JSON (see
    ``schema.inspection_request_code``: only a throwaway dict holds our names)."""
    source = inspect.getsource(fn)
    return ("(lambda __jda_scope: (exec({src}, __jda_scope), __import__('json').dumps("
            "__jda_scope[{name!r}](globals(), {args}), default=str))[1])({{}})").format(
        src=repr(source), name=fn.__name__, args=", ".join(repr(a) for a in args))


#: How a reader reaches the kernel: ``evaluate(expression, timeout)``, ``kernel.rpc`` semantics
#: (a ``kernel.handle``'s ``evaluate``).
Evaluate = Callable[[str, float], Awaitable[Any]]


async def _ask(evaluate: Evaluate, expression: str, timeout: float) -> Any:
    try:
        return json.loads(await evaluate(expression, timeout))
    except rpc.KernelTimeout:
        raise SurveyError("The kernel is busy running a cell; try again when it is idle.") from None
    except rpc.KernelRPCError as exc:
        raise SurveyError(f"Could not read the kernel's variables: {exc}") from None
    except ValueError as exc:
        raise SurveyError(f"Could not decode the kernel's answer: {exc}") from None


async def kernel_objects(evaluate: Evaluate, *, timeout: float = 3.0, max_items: int = 100,
                         max_value_chars: int = 200) -> list[dict[str, Any]]:
    """The kernel's arrays, scalars, containers and fitted models (``_jda_survey_objects``)."""
    found = await _ask(evaluate, _expression(_jda_survey_objects, max_items, max_value_chars, 1.0), timeout)
    return found if isinstance(found, list) else []


async def frame_stats(evaluate: Evaluate, name: str, *, timeout: float = 10.0, time_limit: float = 3.0,
                      max_columns: int = 200, sample_rows: int = 200_000) -> dict[str, Any] | None:
    """Column statistics of the frame ``name`` (``_jda_frame_stats``), None when there is none."""
    found = await _ask(evaluate, _expression(_jda_frame_stats, name, max_columns, time_limit, sample_rows),
                       timeout)
    return found if isinstance(found, dict) else None
