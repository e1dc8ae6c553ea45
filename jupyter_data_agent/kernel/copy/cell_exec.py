"""Running one cell in a kernel copy (or a replay kernel) like the notebook would.

``install`` points the shell's display hooks, traceback printer and
matplotlib at the exec in progress; ``run_captured`` runs a cell with the
shell's own machinery, under the copy's CPU budget, and returns its bounded
outputs as an ``ExecResult``. Imported inside the kernel and its forks
(``_jda_kernel``): standard library only besides IPython, which is present
wherever this runs.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import io
import os
import signal
import sys
import tempfile
import time
import traceback

from .. import plots as _plots
from ..results import ExecResult, Limits, Protections, describe_value
from . import confine as _confine
from . import harden as _harden
from .capture import NOVALUE, Sink, drain_fd_capture, fresh_fd_capture, scratch_over_cap


class CPUTimeLimitExceeded(BaseException):
    """Raised in the running cell when its CPU budget is spent (SIGXCPU).

    A BaseException so that ``except Exception`` in candidate code cannot
    swallow it.
    """


_CURRENT: Sink | None = None  # sink of the exec in progress, if any
_IN_EXEC = False
_SHOWTRACEBACK = None  # the traceback printer ``install`` gave the shell


def route_stream(name: str, text) -> int:
    if not isinstance(text, str):
        text = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text)
    sink = _CURRENT
    if sink is not None:
        sink.stream(name, text)
    return len(text)


class CaptureStream(io.TextIOBase):
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
        return route_stream(self.name, s)

    def flush(self) -> None:
        pass

    @property
    def buffer(self):
        return _BytesToStream(self.name)


class _BytesToStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, b) -> int:
        route_stream(self.name, bytes(b))
        return len(b)

    def flush(self) -> None:
        pass


class State:
    """Per-process snapshot state (inherited by forks, then adjusted)."""

    def __init__(self, shell, limits: Limits, protections: Protections) -> None:
        self.shell = shell
        self.limits = limits
        self.protections = protections
        self.notebook_dir: str | None = None
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.out = CaptureStream("stdout", 1)
        self.err = CaptureStream("stderr", 2)
        self.preexisting_figs: set[int] = set()
        # The namespace's fingerprint after the last cell, when that cell asked for it
        # (``namespace_diff``); a fork inherits it.
        self.fingerprint: dict | None = None
        # The shell's own machinery that runs a cell and says whether it raised, as it was
        # before any cell ran here (``_restore_machinery``).
        self.machinery = _machinery(shell)


STATE: State | None = None

#: What decides a cell's outcome: the run path of the shell, and the result's verdict.
_RUN_PATH = ("run_cell", "_run_cell", "run_cell_async", "run_code", "run_ast_nodes", "should_run_async",
             "transform_cell", "transform_ast", "showtraceback", "showsyntaxerror", "get_exception_only")


def _machinery(shell) -> list[tuple[type, str, object]]:
    """Where each method of the run path is defined, and what it is (class attributes)."""
    found = []
    classes = list(type(shell).__mro__)
    with contextlib.suppress(ImportError):
        from IPython.core.interactiveshell import ExecutionResult

        classes.append(ExecutionResult)
    for name in (*_RUN_PATH, "success", "raise_error"):
        for cls in classes:
            if name in cls.__dict__:
                found.append((cls, name, cls.__dict__[name]))
                break
    return found


def _restore_machinery(state: State) -> None:
    """Undo what an earlier cell did to the shell's run path, on the instance or its class,
    so a cell cannot make the next one report "ok" by replacing it (a copy can still rewrite
    its own code objects: what a copy says of itself is the copy's word)."""
    shell = state.shell
    for cls, name, original in state.machinery:
        if cls.__dict__.get(name) is not original:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(cls, name, original)
        if name in _RUN_PATH:
            with contextlib.suppress(AttributeError, TypeError):
                vars(shell).pop(name, None)


def no_stdin(*args, **kwargs):
    raise RuntimeError("input() is not available in a kernel copy "
                       "(candidate cells cannot ask the user)")


def _on_xcpu(signum, frame):
    if _IN_EXEC:
        raise CPUTimeLimitExceeded("CPU time limit of this cell exceeded")


def _on_sigint(signum, frame):
    # Only a running cell is interrupted; between cells an interrupt must not
    # tear a reply in half on the channel.
    if _IN_EXEC:
        raise KeyboardInterrupt


def reset_signals() -> None:
    for sig, handler in ((signal.SIGINT, _on_sigint),
                         (signal.SIGTERM, signal.SIG_DFL),
                         (signal.SIGCHLD, signal.SIG_DFL),
                         (signal.SIGXCPU, _on_xcpu)):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, handler)


def install(state: State) -> None:
    """Make ``state`` this process's snapshot state: the shell's display machinery
    writes to the per-exec sink, figures render with Agg."""
    global STATE
    STATE = state
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

    global _SHOWTRACEBACK
    shell._showtraceback = _SHOWTRACEBACK = _showtraceback
    _prepare_matplotlib(state)
    _warm_formatters(shell)


def _warm_formatters(shell) -> None:
    """Make the shell's display formatters now, once, in the root: a kernel that never showed a
    value has not made them yet, and every copy forked from it would make its own on its first
    value (~6 ms on a 2-core machine)."""
    with contextlib.suppress(Exception):  # the user's formatters: any failure is theirs, later
        shell.display_formatter.format(0)


def _prepare_matplotlib(state: State) -> None:
    """Agg in copies: figures become image/png like the inline backend's."""
    plt = sys.modules.get("matplotlib.pyplot")
    mpl = sys.modules.get("matplotlib")
    if plt is None:
        os.environ["MPLBACKEND"] = "agg"
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
    try:
        if plt is None:
            if mpl is not None:
                mpl.use("agg", force=True)
            return
        backend = str(plt.get_backend()).lower()
        if backend != "agg" and "inline" not in backend:
            plt.switch_backend("agg")
        from matplotlib._pylab_helpers import Gcf  # noqa: PLC2701 - the figures without making one current

        state.preexisting_figs = {m.num for m in Gcf.get_all_fig_managers()}
    except Exception:  # noqa: BLE001, S110 - the user's matplotlib (any backend, any version)
        pass  # must not keep a copy from starting; its figures then go uncaptured


def _capture_figures(sink: Sink, state: State) -> None:
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    from matplotlib._pylab_helpers import Gcf  # noqa: PLC2701 - the figures without making one current

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

# ------------------------------------------------------------------ exec

def run_captured(code: str, capture: list[int] | None = None) -> ExecResult:
    """Run one cell like the notebook would and return its outputs; ``capture``:
    the sealed stdout/stderr memfds the client sent (``sealed_capture``)."""
    global _CURRENT, _IN_EXEC
    state = STATE
    assert state is not None, "not a snapshot process"
    shell = state.shell
    _restore_machinery(state)
    shell._showtraceback = _SHOWTRACEBACK or shell._showtraceback
    sink = Sink(state.limits)
    dh = shell.displayhook
    dh._jda_cell = code
    sys.displayhook = dh
    sys.stdout, sys.stderr = state.out, state.err
    fds = fresh_fd_capture(state.limits.max_capture_bytes, capture)
    _CURRENT = sink
    result = None
    t0 = time.perf_counter()
    _confine.arm_cpu(state.limits.cpu_s)
    _IN_EXEC = True
    try:
        result = shell.run_cell(code, store_history=False, silent=False)
    except BaseException as e:  # noqa: BLE001 - raised outside user code (SIGXCPU in a hook): the cell's error
        if sink.error is None:
            sink.error_from(type(e).__name__, str(e),
                            traceback.format_exception(type(e), e, e.__traceback__))
    finally:
        _IN_EXEC = False
        _confine.disarm_cpu()
    try:
        _capture_figures(sink, state)
    except BaseException as e:  # noqa: BLE001 - a figure that cannot render is reported, not raised
        sink.stream("stderr", f"[figure capture failed: {type(e).__name__}: {e}]\n")
    duration = time.perf_counter() - t0
    drain_fd_capture(sink, fds, state.devnull, state.limits.max_capture_bytes)
    used = scratch_over_cap(state.protections.scratch, state.limits.max_scratch_bytes)
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
    if sink.value is not NOVALUE and sink.value is not None:
        value = describe_value(sink.value, state.limits.max_value_items, state.limits.max_form_cells)
    sink.value = NOVALUE  # drop the reference; `_` in the namespace keeps it
    return ExecResult(status="error" if failed else "ok", outputs=outputs, value=value,
                      ename=ename, evalue=evalue, traceback=tb, duration_s=duration,
                      pid=os.getpid(), limit=limit, truncated=sink.truncated)

