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
