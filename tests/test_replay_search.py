"""MCTS on the replay fallback: 4 live kernels are enough for an 18-node search.

Every expansion forks three children from the selected node; with 4 replay
kernels at most, the tree evicts idle copies and forks evicted parents by
replaying their lineage. Each step adds its own number to ``acc`` and prints
the sum, so every node's observation proves its state is its path's.
"""

from __future__ import annotations

import threading
import time

import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.kernel.host.replay import ReplayTree
from jupyter_data_agent.kernel.results import Limits
from jupyter_data_agent.search import RunContext, TurnRequest
from jupyter_data_agent.search.mcts import MCTSStrategy
from jupyter_data_agent.search.options import MCTSOptions, TaskInfo
from tests.scripted_backend import ScriptedBackend, action

pytestmark = pytest.mark.timeout(600)


def number(thought: str) -> int:
    return int(thought.split()[-1])


def rule(call):
    """Three distinct steps below any path: child i at depth d adds (i + 1) * 10**d."""
    return [action(f"add {(i + 1) * 10 ** call.depth}",
                   f"acc = acc + [{(i + 1) * 10 ** call.depth}]\nprint(sum(acc))", -0.1 * (i + 1))
            for i in range(3)]


def test_mcts_on_a_replay_tree_with_4_kernels_completes_18_nodes(tmp_path):
    tree = ReplayTree.start(["acc = []"], notebook_dir=str(tmp_path), max_live=4,
                            limits=Limits(timeout_s=60))
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], len(tree.live()))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    request = TurnRequest(intent="Add the numbers.", context=NotebookContext(),
                          options=MCTSOptions(iterations=6, k=3, c_puct=1.25, early_stop=False, vote_share=0.0,
                                              value="zero"),
                          task=TaskInfo(format="@answer[value]"))
    strategy = MCTSStrategy()
    try:
        result = strategy.run(request, RunContext(backend=ScriptedBackend(rule),
                                                  executor=tree.root))
    finally:
        stop.set()
        sampler.join()
    try:
        search = strategy.last_search
        nodes = [n for n in search.nodes if n.step is not None]
        assert result.stats.nodes == len(nodes) == 18
        assert max(n.depth for n in nodes) >= 2 and tree.evictions > 0
        for n in nodes:
            path_sum = sum(number(p.step.thought) for p in n.path() if p.step is not None)
            assert (n.step.status, n.observation) == ("ok", str(path_sum)), n.step
        assert peak[0] <= 4
    finally:
        tree.close()
