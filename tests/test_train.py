"""Value-model training on a tiny random LM, trajectory and decision export, the CLI hook."""

from __future__ import annotations

import argparse

import pytest

from jupyter_data_agent.search.base import Candidate
from jupyter_data_agent.search.trajectories import (
    TrajectoryRecord,
    decision_records,
    export_decisions,
    path_histories,
    read_jsonl,
    write_jsonl,
)

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from jupyter_data_agent.search.value_net import ValueModel  # noqa: E402
from jupyter_data_agent.train import cli  # noqa: E402
from jupyter_data_agent.train.value_net import (  # noqa: E402
    TrainConfig,
    build_network,
    evaluate_loss,
    examples_from_records,
    normalize_q,
    train_value_model,
    trainable_state,
)

HEAD = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Task: mean of x"}]


def history(good: bool, i: int) -> list[dict]:
    step = "print(df.x.mean())" if good else "1/0"
    obs = f"{i}.5" if good else "Error: ZeroDivisionError"
    return HEAD + [{"role": "assistant", "content": f"Thought: step\nAction: {step}"},
                   {"role": "user", "content": f"Observation: {obs}"}]


def records() -> list[TrajectoryRecord]:
    """Synthetic trajectories: good states have Q = +0.8, erroring ones Q = -0.8."""
    return [TrajectoryRecord(messages=history(i % 2 == 0, i), depth=1, visits=5,
                             value_sum=4.0 if i % 2 == 0 else -4.0) for i in range(8)]


def config(tiny, out, **kw) -> TrainConfig:
    base = dict(trajectories=[], base=str(tiny), out=str(out), max_steps=16, batch_size=4,
                lr=1e-2, save_every=0, progress=False, max_length=64)
    base.update(kw)
    return TrainConfig(**base)


def test_targets_are_normalized_q_values():
    assert normalize_q([0.5, -1.0]) == [0.5, -1.0]
    assert normalize_q([4.0, -2.0]) == [1.0, -0.5]
    rs = records() + [TrajectoryRecord(messages=HEAD, depth=0, visits=0, value_sum=0.0)]
    ex = examples_from_records(rs)
    assert len(ex) == 8 and {e.target for e in ex} == {0.8, -0.8}


def test_training_lowers_the_loss_and_the_saved_model_reloads(tiny_model_dir, tmp_path):
    examples = examples_from_records(records())
    cfg = config(tiny_model_dir, tmp_path / "vm")
    torch.manual_seed(cfg.seed)
    net, tok = build_network(cfg)  # the same initial weights training starts from
    before = evaluate_loss(net, tok, examples, cfg.max_length)
    result = train_value_model(cfg, examples)
    assert result.steps == 16 and len(result.losses) == 16
    after = evaluate_loss(result.network, result.tokenizer, examples, cfg.max_length)
    assert after < before * 0.7, (before, after)
    vm = ValueModel.load(tmp_path / "vm")
    histories = [e.messages for e in examples]
    with torch.no_grad():
        from jupyter_data_agent.search.value_net import encode_history, pad_batch

        ids, mask = pad_batch([encode_history(tok, h, 64) for h in histories], tok.pad_token_id)
        expected = result.network.eval()(ids, mask).tolist()
    assert vm.predict(histories) == pytest.approx(expected, abs=1e-5)
    assert (tmp_path / "vm" / "adapter" / "adapter_config.json").is_file()


def test_resume_continues_exactly(tiny_model_dir, tmp_path):
    examples = examples_from_records(records())
    straight = train_value_model(config(tiny_model_dir, tmp_path / "a", max_steps=6), examples)

    class Stop(Exception):
        pass

    def crash(step, loss):
        if step == 5:
            raise Stop

    cfg = config(tiny_model_dir, tmp_path / "b", max_steps=6, save_every=2)
    with pytest.raises(Stop):
        train_value_model(cfg, examples, on_step=crash)
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir()) == ["step-2", "step-4"]
    cfg.resume = True
    resumed = train_value_model(cfg, examples)
    assert resumed.resumed_from == 4 and resumed.steps == 6
    assert resumed.losses == pytest.approx(straight.losses)
    a, b = trainable_state(straight.network), trainable_state(resumed.network)
    assert a.keys() == b.keys() and any("lora_A" in k for k in a)
    assert all(torch.allclose(a[k], b[k]) for k in a)


def test_init_continues_from_a_trained_model(tiny_model_dir, tmp_path):
    """--init starts from the trained adapter and head (the same predictions), then learns new targets."""
    first = examples_from_records(records())
    v1 = train_value_model(config(tiny_model_dir, tmp_path / "v1"), first)
    flipped = [type(e)(e.messages, -e.target) for e in first]  # new decisions disagree with v1
    cfg = config(tiny_model_dir, tmp_path / "v2", init=str(tmp_path / "v1"), lr=0.0, max_steps=1)
    net, tok = build_network(cfg)
    start = evaluate_loss(net, tok, first, cfg.max_length)
    assert start == pytest.approx(evaluate_loss(v1.network, v1.tokenizer, first, cfg.max_length), abs=1e-5)
    traj = tmp_path / "new.jsonl"
    write_jsonl(traj, [TrajectoryRecord(messages=e.messages, depth=1, visits=1, value_sum=e.target)
                       for e in flipped])
    rc = cli.main(["-t", str(traj), "--init", str(tmp_path / "v1"), "--out", str(tmp_path / "v2"),
                   "--max-steps", "16", "--lr", "1e-2", "--max-length", "64", "--no-progress"])
    assert rc == 0
    v2 = ValueModel.load(tmp_path / "v2")
    before = evaluate_loss(v1.network, v1.tokenizer, flipped, 64)
    after = evaluate_loss(v2.network, v2.tokenizer, flipped, 64)
    assert after < before * 0.7, (before, after)


def test_cli_trains_from_jsonl(tiny_model_dir, tmp_path, capsys):
    traj = tmp_path / "t.jsonl"
    write_jsonl(traj, records())
    rc = cli.main(["--trajectories", str(traj), "--base", str(tiny_model_dir), "--out",
                   str(tmp_path / "out"), "--max-steps", "2", "--max-length", "64",
                   "--no-progress"])
    assert rc == 0 and "trained 2 steps on 8 examples" in capsys.readouterr().out
    assert len(ValueModel.load(tmp_path / "out").predict([HEAD])) == 1
    parser = argparse.ArgumentParser(prog="jupyter-data-agent")
    sub = parser.add_subparsers(dest="command")
    cli.add_parser(sub)
    args = parser.parse_args(["train-value", "-t", "x.jsonl", "--base", "m", "--out", "o",
                              "--resume", "--save-every", "5"])
    assert args.func is cli.run and args.resume and args.save_every == 5
    assert cli.run(argparse.Namespace(**{**vars(args), "trajectories": [str(tmp_path / "no.jsonl")]})) == 2


def test_decisions_become_rewards_for_the_path(tmp_path):
    leaf = HEAD + [
        {"role": "assistant", "content": "Thought: a\nAction:\n```python\nx = 1\n```"},
        {"role": "user", "content": "Observation:\n(no output)"},
        {"role": "assistant", "content": "Thought: b\nAction:\n```python\nx\n```"},
        {"role": "user", "content": "Observation:\n1"},
        {"role": "assistant", "content": "Thought: c\nFinal Answer: @x[1]"}]
    assert [len(h) for h in path_histories(leaf)] == [4, 6, 7]
    cand = Candidate(code="x = 1\nx", meta={"messages": leaf, "node_ids": ["n1", "n4", "n9"],
                                            "answer": "@x[1]", "search_id": "s1"})
    recs = decision_records(cand, accepted=False)
    assert [(r.node_id, r.parent_id, r.depth, r.q, r.terminal) for r in recs] == [
        ("n1", None, 1, -1.0, False), ("n4", "n1", 2, -1.0, False), ("n9", "n4", 3, -1.0, True)]
    assert recs[-1].terminal_reward == -1.0 and recs[-1].final_answer == "@x[1]"
    out = tmp_path / "decisions.jsonl"
    assert export_decisions(out, [(cand.to_json(), True), (cand, False)]) == 6
    back = read_jsonl(out)
    assert [r.q for r in back] == [1.0] * 3 + [-1.0] * 3 and back[0].source == "decision"
    assert examples_from_records(back)[2].target == 1.0
