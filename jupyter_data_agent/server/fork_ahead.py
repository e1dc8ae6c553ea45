"""One child of a copy forked ahead of the caller who will want it.

A child of a kept copy is a copy-on-write fork, but its making still costs
tens of milliseconds on a loaded machine (the fork request, ``fork()`` of a
big process, the child's own scratch folder and Landlock layer, the check of
its pid): as much as the code a try runs. A kernel's warm root and an
agent's latest handle are the copies the next try starts from, so each keeps
one child ready; the caller takes it at once and the next is forked in the
background. The copy it was forked from never runs code again (a try runs in
a child of it), so a spare holds exactly that copy's state; it has run one
``pass`` (with the namespace's fingerprint kept), so that the first cell's
copy-on-write faults are paid ahead too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class ForkAhead:
    """``node``'s next child, forked ahead (blocking calls: off the event loop)."""

    def __init__(self, node: Any, *, own_scratch: bool = False, first: Callable[[], None] | None = None) -> None:
        self.node = node
        self.own_scratch = own_scratch
        self._first = first  # run once before the first spare is forked (a warm root's fingerprint)
        self._lock = threading.Lock()  # held while a spare is forked: the next taker waits for it
        self._spare: Any = None
        self._readying: Any = None  # forked, running its ``pass``
        self._closed = False

    def take(self, refill: bool = True) -> Any:
        """A child of ``node``: the spare, else one forked now; the next is forked in the background
        (``refill`` False: when the caller says so, after its run, which the fork would slow)."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None or not spare.is_live:
            spare = self.node.fork(own_scratch=self.own_scratch)
        if refill:
            self.refill_soon()
        return spare

    def refill_soon(self) -> None:
        if not self._closed:
            threading.Thread(target=self._refill, name="jda-fork-ahead", daemon=True).start()

    def close(self) -> None:
        """No more spares; the one kept ends (it also ends with its parent's tree)."""
        with self._lock:
            self._closed = True
            spare, self._spare = self._spare, None
        if spare is not None:
            try:
                spare.close()
            except Exception:  # a copy already gone with its tree
                log.debug("closing a spare copy failed", exc_info=True)

    @property
    def held(self) -> int:
        """Spare processes kept or being readied (0 or 1)."""
        return int(self._spare is not None or self._readying is not None)

    @property
    def pid(self) -> int | None:
        """The spare's process, kept or being readied (tests tell it from a try's copies)."""
        spare = self._spare or self._readying
        return getattr(spare, "pid", None) if spare is not None else None

    def _refill(self) -> None:
        with self._lock:
            if self._spare is not None or self._closed:
                return
            try:
                if self._first is not None:
                    self._first()
                    self._first = None
                spare = self._readying = self.node.fork(own_scratch=self.own_scratch)
                # one empty statement through the run path: the pages a first cell writes (IPython's,
                # the fingerprint's) are copied now, not in the caller's run (~4 ms on 2 cores)
                spare.exec("pass", namespace=True)
                self._spare = spare
            except Exception:  # the next taker forks its own, and hears why if that fails too
                log.debug("no copy forked ahead of %r", self.node, exc_info=True)
            finally:
                self._readying = None
