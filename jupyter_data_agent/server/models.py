"""Wire models of the server API, version 1: requests, replies and (from turn/events.py) events.

One module so the TypeScript side has a single place to follow: its types
(``src/wire.ts``) are generated from :func:`wire_schema`, committed as
``src/wire.schema.json``; ``python -m jupyter_data_agent.server.models
--schema`` prints it and a test checks the committed file is current.
Requests are validated strictly (unknown top-level and option fields are
refused, so a typo in the front end fails loudly instead of being ignored);
cells are nbformat v4 JSON and keep whatever extra fields nbformat allows.
Replies are plain dicts built from these models. The proposals' models are in
``proposal_models``, the replies' bases in ``wire_base``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema

from ..turn.events import API_VERSION, AnalysisStep, JobEvent, StrategyName
from .connect_models import ConnectCheck, Connected, ConnectRequest, ModelInfo, ModelServers
from .proposal_models import (
    ProposalDecisionRequest,
    ProposalReply,
    ProposalRequest,
    ProposalsReply,
)
from .wire_base import Reply, Versioned

__all__ = ["API_VERSION", "AgentConfig", "AnalysisRevision", "AnalysisRevised", "AnalysisStepEdit",
           "CancelReply", "CellEdit", "CellError", "DecisionRecorded", "DecisionRequest",
           "InlineCompletionChunk",
           "InlineCompletionRequest", "JobEvent",
           "JobPoll", "JobState", "ModelPrice",
           "NotebookCell", "ServerLimits", "StrategyInfo", "StrategyName", "TurnAccepted", "TurnList", "TurnOptions",
           "TurnSource", "TurnSummary",
           "TurnRequestModel", "ValueModelReply", "VariableInfo", "VariablesReply", "WarmReply", "WarmRequest",
           "wire_schema"]

JobState = Literal["running", "done", "error", "cancelled"]

MAX_INTENT_CHARS = 20_000
MAX_CELLS = 5_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class TurnOptions(BaseModel):
    """Per-turn knobs; ``None`` takes the server's per-strategy default."""

    model_config = ConfigDict(extra="forbid")

    # Upper bounds are the server's (c.DataAgent.max_samples / max_budget, in GET config's
    # limits), checked when the turn is resolved: one declaration, not a second one here.
    samples: int | None = Field(default=None, ge=1)
    budget: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    # False: no schema inspection and no kernel copies (the notebook text only).
    use_live_state: bool = True
    # True: while a cell runs in the live kernel, wait for it (schemas and copies from the state
    # after it) instead of starting at once from the kernel's warm root, the state before it.
    fresh_state: bool = False


class NotebookCell(BaseModel):
    """An nbformat v4 cell; only what the server reads is checked."""

    model_config = ConfigDict(extra="allow")

    cell_type: Literal["code", "markdown", "raw"]
    source: str | list[str] = ""
    id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    outputs: list[dict[str, Any]] = Field(default_factory=list)
    execution_count: int | None = None


class CellError(BaseModel):
    """The error a cell raised, as nbformat's ``error`` output has it."""

    model_config = ConfigDict(extra="forbid", title="CellError")

    ename: str = Field(max_length=1_000)
    evalue: str = Field("", max_length=20_000)
    traceback: list[str] = Field(default_factory=list, max_length=200)


class CellEdit(BaseModel):
    """Fix or Improve one cell: the cell itself, typed, not a sentence about it.

    As jupyter-ai's cell-with-error selection: the server writes the model's
    instruction from these fields (``prompts/edit.py``), and the answer
    replaces this cell, shown as a diff.
    """

    model_config = ConfigDict(extra="forbid", title="CellEdit")

    kind: Literal["fix", "improve"]
    cell_id: str = Field(min_length=1, max_length=256)
    source: str = Field(max_length=1_000_000)
    # Fix: the error the cell raised (None: the cell has no error output, say so).
    error: CellError | None = None
    # Improve: the cell's text output, as the user saw it (may be cut).
    output: str = Field("", max_length=100_000)
    # The user's own words, if any ("make it faster"); never needed.
    instruction: str = Field("", max_length=MAX_INTENT_CHARS)


class TurnRequestModel(BaseModel):
    """Body of ``POST turns``."""

    model_config = ConfigDict(extra="forbid", title="TurnRequest")

    version: Literal[1]
    notebook_path: str = Field(default="", max_length=4096)
    cells: list[NotebookCell] = Field(default_factory=list, max_length=MAX_CELLS)
    active_index: int | None = Field(default=None, ge=0)
    kernel_id: str | None = Field(default=None, max_length=256)
    # What the user asked; may be empty only when ``edit`` says what to do.
    intent: str = Field("", max_length=MAX_INTENT_CHARS)
    strategy: StrategyName = "direct"
    options: TurnOptions = Field(default_factory=TurnOptions)
    # Optional notebook-level metadata: stored turns live there (context/turns.py).
    metadata: dict[str, Any] = Field(default_factory=dict)
    # One of the server's models (AgentConfig.models); None: the configured one.
    model: str | None = Field(default=None, max_length=256)
    # Fix or Improve a cell: the answer replaces that cell (shown as a diff); the
    # model is told to rewrite it in full (prompts/edit.py).
    edit: CellEdit | None = None
    # Who asked over REST: the sidebar, or an ACP agent (the turn list shows it); ``agent``: the
    # ACP client's name (Zed, ...). The magic's, MCP's and Jupyter AI's turns start in the server.
    source: Literal["sidebar", "acp"] = "sidebar"
    agent: str | None = Field(default=None, max_length=200)

    @field_validator("intent", mode="before")
    @classmethod
    def _intent_fits(cls, value: Any) -> Any:
        """Said as a sentence the sidebar can show, before pydantic's own length message."""
        if isinstance(value, str) and len(value) > MAX_INTENT_CHARS:
            raise ValueError(
                f"The question is {len(value):,} characters long; the server takes at most "
                f"{MAX_INTENT_CHARS:,}. Shorten it, or put the long text in a cell and ask about that cell."
            )
        return value

    @field_validator("intent")
    @classmethod
    def _intent_stripped(cls, value: str) -> str:
        return value.strip()

    @field_validator("notebook_path")
    @classmethod
    def _path_is_printable(cls, value: str) -> str:
        """A NUL or newline in a path is never a real notebook; refused before it reaches the disk."""
        found = _CONTROL.search(value)
        if found:
            raise ValueError(f"the notebook path contains a control character "
                             f"(U+{ord(found.group()):04X}); send the path as shown in JupyterLab")
        return value

    @model_validator(mode="after")
    def _says_what_to_do(self) -> "TurnRequestModel":
        """An intent, or a cell to fix or improve; an edit's cell becomes the active one."""
        if not self.intent and self.edit is None:
            raise ValueError("the intent is empty")
        if self.edit is not None and not self.cells:  # the cell alone is the notebook, with what it showed
            edit = self.edit
            outputs = ([{"output_type": "error", **edit.error.model_dump()}] if edit.error is not None
                       else [{"output_type": "stream", "name": "stdout", "text": edit.output}] if edit.output
                       else [])
            self.cells = [NotebookCell(cell_type="code", id=self.edit.cell_id, source=self.edit.source,
                                       outputs=outputs)]
        if self.edit is not None:
            ids = [c.id for c in self.cells]
            if self.edit.cell_id not in ids:
                raise ValueError(f"edit.cell_id {self.edit.cell_id!r} is not a cell of this notebook")
            self.active_index = ids.index(self.edit.cell_id)
        return self

    @model_validator(mode="after")
    def _active_in_range(self) -> "TurnRequestModel":
        if self.active_index is not None and self.cells and self.active_index >= len(self.cells):
            raise ValueError(
                f"active_index {self.active_index} is past the last cell ({len(self.cells) - 1})"
            )
        if self.active_index is not None and not self.cells:
            self.active_index = None
        return self

    def notebook(self) -> dict[str, Any]:
        """The request as an nbformat v4 notebook dict for ``from_notebook``."""
        return as_notebook(self.cells, self.metadata)


def as_notebook(cells: list[NotebookCell], metadata: dict[str, Any]) -> dict[str, Any]:
    """Cells from the browser as an nbformat v4 notebook dict for ``from_notebook``."""
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": dict(metadata),
        # Only what the client sent (nbformat extras included), no added defaults.
        "cells": [c.model_dump(exclude_unset=True) for c in cells],
    }


#: Where a turn was asked: the sidebar, ``%%agent``, an MCP client, an ACP agent, Jupyter AI.
TurnSource = Literal["sidebar", "magic", "mcp", "acp", "jupyter-ai"]


class TurnSummary(Reply):
    """One turn in ``GET turns``: its events stay readable at ``GET jobs/<job_id>`` while kept."""

    job_id: str
    turn_id: str
    source: TurnSource
    agent: str | None  # the MCP client's or ACP agent's name, when known
    strategy: StrategyName
    status: JobState
    intent: str
    notebook_path: str
    started: float  # seconds since the epoch
    finished: float | None
    model: str = ""  # the model the turn ran on; "": not known yet (it had not started)


class TurnList(Versioned):
    """Reply of ``GET turns?notebook_path=<path>``: this user's turns on the notebook, newest first."""

    turns: list[TurnSummary]


class TurnAccepted(Versioned):
    """Reply of ``POST turns`` (202)."""

    job_id: str
    turn_id: str  # the id the turn is stored under (also in the ``done`` event)


class JobPoll(Versioned):
    """Reply of ``GET jobs/<id>?after=<seq>``: the same events the websocket sends."""

    job_id: str
    status: JobState
    events: list[JobEvent]


class CancelReply(Versioned):
    """Reply of ``POST jobs/<id>/cancel``: the job's status afterwards."""

    job_id: str
    status: JobState


class StrategyInfo(Reply):
    """One strategy the sidebar may offer (``turn.resolve.catalog``)."""

    name: StrategyName
    label: str  # in words a data scientist uses ("Agent" for react)
    summary: str
    # What the sidebar's two knobs default to on this server (None: no such knob).
    samples: int | None = None
    budget: int | None = None


class Capabilities(Reply):
    model_config = ConfigDict(extra="allow")

    strategies: list[StrategyName]  # the ones this server can run now
    chat: bool
    live_state: bool
    events: Literal["websocket"]
    # Ghost-text completion is served (c.DataAgent.inline_completion resolved for this model).
    inline_completion: bool = False


class ModelPrice(BaseModel):
    """USD per million tokens of the configured model (``c.DataAgent.prices``)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class ServerLimits(Reply):
    """What this server accepts, for the sidebar's inputs: read from here, never hard-coded.

    Each comes from one trait (``c.DataAgent.max_samples``, ``max_budget``, ...).
    """

    model_config = ConfigDict(title="ServerLimits")

    max_samples: int  # candidates per turn (Vote's samples, Search's k)
    max_budget: int  # Search iterations, Agent steps
    max_intent_chars: int
    max_concurrent_jobs: int


class AgentConfig(Versioned):
    """Reply of ``GET config``: the public settings (never a secret) and what the server offers.

    Further ``Settings.public()`` fields come along as extra keys.
    """

    model_config = ConfigDict(extra="allow")

    backend: str
    model: str
    base_url: str | None
    api_key_set: bool
    strategies: list[StrategyInfo]  # every strategy, in the order to offer them
    capabilities: Capabilities
    limits: ServerLimits
    # The configured model's price; None: no cost is shown (a local model, or none configured).
    price: ModelPrice | None = None
    # The models a turn may name (the configured one first; c.DataAgent.models): the
    # sidebar's picker, hidden when there is only one.
    models: list[str] = Field(default_factory=list)
    # The price of each offered model that has one (c.DataAgent.prices): a turn's cost is the
    # price of the model it ran on (``DoneResult.model``).
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    # Which model answers, in words (the sidebar names it; the embedded one is said to be weak).
    model_info: ModelInfo


class _NoFieldTitles(GenerateJsonSchema):
    """Titles only on models: a title on a field would become a TypeScript type of its own."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


class DecisionRequest(BaseModel):
    """``POST decisions``: what the user did with a turn's candidate (for the value model)."""

    model_config = ConfigDict(extra="forbid", title="DecisionRequest")

    version: Literal[1] = API_VERSION
    turn_id: str = Field(min_length=1, max_length=200)
    candidate: int = Field(0, ge=0, le=1000)  # which candidate of the turn was on show
    decision: Literal["accepted", "accepted_run", "edited", "rejected"]
    # What the browser knows, recorded when the server no longer holds the turn:
    intent: str = Field("", max_length=MAX_INTENT_CHARS)
    code: str = Field("", max_length=1_000_000)  # the candidate's code as suggested
    final_code: str = Field("", max_length=1_000_000)  # the cells' code after the decision (edits)
    notebook_path: str = Field("", max_length=4096)
    # An analysis's step (1-based) this decision is about: kept "accepted", dropped "rejected",
    # changed "edited"; None: the turn's candidate as a whole.
    step: int | None = Field(None, ge=1, le=1000)


class AnalysisStepEdit(BaseModel):
    """One step of an analysis as the user left it in review (new code, or the step as it was)."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(max_length=200_000)
    cell_id: str | None = Field(None, max_length=200)  # None: a new cell; else an edit of that cell
    title: str = Field("", max_length=2_000)
    explanation: str = Field("", max_length=20_000)


class AnalysisRevision(BaseModel):
    """``POST turns/<turn_id>/analysis``: run steps ``from_step``.. again after an edit or a drop.

    ``steps`` are the new steps ``from_step``..n (a dropped step left out); they run in a
    chain of copies forked from step ``from_step - 1``'s copy.
    """

    model_config = ConfigDict(extra="forbid", title="AnalysisRevision")

    version: Literal[1] = API_VERSION
    from_step: int = Field(ge=1, le=1000)
    steps: list[AnalysisStepEdit] = Field(max_length=100)


class AnalysisRevised(Versioned):
    """Reply of ``POST turns/<turn_id>/analysis``: the steps as they ran again, numbered from ``from_step``."""

    steps: list[AnalysisStep]
    message: str


class DecisionRecorded(Versioned):
    """Reply of ``POST decisions``: whether it was stored, and with the turn's full record."""

    recorded: bool
    complete: bool = False  # the server still held the turn: prompt, steps and outputs are in
    id: int | None = None


class ValueModelReply(Versioned):
    """Reply of ``POST value-model/reload``: what guides Search turns from now on."""

    value_model: str  # a trained model's directory, or "heuristic"


class VariableInfo(Reply):
    """One DataFrame or Series in the kernel, as the composer's ``@`` completion offers it."""

    name: str
    kind: Literal["DataFrame", "Series"]
    shape: list[int]
    columns: list[str]  # the first few column names (a Series: its name)
    total_columns: int


class VariablesReply(Versioned):
    """Reply of ``GET variables?kernel_id=<id>``: the kernel's frames, newest definitions included.

    ``available`` is false, with the ``reason`` in words, when the kernel
    could not be read now (busy running a cell, no pandas frames yet is not
    a reason: that is an empty list).
    """

    kernel_id: str
    available: bool = True
    reason: str = ""
    variables: list[VariableInfo] = Field(default_factory=list)


class WarmRequest(BaseModel):
    """Body of ``POST warm``: evaluate the stable start of the next prompt now, in the background.

    ``turn``: the sidebar's next turn (sent when the composer gets focus or a cell ran):
    ``cells`` are the notebook's, ``active_index`` the active cell. ``inline``: ghost text in
    the focused cell: ``cells`` are the cells *above* it.
    """

    model_config = ConfigDict(extra="forbid", title="WarmRequest")

    version: Literal[1] = API_VERSION
    kind: Literal["turn", "inline"]
    notebook_path: str = Field(default="", max_length=4096)
    cells: list[NotebookCell] = Field(default_factory=list, max_length=MAX_CELLS)
    active_index: int | None = Field(default=None, ge=0)
    kernel_id: str | None = Field(default=None, max_length=256)
    # Stored turns (context/turns.py), as in ``POST turns``: their problems are in the prompt.
    metadata: dict[str, Any] = Field(default_factory=dict)

    def notebook(self) -> dict[str, Any]:
        return as_notebook(self.cells, self.metadata)


class WarmReply(Versioned):
    """What warming did: ``warmed`` false with the ``reason`` in words when it did nothing
    (an endpoint model, the model busy with a turn); else the prompt tokens it covered and how
    many of them were in the model's cache already."""

    warmed: bool
    reason: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0


class InlineCompletionRequest(BaseModel):
    """Body of ``POST complete``: ghost text for the cursor in a notebook cell.

    ``cells`` are the cells *above* the cursor's cell (sources are enough);
    ``prefix`` / ``suffix`` are the cursor's cell before / after the cursor.
    """

    model_config = ConfigDict(extra="forbid", title="InlineCompletionRequest")

    version: Literal[1] = API_VERSION
    notebook_path: str = Field(default="", max_length=4096)
    cells: list[NotebookCell] = Field(default_factory=list, max_length=MAX_CELLS)
    prefix: str = Field(max_length=200_000)
    suffix: str = Field(default="", max_length=200_000)
    kernel_id: str | None = Field(default=None, max_length=256)


class InlineCompletionChunk(Reply):
    """One line of the ``POST complete`` reply (newline-delimited JSON, streamed).

    Lines with ``delta`` extend the ghost text; the last line has ``done``
    (with the whole ``text``, what it cost and which frames the prompt
    described) or ``error`` (in words, shown to nobody but logged by the UI).
    """

    delta: str = ""
    done: bool = False
    text: str = ""
    error: str = ""
    frames: list[str] = Field(default_factory=list)  # DataFrames whose schema was in the prompt
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token_ms: float | None = None  # request received -> first shown character
    total_ms: float = 0.0


#: The wire's root types, by the name the TypeScript side sees; requests as
#: the server validates them, replies and events as it sends them.
WIRE_TYPES: dict[str, tuple[Any, Literal["validation", "serialization"]]] = {
    "TurnRequest": (TurnRequestModel, "validation"),
    "TurnAccepted": (TurnAccepted, "serialization"),
    "TurnList": (TurnList, "serialization"),
    "JobEvent": (JobEvent, "serialization"),
    "JobPoll": (JobPoll, "serialization"),
    "CancelReply": (CancelReply, "serialization"),
    "AnalysisRevision": (AnalysisRevision, "validation"),
    "AnalysisRevised": (AnalysisRevised, "serialization"),
    "AgentConfig": (AgentConfig, "serialization"),
    "DecisionRequest": (DecisionRequest, "validation"),
    "DecisionRecorded": (DecisionRecorded, "serialization"),
    "ValueModelReply": (ValueModelReply, "serialization"),
    "VariablesReply": (VariablesReply, "serialization"),
    "InlineCompletionRequest": (InlineCompletionRequest, "validation"),
    "InlineCompletionChunk": (InlineCompletionChunk, "serialization"),
    "WarmRequest": (WarmRequest, "validation"),
    "WarmReply": (WarmReply, "serialization"),
    "ProposalRequest": (ProposalRequest, "validation"),
    "ProposalDecisionRequest": (ProposalDecisionRequest, "validation"),
    "ProposalReply": (ProposalReply, "serialization"),
    "ProposalsReply": (ProposalsReply, "serialization"),
    "ConnectRequest": (ConnectRequest, "validation"),
    "ModelServers": (ModelServers, "serialization"),
    "ConnectCheck": (ConnectCheck, "serialization"),
    "Connected": (Connected, "serialization"),
}


def wire_schema() -> dict:
    """One JSON Schema (draft 2020-12) for the whole API: ``$defs`` holds every type."""
    inputs = [(name, mode, TypeAdapter(tp)) for name, (tp, mode) in WIRE_TYPES.items()]
    schemas, top = TypeAdapter.json_schemas(inputs, ref_template="#/$defs/{model}",
                                            schema_generator=_NoFieldTitles)
    defs: dict[str, Any] = dict(top.get("$defs", {}))
    properties = {}
    for name, mode, _ in inputs:
        schema = schemas[(name, mode)]
        if "$ref" not in schema:  # a union: named here so it gets a type of its own
            defs[name] = {"title": name, **schema}
            schema = {"$ref": f"#/$defs/{name}"}
        properties[name] = schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Wire",
        "description": f"The jupyter-data-agent server API, version {API_VERSION} "
                       f"(generated by jupyter_data_agent/server/models.py; do not edit).",
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
        "$defs": dict(sorted(defs.items())),
    }


def wire_schema_text() -> str:
    return json.dumps(wire_schema(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The JSON Schema of the server API.")
    parser.add_argument("--schema", action="store_true", required=True, help="print the JSON Schema")
    parser.add_argument("--output", "-o", type=argparse.FileType("w", encoding="utf-8"),
                        default=sys.stdout, help="write it to this file instead")
    out = parser.parse_args(argv).output
    out.write(wire_schema_text())
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
