"""The code a new kernel copy runs from the instruction after ``fork()``.

Until a copy serves requests there is no one to tell about a failure and no
safe way to log one (the forking process's other threads, and the locks and
sockets they held, do not exist here): every step either succeeds, is
skipped silently, or ends the copy with ``os._exit``. Nothing ever raises
back into the kernel's stack, and no exception or atexit hook ever runs
kernel code in a copy. This module's broad, silent handlers are deliberate.

Rules in every child: never touch inherited ZMQ sockets or threads (the
kernel's publishing paths are stubbed out in the child's copy of memory),
die with the parent (PDEATHSIG), leave only through ``os._exit``. Imported
inside the kernel and its forks (``_jda_kernel``): standard library only.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import os
import socket
import sys
import tempfile
import warnings

from . import cell_exec as _cell_exec
from . import confine as _confine
from . import harden as _harden
from . import procs as _procs
from .cell_exec import CaptureStream, no_stdin, reset_signals, route_stream
from .reaper import REAPER


def fork() -> int:
    """``os.fork()``, the child keeping the ``random`` module's state.

    ``random`` reseeds itself in every child (an at-fork hook), so a copy drew
    other numbers than the kernel it copies would; a copy is that kernel's state,
    random state included (numpy's is kept by the fork itself)."""
    rnd = sys.modules.get("random")
    state = None
    with contextlib.suppress(Exception):
        state = rnd.getstate() if rnd is not None else None
    # Python >= 3.12 warns about forking a threaded process; the child here
    # never relies on another thread's locks (see the module docstring).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0 and state is not None:
        with contextlib.suppress(Exception):
            rnd.setstate(state)  # type: ignore[union-attr]
    return pid


def enter_forked_child(conn: socket.socket, fd: int, parent_pid: int, own_scratch: bool = False) -> socket.socket:
    """In a copy just forked from a copy: its own channel (on ``fd``), once it
    is set up like its parent (with a scratch folder of its own when
    ``own_scratch``: ``take_own_scratch``); any failure ends it."""
    try:
        _confine.set_pdeathsig()
        if os.getppid() != parent_pid:
            os._exit(0)
        conn.close()  # the parent's channel: only the parent answers on it
        state = _cell_exec.STATE
        if state is not None and state.protections.processes:
            _procs.set_subreaper()  # not inherited: a candidate's orphans stay ours
        if own_scratch:
            take_own_scratch(state)  # its Landlock layer scopes signals too
        elif state is not None and state.protections.signal_scope:
            _confine.isolate_signals(state.protections.landlock_abi)
        renew()
        return socket.socket(fileno=fd)
    except BaseException:
        os._exit(70)


def take_own_scratch(state) -> None:
    """A scratch folder of its own for a copy forked from a shared root (a kernel's warm root).

    Every fresh try forks the kernel's one warm root, whose scratch folder they
    would share: a file one try wrote would be there for the next, another
    user's included. A fork of the live kernel gets a new scratch folder; so
    does this child: a new folder in the root's, made its working directory and
    TMPDIR, the notebook folder's entries linked anew; then one more Landlock
    layer (inherited by the copies forked from it) under which it writes only
    there, and reads nothing of the root's scratch but that folder, nor any
    other copy tree's scratch beside it. Landlock grants a folder's whole
    subtree, so under that layer the folders above those (``/``, the temporary
    folder) cannot be listed; their other entries stay readable. Raises when a
    step fails: the copy then ends, unused.
    """
    p = state.protections
    if not p.scratch:
        raise RuntimeError("the root copy has no scratch folder")
    root_scratch = os.path.realpath(p.scratch)
    own = tempfile.mkdtemp(prefix="try-", dir=root_scratch)
    p.notes = [*p.notes, *_confine.prepare_scratch(own, getattr(state, "notebook_dir", None))]
    os.chdir(own)
    os.environ["TMPDIR"] = os.path.join(own, _confine.TMP_SUBDIR)
    tempfile.tempdir = None  # recomputed from TMPDIR on next use
    p.scratch = own
    if p.landlock_fs:
        hidden = [root_scratch, *_confine.other_scratch(root_scratch)]
        _confine.apply_landlock([own], False, p.landlock_abi, hidden, list_all=False)
    elif p.signal_scope:
        _confine.isolate_signals(p.landlock_abi)


def run_root(main, *, conn, listener, close_in_child, parent_pid: int) -> None:
    """Body of the root copy, just forked from the kernel; never returns into
    the kernel's stack.

    Makes this process a copy (capture streams, PDEATHSIG, inherited
    descriptors out of reach, signals, kernel I/O stubbed, own process
    group), then runs ``main(out, err)``: the copy's life
    (``copy_server.root_main``), which ends in ``os._exit`` too.
    """
    code = 0
    try:
        out, err = CaptureStream("stdout", 1), CaptureStream("stderr", 2)
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
        reset_signals()
        stub_kernel_io()
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # the user's interrupts (killpg of the kernel) spare copies
        renew()
        main(out, err)
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def stub_kernel_io() -> None:
    """Make every path to the kernel's ZMQ sockets a no-op in this process."""
    iostream = sys.modules.get("ipykernel.iostream")
    if iostream is not None:
        with contextlib.suppress(Exception):
            iostream.IOPubThread.send_multipart = lambda self, *a, **k: None
            iostream.IOPubThread.schedule = lambda self, f: None
            iostream.OutStream.write = lambda self, s: route_stream(
                getattr(self, "name", "stdout") or "stdout", s)
            iostream.OutStream.writelines = lambda self, seq: route_stream(
                getattr(self, "name", "stdout") or "stdout", "".join(seq)) and None
            iostream.OutStream.flush = lambda self: None
    session = sys.modules.get("jupyter_client.session")
    if session is not None:
        with contextlib.suppress(Exception):
            session.Session.send = lambda self, *a, **k: {}
    builtins.input = no_stdin
    with contextlib.suppress(Exception):
        import getpass

        getpass.getpass = no_stdin


def renew() -> None:
    """What every fork needs: its own reaper, one math thread, a frozen heap."""
    REAPER.renew_in_child()  # the parent's thread and lock are not ours
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
