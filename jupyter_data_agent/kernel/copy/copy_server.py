"""A kernel copy's request loop: the life of a copy once it is set up.

The root copy greets its client (``root_main``): the one that presents the
token on the private socket (server path) or the kernel's end of the
socketpair (magic path); then it confines itself and serves requests on its
channel: ``exec`` runs a cell (``cell_exec.run_captured``) and returns
notebook-like outputs; ``fork`` forks again, so a search tree is a tree of
processes, and the child serves on the channel that came with the request;
``ping``, ``child_status`` (why a child died); ``close`` exits. Imported
inside the kernel and its forks (``_jda_kernel``): standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import traceback

from ..protocol import PROTOCOL_VERSION, PeerClosed, ProtocolError, recv_frame, send_frame, token_ok
from ..results import Limits
from . import after_fork as _after_fork
from . import cell_exec as _cell_exec
from . import confine as _confine
from . import namespace_diff as _namespace_diff
from .cell_exec import State, install, run_captured
from .reaper import REAPER

ACCEPT_TIMEOUT_S = 60.0


def _fork_child(conn: socket.socket, fd: int, own_scratch: bool = False):
    """Fork a child snapshot that talks on ``fd`` (with a scratch folder of its
    own when ``own_scratch``); returns ('child', sock) in the child and
    ('parent', pid) in the parent."""
    parent_pid = os.getpid()
    pid = _after_fork.fork()
    if pid == 0:
        return "child", _after_fork.enter_forked_child(conn, fd, parent_pid, own_scratch)
    os.close(fd)
    REAPER.watch(pid)
    return "parent", pid


def _exec(code: str, capture, namespace: bool):
    """One cell (``capture``: its stdout/stderr memfds, closed by the drain); with ``namespace``,
    what it added, changed and deleted, from the fingerprint the copy kept (or one taken now)."""
    state = _cell_exec.STATE
    if not namespace:
        state.fingerprint = None  # this cell may change what the kept fingerprint says
        return run_captured(code, capture)
    before = state.fingerprint if state.fingerprint is not None else _fingerprint(state)
    files_before = _scratch_files(state)
    res = run_captured(code, capture)
    state.fingerprint = after = _fingerprint(state)
    res.namespace = (_namespace_diff.diff(before, after, files_before, _scratch_files(state))
                     if before is not None and after is not None
                     else {"note": "the namespace could not be read"})
    return res


def _scratch_files(state):
    try:
        return _namespace_diff.scratch_files(state.protections.scratch)
    except Exception:  # noqa: BLE001 - no scratch to read: the files written are not known
        return None


def _fingerprint(state):
    try:
        return _namespace_diff.fingerprint(state.shell.user_ns)
    except Exception:  # noqa: BLE001 - the user's namespace (a dict subclass, anything): unknown
        return None


def _hello_reply(rid, state: State, kind: str = "hello") -> dict:
    return {"id": rid, "ok": True, "type": kind, "pid": os.getpid(),
            "version": PROTOCOL_VERSION, "protections": state.protections.to_json()}


def serve(conn: socket.socket) -> None:
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
                res = _exec(str(msg.get("code", "")), capture, msg.get("namespace") is True)
                reply = {"id": rid, "ok": True, "type": "ExecResult", "data": res.to_json()}
            elif op == "fork":
                if not fds:
                    raise ValueError("fork request without a descriptor")
                who, val = _fork_child(conn, fds[0], msg.get("own_scratch") is True)
                fds = fds[1:]
                if who == "child":
                    conn = val
                    send_frame(conn, _hello_reply(0, _cell_exec.STATE, "ready"))
                    continue
                reply = {"id": rid, "ok": True, "type": "forked", "pid": val}
            elif op == "ping":
                reply = {"id": rid, "ok": True, "type": "pong", "pid": os.getpid()}
            elif op == "child_status":
                reply = {"id": rid, "ok": True, "type": "child_status",
                         "status": REAPER.exit_status(int(msg.get("pid", 0)))}
            elif op == "close":
                try:
                    send_frame(conn, {"id": rid, "ok": True, "type": "closed"})
                finally:
                    os._exit(0)
            else:
                raise ValueError(f"unknown op {op!r}")
        except KeyboardInterrupt:
            reply = {"id": rid, "ok": False, "error": "KeyboardInterrupt"}
        except Exception as e:  # noqa: BLE001 - any failure of a request is its reply
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
    listener.settimeout(ACCEPT_TIMEOUT_S)
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


def root_main(shell, out, err, *, conn, listener, token, sockdir, notebook_dir, scratch,
              limits: Limits, tag: str, wipe=()) -> None:
    """The root copy once forked (``after_fork.run_root``): greet the client,
    confine this process, install the capture, serve. Ends in ``os._exit``."""
    if listener is not None:
        got = _accept(listener, token)
        listener.close()
        shutil.rmtree(sockdir, ignore_errors=True)
        if got is None:
            os._exit(0)
        conn, hello = got
    else:
        conn.settimeout(ACCEPT_TIMEOUT_S)
        hello, _ = recv_frame(conn)
        conn.settimeout(None)
    try:
        protections = _confine.confine(scratch, notebook_dir, limits,
                                       keep_fds={conn.fileno()}, tag=tag, secrets=wipe)
    except Exception as e:  # noqa: BLE001 - whatever fails, the client is told and the copy ends
        send_frame(conn, {"id": hello.get("id"), "ok": False,
                          "error": f"confinement failed: {type(e).__name__}: {e}"})
        os._exit(0)
    state = State(shell, limits, protections)
    state.notebook_dir = notebook_dir  # a child with a scratch folder of its own links it anew
    state.out, state.err = out, err
    install(state)
    send_frame(conn, _hello_reply(hello.get("id"), state))
    serve(conn)
