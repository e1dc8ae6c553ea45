"""One handle on the kernel a turn works with: what it holds, and how to copy it.

Every entry point gives ``turn.prepare`` a handle and gets the same things
back: the DataFrame schemas, the active cell's plots described, and a tree of
confined copies (or the reason there is none). The handles differ only in
how they reach the kernel:

- ``ClientHandle``: a kernel of this server's machine, through a kernel
  client; copies over Unix sockets (``transport`` "local", the fastest);
- ``ChannelHandle``: a kernel reached only through the kernel protocol (a
  kernel gateway's); the copies' client runs in the kernel and is driven
  over comm messages (``kernel.channel``, ``kernel.relay``);
- ``NamespaceHandle``: the kernel this code runs in (the ``%%agent`` magic);
- ``BlockingClientHandle``: a kernel started by a benchmark (blocking client);
- ``NoKernel``: none to use, with the reason in words.

The API is synchronous: ``turn.prepare`` runs in a worker thread (the
server's) or in the kernel (the magic's). ``ClientHandle`` runs its async
client's calls on the event loop that owns it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..inkernel.schema import FrameSchema
from ..results import Limits
from ..tree import CopyTree

#: How an inspection ended: read; the schema step failed though the kernel
#: answered; the kernel did not answer in time; the user chose not to wait;
#: the kernel stopped while the turn waited; there is no kernel to ask.
InspectStatus = Literal["ok", "schema_failed", "no_answer", "skipped", "stopped", "no_kernel"]


@dataclass(frozen=True)
class Inspection:
    """What a handle read from its kernel for one turn."""

    status: InspectStatus = "ok"
    frames: tuple[FrameSchema, ...] = ()
    plots: tuple[str, ...] = ()  # summaries of the active cell's figures, in output order
    detail: str = ""  # the error, in words, when status is not "ok"
    waited: bool = False  # the kernel was busy first

    @property
    def answered(self) -> bool:
        """The kernel answered: it may be forked."""
        return self.status in ("ok", "schema_failed")


@dataclass(frozen=True)
class InspectAsk:
    """What ``inspect`` reads: the @mentioned frames in full, the active cell's plots."""

    full: tuple[str, ...] = ()
    plot_source: str = ""  # the active cell's code, when it shows plots
    plot_count: int = 0
    max_frames: int = 10
    max_columns: int = 20
    time_limit_s: float = 2.0  # for the kernel-side inspection itself


def _texts(found: Any) -> tuple[str, ...]:
    """The plot summaries a kernel returned (``plots.request_code``), strings only."""
    return tuple(t for t in found if isinstance(t, str)) if isinstance(found, list) else ()


class KernelHandle:
    """Everything a turn needs from one kernel."""

    transport = "local"  # what copies travel over: "local" | "kernel channel" | "in process"
    notebook_dir: str | None = None
    #: Another kernel re-running the notebook's cells may stand in when fork is refused.
    replay_allowed = True

    def why_no_copies(self) -> str:
        """Why this handle cannot fork its kernel ("" when it can)."""
        return ""

    def inspect(self, ask: InspectAsk, *, waiting: Callable[[], None] | None = None,
                give_up: Callable[[], bool] | None = None) -> Inspection:
        """Read the kernel; ``waiting`` is called once if it is busy, ``give_up``
        polled while it is (True: stop waiting, status "skipped")."""
        raise NotImplementedError

    def fork(self, limits: Limits, max_live: int) -> CopyTree:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the handle holds (not the copies: the turn closes those)."""


class NoKernel(KernelHandle):
    """No kernel to read or copy: ``reason`` says why (no kernel running, live state off...).

    ``message``/``state``/``kind``: the event that says so, when not the usual
    "<reason>: the turn uses the notebook text alone" progress.
    """

    transport = "none"
    replay_allowed = False

    def __init__(self, reason: str, *, message: str = "", state: str = "no_kernel",
                 kind: str = "progress") -> None:
        self.reason = reason
        self.message = message
        self.state = state
        self.kind = kind
        self.status: InspectStatus = "no_kernel"

    def why_no_copies(self) -> str:
        return self.reason

    def inspect(self, ask: InspectAsk, *, waiting=None, give_up=None) -> Inspection:
        return Inspection(status=self.status, detail=self.reason)


class NamespaceHandle(KernelHandle):
    """The kernel this code runs in (the magic): its namespace, forked in place."""

    transport = "in process"

    def __init__(self, namespace: dict, *, notebook_dir: str | None = None,
                 wipe: Sequence[str | None] = (), limits: Limits | None = None) -> None:
        self.namespace = namespace
        self.notebook_dir = notebook_dir or os.getcwd()
        self.wipe = [w for w in wipe if w]
        self.limits = limits  # the magic's own (tests), else the turn's

    def inspect(self, ask: InspectAsk, *, waiting=None, give_up=None) -> Inspection:
        from .. import plots
        from ..inkernel.schema import inspect_namespace

        frames = inspect_namespace(self.namespace, max_frames=ask.max_frames,
                                   max_columns=ask.max_columns, full=ask.full)
        found: list = []
        if ask.plot_count:
            names = plots.cell_names(ask.plot_source)
            found = plots.summaries(self.namespace, names, ask.plot_count)
        return Inspection(frames=tuple(frames), plots=_texts(found))

    def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from ..forktree.snapshot import SnapshotTree

        return SnapshotTree.from_current_kernel(notebook_dir=self.notebook_dir,
                                                limits=self.limits or limits, max_live=max_live,
                                                wipe=self.wipe)


class ClientHandle(KernelHandle):
    """A kernel of this machine reached through an async client living on ``loop``.

    ``alive`` (a coroutine function) says whether the kernel still runs, so
    a turn waiting behind a busy kernel stops waiting for a dead one.
    """

    transport = "local"

    def __init__(self, kc: Any, loop: asyncio.AbstractEventLoop, *, notebook_dir: str | None,
                 alive: Callable[[], Any] | None = None, wait_notice_s: float = 1.0,
                 wait_timeout_s: float = 600.0, fork_timeout_s: float = 60.0) -> None:
        self.kc = kc
        self.loop = loop
        self.notebook_dir = notebook_dir
        self.alive = alive
        self.wait_notice_s = wait_notice_s
        self.wait_timeout_s = wait_timeout_s
        self.fork_timeout_s = fork_timeout_s

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def inspect(self, ask: InspectAsk, *, waiting: Callable[[], None] | None = None,
                give_up: Callable[[], bool] | None = None) -> Inspection:
        import concurrent.futures

        from .. import plots, rpc
        from ..inkernel.schema import KernelDidNotAnswer, SchemaInspectionError, inspect_kernel

        task = self._run(inspect_kernel(self.kc, timeout=self.wait_timeout_s, time_limit=ask.time_limit_s,
                                        max_frames=ask.max_frames, max_columns=ask.max_columns,
                                        full=ask.full))
        waited = False
        try:
            while True:
                try:
                    frames = task.result(timeout=1.0 if waited else self.wait_notice_s)
                    break
                except concurrent.futures.TimeoutError:
                    pass
                if give_up is not None and give_up():
                    return Inspection(status="skipped", waited=waited)
                if not waited:
                    waited = True
                    if waiting is not None:
                        waiting()
                if self.alive is not None and not self._run(self.alive()).result():
                    return Inspection(status="stopped", waited=waited)
        except KernelDidNotAnswer as exc:
            return Inspection(status="no_answer", detail=str(exc), waited=waited)
        except SchemaInspectionError as exc:
            return Inspection(status="schema_failed", detail=str(exc), waited=waited)
        finally:
            task.cancel()
        found: Any = []
        if ask.plot_count:
            try:
                found = self._run(rpc.acall(self.kc, plots.request_code(ask.plot_source, ask.plot_count),
                                            timeout=ask.time_limit_s + 3)).result()
            except rpc.KernelRPCError:
                found = []
        return Inspection(frames=tuple(frames), plots=_texts(found), waited=waited)

    def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from ..forktree.snapshot import SnapshotTree

        return self._run(SnapshotTree.from_kernel_client(
            self.kc, notebook_dir=self.notebook_dir, limits=limits, max_live=max_live,
            timeout=self.fork_timeout_s)).result()

    def close(self) -> None:
        kc, self.kc = self.kc, None
        if kc is not None:
            self.loop.call_soon_threadsafe(kc.stop_channels)


class ChannelHandle(ClientHandle):
    """A kernel reached only through the kernel protocol: copies over its own channels.

    Its client must have IOPub started (``open_client(km, iopub=True)``):
    the relay's replies come there. The copies are the kernel's host's, so
    the replay fallback (a kernel on this machine) is not offered: the cells
    may read files only that host has.
    """

    transport = "kernel channel"
    replay_allowed = False

    def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from .channel import ChannelTree

        return self._run(ChannelTree.open(self.kc, notebook_dir=self.notebook_dir, limits=limits,
                                          max_live=max_live, timeout=self.fork_timeout_s)).result()


class BlockingClientHandle(KernelHandle):
    """A kernel a benchmark started, through its ``BlockingKernelClient``."""

    transport = "local"

    def __init__(self, kc: Any, *, notebook_dir: str | None, timeout: float = 60.0) -> None:
        self.kc = kc
        self.notebook_dir = notebook_dir
        self.timeout = timeout

    def inspect(self, ask: InspectAsk, *, waiting=None, give_up=None) -> Inspection:
        from .. import plots, rpc
        from ..inkernel.schema import inspection_request_code

        try:
            text = rpc.call(self.kc, inspection_request_code(ask.max_frames, ask.max_columns,
                                                             time_limit=ask.time_limit_s, full=ask.full),
                            timeout=self.timeout)
            frames = tuple(FrameSchema.from_dict(d) for d in json.loads(text))
        except rpc.KernelTimeout as exc:
            return Inspection(status="no_answer", detail=str(exc))
        except (rpc.KernelRPCError, ValueError, TypeError, KeyError) as exc:
            return Inspection(status="schema_failed", detail=str(exc))
        found: Any = []
        if ask.plot_count:
            try:
                found = rpc.call(self.kc, plots.request_code(ask.plot_source, ask.plot_count),
                                 timeout=ask.time_limit_s + 3)
            except rpc.KernelRPCError:
                found = []
        return Inspection(frames=frames, plots=_texts(found))

    def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from ..forktree.snapshot import SnapshotTree

        return SnapshotTree.from_blocking_client(self.kc, notebook_dir=self.notebook_dir, limits=limits,
                                                 max_live=max_live, timeout=self.timeout)
