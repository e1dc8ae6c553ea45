"""The typed events of a turn, as they go over the wire (websocket frame or poll item).

One discriminated union on ``type``: ``progress``, ``candidate``, ``log``,
``delta`` (streamed text of the completion being generated), ``done`` and
``error``, each with typed ``data``. The server validates every
event through :data:`JobEvent` before it stores or sends it, so a malformed
event is a loud error, never a frame the browser has to guess about. The
front end's types (``src/wire.ts``) are generated from the JSON Schema of
these models (``python -m jupyter_data_agent.server.models --schema``).

``done`` refers to the candidates the turn already sent as ``candidate``
events: it carries their count and the index of the chosen one, never the
candidates again.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from ..search.options import STRATEGIES

API_VERSION: Literal[1] = 1

#: Every strategy the server knows (``search.options.STRATEGIES``, checked below).
StrategyName = Literal["direct", "vote", "react", "mcts", "explain"]
if set(get_args(StrategyName)) != set(STRATEGIES):  # pragma: no cover - a contract check
    raise ImportError(f"turn.events.StrategyName {get_args(StrategyName)} differs from "
                      f"search.options.STRATEGIES {STRATEGIES}")

EventType = Literal["progress", "candidate", "log", "delta", "done", "error"]

#: ``state`` of a progress event: where the turn stands.
ProgressState = Literal[
    "queued",  # waiting for another turn to finish
    "loading_model",
    "waiting_model",  # the model serves another turn first: ``queue`` turns ahead
    "waiting_for_kernel",  # the kernel is busy running a cell
    "kernel_ready",
    "schema_ready",  # DataFrame schemas read from the kernel
    "kernel_copy_ready",
    "confinement",  # the policy's verdict on the kernel copies (once per turn)
    "searching",
    "prompt",  # the model is asked: ``prompt_tokens`` in the prompt
    "generating",  # the model is writing: ``tokens`` so far, ``elapsed_s`` since it was asked
    "candidate_ready",  # a strategy announced a candidate sent before ``done``
    "no_kernel",  # the notebook text alone: no kernel, or a dead one
]

#: ``state`` of a log event: something the user may want to know, not a step.
LogState = Literal[
    "no_live_state",
    "kernel_timeout",
    "schema_failed",
    "no_kernel_copy",
    "replay_fallback",  # no fork: candidates run in a kernel that replayed the notebook
]


class _Wire(BaseModel):
    """Strict: a field the contract does not name is an error, not silence."""

    model_config = ConfigDict(extra="forbid")


class _Sparse(_Wire):
    """Data whose fields are all optional: only the fields an event set go out."""

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler):  # no return type: keeps the schema
        data = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}


# -- what running a cell in a kernel copy gave (kernel/results.py) ------------------

class OutputItem(_Wire):
    """One notebook output (``kernel.results.OutputItem.to_json``); unused fields are null."""

    output_type: Literal["stream", "execute_result", "display_data", "error"]
    name: str | None
    text: str | None
    data: dict[str, Any]
    metadata: dict[str, Any]
    ename: str | None
    evalue: str | None
    traceback: list[str]
    truncated: bool


class ValueHandle(_Wire):
    """The cell's last value, compact and comparable (``kernel.results.ValueHandle``)."""

    type: str
    shape: list[int] | None
    value: Any
    truncated: bool


class ExecResult(_Wire):
    """``kernel.results.ExecResult.to_json``: ok | error | timeout | died, and what it printed."""

    status: Literal["ok", "error", "timeout", "died"]
    outputs: list[OutputItem]
    value: ValueHandle | None
    ename: str | None
    evalue: str | None
    traceback: list[str]
    duration_s: float
    pid: int | None
    limit: str | None  # the bound that was hit: "timeout", "cpu", "memory"
    truncated: bool


class Step(_Wire):
    """One explained step of a candidate (``# Step N: explanation`` and its code)."""

    number: int
    explanation: str
    code: str


class TraceStep(_Wire):
    """One executed step of a multi-step strategy (react, mcts)."""

    thought: str
    code: str
    output: str
    status: Literal["ok", "error", "timeout", "died", "answer", "invalid"]
    answer: str | None


class Candidate(_Wire):
    """One proposed solution (``search.base.Candidate.to_json``)."""

    code: str
    steps: list[Step]
    explanation: str
    result: ExecResult | None  # null: not run (no kernel copy, or the policy said no)
    score: float | None
    support: int
    repaired: bool
    meta: dict[str, Any]
    trace: list[TraceStep]


# -- the kernel copies' confinement (kernel/results.py, kernel/policy.py) ----------

class Layer(_Wire):
    """One confinement layer: on or off, with what it does or why it is off."""

    name: str
    on: bool
    detail: str


class Confinement(_Wire):
    """The policy applied to one turn's copies (``kernel.policy.Confinement.to_json``)."""

    policy: Literal["require", "warn"]
    status: Literal["confined", "partial", "not_executed"]
    execute: bool  # whether candidates were run in the copies
    message: str
    layers: list[Layer]
    missing: list[str]


class Protections(_Wire):
    """Which layers are really active in a snapshot (``kernel.results.Protections.to_json``)."""

    landlock_fs: bool
    landlock_net: bool
    seccomp: bool
    capabilities: bool
    descriptors: bool
    shared_mappings: bool
    secrets: bool
    processes: str  # "cgroup" | "subreaper" | "" (off)
    rlimit_cpu: bool
    rlimit_as: bool
    rlimit_fsize: bool
    timeout: bool
    landlock_abi: int
    signal_scope: bool
    scratch: str | None
    cgroup: str | None
    reasons: dict[str, str]
    notes: list[str]


class SearchStats(_Wire):
    """``search.base.SearchStats``: what the turn cost."""

    iterations: int
    nodes: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    reused_tokens: int = 0  # prompt tokens the backend reused from its cache (prefix reuse)
    executions: int
    wall_time_s: float
    value: float | None
    classes: list[int]  # sizes of the answer classes that voted, largest first; [] when none voted


class AnswerVotes(_Wire):
    """One group of equal answers in a running search."""

    answer: str
    votes: int


# -- event data ---------------------------------------------------------------------

class ProgressData(_Sparse):
    """Where the turn stands; every field but the ones an event sets is absent."""

    state: ProgressState | None = None
    backend: str | None = None  # loading_model
    strategy: str | None = None  # searching
    frames: list[str] | None = None  # schema_ready: the DataFrames read
    protections: Protections | None = None  # kernel_copy_ready
    confinement: Confinement | None = None  # confinement
    index: int | None = Field(default=None, ge=0)  # candidate_ready
    # Strategies' own progress (search/*.py).
    samples: int | None = None  # completions asked for
    candidate: int | None = Field(default=None, ge=0)  # the candidate being run (vote)
    turn: int | None = None  # react's step
    iterations: int | None = None
    nodes: int | None = None
    best_value: float | None = None
    answers: list[AnswerVotes] | None = None
    selected: str | None = None  # the search node being expanded (mcts)
    prompt_tokens: int | None = Field(default=None, ge=0)  # prompt
    tokens: int | None = Field(default=None, ge=0)  # generating
    elapsed_s: float | None = Field(default=None, ge=0)  # generating
    queue: int | None = Field(default=None, ge=0)  # waiting_model


class LogData(_Sparse):
    state: LogState | None = None


class DeltaData(_Wire):
    """A batch of text of the completion being generated; ``start``: a new generation begins
    (the text streamed so far is dropped). The candidate event that follows replaces it."""

    text: str
    candidate: int | None = Field(ge=0)  # the candidate's index where known
    start: bool


class CandidateData(_Wire):
    """A candidate, whole, at its index in the turn's list (``done.result.chosen`` refers to it)."""

    index: int = Field(ge=0)
    candidate: Candidate


class DoneResult(_Wire):
    """The turn's outcome; the candidates themselves came as ``candidate`` events."""

    strategy: StrategyName
    answer: str | None  # an answer in words (react, mcts) or Markdown (explain)
    chosen: int | None = Field(ge=0)  # index of a candidate already sent; null: none
    candidates: int = Field(ge=0)  # how many candidate events the turn sent
    stats: SearchStats
    protections: Protections | None

    @model_validator(mode="after")
    def _chosen_was_sent(self) -> "DoneResult":
        if self.chosen is not None and self.chosen >= self.candidates:
            raise ValueError(f"chosen is {self.chosen} but only {self.candidates} candidate(s) were sent")
        return self


class DoneData(_Wire):
    result: DoneResult
    turn_id: str
    confinement: Confinement


class ErrorData(_Wire):
    state: Literal["error", "cancelled"]


# -- the events -----------------------------------------------------------------------

class _Event(_Wire):
    version: Literal[1]
    job_id: str
    seq: int = Field(ge=1)  # 1, 2, 3... per job; `after=<seq>` resumes
    message: str


class ProgressEvent(_Event):
    type: Literal["progress"]
    data: ProgressData


class CandidateEvent(_Event):
    type: Literal["candidate"]
    data: CandidateData


class LogEvent(_Event):
    type: Literal["log"]
    data: LogData


class DeltaEvent(_Event):
    type: Literal["delta"]
    data: DeltaData


class DoneEvent(_Event):
    type: Literal["done"]
    data: DoneData


class ErrorEvent(_Event):
    type: Literal["error"]
    data: ErrorData


JobEvent = Annotated[
    Union[ProgressEvent, CandidateEvent, LogEvent, DeltaEvent, DoneEvent, ErrorEvent],
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter = TypeAdapter(JobEvent)


class MalformedEvent(RuntimeError):
    """The server tried to send an event the contract does not allow (a bug in the server)."""


def validate_event(event: dict) -> dict:
    """The event as it goes out: validated, optional data fields nobody set left out.

    Raises ``pydantic.ValidationError`` for anything the contract does not allow.
    """
    return EVENT_ADAPTER.dump_python(EVENT_ADAPTER.validate_python(event), mode="json")
