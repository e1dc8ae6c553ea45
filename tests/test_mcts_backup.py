"""``MCTSOptions.backup``: selecting by the best value below a node keeps a small budget on the
promising path, where the mean lets one weak child send the search to a sibling (real copies);
``MCTSOptions.unsure``: at inference, exploration where the estimate is unsure."""

from __future__ import annotations

import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.search import RunContext, TurnRequest
from jupyter_data_agent.search.mcts import MCTSSearch, MCTSStrategy, Node
from jupyter_data_agent.search.options import MCTSOptions, PromptPolicy, TaskInfo
from tests.scripted_backend import ScriptedBackend, TableValue, action, final, start_tree, stop_tree

pytestmark = pytest.mark.timeout(300)

SCRIPT = {
    (): [action("A", "x = 1", -0.2), action("B", "y = 1", -0.3), action("C", "z = 1", -0.4)],
    ("A",): [action("A1", "x = x + 1", -0.2), action("A2", "1/0", -0.3), action("A3", "x = 0", -0.4)],
    ("A", "A1"): [final("A1a", "@answer[2]", -0.1), final("A1b", "@answer[2]", -0.2),
                  final("A1c", "@answer[2]", -0.3)],
    ("B",): [action("B1", "y = 2", -0.2), action("B2", "y = 3", -0.3), action("B3", "y = 4", -0.4)],
}
VALUES = TableValue({"A": .5, "B": .4, "C": .3, "A1": .9, "A2": -1.0, "A3": -.9, "A1a": .9, "A1b": .9,
                     "A1c": .9, "B1": .3, "B2": .3, "B3": .3})


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    km, kc, t = start_tree(tmp_path_factory.mktemp("backup"), timeout_s=5.0)
    yield t
    stop_tree(km, kc, t)


def run(tree, backup, unsure=0.0):
    strategy = MCTSStrategy(value=VALUES, backup=backup, unsure=unsure)
    request = TurnRequest(intent="What is x?", context=NotebookContext(),
                          options=MCTSOptions(iterations=3, vote_share=0.0), task=TaskInfo(format="@answer[value]"),
                          prompt=PromptPolicy(max_prompt_tokens=6000))
    result = strategy.run(request, RunContext(backend=ScriptedBackend(SCRIPT), executor=tree.root))
    search = strategy.last_search
    labels = {n.id: (n.step.thought if n.step else "root") for n in search.nodes}
    return result, [labels[i] for i in search.selections]


def test_mean_backup_leaves_the_promising_step_for_a_sibling(tree):
    result, selected = run(tree, "mean")
    # A's Q after its children: (0.5 + 0.9 - 1.0 - 0.9) / 4 < B's 0.4
    assert selected == ["root", "A", "B"]
    assert result.answer is None


def test_max_backup_goes_deep_enough_to_answer(tree):
    result, selected = run(tree, "max")
    assert selected == ["root", "A", "A1"]
    assert result.answer == "@answer[2]" and result.candidates[0].support == 3


def test_doubt_goes_to_the_unsure_step_and_keeps_a_confident_path(tree):
    # Two steps with the same Q: the one the estimator is unsure of (value 0) is tried first.
    search = MCTSSearch(TurnRequest(intent="q", context=NotebookContext()), RunContext(
        backend=ScriptedBackend(SCRIPT), executor=object()), MCTSOptions(unsure=0.5),
        VALUES, reward_fn=None)
    parent = Node("p", None, 0, visits=4)
    sure, unsure = (Node(i, parent, 1, prior=0.5, visits=1, value_sum=0.3, best=0.3, value=v)
                    for i, v in (("sure", -0.95), ("unsure", 0.0)))
    assert search.puct(unsure, parent) == pytest.approx(0.3 + 0.5 * 1.0 * 0.5 * 2 / 2)
    assert search.puct(sure, parent) == pytest.approx(0.3 + 0.5 * 0.05 * 0.5 * 2 / 2)
    search.cfg = MCTSOptions(unsure=0.0)
    assert search.puct(unsure, parent) == search.puct(sure, parent) == pytest.approx(0.3)
    # On real copies: a path the estimator is sure of is still followed to its answer.
    result, selected = run(tree, "max", unsure=0.5)
    assert selected == ["root", "A", "A1"] and result.answer == "@answer[2]"
