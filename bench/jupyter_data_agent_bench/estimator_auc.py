"""How well each estimator ranks right above wrong, from collected trajectories (the strategy lab).

``python -m jupyter_data_agent_bench.estimator_auc -t results/test-traj.jsonl [--model NAME=PATH ...]``
reads trajectories written by the lab's ``--collect`` (every node of every
tree, with the evidence ``mcts`` kept for it and the task's reward on each
final answer) and reports, per estimator, the AUC (the chance that a right
node scores above a wrong one, ties half) among the final answers (with the
evidence the search had when it ended: every answer's agreement and the
step shares of the whole tree), and among every node whose subtree reached
an answer as the search evaluated it (``train.features.examples``).

Estimators: ``heuristic`` (the execution heuristic, a feature of every node),
``logprob`` (the step's mean token log-prob alone), ``evidence`` (the shipped
default model) and each ``--model`` (a trained ``evidence_model.json`` or
version directory). They all read the node's features as the search recorded
them, so nothing here knows more than the search did.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from jupyter_data_agent.search.features import DEFAULT_MODEL, EvidenceModel
from jupyter_data_agent.search.trajectories import read_jsonl
from jupyter_data_agent.train.features import auc, examples

Scorer = Callable[[list[dict[str, float]]], list[float]]


def scorers(models: dict[str, str]) -> dict[str, Scorer]:
    out: dict[str, Scorer] = {
        "heuristic": lambda rows: [r["heuristic"] for r in rows],
        "logprob": lambda rows: [r["logprob"] for r in rows],
    }
    for name, path in {"evidence": str(DEFAULT_MODEL), **models}.items():
        model = EvidenceModel.load(path)
        out[name] = lambda rows, m=model: m.probability(rows).tolist()
    return out


def report(paths: list[str], models: dict[str, str]) -> tuple[dict[str, dict], str]:
    records = [r for p in paths for r in read_jsonl(p)]
    data = examples(records)
    # Final answers as the search ended: their features with the whole tree's agreement and shares.
    answers = [(r.extra.get("final_features") or r.extra["features"], int((r.terminal_reward or 0) > 0))
               for r in records if r.final_answer is not None and r.terminal_reward is not None
               and isinstance(r.extra.get("features"), dict)]
    result: dict[str, dict] = {}
    lines = [f"{len(answers)} final answers ({sum(y for _, y in answers)} right), {len(data)} labelled nodes", "",
             "| estimator | AUC among answers | AUC all labelled nodes |", "|---|---|---|"]
    for name, score in scorers(models).items():
        a = auc(score([f for f, _ in answers]), [y for _, y in answers])
        b = auc(score([f for f, _ in data]), [y for _, y in data])
        result[name] = {"answers": a, "nodes": b}
        lines.append(f"| {name} | {'–' if a is None else f'{a:.3f}'} | {'–' if b is None else f'{b:.3f}'} |")
    return result, "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--trajectories", "-t", nargs="+", required=True)
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args(argv)
    models = {}
    for spec in args.model:
        name, _, path = spec.rpartition("=")
        if not Path(path).exists():
            parser.error(f"--model {spec!r}: {path} does not exist")
        models[name or Path(path).stem] = path
    _, md = report(args.trajectories, models)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
