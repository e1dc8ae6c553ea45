"""Schema of the DataFrames/Series that live in a kernel, as ARCADE's prompt block.

ARCADE showed that describing each DataFrame (columns plus one example value)
is the single most valuable piece of context, so this must work on any user
namespace: it never raises because of a strange object, never prints, never
creates or rebinds a name in the user namespace, and is bounded in time and
size.

One implementation (``_jda_collect_schemas``) serves both callers:

* in the kernel (the ``%%agent`` magic): :func:`inspect_namespace` calls it
  directly on ``get_ipython().user_ns``;
* from the Jupyter server: :func:`inspect_kernel` ships its *source* in one
  silent ``execute_request`` as a ``user_expressions`` entry, so the kernel
  needs nothing but pandas (not even this package), and the result comes back
  in the reply instead of through ``Out``/``_`` or stdout.

Choices the prompt relies on (tests pin them):

* Frames are picked most-recently-defined first (reverse namespace insertion
  order; rebinding an existing name does not move it), then listed in
  definition order so the prompt reads like the notebook.
* MultiIndex column labels are shown as their tuple repr, ``('a', 'b')``,
  because that is exactly what user code has to write to select them.
* An all-null column is shown as ``col (all null)`` (``col (empty)`` when
  the frame has no rows).
* Examples and labels are one line (newlines escaped) and at most
  ``max_value_chars`` characters, ending in ``...`` when cut.
* A Series is one line:
  ``# Series s (name=price, dtype=float64, 3 rows) with example value: 3.5``.
* Each frame gets one extra line after ARCADE's two:
  ``# df: 891 rows x 12 columns; dtypes: a=int64, b=str``.
* When the time limit runs out, frames not reached are still listed with
  their shape (which is O(1)) but no columns, and ``truncated`` is set.
* ``@name`` mentions (:func:`mentions`, parsed from the intent, so the
  sidebar and the ``%%agent`` magic work alike and the text stays readable
  for the model): a mentioned frame or Series is always inspected, first,
  with every column (up to ``full_max_columns``) and up to
  ``full_examples`` distinct example values per column; it comes first in
  the schema block. When anything is mentioned, the other frames are
  summarized in one line each (shape and first column names).
* What the block left out is reported by :func:`schema_cuts` for the
  turn's context gauge.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .. import rpc

__all__ = [
    "ColumnInfo",
    "FrameCut",
    "FrameSchema",
    "SchemaCuts",
    "KernelDidNotAnswer",
    "SchemaInspectionError",
    "inspect_namespace",
    "schema_block",
    "inspection_request_code",
    "inspect_kernel",
    "mentions",
    "schema_cuts",
    "SUMMARY_COLUMNS",
]

@dataclass
class FrameCut:
    """A DataFrame the schema block did not describe in full."""

    name: str
    # Columns named in the prompt, of the frame's total.
    shown_columns: int
    total_columns: int
    # True: a one-line summary (other frames were @mentioned), not the ARCADE column list.
    summarized: bool = False


@dataclass
class SchemaCuts:
    """What the schema block left out, and which frames it gave in full because they were @mentioned."""

    mentioned: list[str] = field(default_factory=list)
    frames_cut: list[FrameCut] = field(default_factory=list)


#: ``@name`` where ``name`` is a Python identifier, not inside a word or an e-mail address.
MENTION = re.compile(r"(?<![\w@.])@([A-Za-z_][A-Za-z0-9_]*)\b")
#: Column names a summarized frame shows (the others are counted).
SUMMARY_COLUMNS = 6


def mentions(intent: str) -> list[str]:
    """The ``@names`` in an intent, first mention first, each once.

    Only names that are live frames get a full schema; any other ``@word``
    stays what it was, text for the model.
    """
    return list(dict.fromkeys(MENTION.findall(intent or "")))


FrameKind = Literal["DataFrame", "Series"]

class SchemaInspectionError(RuntimeError):
    """The kernel could not be inspected (busy, dead, or the inspector failed)."""


class KernelDidNotAnswer(SchemaInspectionError):
    """The kernel did not answer in time: busy running a cell, or dead (``rpc.KernelTimeout``)."""


@dataclass
class ColumnInfo:
    name: str
    dtype: str
    # First non-null value as bounded text; None means the column is all null.
    example: str | None
    # Further distinct values (mentioned frames only), after ``example``.
    more_examples: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ColumnInfo:
        example = data.get("example")
        return cls(
            name=str(data["name"]),
            dtype=str(data.get("dtype", "")),
            example=None if example is None else str(example),
            more_examples=[str(v) for v in data.get("more_examples", [])],
        )


@dataclass
class FrameSchema:
    name: str
    kind: FrameKind
    shape: tuple[int, ...]
    columns: list[ColumnInfo] = field(default_factory=list)
    # Number of columns the object really has (1 for a Series).
    total_columns: int = 0
    # True when fewer columns were inspected than exist (column cap, time
    # limit, or an error while reading the frame).
    truncated: bool = False
    # @mentioned in the intent: inspected in full, first in the schema block.
    mentioned: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FrameSchema:
        kind = data.get("kind", "DataFrame")
        if kind not in ("DataFrame", "Series"):
            raise ValueError(f"unknown frame kind {kind!r}")
        return cls(
            name=str(data["name"]),
            kind=kind,
            shape=tuple(int(n) for n in data.get("shape", ())),
            columns=[ColumnInfo.from_dict(c) for c in data.get("columns", [])],
            total_columns=int(data.get("total_columns", 0)),
            truncated=bool(data.get("truncated", False)),
            mentioned=bool(data.get("mentioned", False)),
        )


def _jda_collect_schemas(ns, max_frames=10, max_columns=20, max_value_chars=80, time_limit=2.0,
                        full=(), full_max_columns=500, full_examples=3):
    """Kernel-side inspector; returns JSON-ready dicts in ``FrameSchema.to_dict`` form.

    Frames named in ``full`` (@mentions) are always picked and inspected
    first, up to ``full_max_columns`` columns with ``full_examples``
    distinct example values each.

    Self-contained on purpose (stdlib + pandas imported inside, helpers
    nested, no module globals): its source is executed in a throwaway dict
    inside kernels that may not be able to import this package.
    """
    import sys
    import time

    deadline = None if time_limit is None else time.monotonic() + time_limit
    # No pandas imported by the user means no frames: don't pay for (or cause
    # the side effects of) importing it ourselves.
    pd = sys.modules.get("pandas")
    if pd is None:
        return []
    frame_types = (pd.DataFrame, pd.Series)
    limit = max(int(max_value_chars), 4)

    def out_of_time():
        return deadline is not None and time.monotonic() > deadline

    def clip(text):
        # Cut before escaping so a multi-megabyte string costs nothing.
        text = text[: limit * 2].replace("\r", "\\r").replace("\n", "\\n")
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def to_text(value):
        # Never raise and never build unbounded text where we can avoid it.
        try:
            if isinstance(value, str):
                text = value[: limit * 2]
            elif isinstance(value, (bytes, bytearray)):
                text = repr(bytes(value[: limit * 2]))
            elif isinstance(value, (list, tuple, dict, set, frozenset)):
                import reprlib

                short = reprlib.Repr()
                short.maxstring = short.maxother = limit
                text = short.repr(value)
            else:
                text = str(value)
            if not isinstance(text, str):
                raise TypeError("not a str")
        except Exception:  # noqa: BLE001 -- runs on user objects, which may raise anything
            try:
                text = repr(value)  # repr() itself refuses a non-str __repr__ result
            except Exception:  # noqa: BLE001 -- runs on user objects, which may raise anything
                text = "<unprintable " + type(value).__name__ + ">"
        return clip(text)

    def label_text(label):
        if isinstance(label, tuple):
            try:
                return clip(repr(label))
            except Exception:  # noqa: BLE001, S110 -- a label's repr may raise anything: fall back to to_text
                pass
        return to_text(label)

    def first_valid(col):
        # Growing chunks: cheap when the head has a value, still O(n) overall.
        n = len(col)
        start, step = 0, 1024
        while start < n:
            chunk = col.iloc[start : start + step]
            mask = chunk.notna().to_numpy()
            if mask.any():
                return True, chunk.iloc[int(mask.argmax())]
            start += step
            step *= 8
        return False, None

    def more_values(col, example, wanted):
        # Distinct by their text, from a bounded head of the non-null values.
        seen, out = {example}, []
        head = col.iloc[:2000]
        for value in head[head.notna().to_numpy()].iloc[:200]:
            text = to_text(value)
            if text not in seen:
                seen.add(text)
                out.append(text)
                if len(out) >= wanted:
                    break
        return out

    def column_info(name, col, examples=1):
        try:
            dtype = clip(str(col.dtype))
        except Exception:  # noqa: BLE001 -- runs on user objects, which may raise anything
            dtype = "?"
        more = []
        try:
            found, value = first_valid(col)
            example = to_text(value) if found else None
            if found and examples > 1:
                more = more_values(col, example, examples - 1)
        except Exception as exc:  # noqa: BLE001 -- runs on user objects, which may raise anything
            example = "<error: " + type(exc).__name__ + ">"
        info = {"name": name, "dtype": dtype, "example": example}
        if more:
            info["more_examples"] = more
        return info

    def describe(name, obj, inspect_columns, mentioned=False):
        is_frame = issubclass(type(obj), pd.DataFrame)
        entry = {
            "name": name,
            "kind": "DataFrame" if is_frame else "Series",
            "shape": [],
            "columns": [],
            "total_columns": 0,
            "truncated": True,
        }
        if mentioned:
            entry["mentioned"] = True
        cap = int(full_max_columns) if mentioned else int(max_columns)
        examples = max(int(full_examples), 1) if mentioned else 1
        try:
            entry["shape"] = [int(n) for n in obj.shape]
            total = entry["shape"][1] if is_frame else 1
            entry["total_columns"] = total
            if not inspect_columns:
                return entry
            if is_frame:
                labels = obj.columns
                for i in range(min(total, cap)):
                    if out_of_time():
                        break
                    # Positional access: duplicate labels stay distinct.
                    entry["columns"].append(column_info(label_text(labels[i]), obj.iloc[:, i], examples))
            else:
                entry["columns"].append(column_info(label_text(obj.name), obj, examples))
            entry["truncated"] = len(entry["columns"]) < total
        except Exception:  # noqa: BLE001 -- runs on user objects, which may raise anything
            entry["truncated"] = True
        return entry

    wanted = set(full or ())
    found, named = [], []
    for position, (name, obj) in enumerate(list(ns.items())):
        if not isinstance(name, str) or name.startswith("_") or name in ("In", "Out"):
            continue
        # type(), not isinstance(): never triggers a user ``__class__`` property.
        if issubclass(type(obj), frame_types):
            (named if name in wanted else found).append((position, name, obj))
    others = max(int(max_frames or 0) - len(named), 0)
    chosen = found[-others:] if others else []
    results = []
    for position, name, obj in named:  # mentioned ones first get the time
        results.append((position, describe(name, obj, not out_of_time(), True)))
    for position, name, obj in reversed(chosen):  # newest first gets the time
        results.append((position, describe(name, obj, not out_of_time())))
    results.sort(key=lambda item: item[0])
    return [entry for _, entry in results]


def inspect_namespace(
    ns: dict[str, Any],
    max_frames: int = 10,
    max_columns: int = 20,
    max_value_chars: int = 80,
    time_limit: float | None = 2.0,
    *,
    full: Iterable[str] = (),
) -> list[FrameSchema]:
    """Schemas of the frames in ``ns``, in process (the ``%%agent`` magic's path).

    Reads only; ``ns`` is never modified. See the module docstring for the
    selection and truncation rules; ``full`` names the @mentioned frames.
    """
    raw = _jda_collect_schemas(ns, max_frames, max_columns, max_value_chars, time_limit, tuple(full))
    return [FrameSchema.from_dict(d) for d in raw]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _example(col: ColumnInfo, rows: int) -> str:
    if col.example is not None:
        return ", ".join([col.example, *col.more_examples])
    return "empty" if rows == 0 else "all null"


def _summary_line(frame: FrameSchema) -> str:
    """One line for a frame that was not @mentioned while others were."""
    rows = frame.shape[0] if frame.shape else 0
    if frame.kind == "Series":
        dtype = frame.columns[0].dtype if frame.columns else "?"
        return f"# Series {frame.name}: {_plural(rows, 'row')}, dtype {dtype}"
    names = [c.name for c in frame.columns[:SUMMARY_COLUMNS]]
    rest = frame.total_columns - len(names)
    listed = ", ".join(names) + (f", ... ({rest} more)" if rest > 0 else "")
    size = f"# {frame.name}: {_plural(rows, 'row')} x {_plural(frame.total_columns, 'column')}"
    return f"{size}; columns: {listed}" if names else size


def _frame_lines(frame: FrameSchema) -> list[str]:
    rows = frame.shape[0] if frame.shape else 0
    if frame.kind == "Series":
        if not frame.columns:
            return [f"# Series {frame.name} ({_plural(rows, 'row')}; not inspected)"]
        col = frame.columns[0]
        example = col.example if col.example is not None else f"({_example(col, rows)})"
        return [
            f"# Series {frame.name} (name={col.name}, dtype={col.dtype}, "
            f"{_plural(rows, 'row')}) with example value: {example}"
        ]

    size = f"# {frame.name}: {_plural(rows, 'row')} x {_plural(frame.total_columns, 'column')}"
    if not frame.columns:
        if frame.total_columns and frame.truncated:
            return [size + " (columns not inspected)"]
        return [f"# Columns in {frame.name} with example values:", "# (no columns)", size]
    if len(frame.columns) < frame.total_columns:
        header = f"# First {len(frame.columns)} columns in {frame.name} with example values:"
    else:
        header = f"# Columns in {frame.name} with example values:"
    values = ", ".join(
        f"{c.name} ({_example(c, rows)})" for c in frame.columns
    )
    dtypes = ", ".join(f"{c.name}={c.dtype}" for c in frame.columns)
    return [header, f"# {values}", f"{size}; dtypes: {dtypes}"]


def _split(frames: Sequence[FrameSchema]) -> tuple[list[FrameSchema], list[FrameSchema]]:
    return [f for f in frames if f.mentioned], [f for f in frames if not f.mentioned]


def schema_block(frames: list[FrameSchema]) -> str:
    """ARCADE's ``# Schema of Dataframes:`` block ("" when there is nothing to describe).

    @mentioned frames come first, in full; the others then get one summary
    line each (``# Other DataFrames (summary):``).
    """
    if not frames:
        return ""
    lines = ["# Schema of Dataframes:"]
    mentioned, others = _split(frames)
    for frame in mentioned or others:
        lines.extend(_frame_lines(frame))
    if mentioned and others:
        lines.append("# Other DataFrames (summary):")
        lines.extend(_summary_line(f) for f in others)
    return "\n".join(lines)


def schema_cuts(frames: Sequence[FrameSchema]) -> SchemaCuts:
    """What :func:`schema_block` leaves out of each frame, and the frames it gives in full."""
    mentioned, others = _split(frames)
    cuts = []
    for frame in frames:
        summarized = bool(mentioned) and not frame.mentioned
        shown = min(len(frame.columns), SUMMARY_COLUMNS) if summarized else len(frame.columns)
        if frame.kind == "DataFrame" and shown < frame.total_columns:
            cuts.append(FrameCut(frame.name, shown, frame.total_columns, summarized))
    return SchemaCuts(mentioned=[f.name for f in mentioned], frames_cut=cuts)


def inspection_request_code(
    max_frames: int = 10,
    max_columns: int = 20,
    max_value_chars: int = 80,
    time_limit: float | None = 2.0,
    full: Sequence[str] = (),
) -> str:
    """A self-contained Python *expression* that evaluates to the schemas as a JSON string.

    It is an expression (not statements) so it can travel as a
    ``user_expressions`` entry: the kernel evaluates it with the user
    namespace as globals, and only lambda parameters and a throwaway dict
    hold our objects, so no name is ever bound in the user namespace.
    """
    source = inspect.getsource(_jda_collect_schemas)
    args = ", ".join(repr(a) for a in (max_frames, max_columns, max_value_chars, time_limit,
                                       tuple(str(n) for n in full)))
    return (
        "(lambda __jda_scope: (exec({src}, __jda_scope), "
        "__import__('json').dumps(__jda_scope['_jda_collect_schemas'](globals(), {args}), "
        "default=str))[1])({{}})"
    ).format(src=repr(source), args=args)


async def inspect_kernel(kernel_client: Any, timeout: float = 10.0, **options: Any) -> list[FrameSchema]:
    """Schemas of the frames in a running kernel (an ``AsyncKernelClient`` nobody
    else reads from), via one silent request (``rpc.acall``): the execution
    count, ``In``, ``Out`` and ``_`` stay untouched. ``options``: ``read_frames``'."""
    return await read_frames(lambda code, t: rpc.acall(kernel_client, code, timeout=t), timeout, **options)


async def read_frames(
    evaluate: Callable[[str, float], Awaitable[Any]],
    timeout: float = 10.0,
    *,
    max_frames: int = 10,
    max_columns: int = 20,
    max_value_chars: int = 80,
    time_limit: float | None = 2.0,
    full: Sequence[str] = (),
) -> list[FrameSchema]:
    """``inspect_kernel`` through ``evaluate(expression, timeout)`` (``kernel.rpc`` semantics):
    how every ``kernel.handle`` reads the frames, whatever reaches its kernel."""
    expression = inspection_request_code(max_frames, max_columns, max_value_chars, time_limit, full)
    try:
        text = await evaluate(expression, timeout)
    except rpc.KernelExpressionError as exc:
        raise SchemaInspectionError(f"schema inspection failed inside the kernel: {exc}") from exc
    except rpc.KernelTimeout as exc:
        raise KernelDidNotAnswer(f"schema request: {exc}") from exc
    except rpc.KernelRPCError as exc:
        raise SchemaInspectionError(f"schema request: {exc}") from exc
    try:
        return [FrameSchema.from_dict(d) for d in json.loads(text)]
    except Exception as exc:  # malformed reply: say so instead of a KeyError deep down
        raise SchemaInspectionError(f"could not decode the kernel's schema result: {exc}") from exc
