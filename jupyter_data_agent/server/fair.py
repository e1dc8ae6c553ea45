"""Fair slots: a bounded number of things at a time, shared between users so none starves.

Turns (``server.jobs``) and outside agents' tries (``server.tries``) both run a
bounded number at a time. A plain semaphore serves whoever asked first, so
one user who asks for many fills every slot and the next user waits behind
all of them. Here each user holds at most ``per_owner`` slots (below the
total, so a slot is left for someone else), and a freed slot goes to the
waiting user who holds the fewest, the longest waiter among them first.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass(order=True)
class _Waiter:
    seq: int
    owner: str = field(compare=False)
    future: asyncio.Future = field(compare=False)


class FairSlots:
    """``total`` slots, at most ``per_owner`` of them per owner; event-loop only."""

    def __init__(self, total: int, per_owner: int | None = None, *, exempt: frozenset[str] = frozenset()) -> None:
        self.total = max(1, total)
        # Below the total unless there is one slot: one user never holds them all.
        self.per_owner = max(1, min(per_owner if per_owner is not None else self.total - 1, self.total))
        self.exempt = exempt  # owners bound by the total only (the one principal of a one-user server)
        self.held: dict[str, int] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def in_use(self) -> int:
        return sum(self.held.values())

    def waiting(self, owner: str | None = None) -> int:
        return sum(1 for w in self._waiting if owner is None or w.owner == owner)

    def would_wait(self, owner: str) -> bool:
        """Whether ``owner`` asking now would wait (for the "queued" notice)."""
        return not self._may_take(owner) or any(self._may_take(w.owner) for w in self._waiting)

    @contextlib.asynccontextmanager
    async def slot(self, owner: str) -> AsyncIterator[None]:
        """Hold one of ``owner``'s slots for the body; a cancelled wait leaves the line."""
        await self.acquire(owner)
        try:
            yield
        finally:
            self.release(owner)

    async def acquire(self, owner: str) -> None:
        if not self._waiting and self._may_take(owner):
            self._take(owner)
            return
        waiter = _Waiter(next(self._seq), owner, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        self._dispatch()
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():
                self.release(owner)  # granted, then cancelled before it was used
            raise

    def release(self, owner: str) -> None:
        left = self.held.get(owner, 0) - 1
        if left > 0:
            self.held[owner] = left
        else:
            self.held.pop(owner, None)
        self._dispatch()

    def cap(self, owner: str) -> int:
        return self.total if owner in self.exempt else self.per_owner

    def _may_take(self, owner: str) -> bool:
        return self.in_use < self.total and self.held.get(owner, 0) < self.cap(owner)

    def _take(self, owner: str) -> None:
        self.held[owner] = self.held.get(owner, 0) + 1

    def _dispatch(self) -> None:
        """Hand free slots to waiters: fewest held first, then the longest waiting."""
        while self._waiting and self.in_use < self.total:
            eligible = [w for w in self._waiting if self._may_take(w.owner)]
            if not eligible:
                return
            chosen = min(eligible, key=lambda w: (self.held.get(w.owner, 0), w.seq))
            self._waiting.remove(chosen)
            if chosen.future.done():  # cancelled while waiting
                continue
            self._take(chosen.owner)
            chosen.future.set_result(None)
