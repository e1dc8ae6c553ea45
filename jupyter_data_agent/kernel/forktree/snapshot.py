"""Client side of the fork snapshot tree.

A ``SnapshotTree`` is one search's set of kernel copies; each ``Snapshot``
(``snapshot_node``) is one process forked (directly or through its
ancestors) from the user's kernel. ``exec`` runs a cell in that copy,
``fork`` makes a child copy of its current state, ``close`` ends it and its
subtree.

The API is synchronous (blocking sockets, one lock per snapshot so different
snapshots run concurrently from different threads); the Jupyter server calls
it from threads, the ``%%agent`` magic in the kernel.

Trust: a copy runs code the model wrote, so nothing it says about itself is
believed. A copy's pid is the one the kernel attaches to its first frame
(``SO_PASSCRED``), checked to be a child of its parent copy (or, for the
root, of the kernel), and held as a pidfd from then on: every signal goes
through that pidfd, so no pid a copy names can reach a process outside the
turn (``copy_process``). Replies are bounded in bytes before they are read,
must answer the request just sent, and are bounded and scrubbed again once
parsed (``tree.received``); a frame that breaks the protocol ends the copy.

Resources: a cap on live processes per tree and per client process, and a
memory budget on the sum of the snapshots' unique set sizes; when either is
hit the least useful idle leaves are evicted (killed). A node remembers the
cells executed since its parent, so an evicted (or timed-out) node is rebuilt
on demand by forking its nearest live ancestor and replaying those cells.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import threading
import time
from typing import ClassVar, Literal

import psutil

from .. import rpc
from .. import tree as _tree
from ..copy import procs as _procs
from ..protocol import PROTOCOL_VERSION, ProtocolError, pass_credentials
from ..results import Limits, Protections
from ..tree import CapacityError, ForkUnavailable
from ..tree import SnapshotClosed as SnapshotClosed
from ..tree import SnapshotError as SnapshotError
from .copy_process import Channel, gone, open_verified, sender, trusted_cgroup
from .snapshot_node import Snapshot

log = logging.getLogger(__name__)


def _root_expression(notebook_dir: str | None, scratch: str | None, limits: Limits) -> str:
    from .bootstrap import kernel_call  # not in a kernel: this module also runs there (``relay``)

    args = json.dumps({"notebook_dir": notebook_dir, "scratch": scratch,
                       "limits": limits.to_json(), "client_pid": os.getpid()})
    return kernel_call(f"start_root_socket(**__import__('json').loads({args!r}))")


@contextlib.contextmanager
def _fork_request(timeout: float):
    """The root request's failures, as the reason fork copies are unavailable."""
    try:
        yield
    except rpc.KernelTimeout as e:
        raise ForkUnavailable(f"kernel did not answer the snapshot request in {timeout:g} s"
                              ) from e
    except rpc.KernelRPCError as e:
        raise ForkUnavailable(f"cannot fork this kernel: {e}") from e


_SWEPT: dict[str, float] = {}


def _sweep_once(every_s: float = 60.0) -> None:
    """Remove what dead kernels and clients left (cgroups, scratch), at most once a minute."""
    now = time.monotonic()
    if now - _SWEPT.get("at", -every_s) >= every_s:
        _SWEPT["at"] = now
        try:
            _procs.sweep()
        except (OSError, ValueError, OverflowError):  # housekeeping: never stops a search
            log.debug("sweeping what dead kernels left failed", exc_info=True)


def _end_unreached_root(info: dict) -> None:
    """End the root copy a kernel forked but this server cannot reach, if it is here at all.

    Only a process verified (through a pidfd) to be a child of the kernel's
    pid is signalled: a kernel on another host (a gateway) names pids of its
    own machine, which here may be any unrelated process.
    """
    kernel_pid, pid = info.get("kernel_pid"), info.get("pid")
    if not isinstance(kernel_pid, int) or not isinstance(pid, int):
        return
    try:
        fd = open_verified(pid, kernel_pid)
    except (ProtocolError, OSError):
        return
    if fd is None:  # no pidfds here: a pid alone is not signalled
        return
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass  # gone meanwhile
    finally:
        os.close(fd)


class SnapshotTree(_tree.Closing):
    """All kernel copies of one search; closing it ends every process."""

    kind: Literal["fork"] = "fork"
    fallback_reason: str | None = None  # a fork tree is never a fallback
    max_processes: ClassVar[int] = 64  # live snapshot processes per client process
    _global_live: ClassVar[set[int]] = set()
    _global_pending: ClassVar[int] = 0  # forks in flight
    _global_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, limits: Limits, protections: Protections, scratch: str,
                 owns_scratch: bool, notebook_dir: str | None, max_live: int = 16,
                 memory_budget: int | None = None, kernel_pid: int | None = None,
                 in_process: bool = False) -> None:
        self.limits = limits
        self.protections = protections
        self.scratch = scratch
        self.owns_scratch = owns_scratch
        self.notebook_dir = notebook_dir
        self.max_live = max(1, int(max_live))
        if memory_budget is None:
            memory_budget = max(512 << 20, psutil.virtual_memory().available // 4)
        self.memory_budget = memory_budget
        self.memory_check_interval = 1.0
        self.kernel_pid = kernel_pid
        self.in_process = in_process
        self.redact: _tree.Redact | None = None  # set by the entry point: its scrubber
        self.closed = False
        self.evictions = 0
        self.nodes: dict[str, Snapshot] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._live: dict[int, Snapshot] = {}
        self._pending = 0
        self._last_mem_check = 0.0
        self._mem_checking = False
        _sweep_once()
        self.root = Snapshot(self, None, "root")
        self.nodes["root"] = self.root

    # ---------------------------------------------------------- construction

    @classmethod
    def from_current_kernel(cls, *, notebook_dir: str | None = None, scratch: str | None = None,
                            limits: Limits | None = None, max_live: int = 16,
                            memory_budget: int | None = None,
                            wipe: list[str] = ()) -> "SnapshotTree":
        """Fork the kernel this code runs in (the ``%%agent`` magic path);
        ``wipe``: secrets to remove from the copies' memory (``start_root_pair``)."""
        from ..inkernel.fork_server import ForkRefused, start_root_pair

        limits = limits or Limits()
        try:
            pid, sock, used_scratch = start_root_pair(notebook_dir, scratch, limits, wipe)
        except ForkRefused as e:
            raise ForkUnavailable(str(e)) from e
        tree = cls(limits=limits, protections=Protections(), scratch=used_scratch,
                   owns_scratch=scratch is None, notebook_dir=notebook_dir or os.getcwd(),
                   max_live=max_live, memory_budget=memory_budget, kernel_pid=os.getpid(),
                   in_process=True)
        tree._handshake(pid, sock, token=None)
        return tree

    @classmethod
    async def from_kernel_client(cls, kc, *, notebook_dir: str | None = None,
                                 scratch: str | None = None, limits: Limits | None = None,
                                 max_live: int = 16, memory_budget: int | None = None,
                                 timeout: float = 60.0) -> "SnapshotTree":
        """Fork a kernel through an ``AsyncKernelClient`` (server path).

        One silent execute request (no history, no output, queued behind any
        running cell) forks the kernel; this process then talks to the root
        over a Unix socket with a one-time token. Use a client of your own:
        the request's reply is consumed from the shell channel.
        """
        limits = limits or Limits()
        with _fork_request(timeout):
            info = await rpc.acall(kc, _root_expression(notebook_dir, scratch, limits),
                                   timeout=timeout)
        return await asyncio.to_thread(cls._connect, info, notebook_dir, scratch, limits,
                                       max_live, memory_budget)

    @classmethod
    def from_blocking_client(cls, kc, *, notebook_dir: str | None = None,
                             scratch: str | None = None, limits: Limits | None = None,
                             max_live: int = 16, memory_budget: int | None = None,
                             timeout: float = 60.0) -> "SnapshotTree":
        """Same as ``from_kernel_client`` for a ``BlockingKernelClient``."""
        return cls.from_call(lambda code, t: rpc.call(kc, code, timeout=t), notebook_dir=notebook_dir,
                             scratch=scratch, limits=limits, max_live=max_live, memory_budget=memory_budget,
                             timeout=timeout)

    @classmethod
    def from_call(cls, call, *, notebook_dir: str | None = None, scratch: str | None = None,
                  limits: Limits | None = None, max_live: int = 16, memory_budget: int | None = None,
                  timeout: float = 60.0) -> "SnapshotTree":
        """Same as ``from_kernel_client`` through ``call(expression, timeout)``, which evaluates an
        expression in the kernel (``kernel.rpc`` semantics): a blocking client, or the ``%%agent``
        cell's own connection (``server.magic_turns``)."""
        limits = limits or Limits()
        with _fork_request(timeout):
            info = call(_root_expression(notebook_dir, scratch, limits), timeout)
        return cls._connect(info, notebook_dir, scratch, limits, max_live, memory_budget)

    @classmethod
    def _connect(cls, reply: str, notebook_dir, scratch, limits, max_live, memory_budget):
        info = json.loads(reply)
        if info.get("version") != PROTOCOL_VERSION:
            raise ForkUnavailable(f"snapshot protocol mismatch: {info.get('version')}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(limits.fork_timeout_s)
            sock.connect(info["path"])
        except OSError as e:
            sock.close()
            _end_unreached_root(info)
            raise ForkUnavailable(f"cannot reach the kernel's snapshot socket "
                                  f"(remote kernel?): {e}") from e
        tree = cls(limits=limits, protections=Protections(), scratch=info["scratch"],
                   owns_scratch=scratch is None, notebook_dir=notebook_dir,
                   max_live=max_live, memory_budget=memory_budget,
                   kernel_pid=info.get("kernel_pid"))
        tree._handshake(int(info["pid"]), sock, token=info["token"])
        return tree

    def _handshake(self, pid: int, sock: socket.socket, token: str | None) -> None:
        """Greet the root copy the kernel forked as ``pid`` (the kernel's word, not the copy's)."""
        chan = Channel(sock)
        senders: set[int] = set()
        pidfd = None
        try:
            pass_credentials(sock)
            hello = chan.request("hello", timeout=self.limits.fork_timeout_s + 30, token=token,
                                 version=PROTOCOL_VERSION, senders=senders)
            if not hello.get("ok"):
                raise ForkUnavailable(f"root snapshot failed: {hello.get('error')}")
            if sender(senders, "the root copy's hello") != pid:
                raise ProtocolError(f"the hello came from process {sorted(senders)}, "
                                    f"not the root copy {pid}")
            pidfd = open_verified(pid, self.kernel_pid)
            protections = Protections.from_json(hello.get("protections", {}))
            protections.cgroup = trusted_cgroup(protections.cgroup, pid, self.kernel_pid)
        except (OSError, ProtocolError, ValueError, TypeError) as e:
            chan.close()
            if pidfd is not None:
                os.close(pidfd)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # the kernel's child: its pid is the kernel's word
            raise ForkUnavailable(f"root snapshot did not start: {e}") from e
        except BaseException:
            chan.close()
            raise
        self.protections = protections
        self.root._attach(pid, chan, pidfd)

    # ---------------------------------------------------------------- public

    def live(self) -> list[Snapshot]:
        with self._lock:
            return list(self._live.values())

    def memory_usage(self) -> dict[str, int | None]:
        """USS per live snapshot id (bytes)."""
        return {n.id: n.memory() for n in self.live()}

    def check_memory(self) -> int:
        """Evict least useful leaves while the copies' total USS is over budget.

        Returns the number of evictions.
        """
        t0 = time.monotonic()
        self._last_mem_check = t0
        if self.memory_budget is None:
            return 0
        usage = {n: n.memory() or 0 for n in self.live()}
        # reading smaps of big processes is not free: keep it under ~5% of the time
        self.memory_check_interval = max(1.0, 20 * (time.monotonic() - t0))
        total = sum(usage.values())
        evicted = 0
        while total > self.memory_budget:
            victim = self._pick_victim(protect=None)
            if victim is None:
                break
            total -= usage.get(victim, 0)
            self._evict(victim)
            evicted += 1
        return evicted

    def check_memory_soon(self) -> None:
        """``check_memory`` in a thread of its own, one at a time: at GB sizes reading each copy's
        smaps takes milliseconds, which the cell that made it due should not wait for."""
        with self._lock:
            if self._mem_checking or self.closed:
                return
            self._mem_checking = True
            self._last_mem_check = time.monotonic()

        def check() -> None:
            try:
                self.check_memory()
            except Exception:  # the next due check tries again
                log.warning("checking the kernel copies' memory failed", exc_info=True)
            finally:
                self._mem_checking = False

        threading.Thread(target=check, name="jda-copies-memory", daemon=True).start()

    def close(self) -> None:
        """Cancel the search: every process of this tree is killed and reaped."""
        if self.closed:
            return
        self.closed = True  # first: operations in flight fail instead of forking more
        self._close_subtree(self.root)
        if self.protections.cgroup:  # daemons a candidate detached, whoever reparented them
            _procs.cgroup_kill(self.protections.cgroup)
        if self.owns_scratch and self.scratch:
            _procs.remove_tree(self.scratch)

    def pids(self) -> list[int]:
        return [n.pid for n in self.live() if n.pid is not None]

    # ------------------------------------------------------------ internals

    def _set_live(self, node: Snapshot, live: bool) -> None:
        """Count ``node``'s process (or stop) in this tree and in this client process."""
        with self._lock, SnapshotTree._global_lock:  # the order _reserve_slot takes them in
            if live:
                self._live[node.pid] = node
                SnapshotTree._global_live.add(node.pid)
            else:
                self._live.pop(node.pid, None)
                SnapshotTree._global_live.discard(node.pid)

    def _pick_victim(self, protect: Snapshot | None) -> Snapshot | None:
        """The least useful idle leaf (a copy's children are its forks: killing
        it kills them) outside ``protect``'s path."""
        protected = set()
        n = protect
        while n is not None:
            protected.add(n)
            n = n.parent
        with self._lock:
            leaves = [n for n in self._live.values() if n.parent is not None
                      and n not in protected and not any(c.is_live for c in n.children)]
        return _tree.pick_victim(leaves)

    def _evict(self, node: Snapshot) -> bool:
        if _tree.evict(node):
            self.evictions += 1
            return True
        return False

    def _reserve_slot(self, protect: Snapshot) -> None:
        """Make room for one more process, evicting leaves if a cap is hit."""
        for _ in range(4 * self.max_live + 8):
            with self._lock, SnapshotTree._global_lock:
                local_full = len(self._live) + self._pending >= self.max_live
                global_full = (len(SnapshotTree._global_live) + SnapshotTree._global_pending
                               >= SnapshotTree.max_processes)
                if not local_full and not global_full:
                    self._pending += 1
                    SnapshotTree._global_pending += 1
                    return
            victim = self._pick_victim(protect)
            if victim is None:
                which = "this tree" if local_full else "this process"
                raise CapacityError(f"no room for another kernel copy in {which} "
                                    f"and every copy is busy or needed")
            self._evict(victim)
        raise CapacityError("could not make room for another kernel copy")

    def _release_slot(self) -> None:
        with self._lock, SnapshotTree._global_lock:
            self._pending -= 1
            SnapshotTree._global_pending -= 1

    def _close_subtree(self, top: Snapshot) -> None:
        """Kill deepest first so every process is reaped by its own parent."""
        subtree = list(top.subtree())
        live = [n for n in subtree if n.is_live]
        for depth in sorted({n.depth for n in live}, reverse=True):
            level = [n for n in live if n.depth == depth]
            pids = [n.pid for n in level]
            for n in level:
                n._kill("closed")
            with self._lock:
                others = set(self._live) | ({self.kernel_pid} if self.kernel_pid else set())
            deadline = time.monotonic() + 5.0
            pending = list(pids)
            while pending and time.monotonic() < deadline:
                pending = [p for p in pending if not gone(p, others)]
                if pending:
                    time.sleep(0.002)
        for n in subtree:
            if n.state != "closed":
                n._detach("closed")
