"""``jupyter-data-agent acp``: the Data Agent as an Agent Client Protocol agent over stdio.

An ACP client (jupyter-ai's persona host, Zed, JetBrains IDEs) starts this
process and talks JSON-RPC on its stdin/stdout (the ``agent-client-protocol``
SDK). The agent holds no model and no kernel: each prompt becomes one turn
of a running Jupyter server's pipeline, through its REST API, exactly as the
sidebar asks for one (``POST turns``, the job's events); progress streams as
ACP thoughts, the candidates' code as the agent's message, and the chosen
candidate becomes a proposal in the notebook (``POST proposals``), behind
the same approval gate: only the user's Accept in JupyterLab changes the
notebook or runs code in the live kernel.

The server: ``JUPYTER_DATA_AGENT_SERVER_URL`` and ``JUPYTER_DATA_AGENT_TOKEN``
(else ``JUPYTER_SERVER_URL``/``JUPYTER_TOKEN``), else the one Jupyter server
running on this machine for this user (its runtime file). The notebook: a
``.ipynb`` the prompt links (a resource link, or ``@path.ipynb`` in the
text), else the session's one open notebook.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, unquote, urlparse

import acp
from acp import schema

AGENT_NAME = "Data Agent (ACP)"
StopReason = Literal["end_turn", "cancelled"]
POLL_S = 0.3
TURN_TIMEOUT_S = 900.0
#: A leading "/vote" or "/search" picks the strategy; else the server's default.
STRATEGY_WORDS = {"/quick": "direct", "/direct": "direct", "/vote": "vote", "/search": "mcts",
                  "/mcts": "mcts", "/react": "react"}
_AT_NOTEBOOK = re.compile(r"@(\S+\.ipynb)")


class ServerNotFound(RuntimeError):
    """No Jupyter server to send turns to: said to the ACP client in words."""


@dataclass
class Server:
    """A running Jupyter server with this extension, reached over HTTP with its token."""

    url: str
    token: str

    @classmethod
    def from_environment(cls) -> "Server":
        env = os.environ
        url = env.get("JUPYTER_DATA_AGENT_SERVER_URL") or env.get("JUPYTER_SERVER_URL")
        token = env.get("JUPYTER_DATA_AGENT_TOKEN") or env.get("JUPYTER_TOKEN") or ""
        if url:
            return cls(url.rstrip("/"), token)
        from jupyter_server.serverapp import list_running_servers

        running = list(list_running_servers())
        if len(running) == 1:
            return cls(running[0]["url"].rstrip("/"), running[0].get("token", ""))
        raise ServerNotFound(
            f"{len(running)} Jupyter servers are running here; set JUPYTER_DATA_AGENT_SERVER_URL and "
            "JUPYTER_DATA_AGENT_TOKEN to the one to use" if running else
            "no Jupyter server is running: start JupyterLab, or set JUPYTER_DATA_AGENT_SERVER_URL "
            "and JUPYTER_DATA_AGENT_TOKEN")


@dataclass
class Session:
    cwd: str
    job_id: str | None = None
    notebooks: list[str] = field(default_factory=list)


class DataAgentACP:
    """Prompts in, turns of the server's pipeline out, proposals behind the user's Accept.

    An ``acp.Agent`` by its methods (the SDK answers "method not found" for
    the optional ones it lacks: session modes, loading, forking...)."""

    def __init__(self, server: Server | None = None) -> None:
        self._server = server
        self._conn: Any = None
        self._client_name = ""
        self._sessions: dict[str, Session] = {}
        self._http: Any = None

    # -- the protocol -----------------------------------------------------------------
    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **kwargs: Any) -> schema.InitializeResponse:
        self._client_name = getattr(client_info, "title", None) or getattr(client_info, "name", None) or ""
        from .. import __version__

        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=schema.AgentCapabilities(),
            agent_info=schema.Implementation(name="jupyter-data-agent", title="Data Agent", version=__version__))

    async def new_session(self, cwd: str, additional_directories: Any = None, mcp_servers: Any = None,
                          **kwargs: Any) -> schema.NewSessionResponse:
        session_id = uuid.uuid4().hex
        self._sessions[session_id] = Session(cwd=cwd)
        return schema.NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None and session.job_id:
            with contextlib.suppress(Exception):  # the turn may have ended meanwhile
                await self._call("POST", f"jupyter-data-agent/jobs/{session.job_id}/cancel", {})

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> schema.PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise acp.RequestError.invalid_params({"session_id": "unknown session"})
        text = " ".join(b.text for b in prompt if getattr(b, "type", "") == "text").strip()
        links = [unquote(urlparse(b.uri).path) for b in prompt
                 if getattr(b, "type", "") == "resource_link" and b.uri.endswith(".ipynb")]
        strategy, intent = _strategy(text)
        links += _AT_NOTEBOOK.findall(intent)
        intent = _AT_NOTEBOOK.sub(lambda m: m.group(1).rsplit("/", 1)[-1], intent).strip()
        if not intent:
            await self._say(session_id, "Ask a question about a notebook's data, e.g. "
                                        "“@analysis.ipynb which airline has the longest delays?”.")
            return schema.PromptResponse(stop_reason="end_turn")
        try:
            stop = await self._turn(session_id, session, intent, strategy, links)
        except ServerNotFound as exc:
            await self._say(session_id, f"The Data Agent cannot reach JupyterLab: {exc}.")
            return schema.PromptResponse(stop_reason="end_turn")
        finally:
            session.job_id = None
        return schema.PromptResponse(stop_reason=stop)

    # -- one turn -------------------------------------------------------------------------
    async def _turn(self, session_id: str, session: Session, intent: str, strategy: str | None,
                    links: list[str]) -> StopReason:
        path, kernel_id = await self._notebook(session, links)
        if path is None:
            await self._say(session_id, kernel_id or "Name the notebook with @path.ipynb.")
            return "end_turn"
        notebook = (await self._call("GET", f"jupyter-data-agent/notebooks?path={quote(path)}"))["content"]
        cells = notebook.get("cells", [])
        body: dict[str, Any] = {"version": 1, "notebook_path": path, "cells": cells, "intent": intent,
                                "kernel_id": kernel_id, "active_index": max(0, len(cells) - 1) if cells else None,
                                "metadata": notebook.get("metadata", {})}
        if strategy:
            body["strategy"] = strategy
        accepted = await self._call("POST", "jupyter-data-agent/turns", body)
        session.job_id = job_id = accepted["job_id"]
        seen, chosen, code = 0, None, ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TURN_TIMEOUT_S
        while loop.time() < deadline:
            job = await self._call("GET", f"jupyter-data-agent/jobs/{job_id}?after={seen}")
            for event in job.get("events", []):
                seen = max(seen, int(event.get("seq", seen)))
                kind, message, data = event.get("type"), event.get("message", ""), event.get("data") or {}
                if kind in ("progress", "log") and message:
                    await self._conn.session_update(session_id, acp.update_agent_thought_text(message + "\n"))
                elif kind == "candidate":
                    candidate = data.get("candidate") or {}
                    code = candidate.get("code", "")
                    await self._say(session_id, f"Candidate {int(data.get('index', 0)) + 1}:\n```python\n{code}\n```\n")
                elif kind == "done":
                    chosen = data.get("result", {})
                elif kind == "error":
                    await self._say(session_id, f"The turn failed: {message}")
                    return "cancelled" if (data.get("state") == "cancelled") else "end_turn"
            if chosen is not None:
                break
            if job.get("status") in ("error", "cancelled"):
                return "cancelled" if job.get("status") == "cancelled" else "end_turn"
            await asyncio.sleep(POLL_S)
        if chosen is None:
            await self._say(session_id, "The turn took too long; it goes on in JupyterLab's sidebar.")
            return "end_turn"
        best = await self._chosen_code(job_id, chosen) or code
        if not best:
            await self._say(session_id, str(chosen.get("answer") or "No candidate came out of this turn."))
            return "end_turn"
        proposal = (await self._call("POST", "jupyter-data-agent/proposals", {
            "version": 1, "notebook_path": path, "kind": "cell", "code": best,
            "explanation": intent[:4000], "agent": _agent_label(self._client_name),
            "after_cell_id": cells[-1].get("id") if cells else None, "cell_id": None, "try_handle": None,
        }))["proposal"]
        answer = f" The answer: {chosen['answer']}." if chosen.get("answer") else ""
        await self._say(session_id, f"Proposed as a new cell in {path}: accept or reject it in JupyterLab."
                                    f"{answer} (proposal {proposal['id']})")
        return "end_turn"

    async def _chosen_code(self, job_id: str, result: dict) -> str:
        job = await self._call("GET", f"jupyter-data-agent/jobs/{job_id}")
        candidates = [e["data"]["candidate"] for e in job.get("events", []) if e.get("type") == "candidate"]
        index = result.get("chosen")
        return candidates[index]["code"] if isinstance(index, int) and 0 <= index < len(candidates) else ""

    async def _notebook(self, session: Session, links: list[str]) -> tuple[str | None, str | None]:
        """(path relative to the server's root, its kernel id) of the notebook the prompt is about."""
        listed = (await self._call("GET", "jupyter-data-agent/notebooks"))["notebooks"]
        open_ = {n["path"]: n.get("kernel_id") for n in listed}
        for link in links:
            for path, kernel_id in open_.items():
                if link == path or link.endswith("/" + path) or path.endswith("/" + link.lstrip("/")):
                    return path, kernel_id
            return link.lstrip("/"), None  # not open: the notebook text alone
        if len(open_) == 1:
            return next(iter(open_.items()))
        names = ", ".join(sorted(open_)) or "none is open"
        return None, f"Name the notebook with @path.ipynb (open notebooks: {names})."

    # -- plumbing --------------------------------------------------------------------------------
    async def _say(self, session_id: str, text: str) -> None:
        await self._conn.session_update(session_id, acp.update_agent_message_text(text))

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        if self._server is None:
            self._server = Server.from_environment()
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=60.0, headers={"Authorization": f"token {self._server.token}"})
        reply = await self._http.request(method, f"{self._server.url}/{path}", json=body)
        if reply.status_code >= 400:
            try:
                detail = reply.json().get("message") or reply.text
            except ValueError:
                detail = reply.text
            raise acp.RequestError.internal_error({"status": reply.status_code, "message": str(detail)[:500]})
        return reply.json() if reply.content else {}


def _strategy(text: str) -> tuple[str | None, str]:
    word, _, rest = text.partition(" ")
    if word.lower() in STRATEGY_WORDS:
        return STRATEGY_WORDS[word.lower()], rest.strip()
    return None, text


def _agent_label(client: str) -> str:
    return f"Data Agent (ACP, {client})"[:80] if client else AGENT_NAME


def main(argv: list[str] | None = None) -> int:
    """Serve one ACP client on stdin/stdout until it hangs up."""
    agent: Any = DataAgentACP()  # structurally an acp.Agent, without its optional methods
    asyncio.run(acp.run_agent(agent))
    return 0
