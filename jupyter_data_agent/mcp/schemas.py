"""The tools' answers as typed models: each tool's ``outputSchema``, and what its structured content is
checked against before it leaves.

A client that reads ``outputSchema`` (and the model behind it) knows the
answer's fields without parsing prose; the SDK validates every structured
answer against the model the tool's return annotation names
(``Annotated[CallToolResult, Model]``), so the schema cannot drift from what
is sent. Fields that carry data from elsewhere (a cell's outputs, a value's
canonical form) are typed as far as this layer knows them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class _Out(BaseModel):
    """Extra fields are allowed (JSON Schema's default): a newer server may say more."""


# -- notebooks -------------------------------------------------------------------------


class NotebookInfo(_Out):
    path: str
    kernel_id: str | None
    kernel_name: str | None
    execution_state: str | None


class NotebookList(_Out):
    notebooks: list[NotebookInfo]
    total: int = Field(description="Open notebooks in all (at most 500 are listed).")


class CellOutput(_Out):
    type: str
    text: str | None = None
    ename: str | None = None
    evalue: str | None = None
    traceback: Any = None


class Cell(_Out):
    index: int
    id: str | None
    type: str | None
    source: str
    execution_count: int | None = None
    outputs: list[CellOutput] | None = None


class NotebookPage(_Out):
    path: str
    total_cells: int
    start: int | None = Field(None, description="The first cell of this page (cells form).")
    cells: list[Cell] | None = Field(None, description="This page's cells (absent in the arcade form).")
    next_start: int | None = Field(None, description="`start` for the next page; null on the last one.")
    chars: int = Field(description="Characters of this answer's cells or text.")
    note: str = ""
    arcade: str | None = Field(None, description="The notebook linearized as the Data Agent's prompts "
                                                 "show it (arcade=true).")


# -- variables -------------------------------------------------------------------------


class Variable(_Out):
    name: str
    kind: Literal["DataFrame", "Series", "ndarray", "scalar", "container", "model"]
    type: str | None = Field(None, description="The Python type (not for DataFrame and Series).")
    shape: list[int] | None = None
    columns: list[str] | None = Field(None, description="First column names (DataFrame, Series).")
    total_columns: int | None = None
    dtype: str | None = Field(None, description="An array's dtype.")
    value: Any = Field(None, description="A scalar's value (a str cut to 200 characters).")
    length: int | None = Field(None, description="A container's (or a str's) length.")
    truncated: bool | None = None
    fitted: bool | None = Field(None, description="A model with learned attributes (sklearn's `coef_`...).")


class VariableList(_Out):
    kernel_id: str
    available: bool
    reason: str
    variables: list[Variable]


class ColumnStats(_Out):
    name: str
    dtype: str
    example: str | None
    more_examples: list[str] = Field(default_factory=list)
    nulls: int | None = None
    nunique: int | None = Field(None, description="Distinct non-null values (of `sampled_rows`, when set).")
    min: Any = None
    max: Any = None
    mean: float | None = None
    std: float | None = None
    top: str | None = Field(None, description="The most frequent value (non-number columns).")
    top_count: int | None = None


class FrameDescription(_Out):
    name: str
    kind: Literal["DataFrame", "Series"]
    shape: list[int]
    columns: list[ColumnStats]
    total_columns: int
    truncated: bool
    sampled_rows: int | None = Field(None, description="Rows `nunique` and `top` were counted on (a head "
                                                      "sample of a large frame); null: all.")
    note: str = ""


# -- runs ------------------------------------------------------------------------------


class RunError(_Out):
    ename: str
    evalue: str
    traceback: str
    limit: str | None = None


class Value(_Out):
    type: str
    shape: list[int] | None
    preview: Any = Field(description="The value as JSON (bounded); a cut string when too big to send whole.")
    preview_truncated: bool
    preview_note: str = ""
    answer_form: dict[str, Any] | None = Field(description="Its canonical form (what compare_answers "
                                                            "compares), without digests.")
    answer_form_note: str = ""


class Run(_Out):
    status: str
    stdout: str
    stderr: str
    error: RunError | None
    value: Value | None
    displays: list[str]
    duration_s: float
    truncated: bool


class NamedVariable(_Out):
    name: str
    type: str | None = None
    shape: list[int] | None = None
    before: list[int] | None = Field(None, description="A changed variable's shape before the code.")


class NamespaceChange(_Out):
    new: list[NamedVariable]
    changed: list[NamedVariable]
    deleted: list[NamedVariable]
    truncated: bool = False
    note: str = ""
    files: list[str] | None = Field(None, description="Files the code wrote in the copy's scratch folder "
                                    "(null: not known).")


class Layer(_Out):
    name: str
    on: bool
    detail: str = ""


class ConfinementInfo(_Out):
    status: str
    message: str | None = Field(None, description="Sent on a session's first try, or when asked.")
    layers: list[Layer] | None = Field(None, description="Sent on a session's first try, or when asked.")


class StateAge(_Out):
    as_of: str = Field(description="When the live kernel had this state (ISO 8601, the server's clock).")
    running: bool = Field(description="A cell runs in the live kernel now.")
    executions_since: int = Field(description="Cells started in the live kernel since, the running one included.")
    note: str


class TryOutcome(Run):
    handle: str | None
    from_: str | None = Field(alias="from")
    notebook: str
    namespace: NamespaceChange
    confinement: ConfinementInfo
    state: StateAge | None = Field(None, description="Sent when the copy started from a state older than the "
                                   "live kernel's (a cell was running): its age.")

    model_config = {"populate_by_name": True}


class Comparison(_Out):
    classes: list[list[str]]
    no_answer: list[str]
    same: bool


# -- proposals -------------------------------------------------------------------------


class ProposalMade(_Out):
    proposal_id: str
    status: str
    note: str
    ran: bool
    result_status: str | None
    output: Run | None


class ProposalState(_Out):
    id: str
    status: str
    final_source: str | None
    decided: float | None
    notebook: str


# -- turns -----------------------------------------------------------------------------


class Step(_Out):
    number: int
    title: str
    explanation: str
    code: str
    edits_cell: str | None
    status: str | None
    output: str
    error: str | None


class Candidate(_Out):
    index: int
    code: str
    explanation: str
    support: int | None = Field(description="Candidates whose answer equals this one's (itself included).")
    status: str | None
    output: str
    error: str | None
    value: Any = None
    steps: list[Step] | None = None


class Agreement(_Out):
    agree: int = Field(description="Candidates that gave the chosen answer.")
    of: int = Field(description="Candidates whose answer could vote (ran and answered).")
    classes: list[int] = Field(description="Sizes of the answer classes, largest first.")


class TurnAnswer(_Out):
    turn_id: str | None
    strategy: str | None
    answer: str | None = Field(description="The chosen answer: the turn's words (react, search), else the "
                                           "chosen candidate's last printed line or value.")
    agreement: Agreement | None
    chosen: Candidate | None
    candidates: list[Candidate]
    vote_classes: list[int]
    note: str
