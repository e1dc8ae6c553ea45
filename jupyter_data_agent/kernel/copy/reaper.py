"""Reaping of kernel copies by the process that forked them.

The kernel reaps its root copy and every copy reaps the copies it forked, as
soon as they exit, keeping their wait status for the client's
``child_status`` request (why a copy died). Imported inside the kernel and
its forks (``_jda_kernel``): standard library only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

log = logging.getLogger(__name__)


class Reaper:
    """Reaps this process's snapshot children as soon as they exit.

    One daemon thread per process polls pidfds (Linux >= 5.3), so adding a
    child costs no thread start on the fork's critical path; elsewhere one
    thread per child blocks in waitpid. Waits on explicit pids only, so it
    never steals the exit status of processes the user's own code started.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.status: dict[int, int | None] = {}
        self._watched: dict[int, tuple[int, object]] = {}  # pidfd -> (pid, on_exit)
        self._wake: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    def watch(self, pid: int, on_exit=None) -> None:
        fd = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                fd = None
        if fd is None:
            threading.Thread(target=self._reap, args=(pid, on_exit),
                             name=f"jda-reaper-{pid}", daemon=True).start()
            return
        with self._lock:
            self._watched[fd] = (pid, on_exit)
            if self._thread is None:
                self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
                self._thread = threading.Thread(target=self._loop, name="jda-reaper",
                                                daemon=True)
                self._thread.start()
            wake = self._wake[1]
        with contextlib.suppress(OSError):
            os.write(wake, b"x")

    def _loop(self) -> None:
        import select

        wake_r = self._wake[0]
        while True:
            poller = select.poll()
            poller.register(wake_r, select.POLLIN)
            with self._lock:
                for fd in self._watched:
                    poller.register(fd, select.POLLIN)
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            for fd, _ev in events:
                if fd == wake_r:
                    with contextlib.suppress(OSError):
                        while os.read(wake_r, 4096):
                            pass
                    continue
                with self._lock:
                    pid, on_exit = self._watched.pop(fd, (None, None))
                os.close(fd)
                if pid is not None:
                    self._reap(pid, on_exit)

    def _reap(self, pid: int, on_exit) -> None:
        st = None
        while True:
            try:
                _, st = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
        with self._lock:
            self.status[pid] = st
            if len(self.status) > 4096:
                self.status.pop(next(iter(self.status)))
        if on_exit is not None:
            try:
                on_exit()
            except Exception:  # a cleanup callback must not end the reaping thread
                log.warning("cleanup after kernel copy %d exited failed", pid, exc_info=True)

    def exit_status(self, pid: int) -> int | None:
        with self._lock:
            return self.status.get(pid)

    def renew_in_child(self) -> None:
        """In a fresh fork: release the parent's reaper descriptors and start
        empty (the parent's thread and lock are not this process's)."""
        for fd in list(self._watched) + list(self._wake or ()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.__init__()


#: The reaper of this process (renewed in each fork by ``after_fork.renew``).
REAPER = Reaper()
