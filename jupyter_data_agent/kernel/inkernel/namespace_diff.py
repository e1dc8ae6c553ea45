"""What a cell changed in a kernel copy's namespace: new, changed and deleted variables.

Computed inside the copy, around the cell: ``BEFORE`` fingerprints every
user variable, the cell runs, ``AFTER`` fingerprints again, prints the
difference as one JSON line and keeps the new fingerprint in place of the
first: a copy forked from this one (a try ``from`` its handle) starts with
its own state's fingerprint and needs no ``BEFORE`` of its own. Both are
plain cells (standard library, pandas and numpy only where the kernel has
them), so they run in any copy the way the cell does, and an evicted copy
rebuilt by replay replays them harmlessly.

A fingerprint is cheap at any state size: type, shape, columns and dtypes,
the object's identity, and a content hash only for values small enough
(``HASH_CELLS``) that hashing costs little; a large frame changed in place
without a change of shape, columns or dtypes is not seen as changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

MARK = "__jda_ns_before__"
#: Values hashed for content at most (frame cells, array elements, container items).
HASH_CELLS = 200_000
#: Variables fingerprinted at most; names listed in the diff at most.
MAX_NAMES = 2_000
MAX_LISTED = 100

_FINGERPRINT = r'''
def __jda_fp(ns, _cells=%(cells)d, _max=%(names)d):
    import sys
    skip = {"In", "Out", "get_ipython", "exit", "quit", %(mark)r}
    pd = sys.modules.get("pandas")
    np = sys.modules.get("numpy")
    out = {}
    for name, obj in list(ns.items())[:_max]:
        if name.startswith("_") or name in skip:
            continue
        t = type(obj)
        tname = t.__module__ + "." + t.__qualname__ if t.__module__ != "builtins" else t.__qualname__
        if tname in ("module", "function", "type", "builtin_function_or_method"):
            continue
        shape = None
        token = [str(id(obj))]
        try:
            if pd is not None and isinstance(obj, (pd.DataFrame, pd.Series)):
                shape = list(obj.shape)
                cols = list(map(str, obj.columns)) if isinstance(obj, pd.DataFrame) else [str(obj.name)]
                dtypes = list(map(str, obj.dtypes)) if isinstance(obj, pd.DataFrame) else [str(obj.dtype)]
                token += [repr(shape), repr(cols), repr(dtypes)]
                if obj.size <= _cells:
                    token.append(str(int(pd.util.hash_pandas_object(obj, index=True).sum())))
            elif np is not None and isinstance(obj, np.ndarray):
                shape = list(obj.shape)
                token += [repr(shape), str(obj.dtype)]
                if obj.size <= _cells:
                    token.append(str(hash(obj.tobytes())))
            elif isinstance(obj, (int, float, complex, str, bytes, bool)) or obj is None:
                token = [repr(obj)[:500]]
            elif isinstance(obj, (list, tuple, dict, set, frozenset)):
                shape = [len(obj)]
                token.append(str(len(obj)))
                if len(obj) <= _cells // 100:
                    token.append(str(hash(repr(obj))))
            elif hasattr(obj, "shape"):
                shape = [int(n) for n in obj.shape]
                token.append(repr(shape))
        except Exception:
            pass
        out[name] = [tname, shape, "|".join(token)]
    return out
'''

BEFORE = (_FINGERPRINT % {"cells": HASH_CELLS, "names": MAX_NAMES, "mark": MARK}
          + f"globals()[{MARK!r}] = __jda_fp(globals())\ndel __jda_fp\n")

AFTER = (_FINGERPRINT % {"cells": HASH_CELLS, "names": MAX_NAMES, "mark": MARK} + r'''
def __jda_diff(before, after, listed=%(listed)d):
    import json
    item = lambda name, fp: {"name": name, "type": fp[0], "shape": fp[1]}
    new = [item(n, fp) for n, fp in after.items() if n not in before]
    changed = [item(n, fp) for n, fp in after.items() if n in before and before[n] != fp]
    deleted = [item(n, fp) for n, fp in before.items() if n not in after]
    print(json.dumps({"new": new[:listed], "changed": changed[:listed], "deleted": deleted[:listed],
                      "truncated": max(len(new), len(changed), len(deleted)) > listed}))
__jda_after = __jda_fp(globals())
__jda_diff(globals().pop(%(mark)r, {}), __jda_after)
globals()[%(mark)r] = __jda_after
del __jda_fp, __jda_diff, __jda_after
''' % {"listed": MAX_LISTED, "mark": MARK})


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


def parse(stdout: str) -> NamespaceDiff:
    """The diff ``AFTER`` printed (the copy's word: read defensively, bounded)."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return NamespaceDiff(note="the copy did not report its namespace")

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
