"""Wire models of the server API, version 1 (mirrored by ``src/models.ts``).

One module so the TypeScript side has a single place to follow. Requests are
validated strictly (unknown top-level and option fields are refused, so a
typo in the front end fails loudly instead of being ignored); cells are
nbformat v4 JSON and keep whatever extra fields nbformat allows.
Replies are plain dicts built from these models with ``model_dump()``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

API_VERSION = 1

StrategyName = Literal["direct", "vote", "react", "mcts"]
EventType = Literal["progress", "candidate", "log", "done", "error"]
JobState = Literal["running", "done", "error", "cancelled"]

MAX_INTENT_CHARS = 20_000
MAX_CELLS = 5_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class TurnOptions(BaseModel):
    """Per-turn knobs; ``None`` takes the server's per-strategy default."""

    model_config = ConfigDict(extra="forbid")

    samples: int | None = Field(default=None, ge=1, le=64)
    budget: int | None = Field(default=None, ge=1, le=1000)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    # False: no schema inspection and no kernel copies (the notebook text only).
    use_live_state: bool = True


class NotebookCell(BaseModel):
    """An nbformat v4 cell; only what the server reads is checked."""

    model_config = ConfigDict(extra="allow")

    cell_type: Literal["code", "markdown", "raw"]
    source: str | list[str] = ""
    id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    outputs: list[dict[str, Any]] = Field(default_factory=list)
    execution_count: int | None = None


class TurnRequestModel(BaseModel):
    """Body of ``POST turns``."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    notebook_path: str = Field(default="", max_length=4096)
    cells: list[NotebookCell] = Field(default_factory=list, max_length=MAX_CELLS)
    active_index: int | None = Field(default=None, ge=0)
    kernel_id: str | None = Field(default=None, max_length=256)
    intent: str = Field(min_length=1, max_length=MAX_INTENT_CHARS)
    strategy: StrategyName = "direct"
    options: TurnOptions = Field(default_factory=TurnOptions)
    # Optional notebook-level metadata: stored turns live there (context/turns.py).
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("intent")
    @classmethod
    def _intent_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the intent is empty")
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
        return {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": dict(self.metadata),
            # Only what the client sent (nbformat extras included), no added defaults.
            "cells": [c.model_dump(exclude_unset=True) for c in self.cells],
        }


class TurnAccepted(BaseModel):
    """Reply of ``POST turns`` (202)."""

    version: int = API_VERSION
    job_id: str
    turn_id: str


class JobEvent(BaseModel):
    """One message of a job's event stream (websocket frame or poll item).

    ``candidate`` data: ``{index, candidate: Candidate.to_json()}``;
    ``done`` data: ``{result: SearchResult.to_json(), turn_id, confinement}``;
    ``progress`` data may hold ``state`` (``queued``, ``waiting_for_kernel``,
    ``inspecting_kernel``, ``kernel_copy_ready``, ``no_kernel``...); once per
    turn, before the search, ``state: "confinement"`` with ``confinement``:
    ``kernel.policy.Confinement.to_json()`` (``{policy, status, execute,
    message, layers: [{name, on, detail}], missing}``), the same dict as in
    ``done``;
    ``error`` data: ``{state: "error" | "cancelled"}``.
    """

    version: int = API_VERSION
    job_id: str
    seq: int
    type: EventType
    message: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class JobPoll(BaseModel):
    """Reply of ``GET jobs/<id>?after=<seq>``."""

    version: int = API_VERSION
    job_id: str
    status: JobState
    events: list[JobEvent]


class CancelReply(BaseModel):
    """Reply of ``POST jobs/<id>/cancel``: the job's status afterwards."""

    version: int = API_VERSION
    job_id: str
    status: JobState


def validation_message(error: ValidationError) -> str:
    """Short, input-free description (inputs may be large or sensitive)."""
    parts = []
    for item in error.errors(include_url=False, include_input=False)[:8]:
        loc = ".".join(str(p) for p in item.get("loc", ())) or "body"
        parts.append(f"{loc}: {item.get('msg', 'invalid')}")
    more = len(error.errors()) - len(parts)
    if more > 0:
        parts.append(f"... and {more} more")
    return "Invalid turn request: " + "; ".join(parts)
