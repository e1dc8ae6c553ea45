"""Typed model of a notebook as the agent sees it.

Built either from nbformat JSON (server, front end) or from a kernel's
``In``/``Out`` history (the magic); everything downstream (prompts, search)
reads only these dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

CellType = Literal["code", "markdown", "raw"]
TurnStatus = Literal["pending", "accepted", "rejected", "edited"]

METADATA_KEY = "jupyter_data_agent"


@dataclass
class Output:
    """One cell output reduced to text for prompting.

    ``output_type`` follows nbformat: stream, execute_result, display_data, error.
    """

    output_type: str
    text: str = ""
    ename: str | None = None
    evalue: str | None = None
    truncated: bool = False
    # Errors only: the traceback's last lines, reduced (where it failed).
    traceback: str = ""
    # A PNG/JPEG the output showed (mime, base64): what a vision model is shown.
    image: tuple[str, str] | None = None


@dataclass
class Cell:
    cell_type: CellType
    source: str
    execution_count: int | None = None
    outputs: list[Output] = field(default_factory=list)
    cell_id: str | None = None
    # The agent turn this cell is the solution of, if any (from cell metadata).
    turn_id: str | None = None


@dataclass(frozen=True)
class ActiveCell:
    """The cell a Fix or Explain turn is about, split the way a prompt needs it:
    its code, what it printed, and the error it raised (jupyter-ai's
    cell-with-error selection, typed)."""

    index: int
    cell: Cell

    @property
    def source(self) -> str:
        return self.cell.source

    @property
    def outputs(self) -> list[Output]:
        return [o for o in self.cell.outputs if o.output_type != "error"]

    @property
    def images(self) -> list[tuple[str, str]]:
        """The cell's PNG/JPEG outputs as (mime, base64), oldest first."""
        return [o.image for o in self.cell.outputs if o.image is not None]

    @property
    def error(self) -> Output | None:
        return next((o for o in reversed(self.cell.outputs) if o.output_type == "error"), None)


@dataclass
class Turn:
    """One intent the user asked and what became of it."""

    intent: str
    code: str = ""
    status: TurnStatus = "pending"
    turn_id: str = ""
    # Code cells (ids) that hold the solution in the notebook, when known.
    cell_ids: list[str] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    created: float | None = None
    # Explain turns: the prose answer shown in the sidebar.
    answer: str | None = None
    # The verdict on the kernel copies that ran the candidates (the sidebar's badge).
    confinement: dict[str, Any] | None = None
    # Keys other writers (the front end, a newer version) store on a turn:
    # kept verbatim so rewriting the turns never loses them.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class NotebookContext:
    cells: list[Cell] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    path: str | None = None
    # Index of the active cell; context is the cells up to and including it.
    active_index: int | None = None

    def active_cell(self) -> ActiveCell | None:
        """The cell whose outputs and error the prompt must show: the active
        cell; without one (the magic, which has no cursor) the last code cell
        that raised, since that is what "fix it" refers to; else None."""
        if self.active_index is not None:
            if 0 <= self.active_index < len(self.cells):
                return ActiveCell(self.active_index, self.cells[self.active_index])
            return None
        for i, cell in reversed(list(enumerate(self.cells))):
            if cell.cell_type == "code" and any(o.output_type == "error" for o in cell.outputs):
                return ActiveCell(i, cell)
        return None
