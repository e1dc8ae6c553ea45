"""Edit turns ("fix this cell"): the model is told to rewrite the active cell.

The sidebar shows such a turn's candidate as a diff and replaces the cell
with it, so the prompt must ask for the whole cell, not a follow-up cell.
A real Jupyter server and the real OpenAI SDK against the local
OpenAI-protocol server; helpers come from ``test_server.py``.
"""

from __future__ import annotations

import pytest

from jupyter_data_agent.context.model import METADATA_KEY
from jupyter_data_agent.context.notebook import from_notebook
from jupyter_data_agent.prompts.arcade import linearize
from jupyter_data_agent.prompts.edit import EDIT_CELL_NOTE, edit_intent, edit_question
from jupyter_data_agent.server.models import TurnRequestModel
from tests.conftest import agent_server_config
from tests.test_server import (
    notebook_cells,
    on_server_loop,
    post_turn,
    replies,
    stream_events,
    turn_body,
)

BROKEN = {
    "cell_type": "code", "id": "c2", "source": "total = 1\ndf['colum'].sum()", "metadata": {},
    "execution_count": 2,
    "outputs": [{"output_type": "error", "ename": "KeyError", "evalue": "'colum'",
                 "traceback": ["\x1b[31mKeyError\x1b[0m: 'colum'"]}],
}


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    model_server.clear()
    model_server.reply = replies
    return agent_server_config(model_server, monkeypatch)


FIX = {"kind": "fix", "cell_id": "c2", "source": BROKEN["source"],
       "error": {"ename": "KeyError", "evalue": "'colum'", "traceback": BROKEN["outputs"][0]["traceback"]}}


def test_the_model_reads_an_instruction_written_from_the_typed_cell():
    text = edit_intent("fix", ename="KeyError", evalue="'colum'")
    assert text.startswith("Fix the error in this cell.") and "The cell raised KeyError: 'colum'." in text
    assert text.endswith(EDIT_CELL_NOTE)
    assert "no error output" in edit_intent("fix")
    assert edit_intent("improve").startswith("Improve this cell.")
    # The user's own words lead; a fix still names the error.
    improve = edit_intent("improve", instruction=" make it faster ")
    assert improve.startswith("make it faster\n") and "Improve this cell" not in improve
    assert "The cell raised KeyError" in edit_intent("fix", instruction="why?", ename="KeyError", evalue="'x'")
    assert edit_question("improve") == "Improve this cell" and edit_question("fix", "why?") == "why?"


def test_fix_and_improve_are_typed_not_free_text():
    request = TurnRequestModel.model_validate(turn_body(cells=[*notebook_cells(), BROKEN], active_index=0,
                                                        intent="", edit=FIX))
    assert request.edit is not None and request.edit.kind == "fix" and request.edit.error.ename == "KeyError"
    assert request.active_index == 2  # the edited cell is the one the turn is about
    with pytest.raises(ValueError, match="edit_cell"):  # the old boolean is gone
        TurnRequestModel.model_validate(turn_body(edit_cell=True))
    with pytest.raises(ValueError, match="kind"):
        TurnRequestModel.model_validate(turn_body(edit={**FIX, "kind": "rewrite everything"}))
    with pytest.raises(ValueError, match="not a cell of this notebook"):
        TurnRequestModel.model_validate(turn_body(edit={**FIX, "cell_id": "nope"}))
    with pytest.raises(ValueError, match="intent is empty"):
        TurnRequestModel.model_validate(turn_body(intent=" "))
    alone = TurnRequestModel.model_validate(turn_body(cells=[], active_index=None, intent="", edit=FIX))
    assert alone.active_index == 0 and alone.cells[0].source == BROKEN["source"]
    assert alone.cells[0].outputs[0]["ename"] == "KeyError"
    # An Improve's typed output is what the lone cell shows (the prompt reads cell outputs).
    improve = {"kind": "improve", "cell_id": "c9", "source": "df.describe()", "output": "count 3.0"}
    shown = TurnRequestModel.model_validate(turn_body(cells=[], active_index=None, intent="", edit=improve))
    assert shown.cells[0].outputs == [{"output_type": "stream", "name": "stdout", "text": "count 3.0"}]


@pytest.mark.parametrize("edit", [True, False])
@on_server_loop
async def test_an_edit_turn_asks_for_the_whole_cell(jp_fetch, jp_ws_fetch, model_server, edit):
    ask = {"intent": "", "edit": FIX} if edit else {"intent": "What went wrong here?"}
    accepted = await post_turn(jp_fetch, cells=[*notebook_cells(), BROKEN], active_index=2,
                               options={"use_live_state": False}, **ask)
    events = await stream_events(jp_ws_fetch, accepted["job_id"])
    assert events[-1]["type"] == "done", events[-1]
    prompt = model_server.generation_requests[-1].prompt
    # The broken cell, its error; and for an edit turn the typed instruction and the note.
    assert "total = 1" in prompt and "KeyError" in prompt
    assert ("Fix the error in this cell" in prompt) is edit
    assert ("The cell raised KeyError: 'colum'" in prompt) is edit
    assert (EDIT_CELL_NOTE in prompt) is edit


def _edit_notebook(status: str, source: str) -> dict:
    fixed = "df['col'].sum()"
    cell = {**BROKEN, "source": source, "outputs": [],
            "metadata": {METADATA_KEY: {"turn_id": "t1", "intent": "Fix the error in this cell",
                                        "status": status}}}
    return {"cells": [*notebook_cells(), cell, {"cell_type": "code", "id": "c3", "source": "df.head()",
                                                "metadata": {}, "outputs": []}],
            "metadata": {METADATA_KEY: {"version": 1, "turns": [{
                "turn_id": "t1", "intent": "Fix the error in this cell", "code": fixed,
                "status": status, "cell_ids": ["c2"], "candidates": [fixed], "edits_cell": "c2"}]}}}


@pytest.mark.parametrize("status", ["pending", "rejected"])
def test_the_cell_under_an_undecided_edit_is_the_users_own(status):
    """While the fix is only a diff, the cell holds the user's code: the next
    prompt shows it as such, not as the answer to "Fix the error"."""
    context = from_notebook(_edit_notebook(status, BROKEN["source"]), active_index=3)
    text = "".join(linearize(context))
    assert "total = 1" in text
    assert "# Problem: Fix the error in this cell" not in text


def test_an_accepted_edit_is_that_turns_answer():
    context = from_notebook(_edit_notebook("accepted", "df['col'].sum()"), active_index=3)
    text = "".join(linearize(context))
    assert "# Problem: Fix the error in this cell" in text
    assert text.index("# Problem: Fix the error") < text.index("df['col'].sum()")
