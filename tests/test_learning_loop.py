"""Learning from use: decisions store -> training records -> train-value -> the server serves it.

A real SQLite store, a tiny randomly initialized LM as the value model's base
(tests/tiny_model.py), the real training loop, and a real Jupyter server
that picks up the newest trained version on "Reload value model".
"""

from __future__ import annotations

import argparse
import json

import pytest

from jupyter_data_agent.search.features import FEATURES
from jupyter_data_agent.store.decisions import DecisionRecord, DecisionStore
from jupyter_data_agent.train.decisions import decision_trajectories

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

OK = {"status": "ok", "outputs": [{"output_type": "execute_result", "data": {"text/plain": "2.5"}}]}
ERR = {"status": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
       "outputs": [{"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
                    "traceback": []}]}


def one_cell(i: int, good: bool, decision: str | None = None) -> DecisionRecord:
    code = "df['x'].mean()" if good else "df['x'].sum() / 0"
    return DecisionRecord(
        decision=decision or ("accepted" if good else "rejected"), turn_id=f"turn-{i}", candidate_index=0,
        intent="What is the mean of x?", strategy="direct", model="test-model",
        prompt="# In[ ]:\ndf = pd.read_csv('x.csv')\n# Mean of x?\n", code=code, final_code=code,
        candidate={"code": code, "steps": [{"number": 1, "explanation": "Average x", "code": code}],
                   "result": OK if good else ERR, "meta": {}},
        complete=True)


def search_path(i: int) -> DecisionRecord:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Task: mean of x"},
                {"role": "assistant", "content": "Thought: load\nAction:\n```python\nx = 1\n```"},
                {"role": "user", "content": "Observation:\n(no output)"},
                {"role": "assistant", "content": "Thought: done\nFinal Answer: 1"}]
    return DecisionRecord(decision="rejected", turn_id=f"search-{i}", strategy="mcts",
                          candidate={"code": "x = 1", "meta": {"messages": messages, "node_ids": ["n1", "n2"]}},
                          complete=True)


def test_decisions_become_training_records():
    rows = [one_cell(0, True), one_cell(1, False), one_cell(2, True, "edited"), search_path(3)]
    records = decision_trajectories(rows)
    # One step for a one-cell candidate, one per node of a search path; edits are not labels.
    assert [(r.search_id, r.value_sum) for r in records] == [
        ("turn-0", 1.0), ("turn-1", -1.0), ("search-3", -1.0), ("search-3", -1.0)]
    first = records[0].messages
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user"]
    assert "df = pd.read_csv" in first[1]["content"]  # the turn's prompt is the task
    assert "Thought: Average x" in first[2]["content"] and "df['x'].mean()" in first[2]["content"]
    assert first[3]["content"] == "Observation:\n2.5"
    assert "ZeroDivisionError" in records[1].messages[3]["content"]
    assert records[0].extra["decision"] == "accepted" and records[0].source == "decision"


def test_the_decisions_command_exports_and_summarizes(tmp_path, capsys):
    from jupyter_data_agent import cli

    store = DecisionStore(tmp_path / "decisions.sqlite")
    rows = [one_cell(0, True), one_cell(1, False), one_cell(2, True, "edited"), search_path(3)]
    for row in rows:
        store.add(row)
    assert cli.main(["decisions", "stats", "--store", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "4 decisions" in out and "accepted 1" in out and "mcts 1" in out
    target = tmp_path / "train.jsonl"
    assert cli.main(["decisions", "export", "--store", str(store.path), "--out", str(target)]) == 0
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(lines) == len(decision_trajectories(rows)) == 4 and lines[0]["source"] == "decision"
    assert cli.main(["decisions", "stats", "--store", str(tmp_path / "none.sqlite")]) == 2


# -- the loop through a real server -------------------------------------------------------


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    from tests.test_server import search_replies

    return model_server_factory(reply=search_replies)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    from tests.conftest import agent_server_config

    return agent_server_config(model_server, monkeypatch)


def _on_server_loop(fn):
    from tests.test_server import on_server_loop

    return on_server_loop(fn)


@_on_server_loop
async def test_train_on_the_store_and_the_server_serves_the_new_model(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                     tiny_model_dir, tmp_path):
    from jupyter_data_agent.store.value_models import value_models_dir
    from jupyter_data_agent.train import cli
    from jupyter_data_agent.train.value_net import TrainConfig, build_network, evaluate_loss, load_examples

    reply = json.loads((await jp_fetch("jupyter-data-agent", "value-model", "reload", method="POST",
                                       body="{}")).body)
    assert reply["value_model"] == "evidence"  # nothing trained yet: the shipped evidence estimator

    store = DecisionStore(tmp_path / "decisions.sqlite")
    for i in range(8):
        store.add(one_cell(i, good=i % 2 == 0))
    examples = load_examples([str(store.path)])
    assert len(examples) == 8 and {e.target for e in examples} == {1.0, -1.0}
    cfg = TrainConfig(trajectories=[], base=str(tiny_model_dir), out="", max_length=96)
    torch.manual_seed(cfg.seed)
    before = evaluate_loss(*build_network(cfg), examples, cfg.max_length)

    # train-value with its defaults: the next version in the Jupyter data dir.
    rc = cli.main(["-t", str(store.path), "--base", str(tiny_model_dir), "--max-steps", "16",
                   "--lr", "1e-2", "--max-length", "96", "--no-progress"])
    assert rc == 0
    version = value_models_dir() / "v1"
    from jupyter_data_agent.search.value_net import ValueModel

    trained = ValueModel.load(version)
    after = evaluate_loss(trained.network, trained.tokenizer, examples, cfg.max_length)
    assert after < before * 0.7, (before, after)

    reply = json.loads((await jp_fetch("jupyter-data-agent", "value-model", "reload", method="POST",
                                       body="{}")).body)
    assert reply["value_model"] == str(version)

    # A Search turn is now guided by it, and says so.
    from tests.test_server import post_turn, start_kernel, stream_events

    kernel_id, _km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="mcts", options={"budget": 3})
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
    finally:
        kc.stop_channels()
    assert events[-1]["type"] == "done", events[-1]
    assert events[-1]["data"]["result"]["stats"]["estimator"] == f"value model {version}"


# -- the loop, measured (bench loop): simulated user -> real server API -> store -> train -> served

@pytest.mark.parametrize("kind", ["features", "lm"])
def test_bench_loop_records_trains_and_serves(kind, tiny_model_dir, tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from jupyter_data_agent_bench import loop

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "untouched"))  # the loop uses its own data dir
    data = Path(__file__).parent / "data" / "dabench"
    parser = argparse.ArgumentParser()
    loop.add_arguments(parser)
    out = tmp_path / "loop"
    argv = ["--data", str(data), "--references", str(data / "references.jsonl"), "--p", "0.5",
            "--budget-calls", "9", "--train-limit", "1", "--test-limit", "2", "--out", str(out)]
    if kind == "lm":
        argv += ["--kind", "lm", "--base", str(tiny_model_dir), "--max-steps", "2", "--max-length", "96"]
    assert loop.main(parser.parse_args(argv)) == 0
    report = json.loads((out / "loop.json").read_text())
    # Every candidate of the train task was decided through POST decisions, with the server's record.
    rows = list(DecisionStore(report["decisions"]["store"]).records())
    assert len(rows) == report["decisions"]["rows"] >= 1 and all(r.complete for r in rows)
    assert {r.decision for r in rows} <= {"accepted", "rejected"} and all(r.strategy == "mcts" for r in rows)
    # ... with what the evidence estimator read of each candidate's node (search.features)
    assert all(r.features is not None and set(r.features) == set(FEATURES) for r in rows)
    assert report["after"].endswith("/v1") and report["served_after_reload"] == report["after"]
    model = "evidence" if kind == "features" else "value model"
    assert report["estimator_of_next_turn"] == f"{model} {report['after']}"
    before = f"{model} before (evidence)" if kind == "features" else None
    assert set(report["auc"]) == {"heuristic", "search value (evidence (default))", "search Q (MCTS)",
                                  f"{model} after (+ decisions)"} | ({before} if before else set())
    assert all(set(v) == {"all", "answered"} for v in report["auc"].values())
    assert report["candidates"]["total"] >= 2 and report["candidates"]["with_features"] == report["candidates"]["total"]
    if kind == "features":  # the served version is the shipped model moved by the decisions
        from jupyter_data_agent.search.features import EvidenceModel

        trained = EvidenceModel.load(report["after"])
        assert trained.meta["decisions"] == len(rows) and trained.meta["init"] == "evidence"
    assert "AUC of right vs wrong candidates" in (out / "summary.md").read_text()
    assert not (tmp_path / "untouched").exists()


def test_auc_counts_ties_as_half():
    from jupyter_data_agent_bench.loop import auc

    assert auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auc([0.1], [0.9]) == 0.0
    assert auc([0.5], [0.5, 0.4]) == 0.75
    assert auc([], [0.1]) is None
