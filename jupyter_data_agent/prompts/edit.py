"""Requests that edit the cell they are about ("fix this cell", "improve it").

The front end shows such a turn's candidate as a diff of the active cell and
replaces that cell when accepted, so the model must write the whole cell
again, fixed, and not a follow-up cell that assumes the broken one ran. The
ARCADE linearization ends with the active cell (with its error), so the note
names "the last cell above".
"""

from __future__ import annotations

EDIT_CELL_NOTE = (
    "Rewrite the last cell above in full: the code you write replaces that cell and runs "
    "instead of it, so keep everything it does that still works."
)


def edit_cell_intent(intent: str) -> str:
    """The intent as the model sees it when the answer replaces the active cell."""
    intent = intent.rstrip()
    return intent if EDIT_CELL_NOTE in intent else f"{intent}\n{EDIT_CELL_NOTE}"
