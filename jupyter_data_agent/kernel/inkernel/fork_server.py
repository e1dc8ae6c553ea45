"""Snapshot server: what the client calls inside the user's kernel.

``start_root_socket`` (server path, called by a silent execute request) and
``start_root_pair`` (in-kernel path, called by the ``%%agent`` magic) fork the
IPython kernel process. The child — the root snapshot — shares the kernel's
memory copy-on-write and serves requests on its own channel; a search tree
is a tree of such processes. ``init_replay``/``limit_replay``/
``run_captured_json`` make a private kernel a replay copy instead (where
fork is unavailable).

The copy's side lives in its own modules: ``after_fork`` (from the
instruction after ``fork()`` until the copy is set up), ``copy_server`` (its
request loop), ``cell_exec`` (running a cell with the shell's machinery),
``capture`` (bounded outputs), ``reaper`` (reaping forked copies). Rules in
every child (see DESIGN.md "Kernel copies"): never touch inherited ZMQ
sockets or threads, capture stdout/stderr/display data locally, die with the
parent (PDEATHSIG), leave only through ``os._exit``. Injected into kernels as
package ``_jda_kernel`` (``bootstrap``); standard library only besides
IPython, which is present wherever this runs.
"""

from __future__ import annotations

import builtins
import functools
import json
import os
import secrets
import shutil
import socket
import tempfile

from ..copy import after_fork as _after_fork
from ..copy import cell_exec as _cell_exec
from ..copy import confine as _confine
from ..copy import copy_server as _copy_server
from ..copy import procs as _procs
from ..copy.capture import sealed_capture as sealed_capture
from ..copy.cell_exec import CPUTimeLimitExceeded as CPUTimeLimitExceeded
from ..copy.cell_exec import State, install, no_stdin, reset_signals, run_captured
from ..copy.reaper import REAPER
from ..protocol import PROTOCOL_VERSION
from ..results import Limits, Protections


class ForkRefused(RuntimeError):
    """This kernel cannot be forked (no os.fork, not an IPython kernel...)."""


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


# ------------------------------------------------------------------ fork copies

def _fork_root(shell, *, conn=None, listener=None, token=None, sockdir=None,
               close_in_child=(), notebook_dir=None, scratch=None, limits=None,
               tag: str, wipe=()) -> tuple[int, str]:
    limits = limits if isinstance(limits, Limits) else Limits.from_json(limits)
    notebook_dir = os.path.abspath(notebook_dir or os.getcwd())
    scratch = (os.path.abspath(scratch) if scratch
               else tempfile.mkdtemp(prefix=f"{_procs.SCRATCH_PREFIX}{tag}-"))
    parent_pid = os.getpid()
    main = functools.partial(_copy_server.root_main, shell, conn=conn, listener=listener,
                             token=token, sockdir=sockdir, notebook_dir=notebook_dir,
                             scratch=scratch, limits=limits, tag=tag, wipe=wipe)
    try:
        pid = _after_fork.fork()
    except OSError as e:
        raise ForkRefused(f"fork failed: {e}") from e
    if pid == 0:
        _after_fork.run_root(main, conn=conn, listener=listener, close_in_child=close_in_child,
                             parent_pid=parent_pid)
        os._exit(70)  # unreachable
    on_exit = (lambda: shutil.rmtree(sockdir, ignore_errors=True)) if sockdir else None
    REAPER.watch(pid, on_exit)
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
    install(State(shell, limits_obj, prot))
    reset_signals()
    builtins.input = no_stdin
    return json.dumps(prot.to_json())


def limit_replay() -> str:
    """Apply rlimits once the replayed state is loaded (bounds are relative to it)."""
    state = _cell_exec.STATE
    assert state is not None
    _confine.lower_priority(state.limits.nice)
    cpu_ok, as_ok, notes = _confine.set_rlimits(state.limits)
    p = state.protections
    p.rlimit_cpu, p.rlimit_as = cpu_ok, as_ok
    p.notes += notes
    return json.dumps(p.to_json())


def run_captured_json(code: str) -> str:
    return json.dumps(run_captured(code).to_json(), default=str)
