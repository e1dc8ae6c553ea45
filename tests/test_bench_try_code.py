"""``bench try_code`` for real at a tiny size: two real Jupyter servers (warm roots on and off),
real kernels, the MCP SDK's client, the kernel websocket, sidebar turns on the tests' model
server; every row of the table is measured and positive, and the busy rows say what the
issue asks (the warm root answers at once with the state's age; without one the try waits)."""

from __future__ import annotations

import json

import pytest

from jupyter_data_agent_bench import try_code
from jupyter_data_agent_bench.kernel_copy import parse_size

pytestmark = pytest.mark.timeout(900)  # two servers and a dozen turns on a loaded two-core machine


def test_every_row_is_measured_at_a_tiny_size(tmp_path, capsys):
    out = tmp_path / "try_code.json"
    assert try_code.main(["--sizes", "1MB", "--calls", "2", "--turns", "1", "--busy-cap", "3",
                          "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    size = parse_size("1MB")
    rows = {r["row"]: r for r in data["rows"]}
    assert list(rows) == list(try_code.ROWS) and all(r["size"] == size for r in data["rows"])
    for name, r in rows.items():
        assert 0 < r["p50_ms"] <= r["p90_ms"], (name, r)
        assert r["n"] == (2 if name in try_code.LOOP_ROWS else 1), (name, r)  # --calls, or --turns / one
    warm, cold = rows[try_code.BUSY_WARM], rows[try_code.BUSY_COLD]
    # within the 3-s cap, from the state before the cell, saying so
    assert not warm["timed_out"] and warm["state_age"] and warm["state"]["running"], warm
    assert cold["timed_out"] and not cold["state_age"] and cold["p50_ms"] >= 3000, cold
    assert [(x["ratio"], x["target"]) for x in data["ratios"]] == [
        (f"{row} / {try_code.LIVE_WS}", bound) for row, _, bound in try_code.TARGETS]
    assert all(x["p50_ratio"] > 0 for x in data["ratios"])
    printed = capsys.readouterr().out
    assert "load average" in printed and all(row in printed for row in try_code.ROWS)
