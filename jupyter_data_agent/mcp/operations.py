"""The MCP tools' work, once, free of any MCP SDK: read the notebook and its live data, try code
in copies, propose, ask.

Nothing here writes a notebook file or runs code in the user's kernel: code
runs in confined copies (``server.tries``), cells reach the notebook only as
proposals the user accepts in the browser (``server.proposals``). Each
operation's signature (pydantic ``Field``s) is its tool's input schema, its
docstring the tool's description, its output model (``schemas``) what the
answer is checked against; failures meant for the agent are ``ToolFailure``s
in words. Two hosts expose them: our route (mcp SDK 2, ``tools``) and
jupyter-server-mcp's (fastmcp, ``host``); each turns a call into a ``Call``
(who, under which agent name, where progress goes) and an ``Answer`` into
its SDK's result.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field

from ..kernel.results import ExecResult
from ..search.registry import ALIASES, agent_help, words
from ..server.notebooks import kernel_of, normalize, open_notebooks
from ..server.proposal_handlers import file_proposal
from ..server.proposal_models import MAX_EXPLANATION_CHARS, MAX_PROPOSAL_CODE_CHARS, ProposalRequest
from ..server.tries import TryError
from .caller import Caller
from .errors import ToolFailure
from .render import cut, exec_json, plain
from .schemas import (
    Comparison,
    FrameDescription,
    NotebookList,
    NotebookPage,
    ProposalMade,
    ProposalState,
    TryOutcome,
    TurnAnswer,
    VariableList,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Cells read_notebook returns at most per call, and characters of its answer: by default about
#: 10k tokens (clients cap a tool's answer near 25k), at most about 25k.
MAX_CELLS_PER_READ = 200
READ_CHARS = 40_000
MAX_READ_CHARS = 100_000
#: Characters of one cell's outputs in read_notebook (each output at most 4,000).
CELL_OUTPUT_CHARS = 12_000
#: How many (owner, session) pairs already told the confinement layers are remembered (``AgentState``).
MAX_TOLD = 10_000
#: Seconds ask_data_agent waits for the turn.
ASK_TIMEOUT_S = 600.0
#: Seconds between two progress reports of a call still running.
PROGRESS_S = 2.0
if typing.TYPE_CHECKING:
    AgentStrategy = str
else:  # ask_data_agent's choices: the registry's words for MCP (search.registry says why not explain)
    AgentStrategy = Literal[words("mcp")]

Notebook = Annotated[str, Field(description="The notebook's path relative to the server root, as "
                                           "list_notebooks shows it (e.g. 'analysis/flights.ipynb').",
                                min_length=1, max_length=4096)]
#: Where a long call says what it is doing: (seconds so far, a line in words).
Report = Callable[[float, str], Awaitable[None]]


@dataclass
class Call:
    """One tool call: who calls (``caller``), the agent's name the sidebar shows, where progress goes."""

    caller: Caller
    agent: str
    report: Report | None = None


@dataclass
class Answer:
    """A tool's answer: its JSON (checked against the tool's output model), and the run whose plots
    go with it as images."""

    data: dict[str, Any]
    ran: ExecResult | None = None


@dataclass(frozen=True)
class Operation:
    """One tool: its work (``fn(call, **arguments)``), its output model, whether it only reads."""

    fn: Callable[..., Awaitable[Answer]]
    output: type[BaseModel]
    read_only: bool

    @property
    def name(self) -> str:
        return self.fn.__name__


#: Every tool, in the order hosts list them.
OPERATIONS: list[Operation] = []


def operation(output: type[BaseModel], *, read_only: bool) -> Callable[[Callable[..., Awaitable[Answer]]],
                                                                      Callable[..., Awaitable[Answer]]]:
    def register(fn: Callable[..., Awaitable[Answer]]) -> Callable[..., Awaitable[Answer]]:
        OPERATIONS.append(Operation(fn, output, read_only))
        return fn

    return register


@operation(NotebookList, read_only=True)
async def list_notebooks(call: Call) -> Answer:
    """The notebooks open in JupyterLab, each with its kernel (id, name, state) or null."""
    found = await open_notebooks(call.caller.session_manager)
    return Answer({"notebooks": [n.to_json() for n in found[:500]], "total": len(found)})


@operation(NotebookPage, read_only=True)
async def read_notebook(
    call: Call, notebook: Notebook,
    start: Annotated[int, Field(ge=0, description="First cell to return (0-based).")] = 0,
    max_cells: Annotated[int, Field(ge=1, le=MAX_CELLS_PER_READ, description="Cells to return.")] = 50,
    max_chars: Annotated[int, Field(ge=2_000, le=MAX_READ_CHARS, description="Characters of this page "
                                    "(about 4 per token); the default, about 10k tokens, fits every "
                                    "client's cap.")] = READ_CHARS,
    arcade: Annotated[bool, Field(description="Return the notebook linearized as the Data Agent's "
                                              "prompts show it (ARCADE: `# In[ ]:` cells, markdown "
                                              "as comments, outputs of the last cell) instead of "
                                              "cells.")] = False,
) -> Answer:
    """The notebook as last saved: cells (id, type, source, outputs, errors), in pages of about 10k
    tokens; `next_start` (and the note) says where the next page starts."""
    caller = call.caller
    caller.require_read()
    nb = await _load(caller, notebook)
    cells = nb.get("cells") or []
    path = normalize(notebook)
    if arcade:
        from ..context.notebook import from_notebook
        from ..prompts.arcade import join_cells, linearize

        context = from_notebook(nb, path=path)
        text = join_cells(linearize(context, outputs="active"))
        shown = cut(text, max_chars, tail=True)
        note = "" if len(text) <= max_chars else (
            f"The linearized notebook is {len(text):,} characters: its last {max_chars:,} are shown. "
            "Read the cells in pages with arcade=false and start=.")
        return Answer({"path": path, "total_cells": len(cells), "chars": len(shown), "note": note,
                       "arcade": shown})
    window: list[dict[str, Any]] = []
    used = 0
    for index in range(start, min(len(cells), start + max_cells)):
        item = _cell_json(index, cells[index])
        size = len(json.dumps(item, ensure_ascii=False, default=str))
        if window and used + size > max_chars:
            break
        window.append(item)
        used += size
    end = start + len(window)
    more = end < len(cells)
    note = "" if not more else (f"Cells {start}-{end - 1} of {len(cells)} (a page is at most {max_chars:,} "
                                f"characters): call this tool again with start={end} for the next page.")
    return Answer({"path": path, "total_cells": len(cells), "start": start, "cells": window,
                   "next_start": end if more else None, "chars": used, "note": note})


@operation(VariableList, read_only=True)
async def list_variables(call: Call, notebook: Notebook) -> Answer:
    """The notebook's live kernel's variables: DataFrames and Series (shape, first columns), numpy
    arrays (shape, dtype), scalars (their value), containers (length), fitted models (class).

    Read silently (no cell runs, nothing changes); a busy kernel is not waited for."""
    from ..server.variables import kernel_variables_all

    caller = call.caller
    caller.require_execute()
    kernel_id = await _kernel(caller, notebook)
    return Answer(await kernel_variables_all(caller.kernels, kernel_id))


@operation(FrameDescription, read_only=True)
async def describe_dataframe(
    call: Call, notebook: Notebook,
    name: Annotated[str, Field(min_length=1, max_length=200, description="The variable's name.")],
) -> Answer:
    """One DataFrame's or Series' live schema: shape, and per column its dtype, example values,
    nulls, distinct values, and min/max/mean/std (numbers) or its top value and count (others).

    Read silently (no cell runs, nothing changes); a busy kernel is not waited for."""
    return Answer(await _describe(call.caller, notebook, name))


@operation(TryOutcome, read_only=False)
async def try_code(
    call: Call, notebook: Notebook,
    code: Annotated[str, Field(description="Python to run like a notebook cell (its last expression "
                                           "is the value).", max_length=MAX_PROPOSAL_CODE_CHARS)],
    timeout: Annotated[float, Field(gt=0, le=300, description="Wall-clock seconds; the copy is killed "
                                                              "past it.")] = 30.0,
    from_: Annotated[str | None, Field(alias="from", description="A handle from an earlier try_code: "
                                       "run in a child copy of that copy (its state, not the live "
                                       "kernel's). Omit to start from the live kernel.")] = None,
    explain_confinement: Annotated[bool, Field(description="Also return the confinement layers (what "
                                                           "a copy cannot do); they come with a "
                                                           "session's first try only.")] = False,
    fresh_state: Annotated[bool, Field(description="While a cell runs in the live kernel, wait for it "
                                                   "to end (with progress) instead of starting at once "
                                                   "from the state before it. Ignored with `from`.")
                           ] = False,
) -> Answer:
    """Run code in a confined copy of the notebook's live kernel; the user's kernel never changes.

    Returns stdout, stderr, error, the value (as JSON) and its canonical answer form, plots as
    images, the variables the code added, changed or deleted in the copy, the confinement status
    (its layers on a session's first try), and a handle on the copy in its new state (expires
    when unused). While a cell runs in the live kernel, a try without `from` starts at once from
    the state before that cell and `state` says its age (`fresh_state: true` waits instead)."""
    caller = call.caller
    caller.require_execute()
    path = normalize(notebook)
    doing = ["starting"]
    try:
        outcome = await with_progress(call.report, caller.tries.try_code(
            caller.owner, path, code, timeout=timeout, parent=from_, session=caller.session,
            abandoned=caller.disconnected, say=lambda what: doing.__setitem__(0, what),
            fresh_state=fresh_state), lambda: doing[0])
    except TryError as exc:
        raise ToolFailure(str(exc)) from None
    caller.proposals.record_try(caller.owner, outcome.notebook_path, call.agent)
    confinement: dict[str, Any] = {"status": outcome.confinement.status}
    if _tell_confinement(call, explain_confinement):
        confinement.update(message=outcome.confinement.message, layers=outcome.confinement.layers)
    data = {"handle": outcome.handle, "from": outcome.parent, "notebook": outcome.notebook_path,
            **exec_json(outcome.result), "namespace": outcome.namespace.to_json(),
            "confinement": confinement, **({"state": outcome.state.to_json()} if outcome.state else {})}
    return Answer(data, outcome.result)


@operation(Comparison, read_only=True)
async def compare_answers(
    call: Call,
    handles: Annotated[list[str], Field(min_length=2, max_length=16, description="try_code handles.")],
) -> Answer:
    """Whether runs gave the same answer: the Data Agent's equivalence classes over their values
    (or printed output), equal up to representation (a Series and a one-column frame, column order,
    float tolerance)."""
    caller = call.caller
    try:
        return Answer(caller.tries.compare(caller.owner, handles))
    except TryError as exc:
        raise ToolFailure(str(exc)) from None


@operation(ProposalMade, read_only=False)
async def propose_cell(
    call: Call, notebook: Notebook,
    code: Annotated[str, Field(max_length=MAX_PROPOSAL_CODE_CHARS, description="The new cell's source.")],
    explanation: Annotated[str, Field(max_length=MAX_EXPLANATION_CHARS,
                                      description="What it does and why, for the user.")] = "",
    after_cell: Annotated[str | None, Field(max_length=256, description="Insert below the cell with this "
                                            "id; omit for the end of the notebook.")] = None,
    try_handle: Annotated[str | None, Field(max_length=256, description="Run it from this try_code "
                                            "handle's copy.")] = None,
) -> Answer:
    """Propose a new cell. It runs in a copy first; the user sees it with its output and accepts or
    rejects it in the browser. Nothing changes until then. Returns the proposal id and the run's
    output."""
    return await _propose(call, notebook, "cell", code, explanation, after_cell=after_cell,
                          try_handle=try_handle)


@operation(ProposalMade, read_only=False)
async def propose_edit(
    call: Call, notebook: Notebook,
    cell_id: Annotated[str, Field(min_length=1, max_length=256, description="The cell to replace.")],
    new_source: Annotated[str, Field(max_length=MAX_PROPOSAL_CODE_CHARS, description="Its new source.")],
    explanation: Annotated[str, Field(max_length=MAX_EXPLANATION_CHARS)] = "",
    try_handle: Annotated[str | None, Field(max_length=256)] = None,
) -> Answer:
    """Propose replacing one cell's source; the user sees the diff and accepts or rejects it."""
    return await _propose(call, notebook, "edit", new_source, explanation, cell_id=cell_id,
                          try_handle=try_handle)


@operation(ProposalState, read_only=True)
async def proposal_status(call: Call, proposal_id: Annotated[str, Field(min_length=1, max_length=64)]) -> Answer:
    """A proposal's status (pending, accepted, rejected, edited) and its final source."""
    from ..server.proposals import ProposalNotFound

    caller = call.caller
    try:
        p = caller.proposals.get(caller.owner, proposal_id)
    except ProposalNotFound:
        raise ToolFailure(f"No proposal {proposal_id!r} (it may have expired).") from None
    return Answer({"id": p.id, "status": p.status, "final_source": p.final_source,
                   "decided": p.decided, "notebook": p.notebook_path})


@operation(TurnAnswer, read_only=False)
async def ask_data_agent(
    call: Call, notebook: Notebook,
    intent: Annotated[str, Field(min_length=1, max_length=20_000, description="The question.")],
    strategy: Annotated[AgentStrategy, Field(description=agent_help("mcp"))] = "vote",
) -> Answer:
    """A whole Data Agent turn on the notebook (its model, its search over kernel copies): the
    chosen answer, how many candidates agree with it, the chosen candidate and its outputs, and
    the others. Nothing is inserted into the notebook."""
    call.caller.require_execute()
    return Answer(await _ask(call, notebook, intent, strategy))


# -- helpers ---------------------------------------------------------------------------


async def with_progress(report: Report | None, work: Awaitable[T], doing: Callable[[], str],
                        every: float = PROGRESS_S) -> T:
    """``work``'s result, reported now and every ``every`` seconds while it runs (what it is doing,
    the seconds so far): a long try or turn is never a silent wait, and clients that reset their
    timeout on progress keep waiting. A call the client cancels cancels ``work``."""
    task = asyncio.ensure_future(work)
    started = time.monotonic()
    try:
        while True:
            elapsed = time.monotonic() - started
            if report is not None:
                try:
                    await report(elapsed, f"{doing()} ({elapsed:.0f} s)")
                except Exception:  # a client gone or a notification refused: the work goes on
                    log.debug("progress not reported", exc_info=True)
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()


async def _propose(call: Call, notebook: str, kind: Literal["cell", "edit"], code: str, explanation: str,
                   *, after_cell: str | None = None, cell_id: str | None = None,
                   try_handle: str | None = None) -> Answer:
    caller = call.caller
    caller.require_execute()
    target = cell_id if kind == "edit" else after_cell
    if target is not None:  # the ids an agent knows come from read_notebook: the notebook as saved
        ids = [c.get("id") for c in (await _load(caller, notebook)).get("cells") or []]
        if target not in ids:
            shown = ", ".join(str(i) for i in ids[:20]) + (" ..." if len(ids) > 20 else "")
            raise ToolFailure(f"No cell {target!r} in {notebook} (as last saved); its cells are: "
                              f"{shown or 'none'}.")
    request = ProposalRequest(notebook_path=notebook, kind=kind, code=code, explanation=explanation,
                              agent=call.agent, after_cell_id=after_cell, cell_id=cell_id,
                              try_handle=try_handle)
    proposal = await file_proposal(caller.tries, caller.proposals, caller.owner, request)
    result = proposal.result
    ran = ExecResult.from_json(result) if result is not None else None
    return Answer({"proposal_id": proposal.id, "status": proposal.status, "note": proposal.note,
                   "ran": ran is not None, "result_status": ran.status if ran is not None else None,
                   # what the user will see under it: the run in the copy
                   "output": exec_json(ran) if ran is not None else None}, ran)


async def _load(caller: Caller, notebook: str) -> dict:
    path = normalize(notebook)
    if not path.endswith(".ipynb"):
        raise ToolFailure(f"{notebook!r} is not a notebook (.ipynb).")
    try:
        model = await caller.contents(path)
    except FileNotFoundError:
        raise ToolFailure(f"No notebook {notebook!r}; list_notebooks shows the open ones.") from None
    return model


async def _kernel(caller: Caller, notebook: str) -> str:
    kernel_id = await kernel_of(caller.session_manager, notebook)
    if kernel_id is None:
        raise ToolFailure(f"No running kernel for {notebook!r}: open it in JupyterLab and start its kernel "
                          "(list_notebooks shows the open ones).")
    return kernel_id


def _cell_json(index: int, cell: dict) -> dict[str, Any]:
    from ..context.notebook import reduce_outputs

    source = cell.get("source") or ""
    source = "".join(source) if isinstance(source, list) else str(source)
    item: dict[str, Any] = {"index": index, "id": cell.get("id"), "type": cell.get("cell_type"),
                            "source": cut(source, 10_000)}
    if cell.get("cell_type") == "code":
        item["execution_count"] = cell.get("execution_count")
        outputs: list[dict[str, Any]] = []
        used = 0
        for o in reduce_outputs(cell.get("outputs") or [])[:20]:
            text = cut(o.text, 4_000) if o.text else o.text
            used += len(text or "") + len(str(o.traceback or ""))
            if outputs and used > CELL_OUTPUT_CHARS:
                outputs.append({"type": "note", "text": "[further outputs cut: the cell's outputs are bounded]"})
                break
            outputs.append({"type": o.output_type, "text": text, "ename": o.ename, "evalue": o.evalue,
                            "traceback": cut(str(o.traceback), 4_000, tail=True) if o.traceback else None})
        item["outputs"] = outputs
    return item


def _tell_confinement(call: Call, asked: bool) -> bool:
    """Whether this try's answer carries the confinement layers: the first of its MCP session (a
    sessionless client: of its user and agent name), or when asked. The same list on every answer
    was half of each one."""
    caller = call.caller
    told = caller.state.mcp_confinement_told
    key = (caller.owner, caller.session or f"agent:{call.agent}")
    first = key not in told
    told[key] = True
    told.move_to_end(key)
    while len(told) > MAX_TOLD:
        told.popitem(last=False)
    return first or asked


async def _describe(caller: Caller, notebook: str, name: str) -> dict[str, Any]:
    """The frame's schema (``frames``, in full) with each column's statistics (``frame_stats``),
    both read silently through one kernel handle."""
    from ..kernel.host.handle import NoKernel
    from ..kernel.inkernel.schema import KernelDidNotAnswer, SchemaInspectionError
    from ..kernel.inkernel.survey import SurveyError

    caller.require_execute()
    kernel_id = await _kernel(caller, notebook)
    async with caller.kernels.reading(kernel_id) as handle:
        if isinstance(handle, NoKernel):
            raise ToolFailure(f"Could not read the kernel's variables: {handle.reason}.")
        try:
            frames = await handle.frames(3.0, full=(name,), max_frames=1, max_columns=1, time_limit=2.0)
            frame = next((f for f in frames if f.name == name), None)
            stats = await handle.frame_stats(name) if frame is not None else None
        except KernelDidNotAnswer:
            raise ToolFailure("The kernel is busy running a cell; try again when it is idle.") from None
        except (SchemaInspectionError, SurveyError) as exc:
            raise ToolFailure(f"Could not read the kernel's variables: {exc}") from None
    if frame is None:
        raise ToolFailure(f"No DataFrame or Series named {name!r} in the kernel of {notebook!r}; "
                          "list_variables shows the ones there are.")
    data = frame.to_dict()
    data.pop("mentioned", None)
    notes = []
    if stats is None:
        notes.append("Column statistics could not be read.")
    else:
        for column, numbers in zip(data["columns"], stats["columns"]):
            column.update(numbers)
        data["sampled_rows"] = stats["sampled_rows"]
        if stats["sampled_rows"]:
            notes.append(f"nunique and top are counted on the first {stats['sampled_rows']:,} rows; nulls "
                         "and min/max/mean/std on all.")
        if len(stats["columns"]) < len(data["columns"]):
            notes.append(f"Statistics for the first {len(stats['columns'])} columns (the time limit ran out).")
    if data["truncated"]:
        notes.append(f"{len(data['columns'])} of {data['total_columns']} columns described.")
    data["note"] = " ".join(notes)
    return data


async def _ask(call: Call, notebook: str, intent: str, strategy: AgentStrategy) -> dict[str, Any]:
    """A turn through the turn service (source ``mcp``), read back as its report."""
    from ..server.models import TurnRequestModel

    caller = call.caller
    path = normalize(notebook)
    nb = await _load(caller, path)
    request = TurnRequestModel(version=1, notebook_path=path, cells=nb.get("cells") or [], intent=intent,
                               metadata=nb.get("metadata") or {},
                               strategy=ALIASES[strategy],
                               kernel_id=await kernel_of(caller.session_manager, path))
    turns = caller.state.turns
    try:
        job = turns.start(caller.owner, request, "mcp", agent=call.agent)
    except turns.Rejected as exc:
        raise ToolFailure(exc.message) from None
    doing = ["the turn started"]
    report = await with_progress(call.report, turns.wait(
        job, timeout=ASK_TIMEOUT_S, doing=lambda line: doing.__setitem__(0, line[:200]),
        timeout_message="The turn took too long for ask_data_agent."), lambda: doing[0])
    if report.status != "done":
        raise ToolFailure(f"The turn did not complete: {report.message or job.status}.")

    def ran(run: dict) -> dict:
        outs = "".join(str(o.get("text") or (o.get("data") or {}).get("text/plain") or "")
                       for o in run.get("outputs") or [])
        return {"status": run.get("status"), "output": cut(outs, 4_000),
                "error": run.get("evalue") if run.get("status") not in (None, "ok") else None}

    def brief(index: int, cand: dict) -> dict:
        run = cand.get("result") or {}
        value = run.get("value") if isinstance(run.get("value"), dict) else None
        item = {"index": index, "code": cut(cand.get("code") or "", 10_000),
                "explanation": cand.get("explanation", ""), "support": report.support_of(index), **ran(run),
                "value": plain(value.get("value"), 4_000)[0] if value is not None else None}
        if cand.get("analysis"):
            item["steps"] = [{"number": s["number"], "title": s["title"], "explanation": s["explanation"],
                              "code": cut(s["code"], 10_000), "edits_cell": s["cell_id"],
                              **ran(s.get("result") or {})} for s in cand["analysis"]]
        return item

    shown = [brief(i, c) for i, c in sorted(report.candidates.items())]
    picked = next((c for c in shown if c["index"] == report.chosen), None)
    agreement = None
    if report.classes and picked is not None and picked["status"] == "ok":
        agreement = {"agree": picked["support"] or 0, "of": sum(report.classes), "classes": report.classes}
    answer = report.answer_text
    return {"turn_id": report.turn_id, "strategy": report.strategy,
            "answer": cut(answer, 4_000) if answer is not None else None, "agreement": agreement,
            "chosen": picked, "candidates": shown, "vote_classes": report.classes,
            "note": "Nothing was inserted: propose_cell puts the chosen code before the user."}
