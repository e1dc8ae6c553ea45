"""Our MCP tools on jupyter-server-mcp's host (Jupyter AI's MCP server), as module-level functions.

jupyter-server-mcp (installed with Jupyter AI) serves MCP on a port of its own,
in the Jupyter server's process and loop, with fastmcp and the mcp SDK 1.x.
It reads ``TOOLS`` through the ``jupyter_server_mcp.tools`` entry point and
registers each function: its name, docstring and annotations become the
tool's. So the agents Jupyter AI runs (Claude Code, Codex over ACP) see
``try_code``, ``propose_cell`` and the rest next to Jupyter AI's own tools.
Each is one of ``operations`` (the same work, schema and description as on our
route; ``read_notebook`` is ``read_notebook_pages`` here, beside Jupyter AI's
own ``read_notebook``); nothing here imports the mcp SDK 2.

That port has no login, so no request names a user: the tools act as the
server's one principal (every request's, under the stock token and password
identity providers: ``server.handlers.one_principal``). Where the server tells
users apart (JupyterHub, a custom provider) they refuse every call, in words.
"""

# No ``from __future__ import annotations``: jupyter-server-mcp rebuilds each function's
# annotations from its signature, where strings would be resolved in its module, not here.

import inspect
import json
from typing import Any

from fastmcp import Context
from fastmcp.exceptions import ToolError
from fastmcp.tools import ToolResult
from mcp.types import ImageContent, TextContent

from . import operations
from .caller import Caller
from .errors import ToolFailure, reasoned
from .operations import OPERATIONS, Answer, Call, Report
from .render import plots

#: The agent's name the sidebar shows when the MCP client gives none.
AGENT = "Jupyter AI MCP host"
#: Our tools named otherwise here: Jupyter AI's own tools on this host have a read_notebook (the
#: notebook as Markdown), which a second tool of that name would replace. Ours gives the saved
#: notebook in pages.
RENAMED = {"read_notebook": "read_notebook_pages"}


def refusal(base_url: str) -> str:
    """Why the tools refuse where the server tells users apart, and what to use instead."""
    return ("The Data Agent's tools refuse here: this MCP port (jupyter-server-mcp's, Jupyter AI's MCP host) "
            "has no login, so it cannot say which user calls, and this Jupyter server tells its users apart "
            "(JupyterHub or a custom identity provider). Use the Data Agent's own MCP route "
            f"{base_url}jupyter-data-agent/mcp on the Jupyter server's port with your token (an agent token, "
            "or a Hub API token under JupyterHub); it needs the mcp SDK 2.3 or later.")


def _server() -> Any:
    """The Jupyter server of this process (the host runs in it, as Jupyter AI's own tools find it)."""
    from jupyter_server.serverapp import ServerApp

    if not ServerApp.initialized():
        raise ToolFailure("No Jupyter server runs in this process: the Data Agent's tools need one.")
    return ServerApp.instance()


def _caller(ctx: Context | None) -> Caller:
    """The server's one principal as the caller, with every right the server gives it; a refusal
    in words where the server tells users apart or our extension is not loaded."""
    from ..server.handlers import one_principal
    from ..server.state import STATE_KEY, agent_state

    app = _server()
    settings = app.web_app.settings
    if STATE_KEY not in settings:
        raise ToolFailure("The Data Agent's server extension is not loaded on this Jupyter server "
                          "(jupyter server extension enable jupyter_data_agent).")
    state = agent_state(settings)
    owner = one_principal(settings.get("identity_provider") or app.identity_provider, state.owner_scope)
    if owner is None:
        raise ToolFailure(refusal(app.base_url))
    return Caller(owner=owner, state=state, session_manager=app.session_manager,
                  kernel_manager=app.kernel_manager, contents_manager=app.contents_manager,
                  can_execute=True, can_read=True,  # one principal: the server's owner, whom nothing limits
                  session=_session(ctx), secrets=_secrets())


def _session(ctx: Context | None) -> str | None:
    """The MCP session, which a try's handles and the confinement note follow."""
    try:
        return ctx.session_id if ctx is not None else None
    except RuntimeError:  # no session (a call outside a request)
        return None


def _secrets(*_: Any) -> tuple[str, ...]:
    """The server's token, masked in any error text."""
    from ..server.agent_auth import unwrapped

    try:
        app = _server()
    except ToolFailure:
        return ()
    identity = app.web_app.settings.get("identity_provider") or app.identity_provider
    token = getattr(unwrapped(identity), "token", None)
    return (token,) if token else ()


def _client_params(ctx: Context | None) -> Any:
    try:
        return ctx.session.client_params if ctx is not None else None
    except RuntimeError:
        return None


def _progress(ctx: Context | None) -> Report | None:
    """Progress as fastmcp's notifications (sent to a client that gave a progress token)."""
    if ctx is None:
        return None

    async def report(elapsed: float, line: str) -> None:
        await ctx.report_progress(round(elapsed, 1), None, line)

    return report


def _result(answer: Answer) -> ToolResult:
    """The JSON as text and as structured content, then the run's plots as images."""
    text = json.dumps(answer.data, default=str, ensure_ascii=False)
    pictures = [ImageContent.model_validate({"type": "image", "data": data, "mimeType": mime})  # SDK 1.x's names
                for mime, data in plots(answer.ran)]
    return ToolResult(content=[TextContent(type="text", text=text), *pictures], structured_content=answer.data)


def _exposed(fn: Any) -> Any:
    """The operation ``fn`` (named as ``RENAMED`` says) as a plain async function of its own
    arguments (its schema), its docstring, its output model as the return annotation, and fastmcp's
    ``ctx``; failures as fastmcp's ``ToolError`` in words (``errors.reasoned``)."""
    op = next(o for o in OPERATIONS if o.fn is fn)
    signature = inspect.signature(op.fn, eval_str=True)
    params = [*list(signature.parameters.values())[1:],
              inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context | None, default=None)]

    async def tool(**arguments: Any) -> ToolResult:
        ctx = arguments.pop("ctx", None)
        caller = _caller(ctx)
        answer = await op.fn(Call(caller, caller.agent(_client_params(ctx), AGENT), _progress(ctx)), **arguments)
        op.output.model_validate(answer.data)  # here, where a mismatch still gets its reason
        return _result(answer)

    tool.__name__ = tool.__qualname__ = RENAMED.get(op.name, op.name)
    tool.__module__ = __name__
    tool.__doc__ = inspect.getdoc(op.fn)
    tool.__signature__ = signature.replace(parameters=params, return_annotation=op.output)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": op.output}
    return reasoned(tool.__name__, _secrets, failure=ToolError, passthrough=(ToolError,))(tool)


list_notebooks = _exposed(operations.list_notebooks)
read_notebook_pages = _exposed(operations.read_notebook)
list_variables = _exposed(operations.list_variables)
describe_dataframe = _exposed(operations.describe_dataframe)
try_code = _exposed(operations.try_code)
compare_answers = _exposed(operations.compare_answers)
propose_cell = _exposed(operations.propose_cell)
propose_edit = _exposed(operations.propose_edit)
proposal_status = _exposed(operations.proposal_status)
ask_data_agent = _exposed(operations.ask_data_agent)

#: What jupyter-server-mcp registers ("module:function"), read through our entry point: every operation.
TOOLS = [f"{__name__}:{RENAMED.get(op.name, op.name)}" for op in OPERATIONS]
assert all(callable(globals().get(spec.rsplit(":", 1)[1])) for spec in TOOLS), "a function here per operation"
