"""What the backends share beyond :mod:`.base`: chat rendering, greedy copies,
the process-wide cache of loaded models and the prompt's fit into a context.

Standard library only: the kernel imports it without torch or llama.cpp.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar

from .base import Completion, Prompt, StopStream

T = TypeVar("T")


def chat_dicts(prompt: Prompt) -> list[dict[str, str]]:
    """A chat prompt's messages as the ``{"role", "content"}`` dicts templates and APIs take."""
    return [{"role": m.role, "content": m.content} for m in prompt.messages or ()]


def transcript(prompt: Prompt) -> str:
    """A chat prompt as plain text, for a model without a chat template or a completion-only endpoint."""
    lines = [f"{m.role.capitalize()}: {m.content}" for m in prompt.messages or ()]
    return "\n\n".join(lines) + "\n\nAssistant:"


def greedy_copies(completions: list[Completion], n: int, **changes: Any) -> list[Completion]:
    """Greedy decoding is deterministic: the one decode, then copies of it up to ``n``."""
    first = completions[0]
    logprobs = first.token_logprobs
    return completions + [
        replace(first, token_logprobs=None if logprobs is None else list(logprobs), **changes)
        for _ in range(n - len(completions))
    ]


def fit_context(ids: Any, max_new: int, limit: int) -> tuple[Any, int]:
    """Clamp ``max_new`` to a ``limit``-token context and left-truncate the prompt ``ids``
    (a list or 1-D tensor) to the room left: the end holds the intent and the latest cells."""
    max_new = max(1, min(max_new, limit - 1))
    room = limit - max_new
    return (ids[len(ids) - room :] if len(ids) > room else ids), max_new


def until_stop(deltas: Iterable[str], stop: Sequence[str], *, keep_empty: bool = False) -> Iterator[str]:
    """A stream's ``deltas`` up to the first stop sequence, which is never shown (:class:`StopStream`);
    ``keep_empty`` passes empty deltas on: points where the consumer may stop."""
    stopper = StopStream(stop)
    for delta in deltas:
        out = stopper.feed(delta)
        if out or (keep_empty and not delta):
            yield out
        if stopper.done:
            return
    tail = stopper.flush()
    if tail:
        yield tail


class ModelCache(Generic[T]):
    """Loaded models by configuration, shared by every backend instance of the process."""

    def __init__(self) -> None:
        self._models: dict[Hashable, T] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        with self._lock:  # loading twice in parallel would double the memory
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = load()
            return model

    def clear(self) -> list[T]:
        """Forget every model; returns them, for the caller to free what they hold."""
        with self._lock:
            models = list(self._models.values())
            self._models.clear()
        return models
