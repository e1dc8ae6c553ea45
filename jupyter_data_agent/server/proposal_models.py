"""Wire models of the proposals outside agents (MCP, ACP) make: requests and replies.

The proposals' part of the server API (``server/proposals.py`` keeps them); in
the one wire schema with the rest (``models.wire_schema``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..turn.events import API_VERSION, ExecResult
from .wire_base import Reply

__all__ = ["MAX_EXPLANATION_CHARS", "MAX_PROPOSAL_CODE_CHARS", "AgentActivityModel", "ProposalDecisionRequest",
           "ProposalModel", "ProposalReply", "ProposalRequest", "ProposalsReply"]

MAX_PROPOSAL_CODE_CHARS = 64 * 1024
MAX_EXPLANATION_CHARS = 4 * 1024


class ProposalRequest(BaseModel):
    """Body of ``POST proposals``: a cell to insert, or an edit of one cell, from an outside agent.

    The server runs ``code`` in a copy of the notebook's live kernel first (in
    the copy of ``try_handle`` when given) and stores what it gave.
    """

    model_config = ConfigDict(extra="forbid", title="ProposalRequest")

    version: Literal[1] = API_VERSION
    notebook_path: str = Field(min_length=1, max_length=4096)
    kind: Literal["cell", "edit"]
    code: str = Field(max_length=MAX_PROPOSAL_CODE_CHARS)
    explanation: str = Field("", max_length=MAX_EXPLANATION_CHARS)
    agent: str = Field(min_length=1, max_length=80)
    after_cell_id: str | None = Field(None, max_length=256)  # kind cell: below this cell; null: at the end
    cell_id: str | None = Field(None, max_length=256)  # kind edit: the cell it replaces
    try_handle: str | None = Field(None, max_length=256)

    @model_validator(mode="after")
    def _edit_names_its_cell(self) -> "ProposalRequest":
        if self.kind == "edit" and not self.cell_id:
            raise ValueError("An edit proposal needs the cell_id of the cell it replaces.")
        return self


class ProposalDecisionRequest(BaseModel):
    """Body of ``POST proposals/<id>/decision``: the browser's Accept, Reject, or edit after an Accept."""

    model_config = ConfigDict(extra="forbid", title="ProposalDecisionRequest")

    version: Literal[1] = API_VERSION
    decision: Literal["accepted", "rejected", "edited"]
    final_source: str = Field("", max_length=1_000_000)


class ProposalModel(Reply):
    """One proposal (``server.proposals.Proposal.to_json``); ``result``: its run in a copy."""

    model_config = ConfigDict(title="Proposal", json_schema_serialization_defaults_required=True)

    id: str
    notebook_path: str
    kind: Literal["cell", "edit"]
    code: str
    explanation: str
    agent: str
    after_cell_id: str | None
    cell_id: str | None
    status: Literal["pending", "accepted", "rejected", "edited"]
    final_source: str | None
    result: ExecResult | None
    note: str
    created: float
    decided: float | None


class AgentActivityModel(Reply):
    """What one outside agent did on a notebook: tries in copies and proposals."""

    model_config = ConfigDict(title="AgentActivity", json_schema_serialization_defaults_required=True)

    agent: str
    tries: int
    proposals: int


class ProposalReply(BaseModel):
    """Reply of ``POST proposals`` (201), ``GET proposals/<id>`` and ``POST proposals/<id>/decision``."""

    model_config = ConfigDict(title="ProposalReply", json_schema_serialization_defaults_required=True)

    proposal: ProposalModel


class ProposalsReply(BaseModel):
    """Reply of ``GET proposals?notebook_path=<path>``: this user's proposals, oldest first."""

    model_config = ConfigDict(title="ProposalsReply", json_schema_serialization_defaults_required=True)

    proposals: list[ProposalModel]
    activity: list[AgentActivityModel]
