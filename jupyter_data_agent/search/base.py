"""What every search strategy takes and returns.

Entry points (magic, server, benchmark) build a :class:`TurnRequest`, pick a
strategy by name and get a :class:`SearchResult`; progress arrives as
:class:`Event` objects through a callback, so the magic can print them and the
server can stream them over a websocket.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from ..context.model import NotebookContext
from ..context.report import ContextReport, SchemaCuts
from ..kernel.copy.namespace_diff import NamespaceDiff
from ..kernel.inkernel.probes import Check
from ..kernel.results import ExecResult, OutputItem, Protections
from ..kernel.tree import Executor
from ..llm.base import Backend
from ..prompts.parse import Step
from .options import DirectOptions, PromptPolicy, SamplingPolicy, StrategyOptions, TaskInfo


class Cancelled(Exception):
    """The user stopped the search; everything it started has been ended."""


@dataclass
class TurnRequest:
    """What a strategy gets: the intent, the live context, and typed knobs.

    Entry points never build this by hand: ``turn.resolve`` fills every
    field from the settings and the request, once.
    """

    intent: str
    context: NotebookContext
    schema: str = ""
    # What ``schema`` left out, and the @mentioned frames it gives in full (the context gauge).
    schema_cuts: SchemaCuts = field(default_factory=SchemaCuts)
    options: StrategyOptions = field(default_factory=DirectOptions)
    prompt: PromptPolicy = field(default_factory=PromptPolicy)
    sampling: SamplingPolicy = field(default_factory=SamplingPolicy)
    task: TaskInfo = field(default_factory=TaskInfo)

    @property
    def strategy(self) -> str:
        return self.options.strategy


@dataclass
class TraceStep:
    """One executed step of a multi-step solution (react, mcts): what the model
    thought, the cell it wrote, and what the cell printed (or the final answer)."""

    thought: str
    code: str = ""
    output: str = ""
    status: str = "ok"  # ok | error | timeout | died | answer | invalid
    answer: str | None = None


@dataclass
class AnalysisStep:
    """One step of an analysis: a Markdown explanation and a new cell (or a new source for
    the existing cell ``cell_id``), run in a copy forked from the previous step's copy."""

    number: int
    title: str
    explanation: str = ""
    code: str = ""
    cell_id: str | None = None  # None: a new cell; else an edit of that cell
    result: ExecResult | None = None  # what it printed in its copy (None: not run)
    status: str = "not_run"  # ok | error | timeout | died | not_run
    repairs: int = 0  # how many fixes it took
    replanned: bool = False  # planned again after an earlier step went otherwise

    def to_json(self) -> dict:
        return {**asdict(self), "result": self.result.to_json(form=False) if self.result else None}


@dataclass
class Candidate:
    """One proposed solution: code split in explained steps, and what running it gave."""

    code: str
    steps: list[Step] = field(default_factory=list)
    result: ExecResult | None = None
    score: float | None = None
    support: int = 1
    repaired: bool = False
    raw: str = ""
    # Strategy-specific data (e.g. the search node id), for export.
    meta: dict[str, Any] = field(default_factory=dict)
    # Multi-step strategies: the steps in order, with their outputs.
    trace: list[TraceStep] = field(default_factory=list)
    # The analysis strategy: one verified cell (or cell edit) per step, reviewed as one change.
    analysis: list[AnalysisStep] = field(default_factory=list)
    # Evidence (``search.evidence``): the copy's probes over its steps, its answer's type, agreement.
    checks: list[Check] = field(default_factory=list)
    # What running it changed in its copy: the variables it added, changed and deleted, the files
    # it wrote in scratch (``kernel.copy.namespace_diff``); what accepting it will change. None:
    # not run in one copy (multi-step strategies); its ``note``: the copy could not tell.
    namespace: NamespaceDiff | None = None

    @property
    def explanation(self) -> str:
        return "\n".join(f"Step {s.number}: {s.explanation}" for s in self.steps if s.explanation)

    @property
    def ok(self) -> bool | None:
        return None if self.result is None else self.result.ok

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "steps": [asdict(s) for s in self.steps],
            "explanation": self.explanation,
            "result": self.result.to_json(form=False) if self.result else None,
            "score": self.score,
            "support": self.support,
            "repaired": self.repaired,
            "meta": self.meta,
            "trace": [asdict(t) for t in self.trace],
            "analysis": [a.to_json() for a in self.analysis],
            "checks": [asdict(c) for c in self.checks],
            "namespace": self.namespace.to_json() if self.namespace is not None else None,
        }


@dataclass
class SearchStats:
    iterations: int = 0
    nodes: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Prompt tokens the backend reused from its KV cache (prefix reuse), over every sample.
    reused_tokens: int = 0
    executions: int = 0
    wall_time_s: float = 0.0
    # Of the wall time, the seconds spent waiting for the model (generating, streaming); timed
    # around the backend by ``turn.run_turn`` (0 where a strategy runs outside it).
    model_time_s: float = 0.0
    value: float | None = None
    # Sizes of the answer classes that voted (largest first); empty when nothing voted.
    classes: list[int] = field(default_factory=list)
    # What guided a value-guided search ("heuristic", "value-model v3 (...)"); "" otherwise.
    estimator: str = ""
    # How full the first prompt was and what was cut (the sidebar's context gauge); None: not built.
    context: ContextReport | None = None
    # What the candidates' kernel copies travelled over (``kernel.policy.TRANSPORT_WORDS``); "" unknown.
    transport: str = ""
    # Completions the turn's budget allowed but the strategy did not draw (an adaptive vote's stop).
    unspent: int = 0
    # Completions drawn (every sample of every call): what a budget in completions counts.
    samples: int = 0

    def count_call(self, completions: list) -> None:
        """One model call: the prompt is counted once, every sample's output."""
        self.model_calls += 1
        self.samples += len(completions)
        if completions:
            self.prompt_tokens += completions[0].prompt_tokens
        self.completion_tokens += sum(c.completion_tokens for c in completions)
        self.reused_tokens += sum(getattr(c, "cached_tokens", 0) for c in completions)


@dataclass
class SearchResult:
    chosen: Candidate | None
    candidates: list[Candidate] = field(default_factory=list)
    stats: SearchStats = field(default_factory=SearchStats)
    protections: Protections | None = None
    strategy: str = ""
    prompt: str = ""
    # The final answer in words where the strategy produces one (react, mcts).
    answer: str | None = None
    # The copies an analysis keeps for its review (``search.analysis.AnalysisChain``); whoever
    # runs the turn closes it. Not on the wire.
    chain: Any = None

    def to_json(self) -> dict:
        return {
            "strategy": self.strategy,
            "answer": self.answer,
            "chosen": self.candidates.index(self.chosen) if self.chosen in self.candidates else None,
            "candidates": [c.to_json() for c in self.candidates],
            "stats": asdict(self.stats),
            "protections": self.protections.to_json() if self.protections else None,
        }


#: ``delta``: text of the completion being generated, batched (``text``, ``candidate``,
#: ``start`` on a generation's first batch); the ``candidate`` event that follows replaces it.
EventKind = Literal["progress", "candidate", "log", "delta"]


@dataclass
class Event:
    kind: EventKind
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)


EventSink = Callable[[Event], None]


def copy_failed(exc: BaseException) -> ExecResult:
    """A step whose copy could not be made (a fork refused because the copy it came from
    broke the protocol, no room, a dead parent): that step failed, not the search."""
    name, why = type(exc).__name__, str(exc)
    return ExecResult(status="died", ename=name, evalue=why,
                      outputs=[OutputItem(output_type="error", ename=name, evalue=why)])


def ignore_events(event: Event) -> None:
    pass


@dataclass
class RunContext:
    """What a strategy may use besides the request."""

    backend: Backend
    executor: Executor | None = None
    events: EventSink = ignore_events
    cancel: threading.Event = field(default_factory=threading.Event)
    # Set: wrap up and return what is verified (the analysis's Stop); strategies that cannot
    # stop early ignore it.
    finish: threading.Event = field(default_factory=threading.Event)
    protections: Protections | None = None
    started: float = field(default_factory=time.monotonic)
    # The first prompt's report, set where the prompt is built; ``turn.run_turn`` puts it in the stats.
    context_report: ContextReport | None = None

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("the search was cancelled")

    def progress(self, message: str, **data: Any) -> None:
        self.events(Event("progress", message, data))

    def delta(self, text: str, *, candidate: int | None = None, start: bool = False) -> None:
        """A batch of streamed text of the completion being generated."""
        self.events(Event("delta", "", {"text": text, "candidate": candidate, "start": start}))


class Strategy(Protocol):
    name: str

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult: ...
