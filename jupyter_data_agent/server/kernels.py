"""The one place the server opens a handle on a kernel, by its id.

Turns (``server.jobs``), outside agents' tries (``server.tries``), the ``@``
variables (``server.variables``), inline completion's schema
(``server.complete``) and MCP's readers all read a kernel through the
``kernel.handle`` this opens. The transport is probed, not configured: a
kernel of this machine is reached with a client of its own and copied over
Unix sockets; one behind a kernel gateway over its own channels
(``kernel.channel``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from tornado import web

from ..kernel.host.client import first_line, kernel_alive, on_another_host, open_client
from ..kernel.host.handle import ChannelHandle, ClientHandle, KernelHandle, NoKernel


@dataclass
class KernelHandles:
    """Handles on this server's kernels (``kernel_manager``'s), with the server's waits."""

    kernel_manager: Any
    root_dir: str | None = None
    wait_notice_s: float = 1.0
    wait_timeout_s: float = 600.0
    fork_timeout_s: float = 60.0

    def manager(self, kernel_id: str | None) -> Any | None:
        """The kernel's manager (None: no such kernel)."""
        if not kernel_id:
            return None
        try:
            return self.kernel_manager.get_kernel(kernel_id)
        except (KeyError, web.HTTPError):  # jupyter_server answers an unknown id with a 404
            return None

    async def open(self, kernel_id: str | None, notebook_path: str = "") -> KernelHandle:
        """A handle on the kernel ``kernel_id`` (``NoKernel`` with the reason when there is none
        to use); the caller closes it. ``notebook_path``: where copies start (its folder)."""
        if not kernel_id:
            return NoKernel("the notebook has no running kernel")
        km = self.manager(kernel_id)
        if km is None or not await kernel_alive(km):
            return NoKernel("the notebook's kernel is not running", message=(
                "The notebook's kernel is not running (it may have died or been shut down): the turn "
                "uses the notebook text alone (no DataFrame schemas, no output previews)."))
        remote = on_another_host(km)
        try:
            kc = await open_client(km, iopub=remote, control=remote)
        except Exception as exc:  # noqa: BLE001 -- whatever the client raised (a gateway's websocket handshake), said
            return NoKernel(f"the notebook's kernel could not be reached ({type(exc).__name__}: "
                            f"{first_line(exc)})", message=(
                f"Could not reach the notebook's kernel ({type(exc).__name__}: {first_line(exc)}): the "
                "turn uses the notebook text alone (no DataFrame schemas, no output previews)."))
        kind = ChannelHandle if remote else ClientHandle
        return kind(kc, asyncio.get_running_loop(),
                    # A gateway kernel's files are its host's: its own working directory.
                    notebook_dir=None if remote else self.notebook_dir(notebook_path),
                    alive=lambda: kernel_alive(km), wait_notice_s=self.wait_notice_s,
                    wait_timeout_s=self.wait_timeout_s, fork_timeout_s=self.fork_timeout_s)

    @contextlib.asynccontextmanager
    async def reading(self, kernel_id: str | None) -> AsyncIterator[KernelHandle]:
        """A handle for a short read (variables, a schema), closed after it."""
        handle = await self.open(kernel_id)
        try:
            yield handle
        finally:
            handle.close()

    def notebook_dir(self, notebook_path: str) -> str | None:
        """The notebook's folder on disk, only if it lies inside the server's root."""
        if not self.root_dir:
            return None
        root = os.path.realpath(self.root_dir)
        folder = os.path.realpath(os.path.join(root, os.path.dirname(notebook_path.lstrip("/"))))
        inside = os.path.commonpath([root, folder]) == root and os.path.isdir(folder)
        return folder if inside else root
