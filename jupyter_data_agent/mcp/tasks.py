"""The MCP Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663) for the long tools.

A client that declares the extension on a ``tools/call`` of ``try_code`` or
``ask_data_agent`` gets a task handle at once (``resultType: "task"``) and polls
``tasks/get`` for the status (what the work is doing, as its progress says) and,
at the end, the tool's own result: no request stays open for minutes, so no
client or proxy timeout ends a long try or turn. ``tasks/cancel`` ends the work
as a client that hangs up would: its copy is closed. A client that does not
declare the extension gets the plain result, as before (the spec forbids a task
handle to it).

Tasks live in memory, per user (a task id names nothing for another user), at
most ``MAX_TASKS_PER_USER`` at a time; past that a call simply runs inline.
``tasks/update`` has nothing to deliver: these tools never ask for input.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import BaseModel

from .caller import Caller, caller_in

log = logging.getLogger(__name__)

EXTENSION_ID = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
#: The tools whose calls may become tasks: the ones that can take minutes.
TASK_TOOLS = frozenset({"try_code", "ask_data_agent"})
#: How long a task (and its result) is kept after it was made.
TTL_S = 3600.0
POLL_INTERVAL_MS = 1000
MAX_TASKS_PER_USER = 64
TERMINAL = frozenset({"completed", "failed", "cancelled"})

#: The running task's status line: ``tools.with_progress`` writes what it reports as progress here.
_status: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "jupyter_data_agent_task_status", default=None)


def report_status(message: str) -> None:
    """Say what the current task does now (a no-op outside a task)."""
    sink = _status.get()
    if sink is not None:
        sink(message)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Task:
    id: str
    owner: str
    tool: str
    caller: Caller
    status: str = "working"
    message: str = "started"
    created: str = field(default_factory=_now)
    updated: str = field(default_factory=_now)
    made: float = field(default_factory=time.monotonic)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    work: asyncio.Task | None = None

    def set(self, status: str | None = None, message: str | None = None) -> None:
        if self.status in TERMINAL:
            return
        self.status = status or self.status
        self.message = message if message is not None else self.message
        self.updated = _now()

    def wire(self, *, detailed: bool) -> dict[str, Any]:
        data: dict[str, Any] = {"taskId": self.id, "status": self.status, "statusMessage": self.message,
                                "createdAt": self.created, "lastUpdatedAt": self.updated,
                                "ttlMs": int(TTL_S * 1000), "pollIntervalMs": POLL_INTERVAL_MS}
        if detailed and self.status == "completed":
            data["result"] = self.result
        if detailed and self.status == "failed":
            data["error"] = self.error
        return data


class TaskIdParams(RequestParams):
    task_id: str  # taskId on the wire (MCPModel's camelCase aliases)


class ToolTasks(Extension):
    """``try_code`` and ``ask_data_agent`` as tasks, for clients that declare the extension."""

    identifier = EXTENSION_ID

    def __init__(self) -> None:
        self._tasks: dict[str, _Task] = {}

    # -- the extension's contributions ----------------------------------------------------
    def methods(self) -> Sequence[MethodBinding]:
        return (MethodBinding("tasks/get", TaskIdParams, self._get),
                MethodBinding("tasks/cancel", TaskIdParams, self._cancel),
                MethodBinding("tasks/update", TaskIdParams, self._update))

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        caller = caller_in(ctx.request)
        if params.name not in TASK_TOOLS or caller is None or not _declared(ctx):
            return await call_next(ctx)
        self._expire()
        if sum(t.owner == caller.owner and t.status not in TERMINAL for t in self._tasks.values()) \
                >= MAX_TASKS_PER_USER:
            return await call_next(ctx)  # the server decides per call: this one answers inline
        task = _Task(id="task-" + uuid.uuid4().hex, owner=caller.owner, tool=params.name, caller=caller)
        self._tasks[task.id] = task
        context = contextvars.copy_context()
        context.run(_status.set, lambda message: task.set(message=message))
        task.work = asyncio.get_running_loop().create_task(self._run(task, call_next, ctx), context=context)
        return {"resultType": "task", **task.wire(detailed=False)}

    # -- the work ----------------------------------------------------------------------------
    async def _run(self, task: _Task, call_next: CallNext, ctx: ServerRequestContext[Any, Any]) -> None:
        try:
            result = await call_next(ctx)
        except asyncio.CancelledError:
            task.set("cancelled", "cancelled by the client; its copy was closed")
            raise
        except MCPError as exc:
            task.error = exc.error.model_dump(mode="json", by_alias=True, exclude_none=True)
            task.set("failed", exc.error.message)
        except Exception as exc:  # the tool's own failures are results (isError); this is a server bug
            log.exception("MCP task %s (%s) failed", task.id, task.tool)
            task.error = {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: the tool failed unexpectedly"}
            task.set("failed", task.error["message"])
        else:
            task.result = _dump(result)
            is_error = bool(task.result.get("isError"))
            task.set("completed", "finished with an error" if is_error else "done")

    # -- the methods ------------------------------------------------------------------------
    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        return self._own(ctx, params.task_id).wire(detailed=True)

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task = self._own(ctx, params.task_id)
        if task.status in TERMINAL:
            raise MCPError(INVALID_PARAMS, f"Task {task.id} already ended ({task.status}); nothing to cancel.")
        task.caller.disconnected.set()  # the try closes its copy, as for a client that hung up
        if task.work is not None:
            task.work.cancel()
            await asyncio.gather(task.work, return_exceptions=True)
        task.set("cancelled", "cancelled by the client; its copy was closed")
        return task.wire(detailed=True)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task = self._own(ctx, params.task_id)
        raise MCPError(INVALID_PARAMS, f"Task {task.id} ({task.tool}) never asks for input; nothing to update.")

    def _own(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> _Task:
        self._expire()
        caller = caller_in(ctx.request)
        task = self._tasks.get(task_id)
        if caller is None or task is None or task.owner != caller.owner:
            raise MCPError(INVALID_PARAMS, f"No task {task_id!r}: it ended more than {TTL_S / 60:.0f} min ago, "
                                           "or was never made by you.")
        return task

    def _expire(self) -> None:
        cutoff = time.monotonic() - TTL_S
        for task in [t for t in self._tasks.values() if t.made < cutoff]:
            if task.work is not None and not task.work.done():
                task.caller.disconnected.set()
                task.work.cancel()
            del self._tasks[task.id]


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's own capabilities list the extension (the spec: per request)."""
    meta = ctx.meta.model_dump(by_alias=True) if isinstance(ctx.meta, BaseModel) else (ctx.meta or {})
    capabilities = meta.get(CLIENT_CAPABILITIES_KEY) or {}
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION_ID in extensions


def _dump(result: HandlerResult) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dict(result or {})
