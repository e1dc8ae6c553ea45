"""Kernel copies for one turn: fork, else replay, else none; then the confinement policy.

Entry points differ only in how they fork (the magic forks its own kernel,
the server a kernel it holds a client of, a benchmark a kernel it started):
they pass that as ``fork``, their handle's (``kernel.handle``, async). Everything after is the same: the replay
fallback where fork is refused, and the policy that decides whether
candidates may run in what was made.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..context.model import NotebookContext
from ..kernel.host.policy import Confinement, decide
from ..kernel.results import Limits, Protections
from ..kernel.tree import Redact
from ..llm.scrub import Scrubber
from .spec import CopyPolicy

if TYPE_CHECKING:
    from ..kernel.tree import CopyTree

log = logging.getLogger(__name__)

#: How an entry point forks its kernel: limits in, a tree of copies out (or an error).
Fork = Callable[[Limits], Awaitable["CopyTree"]]
#: How blocking work (a replay kernel, closing copies) is run: ``asyncio.to_thread``'s signature.
OffLoop = Callable[..., Awaitable[Any]]


@dataclass
class Copies:
    """The copies a turn may run candidates in (``tree`` None: none may run)."""

    tree: CopyTree | None
    confinement: Confinement
    # Why the fork tree was not used (the replay fallback, or no copies at all).
    fallback: str = ""
    # The copy candidates fork from, when not the tree's root (a benchmark's notebook state).
    root: Any = None

    @property
    def executor(self) -> Any:
        if self.tree is None:
            return None
        return self.root if self.root is not None else self.tree.root

    @property
    def protections(self) -> Protections | None:
        return self.tree.protections if self.tree is not None else None

    def close(self) -> None:
        tree, self.tree = self.tree, None
        if tree is not None:
            tree.close()


def replay_cells(context: NotebookContext) -> list[str]:
    """The notebook's executed code cells in execution order, agent cells left out."""
    from ..context.notebook import agent_intent

    ran = [c for c in context.cells if c.cell_type == "code" and c.execution_count is not None
           and c.source.strip() and agent_intent(c.source) is None]
    return [c.source for c in sorted(ran, key=lambda c: c.execution_count or 0)]


def secrets_scrubber(*known: str | None) -> Scrubber:
    """What every entry point scrubs from a copy's results: the ``known`` secrets
    (the model key, the server token) and the values of this process's
    secret-looking environment variables, which a copy may find on disk."""
    from ..kernel.copy.harden import secret_env_names

    return Scrubber([*known, *(os.environ.get(name) for name in secret_env_names())])


async def open_copies(policy: CopyPolicy, *, fork: Fork | None, replay: Sequence[str] | None = None,
                      notebook_dir: str | None = None, unavailable: str = "",
                      redact: Redact | None = None, off_loop: OffLoop = asyncio.to_thread) -> Copies:
    """Copies per ``policy``: ``fork``, else a replay kernel running ``replay``, else none.

    ``unavailable`` says why the caller has no way to fork (no kernel). The
    confinement policy then decides: under ``require`` a tree missing a layer
    is closed here, and candidates are generated but not run. ``redact``
    scrubs every result the tree returns (``kernel.tree.received``).
    ``off_loop`` runs the blocking steps (the handle's ``off_loop``).
    """
    limits = policy.kernel_limits()
    reasons: list[str] = []
    tree: CopyTree | None = None
    if policy.mode == "none":
        reasons.append(policy.reason or "kernel copies are off for this turn")
    if policy.mode in ("auto", "fork"):
        if fork is None:
            reasons.append(unavailable or "no kernel to copy")
        else:
            try:
                tree = await fork(limits)
            except Exception as error:  # fork refused, not POSIX, no snapshot server...
                log.debug("fork failed", exc_info=True)
                reasons.append(f"no kernel copy could be made ({error})")
    if tree is None and policy.mode in ("auto", "replay") and replay is not None:
        from ..kernel.host.replay import ReplayTree

        try:
            replayed = await off_loop(functools.partial(
                ReplayTree.start, list(replay), notebook_dir=notebook_dir, limits=limits,
                max_live=min(policy.max_live, policy.max_replay_kernels)))
            replayed.fallback_reason = "; ".join(reasons) or "replay asked for"
            tree = replayed
        except Exception as error:  # a cell that fails to replay, a kernel that does not start
            log.debug("replay fallback failed", exc_info=True)
            reasons.append(f"the replay fallback failed ({error})")
    why = "; ".join(reasons)
    confinement = decide(tree.protections if tree is not None else None, policy.confinement,
                         "" if tree is not None else why or "no kernel copy could be made")
    if tree is not None and not confinement.execute:
        await off_loop(tree.close)
        tree = None
    if tree is not None:
        tree.redact = redact  # type: ignore[attr-defined]
    return Copies(tree, confinement, why)
