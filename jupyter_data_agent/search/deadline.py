"""A time bound on one answer comparison, with a defined verdict when it runs out.

Comparing two answers is about linear in their columns, but a degenerate input (columns that no cheap
key tells apart) must not stall a vote for minutes. :func:`bounded` sets a deadline for the comparisons
started inside it (an inner bound never extends an outer one); the pairing loops call :func:`check`,
which raises :class:`Expired` once it has passed. ``equivalence`` turns that into the conservative
verdict "not the same answer" and says that it timed out (``equivalence.compare``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["TIME_LIMIT", "Expired", "bounded", "check"]

TIME_LIMIT = 5.0  # seconds per comparison; 1,000 x 2,000 frames take under one on a busy 2-core machine

_deadline: ContextVar[float | None] = ContextVar("comparison_deadline", default=None)


class Expired(Exception):
    """The comparison ran past its deadline."""


@contextmanager
def bounded(seconds: float | None) -> Iterator[None]:
    """Comparisons inside end by ``seconds`` from now (``None``: no bound of its own)."""
    if seconds is not None and not seconds > 0:
        raise ValueError(f"a time bound must be a positive number of seconds, not {seconds!r}")
    outer = _deadline.get()
    mine = None if seconds is None else time.monotonic() + seconds
    token = _deadline.set(mine if outer is None else outer if mine is None else min(outer, mine))
    try:
        yield
    finally:
        _deadline.reset(token)


def check() -> None:
    """Raise :class:`Expired` when the current comparison's deadline has passed."""
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline:
        raise Expired
