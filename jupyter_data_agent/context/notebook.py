"""Build a :class:`NotebookContext` from a notebook file or a kernel's history.

Two entry points see the notebook differently: the server gets nbformat JSON
from the front end, the ``%%agent`` magic only has the kernel's ``In``/``Out``.
Both are reduced here to the same typed model so prompts and search never
care where the context came from. Outputs are reduced to short text because a
prompt has no use for megabytes of HTML or base64 images, and budgets are in
characters because this runs before any tokenizer is known.
"""

from __future__ import annotations

import ast
import re
import reprlib
from collections.abc import Mapping, Sequence
from traceback import format_exception
from typing import Any

from ..kernel.plots import PLOT_MARKER, PLOT_PREFIX
from ..kernel.results import strip_ansi, truncate_text
from .model import Cell, NotebookContext, Output, Turn
from .turns import cell_turn_info, read_turns

# Per-output and per-cell character budgets (defaults); see ``reduce_outputs``.
OUTPUT_CHARS = 1000
CELL_OUTPUT_CHARS = 2000
# Out[n] values from kernel history are shown shorter: they are whole objects.
HISTORY_OUTPUT_CHARS = 500
# Image outputs kept for vision models (SVG is text a model reads poorly).
IMAGE_MIMES = ("image/png", "image/jpeg")
# Lines of a reduced traceback that are kept (its last ones).
TRACEBACK_LINES = 8

AGENT_MAGIC = "agent"
# Cell magics whose body is ordinary Python run in the user namespace: keep the
# body. Any other cell magic (%%bash, %%html, %%writefile...) is not Python
# that the model could build on, so it is dropped from history.
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_AGENT_CELL_RE = re.compile(r"\A\s*%%agent\b[^\n]*\n?")
# Traceback lines that say nothing the error line does not: rulers, headers,
# IPython's numbered context lines around the failing one, 3.11+ carets.
_TRACEBACK_NOISE_RE = re.compile(
    r"^\s*$|^-+$|^\S*\s*Traceback \(most recent call last\):?$|^\s+\d+\s|^\s*[~^]+\s*$"
)


def _collapse_cr(text: str) -> str:
    """Keep what a terminal would show for progress bars that redraw with ``\\r``."""
    text = text.replace("\r\n", "\n")
    if "\r" not in text:
        return text
    lines = []
    for line in text.split("\n"):
        parts = [p for p in line.split("\r") if p]
        lines.append(parts[-1] if parts else "")
    return "\n".join(lines)


def _join(value: Any) -> str:
    """nbformat JSON stores multiline strings as lists of lines."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "".join(str(v) for v in value)
    return str(value)


# --------------------------------------------------------------------------
# outputs


def _mime_text(data: Mapping[str, Any]) -> str:
    if any(k.startswith("image/") for k in data):
        # A kernel copy writes a figure's summary as its text (kernel/plots.py); a notebook's
        # figure has only "<Figure size ...>", an Image object its repr: say a plot is there.
        plain = _join(data.get("text/plain"))
        return plain if plain.startswith(PLOT_PREFIX) else PLOT_MARKER
    if "text/plain" in data:
        return _join(data["text/plain"])
    if "text/html" in data:
        return "<html table>" if "<table" in _join(data["text/html"]).lower() else "<html>"
    if "text/markdown" in data:
        return _join(data["text/markdown"])
    return next((f"<{key}>" for key in data), "")


def image_of(data: Mapping[str, Any]) -> tuple[str, str] | None:
    """(mime, base64) of the PNG or JPEG in a mime bundle, if it has one: a vision model's input."""
    for mime in IMAGE_MIMES:
        value = _join(data.get(mime)).strip()
        if value:
            return mime, "".join(value.split())
    return None


def reduce_output(out: Mapping[str, Any]) -> Output | None:
    """One nbformat output as text, or None for outputs with nothing to say."""
    kind = out.get("output_type", "")
    if kind == "stream":
        return Output("stream", _collapse_cr(strip_ansi(_join(out.get("text")))))
    if kind in ("execute_result", "display_data"):
        data = out.get("data") or {}
        # For results, text/plain is the object's repr, which is what we want; for images,
        # the plot's summary or a marker (see _mime_text).
        text = _mime_text(data)
        return Output(kind, strip_ansi(text), image=image_of(data)) if text else None
    if kind == "error":
        ename = strip_ansi(str(out.get("ename", "")))
        evalue = strip_ansi(str(out.get("evalue", "")))
        text = f"{ename}: {evalue}" if evalue else ename
        tb = reduce_traceback(out.get("traceback") or [], text)
        return Output("error", text, ename=ename, evalue=evalue, traceback=tb)
    return None


def reduce_traceback(traceback: Sequence[str], error_line: str = "") -> str:
    """The last ``TRACEBACK_LINES`` informative lines of a traceback: without ANSI
    codes, rulers, IPython's context lines and the final ``error_line``
    (shown on its own); frame headers and the failing lines remain."""
    kept = [
        line.rstrip()
        for line in strip_ansi("\n".join(str(t) for t in traceback)).splitlines()
        if not _TRACEBACK_NOISE_RE.match(line)
    ]
    if kept and error_line and kept[-1].strip() == error_line.strip():
        kept.pop()
    return "\n".join(kept[-TRACEBACK_LINES:])


def reduce_outputs(
    outputs: Sequence[Mapping[str, Any]],
    output_chars: int = OUTPUT_CHARS,
    cell_output_chars: int = CELL_OUTPUT_CHARS,
) -> list[Output]:
    """Reduce and budget a cell's outputs: each output to ``output_chars`` and
    the cell in total to ``cell_output_chars`` (later outputs are cut first,
    as a loop printing a line per item should not crowd out everything else).
    Errors are outside the cell budget: what went wrong is what a Fix needs,
    and a cell that printed a lot before raising must still show it."""
    result: list[Output] = []
    left = cell_output_chars
    skipped = 0
    last_shown: Output | None = None
    for o in (reduce_output(x) for x in outputs):
        if o is None:
            continue
        if o.output_type == "error":
            o.text, cut = truncate_text(o.text, output_chars)
            o.traceback, cut_tb = truncate_text(o.traceback, output_chars, tail=True)
            o.truncated = cut or cut_tb
            result.append(o)
            continue
        if left <= 0:
            skipped += 1
            continue
        o.text, o.truncated = truncate_text(o.text, min(output_chars, left))
        left -= len(o.text)
        result.append(o)
        last_shown = o
    if skipped and last_shown is not None:
        last_shown.text += f"\n...[{skipped} more output{'s' if skipped > 1 else ''} truncated]"
        last_shown.truncated = True
    return result


# --------------------------------------------------------------------------
# from nbformat


def _as_notebook(nb: Any) -> Mapping[str, Any]:
    if isinstance(nb, (str, bytes)):
        import nbformat

        return nbformat.reads(nb, as_version=4)
    return nb


def agent_intent(source: str) -> str | None:
    """The intent of a ``%%agent`` cell, or None if the cell is something else."""
    m = _AGENT_CELL_RE.match(source)
    return source[m.end() :].strip() if m else None


def from_notebook(
    nb: Any,
    *,
    active_index: int | None = None,
    path: str | None = None,
    output_chars: int = OUTPUT_CHARS,
    cell_output_chars: int = CELL_OUTPUT_CHARS,
) -> NotebookContext:
    """Context from an nbformat v4 notebook (NotebookNode, JSON dict or string).

    ``active_index`` indexes ``nb.cells``: later cells are left out, and so is
    the active cell itself when it is the ``%%agent`` cell being answered.
    ``%%agent`` cells become turns (their intent) and are not kept as code;
    the next code cell becomes that turn's solution unless it is already
    tagged. Turns come from notebook metadata, then from cell metadata.
    """
    nb = _as_notebook(nb)
    raw_cells = list(nb.get("cells") or [])
    if active_index is not None:
        raw_cells = raw_cells[: active_index + 1]
        if raw_cells and agent_intent(_join(raw_cells[-1].get("source"))) is not None:
            raw_cells.pop()

    turns: list[Turn] = read_turns(nb)
    by_id = {t.turn_id: t for t in turns if t.turn_id}
    cells: list[Cell] = []
    waiting: Turn | None = None  # a %%agent turn whose solution is the next code cell

    def known(turn_id: str, **fields: Any) -> Turn:
        """The turn ``turn_id``; made of ``fields`` where the notebook's metadata lacks it."""
        if turn_id not in by_id:
            by_id[turn_id] = Turn(turn_id=turn_id, **fields)
            turns.append(by_id[turn_id])
        return by_id[turn_id]

    for raw in raw_cells:
        cell_type = raw.get("cell_type", "code")
        source = _join(raw.get("source"))
        cid = raw.get("id")
        if cell_type == "code":
            intent = agent_intent(source)
            if intent is not None:
                info = cell_turn_info(raw)
                waiting = known(info["turn_id"] if info else f"agent-{cid or len(cells)}", intent=intent)
                continue
        if cell_type not in ("code", "markdown", "raw"):
            continue
        cell = Cell(
            cell_type=cell_type,
            source=source,
            execution_count=raw.get("execution_count") if cell_type == "code" else None,
            outputs=reduce_outputs(raw.get("outputs") or [], output_chars, cell_output_chars)
            if cell_type == "code"
            else [],
            cell_id=str(cid) if cid else None,
        )
        info = cell_turn_info(raw)
        if info and _unapplied_edit(by_id.get(info["turn_id"]), cell.cell_id):
            # The user's own code under an edit turn not accepted (yet): the
            # turn's answer is only shown over it as a diff, so it is no solution.
            info = None
        if info:
            # A turn the notebook's metadata lost (cell copied from another
            # notebook) is rebuilt from the cell's own pointer.
            cell.turn_id = info["turn_id"]
            turn = known(cell.turn_id, intent=info["intent"], code=source, status=info["status"])
            if cell.cell_id and cell.cell_id not in turn.cell_ids:
                turn.cell_ids.append(cell.cell_id)
            if waiting is turn:
                waiting = None
        elif cell_type == "code" and waiting is not None and source.strip():
            _attach(waiting, cell)
            waiting = None
        cells.append(cell)

    active = len(cells) - 1 if active_index is not None and cells else None
    for i, cell in enumerate(cells):
        if i != active:  # only the active cell's plots go to a model: the others' would only hold memory
            for o in cell.outputs:
                o.image = None
    return NotebookContext(cells=cells, turns=turns, path=path, active_index=active)


def _unapplied_edit(turn: Turn | None, cell_id: str | None) -> bool:
    """Is this cell the target of an edit turn ("fix this cell") that has not replaced it?"""
    return (turn is not None and cell_id is not None and turn.status in ("pending", "rejected")
            and turn.extra.get("edits_cell") == cell_id)


def _attach(turn: Turn, cell: Cell) -> None:
    cell.turn_id = turn.turn_id
    if cell.cell_id and cell.cell_id not in turn.cell_ids:
        turn.cell_ids.append(cell.cell_id)
    if not turn.code:
        turn.code = cell.source
    if turn.status == "pending":
        # The user ran/kept the cell that followed the request.
        turn.status = "accepted"


# --------------------------------------------------------------------------
# from kernel history


def _is_ipython_call(node: ast.AST) -> ast.Call | None:
    """``get_ipython().<method>(...)`` as IPython's input transformers write magics."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "get_ipython"):
        return node
    return None


def _cell_magic(tree: ast.Module) -> tuple[str, str, str] | None:
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = _is_ipython_call(tree.body[0].value)
    if call is None or call.func.attr != "run_cell_magic" or len(call.args) != 3:
        return None
    try:
        name, line, body = (ast.literal_eval(a) for a in call.args)
    except ValueError:
        return None
    return (name, line, body) if all(isinstance(x, str) for x in (name, line, body)) else None


def _strip_magic_statements(source: str, tree: ast.Module) -> str:
    """Drop top-level statements that are only a line magic, shell escape or
    help request (``%load_ext``, ``!pip``, ``df?``): noise for the model."""
    lines = source.splitlines()
    drop: set[int] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and _is_ipython_call(stmt.value) is not None:
            drop.update(range(stmt.lineno - 1, (stmt.end_lineno or stmt.lineno)))
    if not drop:
        return source
    return "\n".join(line for i, line in enumerate(lines) if i not in drop)


def _classify(source: str) -> tuple[str, str]:
    """("agent", intent) | ("code", python source) | ("skip", "")."""
    if not source.strip():
        return "skip", ""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        # Failed cells are still part of what the user did; keep them as typed.
        return "code", source
    magic = _cell_magic(tree)
    if magic is not None:
        name, _line, body = magic
        if name == AGENT_MAGIC:
            return "agent", body.strip()
        if name in _PYTHON_CELL_MAGICS and body.strip():
            return "code", body.strip("\n")
        return "skip", ""
    code = _strip_magic_statements(source, tree).strip("\n")
    return ("code", code) if code.strip() else ("skip", "")


_history_repr = reprlib.Repr()
_history_repr.maxlevel = 3
_history_repr.maxlist = _history_repr.maxtuple = _history_repr.maxset = 20
_history_repr.maxdict = 20
_history_repr.maxstring = _history_repr.maxlong = HISTORY_OUTPUT_CHARS
_CONTAINERS = (list, tuple, dict, set, frozenset, str, bytes, int)


def _safe_repr(value: object) -> str:
    try:
        return _history_repr.repr(value) if isinstance(value, _CONTAINERS) else repr(value)
    except Exception as exc:  # noqa: BLE001 -- a user object's __repr__ may raise anything
        return f"<{type(value).__name__} (repr failed: {type(exc).__name__})>"


def short_repr(value: object, limit: int = HISTORY_OUTPUT_CHARS) -> str:
    """A bounded repr: builtin containers via reprlib (a list of ten million
    ints must not be formatted in full), other objects through their own
    repr, which for pandas is already bounded by display options."""
    return truncate_text(_safe_repr(value), limit)[0]


def from_history(
    In: Sequence[str],
    Out: Mapping[int, object],
    current_index: int | None = None,
    *,
    output_chars: int = HISTORY_OUTPUT_CHARS,
    errors: Mapping[int, BaseException] | None = None,
) -> NotebookContext:
    """Context from a kernel's ``In``/``Out`` as the ``%%agent`` magic sees it.

    IPython stores a ``%%agent`` cell in ``In`` as
    ``get_ipython().run_cell_magic('agent', '<args>', '<intent>')``: such an
    entry becomes a prior turn, and the next code entry its (accepted)
    solution. Entries that are only magics/shell/help are skipped; bodies of
    ``%%time``-like cell magics are kept as code.

    ``current_index`` is the ``In`` index of the running cell: it and every
    later entry are left out. Inside a magic pass ``-1`` (or ``len(In) - 1``):
    IPython stores the running cell in ``In`` before executing it, while
    ``shell.execution_count`` is already incremented at that point in
    IPython 9 but not in IPython 8, so it is not a reliable index.

    ``errors`` maps ``In`` indexes to the exception the entry raised (IPython
    keeps none in its history; a ``post_run_cell`` hook can collect them from
    ``result.error_in_exec``): they become error outputs, so "fix it" in a
    magic reaches the last cell that raised.
    """
    if current_index is None:
        end = len(In)
    else:
        end = current_index + len(In) if current_index < 0 else min(current_index, len(In))
    cells: list[Cell] = []
    turns: list[Turn] = []
    waiting: Turn | None = None
    for n in range(1, end):
        kind, text = _classify(In[n] or "")
        if kind == "skip":
            continue
        if kind == "agent":
            waiting = Turn(intent=text, turn_id=f"in-{n}", status="pending")
            turns.append(waiting)
            continue
        outputs: list[Output] = []
        if n in Out:
            shown, cut = truncate_text(_safe_repr(Out[n]), output_chars)
            outputs.append(Output("execute_result", shown, truncated=cut))
        if errors and n in errors:
            exc = errors[n]
            outputs.extend(reduce_outputs([{
                "output_type": "error",
                "ename": type(exc).__name__,
                "evalue": str(exc),
                "traceback": format_exception(type(exc), exc, exc.__traceback__),
            }], output_chars))
        cell = Cell("code", text, execution_count=n, outputs=outputs, cell_id=f"In[{n}]")
        if waiting is not None:
            _attach(waiting, cell)
            waiting = None
        cells.append(cell)
    return NotebookContext(cells=cells, turns=turns)


__all__ = [
    "agent_intent",
    "from_history",
    "from_notebook",
    "image_of",
    "reduce_output",
    "reduce_outputs",
    "reduce_traceback",
    "short_repr",
]
