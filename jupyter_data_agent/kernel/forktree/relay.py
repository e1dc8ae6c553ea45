"""The kernel side of copies reached over the kernel channel (a kernel on another host).

A server that cannot reach a kernel's sockets (the kernel runs behind a
kernel gateway) drives its copies through the kernel itself: one silent
execute request calls ``start_relay``, which forks the root copy and opens
the tree's client *here*, in the kernel, with every check the local client
makes (the sender's pid from ``SO_PASSCRED``, pidfds, the trusted cgroup,
the memory budget, eviction). The server then sends ``fork``/``exec``/
``close`` as Jupyter comm messages to a target whose name only that reply
carried; each runs in a worker thread, so the kernel's shell thread only
queues it, and the reply goes back as a comm message on IOPub.

The relay holds the tree for one turn: it ends with the comm's close, the
kernel's end, or ``idle_close_s`` without a request (a server that went away).
Injected into kernels as ``_jda_kernel.forktree.relay`` (``bootstrap``).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..protocol import PROTOCOL_VERSION
from ..results import Limits
from ..tree import SnapshotError

TARGET_PREFIX = "jupyter_data_agent.copies."
MAX_REQUEST_CODE = 1 << 20  # a candidate cell's source, at most
_RELAYS: dict[str, "Relay"] = {}


class Relay:
    """One turn's copy tree, in the kernel, and the comm that drives it."""

    def __init__(self, tree, *, workers: int, idle_close_s: float) -> None:
        self.tree = tree
        self.target = TARGET_PREFIX + secrets.token_hex(16)
        self.comm = None
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="jda-relay")
        self.idle_close_s = idle_close_s
        self.last = time.monotonic()
        self.in_flight = 0
        self._lock = threading.Lock()
        self.closed = False

    # -- comm side (the kernel's shell thread) ----------------------------------
    def opened(self, comm, _open_msg) -> None:
        if self.comm is not None:  # one server per relay: a second opener is refused
            comm.close({"error": "this relay already has its server"})
            return
        self.comm = comm
        comm.on_msg(self.received)
        comm.on_close(lambda _msg: self.close())

    def received(self, msg) -> None:
        data = msg.get("content", {}).get("data") or {}
        with self._lock:
            self.last = time.monotonic()
            self.in_flight += 1
        try:
            self.pool.submit(self._serve, data)
        except RuntimeError:  # the pool is shut down: the relay is closed
            with self._lock:
                self.in_flight -= 1

    # -- worker threads ------------------------------------------------------------
    def _serve(self, data: dict) -> None:
        rid = data.get("id")
        try:
            reply = {"id": rid, "ok": True, **self._do(data)}
        except SnapshotError as exc:
            reply = {"id": rid, "ok": False, "error": str(exc), "kind": type(exc).__name__}
        except Exception as exc:  # noqa: BLE001 -- the server is told, the kernel lives on
            reply = {"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}", "kind": "RelayError"}
        finally:
            with self._lock:
                self.last = time.monotonic()
                self.in_flight -= 1
        comm = self.comm
        if comm is not None and not self.closed:
            comm.send(reply)

    def _node(self, data: dict):
        node = self.tree.nodes.get(str(data.get("node", "")))
        if node is None:
            raise SnapshotError(f"no copy {data.get('node')!r} in this turn")
        return node

    def _do(self, data: dict) -> dict:
        op = data.get("op")
        if op == "exec":
            code = data.get("code")
            if not isinstance(code, str) or len(code) > MAX_REQUEST_CODE:
                raise SnapshotError("a cell to run must be text of at most 1 MiB")
            timeout = data.get("timeout")
            timeout = float(timeout) if isinstance(timeout, (int, float)) else None
            result = self._node(data).exec(code, timeout=timeout, namespace=data.get("namespace") is True)
            return {"result": result.to_json()}
        if op == "fork":
            return {"node": self._node(data).fork(own_scratch=data.get("own_scratch") is True).id}
        if op == "close":
            self._node(data).close()
            return {}
        if op == "shutdown":  # every copy ends before the server stops its channels
            self.tree.close()
            return {}
        if op == "ping":
            return {"live": len(self.tree.live())}
        raise SnapshotError(f"unknown relay request {op!r}")

    # -- lifetime ----------------------------------------------------------------------
    def watch(self) -> None:
        """Close the tree once nobody has asked for anything in ``idle_close_s``."""
        while not self.closed:
            time.sleep(min(5.0, self.idle_close_s / 4))
            with self._lock:
                idle = self.in_flight == 0 and time.monotonic() - self.last > self.idle_close_s
            if idle:
                self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        _RELAYS.pop(self.target, None)
        _comm_manager().unregister_target(self.target, self.opened)
        self.tree.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def _comm_manager():
    try:
        from comm import get_comm_manager
    except ImportError:
        from IPython import get_ipython

        return get_ipython().kernel.comm_manager
    return get_comm_manager()


def start_relay(notebook_dir=None, limits=None, max_live: int = 16, memory_budget=None,
                idle_close_s: float = 900.0) -> str:
    """Fork the root copy, open its client here and a comm target for the server (JSON reply)."""
    from .snapshot import SnapshotTree

    limits = limits if isinstance(limits, Limits) else Limits.from_json(limits)
    tree = SnapshotTree.from_current_kernel(notebook_dir=notebook_dir, limits=limits,
                                            max_live=max_live, memory_budget=memory_budget)
    try:
        relay = Relay(tree, workers=max_live, idle_close_s=idle_close_s)
        _comm_manager().register_target(relay.target, relay.opened)
    except BaseException:
        tree.close()
        raise
    _RELAYS[relay.target] = relay
    threading.Thread(target=relay.watch, name="jda-relay-watch", daemon=True).start()
    return json.dumps({"version": PROTOCOL_VERSION, "target": relay.target, "root": tree.root.id,
                       "kernel_pid": os.getpid(), "scratch": tree.scratch,
                       "protections": tree.protections.to_json(), "subshells": _subshells()})


def _subshells() -> bool:
    """Whether this kernel runs requests on subshells (ipykernel 7): then the server's
    relay calls go on one and never wait behind the user's running cell."""
    try:
        from IPython import get_ipython

        kernel = get_ipython().kernel
        return "kernel subshells" in kernel.kernel_info.get("supported_features", [])
    except Exception:  # noqa: BLE001 -- not an ipykernel, or an old one: the main shell it is
        return False


def close_all() -> int:
    """End every relay's tree (tests; a kernel about to be reused)."""
    relays = list(_RELAYS.values())
    for relay in relays:
        relay.close()
    return len(relays)
