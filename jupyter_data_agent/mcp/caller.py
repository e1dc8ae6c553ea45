"""Who calls a tool, with which rights, and the server state it may reach; free of any MCP SDK.

On our route the Tornado handler (``bridge``) authenticates the request the
way every handler of this server does, asks the authorizer what this user may
do, and puts a ``Caller`` into the ASGI scope; the tools read it back from the
MCP request context. An MCP message alone never names a user. On
jupyter-server-mcp's host (``host``), which has no login, the caller is the
server's one principal, or nobody.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..server.state import AgentState
from .errors import ToolFailure

SCOPE_KEY = "jupyter_data_agent.caller"
DEFAULT_AGENT = "MCP client"


@dataclass
class Caller:
    owner: str  # whose proposals and copies (``handlers.AgentMixin.job_owner``)
    state: AgentState  # the extension's shared state (``server.state``)
    session_manager: Any
    kernel_manager: Any
    contents_manager: Any
    can_execute: bool  # "execute" on "kernels": forking a kernel runs code in it
    can_read: bool  # "read" on "contents"
    session: str | None = None  # the MCP session id, when the client keeps one
    token_agent: str | None = None  # the name the user gave this agent's token, if it has one
    secrets: tuple[str, ...] = ()  # the tokens of this request and server: masked in any error text
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def tries(self) -> Any:
        return self.state.tries

    @property
    def kernels(self) -> Any:
        """Handles on the server's kernels by id (``server.kernels``): how tools read a kernel."""
        return self.state.jobs.kernels

    @property
    def proposals(self) -> Any:
        return self.state.proposals

    def require_execute(self) -> None:
        if not self.can_execute:
            raise ToolFailure("You may not run code in kernels on this server (not even in copies).")

    def require_read(self) -> None:
        if not self.can_read:
            raise ToolFailure("You may not read files on this server.")

    def agent(self, client_params: Any, default: str = DEFAULT_AGENT) -> str:
        """The agent's name, as the sidebar shows it: its token's, else its MCP client info's
        (title, else name) from the session's initialize params (either SDK's), else ``default``."""
        if self.token_agent:
            return self.token_agent
        info = getattr(client_params, "client_info", None) or getattr(client_params, "clientInfo", None)
        name = (getattr(info, "title", None) or getattr(info, "name", None)) if info is not None else None
        name = " ".join(str(name or "").split())[:80]
        return name or default

    async def contents(self, path: str) -> dict:
        """The notebook as saved (nbformat JSON); FileNotFoundError when there is none."""
        from ..server.notebooks import NotebookUnreadable, saved_notebook

        try:
            return await saved_notebook(self.contents_manager, path)
        except NotebookUnreadable as exc:
            raise ToolFailure(f"Could not read {path!r}: {exc}") from None


def caller_in(request: Any) -> Caller | None:
    """The caller the bridge put into this request's ASGI scope; None for a request that bypassed it."""
    scope = getattr(request, "scope", None) or {}
    caller = scope.get(SCOPE_KEY)
    return caller if isinstance(caller, Caller) else None
