"""MCTS over real snapshot processes of a real ipykernel, driven by a scripted generator.

The scripted tree (thought labels; values from a table, priors from the
replies' log-probabilities):

    root ─ A  x = 40                    ─ A1  x = x + 2; x  ─ A1a  answer 42
         │                              │                    ├ A1b  answer 42
         │                              │                    └ A1c  print(x) ─ A1c1 answer 42
         │                              ├ A2  answer 40                      ├ A1c2 answer 41
         │                              └ A3  NameError                      └ A1c3 ValueError ─ F  answer 42
         ├ B  1/0 ─ B1 1/0, B2 1/0, B3 x = 1                                                   ├ E1 1/0
         └ C  while True: pass (killed by the 2 s timeout)                                     └ E2 1/0

After four iterations three answers say 42 and two say something else
(40, 41): no clear majority yet (3 < 2/3 of 5). The next answer 42 makes it
4 of 6 and the search stops early.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psutil
import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.search import Cancelled, RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.mcts import MCTSStrategy, group_answers, priors
from jupyter_data_agent.search.options import MCTSOptions, PromptPolicy, SamplingPolicy, TaskInfo
from jupyter_data_agent.search.trajectories import read_jsonl
from tests.scripted_backend import ScriptedBackend, TableValue, action, exact_reward, final, start_tree, stop_tree

pytestmark = pytest.mark.timeout(300)

SCRIPT = {
    (): [action("A", "x = 40", -0.1), action("B", "1/0", -0.3),
         action("C", "while True: pass", -0.6)],
    ("A",): [action("A1", "x = x + 2\nx", -0.2), final("A2", "@answer[40]", -0.4),
             action("A3", "undefined_name", -0.5)],
    ("A", "A1"): [final("A1a", "@answer[42]", -0.1), final("A1b", "@answer[42]", -0.2),
                  action("A1c", "print(x)", -0.3)],
    ("A", "A1", "A1c"): [final("A1c1", "@answer[42]", -0.1), final("A1c2", "@answer[41]", -0.2),
                         action("A1c3", "raise ValueError('no')", -0.3)],
    ("A", "A1", "A1c", "A1c3"): [final("F", "@answer[42]", -0.1), action("E1", "1/0", -0.2),
                                 action("E2", "1/0", -0.3)],
    ("B",): [action("B1", "1/0", -0.1), action("B2", "1/0", -0.2), action("B3", "x = 1", -0.3)],
}
VALUES = TableValue({
    "A": .3, "B": -.2, "C": -.5, "A1": .6, "A2": .1, "A3": -.3, "A1a": .9, "A1b": .8, "A1c": .5,
    "A1c1": .85, "A1c2": .2, "A1c3": -.4, "F": .7, "E1": -.5, "E2": -.5, "B1": -.4, "B2": -.4,
    "B3": .2})


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("mcts")
    km, kc, t = start_tree(cwd, timeout_s=2.0, max_live=16)
    yield t
    stop_tree(km, kc, t)


def _request(budget=10, **options):
    options = {"vote_share": 0.0, **options}  # JUPITER's tree alone (Search's vote share: test_branching)
    return TurnRequest(intent="What is x?", context=NotebookContext(),
                       options=MCTSOptions(iterations=budget, **options),
                       task=TaskInfo(format="@answer[value]"),
                       prompt=PromptPolicy(max_prompt_tokens=6000))


def _by_label(search):
    return {(n.step.thought if n.step else "root"): n for n in search.nodes}


def _run(tree, c_puct, **kw):
    kw = {"backup": "mean", "unsure": 0.0, **kw}  # JUPITER's own selection (Q, greedy at c_puct 0)
    strategy = MCTSStrategy(value=VALUES, c_puct=c_puct, **kw)
    events = []
    backend = ScriptedBackend(SCRIPT)
    ctx = RunContext(backend=backend, executor=tree.root, events=events.append)
    result = strategy.run(_request(), ctx)
    return result, strategy.last_search, events, backend


# ------------------------------------------------------------------ pure parts

def test_priors_are_a_softmax_of_mean_logprobs():
    p = priors([-0.1, -0.3, -0.6])
    assert [round(x, 4) for x in p] == [0.4123, 0.3376, 0.2501]
    assert priors([-1.0, None]) == [0.5, 0.5]


def test_registered():
    assert isinstance(get_strategy("mcts"), MCTSStrategy)


def test_overrides_are_validated_like_options():
    with pytest.raises(ValueError, match="kk"):
        MCTSStrategy(kk=3).run(_request(), RunContext(backend=ScriptedBackend(SCRIPT)))


# ------------------------------------------------------------------ searches

def test_greedy_selection_backprop_vote_and_early_stop(tree):
    live_before = set(tree.pids())
    result, search, events, backend = _run(tree, 0.0, merge=False)  # every sample its own node
    labels = {n.id: (n.step.thought if n.step else "root") for n in search.nodes}
    # c_puct = 0: always the child with the highest Q
    assert [labels[i] for i in search.selections] == ["root", "A", "A1", "A1c", "A1c3"]
    assert search.stopped == "early_stop" and result.stats.iterations == 5
    n = _by_label(search)
    expected = {  # (N, W): every new child adds its value to itself and every ancestor
        "root": (15, 2.55), "A": (13, 3.25), "A1": (10, 3.15), "A1c": (7, 0.85),
        "A1c3": (4, -0.7), "B": (1, -0.2), "C": (1, -0.5), "A2": (1, 0.1), "A3": (1, -0.3),
        "A1a": (1, 0.9), "F": (1, 0.7), "E1": (1, -0.5)}
    for label, (visits, value_sum) in expected.items():
        assert n[label].visits == visits, label
        assert n[label].value_sum == pytest.approx(value_sum), label
    assert n["A1"].q == pytest.approx(0.315)
    # execution facts
    assert n["C"].step.status == "timeout" and n["C"].errors == 1 and not n["C"].terminal
    assert n["B"].step.status == "error" and "ZeroDivisionError" in n["B"].observation
    assert n["E1"].errors == 2 and not n["E1"].terminal
    assert [c.reason for c in n["A1"].children] == ["answer", "answer", None]
    # after iteration 4: three right, two different answers
    progress = [e.data for e in events if e.kind == "progress"]
    assert progress[3]["answers"] == [{"answer": "@answer[42]", "votes": 3},  # ties: by value
                                      {"answer": "@answer[41]", "votes": 1},
                                      {"answer": "@answer[40]", "votes": 1}]
    assert progress[3]["iterations"] == 4 and progress[3]["nodes"] == 12
    # The progress line in words: counts agree with their nouns (issue 40), never "1 nodes".
    lines = [e.message for e in events if e.kind == "progress"]
    assert lines[3] == "search iteration 4: 12 nodes, 5 answers"
    assert all(" 1 nodes" not in m and "(s)" not in m for m in lines)
    assert progress[-1]["best_value"] == pytest.approx(0.9)
    # the vote, the alternatives with their support, the chosen path's steps
    assert result.answer == "@answer[42]"
    assert [(c.meta["answer"], c.support) for c in result.candidates] == [
        ("@answer[42]", 4), ("@answer[41]", 1), ("@answer[40]", 1)]
    chosen = result.chosen
    assert chosen.meta["node_id"] == n["A1a"].id  # highest value among the 42s
    assert chosen.code == "# Step 1: A\nx = 40\n\n# Step 2: A1\nx = x + 2\nx"
    assert [(t.thought, t.output) for t in chosen.trace] == [
        ("A", "(no output)"), ("A1", "42"), ("A1a", "")]
    s = result.stats
    assert (s.nodes, s.model_calls, s.executions, s.completion_tokens) == (15, 5, 9, 150)
    assert s.value == pytest.approx(0.9) and s.wall_time_s > 0
    assert all(call.n == 3 and call.params.temperature == 0.7 for call in backend.calls)
    assert set(tree.pids()) == live_before  # every copy the search made is gone


def test_identical_samples_merge_into_one_node_that_counts_them(tree):
    live_before = set(tree.pids())
    result, search, _, _ = _run(tree, 0.0)  # merge is the default
    n = _by_label(search)
    # A1b says what A1a says, E2 runs what E1 runs: one node each, counting both samples
    assert "A1b" not in n and "E2" not in n and result.stats.nodes == 13  # 15 unmerged
    assert (n["A1a"].samples, n["E1"].samples, n["A1c"].samples) == (2, 2, 1)
    assert n["A1a"].share == pytest.approx(2 / 3) and n["A1c"].share == pytest.approx(1 / 3)
    a1 = priors([-0.1, -0.2, -0.3])
    assert n["A1a"].prior == pytest.approx(a1[0] + a1[1]) and n["A1a"].mean_logprob == pytest.approx(-0.15)
    # the merged answer still votes with both samples: same decision, same stop, one run fewer
    assert search.stopped == "early_stop" and result.answer == "@answer[42]"
    assert [(c.meta["answer"], c.support) for c in result.candidates] == [
        ("@answer[42]", 4), ("@answer[41]", 1), ("@answer[40]", 1)]
    assert result.stats.executions == 8
    # the shares reach the estimators: the path's shares, the step's own last
    state = search.state(n["F"])
    assert state.shares == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert search.state(n["E1"]).shares[-1] == pytest.approx(2 / 3)
    assert set(tree.pids()) == live_before


def test_exploration_order_and_trajectory_export(tree, tmp_path):
    path = tmp_path / "traj.jsonl"
    result, search, _, _ = _run(tree, 1.25, trajectory_path=str(path), merge=False)
    labels = {n.id: (n.step.thought if n.step else "root") for n in search.nodes}
    # c_puct = 1.25: the prior pulls the search into B once A's Q falls (iteration 5)
    assert [labels[i] for i in search.selections] == ["root", "A", "A1", "A1c", "B", "A1c3"]
    n = _by_label(search)
    assert (n["root"].visits, n["B"].visits) == (18, 4)
    assert n["B"].value_sum == pytest.approx(-0.8) and n["B3"].errors == 1
    records = read_jsonl(path)
    assert len(records) == len(search.nodes) == 19
    by_id = {r.node_id: r for r in records}
    for node in search.nodes:
        r = by_id[node.id]
        assert (r.visits, r.depth, r.final_answer) == (node.visits, node.depth, node.answer)
        assert r.value_sum == pytest.approx(node.value_sum)
        assert r.search_id == search.search_id
    a1a = by_id[n["A1a"].id]
    assert a1a.terminal and a1a.final_answer == "@answer[42]"
    roles = [m["role"] for m in a1a.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert a1a.messages[3]["content"] == "Observation:\n(no output)"
    assert json.loads(path.read_text().splitlines()[0])["format"] == "jda-trajectory@1"


def test_collection_rewards_error_limit_and_exhaustion(tree):
    """Reward +1 / -1 for the right answer; the third error on a path ends it."""
    def rule(call):
        answer = "@answer[42]" if call.depth == 0 else "@answer[41]"
        return [final(f"answer at {call.depth}", answer, -0.2),
                action(f"fail at {call.depth}", "1/0", -0.4)]

    strategy = MCTSStrategy(reward_fn=exact_reward("@answer[42]"), k=2)
    result = strategy.run(_request(budget=10),
                          RunContext(backend=ScriptedBackend(rule), executor=tree.root))
    search = strategy.last_search
    assert search.c_puct == 1.25  # collection mode explores
    n = _by_label(search)
    assert [(n[f"fail at {d}"].errors, n[f"fail at {d}"].reason) for d in range(3)] == [
        (1, None), (2, None), (3, "error_limit")]
    assert n["fail at 2"].value == -1.0 and max(x.depth for x in search.nodes) == 3
    assert [n[f"answer at {d}"].reward for d in range(3)] == [1.0, -1.0, -1.0]
    assert search.stopped == "exhausted" and result.stats.iterations == 3
    assert n["root"].exhausted and n["fail at 1"].exhausted
    # the majority is wrong here; selecting by value picks the rewarded answer
    assert [(c.meta["answer"], c.support) for c in result.candidates] == [
        ("@answer[41]", 2), ("@answer[42]", 1)]
    search.cfg = search.cfg.model_copy(update={"select": "value"})
    assert search.finish().answer == "@answer[42]"


def test_invalid_reply_is_an_error_the_model_can_recover_from(tree):
    rule = {(): ["Thought: no idea", action("set", "x = 5")],
            ("no idea",): [action("read", "print(globals().get('x', 'unset'))"),
                           final("f", "@answer[1]")]}
    strategy = MCTSStrategy(value=TableValue({"no idea": 0.5}), c_puct=0.0, k=2)
    result = strategy.run(_request(budget=2), RunContext(backend=ScriptedBackend(rule),
                                                         executor=tree.root))
    n = _by_label(strategy.last_search)
    invalid = n["no idea"]
    assert invalid.step.status == "invalid" and invalid.errors == 1 and not invalid.terminal
    assert "neither an Action" in invalid.observation
    # expanded from its parent's state (it ran nothing): x was set only in the sibling
    assert n["read"].observation == "unset" and n["read"].errors == 1
    assert result.answer == "@answer[1]"


def test_budget_in_iterations_and_tokens(tree):
    strategy = MCTSStrategy(value=VALUES, c_puct=0.0, early_stop=False)
    ctx = RunContext(backend=ScriptedBackend(SCRIPT), executor=tree.root)
    result = strategy.run(_request(budget=2), ctx)
    assert result.stats.iterations == 2 and strategy.last_search.stopped == "iterations"
    strategy = MCTSStrategy(value=VALUES, c_puct=0.0, token_budget=250)
    result = strategy.run(_request(budget=10), RunContext(backend=ScriptedBackend(SCRIPT),
                                                          executor=tree.root))
    assert result.stats.iterations == 2 and strategy.last_search.stopped == "tokens"


def test_cancel_ends_every_process(tree):
    started = threading.Event()
    cancel = threading.Event()
    rule = {(): [action("sleep", "import time; time.sleep(30)", -0.1),
                 action("ok", "y = 1", -0.2), action("sleep2", "import time; time.sleep(30)")],
            ("ok",): [action("deeper sleep", "import time; time.sleep(30)")]}

    def on_call(call):
        started.set()

    strategy = MCTSStrategy(value=TableValue({"ok": 1.0}), c_puct=0.0)
    ctx = RunContext(backend=ScriptedBackend(rule, on_call=on_call), executor=tree.root,
                     cancel=cancel)
    live_before = set(tree.pids())
    timer = threading.Timer(0.0, lambda: (started.wait(10), time.sleep(0.8), cancel.set()))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        strategy.run(_request(budget=10), ctx)
    assert time.monotonic() - t0 < 1.9  # well before the 2 s cell timeout
    timer.join()
    pids = [s.pid for s in tree.nodes.values() if s.pid and s is not tree.root]
    made = [p for p in pids if p not in live_before]
    assert made, "the search forked copies"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(p) for p in made):
        time.sleep(0.05)
    assert not any(_running(p) for p in made)
    assert tree.root.is_live and set(tree.pids()) == live_before


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_counts_in_words():
    from jupyter_data_agent.words import counted

    assert [counted(n, "node") for n in (0, 1, 2)] == ["0 nodes", "1 node", "2 nodes"]
    assert counted(0, "answer", none="no answers") == "no answers"
    assert counted(1, "answer", none="no answers") == "1 answer"
    assert counted(3, "DataFrame schema") == "3 DataFrame schemas"
    assert counted(2, "child", "children") == "2 children"


def test_group_answers_orders_by_votes_then_value():
    class N:
        samples = 1

        def __init__(self, a, v):
            self.answer, self.value = a, v

    groups = group_answers([N("@x[1]", .1), N("@x[2]", .9), N("@x[1.0]", .2), N("@x[2]", .3),
                            N("@x[3]", 1.0)])
    assert [(g.answer, g.votes) for g in groups] == [("@x[2]", 2), ("@x[1]", 2), ("@x[3]", 1)]


# ------------------------------------------------------------------ the magic

def test_magic_runs_mcts_with_a_budget(tmp_path):
    """``%%agent --strategy mcts --budget N`` in a real kernel against an OpenAI-protocol server."""
    from tests.kernel_helpers import run_cell, start_kernel, stop_kernel
    from tests.openai_server import OpenAITestServer

    def reply(req):
        return "```python\n# Step 1: count the rows.\nbig = df[df['a'] > 1]\nlen(big)\n```"

    with OpenAITestServer(reply=reply) as srv:
        env = {"JUPYTER_DATA_AGENT_BACKEND": "openai", "OPENAI_BASE_URL": srv.base_url,
               "OPENAI_API_KEY": "sk-test", "JUPYTER_DATA_AGENT_MODEL": "test-model",
               "JUPYTER_CONFIG_DIR": str(tmp_path)}
        km, kc = start_kernel(env)
        try:
            setup = run_cell(kc, "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\n"
                                 "%load_ext jupyter_data_agent")
            assert setup.status == "ok", setup
            run = run_cell(kc, "%%agent --strategy mcts --budget 5\nHow many rows have a above 1?")
            assert run.status == "ok" and not run.stderr, run
            assert run.next_input() == "# Step 1: count the rows.\nbig = df[df['a'] > 1]\nlen(big)"
            # Budget 5 x 3 completions; the vote's share (5) draws 3 first: 3 of 3 agree, short of the
            # stop posterior (0.94 < 0.95); 3 more that agree (6 of 6: 0.99) end the turn.
            assert "(mcts) · 6 candidates, chosen with 6 vote(s) · 2 model call(s)" in run.display_text()
            assert len(srv.requests) == 2
        finally:
            stop_kernel(km, kc)


# ------------------------------------------------------------------ real model

DABENCH = Path(__file__).parent / "data" / "dabench"


@pytest.mark.smollm
@pytest.mark.timeout(400)
def test_mcts_with_embedded_smollm2_on_a_dabench_question(tree):
    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.llm import create_backend, embedded_model_path

    if embedded_model_path() is None or not (DABENCH / "questions.jsonl").is_file():
        pytest.skip("embedded model or DABench data not available")
    q = next(json.loads(line) for line in (DABENCH / "questions.jsonl").open()
             if json.loads(line)["id"] == 683)
    table = str(DABENCH / "tables" / q["file_name"])
    backend = create_backend(Settings(backend="transformers"))
    request = TurnRequest(intent=q["question"], context=NotebookContext(),
                          options=MCTSOptions(iterations=2, k=2, vote_share=0.0),
                          sampling=SamplingPolicy(max_new_tokens=64, seed=0),
                          task=TaskInfo(constraints=q["constraints"], format=q["format"],
                                        files=(table,)))
    events = []
    t0 = time.monotonic()
    result = MCTSStrategy().run(request, RunContext(backend=backend, executor=tree.root,
                                                    events=events.append))
    s = result.stats
    assert s.iterations >= 1 and s.model_calls == s.iterations and s.nodes >= 2
    assert s.completion_tokens > 0 and s.wall_time_s > 0
    assert result.chosen is not None and any(e.kind == "progress" for e in events)
    print(f"\nsmollm mcts: {s} answer={result.answer!r} in {time.monotonic() - t0:.1f} s")
    assert tree.root.is_live
