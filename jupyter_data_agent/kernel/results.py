"""Typed results of running a cell in a kernel copy, and their JSON form.

Snapshot processes run the user's (and the model's) code, so nothing they send
back is unpickled: every reply is one of these dataclasses as plain JSON.
This module is imported inside the kernel and its forks (possibly injected
into a kernel from another environment), so it uses the standard library
only and looks at pandas/numpy only when the kernel already imported them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .answer_form import BUDGET_CELLS, answer_form

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks) and
# the two-character escapes: what a traceback or a progress bar may carry.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def truncate_text(text: str, limit: int | None, *, tail: bool = False) -> tuple[str, bool]:
    """``(text, cut)``: at most ``limit`` characters, and a note of how much went.

    The head is kept (a DataFrame's header and first rows say the most), or
    with ``tail`` the end in whole lines (a traceback ends where it failed),
    so a model does not take the rest for the full output.
    """
    if limit is None or limit < 0 or len(text) <= limit:
        return text, False
    cut = len(text) - limit
    if tail:
        kept = text[cut:]
        if text[cut - 1] != "\n" and "\n" in kept:
            kept = kept[kept.index("\n") + 1 :]  # whole lines: a half frame misleads
        return f"...[{len(text) - len(kept)} earlier chars truncated]\n{kept.lstrip()}", True
    return f"{text[:limit].rstrip()}\n{cut_note(cut)}", True


def cut_note(n: int) -> str:
    """What replaces ``n`` characters that were left out, wherever output is cut."""
    return f"...[{n} more chars truncated]"


_F = TypeVar("_F", bound="JSONFields")


class JSONFields:
    """Dataclasses as plain JSON; ``from_json`` skips keys it does not know."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls: type[_F], d: dict | None) -> _F:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (d or {}).items() if k in names})


@dataclass
class Limits(JSONFields):
    """Resource bounds of every process of one snapshot tree.

    ``timeout_s`` is enforced by the client (it kills the process);
    the rest are applied inside the snapshot processes.
    """

    timeout_s: float = 60.0
    cpu_s: float = 60.0  # CPU seconds per exec (soft RLIMIT_CPU -> error in the cell)
    cpu_total_s: int = 3600  # hard RLIMIT_CPU per process (SIGKILL)
    # Scheduling priority of every copy (nice, 0-19; copies only ever lower it): a candidate
    # computing yields the cores to the model decoding the next one and to the user's kernel.
    nice: int = 10
    memory_extra_bytes: int = 4 << 30  # RLIMIT_AS = address space at root fork + this
    deny_network: bool = True
    landlock: bool = True  # False: skip Landlock (tests, or a policy that asks the user)
    seccomp: bool = True  # False: skip the syscall filter (only to test the policy)
    confine: bool = True  # False: no layer at all (the benchmark's baseline); nothing may run
    max_output_chars: int = 100_000  # per stream run / per text mime value
    max_outputs: int = 100
    max_image_bytes: int = 4_000_000  # base64 characters per image
    max_total_bytes: int = 8 << 20  # all outputs of one exec together
    max_capture_bytes: int = 1 << 20  # C-level/subprocess output kept per exec and stream
    max_file_bytes: int = 512 << 20  # RLIMIT_FSIZE: largest file a copy may write
    max_scratch_bytes: int = 1 << 30  # all files in scratch together (checked after exec)
    max_value_items: int = 50  # rows/columns/elements a ValueHandle shows
    max_form_cells: int = BUDGET_CELLS  # values kept in a ValueHandle's form (digests beyond)
    fork_timeout_s: float = 30.0

    def max_value_bytes(self) -> int:
        """JSON characters of a value's shown sample: ``max_value_items`` rows and columns of
        cells of about a hundred characters each."""
        return self.max_value_items * self.max_value_items * 100 + (64 << 10)

    def max_form_bytes(self) -> int:
        """JSON characters of a value's canonical form: its cell budget, and sketches."""
        return self.max_form_cells * (64 + 2 * 24) + (1 << 20)

    def reply_bytes(self) -> int:
        """The largest reply frame an exec may send: everything the bounds above
        let one exec keep, JSON-escaped, plus room for its value and traceback.
        The client refuses a larger frame unread (a copy can lift its own bounds)."""
        kept = (self.max_total_bytes + 2 * self.max_capture_bytes
                + 4 * self.max_output_chars + self.max_form_cells * (64 + 2 * 24))  # values, sketches
        return 2 * kept + (1 << 20)


# Confinement layers, in the order they are shown, with what each one stops.
LAYERS: dict[str, str] = {
    "landlock_fs": "files outside scratch are read-only; devices (but null, zero, full, random, "
                   "urandom), other processes' /proc files and every Jupyter runtime dir unreadable",
    "landlock_net": "TCP connect and bind are denied",
    "seccomp": "no new sockets, ptrace, memfds, SysV or POSIX IPC, metadata changes, namespaces "
               "or calls on other processes",
    "capabilities": "every capability dropped, no new privileges",
    "descriptors": "every descriptor inherited from the kernel is closed",
    "shared_mappings": "shared memory maps of the kernel are private in the copy",
    "secrets": "environment reduced to an allow-list; secret values and the session key wiped "
               "from memory",
    "processes": "every process a candidate starts ends with its copy",
    "limits": "CPU, memory, file size and output bounded; wall-clock timeout",
}


@dataclass
class Protections(JSONFields):
    """Which confinement layers are really active for a snapshot.

    Callers show this and apply the policy to it (``kernel/policy.py``): a
    copy without a layer can reach what that layer guards. ``reasons`` says
    why a layer is off.
    """

    landlock_fs: bool = False
    landlock_net: bool = False
    seccomp: bool = False
    capabilities: bool = False
    descriptors: bool = False
    shared_mappings: bool = False
    secrets: bool = False
    processes: str = ""  # "cgroup" | "subreaper" | "" (off)
    rlimit_cpu: bool = False
    rlimit_as: bool = False
    rlimit_fsize: bool = False
    timeout: bool = False
    landlock_abi: int = 0
    signal_scope: bool = False  # Landlock ABI >= 6: cannot signal the kernel/server
    scratch: str | None = None
    cgroup: str | None = None  # the tree's cgroup v2 directory, when there is one
    reasons: dict[str, str] = field(default_factory=dict)  # layer -> why it is off
    notes: list[str] = field(default_factory=list)

    MECHANISMS = tuple(LAYERS)

    def layer_on(self, name: str) -> bool:
        if name == "limits":
            return self.rlimit_cpu and self.rlimit_as and self.rlimit_fsize and self.timeout
        if name == "processes":
            return bool(self.processes)
        return bool(getattr(self, name))

    def layers(self) -> list[dict]:
        """Each layer as {name, on, detail}; detail is the reason when off."""
        out = []
        for name, what in LAYERS.items():
            on = self.layer_on(name)
            detail = what if on else self.reasons.get(name, "not available here")
            if name == "processes" and on:
                detail = f"{what} ({self.processes})"
            out.append({"name": name, "on": on, "detail": detail})
        return out

    def missing(self) -> list[str]:
        return [m for m in self.MECHANISMS if not self.layer_on(m)]

    @property
    def complete(self) -> bool:
        return not self.missing()

    def off(self, name: str, reason: str) -> None:
        """Record why ``name`` is off (the first reason wins)."""
        self.reasons.setdefault(name, reason)

    def summary(self) -> str:
        parts = [f"{m}={'on' if self.layer_on(m) else 'OFF'}" for m in self.MECHANISMS]
        s = ", ".join(parts)
        why = [f"{m}: {self.reasons[m]}" for m in self.missing() if m in self.reasons]
        if why or self.notes:
            s += " (" + "; ".join(why + self.notes) + ")"
        return s


@dataclass
class OutputItem(JSONFields):
    """One notebook output (nbformat v4 shape)."""

    output_type: str  # stream | execute_result | display_data | error
    name: str | None = None  # stream name
    text: str | None = None  # stream text
    data: dict[str, Any] = field(default_factory=dict)  # mime bundle
    metadata: dict[str, Any] = field(default_factory=dict)
    ename: str | None = None
    evalue: str | None = None
    traceback: list[str] = field(default_factory=list)
    truncated: bool = False

    def plain_text(self) -> str:
        """The text a prompt or a log would show for this output."""
        if self.output_type == "stream":
            return self.text or ""
        if self.output_type == "error":
            return f"{self.ename}: {self.evalue}"
        return str(self.data.get("text/plain", ""))


@dataclass
class ValueHandle:
    """A cell's last value: a bounded sample to show, and its form to compare.

    ``value`` is JSON-able and capped (``truncated`` says so): scalars as is, a
    Series as {name, dtype, index, values}, a DataFrame as {columns, dtypes,
    index, values}. ``form`` (``kernel.answer_form``) is the lossless canonical
    form every vote and score compares; it stays on the server (``to_json(form=False)``).
    """

    type: str
    shape: list[int] | None = None
    value: Any = None
    truncated: bool = False
    form: dict | None = None

    def to_json(self, *, form: bool = True) -> dict:
        d = dataclasses.asdict(self)
        if not form:
            del d["form"]
        return d

    def bounded(self, limits: "Limits") -> "ValueHandle":
        """This value within ``limits``, whatever the copy sent: its ``describe_value`` is
        the copy's own code, which a candidate can replace."""
        self.type = str(self.type)[:200]
        shape = self.shape
        ok = isinstance(shape, list) and len(shape) <= 8 and all(
            isinstance(n, int) and not isinstance(n, bool) for n in shape)
        self.shape = list(shape) if ok and shape is not None else None
        budget = limits.max_value_bytes()
        for chars in (1000, 100):
            value, cut = jsonable(self.value, limits.max_value_items, 0, max_chars=chars, max_depth=4)
            if len(json.dumps(value, default=str)) <= budget:
                break
        else:
            value, cut = None, True
        self.value, self.truncated = value, bool(self.truncated) or cut
        if self.form is not None and (not isinstance(self.form, dict)
                                      or len(json.dumps(self.form, default=str)) > limits.max_form_bytes()):
            self.form = None  # no comparable answer: it never votes
        return self

    @classmethod
    def from_json(cls, d: dict | None) -> "ValueHandle | None":
        if d is None:
            return None
        return cls(type=d.get("type", "?"), shape=d.get("shape"), value=d.get("value"),
                   truncated=bool(d.get("truncated", False)), form=d.get("form"))


#: What a run in a copy may end as, and which bound stopped it (``ExecResult``).
STATUSES = ("ok", "error", "timeout", "died")
LIMIT_NAMES = (None, "timeout", "cpu", "memory", "disk")
#: A namespace report past this is not read (100 names listed per kind at most, 200 characters each).
MAX_NAMESPACE_CHARS = 256 * 1024


@dataclass
class ExecResult:
    """What running one cell in a copy produced.

    ``status``: ok | error (exception in the cell) | timeout (wall clock; the
    process was killed) | died (the process vanished: CPU hard limit, OOM,
    os._exit...) . ``limit`` names the bound that was hit, if any.
    """

    status: str
    outputs: list[OutputItem] = field(default_factory=list)
    value: ValueHandle | None = None
    ename: str | None = None
    evalue: str | None = None
    traceback: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    pid: int | None = None
    limit: str | None = None  # one of LIMIT_NAMES
    truncated: bool = False
    #: What the cell added, changed and deleted in the copy's namespace, when the run asked
    #: (``copy.namespace_diff.diff``; the copy's word, read by ``namespace_diff.parse``).
    namespace: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def text(self, *, errors: bool = True) -> str:
        """Outputs as plain text (ANSI stripped), e.g. for prompts and tests."""
        return "".join(strip_ansi(o.plain_text()) + ("" if o.output_type == "stream" else "\n")
                       for o in self.outputs if errors or o.output_type != "error")

    def error_line(self) -> str:
        """What went wrong, in one line: ``ename: evalue`` and the limit that stopped it."""
        line = f"{self.ename}: {self.evalue}" if self.ename else str(self.status)
        return line + (f" (stopped by the {self.limit} limit)" if self.limit else "")

    def stream(self, name: str = "stdout") -> str:
        return "".join(o.text or "" for o in self.outputs
                       if o.output_type == "stream" and o.name == name)

    def to_json(self, *, form: bool = True) -> dict:
        """Plain JSON; ``form=False`` leaves out the value's canonical form (for browsers)."""
        d = dataclasses.asdict(self)
        if d["value"] is not None and not form:
            del d["value"]["form"]
        return d

    def bounded(self, limits: Limits) -> "ExecResult":
        """This result within ``limits``, enforced again where it is received: a copy
        runs the model's code and can lift the bounds it applies to itself."""
        text_cap = limits.max_output_chars + limits.max_capture_bytes + 200
        outputs, total = [], 0
        for item in self.outputs[:limits.max_outputs + 2]:
            item.output_type = str(item.output_type)[:64]
            item.name = None if item.name is None else str(item.name)[:64]
            item.ename = None if item.ename is None else str(item.ename)[:200]
            if item.text is not None:
                item.text, cut = truncate_text(str(item.text), text_cap)
                item.truncated |= cut
            data = {}
            for mime, value in (item.data if isinstance(item.data, dict) else {}).items():
                if not isinstance(value, str):  # a JSON mime type (vega, plotly...)
                    if len(json.dumps(value, default=str)) > text_cap:
                        item.truncated = True
                        continue
                    data[str(mime)[:200]] = value
                    continue
                is_image = mime.startswith("image/") and mime != "image/svg+xml"
                if is_image and len(value) > limits.max_image_bytes:
                    item.truncated = True
                    continue
                if not is_image:
                    value, cut = truncate_text(value, text_cap)
                    item.truncated |= cut
                data[str(mime)[:200]] = value
            item.data = data
            if len(json.dumps(item.metadata, default=str)) > 4096:
                item.metadata = {}
            item.evalue = None if item.evalue is None else truncate_text(str(item.evalue), 2000)[0]
            item.traceback = _bounded_lines(item.traceback, text_cap)
            total += len(item.text or "") + sum(len(v) if isinstance(v, str) else 64
                                                for v in item.data.values())
            if total > limits.max_total_bytes + 2 * limits.max_capture_bytes:
                self.truncated = True
                break
            outputs.append(item)
        self.truncated |= len(outputs) < len(self.outputs)
        self.outputs = outputs
        self.evalue = None if self.evalue is None else truncate_text(str(self.evalue), 2000)[0]
        self.traceback = _bounded_lines(self.traceback, text_cap)
        self.ename = None if self.ename is None else str(self.ename)[:200]
        self.status = self.status if self.status in STATUSES else "died"
        self.limit = self.limit if self.limit in LIMIT_NAMES else None
        if self.value is not None:
            self.value.bounded(limits)
        if self.namespace is not None and (not isinstance(self.namespace, dict)
                                           or len(json.dumps(self.namespace, default=str)) > MAX_NAMESPACE_CHARS):
            self.namespace = {"note": "the copy's namespace report was not readable or too long"}
        return self

    @classmethod
    def from_json(cls, d: dict) -> "ExecResult":
        return cls(
            status=d["status"],
            outputs=[OutputItem.from_json(o) for o in d.get("outputs", [])],
            value=ValueHandle.from_json(d.get("value")),
            ename=d.get("ename"),
            evalue=d.get("evalue"),
            traceback=list(d.get("traceback") or []),
            duration_s=float(d.get("duration_s") or 0.0),
            pid=d.get("pid"),
            limit=d.get("limit"),
            truncated=bool(d.get("truncated", False)),
            namespace=d.get("namespace"),
        )


def _bounded_lines(lines: Any, budget: int) -> list[str]:
    """At most ``budget`` characters of traceback lines."""
    out: list[str] = []
    for line in lines if isinstance(lines, list) else []:
        line, _ = truncate_text(str(line), budget)
        out.append(line)
        budget -= len(line)
        if budget <= 0:
            out.append("... [traceback truncated]")
            break
    return out


# ---------------------------------------------------------------- value handles

def _type_name(obj: Any) -> str:
    t = type(obj)
    mod = t.__module__
    if mod in ("builtins", None):
        return t.__qualname__
    top = mod.split(".")[0]
    if top in ("pandas", "numpy"):
        return f"{top}.{t.__qualname__}"
    return f"{mod}.{t.__qualname__}"


def jsonable(x: Any, max_items: int = 50, depth: int = 0, *, max_chars: int = 1000,
             max_depth: int = 3) -> tuple[Any, bool]:
    """Best-effort JSON-able compact form of ``x``; returns (form, truncated)."""
    if x is None or isinstance(x, (bool, int, str)):
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) > 2**63:
            return str(x), False
        if isinstance(x, str) and len(x) > max_chars:
            return x[:max_chars], True
        return x, False
    if isinstance(x, float):
        return (x if math.isfinite(x) else str(x)), False
    more = {"max_chars": max_chars, "max_depth": max_depth}
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.generic):
        try:
            return jsonable(x.item(), max_items, depth, **more)
        except Exception:  # noqa: BLE001 -- a user's numpy scalar subclass may raise anything
            return str(x), False
    if depth >= max_depth:
        r = repr(x)
        return r[:200], len(r) > 200
    if isinstance(x, dict):
        out, trunc = {}, len(x) > max_items
        for i, (k, v) in enumerate(x.items()):
            if i >= max_items:
                break
            out[str(k)[:200]], t = jsonable(v, max_items, depth + 1, **more)
            trunc |= t
        return out, trunc
    if isinstance(x, (list, tuple, set, frozenset)):
        if isinstance(x, (set, frozenset)):
            # sets print in arbitrary order: sort a bounded sample
            seq = sorted(itertools.islice(x, max_items), key=repr)
        else:
            seq = list(x[:max_items])
        out, trunc = [], len(x) > max_items
        for v in seq:
            j, t = jsonable(v, max_items, depth + 1, **more)
            out.append(j)
            trunc |= t
        return out, trunc
    if np is not None and isinstance(x, np.ndarray):
        flat = x.reshape(-1)[:max_items]
        vals, t = jsonable(flat.tolist(), max_items, depth + 1, **more)
        return vals, t or x.size > max_items
    if hasattr(x, "isoformat"):
        with contextlib.suppress(Exception):  # a user object's isoformat may raise anything: repr below
            return x.isoformat(), False
    r = repr(x)
    return r[:200], len(r) > 200


def describe_value(obj: Any, max_items: int = 50, form_cells: int = BUDGET_CELLS) -> ValueHandle:
    """A cell's last value: its shown sample and its canonical form."""
    handle = _sample_value(obj, max_items)
    try:
        handle.form = answer_form(obj, budget_cells=form_cells)
    except Exception:  # noqa: BLE001 - an odd object gets no form, and so never votes
        handle.form = None
    return handle


def _index_name(index: Any) -> str:
    """The index's name(s) as a table shows them over its labels ("" when unnamed)."""
    names = [n for n in getattr(index, "names", None) or [] if n is not None]
    return " / ".join(str(n) for n in names)


def _sample_value(obj: Any, max_items: int) -> ValueHandle:
    pd = sys.modules.get("pandas")
    np = sys.modules.get("numpy")
    try:
        if pd is not None and isinstance(obj, pd.DataFrame):
            rows, cols = obj.shape
            sub = obj.iloc[:max_items, :max_items]
            index, t1 = jsonable(list(sub.index), max_items)
            columns, t2 = jsonable([c if isinstance(c, str) else str(c) for c in sub.columns],
                                   max_items)
            values, t3 = jsonable(sub.to_numpy(dtype=object).tolist(), max_items)
            return ValueHandle(
                type=_type_name(obj), shape=[rows, cols],
                value={"columns": columns, "dtypes": [str(d) for d in sub.dtypes],
                       "index": index, "index_name": _index_name(obj.index), "values": values},
                truncated=rows > max_items or cols > max_items or t1 or t2 or t3)
        if pd is not None and isinstance(obj, pd.Series):
            sub = obj.iloc[:max_items]
            index, t1 = jsonable(list(sub.index), max_items)
            values, t2 = jsonable(sub.to_numpy(dtype=object).tolist(), max_items)
            name, _ = jsonable(obj.name)
            return ValueHandle(
                type=_type_name(obj), shape=[len(obj)],
                value={"name": name, "dtype": str(obj.dtype), "index": index,
                       "index_name": _index_name(obj.index), "values": values},
                truncated=len(obj) > max_items or t1 or t2)
        if np is not None and isinstance(obj, np.ndarray):
            v, t = jsonable(obj, max_items)
            return ValueHandle(type=_type_name(obj), shape=list(obj.shape), value=v, truncated=t)
        shape = None
        if isinstance(obj, (list, tuple, dict, set, frozenset, str)):
            shape = [len(obj)]
        v, t = jsonable(obj, max_items)
        return ValueHandle(type=_type_name(obj), shape=shape, value=v, truncated=t)
    except Exception as e:  # noqa: BLE001 -- a user object's __repr__ may raise anything
        return ValueHandle(type=_type_name(obj), value=f"<unrepresentable: {type(e).__name__}>",
                           truncated=True)
