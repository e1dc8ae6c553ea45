"""``agent-tokens``: the browser lists, makes and revokes the user's agent tokens.

The same store as ``jupyter-data-agent token`` (``store.agent_tokens``). An
agent's own token never reaches these routes (they have no ``agent_access``):
an agent cannot make itself another token or revoke the user's.
"""

from __future__ import annotations

import asyncio
import json

from jupyter_server.auth.decorator import authorized
from tornado import web

from .agent_auth import AgentIdentity
from .handlers import AgentAPIHandler


class AgentTokensHandler(AgentAPIHandler):
    """``GET agent-tokens`` (each with its last use), ``POST agent-tokens`` ``{"name": ...}`` (201:
    the token, shown this once), ``DELETE agent-tokens/<id>``."""

    def _identity(self) -> AgentIdentity:
        return self.agent_state.agent_identity

    def _listing(self) -> str:
        identity = self._identity()
        return json.dumps({"tokens": [{"id": t.id, "name": t.name, "created": t.created,
                                       "last_used": identity.last_used.get(t.id)}
                                      for t in identity.store.tokens()]})

    @web.authenticated
    @authorized
    async def get(self, token_id: str = "") -> None:
        self.finish(await asyncio.to_thread(self._listing))

    @web.authenticated
    @authorized
    async def post(self, token_id: str = "") -> None:
        body = self.get_json_body()
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str):
            raise web.HTTPError(400, 'Give the agent\'s name: {"name": "Claude Code"}.')
        try:
            record, token = await asyncio.to_thread(self._identity().store.create, name,
                                                    self.current_user.username)
        except ValueError as exc:
            raise web.HTTPError(400, str(exc)) from None
        self.set_status(201)
        self.finish(json.dumps({"id": record.id, "name": record.name, "created": record.created,
                                "token": token}))

    @web.authenticated
    @authorized
    async def delete(self, token_id: str = "") -> None:
        try:
            await asyncio.to_thread(self._identity().store.revoke, token_id)
        except ValueError as exc:
            raise web.HTTPError(404, str(exc)) from None
        self.set_status(204)
        self.finish()
