"""The answer-level evidence model Search's pick weighs answers with, fitted on the lab's answers.

``python -m jupyter_data_agent_bench.answer_model --answers results/train-answers-*.jsonl --out FILE``
reads the candidates of Search's turns that the strategy lab kept (``lab --answers``:
every candidate that voted, its features as the pick saw them, whether it is
right), fits the evidence model's logistic regression on them
(``train.features.fit``) and records, as ``meta.answer_auc``, its AUC among
answers measured task by task: each task's answers are scored by a model fitted
without that task, so the figure is what the model shows on tasks it never saw.
Search's pick gives the model weight ``2 AUC - 1`` (``search.branching``).

It also reports the pick the model would make (the vote's classes as the
lab's scorer reads them, each answer weighted ``1 + alpha * value``) against
the plain majority, per log-prob gap and p, with the held-out models: what the
weight would change, before any run of the lab with it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from jupyter_data_agent.prompts.answers import same_text_answer
from jupyter_data_agent.train.features import auc, fit


def read_answers(paths: list[str]) -> list[dict]:
    return [r for p in paths for line in open(p, encoding="utf-8") if line.strip()
            and (r := json.loads(line))["features"].get("answered")]


def values(rows: list[dict], key: str) -> str:
    return "/".join(f"{v:g}" for v in sorted({r.get(key) for r in rows if r.get(key) is not None}))


def held_out_probabilities(rows: list[dict], l2: float) -> list[float]:
    """Each answer's P(right) from a model fitted without its task."""
    out = [0.0] * len(rows)
    for task in sorted({r["id"] for r in rows}):
        train = [r for r in rows if r["id"] != task]
        model = fit([r["features"] for r in train], [int(r["right"]) for r in train], l2=l2)
        mine = [i for i, r in enumerate(rows) if r["id"] == task]
        for i, p in zip(mine, model.probability([rows[i]["features"] for i in mine])):
            out[i] = float(p)
    return out


def picks(rows: list[dict], probs: list[float], alpha: float) -> dict[tuple, list[float]]:
    """Per (gap, p, budget): the share right of the class each turn picks, the classes as the vote's
    tagged answers (``same_text_answer``: equal ``@name[value]`` tags)."""
    turns: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        turns[(r.get("gap"), r.get("p"), r.get("budget"), r["id"], r.get("seed"))].append(i)
    out: dict[tuple, list[float]] = defaultdict(list)
    for key, members in turns.items():
        classes: list[list[int]] = []
        for i in members:
            home = next((c for c in classes if same_text_answer(rows[c[0]]["answer"], rows[i]["answer"])), None)
            if home is None:
                classes.append([i])
            else:
                home.append(i)
        best = max(classes, key=lambda c: sum(1 + alpha * (2 * probs[i] - 1) for i in c))
        out[key[:3]].append(sum(rows[i]["right"] for i in best) / len(best))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--answers", nargs="+", required=True, help="the lab's --answers files (train split)")
    parser.add_argument("--out", default=None, help="write the fitted model here (.json)")
    parser.add_argument("--l2", type=float, default=1.0)
    args = parser.parse_args(argv)
    rows = read_answers(args.answers)
    labels = [int(r["right"]) for r in rows]
    probs = held_out_probabilities(rows, args.l2)
    held = auc(probs, labels)
    alpha = max(0.0, 2 * (held or 0.5) - 1)
    print(f"{len(rows)} answers ({sum(labels)} right) of {len({r['id'] for r in rows})} tasks; "
          f"AUC among answers, task held out: {held:.3f} (alpha {alpha:.3f})")
    for gap in sorted({r.get("gap") for r in rows}):
        mine = [i for i, r in enumerate(rows) if r.get("gap") == gap]
        a = auc([probs[i] for i in mine], [labels[i] for i in mine])
        print(f"  gap {gap}: {'-' if a is None else f'{a:.3f}'} ({len(mine)} answers)")
    plain, weighed = picks(rows, probs, 0.0), picks(rows, probs, alpha)
    print("\n| gap | p | budget | turns | majority | weighed |\n|---|---|---|---|---|---|")
    for key in sorted(plain):
        n = len(plain[key])
        print(f"| {key[0]} | {key[1]} | {key[2]} | {n} | {100 * sum(plain[key]) / n:.1f} % "
              f"| {100 * sum(weighed[key]) / n:.1f} % |")
    if args.out:
        model = fit([r["features"] for r in rows], labels, l2=args.l2, meta={
            "examples": len(rows), "positives": sum(labels), "l2": args.l2,
            "sources": [Path(p).name for p in args.answers], "answer_auc": round(held or 0.5, 3),
            "answer_auc_source": f"the strategy lab's answers of Search (lab --answers): {len(rows)} answers of "
                                 f"{len({r['id'] for r in rows})} tasks, p {values(rows, 'p')}, budget "
                                 f"{values(rows, 'budget')}, log-prob gap {values(rows, 'gap')}; each task's "
                                 "answers scored by a model fitted without that task"})
        model.meta["train_auc"] = auc(model.probability([r["features"] for r in rows]).tolist(), labels)
        print(f"saved {model.save(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
