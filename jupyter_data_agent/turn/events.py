"""The typed events of a turn, as they go over the wire (websocket frame or poll item).

One discriminated union on ``type``: ``progress``, ``candidate``, ``log``,
``delta`` (streamed text of the completion being generated), ``done`` and
``error``, each with typed ``data``. The server validates every
event through :data:`JobEvent` before it stores or sends it, so a malformed
event is a loud error, never a frame the browser has to guess about. The
front end's types (``src/wire.ts``) are generated from the JSON Schema of
these models (``python -m jupyter_data_agent.server.models --schema``).

The results an event carries (a candidate and its run, the search's
statistics, the confinement) are not described twice: :func:`_mirror`
derives their wire models from the dataclasses that hold them.

``done`` refers to the candidates the turn already sent as ``candidate``
events: it carries their count and the index of the chosen one, never the
candidates again.
"""

from __future__ import annotations

import dataclasses
import types
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    create_model,
    model_serializer,
    model_validator,
)

from ..context import report
from ..kernel import results
from ..kernel.copy import namespace_diff
from ..kernel.host import policy
from ..kernel.inkernel import probes
from ..prompts import parse
from ..search import base
from ..search.registry import StrategyName  # every strategy (the registry's, checked there)

API_VERSION: Literal[1] = 1


#: ``state`` of a progress event: where the turn stands.
ProgressState = Literal[
    "queued",  # waiting for another turn to finish
    "loading_model",
    "waiting_model",  # the model serves another turn first: ``queue`` turns ahead
    "waiting_for_kernel",  # the kernel is busy running a cell
    "state_age",  # a cell runs: the turn starts from the kernel's state before it (``state_age``)
    "kernel_ready",
    "schema_ready",  # DataFrame schemas read from the kernel
    "kernel_copy_ready",
    "confinement",  # the policy's verdict on the kernel copies (once per turn)
    "searching",
    "prompt",  # the model is asked: ``prompt_tokens`` in the prompt
    "generating",  # the model is writing: ``tokens`` so far, ``elapsed_s`` since it was asked
    "running",  # a candidate runs in a kernel copy (``candidate``: which, where there are several)
    "no_kernel",  # the notebook text alone: no kernel, or a dead one
    "planning",  # analysis: the model writes (or rewrites) the plan
    "step",  # analysis: a step of the plan is generated, run or repaired (``plan``, ``turn``)
]

#: ``state`` of a log event: something the user may want to know, not a step.
LogState = Literal[
    "no_live_state",
    "kernel_timeout",
    "schema_failed",
    "no_kernel_copy",
    "replay_fallback",  # no fork: candidates run in a kernel that replayed the notebook
]


#: What a turn's copies travelled over (``kernel.policy.TRANSPORT_WORDS``; "" before they were asked for).
Transport = Literal["", "local", "kernel channel", "in process", "replay", "none"]


class _Wire(BaseModel):
    """Strict: a field the contract does not name is an error, not silence."""

    model_config = ConfigDict(extra="forbid")


class _Sparse(_Wire):
    """Data whose fields are all optional: only the fields an event set go out."""

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler):  # no return type: keeps the schema
        data = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}


# -- mirrors of the result dataclasses, as their ``to_json`` writes them -------------

class Layer(_Wire):
    """One confinement layer: on or off, with what it does or why it is off."""

    name: str
    on: bool
    detail: str


#: Each dataclass that goes over the wire, and its wire model (see :func:`_mirror`).
_MIRRORS: dict[Any, Any] = {}


def _wire_type(tp: Any) -> Any:
    """``tp`` with every mirrored dataclass in it replaced by its wire model."""
    if tp in _MIRRORS:
        return _MIRRORS[tp]
    args = get_args(tp)
    if not args:
        return tp
    origin = get_origin(tp)
    wire = tuple(_wire_type(a) for a in args)
    return Union[wire] if origin in (Union, types.UnionType) else origin[wire]


def _mirror(cls: type, doc: str, *, drop: tuple[str, ...] = (), **narrow: Any) -> None:
    """The wire model of dataclass ``cls``: its fields, every one required, less ``drop``.

    A field added to the dataclass is on the wire at once, and in ``src/wire.ts``.
    ``narrow`` gives a field a tighter type than the dataclass does (a Literal for a
    free string) or adds one that ``to_json`` computes; nested dataclasses become
    their own mirrors.
    """
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {f.name: (narrow.pop(f.name, _wire_type(hints[f.name])), ...)
                              for f in dataclasses.fields(cls) if f.name not in drop}
    fields.update({name: (tp, ...) for name, tp in narrow.items()})
    _MIRRORS[cls] = create_model(cls.__name__, __base__=_Wire, __doc__=doc, __module__=__name__, **fields)


_mirror(results.OutputItem,
        "One notebook output (``kernel.results.OutputItem.to_json``); unused fields are null.",
        output_type=Literal["stream", "execute_result", "display_data", "error"])
_mirror(results.ValueHandle,
        "The cell's last value, compact and comparable (``kernel.results.ValueHandle``).",
        drop=("form",))  # the canonical form every vote compares stays on the server
_mirror(results.ExecResult,
        "``kernel.results.ExecResult.to_json``: ok | error | timeout | died, and what it printed.",
        status=Literal["ok", "error", "timeout", "died"])
_mirror(parse.Step, "One explained step of a candidate (``# Step N: explanation`` and its code).")
_mirror(base.TraceStep, "One executed step of a multi-step strategy (react, mcts).",
        status=Literal["ok", "error", "timeout", "died", "answer", "invalid"])
_mirror(base.AnalysisStep, "One step of an analysis: its cell (or cell edit) and what it printed in its copy.",
        status=Literal["ok", "error", "timeout", "died", "not_run"])
_mirror(probes.Check, "One evidence check of a candidate (``kernel.probes.Check``): passed, or what it found.")
_mirror(namespace_diff.Variable, "A variable a cell added, changed (``before``: its shape before) or deleted.")
_mirror(namespace_diff.NamespaceDiff,
        "What a candidate's cell changed in its copy (``kernel.copy.namespace_diff.NamespaceDiff``): variables, "
        "files written in scratch (null: not known); ``note``: the copy could not tell.")
_mirror(base.Candidate, "One proposed solution (``search.base.Candidate.to_json``).",
        drop=("raw",), explanation=str)
_mirror(results.Protections,
        "Which layers are really active in a snapshot (``kernel.results.Protections.to_json``).")
_mirror(report.FrameCut, "A DataFrame the prompt's schema block did not describe in full.")
_mirror(report.ContextReport, "``context.report.ContextReport``: how full the prompt was, what was cut.")
_mirror(base.SearchStats, "``search.base.SearchStats``: what the turn cost.", transport=Transport)
_mirror(policy.Confinement,
        "The policy applied to one turn's copies (``kernel.policy.Confinement.to_json``).",
        policy=Literal["require", "warn"], status=Literal["confined", "partial", "not_executed"],
        layers=list[Layer], transport=Transport)

if TYPE_CHECKING:  # mypy cannot see into create_model: to it, a mirror is a wire model
    Candidate = _Wire
    Confinement = _Wire
    Protections = _Wire
    SearchStats = _Wire
    ExecResult = _Wire
else:
    Candidate, Confinement, Protections, SearchStats, ExecResult = (_MIRRORS[c] for c in (
        base.Candidate, policy.Confinement, results.Protections, base.SearchStats, results.ExecResult))


if TYPE_CHECKING:
    AnalysisStep = _Wire
    Check = _Wire
else:
    AnalysisStep = _MIRRORS[base.AnalysisStep]
    Check = _MIRRORS[probes.Check]


class PlanStepState(_Wire):
    """One step of an analysis's plan, and where it stands (the sidebar's live plan)."""

    number: int = Field(ge=1)
    title: str
    status: Literal["pending", "generating", "running", "repairing", "ok", "error", "skipped"]


class AnswerVotes(_Wire):
    """One group of equal answers in a running search."""

    answer: str
    votes: int


# -- event data ---------------------------------------------------------------------

class StateAgeData(_Wire):
    """The kernel state a turn starts from while a cell runs (``server.warm_roots.StateAge``)."""

    as_of: str  # the state's time, ISO 8601
    running: bool  # a cell runs in the kernel now
    executions_since: int = Field(ge=0)  # cells started since (the running one included)
    note: str  # in words


class ProgressData(_Sparse):
    """Where the turn stands; every field but the ones an event sets is absent."""

    state: ProgressState | None = None
    backend: str | None = None  # loading_model
    strategy: str | None = None  # searching
    frames: list[str] | None = None  # schema_ready: the DataFrames read
    protections: Protections | None = None  # kernel_copy_ready
    transport: Transport | None = None  # kernel_copy_ready
    confinement: Confinement | None = None  # confinement
    # Strategies' own progress (search/*.py).
    samples: int | None = None  # completions asked for
    candidate: int | None = Field(default=None, ge=0)  # the candidate being run (vote)
    turn: int | None = None  # react's step
    iterations: int | None = None
    nodes: int | None = None
    best_value: float | None = None
    answers: list[AnswerVotes] | None = None
    selected: str | None = None  # the search node being expanded (mcts)
    plan: list[PlanStepState] | None = None  # analysis: the whole plan, each step's status
    prompt_tokens: int | None = Field(default=None, ge=0)  # prompt
    tokens: int | None = Field(default=None, ge=0)  # generating
    elapsed_s: float | None = Field(default=None, ge=0)  # generating
    queue: int | None = Field(default=None, ge=0)  # waiting_model
    state_age: StateAgeData | None = None  # state_age


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
    # Each sent candidate's vote support at the end, by index: a candidate event went out
    # when it ran, before the vote counted it with its (repaired) twins.
    support: list[int] = Field(default_factory=list)
    # Each sent candidate's evidence checks at the end, by index: the vote adds its type,
    # plausibility and agreement checks after the candidate event went out.
    checks: list[list[Check]] = Field(default_factory=list)
    stats: SearchStats
    protections: Protections | None
    # The model the turn ran on (the picker's choice, else the configured one): its cost is
    # that model's price, whatever is picked later. "": not known (a server older than it).
    model: str = ""

    @model_validator(mode="after")
    def _chosen_was_sent(self) -> "DoneResult":
        if self.chosen is not None and self.chosen >= self.candidates:
            raise ValueError(f"chosen is {self.chosen} but only {self.candidates} candidate(s) were sent")
        if self.support and len(self.support) != self.candidates:
            raise ValueError(f"support has {len(self.support)} entries for {self.candidates} candidate(s)")
        if self.checks and len(self.checks) != self.candidates:
            raise ValueError(f"checks has {len(self.checks)} entries for {self.candidates} candidate(s)")
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


#: The data of each event ``type``: ``{"type": "progress", "data": ProgressData, ...}``.
_DATA: dict[str, type[_Wire]] = {"progress": ProgressData, "candidate": CandidateData, "log": LogData,
                                 "delta": DeltaData, "done": DoneData, "error": ErrorData}

if TYPE_CHECKING:
    JobEvent = dict[str, Any]
else:
    JobEvent = Annotated[Union[tuple(
        create_model(f"{type_.title()}Event", __base__=_Event, __module__=__name__,
                     type=(Literal[type_], ...), data=(data, ...))
        for type_, data in _DATA.items())], Field(discriminator="type")]

EVENT_ADAPTER: TypeAdapter = TypeAdapter(JobEvent)


class MalformedEvent(RuntimeError):
    """The server tried to send an event the contract does not allow (a bug in the server)."""


def validate_event(event: dict) -> dict:
    """The event as it goes out: validated, optional data fields nobody set left out.

    Raises ``pydantic.ValidationError`` for anything the contract does not allow.
    """
    return EVENT_ADAPTER.dump_python(EVENT_ADAPTER.validate_python(event), mode="json")
