"""What a sidebar turn says while a local model gets ready for its first token.

A first answer on the embedded model spends its time loading the weights and
reading the prompt into the model's cache (a ~1,600-token prompt is tens of
seconds on a busy 2-core machine). The turn says which of the two it is
doing, with an estimate, instead of a stale "waiting for the model" line:
a warm-up (``POST warm``) or the model's load is never a turn ahead.
"""

from __future__ import annotations

import math

from ..llm.base import Backend, PromptWork

#: Assumed read speed of the weights for the load estimate (a cold disk; a cached file is faster).
LOAD_BYTES_PER_S = 100e6
#: Fewer new prompt tokens than this are read in a moment: no line of their own.
PREPARE_MIN_TOKENS = 64


def _about(seconds: float) -> str:
    return f"about {max(1, math.ceil(seconds)):,} s"


def loading_text(backend: Backend) -> str:
    """``loading the model NAME (98 MB, about 1 s)``: the size and estimate when the file is known."""
    size = backend.weights_bytes
    if not size:
        return f"loading the model {backend.model}"
    return f"loading the model {backend.model} ({size / 1e6:,.0f} MB, {_about(size / LOAD_BYTES_PER_S)})"


def waiting_text(ahead: int) -> str:
    """The line while the turn waits for the model; ``ahead`` counts turns only (0: a warm-up
    holds it and gives way within its next step, whose tokens stay cached for this turn)."""
    if ahead <= 0:
        return "preparing the prompt cache (a warm-up gives way)"
    return f"waiting for the model: {ahead} turn{'s' if ahead != 1 else ''} ahead"


def preparing_text(work: PromptWork) -> str | None:
    """``preparing the prompt cache: 1,540 new prompt tokens (60 cached), about 25 s``; None
    when there is little to read."""
    if work.new < PREPARE_MIN_TOKENS:
        return None
    cached = f" ({work.cached:,} cached)" if work.cached else ""
    eta = f", {_about(work.seconds)}" if work.seconds is not None else ""
    return f"preparing the prompt cache: {work.new:,} new prompt tokens{cached}{eta}"
