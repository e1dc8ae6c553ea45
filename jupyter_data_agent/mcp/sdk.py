"""Whether our own MCP server can run in this environment, asked in one place.

The route ``/jupyter-data-agent/mcp`` (``bridge``, ``tools``) is built on the
mcp SDK 2.3+ (``MCPServer``, ``mcp_types``). Jupyter AI 3.2 pins the SDK 1.x
(jupyter-server-mcp -> fastmcp -> ``mcp<2``); beside it the route is off and
our tools are served by jupyter-server-mcp's MCP host instead (``host``,
through the ``jupyter_server_mcp.tools`` entry point). Whatever needs the SDK 2
(the extension point, a command) asks ``server_unavailable`` before importing
it and says ``route_off`` in words, never an ImportError's traceback.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from importlib.metadata import PackageNotFoundError, version

#: The first mcp SDK our MCP server runs on.
NEEDED = "2.3"
ROUTE = "/jupyter-data-agent/mcp"


@functools.cache
def server_unavailable() -> str | None:
    """None when the mcp SDK here can run our MCP server; else why not, in words."""
    try:
        found = version("mcp")
    except PackageNotFoundError:
        return f"the mcp SDK is not installed (it needs mcp {NEEDED} or later)"
    if _release(found) >= _release(NEEDED) and importlib.util.find_spec("mcp_types") is not None:
        return None
    pinned = " (Jupyter AI's jupyter-server-mcp pins mcp<2)" if found.startswith("1.") else ""
    return f"the mcp SDK here is {found}; it needs {NEEDED} or later{pinned}"


def _release(text: str) -> tuple[int, ...]:
    """(major, minor) of a version string ("2.3.0rc1" -> (2, 3))."""
    return tuple(int(n) for n in re.findall(r"\d+", text)[:2])


def tools_elsewhere() -> str:
    """Where an MCP client finds our tools while our route is off."""
    if importlib.util.find_spec("jupyter_server_mcp") is not None:
        return ("our tools are served by jupyter-server-mcp's MCP host instead (its own port, "
                "c.MCPExtensionApp.mcp_port, 3001 by default: http://localhost:3001/mcp), where this "
                "package registers them through the jupyter_server_mcp.tools entry point")
    return (f"install mcp>={NEEDED} for this route, or Jupyter AI (jupyter-server-mcp) to serve our tools "
            "on its MCP host")


def route_off(why: str) -> str:
    """The one sentence every surface says while our MCP server cannot run."""
    return f"The Data Agent's MCP route {ROUTE} is off: {why}; {tools_elsewhere()}."
