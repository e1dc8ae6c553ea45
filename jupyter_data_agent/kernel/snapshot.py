"""Client side of the fork snapshot tree.

A ``SnapshotTree`` is one search's set of kernel copies; each ``Snapshot`` is
one process forked (directly or through its ancestors) from the user's
kernel. ``exec`` runs a cell in that copy, ``fork`` makes a child copy of its
current state, ``close`` ends it and its subtree.

The API is synchronous (blocking sockets, one lock per snapshot so different
snapshots run concurrently from different threads); the Jupyter server calls
it from threads, the ``%%agent`` magic in the kernel.

Trust: a copy runs code the model wrote, so nothing it says about itself is
believed. A copy's pid is the one the kernel attaches to its first frame
(``SO_PASSCRED``), checked to be a child of its parent copy (or, for the
root, of the kernel), and held as a pidfd from then on: every signal goes
through that pidfd, so no pid a copy names can reach a process outside the
turn. Replies are bounded in bytes before they are read, must answer the
request just sent, and are bounded and scrubbed again once parsed
(``tree.received``); a frame that breaks the protocol ends the copy.

Resources: a cap on live processes per tree and per client process, and a
memory budget on the sum of the snapshots' unique set sizes; when either is
hit the least useful idle leaves are evicted (killed). A node remembers the
cells executed since its parent, so an evicted (or timed-out) node is rebuilt
on demand by forking its nearest live ancestor and replaying those cells.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import ClassVar, Literal

import psutil

from . import procs as _procs
from . import rpc
from . import tree as _tree
from .protocol import PROTOCOL_VERSION, PeerClosed, ProtocolError, pass_credentials, recv_frame, send_frame
from .results import ExecResult, Limits, OutputItem, Protections


class SnapshotError(RuntimeError):
    """A snapshot operation failed."""


class ForkUnavailable(SnapshotError):
    """Fork copies cannot be made for this kernel: use the replay sandbox."""


class CapacityError(SnapshotError):
    """No room for another snapshot process and nothing can be evicted."""


class SnapshotClosed(SnapshotError):
    """The snapshot (or its whole tree) was closed."""


# The largest reply to anything but ``exec`` (hello, ready, ping, fork, child_status).
_SMALL_REPLY = 256 << 10


class _Channel:
    """One socket to one snapshot process; requests and replies carry ids."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._ids = itertools.count(1)

    def request(self, op: str, *, timeout: float | None, fds=(), max_bytes: int = _SMALL_REPLY,
                senders: set[int] | None = None, **fields) -> dict:
        """Send one request and read its reply: the next frame, at most ``max_bytes``,
        answering this request's id, or ``ProtocolError``."""
        rid = next(self._ids)
        self.sock.settimeout(timeout)
        send_frame(self.sock, {"id": rid, "op": op, **fields}, fds)
        msg, _ = recv_frame(self.sock, max_bytes=max_bytes, senders=senders)
        if msg.get("id") != rid:
            raise ProtocolError(f"a reply to request {msg.get('id')!r} came for {op} #{rid}")
        return msg

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
        with contextlib.suppress(OSError):
            self.sock.close()


def _uss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_full_info().uss
    except (psutil.Error, OSError):
        return None


def _capture_for(limits: Limits) -> list[int]:
    """Sealed memfds for one exec's C-level output, made here: a copy may not make
    memfds (``fork_server.sealed_capture``); none where the system has none."""
    from .fork_server import sealed_capture

    try:
        return sealed_capture(limits.max_capture_bytes)
    except OSError:
        return []


def _sender(senders: set[int], what: str) -> int:
    """The one process that wrote a frame, as the kernel saw it."""
    if len(senders) != 1 or 0 in senders:
        raise ProtocolError(f"{what}: its sender is not one known process ({sorted(senders)})")
    return next(iter(senders))


def _open_verified(pid: int, parent_pid: int | None) -> int | None:
    """A pidfd of ``pid`` once it is known to be ``parent_pid``'s child.

    The pidfd is opened first and the process checked alive through it after
    reading its parent, so the check cannot be about a reused pid. Returns None
    where pidfds do not exist (the psutil start-time check stands in).
    """
    fd = None
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(pid)
        except OSError as e:
            raise ProtocolError(f"process {pid} is not there: {e.strerror}") from None
    try:
        if parent_pid is not None:
            try:
                ppid = psutil.Process(pid).ppid()
            except psutil.Error:
                ppid = None
            if ppid != parent_pid:
                raise ProtocolError(f"process {pid} is not a child of {parent_pid}")
        if fd is not None:
            signal.pidfd_send_signal(fd, 0)  # still the same process
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return fd


def _gone(pid: int, live_pids: set[int]) -> bool:
    """True once ``pid`` no longer runs and its parent (if ours) reaped it."""
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            # reaped by a live parent's reaper soon; an orphan belongs to init
            return p.ppid() not in live_pids
        return False
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _describe_wait_status(st: int | None) -> str:
    if st is None:
        return "the snapshot process died"
    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        hint = " (CPU hard limit or out of memory)" if sig == signal.SIGKILL else ""
        return f"the snapshot process was killed by {name}{hint}"
    if os.WIFEXITED(st):
        return f"the snapshot process exited with status {os.WEXITSTATUS(st)}"
    return "the snapshot process died"


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
        self._chan: _Channel | None = None
        self._proc = None
        self._pidfd: int | None = None

    def __repr__(self) -> str:
        return f"<Snapshot {self.id} {self.state} pid={self.pid} depth={self.depth}>"

    # ------------------------------------------------------------- sync API

    def exec(self, code: str, *, timeout: float | None = None) -> ExecResult:
        res = super().exec(code, timeout=timeout)
        tree = self.tree  # then the memory budget, at most every memory_check_interval
        if time.monotonic() - tree._last_mem_check >= tree.memory_check_interval:
            tree.check_memory()
        return res

    def fork(self) -> "Snapshot":
        """A child copy of this snapshot's current state (a new process)."""
        if self.tree.closed:
            raise SnapshotClosed("the snapshot tree is closed")
        self.tree._reserve_slot(protect=self)
        try:
            with self._lock:
                self._ensure_live()
                pid, chan, pidfd = self._fork_locked()
                parent_len = len(self.cells)
            child = self._new_child(parent_len)
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
        total = _uss(self.pid)
        if total is not None:
            with contextlib.suppress(psutil.Error):
                for p in psutil.Process(self.pid).children(recursive=True):
                    if p.pid not in self.tree._live:  # child copies count for themselves
                        total += _uss(p.pid) or 0
        self.uss = total
        return total

    # ------------------------------------------------------------ internals

    def _attach(self, pid: int, chan: _Channel, pidfd: int | None) -> None:
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
                from . import fork_server

                st = fork_server._REAPER.exit_status(pid) if self.tree.in_process else None
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
        return _describe_wait_status(st)

    def _exec_locked(self, code: str, timeout: float | None) -> ExecResult:
        timeout = self.tree.limits.timeout_s if timeout is None else timeout
        self.last_used = time.monotonic()
        t0 = time.perf_counter()
        pid = self.pid
        try:
            capture = _capture_for(self.tree.limits)
            try:
                reply = self._chan.request("exec", timeout=timeout, code=code, fds=capture,
                                           max_bytes=self.tree.limits.reply_bytes())
            finally:
                for fd in capture:
                    os.close(fd)
            if reply.get("ok"):
                result = ExecResult.from_json(reply["data"])
        except socket.timeout:
            self._mark_dead(f"killed after the {timeout:g} s wall-clock timeout")
            return _failure(f"cell exceeded the {timeout:g} s wall-clock timeout; "
                            f"its kernel copy was killed", t0, pid, timeout=True)
        except (ProtocolError, KeyError, TypeError, ValueError, AttributeError) as e:
            if isinstance(e, PeerClosed):  # it died (a limit, os._exit...): say why
                why = self._death_reason()
                self._mark_dead(why)
                return _failure(why + " while running the cell", t0, pid)
            why = f"the copy broke the protocol ({e}); it was ended"
            self._mark_dead(why)
            return _failure(why, t0, pid)
        except OSError:
            why = self._death_reason()
            self._mark_dead(why)
            return _failure(why + " while running the cell", t0, pid)
        except BaseException:
            # e.g. KeyboardInterrupt in the magic: the reply would desync the channel
            self._mark_dead("interrupted while running a cell")
            raise
        if not reply.get("ok"):
            raise SnapshotError(f"exec failed in snapshot {self.id}: {reply.get('error')}")
        result.pid = pid  # the copy's word for its pid is not kept either
        return result

    def _fork_locked(self) -> tuple[int, _Channel, int | None]:
        """A child of this copy: (its pid as the kernel tells it, its channel, its pidfd)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        timeout = self.tree.limits.fork_timeout_s
        try:
            pass_credentials(mine)  # before the child can write anything
            try:
                reply = self._chan.request("fork", timeout=timeout, fds=[theirs.fileno()])
            finally:
                theirs.close()
            if not reply.get("ok"):
                raise SnapshotError(f"fork of {self.id} failed: {reply.get('error')}")
            mine.settimeout(timeout)
            senders: set[int] = set()
            ready, _ = recv_frame(mine, max_bytes=_SMALL_REPLY, senders=senders)
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
            pid = _sender(senders, "the new copy's first frame")
            if ready.get("pid") != pid:
                raise ProtocolError(f"the new copy says it is process {ready.get('pid')!r}, "
                                    f"the kernel says {pid}")
            pidfd = _open_verified(pid, self.pid)
        except ProtocolError as e:
            # A copy that lies about the copies it makes runs forged code: end it.
            mine.close()
            self._mark_dead(f"the copy broke the protocol ({e}); it was ended")
            raise SnapshotError(f"fork of {self.id} refused: {e}") from e
        return pid, _Channel(mine), pidfd

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
        while n is not None and not (n.is_live and len(n.cells) == limit):
            if n.state == "closed":
                raise SnapshotClosed(f"snapshot {n.id} is closed")
            limit, n = n.parent_len, n.parent
        if n is None:
            raise SnapshotError(f"cannot rebuild {self.id}: no live ancestor is still in the "
                                f"state it was forked from")
        self.tree._reserve_slot(protect=n)
        try:
            with n._lock:
                if not (n.is_live and len(n.cells) == limit):
                    raise SnapshotError(f"cannot rebuild {self.id}: {n.id} changed meanwhile")
                pid, chan, pidfd = n._fork_locked()
                done = len(n.lineage())  # the cells the new process already ran
            self._attach(pid, chan, pidfd)
        finally:
            self.tree._release_slot()
        for code in self.lineage()[done:]:
            res = self._exec_locked(code, None)
            if res.status not in ("ok", "error"):
                raise SnapshotError(f"rebuilding {self.id} failed: {res.evalue}")
        self.rebuilds += 1


def _failure(evalue: str, t0: float, pid: int | None, timeout: bool = False) -> ExecResult:
    """A cell whose copy was killed at its ``timeout`` or died under it (since ``t0``)."""
    status, ename = ("timeout", "TimeoutError") if timeout else ("died", "SnapshotDied")
    return ExecResult(status=status, ename=ename, evalue=evalue, pid=pid,
                      duration_s=time.perf_counter() - t0, limit="timeout" if timeout else None,
                      outputs=[OutputItem(output_type="error", ename=ename, evalue=evalue)])


@functools.lru_cache(maxsize=1)
def _bootstrap_source() -> tuple[str, str]:
    """Code that installs the kernel-side modules as package ``_jda_kernel``.

    Injected through the execute request so kernels running in another
    environment (without jupyter_data_agent installed) can still be forked,
    and always with the client's own protocol version.
    """
    here = Path(__file__).parent
    names = ["answer_form", "results", "protocol", "confine", "harden", "procs", "syscall_filter", "plots",
             "fork_server"]
    srcs = {n: (here / f"{n}.py").read_text(encoding="utf-8") for n in names}
    try:  # the seccomp binding, for kernels whose environment lacks it
        import pyseccomp

        srcs = {"pyseccomp": Path(pyseccomp.__file__).read_text(encoding="utf-8"), **srcs}
    except (ImportError, OSError, RuntimeError):
        pass
    digest = hashlib.sha256(json.dumps(srcs, sort_keys=True).encode()).hexdigest()[:16]
    return digest, (
        "import sys, types\n"
        f"_srcs = {srcs!r}\n"
        "_p = sys.modules.get('_jda_kernel')\n"
        f"if getattr(_p, '__digest__', None) != {digest!r}:\n"
        "    _p = types.ModuleType('_jda_kernel')\n"
        "    _p.__path__ = []\n"
        f"    _p.__digest__ = {digest!r}\n"
        "    sys.modules['_jda_kernel'] = _p\n"
        "    for _n, _s in _srcs.items():\n"
        "        _m = types.ModuleType('_jda_kernel.' + _n)\n"
        "        _m.__package__ = '_jda_kernel'\n"
        "        _m.__file__ = '<jda:' + _n + '>'\n"
        "        sys.modules[_m.__name__] = _m\n"
        "        try:\n"
        "            exec(compile(_s, _m.__file__, 'exec'), _m.__dict__)\n"
        "        except Exception:\n"
        "            if _n != 'pyseccomp':\n"
        "                raise\n"
        "            del sys.modules[_m.__name__]\n"
        "            continue\n"
        "        setattr(_p, _n, _m)\n"
    )


def direct_call(call: str) -> str:
    """``_jda_kernel.fork_server.<call>`` in a kernel whose modules are installed."""
    return f"__import__('sys').modules['_jda_kernel.fork_server'].{call}"


def kernel_call(call: str) -> str:
    """A user expression calling ``_jda_kernel.fork_server.<call>`` in a kernel,
    installing the modules first unless this exact version is already there."""
    digest, boot = _bootstrap_source()
    target = direct_call(call)
    return (f"({target} if getattr(__import__('sys').modules.get('_jda_kernel'), "
            f"'__digest__', None) == {digest!r} else "
            f"(exec(compile({boot!r}, '<jda-bootstrap>', 'exec'), {{}}) or {target}))")


def _root_expression(notebook_dir: str | None, scratch: str | None, limits: Limits) -> str:
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


def _trusted_cgroup(claimed: str | None, root_pid: int, kernel_pid: int | None) -> str | None:
    """The tree's cgroup, once the system confirms what the root copy claims.

    ``close`` kills every process in it, so it must be the root's own cgroup,
    named for this kernel (``procs.owner_tag``), inside the kernel's cgroup.
    """
    if not claimed:
        return None
    cgroup_of = _procs.own_cgroup
    path = os.path.normpath(claimed)
    name = os.path.basename(path)
    ok = (cgroup_of(root_pid) == path and name.startswith(_procs.CGROUP_PREFIX)
          and (kernel_pid is None or (name.startswith(f"{_procs.CGROUP_PREFIX}k{kernel_pid}-")
                                      and cgroup_of(kernel_pid) == os.path.dirname(path))))
    if not ok:
        raise ProtocolError(f"the root copy claims the cgroup {claimed!r}, which is not its own")
    return path


_SWEPT: dict[str, float] = {}


def _sweep_once(every_s: float = 60.0) -> None:
    """Remove what dead kernels and clients left (cgroups, scratch), at most once a minute."""
    now = time.monotonic()
    if now - _SWEPT.get("at", -every_s) >= every_s:
        _SWEPT["at"] = now
        with contextlib.suppress(Exception):
            _procs.sweep()


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
        from .fork_server import ForkRefused, start_root_pair

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
        limits = limits or Limits()
        with _fork_request(timeout):
            info = rpc.call(kc, _root_expression(notebook_dir, scratch, limits), timeout=timeout)
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
            with contextlib.suppress(OSError):
                os.kill(int(info["pid"]), signal.SIGKILL)
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
        chan = _Channel(sock)
        senders: set[int] = set()
        pidfd = None
        try:
            pass_credentials(sock)
            hello = chan.request("hello", timeout=self.limits.fork_timeout_s + 30, token=token,
                                 version=PROTOCOL_VERSION, senders=senders)
            if not hello.get("ok"):
                raise ForkUnavailable(f"root snapshot failed: {hello.get('error')}")
            if _sender(senders, "the root copy's hello") != pid:
                raise ProtocolError(f"the hello came from process {sorted(senders)}, "
                                    f"not the root copy {pid}")
            pidfd = _open_verified(pid, self.kernel_pid)
            protections = Protections.from_json(hello.get("protections", {}))
            protections.cgroup = _trusted_cgroup(protections.cgroup, pid, self.kernel_pid)
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
                pending = [p for p in pending if not _gone(p, others)]
                if pending:
                    time.sleep(0.002)
        for n in subtree:
            if n.state != "closed":
                n._detach("closed")
