"""The MCP server as a jupyter_server extension point: its route, and its stop with the server.

A point of its own, next to ``server.app.DataAgentExtension`` (the package's
``_jupyter_server_extension_points`` lists both), so that ``server/`` never
imports this layer above it; the route is authenticated and authorized like
every other route of the package.
"""

from __future__ import annotations

from dataclasses import replace

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from traitlets import Float, Int

from ..server.state import agent_state
from .bridge import SERVICE_KEY, MCPHandler, MCPService

NAMESPACE = "jupyter-data-agent"


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
        self.settings[SERVICE_KEY] = MCPService(session_idle_timeout=self.session_idle_timeout_s,
                                                max_sessions_per_user=self.max_sessions_per_user,
                                                max_sessions=self.max_sessions)

    def initialize_handlers(self) -> None:
        self.handlers.append((url_path_join(NAMESPACE, "mcp"), MCPHandler))
        self.handlers.append((url_path_join(NAMESPACE, "mcp/"), MCPHandler))  # as clients often write it

    async def stop_extension(self) -> None:
        service = self.settings.get(SERVICE_KEY)
        if service is not None:
            await service.stop()
