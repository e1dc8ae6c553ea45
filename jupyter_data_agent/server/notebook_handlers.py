"""``GET notebooks``: the open notebooks, or one as last saved, for an outside agent.

What the ACP agent needs to find the notebook a prompt is about and to send
its cells with the turn, without ``/api/sessions`` or ``/api/contents``,
which an agent's token never opens (``server.agent_auth``). Reading a
notebook needs ``read`` on ``contents``, as ``/api/contents`` does.
"""

from __future__ import annotations

import json
import os

from jupyter_server.auth.decorator import authorized
from tornado import web

from .handlers import AgentAPIHandler
from .notebooks import NotebookUnreadable, normalize, open_notebooks, saved_notebook


class NotebooksHandler(AgentAPIHandler):
    """``GET notebooks``: the open ones with their kernels (and the server's absolute root, for a
    caller that may read contents); ``GET notebooks?path=<path>``: that
    notebook as last saved (nbformat JSON)."""

    agent_access = frozenset({"GET"})  # an outside agent's token may (server.agent_auth)

    @web.authenticated
    @authorized
    async def get(self) -> None:
        path = normalize(self.get_argument("path", ""))
        if not path:
            found = await open_notebooks(self.session_manager)
            listing: dict = {"notebooks": [n.to_json() for n in found]}
            # The server's root as an absolute path, for whoever may read its files: an IDE names
            # notebooks by absolute file URIs, and only the root turns them into server paths.
            root = getattr(self.serverapp, "root_dir", None)
            if root and await self.may("read", "contents"):
                listing["root"] = os.path.realpath(root)
            self.finish(json.dumps(listing))
            return
        if not await self.may("read", "contents"):
            raise web.HTTPError(403, "You may not read files on this server.")
        if not path.endswith(".ipynb"):
            raise web.HTTPError(400, f"{path!r} is not a notebook (.ipynb).")
        try:
            content = await saved_notebook(self.contents_manager, path)
        except FileNotFoundError:
            raise web.HTTPError(404, f"No notebook {path!r} under the server's root.") from None
        except NotebookUnreadable as exc:
            raise web.HTTPError(exc.status, f"Could not read {path!r}: {exc}") from None
        self.finish(json.dumps({"path": path, "content": content}, default=str))
