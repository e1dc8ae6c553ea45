"""Replay sandbox: kernel copies without fork.

Where fork is unavailable (not POSIX, not an IPython kernel, a remote kernel,
fork refused) a copy is a separate private kernel that re-executes the
notebook's executed code cells, then the cells on the path to the node. Same
interface as the fork tree (``tree.CopyTree``), same outputs (cells run
through the same capture code), so the search does not care which one it got.
It is also the baseline the fork tree is benchmarked against: a copy costs a
kernel start plus the whole notebook's runtime.

A copy's kernel is needed only to run cells in it: a child replays its path
itself. So at ``max_live`` any idle copy can be evicted (its kernel shut
down), the least useful first (``tree.pick_victim``, as the fork tree), and is
rebuilt by replay when a cell runs in it again.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import threading
import time
from typing import Literal, Sequence

from .. import rpc
from .. import tree as _tree
from ..copy import procs
from ..forktree.bootstrap import direct_call, kernel_call
from ..forktree.copy_process import uss
from ..forktree.snapshot_node import exec_failure
from ..results import ExecResult, Limits, Protections
from ..tree import CapacityError, SnapshotClosed, SnapshotError
from . import launch


class ReplayNode(_tree.CopyNode):
    """One copy = one private kernel process (while it is live)."""

    tree: "ReplayTree"
    parent: "ReplayNode | None"
    children: "list[ReplayNode]"

    def __init__(self, tree: "ReplayTree", parent: "ReplayNode | None", node_id: str,
                 parent_len: int = 0) -> None:
        super().__init__(tree, parent, node_id, parent_len)
        self.km = None
        self.kc = None

    def __repr__(self) -> str:
        return f"<ReplayNode {self.id} {self.state} pid={self.pid}>"

    @property
    def pid(self) -> int | None:
        try:
            return self.km.provisioner.process.pid if self.km is not None else None
        except AttributeError:
            return None

    # ------------------------------------------------------------------- API

    def fork(self) -> "ReplayNode":
        """A new kernel that replays the notebook and this node's path."""
        with self._lock:
            if self.state == "closed" or self.tree.closed:  # as in _ensure_live
                raise SnapshotClosed(f"replay copy {self.id} is closed")
            child = self._new_child(len(self.cells))
        with child._lock:
            child._ensure_live()
        return child

    def close(self) -> None:
        for c in list(self.children):
            c.close()
        with self._lock:
            self._kill("closed")

    def memory(self) -> int | None:
        return uss(self.pid) if self.is_live else None

    # ------------------------------------------------------------- internals

    def _ensure_live(self) -> None:
        """Start this node's kernel (under its lock) and replay its lineage."""
        if self.state == "live":
            return
        tree = self.tree
        if self.state == "closed" or tree.closed:
            raise SnapshotClosed(f"replay copy {self.id} is closed")
        rebuild = self.state != "new"
        tree._reserve(self)
        try:
            self.km, self.kc = launch.start_kernel(cwd=tree.scratch, kernel_name=tree.kernel_name,
                                                   timeout=tree.start_timeout)
            args = json.dumps({"notebook_dir": tree.notebook_dir, "scratch": tree.scratch,
                               "limits": tree.limits.to_json()})
            self._call(kernel_call(f"init_replay(**__import__('json').loads({args!r}))"),
                       tree.start_timeout)
            for code in tree.notebook_cells + self.lineage():
                res = self._exec_locked(code, tree.replay_timeout)
                if res.status not in ("ok", "error"):
                    raise SnapshotError(f"replay failed at a cell: {res.evalue}")
            prot = Protections.from_json(self._call(direct_call("limit_replay()"),
                                                    tree.start_timeout))
            prot.notes.insert(0, "replay sandbox: a private kernel re-ran the notebook's cells")
            tree.protections = prot
            if tree.closed:
                raise SnapshotClosed("the replay tree was closed")
        except BaseException:
            self._kill("dead")
            raise
        self.state = "live"
        self.rebuilds += rebuild
        self.last_used = time.monotonic()

    def _call(self, expr: str, timeout: float | None):
        try:
            return json.loads(rpc.call(self.kc, expr, timeout=timeout))
        except rpc.KernelTimeout:
            raise
        except rpc.KernelRPCError as e:
            raise SnapshotError(f"replay kernel: {e}") from e

    def _exec_locked(self, code: str, timeout: float | None, namespace: bool = False) -> ExecResult:
        timeout = self.tree.limits.timeout_s if timeout is None else timeout
        self.last_used = time.monotonic()
        t0 = time.perf_counter()
        try:
            return ExecResult.from_json(self._call(direct_call(f"run_captured_json({code!r})"),
                                                   timeout or None))
        except TimeoutError:
            self._kill("dead")
            return exec_failure(f"cell exceeded the {timeout:g} s wall-clock timeout; "
                                f"its replay kernel was killed", t0, None, timeout=True)
        except SnapshotError as e:
            if self.km is not None and not self.km.is_alive():
                self._kill("dead")
                return exec_failure(f"the replay kernel died: {e}", t0, None)
            raise

    def _kill(self, state: str) -> None:
        """Shut the kernel down (its cells stay); ``state``: evicted, dead or closed."""
        if self.km is not None:
            launch.stop_kernel(self.km, self.kc)
        self.km = self.kc = None
        self.tree._release(self)
        if self.state != "closed":
            self.state = state


class ReplayTree(_tree.Closing):
    """Kernel copies by replay (``tree.CopyTree``, as ``SnapshotTree``)."""

    kind: Literal["replay"] = "replay"

    def __init__(self, notebook_cells: Sequence[str], *, kernel_name: str = "python3",
                 notebook_dir: str | None = None, scratch: str | None = None,
                 limits: Limits | None = None, max_live: int = 4,
                 start_timeout: float = 120.0, replay_timeout: float = 3600.0) -> None:
        self.notebook_cells = list(notebook_cells)
        self.kernel_name = kernel_name
        self.notebook_dir = os.path.abspath(notebook_dir or os.getcwd())
        self.owns_scratch = scratch is None
        self.scratch = os.path.abspath(scratch) if scratch else tempfile.mkdtemp(
            prefix="jda-replay-")
        self.limits = limits or Limits()
        self.max_live = max(1, int(max_live))
        self.start_timeout = start_timeout
        self.replay_timeout = replay_timeout
        self.protections: Protections | None = None  # set when the first kernel is ready
        self.fallback_reason: str | None = None  # set by whoever chose the fallback
        self.redact: _tree.Redact | None = None  # set by the entry point: its scrubber
        self.closed = False
        self.evictions = 0
        self.nodes: dict[str, ReplayNode] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._slots: set[ReplayNode] = set()  # nodes holding (or starting) a kernel
        self.root = ReplayNode(self, None, "root")
        self.nodes["root"] = self.root

    @classmethod
    def start(cls, notebook_cells: Sequence[str], **kwargs) -> "ReplayTree":
        """Start the root copy: a new kernel that replays ``notebook_cells``."""
        tree = cls(notebook_cells, **kwargs)
        try:
            with tree.root._lock:
                tree.root._ensure_live()
        except BaseException:
            tree.close()
            raise
        return tree

    def live(self) -> list[ReplayNode]:
        return [n for n in list(self.nodes.values()) if n.is_live]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.root.close()
        if self.owns_scratch:
            procs.remove_tree(self.scratch)

    def _reserve(self, node: ReplayNode) -> None:
        """A kernel slot for ``node``, evicting idle copies while the tree is full."""
        for _ in range(4 * self.max_live + 8):
            with self._lock:
                if len(self._slots) < self.max_live:
                    self._slots.add(node)
                    return
                victim = _tree.pick_victim(n for n in self._slots if n.is_live)
            if victim is None:
                raise CapacityError(f"no room for another replay kernel (at most "
                                    f"{self.max_live}) and every one is busy or pinned")
            if _tree.evict(victim):
                self.evictions += 1
        raise CapacityError("could not make room for another replay kernel")

    def _release(self, node: ReplayNode) -> None:
        with self._lock:
            self._slots.discard(node)
