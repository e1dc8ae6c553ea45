"""The MCP tools: read the notebook and its live data, try code in copies, propose, ask.

Nothing here writes a notebook file or runs code in the user's kernel: code
runs in confined copies (``server.tries``), cells reach the notebook only as
proposals the user accepts in the browser (``server.proposals``). Each tool
validates its input against its JSON schema (pydantic, from the signature),
bounds its output (``render``) and answers bad input with an error in words.
Who calls, with which rights, comes from the HTTP request (``bridge.Caller``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import time
import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..kernel.results import ExecResult
from ..search.registry import ALIASES, agent_help, words
from ..server.notebooks import kernel_of, normalize, open_notebooks
from ..server.proposal_handlers import file_proposal
from ..server.proposal_models import MAX_EXPLANATION_CHARS, MAX_PROPOSAL_CODE_CHARS, ProposalRequest
from ..server.tries import TryError
from .caller import Caller, caller_of
from .errors import reasoned
from .render import cut, exec_json, images, plain, tool_result
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
from .tasks import ToolTasks, report_status

log = logging.getLogger(__name__)
T = TypeVar("T")

INSTRUCTIONS = (
    "Tools over the user's open Jupyter notebooks. Read a notebook and its live DataFrames, then try "
    "code with try_code: it runs in a confined copy of the notebook's live kernel (the user's kernel and "
    "files are never changed) and returns a handle; pass it as `from` to continue in a child copy. "
    "Compare candidates with compare_answers. To change the notebook, propose a cell or an edit: the "
    "user accepts or rejects it in the browser; proposal_status tells you which."
)
#: Cells read_notebook returns at most per call, and characters of its answer: by default about
#: 10k tokens (clients cap a tool's answer near 25k), at most about 25k.
MAX_CELLS_PER_READ = 200
READ_CHARS = 40_000
MAX_READ_CHARS = 100_000
#: Characters of one cell's outputs in read_notebook (each output at most 4,000).
CELL_OUTPUT_CHARS = 12_000
#: Capabilities the SDK's MCPServer advertises by registering their handlers, which this server has
#: nothing behind: no resources, no prompts (every read goes through a tool, with its caller's rights).
UNSERVED_METHODS = ("resources/list", "resources/read", "resources/templates/list", "resources/subscribe",
                    "resources/unsubscribe", "prompts/list", "prompts/get")
#: How many (owner, session) pairs already told the confinement layers are remembered (``AgentState``).
MAX_TOLD = 10_000
#: Seconds ask_data_agent waits for the turn.
ASK_TIMEOUT_S = 600.0
if typing.TYPE_CHECKING:
    AgentStrategy = str
else:  # ask_data_agent's choices: the registry's words for MCP (search.registry says why not explain)
    AgentStrategy = Literal[words("mcp")]

Notebook = Annotated[str, Field(description="The notebook's path relative to the server root, as "
                                           "list_notebooks shows it (e.g. 'analysis/flights.ipynb').",
                                min_length=1, max_length=4096)]
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
COPIES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                         open_world_hint=False)


def _from_keyword(fn: Any) -> Any:
    """``fn`` callable with the argument ``from`` (a Python keyword), which the SDK passes by its
    alias: it arrives here as ``from_``. The schema is ``fn``'s."""

    @functools.wraps(fn)
    async def call(**kwargs: Any) -> Any:
        if "from" in kwargs:
            kwargs["from_"] = kwargs.pop("from")
        return await fn(**kwargs)

    call.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return call


def _fail(exc: TryError) -> ToolError:
    return ToolError(str(exc))


def _secrets(args: tuple, kwargs: dict) -> tuple[str, ...]:
    ctx = kwargs.get("ctx")
    return caller_of(ctx).secrets if ctx is not None else ()


def _tool(fn: Any) -> Any:
    """``fn`` with its unexpected failures in words, its answer checked against the model its return
    annotation names (``Annotated[CallToolResult, Model]``: ``errors.reasoned``)."""
    returns = typing.get_type_hints(fn, include_extras=True).get("return")
    model = typing.get_args(returns)[1] if typing.get_origin(returns) is Annotated else None
    return reasoned(fn.__name__, _secrets, model)(fn)


def _unadvertise(server: MCPServer) -> None:
    """Stop advertising resources and prompts: the SDK derives capabilities from registered handlers
    (it has no switch), and an empty list behind an advertised capability (with subscribe and
    listChanged on top) tells a client to look for what is not there."""
    handlers = server._lowlevel_server._request_handlers  # no public way to unregister
    for method in UNSERVED_METHODS:
        handlers.pop(method, None)


def build_server() -> MCPServer:
    """The one MCP server of this Jupyter server, with every tool registered."""
    from .. import __version__

    # subscriptions=False: nothing here changes a list a client could listen for (tools are fixed).
    server = MCPServer("jupyter-data-agent", instructions=INSTRUCTIONS, version=__version__, subscriptions=False,
                       extensions=[ToolTasks()])
    _unadvertise(server)

    @server.tool(annotations=READ_ONLY)
    @_tool
    async def list_notebooks(ctx: Context) -> Annotated[CallToolResult, NotebookList]:
        """The notebooks open in JupyterLab, each with its kernel (id, name, state) or null."""
        caller = caller_of(ctx)
        found = await open_notebooks(caller.session_manager)
        return tool_result({"notebooks": [n.to_json() for n in found[:500]], "total": len(found)})

    @server.tool(annotations=READ_ONLY)
    @_tool
    async def read_notebook(
        ctx: Context, notebook: Notebook,
        start: Annotated[int, Field(ge=0, description="First cell to return (0-based).")] = 0,
        max_cells: Annotated[int, Field(ge=1, le=MAX_CELLS_PER_READ, description="Cells to return.")] = 50,
        max_chars: Annotated[int, Field(ge=2_000, le=MAX_READ_CHARS, description="Characters of this page "
                                        "(about 4 per token); the default, about 10k tokens, fits every "
                                        "client's cap.")] = READ_CHARS,
        arcade: Annotated[bool, Field(description="Return the notebook linearized as the Data Agent's "
                                                  "prompts show it (ARCADE: `# In[ ]:` cells, markdown "
                                                  "as comments, outputs of the last cell) instead of "
                                                  "cells.")] = False,
    ) -> Annotated[CallToolResult, NotebookPage]:
        """The notebook as last saved: cells (id, type, source, outputs, errors), in pages of about 10k
        tokens; `next_start` (and the note) says where the next page starts."""
        caller = caller_of(ctx)
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
            return tool_result({"path": path, "total_cells": len(cells), "chars": len(shown), "note": note,
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
                                    f"characters): call read_notebook again with start={end} for the next page.")
        return tool_result({"path": path, "total_cells": len(cells), "start": start, "cells": window,
                            "next_start": end if more else None, "chars": used, "note": note})

    @server.tool(annotations=READ_ONLY)
    @_tool
    async def list_variables(ctx: Context, notebook: Notebook) -> Annotated[CallToolResult, VariableList]:
        """The notebook's live kernel's variables: DataFrames and Series (shape, first columns), numpy
        arrays (shape, dtype), scalars (their value), containers (length), fitted models (class).

        Read silently (no cell runs, nothing changes); a busy kernel is not waited for."""
        from ..server.variables import kernel_variables_all

        caller = caller_of(ctx)
        caller.require_execute()
        kernel_id = await _kernel(caller, notebook)
        return tool_result(await kernel_variables_all(caller.kernels, kernel_id))

    @server.tool(annotations=READ_ONLY)
    @_tool
    async def describe_dataframe(
        ctx: Context, notebook: Notebook,
        name: Annotated[str, Field(min_length=1, max_length=200, description="The variable's name.")],
    ) -> Annotated[CallToolResult, FrameDescription]:
        """One DataFrame's or Series' live schema: shape, and per column its dtype, example values,
        nulls, distinct values, and min/max/mean/std (numbers) or its top value and count (others).

        Read silently (no cell runs, nothing changes); a busy kernel is not waited for."""
        return tool_result(await _describe(caller_of(ctx), notebook, name))

    @server.tool(annotations=COPIES)
    @_tool
    @_from_keyword
    async def try_code(
        ctx: Context, notebook: Notebook,
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
    ) -> Annotated[CallToolResult, TryOutcome]:
        """Run code in a confined copy of the notebook's live kernel; the user's kernel never changes.

        Returns stdout, stderr, error, the value (as JSON) and its canonical answer form, plots as
        images, the variables the code added, changed or deleted in the copy, the confinement status
        (its layers on a session's first try), and a handle on the copy in its new state (expires
        when unused). While a cell runs in the live kernel, a try without `from` starts at once from
        the state before that cell and `state` says its age (`fresh_state: true` waits instead)."""
        caller = caller_of(ctx)
        caller.require_execute()
        path = normalize(notebook)
        doing = ["starting"]
        try:
            outcome = await with_progress(ctx, caller.tries.try_code(
                caller.owner, path, code, timeout=timeout, parent=from_, session=caller.session,
                abandoned=caller.disconnected, say=lambda what: doing.__setitem__(0, what),
                fresh_state=fresh_state), lambda: doing[0])
        except TryError as exc:
            raise _fail(exc) from None
        caller.proposals.record_try(caller.owner, outcome.notebook_path, caller.agent(ctx))
        confinement: dict[str, Any] = {"status": outcome.confinement.status}
        if _tell_confinement(caller, ctx, explain_confinement):
            confinement.update(message=outcome.confinement.message, layers=outcome.confinement.layers)
        data = {"handle": outcome.handle, "from": outcome.parent, "notebook": outcome.notebook_path,
                **exec_json(outcome.result), "namespace": outcome.namespace.to_json(),
                "confinement": confinement, **({"state": outcome.state.to_json()} if outcome.state else {})}
        return tool_result(data, images(outcome.result))

    @server.tool(annotations=READ_ONLY)
    @_tool
    async def compare_answers(
        ctx: Context,
        handles: Annotated[list[str], Field(min_length=2, max_length=16, description="try_code handles.")],
    ) -> Annotated[CallToolResult, Comparison]:
        """Whether runs gave the same answer: the Data Agent's equivalence classes over their values
        (or printed output), equal up to representation (a Series and a one-column frame, column order,
        float tolerance)."""
        caller = caller_of(ctx)
        try:
            return tool_result(caller.tries.compare(caller.owner, handles))
        except TryError as exc:
            raise _fail(exc) from None

    @server.tool(annotations=COPIES)
    @_tool
    async def propose_cell(
        ctx: Context, notebook: Notebook,
        code: Annotated[str, Field(max_length=MAX_PROPOSAL_CODE_CHARS, description="The new cell's source.")],
        explanation: Annotated[str, Field(max_length=MAX_EXPLANATION_CHARS,
                                          description="What it does and why, for the user.")] = "",
        after_cell: Annotated[str | None, Field(max_length=256, description="Insert below the cell with this "
                                                "id; omit for the end of the notebook.")] = None,
        try_handle: Annotated[str | None, Field(max_length=256, description="Run it from this try_code "
                                                "handle's copy.")] = None,
    ) -> Annotated[CallToolResult, ProposalMade]:
        """Propose a new cell. It runs in a copy first; the user sees it with its output and accepts or
        rejects it in the browser. Nothing changes until then. Returns the proposal id and the run's
        output."""
        return await _propose(ctx, notebook, "cell", code, explanation, after_cell=after_cell,
                              try_handle=try_handle)

    @server.tool(annotations=COPIES)
    @_tool
    async def propose_edit(
        ctx: Context, notebook: Notebook,
        cell_id: Annotated[str, Field(min_length=1, max_length=256, description="The cell to replace.")],
        new_source: Annotated[str, Field(max_length=MAX_PROPOSAL_CODE_CHARS, description="Its new source.")],
        explanation: Annotated[str, Field(max_length=MAX_EXPLANATION_CHARS)] = "",
        try_handle: Annotated[str | None, Field(max_length=256)] = None,
    ) -> Annotated[CallToolResult, ProposalMade]:
        """Propose replacing one cell's source; the user sees the diff and accepts or rejects it."""
        return await _propose(ctx, notebook, "edit", new_source, explanation, cell_id=cell_id,
                              try_handle=try_handle)

    @server.tool(annotations=READ_ONLY)
    @_tool
    async def proposal_status(
        ctx: Context, proposal_id: Annotated[str, Field(min_length=1, max_length=64)],
    ) -> Annotated[CallToolResult, ProposalState]:
        """A proposal's status (pending, accepted, rejected, edited) and its final source."""
        from ..server.proposals import ProposalNotFound

        caller = caller_of(ctx)
        try:
            p = caller.proposals.get(caller.owner, proposal_id)
        except ProposalNotFound:
            raise ToolError(f"No proposal {proposal_id!r} (it may have expired).") from None
        return tool_result({"id": p.id, "status": p.status, "final_source": p.final_source,
                            "decided": p.decided, "notebook": p.notebook_path})

    @server.tool(annotations=COPIES)
    @_tool
    async def ask_data_agent(
        ctx: Context, notebook: Notebook,
        intent: Annotated[str, Field(min_length=1, max_length=20_000, description="The question.")],
        strategy: Annotated[AgentStrategy, Field(description=agent_help("mcp"))] = "vote",
    ) -> Annotated[CallToolResult, TurnAnswer]:
        """A whole Data Agent turn on the notebook (its model, its search over kernel copies): the
        chosen answer, how many candidates agree with it, the chosen candidate and its outputs, and
        the others. Nothing is inserted into the notebook."""
        caller = caller_of(ctx)
        caller.require_execute()
        return tool_result(await _ask(ctx, caller, notebook, intent, strategy))

    return server


# -- helpers ---------------------------------------------------------------------------

#: Seconds between two progress notifications of a call still running.
PROGRESS_S = 2.0


async def with_progress(ctx: Context, work: Awaitable[T], doing: Callable[[], str], every: float = PROGRESS_S) -> T:
    """``work``'s result, with an MCP progress notification now and every ``every`` seconds while it
    runs (what it is doing, the seconds so far), for a client that sent a progress token: a long
    try or turn is never a silent wait, and clients that reset their timeout on progress keep
    waiting. A call the client cancels cancels ``work``."""
    task = asyncio.ensure_future(work)
    started = time.monotonic()
    try:
        while True:
            elapsed = time.monotonic() - started
            report_status(f"{doing()} ({elapsed:.0f} s)")  # a task's status line, when the call is one
            try:
                await ctx.report_progress(round(elapsed, 1), None, f"{doing()} ({elapsed:.0f} s)")
            except Exception:  # a client gone or a notification refused: the work goes on
                log.debug("progress notification not sent", exc_info=True)
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()

async def _propose(ctx: Context, notebook: str, kind: Literal["cell", "edit"], code: str, explanation: str,
                   *, after_cell: str | None = None, cell_id: str | None = None,
                   try_handle: str | None = None) -> CallToolResult:
    caller = caller_of(ctx)
    caller.require_execute()
    target = cell_id if kind == "edit" else after_cell
    if target is not None:  # the ids an agent knows come from read_notebook: the notebook as saved
        ids = [c.get("id") for c in (await _load(caller, notebook)).get("cells") or []]
        if target not in ids:
            shown = ", ".join(str(i) for i in ids[:20]) + (" ..." if len(ids) > 20 else "")
            raise ToolError(f"No cell {target!r} in {notebook} (as last saved); its cells are: {shown or 'none'}.")
    request = ProposalRequest(notebook_path=notebook, kind=kind, code=code, explanation=explanation,
                              agent=caller.agent(ctx), after_cell_id=after_cell, cell_id=cell_id,
                              try_handle=try_handle)
    proposal = await file_proposal(caller.tries, caller.proposals, caller.owner, request)
    result = proposal.result
    ran = ExecResult.from_json(result) if result is not None else None
    return tool_result({"proposal_id": proposal.id, "status": proposal.status, "note": proposal.note,
                        "ran": ran is not None, "result_status": ran.status if ran is not None else None,
                        # what the user will see under it: the run in the copy
                        "output": exec_json(ran) if ran is not None else None}, images(ran))


async def _load(caller: Caller, notebook: str) -> dict:
    path = normalize(notebook)
    if not path.endswith(".ipynb"):
        raise ToolError(f"{notebook!r} is not a notebook (.ipynb).")
    try:
        model = await caller.contents(path)
    except FileNotFoundError:
        raise ToolError(f"No notebook {notebook!r}; list_notebooks shows the open ones.") from None
    return model


async def _kernel(caller: Caller, notebook: str) -> str:
    kernel_id = await kernel_of(caller.session_manager, notebook)
    if kernel_id is None:
        raise ToolError(f"No running kernel for {notebook!r}: open it in JupyterLab and start its kernel "
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


def _tell_confinement(caller: Caller, ctx: Context, asked: bool) -> bool:
    """Whether this try's answer carries the confinement layers: the first of its MCP session (a
    sessionless client: of its user and agent name), or when asked. The same list on every answer
    was half of each one."""
    told = caller.state.mcp_confinement_told
    key = (caller.owner, caller.session or f"agent:{caller.agent(ctx)}")
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
            raise ToolError(f"Could not read the kernel's variables: {handle.reason}.")
        try:
            frames = await handle.frames(3.0, full=(name,), max_frames=1, max_columns=1, time_limit=2.0)
            frame = next((f for f in frames if f.name == name), None)
            stats = await handle.frame_stats(name) if frame is not None else None
        except KernelDidNotAnswer:
            raise ToolError("The kernel is busy running a cell; try again when it is idle.") from None
        except (SchemaInspectionError, SurveyError) as exc:
            raise ToolError(f"Could not read the kernel's variables: {exc}") from None
    if frame is None:
        raise ToolError(f"No DataFrame or Series named {name!r} in the kernel of {notebook!r}; "
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


async def _ask(ctx: Context, caller: Caller, notebook: str, intent: str,
               strategy: AgentStrategy) -> dict[str, Any]:
    """A turn through the turn service (source ``mcp``), read back as its report."""
    from ..server.models import TurnRequestModel

    path = normalize(notebook)
    nb = await _load(caller, path)
    request = TurnRequestModel(version=1, notebook_path=path, cells=nb.get("cells") or [], intent=intent,
                               metadata=nb.get("metadata") or {},
                               strategy=ALIASES[strategy],
                               kernel_id=await kernel_of(caller.session_manager, path))
    turns = caller.state.turns
    try:
        job = turns.start(caller.owner, request, "mcp", agent=caller.agent(ctx))
    except turns.Rejected as exc:
        raise ToolError(exc.message) from None
    doing = ["the turn started"]
    report = await with_progress(ctx, turns.wait(
        job, timeout=ASK_TIMEOUT_S, doing=lambda line: doing.__setitem__(0, line[:200]),
        timeout_message="The turn took too long for ask_data_agent."), lambda: doing[0])
    if report.status != "done":
        raise ToolError(f"The turn did not complete: {report.message or job.status}.")

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
