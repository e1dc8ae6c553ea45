"""The MCP server as a jupyter_server extension point: its route, and its stop with the server.

A point of its own, next to ``server.app.DataAgentExtension`` (the package's
``_jupyter_server_extension_points`` lists both), so that ``server/`` never
imports this layer above it; the route is authenticated and authorized like
every other route of the package.

The server needs the mcp SDK 2.3+ (``sdk``); beside Jupyter AI (SDK 1.x) the
point still loads and sets the try handles' limits (every surface's tries
use them), imports nothing of the SDK, says once in the log that the route is
off, and the route answers 404 with that sentence in JSON: an MCP client
shows the body's words, where a bare 404 page would say nothing.
"""

from __future__ import annotations

from dataclasses import replace

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from tornado import web
from traitlets import Float, Int

from ..server.handlers import AgentAPIHandler
from ..server.state import agent_state
from .sdk import route_off, server_unavailable

NAMESPACE = "jupyter-data-agent"
#: The settings that matter only while the route runs (named in the warning when set).
ROUTE_ONLY = ("session_idle_timeout_s", "max_sessions_per_user", "max_sessions")


class MCPExtension(ExtensionApp):
    """The limits only MCP clients meet: sessions and ``try_code`` handles (``c.MCPExtension.*``).

    Tries and proposals' runs together are bounded by ``c.DataAgentExtension.max_concurrent_tries``
    (proposals are run from the sidebar too).
    """

    name = "jupyter_data_agent_mcp"
    load_other_extensions = True

    session_idle_timeout_s = Float(
        1800.0, min=1.0, help="Seconds an MCP session without requests is kept before it (and its kernel copies) "
        "is closed."
    ).tag(config=True)

    max_sessions_per_user = Int(
        32, min=1, help="MCP sessions one user may hold open; opening one more ends that user's least "
        "recently used session (and its kernel copies), never another user's."
    ).tag(config=True)
    max_sessions = Int(
        1000, min=1, help="MCP sessions of all users together; beyond it a new session is refused (503)."
    ).tag(config=True)

    try_handle_ttl_s = Float(
        600.0, min=1.0, help="Seconds an outside agent's kernel copy (a try_code handle) is kept unused "
        "before it is closed."
    ).tag(config=True)
    max_try_handles_per_user = Int(
        16, min=1, help="Kernel copies (try_code handles) one user's outside agents may hold; beyond it "
        "the least recently used is closed."
    ).tag(config=True)

    def initialize_settings(self) -> None:
        # The package's main point (server.app) loads first and made the tries; their handles' limits are here.
        tries = agent_state(self.settings).tries
        tries.limits = replace(tries.limits, ttl_s=self.try_handle_ttl_s,
                               max_handles_per_user=self.max_try_handles_per_user)
        why = server_unavailable()
        if why is not None:
            mine = self.config.get("MCPExtension", {})
            unused = [f"c.MCPExtension.{name}" for name in ROUTE_ONLY if name in mine]
            self.log.warning("jupyter_data_agent: %s%s", route_off(why),
                             f" Not applied, without the route: {', '.join(unused)}." if unused else "")
            return
        from .bridge import SERVICE_KEY, MCPService

        self.settings[SERVICE_KEY] = MCPService(session_idle_timeout=self.session_idle_timeout_s,
                                                max_sessions_per_user=self.max_sessions_per_user,
                                                max_sessions=self.max_sessions)

    def initialize_handlers(self) -> None:
        handler: type[web.RequestHandler] = MCPOffHandler
        if server_unavailable() is None:
            from .bridge import MCPHandler

            handler = MCPHandler
        self.handlers.append((url_path_join(NAMESPACE, "mcp"), handler))
        self.handlers.append((url_path_join(NAMESPACE, "mcp/"), handler))  # as clients often write it

    async def stop_extension(self) -> None:
        if server_unavailable() is not None:
            return
        from .bridge import SERVICE_KEY

        service = self.settings.get(SERVICE_KEY)
        if service is not None:
            await service.stop()


class MCPOffHandler(AgentAPIHandler):
    """The route while our MCP server cannot run here: 404, and why and where the tools are, in JSON."""

    agent_access = frozenset({"GET", "POST", "DELETE"})  # the agent's own route, as MCPHandler's

    @web.authenticated
    def _off(self) -> None:
        raise web.HTTPError(404, route_off(server_unavailable() or "it did not start"))  # no "%" in it

    get = post = delete = _off
