"""The canonical form of a cell's answer: lossless, JSON-able, comparable.

Votes, mcts and every benchmark decide "are these the same answer?" on this
form, and it is built by the same function in a kernel copy (shipped back as
``ValueHandle.form``; copies never send pickles) and in-process, so a value
compares the same whichever side of the round trip it is on.

A form is a tree of nodes:

* ``{"k": "scalar", "t": tag, "v": ...}`` with tags ``none``, ``missing``
  (NaN, NA, NaT), ``bool``, ``int`` (``v`` exact; text past 64 bits), ``float``
  (``inf``/``-inf`` as text), ``complex`` ([re, im]), ``str``, ``time``
  (``v`` ns since the epoch, ``tz``), ``delta`` (ns), ``other`` (type and repr).
* ``{"k": "table", "src", "rows", "shape", "cols", "index"}``: frames, Series,
  Index, 1-D/2-D arrays and flat or rectangular lists, as columns. ``index``
  holds the index levels as columns, empty for a default ``0..n-1`` index.
* ``{"k": "seq", "src", "items"}`` for nested or ragged containers (sets sorted),
  ``{"k": "dict", "items": [[key, value], ...]}`` with keys sorted.

A column is ``{"name", "kind", "n", "nulls", "digest", "values"?, "q"?,
"integral"?, "exact"? (integers by type), "tz"?}``. ``kind`` is ``num`` (ints and floats together, so
``astype(float)`` stays the same answer), ``bool``, ``str``, ``time``,
``delta`` or ``obj`` (mixed: ``values`` are nodes). ``digest`` is a BLAKE2b
hash of the column's canonical bytes; ``q`` are two digests of the floats
rounded to 20 mantissa bits (about 1e-6 relative, the comparison's tolerance)
on grids half a step apart, so recomputation noise far below the tolerance
keeps one of them (most of the time: a value that sits on a grid boundary in
both grids splits a long column that only noise separates). ``values`` are there while the form's
cell budget lasts; past it a column is its digests, never a prefix, and a
number column also keeps a ``sketch`` (:func:`num_sketch`: 16 values at fixed
positions, both ends included, and position-weighted sums (so order shows) and
absolute sums over row blocks: 16,
or up to 32,768 where a table's columns share the second budget, twice as
many numbers, in fewer columns). Tolerance past the budget
rests on the sketch, whose size depends on nothing but the cap: within
tolerance everywhere implies the sketches agree (noise never splits them, as
it splits the rounded digests of a long column); rows that trade places change
a block's weighted sum; a difference that no sampled cell shows and that hides
inside a block's summed tolerance is missed.

Standard library only at import: this module is injected into kernels that
may not have jupyter_data_agent installed; numpy/pandas are used only when the
value is one of theirs (so they are already imported).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BUDGET_CELLS", "MAX_SKETCH_BLOCKS", "SKETCH_BLOCKS", "SKETCH_SAMPLE", "answer_form", "is_form",
           "num_sketch", "row_weights", "sketch_blocks"]

BUDGET_CELLS = 50_000  # values kept in one form; past this, columns are digests only
_MAX_DEPTH = 12
_MAX_ITEMS = 10_000  # items of a nested container kept (the count is kept exactly)
_QBITS = 20  # a grid step of ~1e-6 relative: equal q digests are within RTOL
_CELL_VALUES = 16  # values kept inside one cell that holds a container (a tuple, a list)
SKETCH_SAMPLE = 16  # values kept at fixed positions of a number column past the budget
SKETCH_BLOCKS = 16  # row blocks whose weighted and absolute sums it keeps, at least (a power of two)
MAX_SKETCH_BLOCKS = 1 << 15  # at most: a few columns share the sketch budget in finer blocks


def is_form(x: Any) -> bool:
    return isinstance(x, dict) and x.get("form") == 1


def answer_form(obj: Any, *, budget_cells: int = BUDGET_CELLS) -> dict:
    """The canonical form of ``obj`` (see the module docstring)."""
    budget = [budget_cells, 2 * budget_cells]  # values; then sketch numbers (1,950 columns of 1,000 x 2,000)
    return {"form": 1, **_node(obj, budget, 0)}


# ----------------------------------------------------------------- scalars

def _np():
    return sys.modules.get("numpy")


def _pd():
    return sys.modules.get("pandas")


def _is_missing(x: Any) -> bool:
    if x is None:
        return False  # a bare None is "no value", not a missing cell
    if isinstance(x, float):
        return math.isnan(x)
    pd, np = _pd(), _np()
    if pd is not None and (x is pd.NA or x is pd.NaT):
        return True
    if np is not None and isinstance(x, (np.datetime64, np.timedelta64)):
        return bool(np.isnat(x))
    if np is not None and isinstance(x, np.floating):
        return bool(np.isnan(x))
    return False


def _scalar(x: Any) -> dict | None:
    """The node of a scalar, or None when ``x`` is not one."""
    np, pd = _np(), _pd()
    if x is None:
        return {"k": "scalar", "t": "none", "v": None}
    if _is_missing(x):
        return {"k": "scalar", "t": "missing", "v": None}
    if np is not None and isinstance(x, np.generic) and not isinstance(x, (np.datetime64, np.timedelta64)):
        x = x.item()
    if isinstance(x, bool):
        return {"k": "scalar", "t": "bool", "v": x}
    if isinstance(x, int):
        return {"k": "scalar", "t": "int", "v": x if abs(x) < 2**63 else str(x)}
    if isinstance(x, float):
        return {"k": "scalar", "t": "float", "v": x if math.isfinite(x) else str(x)}
    if isinstance(x, complex):
        return {"k": "scalar", "t": "complex", "v": [_float_json(x.real), _float_json(x.imag)]}
    if isinstance(x, str):
        return {"k": "scalar", "t": "str", "v": x}
    if isinstance(x, bytes):
        return {"k": "scalar", "t": "str", "v": x.decode("utf-8", "backslashreplace")}
    if pd is not None:
        if isinstance(x, pd.Timestamp) or (np is not None and isinstance(x, np.datetime64)):
            ts = pd.Timestamp(x)
            return {"k": "scalar", "t": "time", "v": int(ts.value), "tz": str(ts.tz) if ts.tz else None}
        if isinstance(x, pd.Timedelta) or (np is not None and isinstance(x, np.timedelta64)):
            return {"k": "scalar", "t": "delta", "v": int(pd.Timedelta(x).value)}
        if isinstance(x, pd.Period):
            return {"k": "scalar", "t": "str", "v": str(x)}
        if isinstance(x, pd.Interval):
            return {"k": "scalar", "t": "other", "v": repr(x), "type": "Interval"}
    import datetime

    if isinstance(x, datetime.datetime):
        tz = str(x.tzinfo) if x.tzinfo else None
        epoch = datetime.datetime(1970, 1, 1, tzinfo=x.tzinfo)
        delta = x - epoch
        if x.tzinfo is not None:
            delta = x.astimezone(datetime.timezone.utc) - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return {"k": "scalar", "t": "time", "v": _delta_ns(delta), "tz": tz}
    if isinstance(x, datetime.date):
        return {"k": "scalar", "t": "time", "v": _delta_ns(x - datetime.date(1970, 1, 1)), "tz": None}
    if isinstance(x, datetime.timedelta):
        return {"k": "scalar", "t": "delta", "v": _delta_ns(x)}
    if _is_container(x):
        return None
    try:
        text = repr(x)
    except Exception as e:  # noqa: BLE001 - a broken __repr__ (the user's code) must not break the reply
        text = f"<unrepresentable: {type(e).__name__}>"
    return {"k": "scalar", "t": "other", "v": text[:10_000], "type": type(x).__qualname__}


def _delta_ns(d: Any) -> int:
    return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000


def _float_json(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)


def _is_container(x: Any) -> bool:
    if isinstance(x, (list, tuple, set, frozenset, dict, range)):
        return True
    np, pd = _np(), _pd()
    if np is not None and isinstance(x, np.ndarray):
        return True
    return pd is not None and isinstance(x, (pd.DataFrame, pd.Series, pd.Index,
                                             pd.api.extensions.ExtensionArray))


# ----------------------------------------------------------------- nodes

def _node(x: Any, budget: list[int], depth: int) -> dict:
    s = _scalar(x)
    if s is not None:
        return s
    if depth > _MAX_DEPTH:
        return {"k": "scalar", "t": "other", "v": repr(x)[:10_000], "type": type(x).__qualname__}
    np, pd = _np(), _pd()
    if pd is not None and isinstance(x, pd.DataFrame):
        return _frame(x, budget)
    if pd is not None and isinstance(x, pd.Series):
        return _table("Series", [x.name], [x.to_numpy()], x.index, [len(x)], budget,
                      dtypes=[x.dtype])
    if pd is not None and isinstance(x, pd.Index):
        if isinstance(x, pd.MultiIndex):
            levels = _levels(x)
            return _table("Index", list(x.names), [lv.to_numpy() for lv in levels], None, [len(x)],
                          budget, dtypes=[lv.dtype for lv in levels])
        return _table("Index", [x.name], [x.to_numpy()], None, [len(x)], budget, dtypes=[x.dtype])
    if np is not None and isinstance(x, np.ndarray):
        return _array(x, budget, depth)
    if pd is not None and isinstance(x, pd.api.extensions.ExtensionArray):
        return _table("array", [None], [x.to_numpy()], None, [len(x)], budget, dtypes=[x.dtype])
    if isinstance(x, dict):
        items = sorted(((_node(k, budget, depth + 1), _node(v, budget, depth + 1)) for k, v in
                        list(x.items())[:_MAX_ITEMS]), key=lambda kv: _sort_key(kv[0]))
        return {"k": "dict", "n": len(x), "items": [list(kv) for kv in items]}
    if isinstance(x, (set, frozenset)):
        nodes = sorted((_node(v, budget, depth + 1) for v in list(x)[:_MAX_ITEMS]), key=_sort_key)
        return {"k": "seq", "src": "set", "n": len(x), "items": nodes}
    if isinstance(x, (list, tuple, range)):
        return _sequence(list(x), type(x).__name__, budget, depth)
    return _scalar_other(x)


def _scalar_other(x: Any) -> dict:
    return {"k": "scalar", "t": "other", "v": repr(x)[:10_000], "type": type(x).__qualname__}


def _sort_key(node: dict) -> str:
    return json.dumps(node, sort_keys=True, default=str)


def _sequence(items: list, src: str, budget: list[int], depth: int) -> dict:
    """A flat list is one column; a rectangular list of rows is a table."""
    if all(not _is_container(v) for v in items):
        return _table(src, [None], [items], None, [len(items)], budget)
    if items and all(isinstance(v, (list, tuple)) for v in items):
        width = len(items[0])
        if width and all(len(v) == width for v in items) and \
                all(not _is_container(c) for v in items for c in v):
            cols = [[row[j] for row in items] for j in range(width)]
            return _table(src, [None] * width, cols, None, [len(items), width], budget)
    nodes = [_node(v, budget, depth + 1) for v in items[:_MAX_ITEMS]]
    return {"k": "seq", "src": src, "n": len(items), "items": nodes}


def _array(a: Any, budget: list[int], depth: int) -> dict:
    if a.ndim == 0:
        return _scalar(a[()]) or _scalar_other(a)
    if a.ndim == 1:
        return _table("ndarray", [None], [a], None, [int(a.shape[0])], budget, dtypes=[a.dtype])
    if a.ndim == 2:
        cols = [a[:, j] for j in range(a.shape[1])]
        return _table("ndarray", [None] * a.shape[1], cols, None, list(a.shape), budget,
                      dtypes=[a.dtype] * a.shape[1])
    node = _sequence(list(a), "ndarray", budget, depth)
    node["shape"] = list(a.shape)
    return node


def _frame(df: Any, budget: list[int]) -> dict:
    # positional labels (0..n-1 on an unnamed axis, as from an array) name nothing
    positional = df.columns.name is None and _default_index(df.columns, df.shape[1])
    names = [None] * df.shape[1] if positional else [_label(c) for c in df.columns]
    cols = [c for _, c in df.items()]  # by position, so repeated labels are fine
    return _table("DataFrame", names, [c.to_numpy() for c in cols], df.index, list(df.shape), budget,
                  dtypes=[c.dtype for c in cols])


def _label(x: Any) -> Any:
    """A column or index name as JSON: tuples (MultiIndex) as lists, others as scalars."""
    if isinstance(x, tuple):
        return [_label(v) for v in x]
    s = _scalar(x)
    if s is None or s["t"] in ("other", "none", "missing"):
        return None if (s is None or s["t"] != "other") else s["v"]
    return s["v"] if s["t"] != "time" else f"time:{s['v']}"


def _default_index(index: Any, n: int) -> bool:
    pd, np = _pd(), _np()
    if index is None:
        return True
    if index.nlevels != 1 or index.name is not None:
        return False
    if isinstance(index, pd.RangeIndex):
        return index.start == 0 and index.step == 1
    if index.dtype.kind not in "iu":
        return False
    return bool(np.array_equal(index.to_numpy(), np.arange(n)))


def _levels(index: Any) -> list:
    """The index's levels by position. ``get_level_values(i)`` resolves ``i`` as a level *name* first, so
    integer level names would swap or repeat levels; positional names make ``i`` mean position ``i``."""
    if not isinstance(index, _pd().MultiIndex):
        return [index]
    positional = index.set_names(list(range(index.nlevels)))
    return [positional.get_level_values(i) for i in range(index.nlevels)]


def _table(src: str, names: list, columns: list, index: Any, shape: list[int], budget: list[int],
           dtypes: list | None = None) -> dict:
    rows = len(columns[0]) if columns else (len(index) if index is not None else 0)
    keyed = index is not None and not _default_index(index, rows)
    blocks = sketch_blocks(budget[1] // max(1, len(columns) + (index.nlevels if keyed else 0)))
    cols = [_column(names[j], columns[j], dtypes[j] if dtypes else None, budget, blocks)
            for j in range(len(columns))]
    index_cols = []
    if keyed:
        for name, level in zip(index.names, _levels(index)):
            index_cols.append(_column(_label(name), level.to_numpy(), level.dtype, budget, blocks))
    return {"k": "table", "src": src, "rows": rows, "shape": shape, "cols": cols, "index": index_cols}


# ----------------------------------------------------------------- columns
#
# Column data before hashing, one shape per kind whichever way it arrived
# (numpy array or Python list), so both give the same digest:
#   num: int64 or float64 array (NaN missing); bool: int8 array (-1 missing);
#   time: (int64 ns, missing mask, tz); delta: (int64 ns, missing mask);
#   str: list of str or None; obj: the raw values.

def _numpy():
    np = _np()
    if np is None:
        import numpy as np  # a list answer in a kernel that never imported numpy
    return np


def _column(name: Any, values: Any, dtype: Any, budget: list[int], blocks: int = SKETCH_BLOCKS) -> dict:
    if not isinstance(name, list):
        name = _label(name)
    if isinstance(values, list):
        kind, data = _list_column(values)
    else:
        kind, data = _numpy_column(values, dtype)
    n = len(values)
    keep = budget[0] >= n
    budget[0] = budget[0] - n if keep else 0
    col: dict[str, Any] = {"name": name, "kind": kind, "n": n}
    _FILL[kind](col, data, keep)
    blocks = _pow2(min(n, blocks))
    size = min(n, SKETCH_SAMPLE) + 2 * blocks
    if kind == "num" and not keep and budget[1] >= size:
        budget[1] -= size
        col["sketch"] = num_sketch(data, blocks)
    return col


def _pow2(n: int) -> int:
    """The largest power of two <= ``n`` (1 for n < 1)."""
    return 1 << max(0, int(n).bit_length() - 1)


def sketch_blocks(numbers: int) -> int:
    """Row blocks per column when a table's columns share ``numbers`` sketch numbers: a power of two from
    ``SKETCH_BLOCKS`` to ``MAX_SKETCH_BLOCKS``. Powers of two nest (block ``i`` of ``B / 2`` is blocks ``2i``
    and ``2i + 1`` of ``B``), so sketches of one length with different counts still compare."""
    return min(MAX_SKETCH_BLOCKS, max(SKETCH_BLOCKS, _pow2((numbers - SKETCH_SAMPLE) // 2)))


def num_sketch(values: Any, blocks: int = SKETCH_BLOCKS) -> dict:
    """A number column in a size-free summary: the values at fixed positions (``None`` missing, non-finite as
    text), the position-weighted sums (``wsums``: each row's weight in [0.5, 1) fixed by its position, see
    :func:`row_weights`) and the absolute sums of the finite values of each of ``blocks`` row blocks (a power
    of two, at most the length), the digest of the missing mask. Positions depend only on the length.

    Weighted, not plain, sums so that rows that trade places inside a block change them (two adjacent rows
    by at least 0.19 times their difference), while noise moves them no more than it moves plain sums."""
    np = _numpy()
    x = np.asarray(values, dtype=np.float64)
    n = int(x.shape[0])
    at, starts = _sketch_rows(n, _pow2(min(n, blocks)))
    finite = np.isfinite(x)
    whole = bool(finite.all())
    miss = None if whole else np.isnan(x)
    if not whole:
        x = np.where(finite, x, 0.0)
    wsums = np.add.reduceat(x * row_weights(n), starts) if n else x[:0]
    abs_sums = np.add.reduceat(np.abs(x), starts) if n else x[:0]
    sample = np.asarray(values, dtype=np.float64)[at]
    return {"sample": _json_floats(sample), "wsums": _json_floats(wsums), "abs": _json_floats(abs_sums),
            "mask": "none" if miss is None or not miss.any() else _digest(b"mask", miss.tobytes())}


@functools.lru_cache(maxsize=8)
def row_weights(n: int) -> Any:
    """Row ``i``'s weight, ``0.5 + 0.5 * frac(i * phi)`` in exact integer arithmetic (Fibonacci hashing), so a
    kernel and the server compute the same bits: neighbours differ by 0.19 or 0.31, any two rows almost
    always by more than a little, and a weight never falls under 0.5 (a changed cell still shows)."""
    np = _numpy()
    with np.errstate(over="ignore"):
        h = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # wraps mod 2**64, by design
    w = 0.5 + (h >> np.uint64(11)).astype(np.float64) * (0.5 / float(1 << 53))
    w.setflags(write=False)
    return w


@functools.lru_cache(maxsize=64)
def _sketch_rows(n: int, blocks: int) -> tuple:
    """The sampled positions and the blocks' first rows of a column of ``n`` (the same for every column)."""
    np = _numpy()
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    at = np.unique(np.linspace(0, n - 1, min(n, SKETCH_SAMPLE)).round().astype(np.int64))
    return at, (np.arange(blocks) * n) // blocks


def _json_floats(a: Any) -> list:
    """Floats as JSON: missing as None, infinities as text."""
    np = _numpy()
    if bool(np.isfinite(a).all()):
        return a.tolist()
    return [None if math.isnan(v) else _float_json(v) for v in a.tolist()]


def _numpy_column(a: Any, dtype: Any) -> tuple[str, Any]:
    np = _numpy()
    a = np.asarray(a) if not hasattr(a, "dtype") else a
    tz = getattr(dtype, "tz", None)
    if tz is not None:  # pandas tz-aware: to_numpy gives Timestamps; keep UTC ns and the zone
        ts = _pd().DatetimeIndex(a)
        return "time", (ts.as_unit("ns").asi8.copy(), np.asarray(ts.isna()), str(tz))
    k = a.dtype.kind
    if k == "i" or (k == "u" and a.dtype.itemsize < 8):
        return "num", a.astype(np.int64)
    if k in "uf":
        return "num", a.astype(np.float64)
    if k == "b":
        return "bool", a.astype(np.int8)
    if k == "M":
        ns = a.astype("datetime64[ns]")
        return "time", (ns.view("int64").copy(), np.isnat(ns), None)
    if k == "m":
        ns = a.astype("timedelta64[ns]")
        return "delta", (ns.view("int64").copy(), np.isnat(ns))
    if k == "O" and _pd() is not None:
        fast = _object_column(a)
        if fast is not None:
            return fast
    return _list_column(a.tolist() if k in "US" else list(a))


def _object_column(a: Any) -> tuple[str, Any] | None:
    """Long object columns of one plain type, without a Python call per cell."""
    pd, np = _pd(), _numpy()
    inferred = pd.api.types.infer_dtype(a, skipna=True)
    miss = np.asarray(pd.isna(a), dtype=bool)
    if inferred == "string":
        vals = a.tolist()
        for i in miss.nonzero()[0].tolist():
            vals[i] = None
        return "str", vals
    if inferred in ("integer", "floating", "mixed-integer-float"):
        try:
            if not miss.any() and inferred == "integer":
                return "num", a.astype(np.int64)
            return "num", np.where(miss, np.nan, a).astype(np.float64)
        except (OverflowError, TypeError, ValueError):
            return None
    return None


def _list_column(values: list) -> tuple[str, Any]:
    """One kind when the values agree (None and NaN-likes are missing cells), else ``obj``."""
    maybe = [{"k": "scalar", "t": "missing"} if v is None else _scalar(v) for v in values]
    nodes = [n for n in maybe if n is not None]
    if len(nodes) != len(maybe):
        return "obj", values
    tags = {n["t"] for n in nodes} - {"missing"}
    if tags and tags <= {"int", "float"}:
        np = _numpy()
        if tags == {"int"} and all(n["t"] == "int" and isinstance(n["v"], int) for n in nodes):
            return "num", np.asarray([n["v"] for n in nodes], dtype=np.int64)
        return "num", np.asarray([math.nan if n["t"] == "missing" else float(n["v"]) for n in nodes],
                                 dtype=np.float64)
    if len(tags) != 1:
        return "obj", values
    (tag,) = tags
    vals = [None if n["t"] == "missing" else n["v"] for n in nodes]
    np = _numpy()
    if tag == "str":
        return "str", vals
    if tag == "bool":
        return "bool", np.asarray([-1 if v is None else int(v) for v in vals], dtype=np.int8)
    if tag in ("time", "delta"):
        miss = np.asarray([v is None for v in vals], dtype=bool)
        ns = np.asarray([0 if v is None else v for v in vals], dtype=np.int64)
        if tag == "delta":
            return "delta", (ns, miss)
        tzs = {n.get("tz") for n in nodes if n["t"] == "time"}
        return ("time", (ns, miss, tzs.pop())) if len(tzs) == 1 else ("obj", values)
    return "obj", values


def _digest(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def _fill_num(col: dict, arr: Any, keep: bool) -> None:
    np = _numpy()
    miss = np.isnan(arr) if arr.dtype.kind == "f" else np.zeros(arr.shape, dtype=bool)
    nulls = int(miss.sum())
    canon = (np.where(miss, 0.0, arr) if nulls else arr).astype("<f8", copy=False)
    col["nulls"] = nulls
    col["integral"] = integral = arr.dtype.kind == "i" or _integral_floats(canon, miss, nulls)
    if arr.dtype.kind == "i":
        col["exact"] = True  # integers by type: a float near them is not them (1.0 is, 1.0000001 is not)
    mask = miss.tobytes()
    col["q"] = [_digest(b"q", mask, grid.tobytes()) for grid in _quantize(canon)]
    if integral:
        ints = canon.astype("<i8") if arr.dtype.kind == "f" else arr.astype("<i8", copy=False)
        col["digest"] = _digest(b"int", mask, ints.tobytes())
        if keep:
            col["values"] = [None if m else v for v, m in zip(ints.tolist(), miss.tolist())]
        return
    col["digest"] = _digest(b"float", mask, canon.tobytes())
    if keep:
        col["values"] = [None if m else _float_json(v) for v, m in zip(canon.tolist(), miss.tolist())]


def _integral_floats(x: Any, miss: Any, nulls: int) -> bool:
    """Every present value a whole number that fits int64 (so it hashes as one)."""
    np = _numpy()
    first = x[~miss][:1] if nulls else x[:1]
    if first.size and not (np.isfinite(first[0]) and first[0] == np.floor(first[0])):
        return False  # the usual float column: settled by its first value
    present = x[~miss] if nulls else x
    return bool(np.all(np.isfinite(present)) and np.all(present == np.floor(present))
                and (present.size == 0 or np.max(np.abs(present)) < 2**63))


def _quantize(x: Any) -> list:
    """``x`` rounded to ``_QBITS`` mantissa bits on two grids half a step apart."""
    np = _numpy()
    finite = np.isfinite(x)
    whole = bool(finite.all())
    with np.errstate(all="ignore"):
        m, e = np.frexp(x if whole else np.where(finite, x, 0.0))
        scaled = m * (1 << _QBITS) + 0.5
        e -= _QBITS
        grids = [np.ldexp(np.floor(scaled), e), np.ldexp(np.floor(scaled + 0.5), e)]
    return [(g if whole else np.where(finite, g, x)).astype("<f8", copy=False) for g in grids]


def _fill_bool(col: dict, arr: Any, keep: bool) -> None:
    col["nulls"] = int((arr < 0).sum())
    col["digest"] = _digest(b"bool", arr.astype("<i1").tobytes())
    if keep:
        col["values"] = [None if v < 0 else bool(v) for v in arr.tolist()]


def _fill_time(col: dict, data: tuple, keep: bool) -> None:
    np = _numpy()
    ns, miss = data[0], data[1]
    tz = data[2] if len(data) > 2 else None
    ns = np.where(miss, 0, ns).astype("<i8")
    col["nulls"] = int(miss.sum())
    col["digest"] = _digest(col["kind"].encode(), str(tz).encode(), miss.tobytes(), ns.tobytes())
    if col["kind"] == "time":
        col["tz"] = tz
    if keep:
        col["values"] = [None if m else v for v, m in zip(ns.tolist(), miss.tolist())]


def _fill_str(col: dict, vals: list, keep: bool) -> None:
    col["nulls"] = vals.count(None)
    text = "\x1e".join(vals if not col["nulls"] else ["\x1f" if v is None else v for v in vals])
    col["digest"] = _digest(b"str", text.encode("utf-8", "surrogatepass"))
    if keep:
        col["values"] = vals


def _fill_obj(col: dict, values: list, keep: bool) -> None:
    # a cell holding a container keeps a few values of its own (tuples as rows), whatever the form's budget
    nodes = [{"k": "scalar", "t": "missing", "v": None} if v is None else _node(v, [_CELL_VALUES, 0], 1)
             for v in values]
    col["nulls"] = sum(1 for n in nodes if n.get("t") == "missing")
    col["digest"] = _digest(b"obj", json.dumps(nodes, sort_keys=True, default=str).encode())
    if keep:
        col["values"] = nodes


_FILL: dict[str, Callable[[dict, Any, bool], None]] = {
    "num": _fill_num, "bool": _fill_bool, "time": _fill_time, "delta": _fill_time,
    "str": _fill_str, "obj": _fill_obj}
