"""When two answers are the same: the vote's relation and ARCADE's scorer.

Both work on canonical forms (``kernel.answer_form``), built the same way in a
kernel copy and in-process, so a value compares alike on either side of the
round trip. Python values are turned into forms on the way in.

* :func:`same_answer` (symmetric, clusters votes): equal up to representation.
  A Series, a one-column frame, a list and a 1-D array are one column; a
  non-default index is key columns (so ``reset_index`` of group keys changes
  nothing) and a default ``0..n-1`` index is nothing; column order does not
  count, and names count only where both sides use the same meaningful name
  (so renamed columns are the same answer and swapped ones are not). Rows
  keep their order, shapes are exact. Floats match within ``RTOL``/``ATOL``,
  integral values exactly; a missing cell (NaN, None, NaT) equals only a
  missing cell; strings are exact (a bare string answer ignores surrounding
  whitespace, a printing artefact). A one-element collection equals its
  element.
* :func:`covers` (prediction, reference) scores against a reference as
  ARCADE does: extra predicted columns are allowed, each reference column
  (its meaningful index included) needs its own predicted column.

Columns are compared by content digest first; values, where the form kept
them, settle float tolerance; past the form's budget the digests decide
(never a prefix). Clustering groups by :func:`answer_key` (equal keys imply
the same answer) and compares only one member per key, so it is linear in the
number of answers for the usual few distinct ones.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ..kernel.answer_form import answer_form, is_form
from ..kernel.results import ExecResult

__all__ = ["ATOL", "RTOL", "answer_key", "as_form", "covers", "exec_output", "majority", "same_answer"]

RTOL = 1e-6
ATOL = 1e-8
_GENERIC_NAMES = (None, "", "index", "values", "value", "0", "count", "size")


def as_form(x: Any) -> dict | None:
    """The canonical form of a value (a form stays as it is); ``None`` stays ``None``."""
    if x is None:
        return None
    return x if is_form(x) else answer_form(x)


def same_answer(a: Any, b: Any) -> bool:
    """Whether two answers say the same (symmetric; see the module docstring)."""
    fa, fb = as_form(a), as_form(b)
    if fa is None or fb is None:
        return False
    return _same(_unwrap(fa), _unwrap(fb), strip=True)


def covers(prediction: Any, reference: Any) -> bool:
    """Whether ``prediction`` answers ``reference`` under ARCADE's lenient rules."""
    fp, fr = as_form(prediction), as_form(reference)
    if fp is None or fr is None:
        return False
    p, r = _unwrap(fp), _unwrap(fr)
    if p["k"] == "table" and r["k"] == "table":
        return p["rows"] == r["rows"] and _assign(_columns(r), _columns(p), all_right=False)
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
        tag = "int" if col.get("integral") else "float"
        return {"k": "scalar", "t": tag, "v": v}
    node = {"k": "scalar", "t": col["kind"], "v": v}
    if col["kind"] == "time":
        node["tz"] = col.get("tz")
    return node


def _columns(table: dict) -> list[dict]:
    return list(table["index"]) + list(table["cols"])


def _generic(name: Any) -> bool:
    return isinstance(name, str | type(None)) and name in _GENERIC_NAMES


# ------------------------------------------------------------------ comparison

def _same(x: dict, y: dict, *, strip: bool = False) -> bool:
    if x["k"] != y["k"]:
        return False
    if x["k"] == "scalar":
        return _scalars_same(x, y, strip=strip)
    if x["k"] == "table":
        if x["rows"] != y["rows"]:
            return False
        cx, cy = _columns(x), _columns(y)
        return len(cx) == len(cy) and _assign(cx, cy, all_right=True)
    if x["n"] != y["n"] or len(x["items"]) != len(y["items"]):
        return False
    if x["k"] == "dict":
        return all(_same(kx, ky) and _same(_unwrap(vx), _unwrap(vy))
                   for (kx, vx), (ky, vy) in zip(x["items"], y["items"]))
    return all(_same(_unwrap(a), _unwrap(b)) for a, b in zip(x["items"], y["items"]))


def _scalars_same(x: dict, y: dict, *, strip: bool = False) -> bool:
    tx, ty = x["t"], y["t"]
    numeric = ("int", "float")
    if tx in numeric and ty in numeric:
        return _numbers_same(x["v"], y["v"])
    if tx != ty:
        return False
    if tx == "str" and strip:
        return x["v"].strip() == y["v"].strip()
    if tx == "time":
        return x["v"] == y["v"] and x.get("tz") == y.get("tz")
    if tx == "other":
        return x["v"] == y["v"] and x.get("type") == y.get("type")
    return x["v"] == y["v"]


def _num(v: Any) -> float | int:
    """A form's number: ints past 64 bits and infinities travel as text."""
    if not isinstance(v, str):
        return v
    try:
        return int(v)
    except ValueError:
        return float(v)


def _numbers_same(a: Any, b: Any) -> bool:
    a, b = _num(a), _num(b)
    if a == b:
        return True
    if _integral(a) and _integral(b):
        return False  # integral values are exact, whatever their type
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= ATOL + RTOL * max(abs(a), abs(b))


def _integral(v: float | int) -> bool:
    return isinstance(v, int) or (math.isfinite(v) and v == int(v))


def _columns_same(a: dict, b: dict) -> bool:
    if a["n"] != b["n"]:
        return False
    if a["digest"] == b["digest"] and a["kind"] == b["kind"]:
        return True
    kinds = {a["kind"], b["kind"]}
    if kinds == {"num"}:
        if a.get("integral") and b.get("integral"):
            return False  # exact digests differ: some integral value differs
        if "values" in a and "values" in b:
            return _number_lists_same(a["values"], b["values"])
        return bool(set(a.get("q", ())) & set(b.get("q", ())))
    if "obj" in kinds and "values" in a and "values" in b:
        return all(_same(_cell(a, i) or {"k": "?"}, _cell(b, i) or {"k": "?"}) for i in range(a["n"]))
    return False  # str, bool, time and delta columns are equal exactly or not at all


def _number_lists_same(xs: list, ys: list) -> bool:
    import numpy as np  # a dependency; imported late, as most answers hold no numbers

    a = np.array([math.nan if v is None else _num(v) for v in xs], dtype=np.float64)
    b = np.array([math.nan if v is None else _num(v) for v in ys], dtype=np.float64)
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


def _assign(left: list[dict], right: list[dict], *, all_right: bool) -> bool:
    """A one-to-one assignment of every ``left`` column to an equal ``right`` column.

    Same meaningful names pair first (and must be equal); then equal digests;
    what is left is matched by value with augmenting paths. ``all_right``:
    every right column must be used too (same_answer); otherwise extras are fine.
    """
    if all_right and len(left) != len(right):
        return False
    lnames, rnames = _unique_names(left), _unique_names(right)
    named = {k: j for k, j in rnames.items() if k in lnames}
    used: set[int] = set()
    todo: list[dict] = []
    for i, c in enumerate(left):
        j = named.get(_name_key(c["name"])) if lnames.get(_name_key(c["name"])) == i else None
        if j is None:
            todo.append(c)
        elif _columns_same(c, right[j]):
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
    return _match_rest(rest, [right[j] for j in range(len(right)) if j not in used])


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


def _match_rest(left: list[dict], right: list[dict]) -> bool:
    """Bipartite matching (Kuhn's augmenting paths) of columns equal within tolerance."""
    if len(left) > len(right):
        return False
    edges = [[j for j, r in enumerate(right) if _columns_same(c, r)] for c in left]
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or place(owner[j], seen):
                owner[j] = i
                return True
        return False

    return all(place(i, set()) for i in range(len(left)))


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


def majority(answers: Sequence[Any], same: Callable[[Any, Any], bool] | None = None, *,
             scores: Sequence[float | None] | None = None,
             steps: Sequence[int] | None = None) -> list[list[int]]:
    """Self-consistency: indices of equal answers grouped, the winner first.

    ``None`` answers (errors, silent cells) never vote. Groups are ordered by
    size, then by their best score, then by first appearance; each group's
    first index is its representative: the member equal to most others, ties
    to the higher score, then fewer steps, then the earlier answer. ``same``
    replaces :func:`same_answer` (e.g. for answers in words).
    """
    voters = [i for i, a in enumerate(answers) if a is not None]
    if same is None:
        values = {i: as_form(answers[i]) for i in voters}
        keys = {i: answer_key(values[i]) for i in voters}
        relation: Callable[[Any, Any], bool] = same_answer
    else:
        keys = {i: str(i) for i in voters}
        values = {i: answers[i] for i in voters}
        relation = same
    # one representative per distinct key; keys with equal representatives merge
    firsts: dict[str, int] = {}
    for i in voters:
        firsts.setdefault(keys[i], i)
    parent = {k: k for k in firsts}

    def root(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    distinct = list(firsts)
    for a_i, ka in enumerate(distinct):
        for kb in distinct[a_i + 1:]:
            if root(ka) != root(kb) and relation(values[firsts[ka]], values[firsts[kb]]):
                parent[root(kb)] = root(ka)
    classes: dict[str, list[int]] = {}
    for i in voters:
        classes.setdefault(root(keys[i]), []).append(i)

    def score(i: int) -> float:
        s = scores[i] if scores is not None else None
        return s if s is not None else -math.inf

    def rep_order(group: list[int]) -> list[int]:
        count = Counter(keys[i] for i in group)
        # members with one key agree alike: compare one member per key
        agree = {k: count[k] - 1 + sum(count[o] for o in count if o != k and
                                       relation(values[firsts[k]], values[firsts[o]]))
                 for k in count}
        return sorted(group, key=lambda i: (-agree[keys[i]], -score(i), steps[i] if steps is not None else 0, i))

    groups = [rep_order(g) for g in classes.values()]
    return sorted(groups, key=lambda g: (-len(g), -max(score(i) for i in g), min(g)))


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
