"""``jupyter-data-agent acp``: the Data Agent as an Agent Client Protocol agent over stdio.

An ACP client (jupyter-ai's persona host, Zed, JetBrains IDEs) starts this
process and talks JSON-RPC on its stdin/stdout (the ``agent-client-protocol``
SDK). The agent holds no model and no kernel: each prompt becomes one turn
of a running Jupyter server's pipeline, through its REST API, exactly as the
sidebar asks for one (``POST turns``, the job's events); progress streams as
ACP thoughts, runs in kernel copies as tool calls, an analysis's plan as the
ACP plan (``acp_updates``), the reply is the chosen candidate's code and its
answer, and that candidate becomes a proposal in the notebook (``POST proposals``), behind
the same approval gate: only the user's Accept in JupyterLab changes the
notebook or runs code in the live kernel.

The server: ``JUPYTER_DATA_AGENT_SERVER_URL`` and ``JUPYTER_DATA_AGENT_TOKEN``
(else ``JUPYTER_SERVER_URL``/``JUPYTER_TOKEN``), else the one Jupyter server
running on this machine for this user (its runtime file). The notebook: a
``.ipynb`` the prompt links (a resource link, or ``@path.ipynb`` in the
text; absolute paths and file URIs are resolved against the server's root),
else the session's one open notebook. What goes wrong (a refused token, a
server that is down, a notebook outside the root) is said in words as the
agent's message, never as a bare JSON-RPC error, and never with the token.

The SDK: 0.11 (what Jupyter AI 3.2 pins) or 0.12. What this module and
``acp_updates`` use (the ``Agent`` methods, ``run_agent``, the schema models
and update helpers) is the same in both, so no line here asks which;
``tests/test_acp.py`` runs in both environments.
"""


from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, unquote, urlparse

import acp
from acp import schema

from ..server.models import JobPoll
from ..turn.report import TurnReport
from .acp_updates import STRATEGY_WORDS, TurnView, available_commands

AGENT_NAME = "Data Agent (ACP)"
StopReason = Literal["end_turn", "cancelled"]
POLL_S = 0.3
TURN_TIMEOUT_S = 900.0
_AT_NOTEBOOK = re.compile(r"@(\S+\.ipynb)")


class ServerNotFound(RuntimeError):
    """No Jupyter server to send turns to: said to the ACP client in words."""


class Unusable(RuntimeError):
    """What stops a turn, in words for the user (said as the agent's message; the turn ends)."""


class Cancelled(RuntimeError):
    """The client cancelled the prompt: the turn ends with stop reason ``cancelled``."""


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
    cancelled: bool = False
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
        self._tasks: set[asyncio.Task] = set()

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
        # The slash commands go out once the client knows the session (after this reply).
        task = asyncio.get_running_loop().create_task(self._offer_commands(session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return schema.NewSessionResponse(session_id=session_id)

    async def _offer_commands(self, session_id: str) -> None:
        await asyncio.sleep(0)
        await self._conn.session_update(session_id, available_commands())

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            return
        session.cancelled = True
        if session.job_id:
            with contextlib.suppress(Exception):  # the turn may have ended meanwhile
                await self._call("POST", f"jupyter-data-agent/jobs/{session.job_id}/cancel", {})

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> schema.PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise acp.RequestError.invalid_params({"session_id": "unknown session"})
        session.cancelled = False
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
            stop = "end_turn"
        except Unusable as exc:
            await self._say(session_id, self._scrub(str(exc)))
            stop = "end_turn"
        except Cancelled:
            stop = "cancelled"
        finally:
            session.job_id = None
        if session.cancelled:  # a cancel wins over whatever the turn was doing (ACP: stop reason cancelled)
            stop = "cancelled"
        if stop == "cancelled":  # in a word: the user asked for it, nothing failed
            await self._think(session_id, "Cancelled.")
        return schema.PromptResponse(stop_reason=stop)

    # -- one turn -------------------------------------------------------------------------
    async def _turn(self, session_id: str, session: Session, intent: str, strategy: str | None,
                    links: list[str]) -> StopReason:
        path, kernel_id = await self._notebook(session, links)
        if path is None:
            await self._say(session_id, kernel_id or "Name the notebook with @path.ipynb.")
            return "end_turn"
        if kernel_id is None:
            await self._think(session_id, f"{path} is not open in JupyterLab: the turn reads its saved text "
                                          "only, without its kernel's data.")
        notebook = (await self._call("GET", f"jupyter-data-agent/notebooks?path={quote(path)}",
                                     notebook=path))["content"]
        cells = notebook.get("cells", [])
        body: dict[str, Any] = {"version": 1, "notebook_path": path, "cells": cells, "intent": intent,
                                "kernel_id": kernel_id, "active_index": max(0, len(cells) - 1) if cells else None,
                                "metadata": notebook.get("metadata", {}), "source": "acp",
                                "agent": _agent_label(self._client_name)}
        if strategy:
            body["strategy"] = strategy
        if session.cancelled:
            raise Cancelled()
        accepted = await self._call("POST", "jupyter-data-agent/turns", body)
        session.job_id = job_id = accepted["job_id"]
        if session.cancelled:  # cancelled while the turn was being asked for
            await self.cancel(session_id)
        view, report = TurnView(job_id), TurnReport()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TURN_TIMEOUT_S
        while loop.time() < deadline:
            poll = JobPoll.model_validate(await self._call(
                "GET", f"jupyter-data-agent/jobs/{job_id}?after={report.seen}")).model_dump(mode="json")
            for event in poll["events"]:
                for update in view.updates(event):
                    await self._conn.session_update(session_id, update)
                report.read([event])
            if report.status in ("error", "cancelled") or poll["status"] in ("error", "cancelled"):
                if report.status == "cancelled" or poll["status"] == "cancelled" or session.cancelled:
                    raise Cancelled()
                raise Unusable(f"The turn failed: {report.message}")
            if report.finished:
                break
            await asyncio.sleep(POLL_S)
        if not report.finished:
            await self._say(session_id, "The turn took too long; it goes on in JupyterLab's sidebar.")
            return "end_turn"
        candidate = report.chosen_candidate
        best, answer = (candidate or {}).get("code", ""), report.answer_text or ""
        if not best:
            await self._say(session_id, answer or "No candidate came out of this turn.")
            return "end_turn"
        proposal = (await self._call("POST", "jupyter-data-agent/proposals", {
            "version": 1, "notebook_path": path, "kind": "cell", "code": best,
            "explanation": intent[:4000], "agent": _agent_label(self._client_name),
            "after_cell_id": cells[-1].get("id") if cells else None, "cell_id": None, "try_handle": None,
        }))["proposal"]
        said = f"**Answer:** {answer}\n\n" if answer else ""
        await self._say(session_id, f"{said}```python\n{best}\n```\n\nProposed as a new cell in {path}: accept or "
                                    f"reject it in JupyterLab. (proposal {proposal['id']})")
        return "end_turn"

    async def _notebook(self, session: Session, links: list[str]) -> tuple[str | None, str | None]:
        """(path relative to the server's root, its kernel id) of the notebook the prompt is about."""
        listing = await self._call("GET", "jupyter-data-agent/notebooks")
        open_ = {n["path"]: n.get("kernel_id") for n in listing["notebooks"]}
        for link in links:
            path = _under_root(link, listing.get("root"), self._server.url if self._server else "")
            for open_path, kernel_id in open_.items():
                if path == open_path or (listing.get("root") is None and (
                        path.endswith("/" + open_path) or open_path.endswith("/" + path.lstrip("/")))):
                    return open_path, kernel_id
            return path.lstrip("/"), None  # not open: the notebook text alone
        if len(open_) == 1:
            return next(iter(open_.items()))
        names = ", ".join(sorted(open_)) or "none is open"
        return None, f"Name the notebook with @path.ipynb (open notebooks: {names})."

    # -- plumbing --------------------------------------------------------------------------------
    async def _say(self, session_id: str, text: str) -> None:
        await self._conn.session_update(session_id, acp.update_agent_message_text(text))

    async def _think(self, session_id: str, text: str) -> None:
        await self._conn.session_update(session_id, acp.update_agent_thought_text(text + "\n"))

    def _scrub(self, text: str) -> str:
        from ..llm.scrub import Scrubber

        return Scrubber([self._server.token if self._server else None]).text(text)

    async def _call(self, method: str, path: str, body: Any = None, *, notebook: str | None = None) -> Any:
        """The server's JSON reply; what fails is raised as ``Unusable`` in words (no token in them).
        ``notebook``: the notebook this call reads, named in a 404's words."""
        import httpx

        if self._server is None:
            self._server = Server.from_environment()
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=60.0, headers={"Authorization": f"token {self._server.token}"})
        url = self._server.url
        try:
            reply = await self._http.request(method, f"{url}/{path}", json=body)
        except httpx.TransportError as exc:
            raise Unusable(f"The Data Agent cannot reach JupyterLab at {url}: {type(exc).__name__}: "
                           f"{str(exc) or 'no answer'}. Is JupyterLab running there? (JUPYTER_DATA_AGENT_SERVER_URL)"
                           ) from None
        if reply.status_code < 400:
            return reply.json() if reply.content else {}
        try:
            detail = str(reply.json().get("message") or "")
        except ValueError:
            detail = ""
        status = reply.status_code
        if status == 401 or (status == 403 and not detail.startswith("You may not")):
            raise Unusable(f"The server at {url} refused the token ({status}): check JUPYTER_DATA_AGENT_TOKEN "
                           "(the server's token, or an agent token from `jupyter-data-agent token create`).")
        if status == 404 and notebook:
            raise Unusable(f"There is no notebook {notebook} under the server's root: open it in JupyterLab, "
                           "or name it by its path from the server's root.")
        raise Unusable(f"JupyterLab answered {status}: {detail or reply.reason_phrase}")


def _under_root(link: str, root: str | None, url: str) -> str:
    """``link`` as a path under the server's root: an absolute one (a file URI's, ``@/abs/x.ipynb``)
    made relative to ``root``; outside it, ``Unusable`` in words."""
    if not link.startswith("/") or root is None:
        return link
    root = posixpath.normpath(root)
    absolute = posixpath.normpath(os.path.realpath(link) if os.path.exists(link) else link)
    if absolute == root or not absolute.startswith(root.rstrip("/") + "/"):
        raise Unusable(f"{link} is outside the root of the Jupyter server at {url} ({root}): open the "
                       "notebook from a JupyterLab started in a folder that holds it.")
    return posixpath.relpath(absolute, root)


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
