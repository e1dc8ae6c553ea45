"""Streamable HTTP on the Jupyter server's own port: a Tornado handler in front of the SDK's ASGI app.

The MCP SDK speaks Streamable HTTP as an ASGI app (``StreamableHTTPSessionManager``);
Jupyter serves Tornado. ``MCPHandler`` authenticates and authorizes the
request like every handler of this package (the token or the identity
provider, then the authorizer), turns it into an ASGI scope, runs the app,
and streams what it sends back, flushing each chunk (an SSE stream reaches
the client as it is written). The JSON-RPC is the SDK's, not ours.

A client that goes away is noticed (``on_connection_close``): the call in
flight closes its kernel copy, and when the client kept an MCP session, that
session's copies go too (it is not coming back for them). Ending a session
(``DELETE``) closes its copies as well.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import MutableMapping
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from tornado import web
from tornado.iostream import StreamClosedError

from ..server.handlers import AUTH_RESOURCE, AgentMixin
from .caller import SCOPE_KEY, Caller
from .tools import build_server

log = logging.getLogger(__name__)

SERVICE_KEY = "jupyter_data_agent_mcp"
SESSION_HEADER = "Mcp-Session-Id"
#: Bytes of one MCP request body (a try_code's code is bounded far below this, in words).
MAX_BODY_BYTES = 4 << 20
#: Ended sessions remembered with why they ended (so a client that comes back is told).
MAX_ENDED = 10_000


class MCPService:
    """The MCP server and its session manager, run as a task on the Jupyter server's loop.

    The SDK bounds sessions for everyone together; here each user holds at most
    ``max_sessions_per_user``: a user who opens one more loses their least recently
    used one (and its kernel copies), never another user's."""

    def __init__(self, *, session_idle_timeout: float = 1800.0, max_sessions_per_user: int = 32,
                 max_sessions: int = 1000) -> None:
        self.server = build_server()
        # Jupyter checks the Host and Origin (allow_remote_access, allow_origin): not a second list here.
        self.server.streamable_http_app(
            max_request_body_size=MAX_BODY_BYTES, session_idle_timeout=session_idle_timeout,
            max_sessions=max_sessions,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        self.manager = self.server.session_manager
        self.max_sessions_per_user = max_sessions_per_user
        self.sessions: dict[str, dict[str, float]] = {}  # owner -> session id -> last used (monotonic)
        self.ended: OrderedDict[str, tuple[str, str]] = OrderedDict()  # session id -> (owner, why it ended)
        self.idle_timeout = session_idle_timeout
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()

    def _open(self) -> dict:
        # The SDK's own table of open sessions (it has no public one): id -> transport.
        return self.manager._server_instances

    def touch(self, owner: str, session: str) -> None:
        mine = self.sessions.get(owner)
        if mine is not None and session in mine:
            mine[session] = time.monotonic()

    def opened(self, owner: str, session: str) -> None:
        self.sessions.setdefault(owner, {})[session] = time.monotonic()

    def end(self, owner: str, session: str, why: str) -> None:
        """Remember that ``session`` ended and why (bounded: the oldest records go first)."""
        self.sessions.get(owner, {}).pop(session, None)
        self.ended[session] = (owner, why)
        self.ended.move_to_end(session)
        while len(self.ended) > MAX_ENDED:
            self.ended.popitem(last=False)

    def why_ended(self, owner: str, session: str) -> str:
        """Why ``owner``'s session is no longer open, in words (for a request that still names it)."""
        known = self.ended.get(session)
        if known is not None and known[0] == owner:
            return known[1]
        used = self.sessions.get(owner, {}).get(session)
        if used is not None:
            return self._gone_why(used)
        return "this server has no record of it (the server restarted since, or the id is not one it gave)"

    def _gone_why(self, used: float) -> str:
        idle = time.monotonic() - used
        if self.idle_timeout is not None and idle >= self.idle_timeout * 0.95:
            return (f"it was idle {_duration(idle)} (a session ends after {_duration(self.idle_timeout)} "
                    "without requests)")
        return "the server closed it"

    async def make_room(self, owner: str, tries: Any) -> None:
        """Before ``owner`` opens a session: note the ended ones, then end their least recently
        used sessions beyond the bound (the SDK's idle timeout ends the rest)."""
        open_now = self._open()
        for sid, used in list(self.sessions.get(owner, {}).items()):
            if sid not in open_now:
                self.end(owner, sid, self._gone_why(used))
        mine = dict(self.sessions.get(owner, {}))
        while len(mine) >= self.max_sessions_per_user:
            oldest = min(mine, key=mine.__getitem__)
            del mine[oldest]
            transport = open_now.get(oldest)
            if transport is not None:
                await self.manager._discard_session(oldest, transport)
            await tries.close_session(owner, oldest)
            self.end(owner, oldest, f"the server closed it to make room: one user holds at most "
                                    f"{self.max_sessions_per_user} sessions, and you opened another")
        self.sessions[owner] = mine

    async def started(self) -> None:
        """Start the session manager on the first request (the loop runs by then)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        await self._ready.wait()

    async def _run(self) -> None:
        async with self.manager.run():
            self._ready.set()
            await self._stop.wait()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 10)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                log.warning("jupyter_data_agent: the MCP session manager did not stop in time")
            except Exception:  # stopping: said, the server goes on shutting down
                log.warning("jupyter_data_agent: stopping the MCP session manager failed", exc_info=True)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class MCPHandler(AgentMixin, JupyterHandler):
    """``/jupyter-data-agent/mcp``: POST (messages), GET (the server's stream), DELETE (end a session)."""

    auth_resource = AUTH_RESOURCE
    agent_access = frozenset({"GET", "POST", "DELETE"})  # the agent's own route (server.agent_auth)
    caller: Caller | None = None
    _opened: str | None = None  # the session id this request's answer opened

    async def prepare(self, *, _redirect_to_login: bool = False) -> None:
        """A request without a valid token gets 401 with ``WWW-Authenticate`` and a JSON-RPC error
        in words (what MCP clients expect), not a login redirect or an XSRF complaint."""
        try:
            await super().prepare(_redirect_to_login=False)
        except web.HTTPError:
            if self.current_user is not None:
                raise
        if self.current_user is None and not self._finished:
            self._unauthorized()

    def check_xsrf_cookie(self) -> None:
        if getattr(self, "_jupyter_current_user", None) is None:  # unknown yet, or refused in prepare
            return
        super().check_xsrf_cookie()

    def _unauthorized(self) -> None:
        sent = bool(self.identity_provider.get_token(self))
        why = ("The token was not accepted (wrong, revoked, or not one for this server)." if sent else
               "This MCP server needs a token: send 'Authorization: token <TOKEN>'.")
        self.set_status(401)
        self.set_header("WWW-Authenticate", 'Bearer realm="jupyter-data-agent"'
                        + (', error="invalid_token"' if sent else ""))
        self.set_header("Content-Type", "application/json")
        how = (" Under JupyterHub, send a Hub API token (the Hub's Token page) of a user allowed on this "
               "server." if os.environ.get("JUPYTERHUB_API_URL") else
               " Make an agent token with `jupyter-data-agent token create --name <agent>`, or use the "
               "server's (jupyter server list).")
        self.finish(json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": why + how}}))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        await self._serve()

    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self._serve()

    @web.authenticated
    @authorized
    async def delete(self) -> None:
        await self._serve()
        session = self.request.headers.get(SESSION_HEADER)
        if session:
            await self.agent_state.tries.close_session(self.job_owner(), session)
            if self.get_status() < 400:
                self.settings[SERVICE_KEY].end(self.job_owner(), session, "the client ended it (DELETE)")

    def on_connection_close(self) -> None:
        caller = self.caller
        if caller is None or self._finished:
            return
        caller.disconnected.set()
        if self.request.method == "POST" and caller.session:
            asyncio.ensure_future(self.agent_state.tries.close_session(caller.owner, caller.session))

    async def _caller(self) -> Caller:
        return Caller(owner=self.job_owner(), state=self.agent_state, session_manager=self.session_manager,
                      kernel_manager=self.kernel_manager, contents_manager=self.contents_manager,
                      can_execute=await self.may("execute", "kernels"),
                      can_read=await self.may("read", "contents"),
                      session=self.request.headers.get(SESSION_HEADER),
                      token_agent=getattr(self.current_user, "agent", None),
                      secrets=tuple(t for t in (self.identity_provider.get_token(self),
                                                getattr(self.identity_provider, "token", None)) if t))

    async def _serve(self) -> None:
        service: MCPService = self.settings[SERVICE_KEY]
        await service.started()
        self.caller = caller = await self._caller()
        if len(self.request.body or b"") > MAX_BODY_BYTES:
            raise web.HTTPError(413, f"An MCP request may be at most {MAX_BODY_BYTES} bytes.")
        if caller.session and self._handshake_era() and caller.session not in service._open():
            self._session_ended(service.why_ended(caller.owner, caller.session))
            return
        if caller.session:
            service.touch(caller.owner, caller.session)
        elif self.request.method == "POST":  # may open a session: within this user's bound
            await service.make_room(caller.owner, self.agent_state.tries)
        await service.manager.handle_request(self._scope(caller), self._receive(caller), self._send)
        if not caller.session and self._opened:
            service.opened(caller.owner, self._opened)
        if not self._finished:
            self.finish()

    def _handshake_era(self) -> bool:
        """A request of the protocol versions with sessions (2025-*), which the session manager
        routes by session id; later versions keep no session, whatever header comes along."""
        version = self.request.headers.get("Mcp-Protocol-Version")
        return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS

    def _session_ended(self, why: str) -> None:
        """404 (the spec's answer to a session that is gone: the client starts a new one), in words:
        the SDK's bare "Session not found" reads to agents as "expired or never existed"."""
        self.set_status(404)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": f"This MCP session ended: {why}. Start a new session (initialize "
                                       f"without an {SESSION_HEADER} header)."}}))

    def _scope(self, caller: Caller) -> dict[str, Any]:
        req = self.request
        host, _, port = (req.host or "localhost").rpartition(":") if ":" in (req.host or "") else (req.host, "", "")
        return {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": req.method, "scheme": req.protocol, "path": req.path, "raw_path": req.path.encode(),
            "query_string": (req.query or "").encode("latin-1"), "root_path": "",
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in req.headers.get_all()],
            "client": (req.remote_ip or "", 0), "server": (host or "localhost", int(port) if port.isdigit() else 80),
            # The SDK binds a session to the principal that opened it: the Jupyter user.
            "user": AuthenticatedUser(AccessToken(token="jupyter", client_id=caller.owner, scopes=[])),
            SCOPE_KEY: caller,
        }

    def _receive(self, caller: Caller):
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": self.request.body or b"", "more_body": False}
            await caller.disconnected.wait()
            return {"type": "http.disconnect"}

        return receive

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.set_status(message["status"])
            self.clear_header("Content-Type")
            for name, value in message.get("headers", []):
                key = name.decode("latin-1")
                if key.lower() == SESSION_HEADER.lower() and message["status"] < 400:
                    self._opened = value.decode("latin-1")
                if key.lower() != "content-length":  # Tornado sets it (or chunks a stream)
                    self.add_header(key, value.decode("latin-1"))
        elif message["type"] == "http.response.body":
            if self._finished:
                return
            body = message.get("body", b"")
            if body:
                self.write(body)
            if message.get("more_body", False):
                try:
                    await self.flush()
                except StreamClosedError:
                    if self.caller is not None:
                        self.caller.disconnected.set()
            else:
                self.finish()
