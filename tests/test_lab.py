"""The strategy lab: the simulated policy is deterministic, its wrong steps are plausible, and
the lab tells right from wrong (p = 1: every strategy scores; p = 0: none does) through the
product's pipeline in real kernels."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

from jupyter_data_agent.llm.base import ChatMessage, Prompt, SamplingParams
from jupyter_data_agent.prompts.react import SYSTEM
from jupyter_data_agent_bench import lab
from jupyter_data_agent_bench.policy import PolicyConfig, SimulatedPolicy, table_columns, wrong_steps
from jupyter_data_agent_bench.references import RefStep, load_references, verify

DATA = Path(__file__).parent / "data" / "dabench"
REFS = DATA / "references.jsonl"


def test_the_fixture_references_score_1():
    rows = verify(DATA, load_references(REFS))
    assert [r["correct"] for r in rows] == [True, True, True], rows


def test_wrong_steps_are_distinct_plausible_mutations():
    step = RefStep("Mean fare of adults", "adults = df[df['Age'] > 18]\nprint(f\"@mean[{adults['Fare'].mean():.2f}]\")")
    pool = wrong_steps(step, ["Age", "Fare", "Pclass"], 3, random.Random(0))
    codes = [s.code for s in pool]
    assert len(codes) == len(set(codes)) == 3 and step.code not in codes
    assert any("'Age_'" in c or "'age_'" in c or "_'" in c for c in codes)  # a runtime error is one of them


def _policy(p: float, seed: int) -> SimulatedPolicy:
    ref = load_references(REFS)[18]
    return SimulatedPolicy(ref, PolicyConfig(p=p, seed=seed),
                           table_columns(DATA / "tables" / "unemployement_industry.csv"))


def test_the_policy_is_deterministic_under_a_seed_and_answers_both_formats():
    cell = Prompt.chat([ChatMessage("user", "mean and sd of Mar.2019?")])
    react = Prompt.chat([ChatMessage("system", SYSTEM), ChatMessage("user", "Task: mean and sd")])
    params = SamplingParams(n=4, temperature=0.7)
    runs = [[c.text for c in _policy(0.5, 7).generate(pr, params)] for pr in (cell, react) for _ in range(2)]
    assert runs[0] == runs[1] and runs[2] == runs[3]
    assert runs[0] != [c.text for c in _policy(0.5, 8).generate(cell, params)]
    assert runs[0][0].startswith("```python\n# Step 1: ") and runs[0][0].count("# Step ") == 6
    assert runs[2][0].startswith("Thought: ") and "Action:\n```python" in runs[2][0]
    right = _policy(1.0, 0).generate(cell, SamplingParams(logprobs=True))[0]
    wrong = _policy(0.0, 0).generate(cell, SamplingParams(logprobs=True))[0]
    assert right.mean_logprob > wrong.mean_logprob  # informative (noise aside, on average)


def lab_args(tmp_path, *argv: str, ids=(24, 683)) -> argparse.Namespace:
    """The lab's arguments on the fixture tasks ``ids`` (their references only)."""
    refs = tmp_path / "refs.jsonl"
    refs.write_text("".join(line + "\n" for line in REFS.read_text().splitlines()
                            if json.loads(line)["id"] in ids))
    parser = argparse.ArgumentParser()
    lab.add_arguments(parser)
    return parser.parse_args(["--data", str(DATA), "--references", str(refs), "--split", "all",
                              "--out", str(tmp_path / "lab"), "--no-progress", *argv])


@pytest.mark.parametrize("p, expected", [(1.0, 100.0), (0.0, 0.0)])
def test_the_lab_tells_right_from_wrong(tmp_path, p, expected):
    out = tmp_path / "lab"
    args = lab_args(tmp_path, "--p", str(p), "--strategies", "direct,vote:4,react,mcts:heuristic",
                    "--budget-calls", "18")
    assert lab.main(args) == 0
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    for strategy in ("direct", "vote:4", "react", "mcts:heuristic"):
        mine = [r for r in rows if r["strategy"] == strategy]
        assert 100.0 * sum(r["correct"] for r in mine) / len(mine) == expected, mine
        assert all(r["samples"] <= 18 for r in mine)
    assert f"p = {p:g}" in (out / "summary.md").read_text()


def test_collect_writes_every_node_with_the_tasks_reward(tmp_path):
    from jupyter_data_agent.search.trajectories import read_jsonl
    from jupyter_data_agent.train.value_net import examples_from_records
    from jupyter_data_agent_bench.dabench import load_tasks
    from jupyter_data_agent_bench.dabench_score import dabench_reward

    traj = tmp_path / "traj.jsonl"
    args = lab_args(tmp_path, "--p", "0.5", "--strategies", "mcts", "--budget-calls", "60", "--collect", str(traj))
    assert lab.main(args) == 0
    records = read_jsonl(traj)
    assert {r.task_id for r in records} == {"24", "683"}
    assert [r.depth for r in records if r.status == "root"] == [0, 0]
    # Every final answer carries the task's reward: +1 when the benchmark scores it right, else -1.
    _, labels = load_tasks(DATA)
    answers = [r for r in records if r.status == "answer"]
    assert {r.terminal_reward for r in answers} == {1.0, -1.0}, answers
    for r in answers:
        assert r.terminal_reward == dabench_reward(labels[int(r.task_id)], r.task_id)(r.final_answer)
    assert examples_from_records(records)  # train-value's input
    with pytest.raises(SystemExit):  # collection runs mcts only
        lab.main(lab_args(tmp_path, "--strategies", "vote:4", "--collect", str(traj)))


def test_strategy_specs_carry_their_options():
    assert lab.strategy_run("vote:8", 24) == ("vote", 8, {"adaptive": False})
    assert lab.strategy_run("vote:8:adaptive", 24) == ("vote", 8, {"adaptive": True})
    assert lab.strategy_run("vote:8:adaptive=0.93", 4) == ("vote", 4, {"adaptive": True, "stop_posterior": 0.93})
    name, iterations, opts = lab.strategy_run("mcts:evidence:mean:unsure=0.2:nomerge", 24)
    assert name == "mcts"
    assert (opts["value"], opts["backup"], opts["unsure"], opts["merge"]) == ("evidence", "mean", 0.2, False)
    assert iterations == 24 // opts["k"]
    with pytest.raises(ValueError, match="unknown mcts flag"):
        lab.strategy_run("mcts:evidence:deep", 24)


def test_answers_train_the_answer_model_task_by_task(tmp_path, capsys):
    """lab --answers keeps each voting candidate of Search (features, text, support, the pick), and
    bench.answer_model fits the pick's answer model on them, its AUC measured with each task held out."""
    from jupyter_data_agent.search.features import EvidenceModel
    from jupyter_data_agent_bench import answer_model

    answers = tmp_path / "answers.jsonl"
    args = lab_args(tmp_path, "--p", "0.5", "--seeds", "0,1", "--strategies", "mcts:evidence",
                    "--budget-calls", "12", "--logprob-gap", "0.3", "--answers", str(answers))
    assert lab.main(args) == 0
    rows = answer_model.read_answers([str(answers)])
    assert rows and {r["id"] for r in rows} == {24, 683}
    assert all(r["features"]["answered"] == 1.0 and r["support"] >= 1 and isinstance(r["answer"], str)
               for r in rows)
    turns = {(r["id"], r["seed"]) for r in rows}
    assert sum(r["picked"] for r in rows) <= len(turns)
    assert "AUC among Search's answers" in (tmp_path / "lab" / "summary.md").read_text()
    out = tmp_path / "answer_model.json"
    assert answer_model.main(["--answers", str(answers), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "task held out" in printed and "| gap | p | budget |" in printed
    model = EvidenceModel.load(out)
    assert model.meta["examples"] == len(rows) and 0.0 <= model.meta["answer_auc"] <= 1.0
    assert "2 tasks" in model.meta["answer_auc_source"]
