"""The MCP Tasks extension (SEP-2663) on the long tools, through the MCP SDK's own client.

The client side is the SDK's extension mechanism (``ClientExtension`` with a
``ResultClaim`` on ``resultType: "task"``): it declares
``io.modelcontextprotocol/tasks`` on its requests, and resolves a task handle by
polling ``tasks/get`` until the task ends, as a tasks-aware agent would. A
client without the extension gets plain results (the spec forbids it a handle).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Literal

import pytest
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import Field

from tests import test_mcp
from tests.test_mcp import NOTEBOOK, client, data, live_value, open_notebook
from tests.test_server import on_server_loop

jp_server_config, server = test_mcp.jp_server_config, test_mcp.server  # the MCP tests' fixtures

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim  # noqa: E402

EXTENSION = "io.modelcontextprotocol/tasks"


class TaskParams(RequestParams):
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTask(Request[TaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class TaskState(Result):
    """``tasks/get``'s answer (and the handle's seed state)."""

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class CreateTaskResult(TaskState):
    result_type: Literal["task"] = Field(default="task", alias="resultType")


class Tasks(ClientExtension):
    """A tasks-aware client: every handle is polled to its end; what it saw is kept for the test."""

    identifier = EXTENSION

    def __init__(self, *, cancel_after_s: float | None = None) -> None:
        self.handles: list[CreateTaskResult] = []
        self.polls: list[TaskState] = []
        self.cancel_after_s = cancel_after_s
        self.cancelled: TaskState | None = None

    def claims(self):
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve),)

    async def _resolve(self, handle: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        self.handles.append(handle)
        t0 = time.monotonic()
        while True:
            await asyncio.sleep((handle.poll_interval_ms or 1000) / 1000)
            due = self.cancel_after_s is not None and time.monotonic() - t0 > self.cancel_after_s
            if due and self.cancelled is None:
                self.cancelled = await ctx.session.send_request(
                    CancelTask(params=TaskParams(task_id=handle.task_id)), TaskState)
            state = await ctx.session.send_request(GetTask(params=TaskParams(task_id=handle.task_id)), TaskState)
            self.polls.append(state)
            if state.status == "completed":
                return CallToolResult.model_validate(state.result)
            if state.status in ("failed", "cancelled"):
                return CallToolResult(content=[], is_error=True,
                                      structured_content={"task": state.status, "error": state.error})


@pytest.mark.timeout(180)
@on_server_loop
async def test_a_long_try_as_a_task_answers_by_polling_and_says_what_it_does(server, jp_fetch):
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    tasks = Tasks()
    try:
        async with client(app, port, extensions=[tasks]) as c:
            t0 = time.monotonic()
            out = data(await c.call_tool("try_code", {"notebook": NOTEBOOK, "timeout": 60,
                                                      "code": "import time\nin_task = 1\ntime.sleep(6)\n41 + 1"}))
            took = time.monotonic() - t0
            assert "42" in json.dumps(out["value"]), out
            assert out["handle"].startswith("h-")
            # it came as a task handle at once, and the polls saw the work's own words
            assert len(tasks.handles) == 1 and tasks.handles[0].status == "working", tasks.handles
            assert tasks.handles[0].task_id.startswith("task-")
            messages = [p.status_message or "" for p in tasks.polls]
            assert any("running the code in a copy" in m for m in messages), messages
            assert [p.status for p in tasks.polls][-1] == "completed" and len(tasks.polls) >= 4, tasks.polls
            assert took >= 6
            # a quick tool is never a task
            listed = data(await c.call_tool("list_notebooks", {}))
            assert NOTEBOOK in [n["path"] for n in listed["notebooks"]] and len(tasks.handles) == 1
            # the handle lives on: a `from` try (also a task) continues in the copy
            again = data(await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": "in_task + 1",
                                                        "from": out["handle"]}))
            assert "2" in json.dumps(again["value"]) and len(tasks.handles) == 2
        assert await live_value(kc, "'in_task' in globals()") == "False"
    finally:
        kc.stop_channels()


@pytest.mark.timeout(180)
@on_server_loop
async def test_a_cancelled_task_closes_its_copy(server, jp_fetch):
    from tests.test_server import kernel_children, wait_no_children, warm_root_pids

    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    tasks = Tasks(cancel_after_s=3)
    try:
        async with client(app, port, extensions=[tasks]) as c:
            t0 = time.monotonic()
            out = await c.call_tool("try_code", {"notebook": NOTEBOOK, "timeout": 120,
                                                 "code": "import time\ntime.sleep(100)"})
            assert out.is_error and out.structured_content["task"] == "cancelled", out
            assert time.monotonic() - t0 < 30
            assert tasks.cancelled is not None and tasks.cancelled.status == "cancelled"
            assert "cancelled" in (tasks.cancelled.status_message or "")
            await wait_no_children(km, timeout=30, but=warm_root_pids(app))  # the copy is gone
            assert not kernel_children(km, but=warm_root_pids(app))  # the warm root is kept
            task_id = tasks.handles[0].task_id
            # a task that ended cannot be cancelled again; update has nothing to deliver
            from mcp.shared.exceptions import MCPError

            with pytest.raises(MCPError, match="already ended"):
                await c.session.send_request(CancelTask(params=TaskParams(task_id=task_id)), TaskState)
            with pytest.raises(MCPError, match="never asks for input"):
                await c.session.send_request(UpdateTask(params=TaskParams(task_id=task_id)), TaskState)
        # a task id that was never made names nothing
        async with client(app, port, extensions=[Tasks()]) as again:
            with pytest.raises(MCPError, match="No task"):
                await again.session.send_request(GetTask(params=TaskParams(task_id="task-" + "0" * 32)), TaskState)
    finally:
        kc.stop_channels()


@pytest.mark.timeout(120)
@on_server_loop
async def test_a_client_without_the_extension_gets_plain_results(server, jp_fetch):
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    try:
        async with client(app, port) as c:
            out = data(await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": "import time\ntime.sleep(2)\n5"}))
            assert "5" in json.dumps(out["value"]) and out["handle"].startswith("h-")
            # the server says it has the extension (its discovery), so a client knows it may declare it
            assert EXTENSION in (c.server_capabilities.extensions or {}), c.server_capabilities
    finally:
        kc.stop_channels()
