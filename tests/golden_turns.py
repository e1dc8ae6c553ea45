"""The golden notebook: turns exactly as the front end stores them.

``tests/data/turns.golden.ipynb`` is read by the Python tests here and by
``src/__tests__/golden.spec.ts``, which checks that the front end's reader
parses it and its writer writes the same shape. The Python side has no
writer of turns: tests that need stored turns copy them from this file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from jupyter_data_agent.context.model import METADATA_KEY

GOLDEN = Path(__file__).parent / "data" / "turns.golden.ipynb"

# The golden turns' ids, by what became of them.
ACCEPTED = "5c0f3a9b2e71"  # per-step cells (markdown + code), confinement, previews
REJECTED = "a83d61f0c24e"  # its cell removed; cell_ids still name it
EDITED = "0d9e4b7a13c5"  # accepted, then changed by the user: code is the user's
EDIT = "e61c08f4a9d2"  # "Fix the error in this cell", accepted: edits_cell
EXPLAIN_FAILED = "3fa7c2d90b18"  # an Explain turn that failed: failure, no candidates
PENDING = "b4e91d7c0a36"  # its suggestion cell is in the notebook, not decided yet


def golden_notebook() -> dict[str, Any]:
    """A fresh copy of the golden notebook, as a plain nbformat v4 dict."""
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def golden_turn(which: str, /, **changes: Any) -> dict[str, Any]:
    """A copy of the golden turn ``which`` (its id), ``changes`` replacing its fields."""
    turns = golden_notebook()["metadata"][METADATA_KEY]["turns"]
    turn = next(t for t in turns if t["turn_id"] == which)
    return {**copy.deepcopy(turn), **changes}


def pointer(turn: dict[str, Any]) -> dict[str, Any]:
    """The cell metadata a solution cell of ``turn`` carries (src/metadata.ts cellMetadataFor)."""
    return {METADATA_KEY: {"turn_id": turn["turn_id"], "intent": turn["intent"], "status": turn["status"]}}
