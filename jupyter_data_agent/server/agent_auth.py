"""Agent tokens on jupyter_server's own identity provider and authorizer.

The server's identity provider and authorizer (whatever they are: the stock
token, a password, JupyterHub's, a deployment's own) are wrapped, not
replaced. A request that carries an agent token (``store.agent_tokens``)
is the user who made the token, acting through that agent (``AgentUser``),
on the agent routes, and nobody (anonymous) on every other route; every
request without one goes to the server's provider as before. The wrapped
authorizer then lets an agent user through only on the routes an outside
agent needs -- each handler says which of its methods are such
(``agent_access``): the MCP server, starting and following a turn, filing
and reading proposals, reading notebooks as ``read_notebook`` shows them --
and refuses everything else, whatever the server's authorizer would say:
kernels and their channels, ``/api/contents``, sessions, terminals, a
proposal's decision. Under JupyterHub the Hub's scoped API tokens stay the
way in; these tokens are for a server of one's own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.identity import User

from ..store.agent_tokens import PREFIX, AgentToken, AgentTokenStore


@dataclasses.dataclass
class AgentUser(User):
    """The user who made the token, acting through the agent it names."""

    agent: str = ""
    token_id: str = ""


class AgentIdentity:
    """The server's identity provider, with agent tokens in front of it."""

    def __init__(self, inner: Any, store: AgentTokenStore) -> None:
        self.inner = inner
        self.store = store
        self.last_used: dict[str, float] = {}  # token id -> time.time() of its last request

    def __getattr__(self, name: str) -> Any:  # everything else is the server's provider's
        return getattr(self.inner, name)

    async def get_user(self, handler: Any) -> User | None:
        token = self.inner.get_token(handler) or ""
        if not token.startswith(PREFIX):
            return await ensure_async(self.inner.get_user(handler))
        try:
            record = await asyncio.to_thread(self.store.verify, token)
        except ValueError as exc:  # an unreadable token file: said in the log, the request refused
            handler.log.warning("jupyter_data_agent: %s", exc)
            record = None
        if record is None or not agent_route(handler):
            # A wrong or revoked agent token, or a route that is not the agent's: anonymous there
            # (a handler that checks only authentication, as JupyterLab's build, refuses it too).
            return None
        self.last_used[record.id] = time.time()
        handler._token_authenticated = True  # a token, not a browser cookie: no XSRF check
        return agent_user(record)


def agent_route(handler: Any) -> bool:
    """Whether this request's handler and method are open to an agent's token (``agent_access``)."""
    method = "GET" if handler.request.method == "HEAD" else handler.request.method
    return method in getattr(type(handler), "agent_access", frozenset())


def agent_user(record: AgentToken) -> AgentUser:
    return AgentUser(username=record.user, name=record.user, display_name=f"{record.name} (agent)",
                     agent=record.name, token_id=record.id)


class AgentAuthorizer:
    """The server's authorizer, except that an agent user reaches only the agent routes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> Any:
        if isinstance(user, AgentUser):
            if not agent_route(handler):
                return False
            # and never more than the user who made the token may do
            user = User(**{f.name: getattr(user, f.name) for f in dataclasses.fields(User)})
        return self.inner.is_authorized(handler, user, action, resource)


def unwrapped(provider: Any) -> Any:
    """The server's own identity provider behind the agent tokens' wrapper."""
    return provider.inner if isinstance(provider, AgentIdentity) else provider
