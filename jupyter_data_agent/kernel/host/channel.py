"""Copies over the kernel channel: the server's side of ``relay``.

For a kernel this server reaches only through the kernel protocol (behind
jupyter_server's GatewayClient, on another host), the copy tree's client
runs in the kernel (``relay``) and this tree forwards ``fork``/``exec``/
``close`` to it as comm messages on the kernel's own channels, through the
websocket the server already has. What comes back is bounded and scrubbed
like a local copy's result (``tree.received``).

The API is synchronous like ``SnapshotTree``'s (the search runs in threads);
every message goes out, and every reply is read, on the event loop that owns
the (async) kernel client. A relay call waits behind a cell the user is
running in that kernel, as every silent request does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import logging
import queue
import threading
from typing import Any, Literal

from .. import rpc
from .. import tree as _tree
from ..forktree.bootstrap import kernel_call
from ..protocol import PROTOCOL_VERSION
from ..results import ExecResult, Limits, Protections
from ..tree import ForkUnavailable, SnapshotClosed, SnapshotError

log = logging.getLogger(__name__)

MAX_REPLY_BYTES = 64 << 20  # a relay reply (one cell's bounded result), at most
RELAY_GRACE_S = 60.0  # on top of a call's own time: the kernel's shell thread may be busy
#: Seconds one wait for the relay's next message lasts before the reader looks again.
READ_WAIT_S = 5.0
SHUTDOWN_WAIT_S = 15.0  # for the relay to end the copies when the turn closes them
SUBSHELL_WAIT_S = 10.0  # for a kernel subshell (on the control channel: answered while a cell runs)


async def _subshell(kc: Any, timeout: float) -> str | None:
    """A new kernel subshell of ``kc``'s kernel, for the relay's calls (None: the main shell).

    Its requests run in a thread of their own in the kernel, so the search's
    copies keep working while the user's cell runs. Asked on the control
    channel, which ``kc`` must have started.
    """
    msg = kc.session.msg("create_subshell_request", {})
    msg["channel"] = "control"  # a gateway's websocket takes a message without it for the shell's
    kc.control_channel.send(msg)
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            reply = await kc.get_control_msg(timeout=left)
            if reply.get("parent_header", {}).get("msg_id") == msg["header"]["msg_id"]:
                content = reply.get("content") or {}
                sid = content.get("subshell_id")
                return sid if content.get("status") == "ok" and isinstance(sid, str) else None
    except (TimeoutError, asyncio.TimeoutError, queue.Empty):
        pass
    log.debug("no kernel subshell: the relay's calls go on the main shell")
    return None


class ChannelTree(_tree.Closing):
    """One turn's copies, forked and run by the kernel's relay."""

    kind: Literal["fork"] = "fork"
    fallback_reason: str | None = None
    transport = "kernel channel"

    def __init__(self, kc: Any, loop: asyncio.AbstractEventLoop, info: dict, limits: Limits,
                 max_live: int) -> None:
        self.kc = kc
        self.loop = loop
        self.limits = limits
        self.max_live = max_live
        self.protections = Protections.from_json(info.get("protections") or {})
        self.scratch = info.get("scratch")
        self.redact: _tree.Redact | None = None
        self.closed = False
        self.nodes: dict[str, ChannelNode] = {}
        self.comm_id = f"jda-{threading.get_ident():x}-{id(self):x}"
        self._target = str(info["target"])
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._reader: asyncio.Task | None = None
        #: Why the reader stopped (the channel broke, the kernel closed the copies): every later
        #: call hears it at once instead of waiting out its deadline for a reply nobody reads.
        self._ended: SnapshotError | None = None
        # The kernel subshell the relay's calls run on (ipykernel 7), else the main shell.
        self.subshell_id: str | None = None
        self.root = self._node(str(info.get("root", "root")), None)

    # -- construction ----------------------------------------------------------------
    @classmethod
    async def open(cls, kc: Any, *, notebook_dir: str | None = None, limits: Limits | None = None,
                   max_live: int = 16, timeout: float = 60.0, idle_close_s: float = 900.0,
                   subshell: bool = True) -> "ChannelTree":
        """Start a relay in ``kc``'s kernel (one silent request) and open its comm.

        ``kc``: an async client of this loop with its IOPub channel started,
        which nobody else reads from, and its control channel too unless
        ``subshell`` is False (the calls then wait behind the user's cells);
        a gateway's, from ``client.open_client`` (it reads without a timeout).
        ``idle_close_s``: the relay ends the copies after that long without a
        request (this server went away).
        """
        limits = limits or Limits()
        args = json.dumps({"notebook_dir": notebook_dir, "limits": limits.to_json(),
                           "max_live": max_live, "idle_close_s": idle_close_s})
        call = kernel_call(f"start_relay(**__import__('json').loads({args!r}))", module="forktree.relay")
        try:
            reply = await rpc.acall(kc, call, timeout=timeout)
        except rpc.KernelTimeout as e:
            raise ForkUnavailable(f"kernel did not answer the copy request in {timeout:g} s") from e
        except rpc.KernelRPCError as e:
            raise ForkUnavailable(f"cannot fork this kernel: {e}") from e
        try:
            info = json.loads(reply)
            if info.get("version") != PROTOCOL_VERSION:
                raise ForkUnavailable(f"snapshot protocol mismatch: {info.get('version')}")
            tree = cls(kc, asyncio.get_running_loop(), info, limits, max_live)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ForkUnavailable(f"the kernel's relay answered something else: {e}") from e
        if info.get("subshells") and subshell:
            tree.subshell_id = await _subshell(kc, timeout=min(timeout, SUBSHELL_WAIT_S))
        tree._reader = asyncio.ensure_future(tree._read())
        tree._send("comm_open", {"comm_id": tree.comm_id, "target_name": tree._target, "data": {}})
        return tree

    # -- the copies (any thread but the loop's) --------------------------------------------
    def live(self) -> list["ChannelNode"]:
        return [n for n in self.nodes.values() if n.state == "live"]

    def close(self) -> None:
        """End every copy, and wait for the relay to say so: a close still in flight when
        the client stops its channels would be dropped (the relay's idle timer would end
        the copies only later). The comm's close then ends the relay."""
        if self.closed:
            return
        try:  # never waited for on the loop: the reply comes through it
            self.request("shutdown", 0 if self._on_loop() else SHUTDOWN_WAIT_S)
        except SnapshotError:
            log.debug("the relay did not confirm the close", exc_info=True)
        self.closed = True
        for node in self.nodes.values():
            node.state = "closed"
        try:
            self._send("comm_close", {"comm_id": self.comm_id, "data": {}})
            if self.subshell_id:
                self._send("delete_subshell_request", {"subshell_id": self.subshell_id}, control=True)
        except RuntimeError:  # the loop is gone: the relay closes itself when idle
            log.debug("could not send the relay's close", exc_info=True)
        self._fail_pending(SnapshotClosed("the copies were closed"))
        if self._reader is not None:
            self.loop.call_soon_threadsafe(self._reader.cancel)

    def request(self, op: str, wait: float, **data: Any) -> dict:
        """Send ``op`` to the relay and wait up to ``wait`` seconds for its reply."""
        if self.closed:
            raise SnapshotClosed("the copies were closed")
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._ended is not None:
                raise type(self._ended)(str(self._ended))
            rid = next(self._ids)
            self._pending[rid] = future
        try:
            self._send("comm_msg", {"comm_id": self.comm_id, "data": {"id": rid, "op": op, **data}})
            reply = future.result(timeout=wait) if wait > 0 else {"ok": True}
        except concurrent.futures.TimeoutError:
            raise SnapshotError(f"the kernel did not relay {op!r} within {wait:g} s (is it busy "
                                f"running a cell?)") from None
        finally:
            with self._lock:
                self._pending.pop(rid, None)
        if not reply.get("ok"):
            kind = SnapshotClosed if reply.get("kind") == "SnapshotClosed" else SnapshotError
            raise kind(str(reply.get("error") or "the relay refused the request")[:2000])
        return reply

    # -- the loop ---------------------------------------------------------------------------
    def _node(self, node_id: str, parent: "ChannelNode | None") -> "ChannelNode":
        node = ChannelNode(self, node_id, parent)
        self.nodes[node_id] = node
        return node

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def _send(self, msg_type: str, content: dict, *, control: bool = False) -> None:
        msg = self.kc.session.msg(msg_type, content)
        if self.subshell_id and not control:
            msg["header"]["subshell_id"] = self.subshell_id
        msg["channel"] = "control" if control else "shell"  # a gateway's websocket routes on it
        channel = self.kc.control_channel if control else self.kc.shell_channel
        if self._on_loop():
            channel.send(msg)
        else:
            self.loop.call_soon_threadsafe(channel.send, msg)

    async def _read(self) -> None:
        """Hand each reply of the relay to the call waiting for it."""
        try:
            while not self.closed:
                try:
                    msg = await self.kc.get_iopub_msg(timeout=READ_WAIT_S)
                except queue.Empty:
                    # Silence is not failure: a candidate computes without printing (a gateway's
                    # client gives up a wait after 1 s by default). A broken websocket or a dead
                    # kernel raises something else, or the request's own deadline says so.
                    continue
                content = msg.get("content") or {}
                if content.get("comm_id") != self.comm_id:
                    continue
                if msg.get("msg_type") == "comm_close":
                    why = (content.get("data") or {}).get("error") or "the kernel closed the copies"
                    self._end(SnapshotClosed(str(why)[:500]))
                    return
                data = content.get("data")
                if msg.get("msg_type") != "comm_msg" or not isinstance(data, dict):
                    continue
                with self._lock:
                    future = self._pending.get(data.get("id"))  # type: ignore[arg-type]
                if future is None or future.done():
                    continue  # a late reply to a call that gave up
                if len(json.dumps(data, default=str)) > MAX_REPLY_BYTES:
                    future.set_result({"ok": False, "error": "the relay's reply exceeds "
                                       f"{MAX_REPLY_BYTES >> 20} MiB"})
                else:
                    future.set_result(data)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the channel broke: every waiting call hears why
            self._end(SnapshotError(f"the kernel channel failed: {type(exc).__name__}: {exc}"))

    def _end(self, error: SnapshotError) -> None:
        """The reader stops: the calls waiting now and every later one fail with ``error``."""
        with self._lock:
            self._ended = error
        self._fail_pending(error)

    def _fail_pending(self, error: Exception) -> None:
        with self._lock:
            pending = list(self._pending.values())
        for future in pending:
            if not future.done():
                future.set_exception(error)


class ChannelNode:
    """One copy in the kernel's relay: the ``Executor`` the search runs candidates in."""

    def __init__(self, tree: ChannelTree, node_id: str, parent: "ChannelNode | None") -> None:
        self.tree = tree
        self.id = node_id
        self.parent = parent
        self.state = "live"
        self.pid: int | None = None  # the kernel's host's: never used here

    @property
    def is_live(self) -> bool:
        return self.state == "live" and not self.tree.closed

    def exec(self, code: str, *, timeout: float | None = None, namespace: bool = False) -> ExecResult:
        wall = timeout if timeout is not None else self.tree.limits.timeout_s
        extra = {"namespace": True} if namespace else {}
        reply = self.tree.request("exec", wall + RELAY_GRACE_S, node=self.id, code=code, timeout=timeout, **extra)
        result = reply.get("result")
        if not isinstance(result, dict):
            raise SnapshotError("the relay's reply carried no result")
        return _tree.received(self.tree, ExecResult.from_json(result))

    def fork(self, own_scratch: bool = False) -> "ChannelNode":
        extra = {"own_scratch": True} if own_scratch else {}
        reply = self.tree.request("fork", self.tree.limits.fork_timeout_s + RELAY_GRACE_S, node=self.id, **extra)
        return self.tree._node(str(reply.get("node")), self)

    def close(self) -> None:
        if self.tree.closed or self.state != "live":
            return
        self.state = "closed"
        self.tree.request("close", RELAY_GRACE_S, node=self.id)
