"""Requests that edit the cell they are about: Fix and Improve.

They arrive typed (the server's ``CellEdit``: the cell's id, source, and its
error or output), as jupyter-ai's cell-with-error selection does, and the
instruction the model reads is written here from those fields. The front end
shows such a turn's candidate as a diff of that cell and replaces the cell
when accepted, so the model must write the whole cell again, fixed, and not
a follow-up cell that assumes the broken one ran. The ARCADE linearization
ends with that cell (with its error), so the note names "the last cell above".
"""

from __future__ import annotations

from typing import Literal

EditKind = Literal["fix", "improve"]

EDIT_CELL_NOTE = (
    "Rewrite the last cell above in full: the code you write replaces that cell and runs "
    "instead of it, so keep everything it does that still works."
)

#: How an edit turn is named where a question would be (the sidebar, stored turns).
QUESTIONS: dict[str, str] = {"fix": "Fix the error in this cell", "improve": "Improve this cell"}


def edit_question(kind: EditKind, instruction: str = "") -> str:
    """The turn's question in the user's terms: their own words, else what the button says."""
    return instruction.strip() or QUESTIONS[kind]


def edit_intent(kind: EditKind, *, instruction: str = "", ename: str = "", evalue: str = "") -> str:
    """The intent as the model reads it: the user's words (else what the button says), the
    error named for a fix, and the rewrite note."""
    lines = [instruction.strip() or QUESTIONS[kind] + "."]
    if kind == "fix":
        lines.append(f"The cell raised {ename}: {evalue}".rstrip(": ") + "." if ename
                     else "The cell shows no error output; fix what is wrong with it.")
    lines.append(EDIT_CELL_NOTE)
    return "\n".join(lines)
