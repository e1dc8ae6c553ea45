"""Everything a turn reads from its kernel, gathered once: ``aprepare(spec, notebook, handle)``.

The magic, the server and the benchmarks each hold a ``kernel.handle`` on
their kernel; ``aprepare`` asks it for the DataFrame schemas and the active
cell's plots, then for copies (fork, else the replay fallback, else none,
under the confinement policy), and says each step in events the sidebar and
the magic show. What it returns is immutable: the context it was given is
never changed (plots are described in a new one).

The server awaits ``aprepare`` on its loop; ``prepare`` is the same for
synchronous callers (the standalone magic, benchmarks), through
``kernel.handle.wait``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from ..context.model import NotebookContext
from ..context.report import SchemaCuts
from ..kernel.host.handle import InspectAsk, Inspection, KernelHandle, NoKernel, wait
from ..kernel.inkernel.schema import mentions, schema_block, schema_cuts
from ..kernel.plots import PLOT_MARKER
from ..search import Cancelled
from ..search.base import Event, EventSink, ignore_events
from ..words import counted
from .copies import Copies, open_copies, replay_cells
from .spec import TurnSpec

TEXT_ONLY = "the turn uses the notebook text alone (no DataFrame schemas, no output previews)"


@dataclass(frozen=True)
class TurnInputs:
    """What ``run_turn`` needs besides the model: the same for every entry point."""

    context: NotebookContext
    schema: str
    schema_cuts: SchemaCuts
    copies: Copies
    inspection: Inspection
    transport: str  # what the copies travel over ("local", "kernel channel", "in process", "none")


def prepare(spec: TurnSpec, notebook: NotebookContext, handle: KernelHandle, *,
            events: EventSink = ignore_events, cancel: threading.Event | None = None,
            give_up: threading.Event | None = None, max_live: int | None = None,
            redact=None) -> TurnInputs:
    """``aprepare``, blocking (``kernel.handle.wait``): the standalone magic, benchmarks."""
    return wait(aprepare(spec, notebook, handle, events=events, cancel=cancel, give_up=give_up,
                         max_live=max_live, redact=redact))


async def aprepare(spec: TurnSpec, notebook: NotebookContext, handle: KernelHandle, *,
                   events: EventSink = ignore_events, cancel: threading.Event | None = None,
                   give_up: threading.Event | None = None, max_live: int | None = None,
                   redact=None) -> TurnInputs:
    """Read ``handle``'s kernel and open its copies for ``spec``.

    ``give_up`` (set by the user): stop waiting for a busy kernel and answer
    from the notebook text. ``cancel``: the turn was cancelled (raises
    ``Cancelled`` before anything is forked). ``max_live``: the entry
    point's cap on live copies. ``redact``: the scrubber every result goes
    through.
    """
    cancel = cancel or threading.Event()

    def say(kind: str, message: str, **data) -> None:
        events(Event(kind, message, data))  # type: ignore[arg-type]

    inspection = await _inspect(spec, notebook, handle, say, cancel, give_up)
    if cancel.is_set():
        raise Cancelled("the turn was cancelled")
    frames = list(inspection.frames)
    context = _with_plots(notebook, inspection.plots)
    if inspection.plots:
        say("log", f"Described {counted(len(inspection.plots), 'plot')} of the active cell from the kernel.")

    live = min(spec.copies.max_live, max_live) if max_live else spec.copies.max_live
    can_fork = inspection.answered and not handle.why_no_copies()
    unavailable = handle.why_no_copies() or _unanswered(inspection)
    copies = await open_copies(
        spec.copies, fork=(lambda limits: handle.fork(limits, live)) if can_fork else None,
        replay=replay_cells(notebook) if inspection.answered and handle.replay_allowed else None,
        notebook_dir=handle.notebook_dir, unavailable=unavailable, redact=redact, off_loop=handle.off_loop)
    transport = _transport(copies, handle)
    copies.confinement.transport = transport
    _say_copies(spec, copies, transport, say)
    return TurnInputs(context=context, schema=schema_block(frames) if frames else "",
                      schema_cuts=schema_cuts(frames), copies=copies, inspection=inspection,
                      transport=transport)


async def _inspect(spec: TurnSpec, notebook: NotebookContext, handle: KernelHandle, say,
                   cancel: threading.Event, give_up: threading.Event | None) -> Inspection:
    active = notebook.active_cell()
    plotted = [o for o in active.cell.outputs if o.text == PLOT_MARKER] if active is not None else []
    ask = InspectAsk(full=tuple(mentions(spec.intent)), plot_source=active.source if active and plotted else "",
                     plot_count=len(plotted))
    def stop() -> bool:
        return cancel.is_set() or (give_up is not None and give_up.is_set())

    inspection = await handle.inspect(ask, give_up=stop, waiting=lambda: say(
        "progress", "Waiting for the kernel: it is busy running a cell.", state="waiting_for_kernel"))
    if cancel.is_set():
        return inspection
    status = inspection.status
    if status == "no_kernel":
        said = handle if isinstance(handle, NoKernel) else NoKernel(handle.why_no_copies())
        say(said.kind, said.message or f"{_capital(said.reason)}: {TEXT_ONLY}.", state=said.state)
    elif status == "skipped":
        say("progress", "Answering from the notebook text now, without the busy kernel "
                        "(no DataFrame schemas, no output previews).", state="no_kernel")
    elif status == "stopped":
        say("progress", "The kernel stopped while the turn waited for it: the turn uses "
                        "the notebook text alone (no output previews).", state="no_kernel")
    elif status == "no_answer":
        say("log", f"The kernel did not answer ({inspection.detail}); the turn uses the notebook "
                   "text alone.", state="kernel_timeout")
    elif status == "schema_failed":
        say("log", f"Could not read DataFrame schemas from the kernel: {inspection.detail}",
            state="schema_failed")
    else:
        if inspection.waited:
            say("progress", "The kernel is ready.", state="kernel_ready")
        say("progress", f"Read {counted(len(inspection.frames), 'DataFrame schema')} from the kernel.",
            state="schema_ready", frames=[f.name for f in inspection.frames])
    return inspection


def _unanswered(inspection: Inspection) -> str:
    return {"skipped": "you chose to answer from the notebook text",
            "stopped": "the kernel stopped while the turn waited for it",
            "no_answer": "the kernel did not answer"}.get(inspection.status, "")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:] if text else "There is no kernel"


def _with_plots(notebook: NotebookContext, texts: tuple[str, ...]) -> NotebookContext:
    """``notebook`` with the active cell's plot markers replaced by ``texts`` (a new context)."""
    active = notebook.active_cell()
    if not texts or active is None:
        return notebook
    outputs, it = [], iter(texts)
    for output in active.cell.outputs:
        text = next(it, None) if output.text == PLOT_MARKER else None
        outputs.append(replace(output, text=text) if text is not None else output)
    cells = list(notebook.cells)
    cells[active.index] = replace(active.cell, outputs=outputs)
    return replace(notebook, cells=cells)


def _transport(copies: Copies, handle: KernelHandle) -> str:
    tree = copies.tree
    if tree is None:
        return "none"
    if tree.kind == "replay":
        return "replay"
    return handle.transport


def _say_copies(spec: TurnSpec, copies: Copies, transport: str, say) -> None:
    tree = copies.tree
    if tree is not None:
        if tree.kind == "replay":
            say("log", f"The kernel could not be forked ({copies.fallback}): candidates run in a "
                       "separate kernel on the Jupyter server's machine that re-ran the notebook's cells.",
                state="replay_fallback")
        where = {"kernel channel": " (over the kernel channel)", "local": "",
                 "in process": ""}.get(transport, "")
        say("progress", f"A copy of the kernel is ready{where}.", state="kernel_copy_ready",
            protections=tree.protections, transport=transport)
    elif copies.fallback and spec.copies.mode != "none":
        say("log", f"Candidates will not be run before you see them: {copies.fallback}.",
            state="no_kernel_copy")
    say("progress", copies.confinement.message, state="confinement", confinement=copies.confinement)
