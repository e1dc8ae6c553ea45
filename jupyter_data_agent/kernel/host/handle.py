"""One handle on a kernel: what it holds, and how to copy it.

Every entry point gives ``turn.prepare`` a handle and gets the same things
back: the DataFrame schemas, the active cell's plots described, and a tree of
confined copies (or the reason there is none). The server's other readers of
a kernel (the ``@`` variables, inline completion's schema, MCP's
``list_variables`` and ``describe_dataframe``) read through a handle too
(``frames``, ``objects``, ``frame_stats``; ``server.kernels`` opens them). The
handles differ only in how they reach the kernel:

- ``ClientHandle``: a kernel of this server's machine, through a kernel
  client; copies over Unix sockets (``transport`` "local", the fastest);
- ``ChannelHandle``: a kernel reached only through the kernel protocol (a
  kernel gateway's); the copies' client runs in the kernel and is driven
  over comm messages (``kernel.channel``, ``kernel.relay``);
- ``EvalHandle``: a kernel reached through a blocking ``call(expression,
  timeout)``: the ``%%agent`` cell holding its kernel while the server runs
  its turn (``server.magic_turns``), or a benchmark's blocking client
  (``BlockingClientHandle``);
- ``NamespaceHandle``: the kernel this code runs in (the standalone magic);
- ``NoKernel``: none to use, with the reason in words.

The API is async: the server awaits it on its own loop, so no thread is
parked on the loop's futures; blocking socket work (a copy's handshake, a
blocking ``call``) runs in ``asyncio.to_thread``. Synchronous callers (the
standalone magic, benchmarks) go through one adapter, ``wait``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .. import rpc
from ..inkernel.schema import FrameSchema
from ..results import Limits
from ..tree import CopyTree

T = TypeVar("T")

#: How an inspection ended: read; the schema step failed though the kernel
#: answered; the kernel did not answer in time; the user chose not to wait;
#: the kernel stopped while the turn waited; there is no kernel to ask.
InspectStatus = Literal["ok", "schema_failed", "no_answer", "skipped", "stopped", "no_kernel"]

#: Seconds between two looks at a busy kernel (the user may give up, the kernel may stop).
POLL_S = 1.0


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


def wait(coro: Coroutine[Any, Any, T]) -> T:
    """The blocking adapter: ``coro`` (a handle's call, ``turn.aprepare``) run to its end from
    synchronous code (the standalone magic, benchmarks).

    Where no event loop runs in this thread (a benchmark, a test, IPython in a terminal): on a
    loop of its own. Inside a running loop (an ipykernel cell: the magic) it is stepped here, at
    once: only a coroutine that never suspends may come, as ``NamespaceHandle``'s never do (the
    kernel forks itself in the thread its cell runs in, never in a helper thread).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a coroutine that waits for an event loop cannot be run inside a running one "
                       "(only an in-process handle's can)")


class KernelHandle:
    """Everything a turn, or a reader of variables, needs from one kernel.

    ``evaluate`` is the one way in (a silent expression, ``kernel.rpc``
    semantics); ``inspect``, ``frames``, ``objects`` and ``frame_stats`` are
    built on it. Calls on one handle go one at a time (one client's replies).
    """

    transport = "local"  # what copies travel over: "local" | "kernel channel" | "in process"
    notebook_dir: str | None = None
    #: Another kernel re-running the notebook's cells may stand in when fork is refused.
    replay_allowed = True
    wait_notice_s = 1.0  # no answer by then: the kernel is busy (``waiting`` is said)
    wait_timeout_s = 600.0  # for a busy kernel to answer a turn's inspection

    def why_no_copies(self) -> str:
        """Why this handle cannot fork its kernel ("" when it can)."""
        return ""

    async def evaluate(self, expression: str, timeout: float) -> Any:
        """The value of ``expression`` in the kernel, read silently (``rpc.KernelTimeout``, else
        ``rpc.KernelRPCError``, when it does not come)."""
        raise rpc.KernelRPCError(self.why_no_copies() or "this handle does not evaluate expressions")

    async def alive(self) -> bool:
        """Whether the kernel still runs (a turn waiting behind a busy one stops for a dead one)."""
        return True

    async def frames(self, timeout: float, *, max_frames: int = 10, max_columns: int = 20,
                     max_value_chars: int = 80, time_limit: float | None = 2.0,
                     full: Sequence[str] = ()) -> list[FrameSchema]:
        """The kernel's DataFrames and Series (``schema.read_frames``: ``KernelDidNotAnswer``,
        ``SchemaInspectionError``)."""
        from ..inkernel.schema import read_frames

        return await read_frames(self.evaluate, timeout, max_frames=max_frames, max_columns=max_columns,
                                 max_value_chars=max_value_chars, time_limit=time_limit, full=full)

    async def objects(self, timeout: float = 3.0) -> list[dict[str, Any]]:
        """Its other variables (``survey.kernel_objects``: ``SurveyError``)."""
        from ..inkernel.survey import kernel_objects

        return await kernel_objects(self.evaluate, timeout=timeout)

    async def frame_stats(self, name: str) -> dict[str, Any] | None:
        """The frame ``name``'s column statistics (``survey.frame_stats``: ``SurveyError``)."""
        from ..inkernel.survey import frame_stats

        return await frame_stats(self.evaluate, name)

    async def inspect(self, ask: InspectAsk, *, waiting: Callable[[], None] | None = None,
                      give_up: Callable[[], bool] | None = None) -> Inspection:
        """Read the kernel for a turn; ``waiting`` is called once if it is busy, ``give_up``
        polled while it is (True: stop waiting, status "skipped")."""
        from .. import plots
        from ..inkernel.schema import KernelDidNotAnswer, SchemaInspectionError

        task = asyncio.ensure_future(self.frames(self.wait_timeout_s, time_limit=ask.time_limit_s,
                                                 max_frames=ask.max_frames, max_columns=ask.max_columns,
                                                 full=ask.full))
        waited = False
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=POLL_S if waited else self.wait_notice_s)
                if done:
                    frames = task.result()
                    break
                if give_up is not None and give_up():
                    return Inspection(status="skipped", waited=waited)
                if not waited:
                    waited = True
                    if waiting is not None:
                        waiting()
                if not await self.alive():
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
                found = await self.evaluate(plots.request_code(ask.plot_source, ask.plot_count),
                                            ask.time_limit_s + 3)
            except rpc.KernelRPCError:
                found = []
        return Inspection(frames=tuple(frames), plots=_texts(found), waited=waited)

    async def fork(self, limits: Limits, max_live: int) -> CopyTree:
        raise NotImplementedError

    async def off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Blocking work around the copies (a replay kernel, closing copies the policy refused):
        in a thread, off the loop."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    def close(self) -> None:
        """Release what the handle holds (not the copies: the turn closes those); any thread."""


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

    async def alive(self) -> bool:
        return False

    async def inspect(self, ask: InspectAsk, *, waiting=None, give_up=None) -> Inspection:
        return Inspection(status=self.status, detail=self.reason)


class NamespaceHandle(KernelHandle):
    """The kernel this code runs in (the magic): its namespace, forked in place.

    Its coroutines never suspend (``wait`` steps them inside the kernel's
    running loop): everything happens in the calling thread, the cell's.
    """

    transport = "in process"

    def __init__(self, namespace: dict, *, notebook_dir: str | None = None,
                 wipe: Sequence[str | None] = (), limits: Limits | None = None) -> None:
        self.namespace = namespace
        self.notebook_dir = notebook_dir or os.getcwd()
        self.wipe = [w for w in wipe if w]
        self.limits = limits  # the magic's own (tests), else the turn's

    async def inspect(self, ask: InspectAsk, *, waiting=None, give_up=None) -> Inspection:
        from .. import plots
        from ..inkernel.schema import inspect_namespace

        frames = inspect_namespace(self.namespace, max_frames=ask.max_frames,
                                   max_columns=ask.max_columns, full=ask.full)
        found: list = []
        if ask.plot_count:
            names = plots.cell_names(ask.plot_source)
            found = plots.summaries(self.namespace, names, ask.plot_count)
        return Inspection(frames=tuple(frames), plots=_texts(found))

    async def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from ..forktree.snapshot import SnapshotTree

        return SnapshotTree.from_current_kernel(notebook_dir=self.notebook_dir,
                                                limits=self.limits or limits, max_live=max_live,
                                                wipe=self.wipe)

    async def off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """At once: the magic's cell blocks anyway, and there is no loop of ours to keep free."""
        return fn(*args, **kwargs)


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
        self.loop = loop  # the client's: ``close`` may come from another thread
        self.notebook_dir = notebook_dir
        self._alive = alive
        self.wait_notice_s = wait_notice_s
        self.wait_timeout_s = wait_timeout_s
        self.fork_timeout_s = fork_timeout_s

    async def evaluate(self, expression: str, timeout: float) -> Any:
        if self.kc is None:
            raise rpc.KernelRPCError("the kernel's client was closed")
        return await rpc.acall(self.kc, expression, timeout=timeout)

    async def alive(self) -> bool:
        return True if self._alive is None else bool(await self._alive())

    async def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from ..forktree.snapshot import SnapshotTree

        return await SnapshotTree.from_kernel_client(self.kc, notebook_dir=self.notebook_dir, limits=limits,
                                                     max_live=max_live, timeout=self.fork_timeout_s)

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

    async def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from .channel import ChannelTree

        return await ChannelTree.open(self.kc, notebook_dir=self.notebook_dir, limits=limits,
                                      max_live=max_live, timeout=self.fork_timeout_s)


class EvalHandle(KernelHandle):
    """A kernel reached by evaluating expressions in it (``kernel.rpc`` semantics): ``call(code,
    timeout)`` returns the expression's value, blocking (so it runs in a thread). A benchmark's
    blocking client, or the ``%%agent`` cell that holds its kernel while the server runs its turn
    (``server.magic_turns``)."""

    transport = "local"

    def __init__(self, call: Callable[[str, float], Any], *, notebook_dir: str | None,
                 timeout: float = 60.0) -> None:
        self.call = call
        self.notebook_dir = notebook_dir
        self.timeout = timeout
        self.wait_timeout_s = timeout

    async def evaluate(self, expression: str, timeout: float) -> Any:
        return await asyncio.to_thread(self.call, expression, timeout)

    async def fork(self, limits: Limits, max_live: int) -> CopyTree:
        from ..forktree.snapshot import SnapshotTree

        return await asyncio.to_thread(SnapshotTree.from_call, self.call, notebook_dir=self.notebook_dir,
                                       limits=limits, max_live=max_live, timeout=self.timeout)


class BlockingClientHandle(EvalHandle):
    """A kernel a benchmark started, through its ``BlockingKernelClient``."""

    def __init__(self, kc: Any, *, notebook_dir: str | None, timeout: float = 60.0) -> None:
        super().__init__(lambda code, t: rpc.call(kc, code, timeout=t), notebook_dir=notebook_dir,
                         timeout=timeout)
        self.kc = kc
