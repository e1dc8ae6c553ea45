"""A warm root per kernel: one confined copy of the live kernel, kept while someone can ask.

A fresh copy of a kernel costs one confined fork of it (a silent request
queued behind any running cell, the handshake, Landlock, seccomp, the
cgroup: ~0.6 s at 10 MB of state, +0.65 s per GB), while a child of an
existing copy is a copy-on-write fork of milliseconds. So while anyone can
ask (a try or a turn on the kernel, or the sidebar warming its model, in the
last ``idle_s``), the server keeps one root copy of each such kernel, made
when the kernel goes idle after an execution, and fresh tries fork their copy
from it.

Which state a root holds is known from the kernel's IOPub, which every
client sees: each ``execute_input`` (published for every request that is not
silent, whoever sent it) counts one execution, and the root is stamped with
the count when its fork request was sent. A root is *current* while the count
is unchanged, no cell runs, and the notebook folder's entries are those it
linked; only a current root stands for the live kernel. While a cell runs, a
caller may start from the last root at once, and is told the state's age
(``StateAge``); one that asks for the fresh state waits for the cell. A root
is never made while a cell runs; it is dropped when nobody asked for
``idle_s``, under memory pressure (its own unique memory past the copies'
budget, or the machine short of memory), on a restart (the kernel's pid
changes, or IOPub says it starts) and on shutdown. A root replaced while
copies forked from it are in use stays until the last is released.

A root keeps its namespace's fingerprint (a try's child reports what its
code changed without taking one first) and one child forked ahead, with
its own scratch folder: the next caller takes it at once, and the next
spare is forked in the background (``WarmRoot.child``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..kernel.host.client import kernel_alive, open_client, still_reading
from .fork_ahead import ForkAhead

log = logging.getLogger(__name__)

#: Seconds the kernel stays idle after a cell before a root is made (a Run All goes on first).
SETTLE_S = 0.25
#: Seconds between two looks at every kept root (restart, shutdown, idle time, memory).
TICK_S = 2.0
#: Seconds a server stop waits for a root being made (a fork of a kernel that answers takes ~1 s).
MAKING_WAIT_S = 30.0
#: Percent of the machine's memory in use past which every root is dropped.
MEMORY_PRESSURE_PERCENT = 90.0

#: Opens a root copy of a kernel: (kernel id, notebook path) -> (``turn.Copies``, its ``KernelHandle``).
OpenRoot = Callable[[str, str], Awaitable[tuple[Any, Any]]]
Say = Callable[[str], None]


@dataclass(frozen=True)
class StateAge:
    """What a copy made from a root stands for, when that is not the live kernel's state now."""

    as_of: float  # epoch seconds: the live kernel's state then (its last cell had ended)
    running: bool  # a cell runs in the live kernel now
    executions_since: int  # cells started in the live kernel since (the running one included)
    note: str  # in words, for the caller

    def to_json(self) -> dict[str, Any]:
        return {
            "as_of": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.as_of)),
            "running": self.running,
            "executions_since": self.executions_since,
            "note": self.note,
        }


@dataclass(eq=False)
class WarmRoot:
    """One confined copy of a kernel after its ``generation``-th execution."""

    kernel_id: str
    copies: Any  # turn.Copies: its tree's root is the copy
    kernel: Any  # the KernelHandle it was forked through (a channel tree talks through it)
    generation: int
    as_of: float  # epoch seconds the fork request was sent (the kernel was idle)
    last_cell_end: float | None  # epoch seconds the last cell it holds ended, when seen
    kernel_pid: int | None
    folder_stamp: int | None  # the notebook folder's mtime (its entries are linked in scratch)
    leases: int = 0
    retired: bool = False
    closed: bool = False
    ahead: ForkAhead = field(init=False, repr=False)  # its children, one forked ahead

    def __post_init__(self) -> None:
        # first the root's fingerprint (an empty cell that reports the namespace): its children
        # report what their code changed without taking one first
        self.ahead = ForkAhead(self.node, own_scratch=True, first=lambda: self.node.exec("", namespace=True))

    @property
    def node(self) -> Any:
        return self.copies.executor

    def child(self, refill: bool = True) -> Any:
        """A child copy with a scratch folder of its own (blocking: call it off the loop), forked
        ahead when the last caller left one (``ForkAhead.take``)."""
        return self.ahead.take(refill)

    @property
    def confinement(self) -> Any:
        return self.copies.confinement

    def close(self) -> None:
        """End the copy and its descendants; release the kernel handle (any thread)."""
        try:
            self.ahead.close()
            self.copies.close()
        except Exception:  # the handle is released either way
            log.warning("closing a warm root failed", exc_info=True)
        finally:
            self.kernel.close()


@dataclass(eq=False)
class Lease:
    """A caller's use of a root: it forks its copies from ``root.node``; released once."""

    root: WarmRoot
    age: StateAge | None  # None: the root is the live kernel's state now
    released: bool = False


@dataclass(frozen=True)
class WarmRootStats:
    kernel_id: str
    generation: int  # executions the root holds
    live_generation: int  # executions the live kernel has seen
    running: bool
    age_s: float
    unique_bytes: int | None  # the root's own memory (USS), counted against the copies' budget
    leases: int
    spares: int  # children forked ahead, kept or being readied (``fork_ahead``)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id,
            "generation": self.generation,
            "live_generation": self.live_generation,
            "current": self.generation == self.live_generation and not self.running,
            "running": self.running,
            "age_s": round(self.age_s, 3),
            "unique_bytes": self.unique_bytes,
            "leases": self.leases,
            "spares": self.spares,
        }


@dataclass(eq=False)
class _Watch:
    """What the server follows of one kernel while someone can ask."""

    kernel_id: str
    notebook_path: str
    asked: float  # monotonic
    generation: int = 0
    running: bool = False
    running_parent: str | None = None
    last_end: float | None = None  # epoch seconds the last execution ended
    root: WarmRoot | None = None
    making: asyncio.Future | None = None
    listener: asyncio.Task | None = None
    kc: Any = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class WarmRoots:
    """The warm roots of this server's kernels (event-loop API; see the module doc)."""

    def __init__(
        self,
        kernel_manager: Any,
        open_root: OpenRoot,
        *,
        idle_s: float = 600.0,
        notebook_dir: Callable[[str], str | None] = lambda _path: None,
    ) -> None:
        self.kernel_manager = kernel_manager
        self.open_root = open_root
        self.idle_s = idle_s
        self.notebook_dir = notebook_dir
        self.watches: dict[str, _Watch] = {}
        self.dropped: dict[str, str] = {}  # kernel id -> why its last root went (stats, tests)
        self._reaper: asyncio.Task | None = None
        self._closing = False
        self._open: set[WarmRoot] = set()  # every root not closed yet, retired ones with leases too
        self._closes: set[asyncio.Future] = set()  # closes under way (a thread each)

    # -- public API ------------------------------------------------------------------
    async def acquire(
        self, kernel_id: str, notebook_path: str, *, fresh: bool = False, say: Say = lambda _what: None
    ) -> Lease:
        """A lease on the kernel's root: current, else (a cell runs, ``fresh`` False) the last one
        with its age; otherwise one made now, after the running cell when ``fresh``. Raises what
        making a root raised (``open_root``'s errors)."""
        w = await self.watch(kernel_id, notebook_path)
        for _ in range(4):
            self._check_restart(w)
            root = w.root
            if root is not None and self._current(w, root):
                return self._lease(root, None)
            if w.running and root is not None and not fresh:
                age = self._age(w, root)
                say(age.note)
                return self._lease(root, age)
            if w.running:
                say(
                    "waiting for the cell running in the notebook's kernel to end (fresh state asked)"
                    if fresh
                    else "waiting for the notebook's kernel: a cell is running in it, the copy is made when it ends"
                )
                await self._wait_idle(w)
                continue
            say("copying the notebook's live kernel")
            await self._make(w)
        root = w.root
        if root is None:
            raise RuntimeError("the kernel's state kept changing while its copy was made")
        return self._lease(root, self._age(w, root))

    def release(self, lease: Lease) -> None:
        """The caller's copies from ``lease`` are closed: a retired root with no lease left ends."""
        if lease.released:
            return
        lease.released = True
        root = lease.root
        root.leases -= 1
        if root.retired and root.leases <= 0:
            self._close_soon(root)

    async def watch(self, kernel_id: str, notebook_path: str = "") -> _Watch:
        """Follow ``kernel_id`` (someone can ask now): its IOPub is read from here on."""
        self._start_reaper()
        w = self.watches.get(kernel_id)
        if w is not None and w.kc is not None and not still_reading(w.kc):  # deaf: executions unseen
            await self.drop(kernel_id, "the kernel's messages stopped coming (its websocket closed)")
            w = None
        if w is None:
            w = self.watches[kernel_id] = _Watch(kernel_id, notebook_path, time.monotonic())
            w.idle.set()
            km = self._manager(kernel_id)
            w.running = getattr(km, "execution_state", None) == "busy"
            if w.running:
                w.idle.clear()
            try:
                w.kc = await open_client(km, iopub=True)
            except Exception:
                self.watches.pop(kernel_id, None)
                raise
            w.listener = asyncio.ensure_future(self._listen(w))
        w.asked = time.monotonic()
        w.notebook_path = notebook_path or w.notebook_path
        return w

    def touch(self, kernel_id: str) -> None:
        """Someone can ask on this kernel (the sidebar warming): keep its root."""
        w = self.watches.get(kernel_id)
        if w is not None:
            w.asked = time.monotonic()

    async def drop(self, kernel_id: str, why: str) -> None:
        """Stop following the kernel; its root ends once no copy forked from it is in use."""
        w = self.watches.pop(kernel_id, None)
        if w is None:
            return
        self.dropped[kernel_id] = why
        if w.listener is not None:
            w.listener.cancel()
        if w.kc is not None:
            with contextlib.suppress(Exception):
                w.kc.stop_channels()
        w.idle.set()
        self._retire(w)
        if w.making is not None and not w.making.done():
            w.making.cancel()

    def stats(self) -> list[WarmRootStats]:
        """Each kept root; ``unique_bytes`` reads the copy's smaps (call it off the loop)."""
        out = []
        for w in list(self.watches.values()):
            root = w.root
            if root is None:
                continue
            memory = getattr(root.node, "memory", None)
            out.append(
                WarmRootStats(
                    kernel_id=w.kernel_id,
                    generation=root.generation,
                    live_generation=w.generation,
                    running=w.running,
                    age_s=time.time() - root.as_of,
                    unique_bytes=memory() if callable(memory) else None,
                    leases=root.leases,
                    spares=root.ahead.held,
                )
            )
        return out

    async def shutdown(self) -> None:
        """Every root ends, leased ones too, and its kernel client with it, before the loop stops
        (a client left open keeps threads that hold the process at exit)."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
        making = [w.making for w in self.watches.values() if w.making is not None and not w.making.done()]
        if making:  # a root being made is closed as soon as it is (``_closing``); cancelled, its client would stay
            await asyncio.wait(making, timeout=MAKING_WAIT_S)
        for kernel_id in list(self.watches):
            await self.drop(kernel_id, "the server stopped")
        for root in list(self._open):
            self._close_soon(root)
        if self._closes:
            await asyncio.gather(*self._closes, return_exceptions=True)

    # -- state -----------------------------------------------------------------------
    def _current(self, w: _Watch, root: WarmRoot) -> bool:
        return (
            not root.closed
            and not root.retired
            and not w.running
            and root.generation == w.generation
            and root.folder_stamp == self._folder_stamp(w)
        )

    def _age(self, w: _Watch, root: WarmRoot) -> StateAge:
        since = max(0, w.generation - root.generation)
        at = root.last_cell_end or root.as_of
        clock = time.strftime("%H:%M:%S", time.localtime(at))
        what = f"the state after the cell that ended at {clock}" if root.last_cell_end else f"the state of {clock}"
        if w.running:
            more = f" ({since - 1} more cells ran since)" if since > 1 else ""
            note = f"{what}{more}; a cell is running now in the notebook's kernel"
        else:
            note = f"{what}; {since} cells ran since" if since else f"{what}; the notebook's files changed since"
        return StateAge(as_of=at, running=w.running, executions_since=since, note=note)

    def _lease(self, root: WarmRoot, age: StateAge | None) -> Lease:
        root.leases += 1
        return Lease(root, age)

    def _folder_stamp(self, w: _Watch) -> int | None:
        folder = self.notebook_dir(w.notebook_path)
        if not folder:
            return None
        try:
            return os.stat(folder).st_mtime_ns
        except OSError:
            return None

    def _manager(self, kernel_id: str) -> Any | None:
        try:
            return self.kernel_manager.get_kernel(kernel_id)
        except Exception:  # noqa: BLE001 -- KeyError or a 404: no such kernel
            return None

    def _kernel_pid(self, kernel_id: str) -> int | None:
        pid = getattr(getattr(self._manager(kernel_id), "provisioner", None), "pid", None)
        return pid if isinstance(pid, int) else None

    def _check_restart(self, w: _Watch) -> None:
        root = w.root
        if root is not None and root.kernel_pid is not None and self._kernel_pid(w.kernel_id) != root.kernel_pid:
            self._forget(w, "the kernel restarted")

    def _forget(self, w: _Watch, why: str) -> None:
        """The kernel's state is not the root's any more (a restart): drop the root, count anew."""
        self.dropped[w.kernel_id] = why
        self._retire(w)
        w.generation += 1

    # -- IOPub -----------------------------------------------------------------------
    async def _listen(self, w: _Watch) -> None:
        while True:
            try:
                msg = await w.kc.get_iopub_msg()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.debug("warm root: IOPub of %s ended", w.kernel_id, exc_info=True)
                await self.drop(w.kernel_id, "the kernel's messages could not be read")
                return
            self._heard(w, msg)

    def _heard(self, w: _Watch, msg: dict) -> None:
        kind = msg.get("msg_type") or msg.get("header", {}).get("msg_type")
        parent = (msg.get("parent_header") or {}).get("msg_id")
        if kind == "execute_input":
            w.generation += 1
            w.running, w.running_parent = True, parent
            w.idle.clear()
        elif kind == "status":
            state = (msg.get("content") or {}).get("execution_state")
            if state == "idle" and w.running and parent == (w.running_parent or parent):
                w.running, w.running_parent = False, None
                w.last_end = time.time()
                w.idle.set()
                if self._wanted(w):
                    asyncio.ensure_future(self._remake_soon(w))
            elif state in ("starting", "restarting", "dead"):
                w.running, w.running_parent = False, None
                w.idle.set()
                self._forget(w, "the kernel restarted")

    async def _wait_idle(self, w: _Watch) -> None:
        """Until the running cell ends (or the kernel stops: then the fork says why)."""
        while not w.idle.is_set():
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(w.idle.wait(), timeout=1.0)
            km = self._manager(w.kernel_id)
            # Busy before IOPub was read (the server's word): its idle may have come before us.
            unseen = w.running_parent is None and getattr(km, "execution_state", None) == "idle"
            if km is None or unseen or not await kernel_alive(km):
                w.running = False
                w.idle.set()

    # -- making and ending roots -----------------------------------------------------
    def _wanted(self, w: _Watch) -> bool:
        return not self._closing and time.monotonic() - w.asked < self.idle_s and self.watches.get(w.kernel_id) is w

    async def _remake_soon(self, w: _Watch) -> None:
        await asyncio.sleep(SETTLE_S)
        if w.running or not self._wanted(w) or (w.root is not None and self._current(w, w.root)):
            return
        try:
            await self._make(w)
        except Exception as exc:  # noqa: BLE001 -- background work: the next try forks and says why
            log.info("jupyter_data_agent: no warm root for kernel %s: %s", w.kernel_id, exc)

    async def _make(self, w: _Watch) -> None:
        """Make a root now (one at a time per kernel: callers share the one being made)."""
        if w.making is None or w.making.done():
            w.making = asyncio.ensure_future(self._make_root(w))
        await asyncio.shield(w.making)

    async def _make_root(self, w: _Watch) -> None:
        generation, sent = w.generation, time.time()
        last_end, stamp, pid = w.last_end, self._folder_stamp(w), self._kernel_pid(w.kernel_id)
        copies, kernel = await self.open_root(w.kernel_id, w.notebook_path)
        root = WarmRoot(
            kernel_id=w.kernel_id,
            copies=copies,
            kernel=kernel,
            generation=generation,
            as_of=sent,
            last_cell_end=last_end,
            kernel_pid=pid,
            folder_stamp=stamp,
        )
        self._open.add(root)
        if self.watches.get(w.kernel_id) is not w or self._closing:
            root.retired = True
            self._close_soon(root)
            return
        self._retire(w)
        w.root = root
        root.ahead.refill_soon()
        self.dropped.pop(w.kernel_id, None)
        if w.generation != generation and not w.running and self._wanted(w):
            asyncio.ensure_future(self._remake_soon(w))  # a cell ran and ended while it was made

    def _retire(self, w: _Watch) -> None:
        root, w.root = w.root, None
        if root is not None and not root.retired:
            root.retired = True
            if root.leases <= 0:
                self._close_soon(root)
            else:  # its copies in use stay; its spare goes
                asyncio.ensure_future(asyncio.to_thread(root.ahead.close))

    def _close_soon(self, root: WarmRoot) -> None:
        if root.closed:
            return
        root.closed = True
        self._open.discard(root)
        closing = asyncio.ensure_future(asyncio.to_thread(root.close))
        self._closes.add(closing)
        closing.add_done_callback(self._closes.discard)

    # -- housekeeping ----------------------------------------------------------------
    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        while not self._closing and self.watches:
            await asyncio.sleep(TICK_S)
            try:
                await self._tick()
            except Exception:  # housekeeping: the next round tries again
                log.warning("jupyter_data_agent: looking after warm roots failed", exc_info=True)

    async def _tick(self) -> None:
        import psutil

        pressure = psutil.virtual_memory().percent >= MEMORY_PRESSURE_PERCENT
        for w in list(self.watches.values()):
            km = self._manager(w.kernel_id)
            if km is None or not await kernel_alive(km):
                await self.drop(w.kernel_id, "the kernel was shut down")
                continue
            if time.monotonic() - w.asked >= self.idle_s:
                await self.drop(w.kernel_id, f"nobody asked for {self.idle_s:g} s")
                continue
            self._check_restart(w)
            root = w.root
            if root is None:
                continue
            if pressure:
                self.dropped[w.kernel_id] = "the machine is short of memory"
                self._retire(w)
                continue
            budget = getattr(getattr(root.copies, "tree", None), "memory_budget", None)
            memory = getattr(root.node, "memory", None)
            if budget and callable(memory) and (await asyncio.to_thread(memory) or 0) > budget:
                self.dropped[w.kernel_id] = "its own memory passed the copies' budget"
                self._retire(w)
