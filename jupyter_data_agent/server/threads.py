"""Work that may block for minutes, each piece in a daemon thread of its own.

Not the loop's default executor: its few threads are shared by the server's short
blocking calls (a token's check, a copy's handshake), and a turn's model call or a
try's run would starve them. Not a bounded pool either: a cancelled turn's thread
may stay blocked in a model call, and the work queued behind it must not wait.
The callers' slots (turns, tries) bound how many run.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


def in_thread(fn: Callable[..., Any], *args: Any, name: str,
              ended: Callable[[threading.Thread], object] | None = None) -> tuple[asyncio.Future, threading.Thread]:
    """``fn(*args)`` in a new daemon thread (not yet started: the caller starts it once it has
    noted it); cancelling the future abandons the thread. ``ended`` runs on the loop when it
    returns, whatever became of the future."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def settle(thread: threading.Thread, ok: bool, value: Any) -> None:
        if ended is not None:
            ended(thread)
        if not future.done():  # else abandoned: cancelled meanwhile
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            outcome = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 -- handed to the awaiting task
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop is gone (server stopped)
            loop.call_soon_threadsafe(settle, threading.current_thread(), *outcome)

    return future, threading.Thread(target=work, name=name, daemon=True)
