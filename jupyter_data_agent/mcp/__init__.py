"""Outside agents and Jupyter AI: the MCP server, the ACP agent and the ``@DataAgent`` persona.

Layered above ``server/``: the tools call the server's copies (``server.tries``),
proposals (``server.proposals``) and turns (``server.turns``); the server never
imports this package. The MCP server is a jupyter_server extension point of its
own (``extension.MCPExtension``), loaded with the package's main one; the ACP
agent (``acp``) is a process of its own; the persona (``persona``, over
``chat_turn``) is loaded by Jupyter AI's persona manager from an entry point.
"""
