"""Notebook context: nbformat and kernel-history sources, output reduction, turns."""

from __future__ import annotations

import json

import nbformat
import pytest
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
    TURNS_VERSION,
    cell_turn_info,
    get_turn,
    mark_accepted,
    mark_edited,
    mark_rejected,
    read_turns,
    record_turn,
    turn_from_dict,
    turn_to_dict,
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
    stored = record_turn(nb, Turn(intent="Average of b?", status="accepted", code="df['b'].mean()"))
    cell = new_code_cell("df['b'].mean()")
    nb.cells.append(cell)
    record_turn(nb, stored, cell)
    # A cell copied from another notebook: only its own pointer is known.
    orphan = new_code_cell("df.describe()")
    orphan.metadata[METADATA_KEY] = {"turn_id": "zzz", "intent": "Summarize df", "status": "edited"}
    nb.cells.append(orphan)

    ctx = from_notebook(nb)
    by_id = {t.turn_id: t for t in ctx.turns}
    assert ctx.cells[-2].turn_id == stored.turn_id
    assert by_id[stored.turn_id].intent == "Average of b?"
    assert by_id[stored.turn_id].cell_ids == [cell.id]
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


def test_turns_round_trip_through_json():
    nb = new_notebook()
    cell = new_code_cell("")
    nb.cells.append(cell)
    t = record_turn(nb, Turn(intent="Top 3 products?", candidates=["a()", "b()"]), cell=0)
    assert t.turn_id and t.created is not None and t.cell_ids == [cell.id]
    store = nb.metadata[METADATA_KEY]
    assert store["version"] == TURNS_VERSION == 1
    assert cell.metadata[METADATA_KEY] == {
        "turn_id": t.turn_id, "intent": "Top 3 products?", "status": "pending"}

    mark_accepted(nb, t.turn_id, code="a()")
    nb2 = nbformat.reads(nbformat.writes(nb), as_version=4)  # through the file format
    back = read_turns(nb2)
    assert back == [Turn(intent="Top 3 products?", code="a()", status="accepted", turn_id=t.turn_id,
                         cell_ids=[cell.id], candidates=["a()", "b()"], created=t.created)]
    assert cell_turn_info(nb2.cells[0])["status"] == "accepted"

    mark_edited(nb2, t.turn_id, "a().head()")
    assert get_turn(nb2, t.turn_id).code == "a().head()"
    assert get_turn(nb2, t.turn_id).status == "edited"
    mark_rejected(nb2, t.turn_id)
    assert cell_turn_info(nb2.cells[0])["status"] == "rejected"

    # Updating by id does not duplicate.
    record_turn(nb2, get_turn(nb2, t.turn_id))
    assert len(read_turns(nb2)) == 1
    with pytest.raises(KeyError):
        mark_accepted(nb2, "nope")
    with pytest.raises(ValueError):
        from jupyter_data_agent.context.turns import set_status

        set_status(nb2, t.turn_id, "maybe")  # type: ignore[arg-type]


def test_front_end_turn_keys_survive_a_rewrite():
    """The sidebar stores the confinement badge, the explain answer and its own
    extras on a turn; recording a decision from Python must not drop them."""
    confinement = {
        "policy": "warn",
        "status": "partial",
        "execute": True,
        "message": "seccomp is unavailable",
        "layers": [{"name": "seccomp", "on": False, "detail": "kernel too old"}],
        "missing": ["seccomp"],
    }
    nb = new_notebook()
    nb.cells.append(new_code_cell("df['a'].mean()"))
    nb.metadata[METADATA_KEY] = {"version": 1, "turns": [
        {"turn_id": "t1", "intent": "Mean of a?", "code": "df['a'].mean()", "status": "pending",
         "cell_ids": [], "candidates": ["df['a'].mean()"], "created": 1.5,
         "strategy": "vote", "explanations": ["Step 1: mean"], "confinement": confinement},
        {"turn_id": "t2", "intent": "Explain this cell", "code": "", "status": "pending",
         "cell_ids": [], "candidates": [], "created": 2.5, "strategy": "explain",
         "answer": "It averages **a**."},
    ]}
    before = json.loads(json.dumps(nb.metadata[METADATA_KEY]["turns"]))
    t1, t2 = read_turns(nb)
    assert t1.confinement == confinement and t1.answer is None
    assert t1.extra == {"strategy": "vote", "explanations": ["Step 1: mean"]}
    assert t2.answer == "It averages **a**." and t2.confinement is None

    mark_accepted(nb, "t1")  # rewrites every turn
    nb2 = nbformat.reads(nbformat.writes(nb), as_version=4)
    after = nb2.metadata[METADATA_KEY]["turns"]
    assert after[1] == before[1]
    assert after[0] == {**before[0], "status": "accepted"}
    assert "answer" not in after[0] and "confinement" not in after[1]  # optional keys stay absent


def test_turn_from_dict_is_tolerant():
    t = turn_from_dict({"intent": "x", "status": "weird", "cell_ids": "notalist", "created": "soon",
                        "answer": 3, "confinement": "yes"})
    assert t == Turn(intent="x")
    assert turn_to_dict(Turn(intent="x", confinement={"bad": object()})) == turn_to_dict(t)
    assert turn_from_dict(turn_to_dict(t)) == t
    assert json.loads(json.dumps(turn_to_dict(t))) == turn_to_dict(t)
    assert read_turns({"metadata": {METADATA_KEY: "garbage"}}) == []
    assert read_turns({"metadata": {}}) == []
