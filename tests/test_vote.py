"""Self-consistency voting over executed candidates; the answer form's round trip through a real kernel copy.

The first part needs no kernel (ExecResults are built here with ``describe_value``,
as a copy builds them); the last part runs cells in fork copies of one real,
module-scoped ipykernel and checks that a value's form is the same on either
side of the round trip.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.kernel.answer_form import answer_form
from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.results import ExecResult, Limits, OutputItem, ValueHandle, describe_value
from jupyter_data_agent.prompts.parse import Step
from jupyter_data_agent.search.base import Candidate, RunContext, SearchStats, TurnRequest
from jupyter_data_agent.search.equivalence import exec_output, same_answer, voted_output
from jupyter_data_agent.search.generate import sampling
from jupyter_data_agent.search.options import MCTSOptions, SamplingPolicy, TaskInfo, VoteOptions
from jupyter_data_agent.search.vote import VoteStrategy, vote
from tests.scripted_backend import ScriptedBackend


def ran(value=None, *, status="ok", printed=""):
    outputs = [OutputItem("stream", name="stdout", text=printed)] if printed else []
    return ExecResult(status=status, outputs=outputs,
                      value=describe_value(value) if value is not None else None)


# ------------------------------------------------------------------ exec_output and handles

def test_exec_output_is_the_value_form():
    s = pd.Series([3, 1], index=pd.Index(["Lima", "Oslo"], name="city"))
    assert exec_output(ran(s)) == answer_form(s)
    assert exec_output(ran(7)) == answer_form(7)


def test_printed_text_is_the_answer_without_an_expression():
    assert exec_output(ran(printed="3\n")) == answer_form("3")
    assert exec_output(ran(printed="  Lima \n")) == answer_form("Lima")
    assert exec_output(ran(4, printed="noise\n")) == answer_form(4)  # the value wins over printed text


def test_errors_and_silence_give_no_answer():
    assert exec_output(ran()) is None
    assert exec_output(ran(printed="  \n")) is None
    assert exec_output(ran(7, status="error")) is None
    assert exec_output(None) is None


def test_a_value_without_a_form_gives_no_answer():
    class Unlistable(list):
        def __iter__(self):
            raise RuntimeError("no")

    handle = describe_value(Unlistable([1, 2]))
    assert handle.form is None
    assert exec_output(ExecResult(status="ok", value=handle)) is None


def test_value_handle_carries_the_form_through_json_but_not_to_browsers():
    df = pd.DataFrame({"a": np.arange(100), "b": ["x"] * 100})
    handle = describe_value(df, max_items=10)
    assert handle.truncated and handle.form == answer_form(df)
    assert ValueHandle.from_json(json.loads(json.dumps(handle.to_json()))).form == handle.form
    assert "form" not in handle.to_json(form=False)
    result = ExecResult(status="ok", value=handle)
    assert "form" not in result.to_json(form=False)["value"]
    assert ExecResult.from_json(json.loads(json.dumps(result.to_json()))).value.form == handle.form


def test_describe_value_form_budget():
    df = pd.DataFrame({"a": np.arange(100), "b": np.arange(100) * 0.5})
    form = describe_value(df, form_cells=150).form
    assert "values" in form["cols"][0] and "values" not in form["cols"][1]
    assert form["cols"][1]["digest"] == answer_form(df)["cols"][1]["digest"]


# ------------------------------------------------------------------ vote

def test_largest_cluster_wins_and_errors_do_not_vote():
    series = pd.Series([3, 1], index=pd.Index(["Lima", "Oslo"], name="city"))
    candidates = [
        Candidate("a", result=ran(pd.Series([9], index=["Pune"]))),
        Candidate("b", result=ran(series)),
        Candidate("c", result=ran(status="error")),
        Candidate("d", result=ran(series.to_frame("n"))),
        Candidate("e", result=ran(status="error")),
        Candidate("f", result=ran(series.reset_index())),
    ]
    stats = SearchStats()
    chosen = vote(candidates, stats)
    assert chosen.code == "b"
    assert [c.support for c in candidates] == [1, 3, 1, 3, 1, 3]
    assert stats.classes == [3, 1]


def test_wrong_group_keys_do_not_join_the_vote():
    right = pd.Series([3, 1], index=pd.Index(["Lima", "Oslo"], name="city"))
    wrong = pd.Series([3, 1], index=pd.Index(["Lima", "Rome"], name="city"))
    candidates = [Candidate("w1", result=ran(wrong)), Candidate("r1", result=ran(right)),
                  Candidate("w2", result=ran(wrong.reset_index())), Candidate("r2", result=ran(right.to_frame())),
                  Candidate("r3", result=ran(right.to_numpy().tolist()))]  # keys dropped: a third answer
    assert vote(candidates).code == "w1"  # two against two, no scores: the class seen first
    assert [c.support for c in candidates] == [2, 2, 2, 2, 1]



FORMAT = "@mean_fare[mean fare, 2 decimals] @top_city[name]"


def test_cells_vote_with_the_tags_the_format_asks_for():
    """Exploratory prints above the same tagged answer do not split the vote (issue 39: a right
    answer drawn 3 times in 3 classes lost to a wrong one drawn twice); values compare as numbers."""
    right = [ran(printed="count 891\n@mean_fare[32.20]\n@top_city[Lima]\n"),
             ran(printed="   Age  Fare\nmean 29.7 32.2\n@top_city[Lima]\n@mean_fare[32.2]\n"),
             ran(printed="@mean_fare[32.200]\n@top_city[Lima]\n@extra[1]\n")]
    wrong = [ran(printed="count 891\n@mean_fare[32.21]\n@top_city[Lima]\n"),
             ran(printed="@mean_fare[32.21]\n@top_city[Lima]\n")]
    untagged = ran(printed="@mean_fare[32.20]\n")  # a tag missing: its whole text, a class of its own
    assert len({json.dumps(voted_output(r, FORMAT), sort_keys=True) for r in right}) == 1
    assert same_answer(voted_output(wrong[0], FORMAT), voted_output(wrong[1], FORMAT))
    assert not same_answer(voted_output(right[0], FORMAT), voted_output(wrong[0], FORMAT))
    assert voted_output(untagged, FORMAT) == exec_output(untagged)
    assert voted_output(right[0]) == exec_output(right[0])  # no format: the whole printed answer
    assert voted_output(ran(status="error"), FORMAT) is None
    candidates = [Candidate(f"w{i}", result=r) for i, r in enumerate(wrong)] + \
        [Candidate(f"r{i}", result=r) for i, r in enumerate(right)] + [Candidate("u", result=untagged)]
    stats = SearchStats()
    assert vote(candidates, stats, FORMAT).code.startswith("r") and stats.classes == [3, 2, 1]
    assert vote(candidates, SearchStats()).code == "w0"  # by whole text: six classes of one, the first wins

def test_no_error_free_candidate_means_no_vote():
    assert vote([Candidate("a", result=ran(status="error")), Candidate("b")]) is None


def test_silent_cells_do_not_outvote_the_answer():
    candidates = [Candidate("a", result=ran()), Candidate("b", result=ran()),
                  Candidate("c", result=ran(42))]
    assert vote(candidates).code == "c"
    assert candidates[2].support == 1


def test_tie_goes_to_the_higher_score_then_fewer_steps():
    candidates = [Candidate("a", result=ran(1.0), score=0.2), Candidate("b", result=ran(1.0000001), score=0.7),
                  Candidate("c", result=ran(2.0), score=0.9)]
    assert vote(candidates).code == "b"  # sizes 2 vs 1: size first, then the member with the higher score
    candidates.append(Candidate("d", result=ran([2]), score=0.1))
    assert vote(candidates).code == "c"  # 2 vs 2: the class with the best score
    short, long = [Step(1, "x", "")], [Step(1, "x", ""), Step(2, "y", "")]
    same = [Candidate("long", steps=long, result=ran(5), score=0.5),
            Candidate("short", steps=short, result=ran(5.0), score=0.5)]
    assert vote(same).code == "short"


def test_a_strategy_refuses_another_strategys_options():
    request = TurnRequest(intent="x?", context=NotebookContext(), options=MCTSOptions())
    with pytest.raises(ValueError, match="VoteOptions expected.*'mcts'"):
        VoteStrategy().run(request, RunContext(backend=ScriptedBackend(lambda call: ["x"])))


def test_without_a_copy_no_candidate_is_said_to_run():
    """A turn with no kernel copy (a gateway kernel, --no-exec) says "not run", never "ran"."""
    from jupyter_data_agent.search.options import VoteOptions

    said = []
    request = TurnRequest(intent="Sum a?", context=NotebookContext(), options=VoteOptions(samples=2))
    reply = "```python\n# Step 1: Sum a.\ndf['a'].sum()\n```"
    VoteStrategy().run(request, RunContext(backend=ScriptedBackend(lambda call: [reply, reply]),
                                           events=lambda e: said.append(e.message)))
    assert "candidate 1 (not run)" in said and "candidate 2 (not run)" in said
    assert not [m for m in said if "ran" in m.split() or "in a kernel copy" in m]


def test_sampling_follows_the_policy():
    request = TurnRequest(intent="x?", context=NotebookContext(),
                          sampling=SamplingPolicy(temperature=0.1, sample_temperature=0.9,
                                                  max_new_tokens=77, seed=5))
    one, many = sampling(request, 1, stop=("#",), seed_offset=2), sampling(request, 4)
    assert (one.temperature, one.max_tokens, one.stop, one.seed) == (0.1, 77, ("#",), 7)
    assert (many.n, many.temperature, many.seed) == (4, 0.9, 5)
    assert sampling(request, 1, temperature=0.7).temperature == 0.7


# ------------------------------------------------------------------ round trip through a real kernel copy

SETUP = """
import numpy as np, pandas as pd
sales = pd.DataFrame({"city": ["Lima", "Oslo", "Pune", "Lima", "Oslo", "Pune"],
                      "amount": [3.5, np.nan, 2.25, 4.0, np.nan, 6.0]})
by_city = sales.groupby("city")["amount"].mean()
stamps = pd.DataFrame({"when": pd.date_range("2021-03-27", periods=4, freq="12h", tz="Europe/Paris"),
                       "n": [1, 2, 3, 4]}).set_index("when")
big = pd.DataFrame({"i": np.arange(1200), "x": np.arange(1200) * 0.1, "s": [f"r{i}" for i in range(1200)]})
huge = pd.DataFrame({"x": np.arange(60_000) * 0.5})
"""

EXPRESSIONS = [
    "by_city",
    "by_city.reset_index()",
    "by_city.fillna(0)",
    "stamps",
    "stamps.reset_index()",
    "big",
    "big.head(60)",
    "huge",
    "{'mean': by_city.mean(), 'cities': list(by_city.index)}",
    "by_city.max()",
]


@pytest.fixture(scope="module")
def local():
    namespace: dict = {}
    exec(SETUP, namespace)
    return namespace


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    nb = tmp_path_factory.mktemp("notebook")
    km, kc = start_kernel(cwd=nb)
    tree = None
    try:
        reply = kc.execute_interactive(SETUP, timeout=120)
        assert reply["content"]["status"] == "ok"
        tree = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb), limits=Limits(timeout_s=60))
        node = tree.root.fork()
        yield node
    finally:
        if tree is not None:
            tree.close()
        stop_kernel(km, kc)


@pytest.fixture(scope="module")
def remote(copy):
    """Each expression's answer as it came back from the copy."""
    out = {}
    for expr in EXPRESSIONS:
        result = copy.exec(expr)
        assert result.ok, (expr, result.text())
        out[expr] = exec_output(result)
    return out


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_the_form_from_a_copy_is_the_form_built_here(expr, local, remote):
    here = answer_form(eval(expr, local))
    assert remote[expr] == here
    assert same_answer(remote[expr], eval(expr, local))


def test_the_copy_keeps_the_details(remote):
    stamps = remote["stamps"]
    assert stamps["index"][0]["kind"] == "time" and stamps["index"][0]["tz"] == "Europe/Paris"
    by_city = remote["by_city"]
    assert by_city["cols"][0]["nulls"] == 1 and by_city["index"][0]["values"] == ["Lima", "Oslo", "Pune"]
    assert remote["big"]["rows"] == 1200 and len(remote["big"]["cols"][2]["values"]) == 1200
    huge = remote["huge"]["cols"][0]
    assert huge["n"] == 60_000 and "values" not in huge  # past the copy's budget: digests only


PAIRS = [
    ("by_city", "by_city.reset_index()", True),
    ("stamps", "stamps.reset_index()", True),
    ("by_city", "by_city.fillna(0)", False),
    ("big", "big.head(60)", False),
    ("by_city", "stamps", False),
]


@pytest.mark.parametrize("a, b, expected", PAIRS)
def test_same_answer_agrees_before_and_after_the_round_trip(a, b, expected, local, remote):
    va, vb = eval(a, local), eval(b, local)
    assert same_answer(va, vb) is expected
    assert same_answer(remote[a], remote[b]) is expected
    assert same_answer(remote[a], vb) is expected and same_answer(va, remote[b]) is expected


def test_printed_answer_from_a_copy(copy):
    result = copy.exec("print(by_city.max())")
    assert exec_output(result) == answer_form("4.125")


def test_vote_over_real_copies(copy):
    codes = ["by_city", "by_city.fillna(0)", "by_city.reset_index()", "1 / 0", "unused = 1",
             "sales.groupby('city')['amount'].mean().to_frame('avg')"]
    candidates = []
    for code in codes:
        child = copy.fork()
        try:
            candidates.append(Candidate(code, result=child.exec(code)))
        finally:
            child.close()
    chosen = vote(candidates)
    assert chosen.code == "by_city"
    assert [c.support for c in candidates] == [3, 1, 3, 1, 1, 3]


@pytest.mark.parametrize("strategy", ["direct", "vote"])
def test_progress_says_the_candidate_runs_in_a_copy_while_it_runs(copy, strategy):
    """N8: while a candidate runs, the progress line says so, not "asking the model"."""
    from jupyter_data_agent.search import get_strategy
    from jupyter_data_agent.search.options import DirectOptions, VoteOptions

    said = []
    reply = "```python\n# Step 1: Wait, then count.\nimport time; time.sleep(0.1); len(sales)\n```"
    options = VoteOptions(samples=2) if strategy == "vote" else DirectOptions()
    request = TurnRequest(intent="How many sales?", context=NotebookContext(), options=options)
    get_strategy(strategy).run(request, RunContext(
        backend=ScriptedBackend(lambda call: [reply] * call.n), executor=copy, events=said.append))
    kinds = [(e.kind, e.data.get("state")) for e in said if e.kind in ("progress", "candidate")]
    first_run = kinds.index(("progress", "running"))
    assert first_run < kinds.index(("candidate", None))
    running = [e for e in said if e.data.get("state") == "running"]
    assert len(running) == (2 if strategy == "vote" else 1)
    assert all("in a kernel copy" in e.message for e in running)
    if strategy == "vote":
        assert [e.message for e in running] == ["running candidate 1 of 2 in a kernel copy",
                                                "running candidate 2 of 2 in a kernel copy"]
        assert [e.data["candidate"] for e in running] == [0, 1]


def test_the_vote_of_a_task_with_a_format_counts_tagged_answers(copy):
    """VoteStrategy end to end in real copies: two cells print the same total (15.75, 15.750) under
    different exploration and are one class; a third prints another value."""
    cells = ["print(sales.describe())\nprint(f'@total[{sales.amount.sum()}]')",
             "print(len(sales))\nprint(f'@total[{round(float(sales.amount.sum()), 2)}0]')",
             "print(f'@total[{sales.amount.max()}]')"]
    replies = iter(cells)
    request = TurnRequest(intent="Total sales?", context=NotebookContext(), options=VoteOptions(samples=3),
                          task=TaskInfo(format="@total[the total]"))
    result = VoteStrategy().run(request, RunContext(
        backend=ScriptedBackend(lambda call: [f"```python\n# Step 1: Total.\n{next(replies)}\n```"
                                              for _ in range(call.n)]),
        executor=copy))
    assert result.stats.classes == [2, 1]
    assert "sales.amount.sum()" in result.chosen.code
