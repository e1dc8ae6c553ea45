"""Outside agents' code, run in confined copies of a notebook's live kernel, kept as handles.

``try_code`` forks the notebook's kernel (the same handle and copy policy a
turn uses: ``server.kernels``, ``turn.open_copies``) and runs the
code in the copy; the copy, in its new state, is kept under a handle. Code
run ``from`` a handle runs in a child of that copy, so an agent explores in
several steps and branches without touching the user's kernel. Around each
run the copy reports what the code changed in its namespace
(``kernel.copy.namespace_diff``), in the same request as the code.

Copies are processes, so handles are bounded: per user (the least recently
used is closed to make room), in idle time (``ttl_s``), and in life (a
client that goes away mid-call, the server stopping). A handle's use counts
for its ancestors too, so closing an idle copy (which ends its subtree)
never ends a copy in use.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..kernel.copy import namespace_diff
from ..kernel.copy.namespace_diff import NamespaceDiff
from ..kernel.host.handle import KernelHandle, NoKernel
from ..kernel.host.policy import Confinement
from ..kernel.results import ExecResult
from ..search.equivalence import exec_output
from ..search.majority import majority
from ..turn import CopyPolicy, open_copies
from .fair import FairSlots
from .fork_ahead import ForkAhead
from .job import SERVER_OWNER
from .threads import in_thread
from .warm_roots import Lease, StateAge, WarmRoots

log = logging.getLogger(__name__)

MAX_CODE_CHARS = 64 * 1024
#: Handles per user with a child forked ahead (the ones used last: ``_keep_ahead``).
SPARES_PER_USER = 3


@dataclass
class TryLimits:
    ttl_s: float = 600.0  # idle seconds before a handle's copy is closed
    max_handles_per_user: int = 16
    default_timeout_s: float = 30.0
    max_timeout_s: float = 300.0
    max_code_chars: int = MAX_CODE_CHARS
    max_concurrent: int = 32  # tries forking or running at once, all users together
    max_concurrent_per_user: int = 4  # of those, one user's (the rest wait in that user's line)
    max_waiting_per_user: int = 32  # one user's tries waiting for a slot; beyond: refused
    warm_root_idle_s: float = 600.0  # a kernel's warm root is kept this long after a try (0: none)


class TryError(Exception):
    """A try the server refuses or cannot run, in words an agent can act on."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Abandoned(TryError):
    """The client went away while its code ran: the copy was closed."""


@dataclass(eq=False)  # one fork: compared and hashed by identity
class _Tree:
    """One fork of the live kernel (or one child of its warm root) and the handles on copies in it."""

    copies: Any  # turn.Copies; None for a child of a warm root
    kernel: KernelHandle | None
    confinement: Confinement
    handles: set[str] = field(default_factory=set)
    closed: bool = False
    lease: Lease | None = None  # a child of a warm root: the root stays the warm roots'
    top: Any = None  # with ``lease``: the child forked from the root, where the try runs

    @property
    def start(self) -> Any:
        """The copy a fresh try runs in (a leased tree's is forked in ``_run``)."""
        return self.top if self.lease is not None else self.copies.executor


@dataclass
class Handle:
    id: str
    owner: str
    notebook_path: str
    tree: _Tree
    node: Any  # the copy (kernel.tree.Executor) in the state after ``code``
    parent: Handle | None
    code: str
    result: ExecResult
    session: str | None = None
    last_used: float = field(default_factory=time.monotonic)
    ahead: ForkAhead | None = None  # a child forked ahead, while one of the owner's handles used last

    def touch(self) -> None:
        now = time.monotonic()
        h: Handle | None = self
        while h is not None:
            h.last_used = now
            h = h.parent


@dataclass
class TryOutcome:
    """One run in a copy: what it gave, what it changed, and the handle on the copy after it."""

    handle: str | None  # None: the copy did not survive (timeout, died) or was not kept
    parent: str | None
    notebook_path: str
    result: ExecResult
    namespace: NamespaceDiff
    confinement: Confinement
    state: StateAge | None = None  # the copy holds an older state than the live kernel's (a cell runs)


class TryManager:
    """Every user's handles on kernel copies; event-loop API, a run in a copy in a thread of its own."""

    def __init__(self, *, jobs: Any, session_manager: Any, limits: TryLimits | None = None,
                 redact: Any = None) -> None:
        self.jobs = jobs  # JobManager: the kernel handle, the settings' copy policy
        self.session_manager = session_manager
        self.limits = limits or TryLimits()
        self.redact = redact
        self.handles: dict[str, Handle] = {}
        self._slots = FairSlots(self.limits.max_concurrent, self.limits.max_concurrent_per_user,
                                exempt=frozenset({SERVER_OWNER}))
        self._reaper: asyncio.Task | None = None
        self._closing = False
        self._running: set[_Tree] = set()  # trees of the tries running now
        self._closing_copies: set[asyncio.Future] = set()  # handles closed to make room, ending
        self._recent: dict[str, list[str]] = {}  # owner -> the handles used last (``_keep_ahead``)
        self.warm: WarmRoots | None = None
        if self.limits.warm_root_idle_s > 0:
            self.warm = WarmRoots(jobs.kernel_manager, self._open_root, idle_s=self.limits.warm_root_idle_s,
                                  notebook_dir=lambda path: jobs.kernels.notebook_dir(path))

    # -- public API ------------------------------------------------------------------
    async def try_code(self, owner: str, notebook_path: str, code: str, *, timeout: float | None = None,
                       parent: str | None = None, session: str | None = None, keep: bool = True,
                       abandoned: asyncio.Event | None = None, say: Callable[[str], None] | None = None,
                       fresh_state: bool = False) -> TryOutcome:
        """Run ``code`` in a fresh copy of the notebook's kernel, or in a child of ``parent``'s copy.

        A fresh copy is a child of the kernel's warm root (``warm_roots``); while a cell runs in
        the kernel it starts from the state before it at once (the outcome's ``state`` says its
        age), unless ``fresh_state``: then it waits for the cell. ``say`` hears what the try is
        doing now, in words (a client shows it as progress)."""
        say = say or _silent
        if self._closing:
            raise TryError("The server is shutting down.", 503)
        self._start_reaper()
        timeout = self._timeout(timeout)
        if len(code) > self.limits.max_code_chars:
            raise TryError(f"The code is {len(code)} characters long; at most {self.limits.max_code_chars} "
                           "are run in a copy. Split it into steps (pass the handle as `from`).", 413)
        base = self._own(owner, parent) if parent else None
        if self._slots.waiting(owner) >= self.limits.max_waiting_per_user:
            raise TryError(f"You have {self._slots.held.get(owner, 0)} tries running and "
                           f"{self._slots.waiting(owner)} waiting; try again when some have answered.", 429)
        if self._slots.would_wait(owner):
            say(f"waiting for a free slot ({self._slots.held.get(owner, 0)} of your tries run, "
                      f"{self._slots.waiting(owner)} wait)")
        async with self._slots.slot(owner):  # one user's many tries never hold up another's
            return await self._try_in_slot(owner, notebook_path, code, timeout, base, session, keep, abandoned,
                                           say, fresh_state)

    async def _try_in_slot(self, owner: str, notebook_path: str, code: str, timeout: float, base: Handle | None,
                           session: str | None, keep: bool, abandoned: asyncio.Event | None,
                           say: Callable[[str], None], fresh_state: bool = False) -> TryOutcome:
        if self._closing:  # the server stopped while this try waited for its slot
            raise TryError("The server is shutting down.", 503)
        if base is not None:
            if base.id not in self.handles:  # closed while this try waited for its slot
                raise TryError(f"The handle {base.id!r} was closed while this try waited; run try_code "
                               "without `from` to start from the live kernel again.", 404)
            base.touch()
            notebook_path = base.notebook_path
            tree = base.tree
        else:
            tree = await self._fresh(notebook_path, fresh_state, say)
        say("running the code in a copy" if base is None else f"running the code in a child of {base.id}")
        self._running.add(tree)  # closed by a shutdown, even before it holds a handle
        try:
            outcome = await self._run_in(tree, owner, notebook_path, code, timeout, base, session, keep,
                                         abandoned)
        finally:
            self._running.discard(tree)
        outcome.state = tree.lease.age if tree.lease is not None else None
        return outcome

    async def _run_in(self, tree: _Tree, owner: str, notebook_path: str, code: str, timeout: float,
                      base: Handle | None, session: str | None, keep: bool,
                      abandoned: asyncio.Event | None) -> TryOutcome:
        work: dict[str, Any] = {}
        cancel = threading.Event()
        future, thread = in_thread(self._run, tree, base, code, timeout, work, cancel, name="jda-try")
        thread.start()
        try:
            if abandoned is None:
                node, result, diff = await future
            else:
                waiter: asyncio.Future[Any] = asyncio.ensure_future(abandoned.wait())
                try:
                    done, _ = await asyncio.wait({future, waiter}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if future not in done:
                    raise Abandoned("The client went away while the code ran; its copy was closed.")
                node, result, diff = future.result()
        except BaseException:  # an error, or the call cancelled: nothing it started stays
            cancel.set()
            await asyncio.shield(self._abandon(tree, base, work))
            raise
        handle = None
        if keep and result.status in ("ok", "error") and not tree.closed:
            handle = Handle(id="h-" + uuid.uuid4().hex[:12], owner=owner, notebook_path=notebook_path, tree=tree,
                            node=node, parent=base, code=code, result=result, session=session)
            self.handles[handle.id] = handle
            tree.handles.add(handle.id)
            handle.touch()
            self._make_room(owner, handle)
            self._keep_ahead(owner, [handle, *([base] if base is not None else [])])
        else:
            await asyncio.to_thread(_close_node, node)
            if base is None:
                await self._close_tree(tree)
        return TryOutcome(handle=handle.id if handle else None, parent=base.id if base else None,
                          notebook_path=notebook_path, result=result, namespace=diff,
                          confinement=tree.confinement)

    def compare(self, owner: str, handle_ids: list[str]) -> dict:
        """``same_answer`` classes over the handles' results (the product's majority vote)."""
        handles = [self._own(owner, h) for h in handle_ids]
        for h in handles:
            h.touch()
        answers = [exec_output(h.result) for h in handles]
        groups = majority(answers)
        return {"classes": [[handles[i].id for i in g] for g in groups],
                "no_answer": [h.id for h, a in zip(handles, answers) if a is None],
                "same": len(groups) == 1 and all(a is not None for a in answers)}

    def get(self, owner: str, handle_id: str) -> Handle:
        return self._own(owner, handle_id)

    def live(self, owner: str) -> list[Handle]:
        return [h for h in self.handles.values() if h.owner == owner]

    async def close_handles(self, handle_ids: list[str]) -> None:
        """Close these handles' copies (and their subtrees)."""
        for hid in handle_ids:
            handle = self.handles.get(hid)
            if handle is not None:
                await self._close_handle(handle)

    async def close_session(self, owner: str, session: str) -> None:
        """The MCP client ended its session (or vanished): its copies go too. Only the
        owner's: a session id is a header anyone can send."""
        await self.close_handles([h.id for h in self.handles.values()
                                  if h.session == session and h.owner == owner])

    async def expire(self) -> None:
        """Close handles idle for longer than ``ttl_s``."""
        cutoff = time.monotonic() - self.limits.ttl_s
        await self.close_handles([h.id for h in self.handles.values() if h.last_used < cutoff])

    async def shutdown(self) -> None:
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
        trees = {id(h.tree): h.tree for h in self.handles.values()}
        trees.update({id(t): t for t in self._running})  # tries in flight: their copies end now
        self.handles.clear()
        await asyncio.gather(*(self._close_tree(t) for t in trees.values()), *self._closing_copies,
                             return_exceptions=True)
        if self.warm is not None:
            await self.warm.shutdown()

    # -- internals -------------------------------------------------------------------
    def _timeout(self, timeout: float | None) -> float:
        if timeout is None:
            return self.limits.default_timeout_s
        if not 0 < timeout <= self.limits.max_timeout_s:
            raise TryError(f"timeout must be between 0 and {self.limits.max_timeout_s:g} seconds; "
                           f"got {timeout:g}.")
        return float(timeout)

    def _own(self, owner: str, handle_id: str) -> Handle:
        handle = self.handles.get(handle_id)
        if handle is None or handle.owner != owner:
            raise TryError(f"No live handle {handle_id!r}: it expired (handles are closed after "
                           f"{self.limits.ttl_s:g} s unused, or when you hold more than "
                           f"{self.limits.max_handles_per_user}) or never existed. Run try_code without "
                           "`from` to start from the live kernel again.", 404)
        return handle

    async def _kernel_id(self, notebook_path: str) -> str:
        from .notebooks import kernel_of

        kernel_id = await kernel_of(self.session_manager, notebook_path)
        if kernel_id is None:
            raise TryError(f"No running kernel for {notebook_path!r}: open the notebook and start its "
                           "kernel (list_notebooks shows the open ones).", 409)
        return kernel_id

    async def _fresh(self, notebook_path: str, fresh_state: bool, say: Callable[[str], None]) -> _Tree:
        """Where a try without ``from`` starts: a child of the kernel's warm root, else its own fork."""
        if self.warm is None:
            return await self._fork(notebook_path, say)
        kernel_id = await self._kernel_id(notebook_path)
        lease = await self.warm.acquire(kernel_id, notebook_path, fresh=fresh_state, say=say)
        return _Tree(copies=None, kernel=None, confinement=lease.root.confinement, lease=lease)

    async def _fork(self, notebook_path: str, say: Callable[[str], None] = lambda _: None) -> _Tree:
        """A new copy of the notebook's live kernel (the copy policy of turns: confinement required)."""
        kernel_id = await self._kernel_id(notebook_path)
        say("waiting for the notebook's kernel: a cell is running in it, the copy is made when it ends"
            if _busy(self.jobs.kernel_manager, kernel_id) else "copying the notebook's live kernel")
        copies, kernel = await self._open_root(kernel_id, notebook_path)
        return _Tree(copies=copies, kernel=kernel, confinement=copies.confinement)

    async def _open_root(self, kernel_id: str, notebook_path: str) -> tuple[Any, KernelHandle]:
        """A confined root copy of the kernel and the handle it came through (``TryError``: none)."""
        kernel = await self.jobs.kernels.open(kernel_id, notebook_path)
        if isinstance(kernel, NoKernel):
            raise TryError(f"Cannot copy the kernel of {notebook_path!r}: {kernel.reason}.", 409)
        settings = self.jobs.settings
        # A warm root's tree holds every try's copies forked from it: room for several users' handles.
        # + the root and a user's spare children (``_keep_ahead``)
        max_live = self.limits.max_handles_per_user * (4 if self.warm is not None else 1) + 1 + SPARES_PER_USER
        policy = CopyPolicy(mode="fork", confinement=settings.confinement, limits=settings.snapshot_limits,
                            max_live=max_live)
        copies = await open_copies(policy, redact=self.redact, fork=lambda limits: kernel.fork(limits, policy.max_live))
        if copies.tree is None:
            await asyncio.to_thread(kernel.close)
            raise TryError(f"The code was not run: {copies.confinement.message}", 409)
        return copies, kernel

    def _run(self, tree: _Tree, base: Handle | None, code: str, timeout: float, work: dict,
             cancel: threading.Event) -> tuple[Any, ExecResult, NamespaceDiff]:
        """In a worker: the copy to run in (a fork of ``base``'s, a child of the warm root, or the
        tree's root), then the run."""
        if base is not None:
            node = base.ahead.take(refill=False) if base.ahead is not None else base.node.fork()
        elif tree.lease is not None:
            # a scratch folder of its own, as a fork of the live kernel has: never another try's files
            node = tree.top = tree.lease.root.child(refill=False)
        else:
            node = tree.start
        work["node"] = node
        if cancel.is_set():
            _close_node(node)
            raise Abandoned("The client went away.")
        try:
            result = node.exec(code, timeout=timeout, namespace=True)
        finally:  # the next spare of what this try started from, now that its run ended
            ahead = base.ahead if base is not None else tree.lease.root.ahead if tree.lease is not None else None
            if ahead is not None:
                ahead.refill_soon()
        diff = (namespace_diff.parse(result.namespace) if result.status in ("ok", "error")
                else NamespaceDiff(note="the copy did not survive the run"))
        return node, result, diff

    async def _abandon(self, tree: _Tree, base: Handle | None, work: dict) -> None:
        node = work.get("node")
        if base is None:
            await self._close_tree(tree)
        elif node is not None:
            await asyncio.to_thread(_close_node, node)

    def _make_room(self, owner: str, new: Handle) -> None:
        """Close this user's least recently used copies beyond the bound (never the new one): gone
        from the handles now, their processes end in the background (the try answers first)."""
        while True:
            mine = [h for h in self.live(owner) if h is not new and not _descends(new, h)]
            if len(mine) + 1 <= self.limits.max_handles_per_user or not mine:
                return
            self._in_background(self._detach(min(mine, key=lambda h: h.last_used)))

    def _keep_ahead(self, owner: str, used: list[Handle]) -> None:
        """A child forked ahead of each of the owner's ``SPARES_PER_USER`` handles used last (made
        by a try, or its base): the next try ``from`` one starts at once; no other keeps one."""
        recent = [h.id for h in used] + [i for i in self._recent.get(owner, []) if i not in {h.id for h in used}]
        self._recent[owner] = keep = [i for i in recent if i in self.handles][:SPARES_PER_USER]
        handles = [self.handles[i] for i in keep]
        for h in self.live(owner):
            if h.ahead is not None and h.id not in keep:
                ahead, h.ahead = h.ahead, None
                self._in_background(asyncio.to_thread(ahead.close))
        for h in handles:
            if h.ahead is None and h.id in self.handles:
                h.ahead = ForkAhead(h.node)
                h.ahead.refill_soon()

    def _in_background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._closing_copies.add(task)
        task.add_done_callback(self._closing_copies.discard)

    async def _close_handle(self, handle: Handle) -> None:
        """Close the handle's copy, its subtree's handles, and the tree once none is left."""
        await self._detach(handle)

    def _detach(self, handle: Handle) -> Awaitable[None]:
        """Take the handle and its subtree's handles out now; returns the ending of their copies."""
        doomed = [h for h in self.handles.values() if h.tree is handle.tree and _descends(h, handle)]
        for h in doomed:
            self.handles.pop(h.id, None)
            h.tree.handles.discard(h.id)
        whole_tree = handle.parent is None or not handle.tree.handles
        return self._end_copies(handle, whole_tree, [h.ahead for h in doomed if h.ahead is not None])

    async def _end_copies(self, handle: Handle, whole_tree: bool, aheads: list[ForkAhead]) -> None:
        for ahead in aheads:  # no spare is forked of a copy being closed
            await asyncio.to_thread(ahead.close)
        if whole_tree:
            await self._close_tree(handle.tree)
        else:
            await asyncio.to_thread(_close_node, handle.node)

    async def _close_tree(self, tree: _Tree) -> None:
        if tree.closed:
            return
        tree.closed = True
        for hid in list(tree.handles):
            self.handles.pop(hid, None)
        tree.handles.clear()
        if tree.lease is None:
            await asyncio.to_thread(_close_all, tree)
            return
        try:
            if tree.top is not None:
                await asyncio.to_thread(_close_node, tree.top)
        finally:
            if self.warm is not None:
                self.warm.release(tree.lease)

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        while not self._closing:
            await asyncio.sleep(min(30.0, max(0.5, self.limits.ttl_s / 4)))
            try:
                await self.expire()
            except Exception:  # housekeeping: the next round tries again
                log.warning("jupyter_data_agent: closing expired kernel copies failed", exc_info=True)


def _silent(_what: str) -> None:
    """A try nobody follows."""


def _busy(kernel_manager: Any, kernel_id: str) -> bool:
    """Whether the kernel runs a cell now, as the server last saw it."""
    try:
        return getattr(kernel_manager.get_kernel(kernel_id), "execution_state", None) == "busy"
    except Exception:  # noqa: BLE001 -- an unknown kernel: the fork says why
        return False


def _descends(h: Handle, ancestor: Handle) -> bool:
    n: Handle | None = h
    while n is not None:
        if n is ancestor:
            return True
        n = n.parent
    return False


def _close_node(node: Any) -> None:
    try:
        node.close()
    except Exception:  # one copy's failure must not leave the others running
        log.warning("closing a kernel copy failed", exc_info=True)


def _close_all(tree: _Tree) -> None:
    try:
        tree.copies.close()
    except Exception:  # the kernel handle is released either way
        log.warning("closing kernel copies failed", exc_info=True)
    finally:
        if tree.kernel is not None:
            tree.kernel.close()
