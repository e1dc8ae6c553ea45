"""The MCP tools on our route (mcp SDK 2): each of ``operations`` registered on the SDK's ``MCPServer``.

The work lives in ``operations`` (shared with jupyter-server-mcp's host,
``host``); here each becomes a tool of its signature and docstring, with the
caller the HTTP request authenticated (``bridge``, ``caller``), progress as MCP
progress notifications (and an MCP Tasks status line, ``tasks``), failures in
words with the caller's secrets masked (``errors``), the answer as JSON text,
structured content checked against its model, and plots as images.
"""

from __future__ import annotations

import inspect
import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel

from .caller import Caller, caller_in
from .errors import reasoned
from .operations import OPERATIONS, Call, Operation, Report
from .render import plots
from .tasks import ToolTasks, report_status

INSTRUCTIONS = (
    "Tools over the user's open Jupyter notebooks. Read a notebook and its live DataFrames, then try "
    "code with try_code: it runs in a confined copy of the notebook's live kernel (the user's kernel and "
    "files are never changed) and returns a handle; pass it as `from` to continue in a child copy. "
    "Compare candidates with compare_answers. To change the notebook, propose a cell or an edit: the "
    "user accepts or rejects it in the browser; proposal_status tells you which."
)
#: Capabilities the SDK's MCPServer advertises by registering their handlers, which this server has
#: nothing behind: no resources, no prompts (every read goes through a tool, with its caller's rights).
UNSERVED_METHODS = ("resources/list", "resources/read", "resources/templates/list", "resources/subscribe",
                    "resources/unsubscribe", "prompts/list", "prompts/get")
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
COPIES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                         open_world_hint=False)


def build_server() -> MCPServer:
    """The one MCP server of this Jupyter server, with every tool registered."""
    from .. import __version__

    # subscriptions=False: nothing here changes a list a client could listen for (tools are fixed).
    server = MCPServer("jupyter-data-agent", instructions=INSTRUCTIONS, version=__version__, subscriptions=False,
                       extensions=[ToolTasks()])
    _unadvertise(server)
    for op in OPERATIONS:
        server.tool(annotations=READ_ONLY if op.read_only else COPIES)(_exposed(op))
    return server


def _exposed(op: Operation) -> Any:
    """``op`` as an SDK tool: ``ctx`` first, then ``op``'s arguments (its schema), its docstring, an
    answer checked against ``op.output``; failures in words (``errors.reasoned``)."""
    signature = inspect.signature(op.fn, eval_str=True)
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context),
              *list(signature.parameters.values())[1:]]
    returns = Annotated[CallToolResult, op.output]

    async def tool(ctx: Context, **arguments: Any) -> CallToolResult:
        if "from" in arguments:  # a Python keyword: the SDK passes that argument by its alias
            arguments["from_"] = arguments.pop("from")
        caller = caller_of(ctx)
        call = Call(caller, caller.agent(ctx.session.client_params), _progress(ctx))
        answer = await op.fn(call, **arguments)
        return tool_result(answer.data, images(answer.ran))

    tool.__name__ = tool.__qualname__ = op.name
    tool.__doc__ = inspect.getdoc(op.fn)
    tool.__signature__ = signature.replace(parameters=params, return_annotation=returns)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
    return reasoned(op.name, _secrets, failure=ToolError, passthrough=(ToolError, MCPError),
                    check=_checked(op.output))(tool)


def caller_of(ctx: Context) -> Caller:
    """A tool's caller (``caller_in``); a request that bypassed the bridge is refused in words."""
    caller = caller_in(ctx.request_context.request)
    if caller is None:
        raise ToolError("This MCP server answers only through the Jupyter server's authenticated route.")
    return caller


def _progress(ctx: Context) -> Report:
    """Progress as an MCP notification, for a client that sent a progress token, and as the
    status line of the MCP task the call is, when it is one."""

    async def report(elapsed: float, line: str) -> None:
        report_status(line)
        await ctx.report_progress(round(elapsed, 1), None, line)

    return report


def _checked(model: type[BaseModel]) -> Any:
    def check(result: Any) -> None:
        if isinstance(result, CallToolResult) and not result.is_error:
            model.model_validate(result.structured_content)

    return check


def _secrets(args: tuple, kwargs: dict) -> tuple[str, ...]:
    ctx = kwargs.get("ctx")
    return caller_of(ctx).secrets if ctx is not None else ()


def _unadvertise(server: MCPServer) -> None:
    """Stop advertising resources and prompts: the SDK derives capabilities from registered handlers
    (it has no switch), and an empty list behind an advertised capability (with subscribe and
    listChanged on top) tells a client to look for what is not there."""
    handlers = server._lowlevel_server._request_handlers  # no public way to unregister
    for method in UNSERVED_METHODS:
        handlers.pop(method, None)


def images(result: Any) -> list[ImageContent]:
    """The run's plots (``render.plots``) as MCP image content."""
    return [ImageContent(type="image", data=data, mime_type=mime) for mime, data in plots(result)]


def tool_result(data: dict[str, Any], pictures: list[ImageContent] | None = None) -> CallToolResult:
    """The JSON as text (what every client reads) and as structured content, then the images."""
    text = json.dumps(data, default=str, ensure_ascii=False)
    content: list[Any] = [TextContent(type="text", text=text), *(pictures or [])]
    return CallToolResult(content=content, structured_content=data)
