"""Outside agents: the MCP server (tools over kernel copies, proposals) on the Jupyter server's port.

Layered above ``server/``: the tools call the server's copies (``server.tries``),
proposals (``server.proposals``) and turns (``server.jobs``); the server never
imports this package. It is a jupyter_server extension point of its own
(``extension.MCPExtension``), loaded with the package's main one.
"""
