"""Search contains the vote (``search.branching``): real turns over real kernel copies.

The model is scripted; everything else is the product's: the vote's draws, the
copies that run each cell, the continuation prompts, the weighted majority.
"""

from __future__ import annotations

import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.kernel.results import ExecResult, OutputItem
from jupyter_data_agent.prompts.parse import parse_chat
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.base import Candidate
from jupyter_data_agent.search.branching import answer_model, estimator_signal, next_branch, path_shares
from jupyter_data_agent.search.estimators import HeuristicValue
from jupyter_data_agent.search.features import EvidenceModel, EvidenceValue, load_evidence_value
from jupyter_data_agent.search.generate import CONTINUE_WORDS
from jupyter_data_agent.search.mcts import MCTSStrategy
from jupyter_data_agent.search.options import MCTSOptions, PromptPolicy
from tests.scripted_backend import Reply, ScriptedBackend, start_tree, stop_tree

STEP1 = "# Step 1: Keep the big ones\nbig = table[table['x'] > 1]"
RIGHT2 = "# Step 2: Count them\nprint(len(big))"
WRONG2 = "# Step 2: Sum them\nprint(big['x'].sum())"
OTHER1 = "# Step 1: Keep all\nbig = table"


def cell(*steps: str) -> str:
    return "```python\n" + "\n".join(steps) + "\n```"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    km, kc, t = start_tree(tmp_path_factory.mktemp("branching"), timeout_s=20, setup=(
        "import pandas as pd\ntable = pd.DataFrame({'x': [1, 2, 3, 4]})"))
    yield t
    stop_tree(km, kc, t)


def kept(call) -> list:
    """The steps a continuation prompt asked to keep (None: a fresh sample)."""
    text = call.messages[-1]["content"]
    at = text.rfind(CONTINUE_WORDS.split("{")[0])
    return None if at < 0 else parse_chat(text[at:]).steps


def run_search(tree, rule, *, budget: int = 24, **options):
    backend = ScriptedBackend(rule)
    request = TurnRequest(intent="How many rows have x above 1?", context=NotebookContext(),
                          options=MCTSOptions(iterations=budget // 3, k=3, probes=False, **options),
                          prompt=PromptPolicy(max_prompt_tokens=4000))
    events = []
    result = get_strategy("mcts").run(request, RunContext(backend=backend, executor=tree.root,
                                                          events=events.append))
    return result, backend, events


def test_a_unanimous_first_round_stops_as_the_vote_does(tree):
    result, backend, _ = run_search(tree, lambda call: [cell(STEP1, RIGHT2)])
    assert [c.n for c in backend.calls] == [4]  # the adaptive vote's first round, nothing after
    assert result.stats.samples == 4 and result.stats.unspent == 20
    assert result.chosen.result.stream("stdout").strip() == "3" and result.stats.classes == [4]
    assert result.strategy == "mcts"


def test_the_rest_completes_the_step_the_samples_agree_on(tree):
    # The first round agrees on step 1 and parts on step 2 (2 right, 2 wrong): the vote is open.
    # Completions that keep step 1 and are asked for afterwards get it right; fresh samples split.
    def rule(call):
        steps = kept(call)
        if steps is not None:
            assert [s.code for s in steps] == ["big = table[table['x'] > 1]"]
            return [cell(STEP1, RIGHT2)]
        return [cell(STEP1, RIGHT2), cell(STEP1, WRONG2)]

    result, backend, events = run_search(tree, rule, budget=12)
    continued = [c for c in backend.calls if kept(c) is not None]
    assert continued, "no completion kept the agreed step"
    assert sum(c.n for c in backend.calls) <= 12 and result.stats.samples <= 12
    assert result.chosen.result.stream("stdout").strip() == "3"
    assert result.stats.classes[0] > result.stats.classes[1]
    assert any("branching" in getattr(e, "message", "") for e in events)
    assert all(c.meta.get("kept_steps") == 1 for c in result.candidates[4:])


def test_a_branch_that_raised_gets_one_fix_as_in_the_vote(tree):
    raises = cell(STEP1, "# Step 2: Count them\nprint(len(bigg))")

    def rule(call):
        if "Running that cell raised" in call.messages[-1]["content"]:
            return [cell(STEP1, RIGHT2)]
        if kept(call) is not None:
            return [raises]
        return [cell(STEP1, RIGHT2), cell(STEP1, WRONG2)]

    result, backend, _ = run_search(tree, rule, budget=12)
    fixes = [c for c in result.candidates if c.repaired]
    assert fixes and all(c.result.ok and c.result.stream("stdout").strip() == "3" for c in fixes)
    raised = [c for c in result.candidates if c.result is not None and not c.result.ok]
    assert raised and all("NameError" in c.result.error_line() for c in raised)
    assert sum(c.n for c in backend.calls) <= 12 and result.chosen.result.stream("stdout").strip() == "3"


def test_where_the_first_step_parts_without_a_lead_it_samples_afresh(tree):
    # Step 1 parts 2 / 2 (no clear lead): the next completions keep nothing (fresh samples).
    def rule(call):
        if call.index == 0:
            return [cell(STEP1, RIGHT2), cell(OTHER1, RIGHT2)]
        return [cell(STEP1, RIGHT2)]

    result, backend, _ = run_search(tree, rule, budget=9)
    assert len(backend.calls) >= 2 and kept(backend.calls[1]) is None
    assert sum(c.n for c in backend.calls) <= 9
    assert result.chosen.result.stream("stdout").strip() == "3"


def test_never_more_completions_than_the_budget(tree):
    # Every sample a different answer: the vote never decides, the budget ends the turn.
    answers = iter(range(1000))

    def rule(call):
        return [cell(STEP1, f"# Step 2: Say a number\nprint({next(answers)})") for _ in range(call.n)]

    result, backend, _ = run_search(tree, rule, budget=9)
    assert sum(c.n for c in backend.calls) == 9 == result.stats.samples
    assert result.stats.unspent == 0 and len(result.candidates) == 9


def test_the_tree_alone_is_still_there(tree):
    result, backend, _ = run_search(tree, lambda call: ["Thought: it is 3\nFinal Answer: 3"], budget=6,
                                    vote_share=0.0)
    assert result.answer == "3" and result.stats.iterations >= 1


def ok(stdout: str) -> ExecResult:
    return ExecResult(status="ok", outputs=[OutputItem("stream", name="stdout", text=stdout)])


def candidate(code: str, out: str) -> Candidate:
    parsed = parse_chat(cell(code))
    return Candidate(code=parsed.code, steps=parsed.steps, result=ok(out))


def test_next_branch_and_shares():
    a = [candidate(f"{STEP1}\n{RIGHT2}", "3") for _ in range(5)]
    b = [candidate(f"{STEP1}\n{WRONG2}", "9")]
    c = [candidate(f"{OTHER1}\n{RIGHT2}", "4")]
    # 6 vs 1 on step 1 leads (posterior 0.96 >= 0.8); 5 vs 1 on step 2 too: resample step 2, keeping step 1.
    branch = next_branch(a + b + c, 0.8)
    assert branch.why == "leads" and [s.code for s in branch.steps] == ["big = table[table['x'] > 1]"]
    # Step 2 without a clear lead (5 vs 1 is 0.94 < 0.95): there, keeping step 1.
    assert [s.code for s in next_branch(a + b + c, 0.95).steps] == ["big = table[table['x'] > 1]"]
    # A commit no lead reaches: it stops where the samples part (step 1).
    assert next_branch(a + b + c, 0.999).steps == [] and next_branch(a + b + c, 0.999).why == "parted"
    assert path_shares(b[0], a + b + c) == pytest.approx([6 / 7, 1 / 6])


def test_the_estimator_weighs_only_as_far_as_its_auc():
    shipped = load_evidence_value()
    # The shipped estimator weighs answers with its answer model, fitted on Search's answers (the
    # node model ranks them no better than chance, and would get no weight).
    assert shipped.answers is not None and answer_model(shipped) is shipped.answers
    assert shipped.answers.meta["answer_auc"] >= 0.75 > shipped.model.meta["answer_auc"]
    assert estimator_signal(shipped) == pytest.approx(2 * shipped.answers.meta["answer_auc"] - 1)
    model = load_evidence_value().model  # a trained features model: its own AUC among answers
    model.meta = {**model.meta, "answer_auc": 0.75}
    assert estimator_signal(EvidenceValue(model)) == pytest.approx(0.5)
    model.meta = {**model.meta, "answer_auc": 0.4}
    assert estimator_signal(EvidenceValue(model)) == 0.0
    assert estimator_signal(HeuristicValue()) == 0.0


def logprob_model(auc: float) -> EvidenceModel:
    """An answer model that reads only the mean log-prob, with a measured AUC among answers."""
    names = ["logprob"]
    return EvidenceModel(names, [-0.4], [0.1], [3.0], 0.0, {"answer_auc": auc})


@pytest.mark.parametrize("auc", [0.9, 0.5])
def test_the_answer_model_weighs_in_the_pick_as_far_as_its_auc(tree, auc):
    """A wrong answer drawn 4 times at a low log-prob, the right one twice at a high one: the
    answer model (log-prob alone) carries the right one where its AUC gives it weight; without
    weight the pick is the vote's."""
    drawn = iter(range(100))

    def rule(call):
        return [Reply(cell(STEP1, RIGHT2), -0.1) if i in (1, 4) else Reply(cell(STEP1, WRONG2), -0.7)
                for i in (next(drawn) for _ in range(call.n))]

    estimator = EvidenceValue(load_evidence_value().model, answers=logprob_model(auc))
    backend = ScriptedBackend(rule)
    request = TurnRequest(intent="How many rows have x above 1?", context=NotebookContext(),
                          options=MCTSOptions(iterations=2, k=3, probes=False),
                          prompt=PromptPolicy(max_prompt_tokens=4000))
    result = MCTSStrategy(value=estimator).run(request, RunContext(backend=backend, executor=tree.root))
    outputs = [c.result.stream("stdout").strip() for c in result.candidates]
    assert sorted(outputs) == ["3"] * 2 + ["9"] * 4 and sorted(result.stats.classes) == [2, 4]
    right = [c for c in result.candidates if c.result.stream("stdout").strip() == "3"]
    assert all(c.score > 0.5 for c in right)  # the answer model's value, 2 P - 1
    assert result.chosen.result.stream("stdout").strip() == ("3" if auc > 0.5 else "9")
