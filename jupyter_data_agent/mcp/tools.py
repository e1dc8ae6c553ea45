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
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..kernel.results import ExecResult
from ..server.models import MAX_EXPLANATION_CHARS, MAX_PROPOSAL_CODE_CHARS, ProposalRequest
from ..server.notebooks import kernel_of, normalize, open_notebooks
from ..server.proposal_handlers import file_proposal
from ..server.tries import TryError
from .caller import Caller, caller_of
from .render import cut, exec_json, images, tool_result

log = logging.getLogger(__name__)
T = TypeVar("T")

INSTRUCTIONS = (
    "Tools over the user's open Jupyter notebooks. Read a notebook and its live DataFrames, then try "
    "code with try_code: it runs in a confined copy of the notebook's live kernel (the user's kernel and "
    "files are never changed) and returns a handle; pass it as `from` to continue in a child copy. "
    "Compare candidates with compare_answers. To change the notebook, propose a cell or an edit: the "
    "user accepts or rejects it in the browser; proposal_status tells you which."
)
#: Cells read_notebook returns at most per call, and characters of its answer.
MAX_CELLS_PER_READ = 200
READ_CHARS = 100_000
#: Seconds ask_data_agent waits for the turn.
ASK_TIMEOUT_S = 600.0

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


def build_server() -> MCPServer:
    """The one MCP server of this Jupyter server, with every tool registered."""
    from .. import __version__

    server = MCPServer("jupyter-data-agent", instructions=INSTRUCTIONS, version=__version__)

    @server.tool(annotations=READ_ONLY)
    async def list_notebooks(ctx: Context) -> CallToolResult:
        """The notebooks open in JupyterLab, each with its kernel (id, name, state) or null."""
        caller = caller_of(ctx)
        found = await open_notebooks(caller.session_manager)
        return tool_result({"notebooks": [n.to_json() for n in found[:500]], "total": len(found)})

    @server.tool(annotations=READ_ONLY)
    async def read_notebook(
        ctx: Context, notebook: Notebook,
        start: Annotated[int, Field(ge=0, description="First cell to return (0-based).")] = 0,
        max_cells: Annotated[int, Field(ge=1, le=MAX_CELLS_PER_READ, description="Cells to return.")] = 50,
        arcade: Annotated[bool, Field(description="Return the notebook linearized as the Data Agent's "
                                                  "prompts show it (ARCADE: `# In[ ]:` cells, markdown "
                                                  "as comments, outputs of the last cell) instead of "
                                                  "cells.")] = False,
    ) -> CallToolResult:
        """The notebook as last saved: cells (id, type, source, outputs, errors), bounded; page with `start`."""
        caller = caller_of(ctx)
        caller.require_read()
        nb = await _load(caller, notebook)
        cells = nb.get("cells") or []
        if arcade:
            from ..context.notebook import from_notebook
            from ..prompts.arcade import join_cells, linearize

            context = from_notebook(nb, path=normalize(notebook))
            text = join_cells(linearize(context, outputs="active"))
            return tool_result({"path": normalize(notebook), "cells": len(cells),
                                "arcade": cut(text, READ_CHARS, tail=True)})
        window: list[dict[str, Any]] = []
        used = 0
        for index in range(start, min(len(cells), start + max_cells)):
            item = _cell_json(index, cells[index])
            size = len(str(item))
            if window and used + size > READ_CHARS:
                break
            window.append(item)
            used += size
        end = start + len(window)
        note = "" if end >= len(cells) else (f"Cells {start}-{end - 1} of {len(cells)} shown (the answer is "
                                             f"bounded); call again with start={end} for more.")
        return tool_result({"path": normalize(notebook), "total_cells": len(cells), "start": start,
                            "cells": window, "note": note})

    @server.tool(annotations=READ_ONLY)
    async def list_variables(ctx: Context, notebook: Notebook) -> CallToolResult:
        """The DataFrames and Series in the notebook's live kernel (name, shape, first columns).

        Read silently (no cell runs, nothing changes); a busy kernel is not waited for."""
        from ..server.variables import kernel_variables

        caller = caller_of(ctx)
        caller.require_execute()
        kernel_id = await _kernel(caller, notebook)
        reply = await kernel_variables(caller.kernel_manager.get_kernel(kernel_id), kernel_id)
        return tool_result(reply.model_dump())

    @server.tool(annotations=READ_ONLY)
    async def describe_dataframe(
        ctx: Context, notebook: Notebook,
        name: Annotated[str, Field(min_length=1, max_length=200, description="The variable's name.")],
    ) -> CallToolResult:
        """One DataFrame's or Series' live schema: shape, every column's dtype and example values.

        Read silently (no cell runs, nothing changes); a busy kernel is not waited for."""
        from ..kernel.client import open_client
        from ..kernel.schema import KernelDidNotAnswer, SchemaInspectionError, inspect_kernel

        caller = caller_of(ctx)
        caller.require_execute()
        kernel_id = await _kernel(caller, notebook)
        kc = await open_client(caller.kernel_manager.get_kernel(kernel_id))
        try:
            frames = await inspect_kernel(kc, timeout=3.0, full=(name,), max_frames=1, max_columns=1,
                                          time_limit=2.0)
        except KernelDidNotAnswer:
            raise ToolError("The kernel is busy running a cell; try again when it is idle.") from None
        except SchemaInspectionError as exc:
            raise ToolError(f"Could not read the kernel's variables: {exc}") from None
        finally:
            kc.stop_channels()
        frame = next((f for f in frames if f.name == name), None)
        if frame is None:
            raise ToolError(f"No DataFrame or Series named {name!r} in the kernel of {notebook!r}; "
                            "list_variables shows the ones there are.")
        return tool_result(frame.to_dict())

    @server.tool(annotations=COPIES)
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
    ) -> CallToolResult:
        """Run code in a confined copy of the notebook's live kernel; the user's kernel never changes.

        Returns stdout, stderr, error, the value's preview and canonical answer form, plots as images,
        the variables the code added, changed or deleted in the copy, the confinement layers, and a
        handle on the copy in its new state (expires when unused)."""
        caller = caller_of(ctx)
        caller.require_execute()
        path = normalize(notebook)
        doing = ["starting"]
        try:
            outcome = await with_progress(ctx, caller.tries.try_code(
                caller.owner, path, code, timeout=timeout, parent=from_, session=caller.session,
                abandoned=caller.disconnected, say=lambda what: doing.__setitem__(0, what)), lambda: doing[0])
        except TryError as exc:
            raise _fail(exc) from None
        caller.proposals.record_try(caller.owner, outcome.notebook_path, caller.agent(ctx))
        data = {"handle": outcome.handle, "from": outcome.parent, "notebook": outcome.notebook_path,
                **exec_json(outcome.result), "namespace": outcome.namespace.to_json(),
                "confinement": {"status": outcome.confinement.status, "message": outcome.confinement.message,
                                "layers": outcome.confinement.layers}}
        return tool_result(data, images(outcome.result))

    @server.tool(annotations=READ_ONLY)
    async def compare_answers(
        ctx: Context,
        handles: Annotated[list[str], Field(min_length=2, max_length=16, description="try_code handles.")],
    ) -> CallToolResult:
        """Whether runs gave the same answer: the Data Agent's equivalence classes over their values
        (or printed output), equal up to representation (a Series and a one-column frame, column order,
        float tolerance)."""
        caller = caller_of(ctx)
        try:
            return tool_result(caller.tries.compare(caller.owner, handles))
        except TryError as exc:
            raise _fail(exc) from None

    @server.tool(annotations=COPIES)
    async def propose_cell(
        ctx: Context, notebook: Notebook,
        code: Annotated[str, Field(max_length=MAX_PROPOSAL_CODE_CHARS, description="The new cell's source.")],
        explanation: Annotated[str, Field(max_length=MAX_EXPLANATION_CHARS,
                                          description="What it does and why, for the user.")] = "",
        after_cell: Annotated[str | None, Field(max_length=256, description="Insert below the cell with this "
                                                "id; omit for the end of the notebook.")] = None,
        try_handle: Annotated[str | None, Field(max_length=256, description="Run it from this try_code "
                                                "handle's copy.")] = None,
    ) -> CallToolResult:
        """Propose a new cell. It runs in a copy first; the user sees it with its output and accepts or
        rejects it in the browser. Nothing changes until then. Returns the proposal id at once."""
        return await _propose(ctx, notebook, "cell", code, explanation, after_cell=after_cell,
                              try_handle=try_handle)

    @server.tool(annotations=COPIES)
    async def propose_edit(
        ctx: Context, notebook: Notebook,
        cell_id: Annotated[str, Field(min_length=1, max_length=256, description="The cell to replace.")],
        new_source: Annotated[str, Field(max_length=MAX_PROPOSAL_CODE_CHARS, description="Its new source.")],
        explanation: Annotated[str, Field(max_length=MAX_EXPLANATION_CHARS)] = "",
        try_handle: Annotated[str | None, Field(max_length=256)] = None,
    ) -> CallToolResult:
        """Propose replacing one cell's source; the user sees the diff and accepts or rejects it."""
        return await _propose(ctx, notebook, "edit", new_source, explanation, cell_id=cell_id,
                              try_handle=try_handle)

    @server.tool(annotations=READ_ONLY)
    async def proposal_status(
        ctx: Context, proposal_id: Annotated[str, Field(min_length=1, max_length=64)],
    ) -> CallToolResult:
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
    async def ask_data_agent(
        ctx: Context, notebook: Notebook,
        intent: Annotated[str, Field(min_length=1, max_length=20_000, description="The question.")],
        strategy: Annotated[Literal["direct", "vote", "search", "react", "analysis"], Field(
            description="direct: one answer; vote: several, the majority answer; search: a value-guided "
                        "tree search over kernel copies; react: an agent loop; analysis: a plan of "
                        "steps, each a cell verified in a copy chained on the previous step's "
                        "(the reply lists the steps with their outputs).")] = "vote",
    ) -> CallToolResult:
        """A whole Data Agent turn on the notebook (its model, its search over kernel copies): the
        chosen candidate, its outputs and the vote classes. Nothing is inserted into the notebook."""
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
            try:
                await ctx.report_progress(round(elapsed, 1), None, f"{doing()} ({elapsed:.0f} s)")
            except Exception:  # noqa: BLE001 -- a client gone or a notification refused: the work goes on
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
        outputs = reduce_outputs(cell.get("outputs") or [])
        item["outputs"] = [{"type": o.output_type, "text": cut(o.text, 4_000), "ename": o.ename,
                            "evalue": o.evalue, "traceback": o.traceback or None} for o in outputs[:20]]
    return item


async def _ask(ctx: Context, caller: Caller, notebook: str, intent: str,
               strategy: Literal["direct", "vote", "search", "react", "analysis"]) -> dict[str, Any]:
    from ..context.notebook import from_notebook
    from ..server.models import TurnRequestModel

    path = normalize(notebook)
    nb = await _load(caller, path)
    kernel_id = await kernel_of(caller.session_manager, path)
    request = TurnRequestModel(version=1, notebook_path=path, cells=nb.get("cells") or [], intent=intent,
                               strategy="mcts" if strategy == "search" else strategy, kernel_id=kernel_id)
    jobs = caller.state["jobs"]
    try:
        job = jobs.start(caller.owner, request, from_notebook(nb, path=path))
    except jobs.Rejected as exc:
        raise ToolError(exc.message) from None
    done = asyncio.Event()
    doing = ["the turn started"]

    def listen(event: dict) -> None:
        if event["type"] in ("done", "error"):
            done.set()
        elif event["type"] in ("progress", "candidate") and event.get("message"):
            doing[0] = str(event["message"])[:200]

    if not job.finished:
        job.subscribe(listen)
    try:
        if not job.finished:
            await asyncio.wait_for(with_progress(ctx, done.wait(), lambda: doing[0]), ASK_TIMEOUT_S)
    except asyncio.TimeoutError:
        await jobs.cancel(job, "The turn took too long for ask_data_agent.")
    finally:
        job.unsubscribe(listen)
    candidates = [e["data"] for e in job.events if e["type"] == "candidate"]
    last = job.events[-1] if job.events else {}
    if last.get("type") != "done":
        raise ToolError(f"The turn did not complete: {last.get('message') or job.status}.")
    result = last["data"]["result"]
    chosen = result.get("chosen")

    def ran(run: dict) -> dict:
        outs = "".join(str(o.get("text") or (o.get("data") or {}).get("text/plain") or "")
                       for o in run.get("outputs") or [])
        return {"status": run.get("status"), "output": cut(outs, 4_000),
                "error": run.get("evalue") if run.get("status") not in (None, "ok") else None}

    def brief(c: dict) -> dict:
        cand = c["candidate"]
        item = {"index": c["index"], "code": cut(cand.get("code") or "", 10_000),
                "explanation": cand.get("explanation", ""), "support": cand.get("support"),
                **ran(cand.get("result") or {})}
        if cand.get("analysis"):
            item["steps"] = [{"number": s["number"], "title": s["title"], "explanation": s["explanation"],
                              "code": cut(s["code"], 10_000), "edits_cell": s["cell_id"],
                              **ran(s.get("result") or {})} for s in cand["analysis"]]
        return item

    shown = [brief(c) for c in candidates]
    return {"turn_id": last["data"].get("turn_id"), "strategy": result.get("strategy"),
            "answer": result.get("answer"), "chosen": next((c for c in shown if c["index"] == chosen), None),
            "candidates": shown, "vote_classes": (result.get("stats") or {}).get("classes", []),
            "note": "Nothing was inserted: propose_cell puts the chosen code before the user."}
