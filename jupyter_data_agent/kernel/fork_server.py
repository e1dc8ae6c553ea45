"""Snapshot server: the code that runs inside the user's kernel and its forks.

``start_root_socket`` (server path, called by a silent execute request) and
``start_root_pair`` (in-kernel path, called by the ``%%agent`` magic) fork the
IPython kernel process. The child — the root snapshot — shares the kernel's
memory copy-on-write and serves requests on its own channel: ``exec`` runs a
cell with the shell's machinery and returns notebook-like outputs; ``fork``
forks again, so a search tree is a tree of processes; ``close`` exits.

Rules in every child (see DESIGN.md "Kernel copies"): never touch inherited
ZMQ sockets or threads (the kernel's publishing paths are stubbed out in the
child's copy of memory), capture stdout/stderr/display data locally, die with
the parent (PDEATHSIG), leave only through ``os._exit`` so no exception or
atexit hook ever runs kernel code in a copy. Standard library only besides
IPython, which is present wherever this runs.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import errno
import fcntl
import gc
import io
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
import traceback
import warnings

from . import confine as _confine
from . import harden as _harden
from . import plots as _plots
from . import procs as _procs
from .protocol import PROTOCOL_VERSION, PeerClosed, ProtocolError, recv_frame, send_frame, token_ok
from .results import ExecResult, Limits, OutputItem, Protections, describe_value, truncate_text

_ACCEPT_TIMEOUT_S = 60.0


class ForkRefused(RuntimeError):
    """This kernel cannot be forked (no os.fork, not an IPython kernel...)."""


class CPUTimeLimitExceeded(BaseException):
    """Raised in the running cell when its CPU budget is spent (SIGXCPU).

    A BaseException so that ``except Exception`` in candidate code cannot
    swallow it.
    """


# ------------------------------------------------------------------ reaping

class _Reaper:
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
            with contextlib.suppress(Exception):
                on_exit()

    def exit_status(self, pid: int) -> int | None:
        with self._lock:
            return self.status.get(pid)

    def drop_inherited(self) -> None:
        """In a fresh fork: release the parent's reaper descriptors."""
        for fd in list(self._watched) + list(self._wake or ()):
            with contextlib.suppress(OSError):
                os.close(fd)


_REAPER = _Reaper()


# ------------------------------------------------------------------ capture

class _Sink:
    """Outputs of one exec, bounded like a notebook would want them."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.items: list[OutputItem] = []
        self.display_ids: dict[int, str] = {}  # id(item) -> display_id
        self.figures_described: set[int] = set()  # id(figure) of figures shown with their summary
        self.value = _NOVALUE
        self.error: tuple[str, str, list[str]] | None = None
        self.truncated = False
        self._clear_pending = False
        self._stream_used = {"stdout": 0, "stderr": 0}
        self._stream_dropped = {"stdout": 0, "stderr": 0}
        self._dropped_outputs = 0
        self._total = 0  # characters kept, against limits.max_total_bytes

    def _maybe_clear(self) -> None:
        if self._clear_pending:
            self._clear_pending = False
            self.clear(False)

    def clear(self, wait: bool = False) -> None:
        if wait:
            self._clear_pending = True
            return
        self.items = []
        self.display_ids = {}

    def stream(self, name: str, text: str) -> None:
        if not text:
            return
        if name not in self._stream_used:
            name = "stdout"
        self._maybe_clear()
        room = self.limits.max_output_chars - self._stream_used[name]
        if room <= 0:
            self._stream_dropped[name] += len(text)
            return
        if len(text) > room:
            self._stream_dropped[name] += len(text) - room
            text = text[:room]
        self._stream_used[name] += len(text)
        last = self.items[-1] if self.items else None
        if last is not None and last.output_type == "stream" and last.name == name:
            last.text = (last.text or "") + text
        else:
            self.items.append(OutputItem(output_type="stream", name=name, text=text))

    def _bundle(self, data: dict, metadata: dict) -> tuple[dict, dict, bool]:
        out: dict = {}
        trunc = False
        for mime, value in (data or {}).items():
            if isinstance(value, bytes):
                value = base64.b64encode(value).decode("ascii")
            if isinstance(value, str):
                if mime.startswith("image/") and mime != "image/svg+xml":
                    if len(value) > self.limits.max_image_bytes:
                        trunc = True
                        out.setdefault("text/plain", f"[{mime} omitted: {len(value)} bytes "
                                                     f"> {self.limits.max_image_bytes}]")
                        continue
                    out[mime] = value
                else:
                    out[mime], t = truncate_text(value, self.limits.max_output_chars)
                    trunc |= t
            else:
                try:
                    size = len(json.dumps(value, default=str))
                except Exception:
                    value, size = str(value), 0
                if size > self.limits.max_output_chars:
                    trunc = True
                    continue
                out[mime] = value
        try:
            md = json.loads(json.dumps(metadata or {}, default=str))
        except Exception:
            md = {}
        return out, md, trunc

    def display(self, data: dict, metadata: dict, output_type: str = "display_data",
                display_id: str | None = None, update: bool = False) -> None:
        self._maybe_clear()
        bundle, md, trunc = self._bundle(data, metadata)
        if update and display_id is not None:
            for item in self.items:
                if self.display_ids.get(id(item)) == display_id:
                    item.data, item.metadata, item.truncated = bundle, md, trunc
            return
        size = sum(len(v) if isinstance(v, str) else 64 for v in bundle.values())
        if (len(self.items) >= self.limits.max_outputs
                or self._total + size > self.limits.max_total_bytes):
            self._dropped_outputs += 1
            return
        self._total += size
        item = OutputItem(output_type=output_type, data=bundle, metadata=md, truncated=trunc)
        self.truncated |= trunc
        self.items.append(item)
        if display_id is not None:
            self.display_ids[id(item)] = display_id

    def error_from(self, ename: str, evalue: str, stb: list[str]) -> None:
        budget = self.limits.max_output_chars
        tb = []
        for line in stb:
            line, _ = truncate_text(str(line), budget)
            budget -= len(line)
            tb.append(line)
            if budget <= 0:
                tb.append("... [traceback truncated]")
                break
        evalue, _ = truncate_text(evalue, 2000)
        self.error = (ename, evalue, tb)
        self.items.append(OutputItem(output_type="error", ename=ename, evalue=evalue, traceback=tb))

    def finish(self) -> list[OutputItem]:
        for name, n in self._stream_dropped.items():
            if n:
                self.truncated = True
                marker = f"\n... [output truncated: {n} more characters]"
                streams = [i for i in self.items if i.output_type == "stream" and i.name == name]
                if streams:
                    streams[-1].text = (streams[-1].text or "") + marker
                    streams[-1].truncated = True
        if self._dropped_outputs:
            self.truncated = True
            self.items.append(OutputItem(
                output_type="stream", name="stderr", truncated=True,
                text=f"... [{self._dropped_outputs} more outputs omitted]\n"))
        return self.items


_NOVALUE = object()
_CURRENT: _Sink | None = None  # sink of the exec in progress, if any
_IN_EXEC = False


def _route_stream(name: str, text) -> int:
    if not isinstance(text, str):
        text = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text)
    sink = _CURRENT
    if sink is not None:
        sink.stream(name, text)
    return len(text)


class _CaptureStream(io.TextIOBase):
    """sys.stdout/sys.stderr of a snapshot: writes go to the current exec."""

    encoding = "utf-8"  # type: ignore[assignment]
    errors = "replace"  # type: ignore[assignment]

    def __init__(self, name: str, fd: int) -> None:
        super().__init__()
        self.name = name
        self._fd = fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def write(self, s) -> int:  # type: ignore[override]
        return _route_stream(self.name, s)

    def flush(self) -> None:
        pass

    @property
    def buffer(self):
        return _BytesToStream(self.name)


class _BytesToStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, b) -> int:
        _route_stream(self.name, bytes(b))
        return len(b)

    def flush(self) -> None:
        pass


class _State:
    """Per-process snapshot state (inherited by forks, then adjusted)."""

    def __init__(self, shell, limits: Limits, protections: Protections) -> None:
        self.shell = shell
        self.limits = limits
        self.protections = protections
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.out = _CaptureStream("stdout", 1)
        self.err = _CaptureStream("stderr", 2)
        self.preexisting_figs: set[int] = set()


_STATE: _State | None = None


# ------------------------------------------------------------------ child setup

def _require_shell():
    if not hasattr(os, "fork"):
        raise ForkRefused("os.fork is not available on this platform")
    try:
        from IPython import get_ipython
    except ImportError:
        raise ForkRefused("IPython is not importable in this kernel") from None
    shell = get_ipython()
    if shell is None:
        raise ForkRefused("not running inside an IPython shell")
    return shell


def _no_stdin(*args, **kwargs):
    raise RuntimeError("input() is not available in a kernel copy "
                       "(candidate cells cannot ask the user)")


def _stub_kernel_io() -> None:
    """Make every path to the kernel's ZMQ sockets a no-op in this process."""
    iostream = sys.modules.get("ipykernel.iostream")
    if iostream is not None:
        with contextlib.suppress(Exception):
            iostream.IOPubThread.send_multipart = lambda self, *a, **k: None
            iostream.IOPubThread.schedule = lambda self, f: None
            iostream.OutStream.write = lambda self, s: _route_stream(
                getattr(self, "name", "stdout") or "stdout", s)
            iostream.OutStream.writelines = lambda self, seq: _route_stream(
                getattr(self, "name", "stdout") or "stdout", "".join(seq)) and None
            iostream.OutStream.flush = lambda self: None
    session = sys.modules.get("jupyter_client.session")
    if session is not None:
        with contextlib.suppress(Exception):
            session.Session.send = lambda self, *a, **k: {}
    builtins.input = _no_stdin
    with contextlib.suppress(Exception):
        import getpass

        getpass.getpass = _no_stdin


def _on_xcpu(signum, frame):
    if _IN_EXEC:
        raise CPUTimeLimitExceeded("CPU time limit of this cell exceeded")


def _on_sigint(signum, frame):
    # Only a running cell is interrupted; between cells an interrupt must not
    # tear a reply in half on the channel.
    if _IN_EXEC:
        raise KeyboardInterrupt


def _reset_signals() -> None:
    for sig, handler in ((signal.SIGINT, _on_sigint),
                         (signal.SIGTERM, signal.SIG_DFL),
                         (signal.SIGCHLD, signal.SIG_DFL),
                         (signal.SIGXCPU, _on_xcpu)):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, handler)


def _install(state: _State) -> None:
    """Make ``state`` this process's snapshot state: the shell's display machinery
    writes to the per-exec sink, figures render with Agg."""
    global _STATE
    _STATE = state
    shell = state.shell
    dh = shell.displayhook

    def write_format_data(format_dict, md_dict=None):
        if _CURRENT is not None:
            _CURRENT.display(format_dict, md_dict or {}, "execute_result")

    def fill_exec_result(result):
        if getattr(dh, "exec_result", None) is not None:
            dh.exec_result.result = result
        if _CURRENT is not None:
            _CURRENT.value = result

    def quiet():
        # The stock hook looks at the last *stored* history entry; copies run
        # with store_history=False, so look at the cell being run instead.
        return dh.semicolon_at_end_of_expression(getattr(dh, "_jda_cell", ""))

    dh.start_displayhook = lambda: None
    dh.write_output_prompt = lambda: None
    dh.write_format_data = write_format_data
    dh.finish_displayhook = lambda: None
    dh.fill_exec_result = fill_exec_result
    dh.quiet = quiet
    dh.log_output = lambda format_dict: None
    shell.display_trap.hook = dh

    pub = shell.display_pub

    def publish(data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        if _CURRENT is not None:
            data = _plots.with_summary(data, _CURRENT.figures_described)
            did = (transient or {}).get("display_id")
            _CURRENT.display(data, metadata or {}, "display_data", did, update)

    def clear_output(wait=False):
        if _CURRENT is not None:
            _CURRENT.clear(wait)

    pub.publish = publish
    pub.clear_output = clear_output

    def _showtraceback(etype, evalue, stb):
        if _CURRENT is not None:
            text = str(evalue)
            if isinstance(evalue, OSError) and evalue.errno == errno.EBADF:
                text += f" ({_harden.PLACEHOLDER_NOTE})"
            _CURRENT.error_from(getattr(etype, "__name__", str(etype)), text, list(stb))

    shell._showtraceback = _showtraceback
    _prepare_matplotlib(state)


def _prepare_matplotlib(state: _State) -> None:
    """Agg in copies: figures become image/png like the inline backend's."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        os.environ["MPLBACKEND"] = "agg"
        mpl = sys.modules.get("matplotlib")
        if mpl is None and not os.environ.get("MPLCONFIGDIR"):
            # Without an existing config/cache dir matplotlib would try to
            # create one in $HOME (read-only here) and warn in every cell.
            home = os.path.expanduser("~")
            cfg = os.path.join(os.environ.get("XDG_CONFIG_HOME") or
                               os.path.join(home, ".config"), "matplotlib")
            cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                 os.path.join(home, ".cache"), "matplotlib")
            if not (os.path.isdir(cfg) and os.path.isdir(cache)):
                os.environ["MPLCONFIGDIR"] = os.path.join(tempfile.gettempdir(), "matplotlib")
        if mpl is not None:
            with contextlib.suppress(Exception):
                mpl.use("agg", force=True)
        return
    with contextlib.suppress(Exception):
        backend = str(plt.get_backend()).lower()
        if backend != "agg" and "inline" not in backend:
            plt.switch_backend("agg")
        from matplotlib._pylab_helpers import Gcf

        state.preexisting_figs = {m.num for m in Gcf.get_all_fig_managers()}


def _capture_figures(sink: _Sink, state: _State) -> None:
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    from matplotlib._pylab_helpers import Gcf

    for manager in list(Gcf.get_all_fig_managers()):
        fig = manager.canvas.figure
        if manager.num in state.preexisting_figs and not fig.stale:
            continue
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        # The text is the plot's summary (title, axes, series) for models that cannot see it.
        sink.display({"image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
                      "text/plain": _plots.summarize(fig) or repr(fig)}, {}, "display_data")
        state.preexisting_figs.discard(manager.num)
        plt.close(fig)


def sealed_capture(limit: int) -> list[int]:
    """Two memfds (stdout, stderr) ``limit`` bytes long, sealed against growing:
    output past the limit fails to write instead of being buffered, so the
    bound holds before anything is kept. What was written is the file offset.

    Copies cannot create memfds (the syscall filter denies them: memory no
    rlimit counts), so the client makes these for each exec and passes them
    with the request. Raises OSError where memfds do not exist.
    """
    fds: list[int] = []
    try:
        for name in ("jda-stdout", "jda-stderr"):
            fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            fds.append(fd)
            os.ftruncate(fd, limit)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK
                        | fcntl.F_SEAL_SEAL)
    except (AttributeError, OSError) as e:
        for fd in fds:
            os.close(fd)
        raise OSError(f"no sealed capture: {e}") from None
    return fds


def _fresh_fd_capture(limit: int, given: list[int] | None = None) -> tuple[int, int]:
    """fd 1/2 for this exec (C-level and subprocess output): the sealed memfds
    the client ``given`` with the request, else new ones, else (a replay
    kernel without memfds) unlinked files bounded by RLIMIT_FSIZE only."""
    if given is None or len(given) != 2:
        try:
            given = sealed_capture(limit)
        except OSError:
            given = [os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
                     for _ in range(2)]
    for fd, target in zip(given, (1, 2)):
        os.dup2(fd, target)
    return given[0], given[1]


def _drain_fd_capture(sink: _Sink, fds: tuple[int, int], state: _State) -> None:
    for f in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if f is not None:
                f.flush()
    with contextlib.suppress(Exception):
        _confine._get_libc().fflush(None)  # C stdio buffers of extensions
    limit = state.limits.max_capture_bytes
    for name, fd, target in (("stdout", fds[0], 1), ("stderr", fds[1], 2)):
        try:
            os.dup2(state.devnull, target)
            size = min(os.lseek(fd, 0, os.SEEK_CUR), limit)
            if size:
                data = os.pread(fd, size, 0).decode("utf-8", "replace")
                sink.stream(name, data)
                if size >= limit:
                    sink.truncated = True
                    sink.stream(name, f"\n... [output stopped at {limit} bytes]\n")
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)


def _scratch_over_cap(state: _State) -> int | None:
    """Bytes in scratch when over ``max_scratch_bytes`` (files, not links)."""
    scratch = state.protections.scratch
    if not scratch:
        return None
    total = 0

    def add(dir_fd, entry) -> None:
        nonlocal total
        st = entry.stat(follow_symlinks=False)
        total += 0 if stat.S_ISLNK(st.st_mode) else st.st_blocks * 512

    # iterative and relative: a candidate may nest folders past the recursion limit and PATH_MAX
    complete = _procs.walk_tree(scratch, add, max_entries=200_000)
    if not complete:  # too many entries to count: over any sensible cap
        return max(total, state.limits.max_scratch_bytes + 1)
    return total if total > state.limits.max_scratch_bytes else None


def _fork() -> int:
    # Python >= 3.12 warns about forking a threaded process; the child here
    # never relies on another thread's locks (see the module docstring).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _after_fork_common() -> None:
    global _REAPER
    _REAPER.drop_inherited()
    _REAPER = _Reaper()  # the parent's thread and lock are not ours
    _single_threaded_math()
    gc.freeze()  # later collections skip inherited objects: no copy-on-write storm


_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _single_threaded_math() -> None:
    """A thread pool the kernel started (torch's OpenMP) is gone in a fork, and
    the first parallel torch operation would wait on it forever: run the copy's
    math on one thread."""
    for name in _THREAD_VARS:
        os.environ[name] = "1"
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            torch.set_num_threads(1)


# ------------------------------------------------------------------ exec

def run_captured(code: str, capture: list[int] | None = None) -> ExecResult:
    """Run one cell like the notebook would and return its outputs; ``capture``:
    the sealed stdout/stderr memfds the client sent (``sealed_capture``)."""
    global _CURRENT, _IN_EXEC
    state = _STATE
    assert state is not None, "not a snapshot process"
    shell = state.shell
    sink = _Sink(state.limits)
    dh = shell.displayhook
    dh._jda_cell = code
    sys.displayhook = dh
    sys.stdout, sys.stderr = state.out, state.err
    fds = _fresh_fd_capture(state.limits.max_capture_bytes, capture)
    _CURRENT = sink
    result = None
    t0 = time.perf_counter()
    _confine.arm_cpu(state.limits.cpu_s)
    _IN_EXEC = True
    try:
        result = shell.run_cell(code, store_history=False, silent=False)
    except BaseException as e:  # raised outside user code (e.g. SIGXCPU in a hook)
        if sink.error is None:
            sink.error_from(type(e).__name__, str(e),
                            traceback.format_exception(type(e), e, e.__traceback__))
    finally:
        _IN_EXEC = False
        _confine.disarm_cpu()
    try:
        _capture_figures(sink, state)
    except BaseException as e:
        sink.stream("stderr", f"[figure capture failed: {type(e).__name__}: {e}]\n")
    duration = time.perf_counter() - t0
    _drain_fd_capture(sink, fds, state)
    used = _scratch_over_cap(state)
    if used is not None and sink.error is None:
        sink.error_from("ScratchQuotaExceeded", f"the cell left {used} bytes in the copy's "
                        f"scratch folder, over its cap of {state.limits.max_scratch_bytes}", [])
    _CURRENT = None
    outputs = sink.finish()
    failed = sink.error is not None or result is None or not getattr(result, "success", True)
    if failed and sink.error is None:
        err = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        sink.error_from(type(err).__name__ if err else "Error", str(err) if err else "", [])
    ename, evalue, tb = sink.error if sink.error else (None, None, [])
    limit = {"MemoryError": "memory", "CPUTimeLimitExceeded": "cpu",
             "ScratchQuotaExceeded": "disk"}.get(ename or "")
    value = None
    if sink.value is not _NOVALUE and sink.value is not None:
        value = describe_value(sink.value, state.limits.max_value_items, state.limits.max_form_cells)
    sink.value = _NOVALUE  # drop the reference; `_` in the namespace keeps it
    return ExecResult(status="error" if failed else "ok", outputs=outputs, value=value,
                      ename=ename, evalue=evalue, traceback=tb, duration_s=duration,
                      pid=os.getpid(), limit=limit, truncated=sink.truncated)


# ------------------------------------------------------------------ serving

def _fork_child(conn: socket.socket, fd: int):
    """Fork a child snapshot that talks on ``fd``; returns ('child', sock) in
    the child and ('parent', pid) in the parent."""
    parent_pid = os.getpid()
    pid = _fork()
    if pid == 0:
        try:
            _confine.set_pdeathsig()
            if os.getppid() != parent_pid:
                os._exit(0)
            conn.close()  # the parent's channel: only the parent answers on it
            if _STATE is not None and _STATE.protections.processes:
                _procs.set_subreaper()  # not inherited: a candidate's orphans stay ours
            if _STATE is not None and _STATE.protections.signal_scope:
                _confine.isolate_signals(_STATE.protections.landlock_abi)
            _after_fork_common()
            return "child", socket.socket(fileno=fd)
        except BaseException:
            os._exit(70)
    os.close(fd)
    _REAPER.watch(pid)
    return "parent", pid


def _hello_reply(rid, state: _State, kind: str = "hello") -> dict:
    return {"id": rid, "ok": True, "type": kind, "pid": os.getpid(),
            "version": PROTOCOL_VERSION, "protections": state.protections.to_json()}


def _serve(conn: socket.socket) -> None:
    """Request loop of one snapshot process; a fork continues it in the child
    with the child's own channel."""
    while True:
        try:
            msg, fds = recv_frame(conn, want_fds=2)
        except KeyboardInterrupt:
            continue
        except (PeerClosed, ProtocolError, OSError):
            os._exit(0)  # client gone: nobody can reach this snapshot any more
        rid = msg.get("id")
        op = msg.get("op")
        try:
            if op == "exec":
                capture, fds = (fds[:2], fds[2:]) if len(fds) >= 2 else (None, fds)
                res = run_captured(str(msg.get("code", "")), capture)  # the drain closes them
                reply = {"id": rid, "ok": True, "type": "ExecResult", "data": res.to_json()}
            elif op == "fork":
                if not fds:
                    raise ValueError("fork request without a descriptor")
                who, val = _fork_child(conn, fds[0])
                fds = fds[1:]
                if who == "child":
                    conn = val
                    send_frame(conn, _hello_reply(0, _STATE, "ready"))
                    continue
                reply = {"id": rid, "ok": True, "type": "forked", "pid": val}
            elif op == "ping":
                reply = {"id": rid, "ok": True, "type": "pong", "pid": os.getpid()}
            elif op == "child_status":
                reply = {"id": rid, "ok": True, "type": "child_status",
                         "status": _REAPER.exit_status(int(msg.get("pid", 0)))}
            elif op == "close":
                try:
                    send_frame(conn, {"id": rid, "ok": True, "type": "closed"})
                finally:
                    os._exit(0)
            else:
                raise ValueError(f"unknown op {op!r}")
        except KeyboardInterrupt:
            reply = {"id": rid, "ok": False, "error": "KeyboardInterrupt"}
        except Exception as e:
            reply = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()}
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            try:
                send_frame(conn, reply)
            except ProtocolError as e:  # too large to send: say so instead
                if isinstance(e, PeerClosed):
                    raise
                send_frame(conn, {"id": rid, "ok": False, "error": f"reply not sent: {e}"})
        except OSError:
            os._exit(0)


def _accept(listener: socket.socket, token: str) -> tuple[socket.socket, dict] | None:
    listener.settimeout(_ACCEPT_TIMEOUT_S)
    for _ in range(8):
        try:
            c, _addr = listener.accept()
        except OSError:
            return None
        with contextlib.suppress(OSError, ProtocolError):
            c.settimeout(10.0)
            msg, fds = recv_frame(c)
            if msg.get("op") == "hello" and token_ok(token, msg.get("token")):
                c.settimeout(None)
                return c, msg
            send_frame(c, {"id": msg.get("id"), "ok": False, "error": "bad token"})
        c.close()
    return None


def _root_child(shell, *, conn, listener, token, sockdir, close_in_child, parent_pid,
                notebook_dir, scratch, limits: Limits, tag: str, wipe=()) -> None:
    """Body of the root snapshot; never returns into the kernel's stack."""
    code = 0
    try:
        out, err = _CaptureStream("stdout", 1), _CaptureStream("stderr", 2)
        sys.stdout, sys.stderr = out, err  # before anything could print
        _confine.set_pdeathsig()
        if os.getppid() != parent_pid:
            os._exit(0)
        keep = {s.fileno() for s in (conn, listener) if s is not None}
        for s in close_in_child:
            s.close()
        # stdin/out/err -> /dev/null; every other inherited descriptor but ``keep`` -> a dead
        # one (``harden.close_inherited_fds``): the kernel's ZMQ sockets, eventfds, capture
        # pipes and the user's files are out of reach from the first instruction of the copy
        _harden.stdio_to_devnull()
        _harden.close_inherited_fds(keep)
        _reset_signals()
        _stub_kernel_io()
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # the user's interrupts (killpg of the kernel) spare copies
        _after_fork_common()
        if listener is not None:
            got = _accept(listener, token)
            listener.close()
            shutil.rmtree(sockdir, ignore_errors=True)
            if got is None:
                os._exit(0)
            conn, hello = got
        else:
            conn.settimeout(_ACCEPT_TIMEOUT_S)
            hello, _ = recv_frame(conn)
            conn.settimeout(None)
        try:
            protections = _confine.confine(scratch, notebook_dir, limits,
                                           keep_fds={conn.fileno()}, tag=tag, secrets=wipe)
        except Exception as e:
            send_frame(conn, {"id": hello.get("id"), "ok": False,
                              "error": f"confinement failed: {type(e).__name__}: {e}"})
            os._exit(0)
        state = _State(shell, limits, protections)
        state.out, state.err = out, err
        _install(state)
        send_frame(conn, _hello_reply(hello.get("id"), state))
        _serve(conn)
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def _fork_root(shell, *, conn=None, listener=None, token=None, sockdir=None,
               close_in_child=(), notebook_dir=None, scratch=None, limits=None,
               tag: str, wipe=()) -> tuple[int, str]:
    limits = limits if isinstance(limits, Limits) else Limits.from_json(limits)
    notebook_dir = os.path.abspath(notebook_dir or os.getcwd())
    scratch = (os.path.abspath(scratch) if scratch
               else tempfile.mkdtemp(prefix=f"{_procs.SCRATCH_PREFIX}{tag}-"))
    parent_pid = os.getpid()
    try:
        pid = _fork()
    except OSError as e:
        raise ForkRefused(f"fork failed: {e}") from e
    if pid == 0:
        _root_child(shell, conn=conn, listener=listener, token=token, sockdir=sockdir,
                    close_in_child=close_in_child, parent_pid=parent_pid,
                    notebook_dir=notebook_dir, scratch=scratch, limits=limits, tag=tag,
                    wipe=wipe)
        os._exit(70)  # unreachable
    on_exit = (lambda: shutil.rmtree(sockdir, ignore_errors=True)) if sockdir else None
    _REAPER.watch(pid, on_exit)
    return pid, scratch


def start_root_socket(notebook_dir: str | None = None, scratch: str | None = None,
                      limits: dict | None = None, client_pid: int | None = None) -> str:
    """Fork the kernel into a root snapshot listening on a private Unix socket.

    Called through a silent execute request; returns JSON with pid, socket
    path and the token the client must present (the socket file and its
    0700 directory are removed by the root once the client is in).
    """
    shell = _require_shell()
    tag = _procs.owner_tag(os.getpid(), client_pid or os.getpid())
    sockdir = tempfile.mkdtemp(prefix=f"{_procs.SOCK_PREFIX}{tag}-")
    path = os.path.join(sockdir, "root.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen(4)
        token = secrets.token_hex(32)
        pid, scratch = _fork_root(shell, listener=listener, token=token, sockdir=sockdir,
                                  notebook_dir=notebook_dir, scratch=scratch, limits=limits,
                                  tag=tag)
    except BaseException:
        shutil.rmtree(sockdir, ignore_errors=True)
        raise
    finally:
        listener.close()
    return json.dumps({"pid": pid, "path": path, "token": token, "scratch": scratch,
                       "version": PROTOCOL_VERSION, "kernel_pid": os.getpid()})


def start_root_pair(notebook_dir: str | None = None, scratch: str | None = None,
                    limits: Limits | dict | None = None, wipe: list[str] = ()
                    ) -> tuple[int, socket.socket, str]:
    """Fork the current kernel into a root snapshot on a socketpair (magic path).

    ``wipe``: secret values this kernel holds beyond its environment (the magic's
    API key from a config file), wiped from the copy's memory too.
    Returns (pid, client socket, scratch dir).
    """
    shell = _require_shell()
    tag = _procs.owner_tag(os.getpid(), os.getpid())
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid, scratch = _fork_root(shell, conn=theirs, close_in_child=[mine],
                                  notebook_dir=notebook_dir, scratch=scratch, limits=limits,
                                  tag=tag, wipe=[v.encode() for v in wipe if v])
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    return pid, mine, scratch


# ------------------------------------------------------------------ replay kernels

def init_replay(notebook_dir: str | None = None, scratch: str | None = None,
                limits: dict | None = None) -> str:
    """Prepare a private replay kernel (the fallback where fork is unavailable).

    Same capture as a fork copy; Landlock binds the calling thread only, which
    here is the main thread where cells (and the threads they start) run —
    the kernel's own I/O threads keep working. Returns Protections as JSON;
    rlimits come after the notebook is replayed (``limit_replay``).
    """
    shell = _require_shell()
    limits_obj = Limits.from_json(limits)
    notebook_dir = os.path.abspath(notebook_dir or os.getcwd())
    scratch = os.path.abspath(scratch) if scratch else tempfile.mkdtemp(prefix="jda-scratch-")
    notes = _confine.prepare_scratch(scratch, notebook_dir)
    os.chdir(scratch)
    os.environ["TMPDIR"] = os.path.join(scratch, _confine.TMP_SUBDIR)
    tempfile.tempdir = None
    abi = _confine.landlock_abi()
    fs = net = scope = False
    if not limits_obj.landlock:
        notes.append("Landlock disabled by configuration")
    else:
        try:
            fs, net, scope, n = _confine.apply_landlock([scratch], limits_obj.deny_network, abi)
            notes += n
        except OSError as e:
            notes.append(f"Landlock failed: {e}")
    if fs:
        notes.append("Landlock covers the replay kernel's main thread (where cells run)")
    prot = Protections(landlock_fs=fs, landlock_net=net, timeout=limits_obj.timeout_s > 0,
                       landlock_abi=abi, signal_scope=scope, scratch=scratch, notes=notes)
    _install(_State(shell, limits_obj, prot))
    _reset_signals()
    builtins.input = _no_stdin
    return json.dumps(prot.to_json())


def limit_replay() -> str:
    """Apply rlimits once the replayed state is loaded (bounds are relative to it)."""
    assert _STATE is not None
    cpu_ok, as_ok, notes = _confine.set_rlimits(_STATE.limits)
    p = _STATE.protections
    p.rlimit_cpu, p.rlimit_as = cpu_ok, as_ok
    p.notes += notes
    return json.dumps(p.to_json())


def run_captured_json(code: str) -> str:
    return json.dumps(run_captured(code).to_json(), default=str)
