"""Run one resolved turn: the same call for the magic, the server and every benchmark."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

from ..context.model import NotebookContext
from ..context.report import ContextReport, SchemaCuts
from ..llm.base import Backend, Completion, Prompt, SamplingParams, WrappedBackend, inner_stream
from ..prompts import ProseAnswer, UnparsableOutput
from ..search import RunContext, SearchResult, Strategy, TurnRequest, get_strategy
from ..search.base import EventSink, SearchStats, ignore_events
from .copies import Copies
from .spec import TurnSpec


class TimedBackend(WrappedBackend):
    """The turn's backend, timing its calls: the model's share of the turn's wall time.

    The sidebar splits a turn's time into waiting for the model and the rest (running
    code in kernel copies, building the prompt), so a slow turn says which one to fix.
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.seconds = 0.0
        self._lock = threading.Lock()

    def _add(self, started: float) -> None:
        with self._lock:
            self.seconds += time.monotonic() - started

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        started = time.monotonic()
        try:
            return self.inner.generate(prompt, params)
        finally:
            self._add(started)

    def stream(self, prompt: Prompt, params: SamplingParams) -> Generator[str, None, Completion | None]:
        started = time.monotonic()
        try:
            return (yield from inner_stream(self.inner, prompt, params))  # the finished Completion, if any
        finally:
            self._add(started)


def turn_request(spec: TurnSpec, context: NotebookContext, schema: str = "",
                 schema_cuts: SchemaCuts | None = None) -> TurnRequest:
    return TurnRequest(intent=spec.intent, context=context, schema=schema,
                       schema_cuts=schema_cuts or SchemaCuts(), options=spec.options,
                       prompt=spec.prompt, sampling=spec.sampling, task=spec.task)


def run_turn(spec: TurnSpec, context: NotebookContext, backend: Backend, *, schema: str = "",
             schema_cuts: SchemaCuts | None = None,
             copies: Copies | None = None, events: EventSink = ignore_events,
             cancel: threading.Event | None = None, finish: threading.Event | None = None,
             strategy: Strategy | None = None, prose_answers: bool = False) -> SearchResult:
    """Run ``spec``'s strategy; candidates run in ``copies`` when the policy let them.

    ``schema_cuts`` (``kernel.schema.schema_cuts``) says what ``schema`` left
    out; with the prompt's own truncation it becomes ``stats.context``.
    ``finish`` asks a strategy that can stop early (the analysis) to end with what it verified.
    ``strategy`` replaces the named one where a caller needs constructor
    arguments (a reward function for trajectory collection).
    ``prose_answers``: a chat reply in words only becomes the turn's answer (the sidebar shows
    it) instead of raising :class:`~..prompts.ProseAnswer` (benchmarks count it a failure).
    """
    timed = TimedBackend(backend)
    ctx = RunContext(
        backend=timed,
        executor=copies.executor if copies is not None else None,
        events=events,
        cancel=cancel or threading.Event(),
        finish=finish or threading.Event(),
        protections=copies.protections if copies is not None else None,
    )
    request = turn_request(spec, context, schema, schema_cuts)
    started = time.monotonic()
    try:
        result = (strategy or get_strategy(spec.strategy)).run(request, ctx)
    except ProseAnswer as prose:
        if not prose_answers:  # to the magic and the benchmarks, as before: no code came
            raise UnparsableOutput(str(prose), prose.stats) from None
        # a question answered in words: the words are the turn's answer
        stats = prose.stats if isinstance(prose.stats, SearchStats) else SearchStats()
        # The strategy raised before it timed itself: the turn's time is this run's.
        stats.wall_time_s = time.monotonic() - started
        result = SearchResult(chosen=None, stats=stats, protections=ctx.protections,
                              strategy=spec.strategy, answer=prose.text)
    result.stats.model_time_s = round(timed.seconds, 3)
    if result.stats.context is None:
        result.stats.context = ctx.context_report or _first_prompt_report(request, result, backend)
    return result


def _first_prompt_report(request: TurnRequest, result: SearchResult, backend: Backend) -> ContextReport:
    """Multi-step strategies (react, mcts) fit their own messages: their first prompt's fill and
    the schema's cuts (cells they dropped are not counted)."""
    cuts = request.schema_cuts
    tokens = backend.count_tokens(result.prompt) if result.prompt else 0
    return ContextReport(prompt_tokens=tokens, window=request.prompt.max_prompt_tokens,
                         mentioned=list(cuts.mentioned), frames_cut=list(cuts.frames_cut))
