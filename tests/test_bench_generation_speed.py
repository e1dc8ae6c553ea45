"""The generation-speed bench (``python -m jupyter_data_agent_bench.generation_speed``) at a tiny size.

Its structure only: timings are noise at this size and on shared CI machines; the speed
claims live in the bench's own runs (docs/benchmarks.md). Nothing is downloaded.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from jupyter_data_agent_bench import generation_speed

TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=600)


def test_tokenizer_has_the_full_vocabulary_and_round_trips():
    text = "df.groupby('airline')['delay'].mean()\n"
    for size in (600, 10_000):
        tok = generation_speed.build_tokenizer(size)
        assert len(tok) == size and tok.eos_token_id is None and tok.pad_token_id == 0
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
        assert isinstance(tok.decode(list(range(3, size))), str)  # any id decodes
    assert len(ids) < 0.6 * len(text)  # ASCII pairs are tokens


def test_bench_report_at_a_tiny_size(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lines: list[str] = []
    report = generation_speed.run(
        layers=1,
        new_tokens=6,
        samples=3,
        prompt_tokens=12,
        repeats=1,
        device="cpu",
        dims=TINY,
        workdir=tmp_path,
        log=lines.append,
    )
    assert report["device"] == "cpu" and report["device_name"].startswith("CPU")
    assert report["parameter_devices"] == ["cpu"] and report["dtype"] == "float32"
    assert report["model"]["num_hidden_layers"] == 1 and report["model"]["vocab_size"] == 600
    assert report["prompt_tokens"] == 12 and report["new_tokens"] == 6
    cases = {c["case"]: c for c in report["cases"]}
    assert list(cases) == list(generation_speed.CASES)
    assert cases["greedy"]["streams"] == 1 and cases["samples"]["streams"] == 3
    # the backend decodes what plain generate decodes, through generate and through stream
    assert cases["greedy"]["same_output"] is True and cases["stream"]["same_output"] is True
    assert cases["samples"]["same_output"] is None
    for c in cases.values():
        for key in ("backend_tok_s", "generate_tok_s", "ratio", "slowdown"):
            assert isinstance(c[key], float) and math.isfinite(c[key]) and c[key] > 0, (c["case"], key)
        assert isinstance(c["within_target"], bool)
        assert len(c["backend_runs_s"]) == len(c["generate_runs_s"]) == 1
    table = generation_speed.table(report)
    assert table.count("\n| ") == 4 and "| greedy | 1 x 6 |" in table and "| samples | 3 x 6 |" in table
    assert len(lines) == 4  # the header line and one per case
    assert not list(tmp_path.iterdir())  # the model's temporary directory is gone


def test_bench_with_stop_strings_on_both_sides(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = generation_speed.run(
        layers=1,
        new_tokens=4,
        samples=2,
        prompt_tokens=8,
        repeats=1,
        device="cpu",
        dims=TINY,
        cases=("greedy", "samples"),
        stop=("\n# In[",),
        workdir=tmp_path,
        log=lambda line: None,
    )
    assert report["stop"] == ["\n# In["] and [c["case"] for c in report["cases"]] == ["greedy", "samples"]
    assert all(c["ratio"] > 0 for c in report["cases"])


def test_unknown_case_is_refused():
    with pytest.raises(ValueError, match="unknown cases"):
        generation_speed.run(cases=("fast",), device="cpu")
