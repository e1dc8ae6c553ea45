"""The notebooks open in this server and their kernels, from jupyter_server's session manager.

Outside agents name a notebook by its path; the kernel they reach is the one
the user's browser session runs for that notebook (none: nothing to copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_core.utils import ensure_async


@dataclass(frozen=True)
class OpenNotebook:
    path: str
    kernel_id: str | None
    kernel_name: str | None
    execution_state: str | None  # "idle" | "busy" | "starting" | ... as the kernel manager last saw it

    def to_json(self) -> dict:
        return {"path": self.path, "kernel_id": self.kernel_id, "kernel_name": self.kernel_name,
                "execution_state": self.execution_state}


def normalize(path: str) -> str:
    """A notebook path as the session manager stores it (relative to the root, no leading slash)."""
    return path.strip().lstrip("/")


async def open_notebooks(session_manager: Any) -> list[OpenNotebook]:
    """Every notebook with a session, sorted by path."""
    sessions = await ensure_async(session_manager.list_sessions())
    found = []
    for s in sessions:
        if s.get("type") not in (None, "notebook"):
            continue
        kernel = s.get("kernel") or {}
        found.append(OpenNotebook(path=s.get("path") or "", kernel_id=kernel.get("id"),
                                  kernel_name=kernel.get("name"),
                                  execution_state=kernel.get("execution_state")))
    return sorted(found, key=lambda n: n.path)


async def kernel_of(session_manager: Any, path: str) -> str | None:
    """The kernel id of the notebook at ``path`` (None: not open, or no kernel)."""
    wanted = normalize(path)
    for nb in await open_notebooks(session_manager):
        if normalize(nb.path) == wanted:
            return nb.kernel_id
    return None


class NotebookUnreadable(Exception):
    """The contents manager could not read the notebook for a reason other than its absence."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status  # the contents manager's own HTTP status


async def saved_notebook(contents_manager: Any, path: str) -> dict:
    """The notebook at ``path`` as last saved (nbformat JSON): FileNotFoundError when there is
    none, NotebookUnreadable (its reason) when it cannot be read."""
    from tornado import web

    try:
        model = await ensure_async(contents_manager.get(path, content=True, type="notebook"))
    except web.HTTPError as exc:
        if exc.status_code in (400, 404):
            raise FileNotFoundError(path) from None
        raise NotebookUnreadable(exc.log_message or str(exc), exc.status_code) from None
    return dict(model["content"])
