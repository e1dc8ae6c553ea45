"""Compare benchmark runs side by side: a Markdown table and a PNG plot.

``jupyter-data-agent-bench report results/* [--out DIR]``

Each argument is a result folder written by ``bench dabench`` or
``bench arcade`` (one with ``summary.json``); a folder holding several such
folders (a budget sweep, or ``results/`` itself) is searched one level down.
Columns: run, benchmark, strategy, model, budget, accuracy (DABench:
accuracy by question; ARCADE: pass@1, with self-consistency alongside),
correct/total, tokens per task, model calls per task, time per task.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from .runner_common import pyplot, write_json


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Run folders (holding ``summary.json``) among ``paths`` and their children, each once."""
    found: dict[Path, Path] = {}
    for p in map(Path, paths):
        if (p / "summary.json").is_file():
            runs = [p]
        else:
            runs = sorted(c for c in p.iterdir() if (c / "summary.json").is_file()) if p.is_dir() else []
        for run in runs:
            found.setdefault(run.resolve(), run)
    return list(found.values())


def load_run(path: Path) -> dict:
    data = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    run, cost, s = data.get("run", {}), data.get("cost", {}), data.get("summary", {})
    kind = data.get("kind") or run.get("kind") or "?"
    pt = cost.get("per_task", {})
    row = {
        "path": str(path),
        "name": f"{path.parent.name}/{path.name}" if path.name.startswith("budget-") else path.name,
        "kind": kind,
        "strategy": run.get("strategy"),
        "model": run.get("model"),
        "budget": run.get("budget"),
        "max_new_tokens": run.get("max_new_tokens"),
        "tokens_per_task": (pt.get("prompt_tokens") or 0) + (pt.get("completion_tokens") or 0),
        "completion_tokens_per_task": pt.get("completion_tokens"),
        "calls_per_task": pt.get("model_calls"),
        "time_per_task_s": pt.get("wall_time_s"),
    }
    if kind == "dabench":
        row.update(
            accuracy=s.get("accuracy_by_question", 0.0),
            accuracy_label="acc. by question",
            secondary=s.get("accuracy_by_subquestion", 0.0),
            secondary_label="acc. by sub-question",
            correct=s.get("n_correct"),
            total=s.get("n_questions"),
        )
    else:
        pk = s.get("pass_at_k", {})
        row.update(
            accuracy=pk.get("1", 0.0),
            accuracy_label="pass@1",
            secondary=s.get("self_consistency", 0.0),
            secondary_label="self-consistency",
            correct=s.get("sc_correct"),
            total=s.get("turns"),
        )
    return row


def markdown_table(rows: Sequence[dict]) -> str:
    lines = [
        "| Run | Benchmark | Strategy | Model | Budget | Accuracy (%) | Secondary (%) | Correct "
        "| Tokens / task | Calls / task | Time / task (s) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['kind']} | {r['strategy']} | {r['model']} "
            f"| {r['budget'] if r['budget'] is not None else '-'} "
            f"| {100 * r['accuracy']:.2f} ({r['accuracy_label']}) "
            f"| {100 * r['secondary']:.2f} ({r['secondary_label']}) "
            f"| {r['correct']}/{r['total']} | {r['tokens_per_task']:.0f} | {r['calls_per_task']} "
            f"| {r['time_per_task_s']} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[dict], path: Path) -> None:
    """Bars: accuracy per run; a second panel: time per task (same order)."""
    plt = pyplot()
    names = [r["name"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(7, 1.3 * len(rows) + 4), 4.2))
    xs = list(range(len(rows)))
    acc = [100 * r["accuracy"] for r in rows]
    secs = [r["time_per_task_s"] or 0 for r in rows]
    panels = ((ax1, acc, "tab:blue", 100, "accuracy (%)",
               "accuracy (DABench: by question; ARCADE: pass@1)", "{:.1f}%"),
              (ax2, secs, "tab:orange", max(secs + [1]) * 1.2, "seconds per task", "time per task",
               "{:.1f} s"))
    for ax, values, color, top, ylabel, title, fmt in panels:
        bars = ax.bar(xs, values, color=color)
        ax.set_ylim(0, top)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.bar_label(bars, labels=[fmt.format(b.get_height()) for b in bars], fontsize=8)
        ax.set_xticks(xs, names, rotation=30, ha="right", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="Result folders (or folders of result folders).")
    p.add_argument("--out", default="results/report",
                   help="Folder for report.md, report.json and report.png (default: results/report).")


def main(args: argparse.Namespace) -> int:
    runs = find_runs(args.runs)
    if not runs:
        print("no result folders (with summary.json) found")
        return 1
    rows = [load_run(p) for p in runs]
    md = markdown_table(rows)
    print(md)
    if args.out:  # "" prints only
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(md, encoding="utf-8")
        write_json(out / "report.json", rows)
        plot(rows, out / "report.png")
        print(f"written: {out / 'report.md'}, {out / 'report.png'}")
    return 0
