"""When two answers are the same: the vote's relation and ARCADE's scorer.

Both work on canonical forms (``kernel.answer_form``), built the same way in a
kernel copy and in-process, so a value compares alike on either side of the
round trip. Python values are turned into forms on the way in.

* :func:`same_answer` (symmetric, clusters votes): equal up to representation.
  A Series, a one-column frame, a list and a 1-D array are one column; a
  non-default index is key columns (so ``reset_index`` of group keys changes
  nothing) and a default ``0..n-1`` index is nothing; column order does not
  count, and names count only where both sides use the same meaningful name
  (so renamed columns are the same answer and swapped ones are not); value
  columns with no name at all (a positional frame, a 2-D array, a list of
  rows) are named by their position, so their order counts. Rows keep their
  order, shapes are exact. Floats match within ``RTOL``/``ATOL``, integral
  values exactly, and an int column or scalar only equals the same whole
  numbers (``1.0`` is ``1``, ``1.0000001`` is not); a missing cell (NaN, None, NaT) equals only a
  missing cell; strings are exact (a bare string answer ignores surrounding
  whitespace, a printing artefact). A one-element collection equals its
  element; a dict equals the Series made from it (keys in any order); a
  column of flat tuples or lists of one width (a key column too) is that many
  columns, as the list of those rows is.
* :func:`covers` (prediction, reference) scores against a reference as
  ARCADE does: extra predicted columns are allowed (one-row tables too),
  each reference column (its meaningful index included) needs its own
  predicted column.

Columns are compared by content digest first; values, where the form kept
them, settle float tolerance, vectorised; past the form's budget a number
column's sketch does (its sampled values and position-weighted block sums,
so the verdict does not turn on the answer's size and reordered rows show),
never a prefix. Columns that pair by neither name nor digest are paired by
value through probes (sampled values and block sums, ``number_columns``),
sorted, so a comparison stays about linear in the columns (under a second
at 1,000 x 2,000, mostly-zero frames included). Every comparison is bounded
in time (``deadline.TIME_LIMIT``); past it the verdict is "not the same"
(:func:`compare` says it timed out). Clustering groups by :func:`answer_key`
(equal keys imply the same answer) and compares only one member per key, so
it is linear in the number of answers for the usual few distinct ones;
``majority`` then merges classes where one :func:`extends` the other.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, NamedTuple

from ..kernel.answer_form import answer_form, is_form
from ..kernel.results import ExecResult
from ..prompts.answers import expected_tags, extract_answers
from .deadline import TIME_LIMIT, Expired, bounded, check
from .number_columns import ATOL, RTOL, Numbers, arrays_same, near_probes, sketches_agree
from .number_columns import num as _num

__all__ = ["ATOL", "RTOL", "TIME_LIMIT", "Verdict", "agree_on_names", "answer_key", "as_form", "compare",
           "covers", "exec_output", "extends", "keys_agree", "same_answer", "voted_output"]

_GENERIC_NAMES = (None, "", "index", "values", "value", "0", "count", "size")


def as_form(x: Any) -> dict | None:
    """The canonical form of a value (a form stays as it is); ``None`` stays ``None``."""
    if x is None:
        return None
    return x if is_form(x) else answer_form(x)


class Verdict(NamedTuple):
    """A comparison's answer, and whether it ran out of time (then ``same`` is ``False``)."""

    same: bool
    timed_out: bool = False


def compare(a: Any, b: Any, *, relation: str = "same", timeout: float | None = TIME_LIMIT) -> Verdict:
    """``same_answer(a, b)`` (``relation="same"``) or ``covers(a, b)`` (``"covers"``) within ``timeout``
    seconds (``None``: unbounded). Past it the verdict is "not the same": conservative (a vote keeps the
    two apart) and said in ``timed_out``."""
    if relation not in ("same", "covers"):
        raise ValueError(f"relation must be 'same' or 'covers', not {relation!r}")
    try:
        with bounded(timeout):
            return Verdict(_same_answer(a, b) if relation == "same" else _covers(a, b))
    except Expired:
        return Verdict(False, timed_out=True)


def same_answer(a: Any, b: Any, *, timeout: float | None = TIME_LIMIT) -> bool:
    """Whether two answers say the same (symmetric; see the module docstring); ``False`` past ``timeout``."""
    return compare(a, b, timeout=timeout).same


def covers(prediction: Any, reference: Any, *, timeout: float | None = TIME_LIMIT) -> bool:
    """Whether ``prediction`` answers ``reference`` under ARCADE's lenient rules; ``False`` past ``timeout``."""
    return compare(prediction, reference, relation="covers", timeout=timeout).same


def _same_answer(a: Any, b: Any) -> bool:
    fa, fb = as_form(a), as_form(b)
    if fa is None or fb is None:
        return False
    return _same(_unwrap(fa), _unwrap(fb), strip=True)


def _covers(prediction: Any, reference: Any) -> bool:
    fp, fr = as_form(prediction), as_form(reference)
    if fp is None or fr is None:
        return False
    if fp["k"] == "table" and fr["k"] == "table":  # tables before unwrapping: a one-row answer keeps its columns
        return fp["rows"] == fr["rows"] and _assign(_columns(fr), _columns(fp), all_right=False)
    p, r = _unwrap(fp), _unwrap(fr)
    if p["k"] == "table" and r["k"] == "table":
        return p["rows"] == r["rows"] and _assign(_columns(r), _columns(p), all_right=False)
    if p["k"] == "table" and p["rows"] == 1 and r["k"] == "scalar":  # a scalar is a one-cell reference column
        return any(_same(_cell(c, 0) or {"k": "?"}, r, strip=True) for c in _columns(p))
    return _same(p, r, strip=True)


# ------------------------------------------------------------------ shapes

def _unwrap(node: dict) -> dict:
    """A one-element collection is its element (unless an index labels it: a
    one-row group result keeps its key)."""
    while True:
        if node["k"] == "table" and node["rows"] == 1 and len(node["cols"]) == 1 and not node["index"]:
            inner = _cell(node["cols"][0], 0)
            if inner is None:
                return node
            node = inner
        elif node["k"] == "seq" and node["n"] == 1 and node["items"]:
            node = node["items"][0]
        else:
            return node


def _cell(col: dict, i: int) -> dict | None:
    """Row ``i`` of a column as a scalar node, when the form kept its values."""
    if "values" not in col:
        return None
    v = col["values"][i]
    if col["kind"] == "obj":
        return v
    if v is None:
        return {"k": "scalar", "t": "missing", "v": None}
    if col["kind"] == "num":
        tag = "int" if col.get("exact") else "float"  # integral floats are floats (kept as whole numbers)
        return {"k": "scalar", "t": tag, "v": v}
    node = {"k": "scalar", "t": col["kind"], "v": v}
    if col["kind"] == "time":
        node["tz"] = col.get("tz")
    return node


def _columns(table: dict) -> list[dict]:
    """The key columns (a meaningful index), then the value columns. Columns of tuples are their parts; value
    columns with no name at all (a positional frame, a 2-D array, a list of rows), two or more, are named by
    their position, as pandas labels them: their order is the answer's, not a presentation."""
    index = _keys(table)
    values = [part for c in table["cols"] for part in _row_cells(c)]
    if len(values) > 1 and all(c["name"] is None for c in values):
        values = [{**c, "name": j} for j, c in enumerate(values)]
    return index + values


def _keys(table: dict) -> list[dict]:
    """The key columns: the index levels, tuples as their parts."""
    return [part for c in table["index"] for part in _row_cells(c)]


def _row_cells(col: dict) -> list[dict]:
    """A column whose cells are all flat tuples or lists of one width is that many columns, as the list of
    those rows is (``pd.Series(list_of_tuples)`` and ``list_of_tuples`` are one answer; so are an index of
    tuples and the MultiIndex of them, and a tuple column beside others and its keyed form)."""
    if col["kind"] != "obj" or "values" not in col or not col["values"]:
        return [col]
    rows = col["values"]
    inner = [row["cols"][0] if row.get("k") == "table" and len(row["cols"]) == 1 and not row["index"] and
             row["src"] in ("tuple", "list") and "values" in row["cols"][0] else None for row in rows]
    width = inner[0]["n"] if inner[0] is not None else 0
    if width < 2 or any(c is None or c["n"] != width for c in inner):
        return [col]
    out = []
    for j in range(width):
        cells = [_cell(c, j) for c in inner if c is not None]
        digest = hashlib.blake2b(json.dumps(cells, sort_keys=True, default=str).encode(), digest_size=16)
        out.append({"name": None, "kind": "obj", "n": len(rows), "nulls": 0, "digest": "rows:" + digest.hexdigest(),
                    "values": cells})
    return out


def _generic(name: Any) -> bool:
    return isinstance(name, str | type(None)) and name in _GENERIC_NAMES


# ------------------------------------------------------------------ comparison

def _same(x: dict, y: dict, *, strip: bool = False) -> bool:
    if {x["k"], y["k"]} == {"dict", "table"}:  # a dict and the Series made from it
        x, y = (_keyed(x) or x), (_keyed(y) or y)
    if x["k"] != y["k"]:
        return False
    if x["k"] == "scalar":
        return _scalars_same(x, y, strip=strip)
    check()
    if x["k"] == "table":
        if x["rows"] != y["rows"]:
            return False
        cx, cy = _columns(x), _columns(y)
        return len(cx) == len(cy) and _assign(cx, cy, all_right=True)
    if x["n"] != y["n"] or len(x["items"]) != len(y["items"]):
        return False
    if x["k"] == "dict":
        mx, my = _mapping(x), _mapping(y)
        return mx is not None and my is not None and mx.keys() == my.keys() and \
            all(_same(_unwrap(mx[k]), _unwrap(my[k])) for k in mx)
    return all(_same(_unwrap(a), _unwrap(b)) for a, b in zip(x["items"], y["items"]))


def _keyed(table: dict) -> dict | None:
    """A table of one key column (its index) and one value column as a dict node, or ``None``."""
    if table["k"] != "table" or len(table["index"]) != 1 or len(table["cols"]) != 1:
        return None
    keys, values = table["index"][0], table["cols"][0]
    if "values" not in keys or "values" not in values:
        return None
    items = [[_cell(keys, i), _cell(values, i)] for i in range(table["rows"])]
    return {"k": "dict", "n": table["rows"], "items": items}


def _mapping(node: dict) -> dict[str, dict] | None:
    """A dict node's items by canonical key (key order counts for nothing); ``None`` for repeated keys."""
    out = {json.dumps(_key(_unwrap(k)), sort_keys=True, default=str): v for k, v in node["items"]}
    return out if len(out) == len(node["items"]) else None


def _scalars_same(x: dict, y: dict, *, strip: bool = False) -> bool:
    tx, ty = x["t"], y["t"]
    numeric = ("int", "float")
    if tx in numeric and ty in numeric:
        return _numbers_same(x["v"], y["v"], exact="int" in (tx, ty))
    if tx != ty:
        return False
    if tx == "str" and strip:
        return x["v"].strip() == y["v"].strip()
    if tx == "time":
        return x["v"] == y["v"] and x.get("tz") == y.get("tz")
    if tx == "other":
        return x["v"] == y["v"] and x.get("type") == y.get("type")
    return x["v"] == y["v"]


def _numbers_same(a: Any, b: Any, *, exact: bool = False) -> bool:
    """Within tolerance; integral values exactly, whatever their type, and an int (``exact``) is exactly
    itself: a float near it is another answer."""
    a, b = _num(a), _num(b)
    if a == b:
        return True
    if exact or (_integral(a) and _integral(b)):
        return False
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= ATOL + RTOL * max(abs(a), abs(b))


def _integral(v: float | int) -> bool:
    return isinstance(v, int) or (math.isfinite(v) and v == int(v))


def _columns_same(a: dict, b: dict, numbers: Numbers | None = None) -> bool:
    if a["n"] != b["n"]:
        return False
    if a["digest"] == b["digest"] and a["kind"] == b["kind"]:
        return True
    kinds = {a["kind"], b["kind"]}
    if kinds == {"num"}:
        if (a.get("integral") and b.get("integral")) or a.get("exact") or b.get("exact"):
            return False  # exact digests differ: integers (by value or by type) are equal exactly or not at all
        numbers = numbers or Numbers()
        xa, xb = numbers.of(a), numbers.of(b)
        if xa is not None and xb is not None:
            return arrays_same(xa, xb)
        if set(a.get("q", ())) & set(b.get("q", ())):
            return True
        sa, sb = numbers.sketch(a), numbers.sketch(b)
        return sa is not None and sb is not None and sketches_agree(sa, sb, a["n"])
    if "obj" in kinds and "values" in a and "values" in b:
        for i in range(a["n"]):
            if i % 256 == 0:
                check()
            if not _same(_cell(a, i) or {"k": "?"}, _cell(b, i) or {"k": "?"}):
                return False
        return True
    return False  # str, bool, time and delta columns are equal exactly or not at all


def _assign(left: list[dict], right: list[dict], *, all_right: bool) -> bool:
    """A one-to-one assignment of every ``left`` column to an equal ``right`` column.

    Same meaningful names pair first (and must be equal); then equal digests;
    what is left is matched by value (:func:`_match_rest`). ``all_right``:
    every right column must be used too (same_answer); otherwise extras are fine.
    """
    if all_right and len(left) != len(right):
        return False
    numbers = Numbers()
    lnames, rnames = _unique_names(left), _unique_names(right)
    named = {k: j for k, j in rnames.items() if k in lnames}
    used: set[int] = set()
    todo: list[dict] = []
    for i, c in enumerate(left):
        j = named.get(_name_key(c["name"])) if lnames.get(_name_key(c["name"])) == i else None
        if j is None:
            todo.append(c)
        elif _columns_same(c, right[j], numbers):
            used.add(j)
        else:
            return False
    by_digest: dict[tuple[str, str], list[int]] = {}
    for j in range(len(right)):
        if j not in used:
            by_digest.setdefault((right[j]["kind"], right[j]["digest"]), []).append(j)
    rest = []
    for c in todo:
        same = by_digest.get((c["kind"], c["digest"]))
        if same:
            used.add(same.pop())
        else:
            rest.append(c)
    return _match_rest(rest, [right[j] for j in range(len(right)) if j not in used], numbers)


def _unique_names(cols: list[dict]) -> dict[str, int]:
    """Meaningful names used once in ``cols``, with their position (a repeated name aligns nothing)."""
    seen: dict[str, int] = {}
    repeated = set()
    for j, c in enumerate(cols):
        if not _generic(c["name"]):
            k = _name_key(c["name"])
            if k in seen:
                repeated.add(k)
            seen[k] = j
    return {k: j for k, j in seen.items() if k not in repeated}


def _name_key(name: Any) -> str:
    return json.dumps(name, sort_keys=True, default=str)


def _candidates(left: list[dict], right: list[dict], numbers: Numbers) -> list[list[int]]:
    """For each left column, the right columns that may equal it, found without comparing every pair
    in full: number columns pair only where their probes agree (sampled values within tolerance, weighted
    block sums within bound: ``number_columns.near_probes``); columns of one kind and digest share one
    verdict; str, bool, time and delta columns can only still equal an ``obj`` column."""
    edges: list[list[int]] = [[] for _ in left]
    num_r = [j for j, r in enumerate(right) if r["kind"] == "num"]
    probes_r = {j: p for j in num_r if (p := numbers.probe(right[j])) is not None}
    with_probe = list(probes_r)
    by_q: dict[str, list[int]] = {}
    for j in num_r:
        for q in right[j].get("q", ()):
            by_q.setdefault(q, []).append(j)
    verdicts: dict[tuple[str, str, str, str], bool] = {}

    def same(i: int, j: int) -> bool:
        key = (left[i]["kind"], left[i]["digest"], right[j]["kind"], right[j]["digest"])
        if key not in verdicts:
            check()
            verdicts[key] = _columns_same(left[i], right[j], numbers)
        return verdicts[key]

    num_l = [i for i, c in enumerate(left) if c["kind"] == "num"]
    probes_l = {i: p for i in num_l if (p := numbers.probe(left[i])) is not None}
    probed = list(probes_l)
    shapes = {tuple(len(part) for part in p) for p in [probes_l[i] for i in probed] + [probes_r[j] for j in with_probe]}
    if probed and with_probe and len(shapes) == 1:
        near = near_probes([probes_l[i] for i in probed], [probes_r[j] for j in with_probe], left[probed[0]]["n"])
        for i, ks in zip(probed, near):
            edges[i] = [with_probe[k] for k in ks if same(i, with_probe[k])]
    elif probed and with_probe:  # probes of different lengths (cannot happen for one table's columns)
        for i in probed:
            edges[i] = [j for j in with_probe if same(i, j)]
    for i in num_l:  # equal rounded digests pair too (past the budget, with no sketch on one side)
        pool = {j for q in left[i].get("q", ()) for j in by_q.get(q, ())} - set(edges[i])
        edges[i] += sorted(j for j in pool if same(i, j))
    obj_r = [j for j, r in enumerate(right) if r["kind"] == "obj"]
    for i, c in enumerate(left):
        targets = range(len(right)) if c["kind"] == "obj" else obj_r
        edges[i] += [j for j in targets if (c["kind"] == "obj" or right[j]["kind"] == "obj") and same(i, j)]
    return edges


def _match_rest(left: list[dict], right: list[dict], numbers: Numbers | None = None) -> bool:
    """Bipartite matching of columns equal within tolerance: a greedy pass, then Kuhn's augmenting
    paths for the columns it left unplaced."""
    if len(left) > len(right):
        return False
    if not left:
        return True
    edges = _candidates(left, right, numbers or Numbers())
    owner: dict[int, int] = {}
    unplaced = []
    for i, js in enumerate(edges):
        j = next((j for j in js if j not in owner), None)
        if j is None:
            unplaced.append(i)
        else:
            owner[j] = i

    def place(i: int, seen: set[int]) -> bool:
        check()
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or place(owner[j], seen):
                owner[j] = i
                return True
        return False

    return all(place(i, set()) for i in unplaced)


# ------------------------------------------------------------------ votes

def answer_key(x: Any) -> str:
    """A hash of the answer's canonical content: equal keys imply :func:`same_answer`."""
    form = as_form(x)
    if form is None:
        return ""
    return hashlib.blake2b(json.dumps(_key(_unwrap(form), strip=True), sort_keys=True, default=str).encode(),
                           digest_size=16).hexdigest()


def _key(node: dict, *, strip: bool = False) -> Any:
    if node["k"] == "scalar":
        t, v = node["t"], node["v"]
        if t in ("int", "float"):
            n = _num(v)
            return ["int", int(n)] if _integral(n) else ["float", repr(n)]
        if t == "str" and strip:
            return ["str", v.strip()]
        return [t, v, node.get("tz"), node.get("type")]
    if node["k"] == "table":
        unique = _unique_names(_columns(node))
        cols = [json.dumps([_name_key(c["name"]) if _name_key(c["name"]) in unique else None,
                            c["kind"], c["digest"]]) for c in _columns(node)]
        return ["table", node["rows"], sorted(cols)]
    if node["k"] == "dict":
        return ["dict", node["n"], [[_key(k), _key(_unwrap(v))] for k, v in node["items"]]]
    return ["seq", node["n"], [_key(_unwrap(i)) for i in node["items"]]]


def agree_on_names(a: Any, b: Any) -> bool:
    """Two tables of one length that share a meaningful column name, and hold equal columns under each."""
    ta, tb = _unwrap(as_form(a) or {"k": "?"}), _unwrap(as_form(b) or {"k": "?"})
    if ta["k"] != "table" or tb["k"] != "table" or ta["rows"] != tb["rows"]:
        return False
    ca, cb = _columns(ta), _columns(tb)
    na, nb = _unique_names(ca), _unique_names(cb)
    shared = na.keys() & nb.keys()
    try:
        with bounded(TIME_LIMIT):
            return bool(shared) and all(_columns_same(ca[na[k]], cb[nb[k]]) for k in shared)
    except Expired:
        return False


def extends(larger: Any, smaller: Any) -> bool:
    """Whether ``larger`` is ``smaller`` with extra information of a kind a right answer carries (what
    ``majority`` merges): it covers ``smaller``, and beyond it holds only row labels or keys (index columns),
    columns that repeat another of its own (the key as index and column), or columns beside an answer of one
    value column (a count beside the asked-for values). A table of several columns that lacks one of
    ``larger``'s is *missing* it, a different answer, and is not merged."""
    if not covers(larger, smaller):
        return False
    fl, fs = as_form(larger), as_form(smaller)
    if fl is None or fs is None:
        return False
    if not (fl["k"] == fs["k"] == "table"):
        fl, fs = _unwrap(fl), _unwrap(fs)
    if fl["k"] != "table" or fs["k"] != "table":
        return True  # a one-row table and the scalar it holds
    lcols = _columns(fl)
    lvalues, svalues = len(lcols) - len(_keys(fl)), len(_columns(fs)) - len(_keys(fs))
    extra = lvalues - svalues
    if extra <= 0 or svalues <= 1:
        return True
    seen: dict[tuple[str, str], int] = {}
    for c in lcols:
        seen[(c["kind"], c["digest"])] = seen.get((c["kind"], c["digest"]), 0) + 1
    repeats = sum(n - 1 for n in seen.values())
    return repeats >= extra


def keys_agree(a: Any, b: Any) -> bool:
    """Where both answers are tables with keys (index columns), the fewer keys are among the other's: two
    answers that label their rows differently are not one answer's variants, named or not."""
    ta, tb = _unwrap(as_form(a) or {"k": "?"}), _unwrap(as_form(b) or {"k": "?"})
    if ta["k"] != "table" or tb["k"] != "table" or not ta["index"] or not tb["index"]:
        return True
    ka, kb = _keys(ta), _keys(tb)
    fewer, more = (ka, kb) if len(ka) <= len(kb) else (kb, ka)
    try:
        with bounded(TIME_LIMIT):
            return ta["rows"] == tb["rows"] and _assign(fewer, more, all_right=False)
    except Expired:
        return False


def exec_output(result: ExecResult | None) -> dict | None:
    """The answer a cell gave: its last expression's value, else its printed text.

    ``None`` when the cell failed or showed nothing, or its value has no form
    (such a sample never matches a reference and never votes).
    """
    if result is None or not result.ok:
        return None
    if result.value is not None:
        return result.value.form
    text = result.stream("stdout").strip()
    return answer_form(text) if text else None


def voted_output(result: ExecResult | None, fmt: str = "") -> dict | None:
    """The answer a cell votes with: the ``@name[value]`` tags the task's format asks for, when
    the cell printed them all, else :func:`exec_output`.

    Why: cells that print the same tagged answer under different exploratory output (a ``describe()``
    above it, a check printed on the way) say the same thing; compared as whole printed text they
    split the vote (the strategy lab, issue 39: a right answer drawn 3 times in 3 classes lost to a
    wrong one drawn twice). Values compare as numbers where they parse, as DABench's scorer does.
    """
    out = exec_output(result)
    names = expected_tags(fmt)
    if out is None or result is None or not names:
        return out
    tags = extract_answers(result.stream("stdout"))
    if not set(names) <= tags.keys():
        return out
    return answer_form({name: _tag_value(tags[name]) for name in names})


def _tag_value(text: str) -> float | str:
    try:
        value = float(text)
    except ValueError:
        return text.strip()
    return value if math.isfinite(value) else text.strip()
