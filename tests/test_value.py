"""Value estimators: the heuristic's rules, the LLM judge, the value model (tiny random LM)."""

from __future__ import annotations

import pytest

from jupyter_data_agent.search.base import SearchStats, TraceStep
from jupyter_data_agent.search.estimators import (
    HeuristicValue,
    LLMJudgeValue,
    NodeState,
    ZeroValue,
    resolve_estimator,
)
from tests.scripted_backend import ScriptedBackend

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Task: mean?"}]


def state(*steps: TraceStep, fmt: str = "") -> NodeState:
    return NodeState(messages=MSGS, steps=list(steps), format=fmt, depth=len(steps))


def ok(code="print(1)", out="1"):
    return TraceStep("t", code, out, "ok")


ERR = TraceStep("t", "1/0", "Error: ZeroDivisionError: division by zero", "error")
EMPTY = TraceStep("t", "x = 1", "(no output)", "ok")


def answer(a="@a[1]"):
    return TraceStep("t", status="answer", answer=a)


def test_heuristic_rules():
    h = HeuristicValue()
    assert h.score(state(ok())) == pytest.approx(0.1)
    assert h.score(state(EMPTY)) == pytest.approx(-0.1)
    assert h.score(state(ERR)) == pytest.approx(-0.5)
    assert h.score(state(TraceStep("t", status="invalid"))) == pytest.approx(-0.6)
    # answers: well formed and grounded > well formed only > malformed (a tag is missing);
    # shorter answers are preferred (-0.02 per step)
    assert h.score(state(ok(), answer(), fmt="@a[v]")) == pytest.approx(0.6 - 0.04)
    assert h.score(state(answer(), fmt="@a[v]")) == pytest.approx(0.2 - 0.02)
    assert h.score(state(ok(), answer("@b[1]"), fmt="@a[v]")) == pytest.approx(-0.2 - 0.04)
    # repeating a cell, or printing the same output again, is no progress
    assert h.score(state(ok(), ok())) == pytest.approx(0.1 - 0.3)
    assert h.score(state(ok(), ok(code="print(2-1)"))) == pytest.approx(0.1 - 0.3)
    # earlier errors weigh on the path
    assert h.score(state(ERR, ok(code="y = 2", out="2"))) == pytest.approx(0.1 - 0.1)
    assert h.score(state(*[ERR] * 30)) == -1.0  # clipped
    assert h.estimate([state(ok()), state(ERR)]) == [h.score(state(ok())), h.score(state(ERR))]


def test_llm_judge_rates_and_falls_back():
    replies = iter(["7", "no idea"])
    backend = ScriptedBackend(lambda call: [next(replies)])
    judge = LLMJudgeValue(backend)
    stats = SearchStats()
    values = judge.estimate([state(ok()), state(ERR)], stats)
    assert values[0] == pytest.approx(0.4)
    assert values[1] == pytest.approx(HeuristicValue().score(state(ERR)))
    assert stats.model_calls == 2
    assert backend.calls[0].params.temperature == 0.0
    assert "Rate the steps above" in backend.calls[0].messages[-1]["content"]


def test_resolve_estimator(tmp_path, monkeypatch):
    from jupyter_data_agent.search.estimators import ENV_VALUE_MODEL
    from jupyter_data_agent.search.features import EvidenceValue

    monkeypatch.delenv(ENV_VALUE_MODEL, raising=False)
    assert isinstance(resolve_estimator(None), EvidenceValue)  # the shipped evidence estimator
    assert isinstance(resolve_estimator("heuristic"), HeuristicValue)
    assert isinstance(resolve_estimator("none"), ZeroValue)
    assert isinstance(resolve_estimator("judge", ScriptedBackend(lambda c: ["5"])), LLMJudgeValue)
    h = HeuristicValue(answer=0.9)
    assert resolve_estimator(h) is h
    with pytest.raises(ValueError, match="Unknown value estimator"):
        resolve_estimator(str(tmp_path / "missing"))


# ------------------------------------------------------------------ value model

@pytest.fixture(scope="module")
def value_dir(tiny_model_dir, tmp_path_factory):
    """A value model directory with a fresh head and no adapter."""
    from jupyter_data_agent.search.value_net import ValueHead, ValueModelConfig, save_head

    d = tmp_path_factory.mktemp("value-model")
    torch.manual_seed(1)
    head = ValueHead(32)
    torch.nn.init.normal_(head.linear.weight, std=2.0)
    save_head(head, d)
    ValueModelConfig(base=str(tiny_model_dir), adapter=None, hidden_size=32, max_length=64).save(d)
    return d


def test_value_model_loads_and_scores_in_range(value_dir):
    from jupyter_data_agent.search.value_net import ValueModel

    vm = resolve_estimator(str(value_dir))
    assert isinstance(vm, ValueModel)
    histories = [MSGS + [{"role": "assistant", "content": "Thought: t\nAction: df.head()"}], MSGS]
    batch = vm.predict(histories)
    assert all(-1.0 < v < 1.0 for v in batch) and batch[0] != batch[1]
    # padding is masked out of the mean: scoring alone or in a padded batch agrees
    assert [vm.predict([h])[0] for h in histories] == pytest.approx(batch, abs=1e-5)
    assert vm.estimate([NodeState(messages=histories[0])]) == pytest.approx(batch[:1], abs=1e-5)
    assert ValueModel.load(value_dir).predict(histories) == pytest.approx(batch, abs=1e-6)


def test_history_is_left_truncated_keeping_the_task(tiny_model_dir):
    from jupyter_data_agent.search.value_net import encode_history, load_tokenizer

    tok = load_tokenizer(str(tiny_model_dir))
    long = MSGS + [{"role": "assistant", "content": "df.head() " * 200},
                   {"role": "user", "content": "Observation: END"}]
    ids = encode_history(tok, long, 64)
    head = tok("<|system|>\nsys\n<|user|>\nTask: mean?\n", add_special_tokens=False)["input_ids"]
    tail = tok("".join(f"<|{m['role']}|>\n{m['content']}\n" for m in long[2:]),
               add_special_tokens=False)["input_ids"]
    assert len(ids) == 64
    assert ids[1: 1 + len(head)] == head  # bos, then the task, always
    assert ids[1 + len(head):] == tail[-(63 - len(head)):]  # then the newest tokens
    assert encode_history(tok, MSGS, 64)[1:] == head
