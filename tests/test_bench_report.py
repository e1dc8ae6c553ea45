"""``jupyter-data-agent-bench report``: a side-by-side table and a plot from result folders; CLI wiring."""

from __future__ import annotations

import json

import pytest

from jupyter_data_agent import cli as runtime_cli
from jupyter_data_agent_bench import cli, report


def _write(path, data):
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(data))


def _dabench(strategy, correct, n, seconds):
    return {
        "kind": "dabench",
        "run": {"strategy": strategy, "model": "tiny", "budget": None, "max_new_tokens": 64},
        "summary": {"accuracy_by_question": correct / n, "accuracy_by_subquestion": correct / n,
                    "n_correct": correct, "n_questions": n},
        "cost": {"per_task": {"model_calls": 1.0, "prompt_tokens": 100.0,
                              "completion_tokens": 20.0, "wall_time_s": seconds}},
    }


def test_report_table_and_plot_from_two_runs(tmp_path, capsys):
    _write(tmp_path / "direct", _dabench("direct", 1, 4, 2.5))
    sweep = tmp_path / "react-sweep"
    _write(sweep / "budget-4", _dabench("react", 3, 4, 9.0))
    (tmp_path / "empty").mkdir()
    runs = report.find_runs([tmp_path / "direct", sweep, tmp_path / "empty"])
    assert [p.name for p in runs] == ["direct", "budget-4"]
    rows = [report.load_run(p) for p in runs]
    md = report.markdown_table(rows)
    lines = md.strip().splitlines()
    assert len(lines) == 4 and "| direct | dabench | direct | tiny |" in lines[2]
    assert "25.00 (acc. by question)" in lines[2] and "1/4" in lines[2]
    assert "react-sweep/budget-4" in lines[3] and "75.00" in lines[3] and "| 9.0 |" in lines[3]

    out = tmp_path / "rep"
    rc = cli.main(["report", str(tmp_path / "direct"), str(sweep), "--out", str(out)])
    assert rc == 0
    assert (out / "report.png").stat().st_size > 1000
    assert (out / "report.md").read_text() == md
    assert "react-sweep/budget-4" in capsys.readouterr().out


def test_cli_help_lists_bench_commands(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert all(name in text for name in ("dabench", "arcade", "report", "lab", "loop", "inline"))


def test_runtime_cli_points_to_the_bench_distribution(capsys):
    """The runtime's command has no benchmarks; ``jupyter-data-agent bench`` says where they went."""
    assert runtime_cli.main(["bench", "dabench", "--data", "x"]) == 2
    assert "pip install -e ./bench" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # not one of its commands
        runtime_cli.build_parser(with_train=False).parse_args(["bench", "dabench"])
