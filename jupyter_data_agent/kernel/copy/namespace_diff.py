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

Files: the copy also lists the plain files the cell wrote in its scratch folder
(new, or a size or modification time changed: ``scratch_files``); the
notebook directory's entries linked there are links and never listed. A
search's copies share one scratch folder and run one at a time, so a file is
the cell's own.

A fingerprint is cheap at any state size: type, shape, columns and dtypes,
the object's identity, and a content hash only for values small enough
(``HASH_CELLS``) that hashing costs little; a large frame changed in place
without a change of shape, columns or dtypes is not seen as changed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

#: Values hashed for content at most (frame cells, array elements, container items).
HASH_CELLS = 200_000
#: Variables fingerprinted at most; names listed in the diff at most.
MAX_NAMES = 2_000
MAX_LISTED = 100
#: Entries of a scratch folder looked at at most (files listed: ``MAX_LISTED``).
MAX_SCRATCH_ENTRIES = 5_000
#: Scratch's own temp folder (``confine.TMP_SUBDIR``): what a library leaves there is not "written".
_SCRATCH_TMP = ".jda-tmp"
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


Files = dict  # path relative to scratch -> [size, mtime_ns]


def scratch_files(scratch: str | None) -> Files | None:
    """The plain files under ``scratch`` (links not followed, its temp folder left out), at most
    ``MAX_SCRATCH_ENTRIES`` entries looked at; None without a scratch folder or past the bound."""
    if not scratch:
        return None
    out: Files = {}
    seen = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(scratch, rel)))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_SCRATCH_ENTRIES:
                return None
            path = os.path.join(rel, entry.name)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if path != _SCRATCH_TMP:
                        stack.append(path)
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out[path] = [st.st_size, st.st_mtime_ns]
            except OSError:
                continue
    return out


def diff(before: Fingerprint, after: Fingerprint, files_before: Files | None = None,
         files_after: Files | None = None) -> dict:
    """The JSON a copy answers: new, changed (with the shape before) and deleted variables, and
    the files written in scratch (None: not known), at most ``MAX_LISTED`` each."""
    def item(name: str, fp: list) -> dict:
        return {"name": name, "type": fp[0], "shape": fp[1]}

    new = [item(n, fp) for n, fp in after.items() if n not in before]
    changed = [{**item(n, fp), "before": before[n][1]} for n, fp in after.items()
               if n in before and before[n] != fp]
    deleted = [item(n, fp) for n, fp in before.items() if n not in after]
    files = (None if files_before is None or files_after is None
             else sorted(p for p, st in files_after.items() if files_before.get(p) != st))
    return {"new": new[:MAX_LISTED], "changed": changed[:MAX_LISTED], "deleted": deleted[:MAX_LISTED],
            "files": None if files is None else files[:MAX_LISTED],
            "truncated": max(len(new), len(changed), len(deleted), len(files or ())) > MAX_LISTED}


@dataclass(frozen=True)
class Variable:
    name: str
    type: str
    shape: list[int] | None = None
    #: A changed variable's shape before the cell (None: new, deleted, or no shape).
    before: list[int] | None = None


@dataclass(frozen=True)
class NamespaceDiff:
    """New, changed and deleted variables of one cell in a copy, and the files it wrote in
    scratch (``files`` None: not known); ``note`` says why the whole diff is unknown."""

    new: list[Variable] = field(default_factory=list)
    changed: list[Variable] = field(default_factory=list)
    deleted: list[Variable] = field(default_factory=list)
    truncated: bool = False
    note: str = ""
    files: list[str] | None = None

    @property
    def known(self) -> bool:
        return not self.note

    def to_json(self) -> dict:
        def items(vs: list[Variable]) -> list[dict]:
            return [{"name": v.name, "type": v.type, "shape": v.shape, "before": v.before} for v in vs]

        return {"new": items(self.new), "changed": items(self.changed), "deleted": items(self.deleted),
                "truncated": self.truncated, "note": self.note, "files": self.files}


def parse(data: object) -> NamespaceDiff:
    """The diff a copy answered (``ExecResult.namespace``; the copy's word: read defensively,
    bounded)."""
    if isinstance(data, dict) and isinstance(data.get("note"), str):
        return NamespaceDiff(note=data["note"][:500])

    def shape_of(shape: object) -> list[int] | None:
        ok = isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)
        return list(shape)[:8] if ok and isinstance(shape, list) else None

    def items(key: str) -> list[Variable]:
        out = []
        for d in (data.get(key) or [])[:MAX_LISTED] if isinstance(data, dict) else []:
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                out.append(Variable(d["name"][:200], str(d.get("type", "?"))[:200], shape_of(d.get("shape")),
                                    shape_of(d.get("before"))))
        return out

    if not isinstance(data, dict):
        return NamespaceDiff(note="the copy did not report its namespace")
    files = data.get("files")
    listed = ([str(f)[:500] for f in files[:MAX_LISTED] if isinstance(f, str)]
              if isinstance(files, list) else None)
    return NamespaceDiff(items("new"), items("changed"), items("deleted"), bool(data.get("truncated")),
                         files=listed)
