"""jupyter-data-agent: an AI pair programmer for data science in JupyterLab."""

import contextlib

try:
    from ._version import __version__
except ImportError:  # running from a source tree that was never built
    __version__ = "0.0.0.dev0"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-data-agent"}]


def _jupyter_server_extension_points():
    from .mcp.extension import MCPExtension
    from .server.app import DataAgentExtension

    # The MCP server is a point of its own: server/ never imports the mcp/ layer above it.
    return [{"module": "jupyter_data_agent", "app": DataAgentExtension},
            {"module": "jupyter_data_agent", "app": MCPExtension}]


def load_ipython_extension(ipython):
    """``%load_ext jupyter_data_agent`` registers the ``%%agent`` magic."""
    from .magics import AgentMagics, record_errors

    ipython.register_magics(AgentMagics)
    ipython.events.register("post_run_cell", record_errors)


def unload_ipython_extension(ipython):
    from .magics import record_errors

    with contextlib.suppress(ValueError):  # not registered: loaded by another route
        ipython.events.unregister("post_run_cell", record_errors)
