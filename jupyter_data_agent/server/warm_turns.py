"""A turn's kernel through its warm root (``warm_roots``): its copies are a child of the root.

A turn reads the kernel (DataFrame schemas, the active cell's plots), then
forks it for its copies. Through ``WarmRootHandle`` both go to the kernel's
warm root when they can: the copies are a child of the root (a scratch folder
of its own, as a fork of the live kernel has) whenever the root holds the live
kernel's state now, or a cell runs; while a cell runs, the schemas are read
from a child of the root too (it holds the same namespace the live kernel had
before the cell) instead of waiting for the cell, and the turn says the
state's age in its events. A turn asked with ``fresh_state`` never starts from
the state before a running cell: it reads the live kernel once the cell ended
(the base handle waits, saying so) and its copies are a child of a root made
after the cell (``WarmRoots.acquire(fresh=True)``). A turn whose copy limits
are not the root's forks the live kernel as before; a root older than the live
kernel's state is never used silently (``WarmRoots.acquire`` makes a new one
when the kernel is idle).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from ..kernel import rpc
from ..kernel.host.handle import InspectAsk, Inspection, KernelHandle
from ..kernel.results import Limits
from .warm_roots import Lease, StateAge, WarmRoots

log = logging.getLogger(__name__)

#: Tells the turn what state it starts from: (message, the state's age as JSON).
SayAge = Callable[[str, dict], None]


class WarmChildTree:
    """A turn's copies: the subtree of one child of a warm root, in the root's tree.

    ``close`` ends that child and its descendants, then releases the root
    (never the root itself: other tries and turns fork from it)."""

    kind = "fork"
    fallback_reason = None

    def __init__(self, base: Any, top: Any, release: Callable[[], None]) -> None:
        self.base = base
        self.top = top
        self._release = release
        self.closed = False

    def __getattr__(self, name: str) -> Any:  # limits, redact, memory_budget...: the root tree's
        return getattr(self.base, name)

    @property
    def protections(self) -> Any:
        return self.base.protections

    @property
    def max_live(self) -> int:
        return int(self.base.max_live)

    @property
    def root(self) -> Any:
        return self.top

    def live(self) -> list:
        return [n for n in self.base.live() if _descends(n, self.top)]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.top.close()
        finally:
            self._release()


def _descends(node: Any, top: Any) -> bool:
    while node is not None:
        if node is top:
            return True
        node = getattr(node, "parent", None)
    return False


class WarmRootHandle(KernelHandle):
    """``base`` (the turn's handle on the live kernel), with its copies and, while a cell runs,
    its schema reading through the kernel's warm root; ``fresh``: both wait for a running cell."""

    def __init__(
        self,
        base: KernelHandle,
        warm: WarmRoots,
        kernel_id: str,
        notebook_path: str,
        *,
        limits: Limits,
        say: SayAge,
        fresh: bool = False,
    ) -> None:
        self.base = base
        self.warm = warm
        self.kernel_id = kernel_id
        self.notebook_path = notebook_path
        self.limits = limits  # the copies' limits the warm roots are made with
        self.say = say
        self.fresh = fresh  # the state after any running cell: wait for it, never an older root
        self.transport = base.transport
        self.replay_allowed = base.replay_allowed
        self.notebook_dir = base.notebook_dir
        self.wait_notice_s = base.wait_notice_s
        self.wait_timeout_s = base.wait_timeout_s
        self.told: StateAge | None = None  # the age said already (said once)
        self.used_root = False  # the copies are a child of the warm root

    def why_no_copies(self) -> str:
        return self.base.why_no_copies()

    async def evaluate(self, expression: str, timeout: float) -> Any:
        return await self.base.evaluate(expression, timeout)

    async def alive(self) -> bool:
        return await self.base.alive()

    async def off_loop(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.base.off_loop(fn, *args, **kwargs)

    def close(self) -> None:
        self.base.close()

    # -- reading the kernel --------------------------------------------------------------
    async def inspect(
        self, ask: InspectAsk, *, waiting: Callable[[], None] | None = None, give_up: Callable[[], bool] | None = None
    ) -> Inspection:
        """The live kernel's answer when it is idle; while a cell runs, a child of the warm root's
        (``fresh``: the live kernel's, after the cell, as the base handle waits for it)."""
        w = self.warm.watches.get(self.kernel_id)
        root = w.root if w is not None else None
        if self.fresh or w is None or not w.running or root is None or root.closed or root.retired:
            return await self.base.inspect(ask, waiting=waiting, give_up=give_up)
        try:
            lease = await self.warm.acquire(self.kernel_id, self.notebook_path)
        except Exception:  # noqa: BLE001 -- the kernel is read as ever
            return await self.base.inspect(ask, waiting=waiting, give_up=give_up)
        try:
            if lease.age is None:  # the cell ended meanwhile: the live kernel answers at once
                return await self.base.inspect(ask, waiting=waiting, give_up=give_up)
            self._tell(lease.age)
            node = await asyncio.to_thread(lease.root.child)
            try:
                return await _CopyReader(node, self.base).inspect(ask)
            finally:
                await asyncio.to_thread(_quiet_close, node)
        finally:
            self.warm.release(lease)

    # -- copies ----------------------------------------------------------------------------
    async def fork(self, limits: Limits, max_live: int) -> Any:
        """A child of the warm root (limits as the root's), else a fork of the live kernel;
        ``fresh``: of a root holding the state after any running cell (made once it ended)."""
        if limits != self.limits:
            return await self.base.fork(limits, max_live)
        try:
            lease = await self.warm.acquire(self.kernel_id, self.notebook_path, fresh=self.fresh,
                                            say=lambda _what: None)
        except Exception:  # no root (refused by the policy...): the live kernel, as ever
            log.debug("no warm root for a turn on %s", self.kernel_id, exc_info=True)
            return await self.base.fork(limits, max_live)
        tree = lease.root.copies.tree
        if getattr(tree, "limits", None) != limits:  # a root made under other settings
            self.warm.release(lease)
            return await self.base.fork(limits, max_live)
        try:
            if lease.age is not None:
                self._tell(lease.age)
            top = await asyncio.to_thread(lease.root.child)
        except BaseException:
            self.warm.release(lease)
            raise
        self.used_root = True
        loop = asyncio.get_running_loop()
        return WarmChildTree(tree, top, lambda: _release_on(loop, self.warm, lease))

    def _tell(self, age: StateAge) -> None:
        if self.told == age:
            return
        self.told = age
        self.say(f"Starting from the kernel's state before the running cell: {age.note}.", age.to_json())


class _CopyReader(KernelHandle):
    """Reads a copy as a handle reads a kernel: each expression's value, printed by the copy."""

    def __init__(self, node: Any, base: KernelHandle) -> None:
        self.node = node
        self.notebook_dir = base.notebook_dir
        self.wait_notice_s = base.wait_notice_s
        self.wait_timeout_s = base.wait_timeout_s

    async def evaluate(self, expression: str, timeout: float) -> Any:
        code = f"print(repr({expression}))"
        result = await asyncio.to_thread(self.node.exec, code, timeout=timeout)
        if result.status != "ok":
            raise rpc.KernelExpressionError(result.error_line())
        try:
            return ast.literal_eval(result.stream().strip())
        except (ValueError, SyntaxError) as exc:
            raise rpc.KernelRPCError(f"the copy's answer could not be read: {exc}") from None


def _quiet_close(node: Any) -> None:
    with contextlib.suppress(Exception):
        node.close()


def _release_on(loop: asyncio.AbstractEventLoop, warm: WarmRoots, lease: Lease) -> None:
    """``WarmRoots.release`` is the loop's: from the thread that closes the copies."""
    with contextlib.suppress(RuntimeError):  # the loop is gone: the server stopped, roots with it
        loop.call_soon_threadsafe(warm.release, lease)
