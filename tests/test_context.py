"""Notebook context: nbformat and kernel-history sources, output reduction, turns."""

from __future__ import annotations

import json

import nbformat
from IPython.core.inputtransformer2 import TransformerManager
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from jupyter_data_agent.context.model import METADATA_KEY, Turn
from jupyter_data_agent.context.notebook import (
    from_history,
    from_notebook,
    reduce_output,
    reduce_outputs,
)
from jupyter_data_agent.context.turns import (
    cell_turn_info,
    get_turn,
    read_turns,
    turn_from_dict,
)
from jupyter_data_agent.prompts.arcade import linearize
from tests.golden_turns import (
    ACCEPTED,
    EDIT,
    EDITED,
    EXPLAIN_FAILED,
    GOLDEN,
    PENDING,
    REJECTED,
    golden_notebook,
    golden_turn,
    pointer,
)


def _nb():
    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("# Sales\nQuarterly numbers."),
        new_code_cell(
            "import pandas as pd\ndf = pd.read_csv('s.csv')",
            execution_count=1,
            outputs=[new_output("stream", name="stderr", text="\x1b[31mWarning\x1b[0m: old csv\n")],
        ),
        new_code_cell(
            "df.head()",
            execution_count=2,
            outputs=[
                new_output(
                    "execute_result",
                    data={"text/plain": "   a  b\n0  1  2", "text/html": "<table>...</table>"},
                    execution_count=2,
                )
            ],
        ),
        new_code_cell(
            "df.plot()",
            execution_count=3,
            outputs=[
                new_output(
                    "display_data",
                    data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 640x480 with 1 Axes>"},
                )
            ],
        ),
        new_code_cell(
            "df['zz']",
            execution_count=4,
            outputs=[
                new_output(
                    "error",
                    ename="KeyError",
                    evalue="'zz'",
                    traceback=["\x1b[0;31mKeyError\x1b[0m Traceback ...", "..."],
                )
            ],
        ),
    ]
    return nb


def test_from_notebook_cells_and_outputs():
    ctx = from_notebook(_nb(), path="s.ipynb")
    assert ctx.path == "s.ipynb"
    assert [c.cell_type for c in ctx.cells] == ["markdown", "code", "code", "code", "code"]
    md, load, head, plot, err = ctx.cells
    assert md.source == "# Sales\nQuarterly numbers." and md.outputs == []
    assert load.execution_count == 1
    assert load.outputs[0].output_type == "stream"
    assert load.outputs[0].text == "Warning: old csv\n"  # no ANSI
    assert head.outputs[0].text == "   a  b\n0  1  2"  # text/plain wins for results
    assert plot.outputs[0].text == "[plot: image output]"
    assert err.outputs[0].output_type == "error"
    assert err.outputs[0].text == "KeyError: 'zz'"
    assert (err.outputs[0].ename, err.outputs[0].evalue) == ("KeyError", "'zz'")
    assert all(c.cell_id for c in ctx.cells)


def test_from_notebook_accepts_json_string_and_dict_with_line_lists():
    nb = _nb()
    text = nbformat.writes(nb)
    assert [c.source for c in from_notebook(text).cells] == [c.source for c in nb.cells]
    raw = json.loads(text)
    raw["cells"][0]["source"] = ["# Sales\n", "Quarterly numbers."]
    assert from_notebook(raw).cells[0].source == "# Sales\nQuarterly numbers."


def test_html_only_and_ansi_error():
    out = reduce_output(new_output("display_data", data={"text/html": "<div><TABLE></TABLE></div>"}))
    assert out.text == "<html table>"
    err = reduce_output(
        new_output("error", ename="\x1b[31mValueError\x1b[0m", evalue="bad \x1b[1mvalue\x1b[0m", traceback=[])
    )
    assert err.text == "ValueError: bad value"


IPYTHON_TRACEBACK = [
    "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
    "\x1b[0;31mKeyError\x1b[0m                                  Traceback (most recent call last)",
    "Cell \x1b[0;32mIn[4], line 1\x1b[0m\n\x1b[0;32m----> 1\x1b[0m df[\x1b[38;5;124m'zz'\x1b[39m]\n",
    "File ~/pandas/core/indexes/base.py:3654, in Index.get_loc(self, key)\n"
    "   3653 except KeyError as err:\n"
    "-> 3654     raise KeyError(key) from err\n"
    "   3655 except TypeError:\n",
    "\x1b[0;31mKeyError\x1b[0m: 'zz'",
]


def test_error_keeps_the_tracebacks_last_lines():
    err = reduce_output(new_output("error", ename="KeyError", evalue="'zz'", traceback=IPYTHON_TRACEBACK))
    assert err.text == "KeyError: 'zz'"
    # Rulers, the header, context lines and the repeated error line are gone.
    assert err.traceback == (
        "Cell In[4], line 1\n"
        "----> 1 df['zz']\n"
        "File ~/pandas/core/indexes/base.py:3654, in Index.get_loc(self, key)\n"
        "-> 3654     raise KeyError(key) from err"
    )
    # Cut from the left, by whole lines: the end is where it failed.
    cut = reduce_outputs([new_output("error", ename="KeyError", evalue="'zz'", traceback=IPYTHON_TRACEBACK)],
                         output_chars=60)[0]
    assert cut.truncated and cut.traceback.endswith("-> 3654     raise KeyError(key) from err")
    assert cut.traceback.startswith("...[") and "Cell In[4]" not in cut.traceback


def test_error_is_outside_the_cell_budget():
    noisy = [new_output("stream", name="stdout", text="row\n" * 100) for _ in range(3)]
    outs = reduce_outputs(noisy + [new_output("error", ename="ValueError", evalue="bad", traceback=[])],
                          output_chars=100, cell_output_chars=150)
    assert [o.output_type for o in outs] == ["stream", "stream", "error"]
    assert outs[1].text.endswith("[1 more output truncated]")
    assert outs[-1].text == "ValueError: bad"


def test_active_cell_accessor():
    ctx = from_notebook(_nb(), active_index=4)
    active = ctx.active_cell()
    assert (active.index, active.source, active.outputs) == (4, "df['zz']", [])
    assert active.error.text == "KeyError: 'zz'"
    head = from_notebook(_nb(), active_index=2).active_cell()
    assert head.error is None and head.outputs[0].text.startswith("   a  b")
    # No cursor: the last cell that raised.
    assert from_notebook(_nb()).active_cell().source == "df['zz']"
    ctx.cells[-1].outputs = []
    ctx.active_index = None
    assert ctx.active_cell() is None


def test_progress_bar_carriage_returns_collapse():
    out = reduce_output(new_output("stream", name="stderr", text=" 10%|#\r 50%|#####\r100%|##########\n"))
    assert out.text == "100%|##########\n"


def test_output_truncation_per_output_and_per_cell():
    long = "x" * 500
    outs = reduce_outputs(
        [new_output("stream", name="stdout", text=long)],
        output_chars=100,
        cell_output_chars=1000,
    )
    assert outs[0].truncated
    assert outs[0].text.startswith("x" * 100)
    assert outs[0].text.endswith("...[400 more chars truncated]")

    many = [new_output("stream", name="stdout", text="y" * 60) for _ in range(5)]
    outs = reduce_outputs(many, output_chars=100, cell_output_chars=100)
    # 60 chars fit, the second is cut to the 40 left, the rest are counted.
    assert len(outs) == 2
    assert outs[0].text == "y" * 60 and not outs[0].truncated
    assert outs[1].truncated
    assert outs[1].text.startswith("y" * 40 + "\n...[20 more chars truncated]")
    assert outs[1].text.endswith("[3 more outputs truncated]")

    short = reduce_outputs([new_output("stream", name="stdout", text="ok\n")])
    assert short[0].text == "ok\n" and not short[0].truncated


def test_agent_cells_become_turns_and_active_index_cuts():
    nb = _nb()
    nb.cells += [
        new_code_cell("%%agent\nHow many rows are there?"),
        new_code_cell("# Step 1: count rows\ndf.shape[0]", execution_count=5),
        new_code_cell("%%agent --candidates 3\nMean of a?"),  # the request being answered
        new_code_cell("later = 1"),
    ]
    ctx = from_notebook(nb, active_index=7)
    sources = [c.source for c in ctx.cells]
    assert not any(s.startswith("%%agent") for s in sources)
    assert "later = 1" not in sources
    assert len(ctx.turns) == 1
    turn = ctx.turns[0]
    assert turn.intent == "How many rows are there?"
    assert turn.status == "accepted"
    assert turn.code == "# Step 1: count rows\ndf.shape[0]"
    sol = ctx.cells[-1]
    assert sol.turn_id == turn.turn_id and turn.cell_ids == [sol.cell_id]
    assert ctx.active_index == len(ctx.cells) - 1


def test_turn_info_from_notebook_and_cell_metadata():
    nb = _nb()
    cell = new_code_cell("df['b'].mean()")
    stored = golden_turn(ACCEPTED, intent="Average of b?", code="df['b'].mean()", cell_ids=[cell.id])
    nb.metadata[METADATA_KEY] = {"version": 1, "turns": [stored]}
    cell.metadata.update(pointer(stored))
    nb.cells.append(cell)
    # A cell copied from another notebook: only its own pointer is known.
    orphan = new_code_cell("df.describe()")
    orphan.metadata[METADATA_KEY] = {"turn_id": "zzz", "intent": "Summarize df", "status": "edited"}
    nb.cells.append(orphan)

    ctx = from_notebook(nb)
    by_id = {t.turn_id: t for t in ctx.turns}
    assert ctx.cells[-2].turn_id == ACCEPTED
    assert by_id[ACCEPTED].intent == "Average of b?"
    assert by_id[ACCEPTED].cell_ids == [cell.id]
    assert ctx.cells[-1].turn_id == "zzz"
    assert by_id["zzz"].intent == "Summarize df" and by_id["zzz"].status == "edited"


def _history(*cells: str) -> list[str]:
    """``In`` exactly as IPython fills it (magics transformed)."""
    tm = TransformerManager()
    return [""] + [tm.transform_cell(c) for c in cells]


def test_from_history_recognizes_agent_turns_and_skips_magic_noise():
    In = _history(
        "%load_ext jupyter_data_agent",
        "import pandas as pd\n%matplotlib inline\ndf = pd.DataFrame({'a': [1, 2, 3]})",
        "df.shape",
        "%%agent -n 2\nHow many rows are there?",
        "# Step 1: count rows\ndf.shape[0]",
        "!ls",
        "df?",
        "%%time\ntotal = df['a'].sum()",
        "%%bash\necho hi",
        "%%agent\nWhat is the mean of a?",
        "%%agent\nAnd the max?",
    )
    assert "run_cell_magic('agent'" in In[4]
    Out = {3: (3, 1), 5: 3, 4: "ignored: the magic's own result"}
    ctx = from_history(In, Out, current_index=len(In) - 1)

    assert [c.source for c in ctx.cells] == [
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})",
        "df.shape",
        "# Step 1: count rows\ndf.shape[0]",
        "total = df['a'].sum()",
    ]
    assert [c.execution_count for c in ctx.cells] == [2, 3, 5, 8]
    assert ctx.cells[1].outputs[0].text == "(3, 1)"
    assert ctx.cells[2].outputs[0].output_type == "execute_result"
    assert ctx.cells[2].outputs[0].text == "3"

    # The running request (last entry) is not history; the one before it got
    # no solution cell, so it stays pending.
    assert [(t.intent, t.status) for t in ctx.turns] == [
        ("How many rows are there?", "accepted"),
        ("What is the mean of a?", "pending"),
    ]
    first = ctx.turns[0]
    assert ctx.cells[2].turn_id == first.turn_id
    assert first.code == "# Step 1: count rows\ndf.shape[0]"
    assert first.cell_ids == [ctx.cells[2].cell_id]

    assert len(from_history(In, Out, current_index=-1).turns) == 2
    assert len(from_history(In, Out).turns) == 3
    assert [c.source for c in from_history(In, Out, current_index=3).cells] == [ctx.cells[0].source]


def test_from_history_short_reprs():
    In = _history("big = list(range(10**6))\nbig",
                  "class B:\n    def __repr__(self): raise RuntimeError\nB()")
    Out = {1: list(range(10**6)), 2: type("B", (), {"__repr__": lambda self: 1 / 0})()}
    ctx = from_history(In, Out, output_chars=80)
    assert len(ctx.cells[0].outputs[0].text) < 200
    assert "repr failed" in ctx.cells[1].outputs[0].text


def test_from_history_inside_a_real_shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    previous = ip.magics_manager.magics["cell"].get("agent")
    seen = {}

    def agent(line, cell):
        seen["ctx"] = from_history(ip.user_ns["In"], ip.user_ns["Out"], -1)

    ip.register_magic_function(agent, "cell", "agent")
    try:
        for src in ["x = 41", "%%agent\nadd one", "# Step 1: add\nx + 1", "%%agent\nnow double it"]:
            ip.run_cell(src, store_history=True)
    finally:
        if previous is not None:
            ip.magics_manager.magics["cell"]["agent"] = previous
        else:
            ip.magics_manager.magics["cell"].pop("agent", None)
    ctx = seen["ctx"]
    assert [c.source for c in ctx.cells][-2:] == ["x = 41", "# Step 1: add\nx + 1"]
    assert ctx.cells[-1].outputs[0].text == "42"
    assert [t.intent for t in ctx.turns][-1] == "add one"
    assert "now double it" not in [t.intent for t in ctx.turns]


# The keys Turn models; a stored turn's other keys go to Turn.extra.
MODELLED = {"turn_id", "intent", "code", "status", "cell_ids", "candidates", "created", "answer",
            "confinement"}


def test_the_golden_notebook_reads_back_every_turn_and_pointer():
    """tests/data/turns.golden.ipynb holds turns as the front end stores them
    (src/__tests__/golden.spec.ts checks that side): every field comes back."""
    stored = golden_notebook()["metadata"][METADATA_KEY]
    assert stored["version"] == 1
    nb = nbformat.read(GOLDEN, as_version=4)
    nbformat.validate(nb)
    turns = read_turns(nb)
    assert [t.turn_id for t in turns] == [ACCEPTED, REJECTED, EDITED, EDIT, EXPLAIN_FAILED, PENDING]
    for turn, raw in zip(turns, stored["turns"]):
        assert turn == Turn(intent=raw["intent"], code=raw["code"], status=raw["status"],
                            turn_id=raw["turn_id"], cell_ids=raw["cell_ids"],
                            candidates=raw["candidates"], created=raw["created"], answer=None,
                            confinement=raw.get("confinement"),
                            extra={k: v for k, v in raw.items() if k not in MODELLED})
    by_id = {t.turn_id: t for t in turns}
    assert {i: t.status for i, t in by_id.items()} == {
        ACCEPTED: "accepted", REJECTED: "rejected", EDITED: "edited", EDIT: "accepted",
        EXPLAIN_FAILED: "pending", PENDING: "pending"}
    assert {i: sorted(t.extra) for i, t in by_id.items()} == {
        ACCEPTED: ["explanations", "previews", "strategy"],
        REJECTED: ["explanations", "previews", "strategy"],
        EDITED: ["explanations", "previews", "strategy"],
        EDIT: ["edits_cell", "explanations", "previews", "strategy"],
        EXPLAIN_FAILED: ["explanations", "failure", "strategy"],
        PENDING: ["explanations", "previews", "strategy"]}
    accepted = by_id[ACCEPTED]
    assert accepted.confinement["status"] == "partial" and accepted.confinement["missing"] == ["seccomp"]
    assert accepted.extra["strategy"] == "vote" and len(accepted.extra["explanations"]) == 2
    assert [p[0]["output_type"] for p in accepted.extra["previews"]] == ["execute_result", "error"]
    assert len(accepted.cell_ids) == 2 and accepted.code == "flights.groupby('airline')['dep_delay'].mean()"
    assert by_id[REJECTED].extra["previews"][0][0]["data"]["image/png"].startswith("iVBOR")
    assert by_id[EDITED].code != by_id[EDITED].candidates[0]  # the user's code, not the candidate
    assert by_id[EXPLAIN_FAILED].extra["failure"]["status"] == "error"
    assert by_id[EXPLAIN_FAILED].extra["strategy"] == "explain" and by_id[EXPLAIN_FAILED].candidates == []
    assert by_id[PENDING].confinement["status"] == "not_executed"
    assert by_id[PENDING].extra["previews"] == [None, None]  # not run
    assert get_turn(nb, EDIT) == by_id[EDIT] and get_turn(nb, "nope") is None

    # Cell pointers: the solution cells name their turn, its intent and status.
    cells = {c.id: c for c in nb.cells}
    edit_cell = by_id[EDIT].extra["edits_cell"]
    assert by_id[EDIT].cell_ids == [edit_cell] and edit_cell in cells
    expected = {cid: (tid, by_id[tid].status) for tid in (ACCEPTED, EDITED, EDIT, PENDING)
                for cid in by_id[tid].cell_ids}
    assert {cid: (info["turn_id"], info["status"]) for cid, c in cells.items()
            if (info := cell_turn_info(c))} == expected
    for c in nb.cells:
        info = cell_turn_info(c)
        assert info is None or info["intent"] == by_id[info["turn_id"]].intent
    # The rejected turn's cell was removed: its id names no cell.
    assert not set(by_id[REJECTED].cell_ids) & set(cells)

    # The notebook context: the same turns, each solution cell tied to its turn.
    for source in (nb, golden_notebook(), nbformat.writes(nb)):
        ctx = from_notebook(source)
        assert ctx.turns == turns
        assert [c.turn_id for c in ctx.cells] == [
            None, None, ACCEPTED, ACCEPTED, EDITED, EDIT, None, PENDING]
        assert [c.cell_id for c in ctx.cells] == [c.id for c in nb.cells]
    # The prompt shows each prior turn's intent above its cells.
    text = "".join(linearize(from_notebook(nb)))
    for tid in (ACCEPTED, EDITED, EDIT, PENDING):
        assert text.count(f"# Problem: {by_id[tid].intent}") == 1
    for tid in (REJECTED, EXPLAIN_FAILED):
        assert by_id[tid].intent not in text


def test_an_explain_answer_and_the_badge_are_read():
    """``answer`` (which the front end does not store today) and
    ``confinement`` are modelled; what the sidebar adds is kept in ``extra``."""
    confinement = golden_turn(ACCEPTED)["confinement"]
    explained = golden_turn(EXPLAIN_FAILED, turn_id="t2", answer="It averages **a**.")
    del explained["failure"]
    nb = new_notebook()
    nb.cells.append(new_code_cell("df['a'].mean()"))
    nb.metadata[METADATA_KEY] = {"version": 1, "turns": [golden_turn(ACCEPTED, turn_id="t1"), explained]}
    t1, t2 = read_turns(nbformat.reads(nbformat.writes(nb), as_version=4))
    assert t1.confinement == confinement and t1.answer is None
    assert t1.extra["strategy"] == "vote" and "confinement" not in t1.extra
    assert t2.answer == "It averages **a**." and t2.confinement is None
    assert t2.extra == {"explanations": [], "strategy": "explain"}


def test_turn_from_dict_is_tolerant():
    t = turn_from_dict({"intent": "x", "status": "weird", "cell_ids": "notalist", "created": "soon",
                        "answer": 3, "confinement": "yes"})
    assert t == Turn(intent="x")
    # Not JSON (a NaN, an object): dropped, the file must stay loadable.
    assert turn_from_dict({"intent": "x", "confinement": {"bad": float("nan")}}) == t
    assert turn_from_dict({"intent": "x", "confinement": {"bad": object()}}) == t
    assert read_turns({"metadata": {METADATA_KEY: "garbage"}}) == []
    assert read_turns({"metadata": {}}) == []


def test_hand_edited_golden_metadata_degrades_instead_of_failing():
    """The golden notebook with its metadata broken by hand or another tool:
    what is still readable is read, the rest gets defaults."""
    nb = golden_notebook()
    turns = nb["metadata"][METADATA_KEY]["turns"]
    turns[0].update(status="maybe", created="yesterday", cell_ids="c1", candidates=None,
                    confinement=["not", "a", "dict"])
    del turns[1]["intent"], turns[1]["code"]
    turns[2]["previews"] = "oops"
    turns.insert(3, "not a turn")
    nb["metadata"][METADATA_KEY]["version"] = 7  # a newer writer: read best-effort
    nb["cells"][2]["metadata"][METADATA_KEY] = {"turn_id": ACCEPTED, "status": "maybe"}
    nb["cells"][3]["metadata"][METADATA_KEY] = ["garbage"]
    nb["cells"][4]["metadata"][METADATA_KEY] = {"intent": "no id"}

    back = read_turns(nb)
    assert [t.turn_id for t in back] == [ACCEPTED, REJECTED, EDITED, EDIT, EXPLAIN_FAILED, PENDING]
    first = back[0]
    assert (first.status, first.created, first.cell_ids, first.candidates, first.confinement) == (
        "pending", None, [], [], None)
    assert first.extra["strategy"] == "vote"
    assert (back[1].intent, back[1].code, back[1].status) == ("", "", "rejected")
    assert back[2].extra["previews"] == "oops"  # kept as it was
    assert cell_turn_info(nb["cells"][2]) == {"turn_id": ACCEPTED, "intent": "", "status": "pending"}
    assert cell_turn_info(nb["cells"][3]) is None and cell_turn_info(nb["cells"][4]) is None
    ctx = from_notebook(nb)
    assert [c.turn_id for c in ctx.cells] == [None, None, ACCEPTED, None, None, EDIT, None, PENDING]
