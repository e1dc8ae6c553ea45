"""The one interface of a search's kernel copies, and what both trees share.

A copy tree is either a fork tree (``snapshot.SnapshotTree``: processes
forked from the user's kernel) or a replay tree (``replay.ReplayTree``:
private kernels that re-run the notebook's cells, where fork is unavailable).
Both cap their live copies at ``max_live`` and, at the cap, evict the least
useful idle copy; a node remembers the cells run since its parent, so an
evicted copy is rebuilt by replaying them when it is used again. Both
raise the same errors (``SnapshotError`` and its kinds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from .results import ExecResult, Protections


class SnapshotError(RuntimeError):
    """A snapshot operation failed."""


class ForkUnavailable(SnapshotError):
    """Fork copies cannot be made for this kernel: use the replay sandbox."""


class CapacityError(SnapshotError):
    """No room for another snapshot process and nothing can be evicted."""


class SnapshotClosed(SnapshotError):
    """The snapshot (or its whole tree) was closed."""


@runtime_checkable
class Executor(Protocol):
    """One copy of the kernel's state: run a cell in it, copy it, end it."""

    def exec(self, code: str, *, namespace: bool = False) -> ExecResult: ...

    def fork(self) -> "Executor": ...

    def close(self) -> None: ...


@runtime_checkable
class CopyTree(Protocol):
    """All copies of one search; ``close`` ends every process it started."""

    # Read-only members: each tree narrows them (its own node type, its kind).
    @property
    def kind(self) -> Literal["fork", "replay"]: ...

    @property
    def fallback_reason(self) -> str | None: ...  # why a replay tree stands in for a fork tree

    @property
    def protections(self) -> Protections | None: ...

    @property
    def max_live(self) -> int: ...

    @property
    def root(self) -> Executor: ...

    def live(self) -> list: ...

    def close(self) -> None: ...


N = TypeVar("N")

#: Removes secrets from a result's JSON form (the server's and the magic's scrubber).
Redact = Callable[[dict], dict]


def received(tree: Any, res: ExecResult) -> ExecResult:
    """What the unconfined side keeps of a copy's result: bounded by the tree's
    limits and scrubbed by its ``redact``, here, in the thread that ran the
    cell (never on an event loop), before any prompt, event or notebook sees it."""
    limits = getattr(tree, "limits", None)
    if limits is not None:
        res = res.bounded(limits)
    redact: Redact | None = getattr(tree, "redact", None)
    if redact is not None:
        res = ExecResult.from_json(redact(res.to_json()))
    return res


def lineage(node) -> list[str]:
    """Every cell from the root to ``node``'s state, in order (an ancestor's
    cells run after the fork that led here do not count)."""
    segments, n, limit = [], node, None
    while n is not None:
        segments.append(n.cells if limit is None else n.cells[:limit])
        limit = n.parent_len
        n = n.parent
    return [c for seg in reversed(segments) for c in seg]


class CopyNode:
    """What a node of either tree holds: its place in the tree, the cells run
    in it since its parent, and what eviction looks at (``pick_victim``)."""

    def __init__(self, tree: Any, parent: Any, node_id: str, parent_len: int = 0) -> None:
        self.tree = tree
        self.parent = parent
        self.id = node_id
        self.children: list[Any] = []
        self.cells: list[str] = []  # run here since the fork from the parent
        self.parent_len = parent_len  # len(parent.cells) when this node was forked
        self.state = "new"  # new | live | evicted | dead | closed
        self.priority = 0.0  # set by the search: higher = keep longer
        self.pinned = False
        self.last_used = time.monotonic()
        self.rebuilds = 0
        self.depth: int = 0 if parent is None else parent.depth + 1
        self._lock = threading.Lock()

    @property
    def is_live(self) -> bool:
        return self.state == "live"

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    lineage = lineage

    def exec(self, code: str, *, timeout: float | None = None, namespace: bool = False) -> ExecResult:
        """Run ``code`` in this copy like a notebook cell (rebuilt first if it was evicted);
        ``namespace``: the result also says what it changed in the copy's namespace
        (``copy.namespace_diff``), where the tree's copies can tell (forked ones)."""
        with self._lock:
            self._ensure_live()
            res = received(self.tree, self._exec_locked(code, timeout, namespace))
            if res.status in ("ok", "error"):
                self.cells.append(code)
        return res

    # each tree's own: start (or rebuild) the copy's process; run one cell in it
    def _ensure_live(self) -> None: ...

    def _exec_locked(self, code: str, timeout: float | None, namespace: bool = False) -> ExecResult:
        raise NotImplementedError

    def _new_child(self, parent_len: int) -> Any:
        """A new node under this one, in its tree, forked after ``parent_len`` cells."""
        tree = self.tree
        with tree._lock:
            node = type(self)(tree, self, f"n{next(tree._ids)}", parent_len)
            tree.nodes[node.id] = node
            self.children.append(node)
            return node

    def subtree(self):
        """This node, then every descendant."""
        stack = [self]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children)


C = TypeVar("C", bound="Closing")


class Closing:
    """``with tree:`` closes the tree on the way out."""

    def close(self) -> None: ...

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def pick_victim(candidates: Iterable[N]) -> N | None:
    """The least useful idle copy: lowest priority (the search sets it), then
    least recently used; pinned and busy copies are never chosen."""
    idle = [n for n in candidates if not n.pinned and not n.busy]  # type: ignore[attr-defined]
    return min(idle, key=lambda n: (n.priority, n.last_used), default=None)  # type: ignore[attr-defined]


def evict(node) -> bool:
    """End an idle live copy (its cells stay: it can be rebuilt); False if busy or gone."""
    if not node._lock.acquire(blocking=False):
        return False
    try:
        if not node.is_live:
            return False
        node._kill("evicted")
        return True
    finally:
        node._lock.release()
