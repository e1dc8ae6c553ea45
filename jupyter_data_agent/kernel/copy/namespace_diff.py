"""What a cell changed in a kernel copy's namespace: new, changed and deleted variables.

Computed inside the copy, in the same request as the cell (the ``exec`` op's
``namespace``, ``copy_server``): a fingerprint of every user variable
before the cell and after it, compared there; only the difference travels.
The copy keeps the fingerprint after the cell (``State.fingerprint``,
outside the user's namespace), so a copy forked from it (a try ``from`` a
handle, a child of a warm root) starts with its state's fingerprint; a run
without ``namespace`` drops it, since that cell may change what it said.
Never a cell of its own: IPython's run path costs more than the fingerprint
(a copy answers a try in one round trip), and no replay ever reruns one.
Imported inside the kernel and its forks (``_jda_kernel``): standard library
only (pandas and numpy only where the copy has them).

A fingerprint is cheap at any state size: type, shape, columns and dtypes,
the object's identity, and a content hash only for values small enough
(``HASH_CELLS``) that hashing costs little; a large frame changed in place
without a change of shape, columns or dtypes is not seen as changed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

#: Values hashed for content at most (frame cells, array elements, container items).
HASH_CELLS = 200_000
#: Variables fingerprinted at most; names listed in the diff at most.
MAX_NAMES = 2_000
MAX_LISTED = 100
_SKIP = frozenset({"In", "Out", "get_ipython", "exit", "quit"})
_UNLISTED_TYPES = frozenset({"module", "function", "type", "builtin_function_or_method"})

Fingerprint = dict  # name -> [type name, shape or None, token]


def fingerprint(ns: dict) -> Fingerprint:
    """Every user variable of ``ns`` (at most ``MAX_NAMES``): its type, shape and a token that
    changes when it does (see the module docstring for what is seen)."""
    pd = sys.modules.get("pandas")
    np = sys.modules.get("numpy")
    out = {}
    for name, obj in list(ns.items())[:MAX_NAMES]:
        if name.startswith("_") or name in _SKIP:
            continue
        t = type(obj)
        tname = t.__module__ + "." + t.__qualname__ if t.__module__ != "builtins" else t.__qualname__
        if tname in _UNLISTED_TYPES:
            continue
        shape, token = _token(obj, pd, np)
        out[name] = [tname, shape, "|".join(token)]
    return out


def _token(obj, pd, np) -> tuple[list | None, list[str]]:
    shape = None
    token = [str(id(obj))]
    try:
        if pd is not None and isinstance(obj, (pd.DataFrame, pd.Series)):
            shape = list(obj.shape)
            cols = list(map(str, obj.columns)) if isinstance(obj, pd.DataFrame) else [str(obj.name)]
            dtypes = list(map(str, obj.dtypes)) if isinstance(obj, pd.DataFrame) else [str(obj.dtype)]
            token += [repr(shape), repr(cols), repr(dtypes)]
            if obj.size <= HASH_CELLS:
                token.append(str(int(pd.util.hash_pandas_object(obj, index=True).sum())))
        elif np is not None and isinstance(obj, np.ndarray):
            shape = list(obj.shape)
            token += [repr(shape), str(obj.dtype)]
            if obj.size <= HASH_CELLS:
                token.append(str(hash(obj.tobytes())))
        elif isinstance(obj, (int, float, complex, str, bytes, bool)) or obj is None:
            token = [repr(obj)[:500]]
        elif isinstance(obj, (list, tuple, dict, set, frozenset)):
            shape = [len(obj)]
            token.append(str(len(obj)))
            if len(obj) <= HASH_CELLS // 100:
                token.append(str(hash(repr(obj))))
        elif hasattr(obj, "shape"):
            shape = [int(n) for n in obj.shape]
            token.append(repr(shape))
    except Exception:  # noqa: BLE001, S110 - the user's object (any type): its identity stands
        pass
    return shape, token


def diff(before: Fingerprint, after: Fingerprint) -> dict:
    """The JSON a copy answers: new, changed and deleted variables, at most ``MAX_LISTED`` each."""
    def item(name: str, fp: list) -> dict:
        return {"name": name, "type": fp[0], "shape": fp[1]}

    new = [item(n, fp) for n, fp in after.items() if n not in before]
    changed = [item(n, fp) for n, fp in after.items() if n in before and before[n] != fp]
    deleted = [item(n, fp) for n, fp in before.items() if n not in after]
    return {"new": new[:MAX_LISTED], "changed": changed[:MAX_LISTED], "deleted": deleted[:MAX_LISTED],
            "truncated": max(len(new), len(changed), len(deleted)) > MAX_LISTED}


@dataclass(frozen=True)
class Variable:
    name: str
    type: str
    shape: list[int] | None = None


@dataclass(frozen=True)
class NamespaceDiff:
    """New, changed and deleted variables of one cell in a copy (``note`` says why when unknown)."""

    new: list[Variable] = field(default_factory=list)
    changed: list[Variable] = field(default_factory=list)
    deleted: list[Variable] = field(default_factory=list)
    truncated: bool = False
    note: str = ""

    def to_json(self) -> dict:
        def items(vs: list[Variable]) -> list[dict]:
            return [{"name": v.name, "type": v.type, "shape": v.shape} for v in vs]

        return {"new": items(self.new), "changed": items(self.changed), "deleted": items(self.deleted),
                "truncated": self.truncated, "note": self.note}


def parse(data: object) -> NamespaceDiff:
    """The diff a copy answered (``ExecResult.namespace``; the copy's word: read defensively,
    bounded)."""
    if isinstance(data, dict) and isinstance(data.get("note"), str):
        return NamespaceDiff(note=data["note"][:500])

    def items(key: str) -> list[Variable]:
        out = []
        for d in (data.get(key) or [])[:MAX_LISTED] if isinstance(data, dict) else []:
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                shape = d.get("shape")
                ok = isinstance(shape, list) and all(isinstance(n, int) for n in shape)
                out.append(Variable(d["name"][:200], str(d.get("type", "?"))[:200],
                                    list(shape)[:8] if ok and shape is not None else None))
        return out

    if not isinstance(data, dict):
        return NamespaceDiff(note="the copy did not report its namespace")
    return NamespaceDiff(items("new"), items("changed"), items("deleted"), bool(data.get("truncated")))
