"""Jupyter AI's chat: ``@DataAgent``, a persona of Jupyter AI 3 (``jupyter_ai.personas``).

Layered with ``mcp/`` above ``server/``: the persona (``data_agent``, which alone
imports Jupyter AI's persona manager) hands each message to ``chat_turn``, which
runs it through the server's one turn service and files the chosen cell as a
proposal. Installed without Jupyter AI, nothing here is imported.
"""
