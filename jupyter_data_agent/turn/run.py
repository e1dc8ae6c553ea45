"""Run one resolved turn: the same call for the magic, the server and every benchmark."""

from __future__ import annotations

import threading

from ..context.model import NotebookContext
from ..llm.base import Backend
from ..search import RunContext, SearchResult, Strategy, TurnRequest, get_strategy
from ..search.base import EventSink, ignore_events
from .copies import Copies
from .spec import TurnSpec


def turn_request(spec: TurnSpec, context: NotebookContext, schema: str = "") -> TurnRequest:
    return TurnRequest(intent=spec.intent, context=context, schema=schema, options=spec.options,
                       prompt=spec.prompt, sampling=spec.sampling, task=spec.task)


def run_turn(spec: TurnSpec, context: NotebookContext, backend: Backend, *, schema: str = "",
             copies: Copies | None = None, events: EventSink = ignore_events,
             cancel: threading.Event | None = None, strategy: Strategy | None = None) -> SearchResult:
    """Run ``spec``'s strategy; candidates run in ``copies`` when the policy let them.

    ``strategy`` replaces the named one where a caller needs constructor
    arguments (a reward function for trajectory collection).
    """
    ctx = RunContext(
        backend=backend,
        executor=copies.executor if copies is not None else None,
        events=events,
        cancel=cancel or threading.Event(),
        protections=copies.protections if copies is not None else None,
    )
    return (strategy or get_strategy(spec.strategy)).run(turn_request(spec, context, schema), ctx)
