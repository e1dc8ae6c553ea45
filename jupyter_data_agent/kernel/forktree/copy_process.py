"""What the client believes about a kernel copy's process, and how it talks to it.

A copy runs code the model wrote, so nothing it says about itself is
believed. Its pid is the one the kernel attaches to its first frame
(``SO_PASSCRED``, ``sender``), checked to be a child of its parent copy (or,
for the root, of the kernel) and held as a pidfd from then on
(``open_verified``): every signal goes through that pidfd. The cgroup the
root copy claims is checked against the system's word (``trusted_cgroup``)
before ``close`` kills everything in it. A ``Channel`` sends one request and
reads its reply, bounded in bytes before it is read. Client side: psutil and
the standard library.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket

import psutil

from ..copy import procs as _procs
from ..protocol import ProtocolError, recv_frame, send_frame

#: The largest reply to anything but ``exec`` (hello, ready, ping, fork, child_status).
SMALL_REPLY = 256 << 10


class Channel:
    """One socket to one snapshot process; requests and replies carry ids."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._ids = itertools.count(1)

    def request(self, op: str, *, timeout: float | None, fds=(), max_bytes: int = SMALL_REPLY,
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


def uss(pid: int | None) -> int | None:
    """Unique set size of ``pid`` (bytes): what the process costs; None if unknown."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_full_info().uss
    except (psutil.Error, OSError):
        return None


def sender(senders: set[int], what: str) -> int:
    """The one process that wrote a frame, as the kernel saw it."""
    if len(senders) != 1 or 0 in senders:
        raise ProtocolError(f"{what}: its sender is not one known process ({sorted(senders)})")
    return next(iter(senders))


def open_verified(pid: int, parent_pid: int | None) -> int | None:
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


def gone(pid: int, live_pids: set[int]) -> bool:
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


def describe_wait_status(st: int | None) -> str:
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


def trusted_cgroup(claimed: str | None, root_pid: int, kernel_pid: int | None) -> str | None:
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

