"""What accepting a candidate will change, computed in its kernel copy (issue 40, item 6).

Each candidate a strategy runs in a fork of the live kernel carries the names its cell
added, changed (a DataFrame's shape before and after) and deleted, and the files it wrote in
scratch (``Candidate.namespace``); the user's kernel is not touched. The evidence's agreement
check fails for an answer the vote did not pick.
"""

from __future__ import annotations

import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.kernel.copy import namespace_diff
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.evidence import agree_check
from jupyter_data_agent.search.options import DirectOptions, PromptPolicy, VoteOptions
from tests.scripted_backend import ScriptedBackend, start_tree, stop_tree

SETUP = "import pandas as pd\ndf = pd.DataFrame({'a': range(1000), 'b': [0.5] * 1000})\nold = 1"
CLEAN = ("```python\n# Step 1: Keep the second half and write it out.\n"
         "df = df[df['a'] >= 500]\nclean = df.assign(c=df['a'] * 2)\ndel old\n"
         "clean.to_csv('out.csv')\nlen(clean)\n```")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    km, kc, t = start_tree(tmp_path_factory.mktemp("nsdiff"), timeout_s=60, setup=SETUP)
    yield t, kc
    stop_tree(km, kc, t)


def _run(tree, options, samples: list[str]):
    backend = ScriptedBackend(lambda call: samples)
    request = TurnRequest(intent="Keep the second half", context=NotebookContext(), options=options,
                          prompt=PromptPolicy(max_prompt_tokens=4000))
    return get_strategy(options.strategy).run(request, RunContext(backend=backend, executor=tree.root))


def _live(kc, code: str) -> str:
    """What ``code`` prints in the user's own kernel."""
    seen: list[dict] = []
    reply = kc.execute_interactive(code, timeout=60, output_hook=seen.append)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(m["content"].get("text", "") for m in seen if m["msg_type"] == "stream")


def test_a_candidate_carries_what_its_cell_changed_and_the_live_kernel_does_not(tree):
    t, kc = tree
    result = _run(t, DirectOptions(), [CLEAN])
    chosen = result.chosen
    assert chosen.result.ok, chosen.result.error_line()
    diff = chosen.namespace
    assert diff is not None and diff.known, diff
    assert [(v.name, v.type, v.shape) for v in diff.new] == [("clean", "pandas.DataFrame", [500, 3])]
    assert [(v.name, v.shape, v.before) for v in diff.changed] == [("df", [500, 2], [1000, 2])]
    assert [v.name for v in diff.deleted] == ["old"]
    assert diff.files == ["out.csv"]
    # One copy of it on the wire: typed on the candidate, not again in the result.
    wire = chosen.to_json()
    assert wire["namespace"]["changed"] == [{"name": "df", "type": "pandas.DataFrame",
                                             "shape": [500, 2], "before": [1000, 2]}]
    assert wire["result"]["namespace"] is None
    # Nothing of it happened in the user's kernel.
    assert _live(kc, "print(len(df), 'clean' in dir(), 'old' in dir())").split() == ["1000", "False", "True"]
    assert _live(kc, "import os; print(os.path.exists('out.csv'))").strip() == "False"


def test_every_vote_sample_carries_its_own_diff(tree):
    t, _ = tree
    other = "```python\n# Step 1: Count.\nn = len(df)\nn\n```"
    result = _run(t, VoteOptions(samples=2), [CLEAN, other])
    first, second = result.candidates
    assert [v.name for v in first.namespace.new] == ["clean"]
    assert [v.name for v in second.namespace.new] == ["n"] and not second.namespace.changed
    assert second.namespace.files == []  # the first sample's file was written in its own copy before


def test_a_copy_that_cannot_tell_says_so_rather_than_nothing_changed():
    for report in (None, "garbage", {"note": "the namespace could not be read"}):
        diff = namespace_diff.parse(report)
        assert not diff.known and not diff.new and not diff.changed and diff.files is None


def test_an_old_report_without_files_or_shapes_before_reads_as_not_known():
    diff = namespace_diff.parse({"new": [{"name": "x", "type": "int", "shape": None}], "changed": [],
                                 "deleted": [], "truncated": False})
    assert diff.known and diff.files is None and diff.new[0].before is None


def test_the_vote_fails_agreement_for_an_answer_it_did_not_pick(tree):
    """m1: a minority sample said "checks 6/6" with no agreement: it fails the agreement check."""
    three = "```python\n# Step 1: Count the halves.\n3\n```"
    two = "```python\n# Step 1: Count.\n2\n```"
    result = _run(tree[0], VoteOptions(samples=5), [three, three, three, two, two])
    agree = {c.code.splitlines()[-1]: next(k for k in c.checks if k.name == "agree") for c in result.candidates}
    assert agree["3"].passed and agree["3"].detail == "3 of 5 answers agree"
    assert not agree["2"].passed
    assert agree["2"].detail == "2 of 5 answers agree; the vote picked another answer"


def test_a_lost_tie_fails_agreement_too():
    assert not agree_check(2, 4, False).passed and agree_check(2, 4, True).passed
    assert agree_check(1, 1, True).passed and not agree_check(2, 5, True).passed



def test_a_copy_that_is_not_a_fork_reports_no_diff(tmp_path):
    """A replay copy (no fork) cannot tell what a cell changed: the candidate says so (``note``),
    and the sidebar shows nothing rather than "changes nothing"."""
    from jupyter_data_agent.kernel.host.replay import ReplayTree
    from jupyter_data_agent.kernel.results import Limits

    with ReplayTree.start([SETUP], notebook_dir=str(tmp_path), limits=Limits(timeout_s=60)) as t:
        chosen = _run(t, DirectOptions(), [CLEAN]).chosen
    assert chosen.result.ok, chosen.result.error_line()
    assert chosen.namespace is not None and not chosen.namespace.known
    assert chosen.to_json()["namespace"]["note"] == "the copy did not report its namespace"
