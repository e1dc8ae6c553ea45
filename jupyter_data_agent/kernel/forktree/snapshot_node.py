"""One kernel copy, seen from the client: a ``Snapshot`` of a ``SnapshotTree``.

A snapshot is one process forked (directly or through its ancestors) from
the user's kernel. ``exec`` runs a cell in that copy, ``fork`` makes a child
copy of its current state, ``close`` ends it and its subtree. One lock per
snapshot, so different snapshots run concurrently from different threads.
Every signal goes through the copy's pidfd (``copy_process``); a reply that
breaks the protocol ends the copy. A node remembers the cells executed since
its parent, so an evicted (or timed-out) node is rebuilt on demand by
forking its nearest live ancestor and replaying those cells.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from typing import TYPE_CHECKING

import psutil

from .. import tree as _tree
from ..copy import procs as _procs
from ..copy.capture import sealed_capture
from ..protocol import PeerClosed, ProtocolError, pass_credentials, recv_frame
from ..results import ExecResult, Limits, OutputItem
from ..tree import SnapshotClosed, SnapshotError
from .copy_process import SMALL_REPLY, Channel, describe_wait_status, open_verified, sender, uss

if TYPE_CHECKING:
    from .snapshot import SnapshotTree


def _capture_for(limits: Limits) -> list[int]:
    """Sealed memfds for one exec's C-level output, made here: a copy may not make
    memfds (``capture.sealed_capture``); none where the system has none."""
    try:
        return sealed_capture(limits.max_capture_bytes)
    except OSError:
        return []


class Snapshot(_tree.CopyNode):
    """One kernel copy: a process whose memory is the kernel's state plus the
    cells executed on the path to it."""

    tree: "SnapshotTree"
    parent: "Snapshot | None"
    children: "list[Snapshot]"

    def __init__(self, tree: "SnapshotTree", parent: "Snapshot | None", node_id: str,
                 parent_len: int = 0) -> None:
        super().__init__(tree, parent, node_id, parent_len)
        self.pid: int | None = None  # the kernel's word for it (never the copy's)
        self.uss: int | None = None
        self.death: str | None = None
        self.own_scratch = False  # forked with a scratch folder of its own (a child of a warm root)
        self._chan: Channel | None = None
        self._proc = None
        self._pidfd: int | None = None

    def __repr__(self) -> str:
        return f"<Snapshot {self.id} {self.state} pid={self.pid} depth={self.depth}>"

    # ------------------------------------------------------------- sync API

    def exec(self, code: str, *, timeout: float | None = None, namespace: bool = False) -> ExecResult:
        res = super().exec(code, timeout=timeout, namespace=namespace)
        tree = self.tree  # then the memory budget, at most every memory_check_interval
        if time.monotonic() - tree._last_mem_check >= tree.memory_check_interval:
            tree.check_memory_soon()
        return res

    def fork(self, own_scratch: bool = False) -> "Snapshot":
        """A child copy of this snapshot's current state (a new process); ``own_scratch``: it
        writes and reads its own scratch folder, not this copy's (``after_fork.take_own_scratch``)."""
        if self.tree.closed:
            raise SnapshotClosed("the snapshot tree is closed")
        self.tree._reserve_slot(protect=self)
        try:
            with self._lock:
                self._ensure_live()
                pid, chan, pidfd = self._fork_locked(own_scratch)
                parent_len = len(self.cells)
            child = self._new_child(parent_len)
            child.own_scratch = own_scratch
            child._attach(pid, chan, pidfd)
        finally:
            self.tree._release_slot()
        if self.tree.closed:  # closed while we were forking
            child._kill("closed")
            raise SnapshotClosed("the snapshot tree was closed")
        return child

    def close(self) -> None:
        """End this snapshot and every descendant (processes are killed)."""
        self.tree._close_subtree(self)

    def ping(self, timeout: float = 10.0) -> bool:
        with self._lock:
            if not self.is_live:
                return False
            try:
                return bool(self._chan.request("ping", timeout=timeout).get("ok"))
            except (OSError, ProtocolError):
                self._mark_dead("the snapshot process did not answer")
                return False

    def interrupt(self) -> None:
        """SIGINT: the running cell ends with KeyboardInterrupt, the copy lives on."""
        if self.is_live:
            self._signal(signal.SIGINT)

    def memory(self) -> int | None:
        """Unique set size (bytes) of this copy and the processes a candidate
        started from it: what it really costs."""
        if not self.is_live:
            self.uss = None
            return None
        total = uss(self.pid)
        if total is not None:
            with contextlib.suppress(psutil.Error):
                for p in psutil.Process(self.pid).children(recursive=True):
                    if p.pid not in self.tree._live:  # child copies count for themselves
                        total += uss(p.pid) or 0
        self.uss = total
        return total

    # ------------------------------------------------------------ internals

    def _attach(self, pid: int, chan: Channel, pidfd: int | None) -> None:
        self.pid, self._chan, self._pidfd = pid, chan, pidfd
        try:  # remembers the start time: a later kill never hits a reused pid
            self._proc = psutil.Process(pid)
        except psutil.Error:
            self._proc = None
        self.state = "live"
        self.death = None
        self.last_used = time.monotonic()
        self.tree._set_live(self, True)

    def _detach(self, state: str) -> None:
        if self._chan is not None:
            self._chan.close()
        self._chan = None
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        if self.pid is not None:
            self.tree._set_live(self, False)
        if self.state != "closed":
            self.state = state

    def _signal(self, sig: int) -> bool:
        """Send ``sig`` to this copy's own process only; False once it is gone."""
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            elif self._proc is not None and self._proc.is_running():  # same start time
                self._proc.send_signal(sig)
            else:
                return False
            return True
        except (OSError, psutil.Error):
            return False

    def _signal_kill(self) -> None:
        """Kill this copy and every process a candidate started from it."""
        if not self._signal(signal.SIGSTOP):  # gone (or never ours): nothing to reach
            return
        with contextlib.suppress(OSError, psutil.Error):
            _procs.kill_subtree(self.pid)  # its descendants: the copy is stopped, so still them
        self._signal(signal.SIGKILL)

    def _kill(self, state: str) -> None:
        if self.pid is not None and self.is_live:
            self._signal_kill()
        self._detach(state)
        # Killing a process takes its subtree with it (PDEATHSIG); kill them
        # explicitly too in case PDEATHSIG could not be set.
        for c in self.subtree():  # self is no longer live
            if c.is_live:
                c._signal_kill()
                c._detach("dead")
                c.death = "an ancestor snapshot was killed"

    def _mark_dead(self, why: str) -> None:
        self.death = why
        self._kill("dead")

    def _death_reason(self) -> str:
        pid = self.pid
        if pid is None:
            return "the snapshot process died"
        st = None
        parent = self.parent
        for _ in range(20):
            if parent is None:  # the root is a child of this process only in the magic
                from ..copy.reaper import REAPER

                st = REAPER.exit_status(pid) if self.tree.in_process else None
            elif parent.is_live and parent._lock.acquire(timeout=0.5):
                try:
                    st = parent._chan.request("child_status", timeout=5, pid=pid).get("status")
                except (OSError, ProtocolError):
                    st = None
                finally:
                    parent._lock.release()
            else:
                break
            if st is not None:
                break
            time.sleep(0.025)
        return describe_wait_status(st)

    def _exec_locked(self, code: str, timeout: float | None, namespace: bool = False) -> ExecResult:
        timeout = self.tree.limits.timeout_s if timeout is None else timeout
        self.last_used = time.monotonic()
        t0 = time.perf_counter()
        pid = self.pid
        try:
            capture = _capture_for(self.tree.limits)
            try:
                extra = {"namespace": True} if namespace else {}
                reply = self._chan.request("exec", timeout=timeout, code=code, fds=capture,
                                           max_bytes=self.tree.limits.reply_bytes(), **extra)
            finally:
                for fd in capture:
                    os.close(fd)
            if reply.get("ok"):
                result = ExecResult.from_json(reply["data"])
        except socket.timeout:
            self._mark_dead(f"killed after the {timeout:g} s wall-clock timeout")
            return exec_failure(f"cell exceeded the {timeout:g} s wall-clock timeout; "
                                f"its kernel copy was killed", t0, pid, timeout=True)
        except (ProtocolError, KeyError, TypeError, ValueError, AttributeError) as e:
            if isinstance(e, PeerClosed):  # it died (a limit, os._exit...): say why
                why = self._death_reason()
                self._mark_dead(why)
                return exec_failure(why + " while running the cell", t0, pid)
            why = f"the copy broke the protocol ({e}); it was ended"
            self._mark_dead(why)
            return exec_failure(why, t0, pid)
        except OSError:
            why = self._death_reason()
            self._mark_dead(why)
            return exec_failure(why + " while running the cell", t0, pid)
        except BaseException:
            # e.g. KeyboardInterrupt in the magic: the reply would desync the channel
            self._mark_dead("interrupted while running a cell")
            raise
        if not reply.get("ok"):
            raise SnapshotError(f"exec failed in snapshot {self.id}: {reply.get('error')}")
        result.pid = pid  # the copy's word for its pid is not kept either
        return result

    def _fork_locked(self, own_scratch: bool = False) -> tuple[int, Channel, int | None]:
        """A child of this copy: (its pid as the kernel tells it, its channel, its pidfd)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        timeout = self.tree.limits.fork_timeout_s
        try:
            pass_credentials(mine)  # before the child can write anything
            try:
                extra = {"own_scratch": True} if own_scratch else {}
                reply = self._chan.request("fork", timeout=timeout, fds=[theirs.fileno()], **extra)
            finally:
                theirs.close()
            if not reply.get("ok"):
                raise SnapshotError(f"fork of {self.id} failed: {reply.get('error')}")
            mine.settimeout(timeout)
            senders: set[int] = set()
            ready, _ = recv_frame(mine, max_bytes=SMALL_REPLY, senders=senders)
            if not ready.get("ok") or ready.get("type") != "ready":
                raise SnapshotError(f"forked snapshot did not start: {ready.get('error')}")
        except (OSError, ProtocolError) as e:
            mine.close()
            if isinstance(e, socket.timeout) or not self.ping_unlocked():
                self._mark_dead(f"fork failed: {e}")
            raise SnapshotError(f"fork of {self.id} failed: {e}") from e
        except BaseException:
            mine.close()
            raise
        try:
            pid = sender(senders, "the new copy's first frame")
            if ready.get("pid") != pid:
                raise ProtocolError(f"the new copy says it is process {ready.get('pid')!r}, "
                                    f"the kernel says {pid}")
            pidfd = open_verified(pid, self.pid)
        except ProtocolError as e:
            # A copy that lies about the copies it makes runs forged code: end it.
            mine.close()
            self._mark_dead(f"the copy broke the protocol ({e}); it was ended")
            raise SnapshotError(f"fork of {self.id} refused: {e}") from e
        return pid, Channel(mine), pidfd

    def ping_unlocked(self) -> bool:
        try:
            return bool(self._chan.request("ping", timeout=5).get("ok"))
        except (OSError, ProtocolError, AttributeError):
            return False

    def _ensure_live(self) -> None:
        """Make this node's process exist, replaying its cells if it was evicted."""
        if self.state == "live":
            return
        if self.state == "closed" or self.tree.closed:
            raise SnapshotClosed(f"snapshot {self.id} is closed")
        # Base: the nearest live ancestor still in the state it had when the
        # path below it was forked; replay every cell from there down.
        n, limit = self.parent, self.parent_len
        own_scratch = self.own_scratch  # the new process's scratch is its own when a node's between was
        while n is not None and not (n.is_live and len(n.cells) == limit):
            if n.state == "closed":
                raise SnapshotClosed(f"snapshot {n.id} is closed")
            own_scratch = own_scratch or n.own_scratch
            limit, n = n.parent_len, n.parent
        if n is None:
            raise SnapshotError(f"cannot rebuild {self.id}: no live ancestor is still in the "
                                f"state it was forked from")
        self.tree._reserve_slot(protect=n)
        try:
            with n._lock:
                if not (n.is_live and len(n.cells) == limit):
                    raise SnapshotError(f"cannot rebuild {self.id}: {n.id} changed meanwhile")
                pid, chan, pidfd = n._fork_locked(own_scratch)
                done = len(n.lineage())  # the cells the new process already ran
            self._attach(pid, chan, pidfd)
        finally:
            self.tree._release_slot()
        for code in self.lineage()[done:]:
            res = self._exec_locked(code, None)
            if res.status not in ("ok", "error"):
                raise SnapshotError(f"rebuilding {self.id} failed: {res.evalue}")
        self.rebuilds += 1


def exec_failure(evalue: str, t0: float, pid: int | None, timeout: bool = False) -> ExecResult:
    """A cell whose copy was killed at its ``timeout`` or died under it (since ``t0``)."""
    status, ename = ("timeout", "TimeoutError") if timeout else ("died", "SnapshotDied")
    return ExecResult(status=status, ename=ename, evalue=evalue, pid=pid,
                      duration_s=time.perf_counter() - t0, limit="timeout" if timeout else None,
                      outputs=[OutputItem(output_type="error", ename=ename, evalue=evalue)])
