"""The decisions store as value-model training data, and ``jupyter-data-agent decisions``.

An accepted candidate (accept, accept & run) is +1 for every node of the path
that produced it, a rejected one -1 (``search.trajectories.decision_records``).
Search candidates carry their path's message history; a one-cell candidate
(direct, vote) gets one in the same JUPITER format: the system prompt, the
turn's prompt as the task, the cell as one Thought/Action step and its output
as the observation. "edited" rows are statistics, not labels: the user
accepted first (that row is the label) and then changed the code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from ..kernel.results import ExecResult
from ..prompts.react import SYSTEM, format_observation
from ..search.trajectories import TrajectoryRecord, decision_records, write_jsonl
from ..store.decisions import DecisionRecord, DecisionStore, default_store_path

STORE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def candidate_messages(record: DecisionRecord) -> list[dict]:
    """A one-cell candidate's history (or an analysis step's): task, the cell as a step, its output."""
    candidate = record.candidate or {}
    code = str(candidate.get("code") or record.code)
    steps = candidate.get("steps") or []
    thought = (" ".join(str(s.get("explanation", "")).strip() for s in steps).strip()
               or str(candidate.get("explanation") or candidate.get("title") or "").strip() or record.intent)
    result = ExecResult.from_json(candidate["result"]) if candidate.get("result") else None
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": record.prompt or f"Task: {record.intent}"},
        {"role": "assistant", "content": f"Thought: {thought}\nAction:\n```python\n{code}\n```"},
        {"role": "user", "content": f"Observation:\n{format_observation(result)}"},
    ]


def decision_trajectories(records: Iterable[DecisionRecord]) -> list[TrajectoryRecord]:
    """Training records of every labelled decision (accepted +1, rejected -1)."""
    out: list[TrajectoryRecord] = []
    for r in records:
        if r.decision == "edited":
            continue
        candidate = dict(r.candidate or {"code": r.code})
        meta = dict(candidate.get("meta") or {})
        if not meta.get("messages"):
            meta["messages"] = candidate_messages(r)
        candidate["meta"] = meta
        for rec in decision_records(candidate, r.accepted, search_id=r.turn_id):
            rec.extra = {"decision": r.decision, "strategy": r.strategy, "model": r.model,
                         "complete": r.complete}
            out.append(rec)
    return out


def is_store(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in STORE_SUFFIXES


def load_store(path: str | os.PathLike) -> list[TrajectoryRecord]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no decisions store at {path}")
    return decision_trajectories(DecisionStore(path).records())


# ------------------------------------------------------------------ CLI

HELP = "Export or summarize the accept/reject decisions recorded by the server."


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("decisions", help=HELP, description=HELP)
    sub = p.add_subparsers(dest="decisions_command", metavar="ACTION")
    sub.required = True
    for name, helptext in (("export", "write training records (JSONL) for train-value"),
                           ("stats", "counts by decision, strategy and model")):
        q = sub.add_parser(name, help=helptext, description=helptext)
        q.add_argument("--store", default=None,
                       help=f"the store (default: {default_store_path()})")
        if name == "export":
            q.add_argument("--out", "-o", required=True, help="JSONL file to write (replaced)")
        else:
            q.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    path = Path(args.store) if args.store else default_store_path()
    if not path.is_file():
        print(f"jupyter-data-agent decisions: no store at {path} (nothing recorded yet?)", file=sys.stderr)
        return 2
    store = DecisionStore(path)
    if args.decisions_command == "stats":
        stats = store.stats()
        if args.json:
            print(json.dumps(stats, indent=2))
        else:
            print(f"{stats['decisions']} decisions in {stats['path']} ({stats['complete']} with the turn's "
                  f"prompt and outputs, {stats['with_features']} with the evidence estimator's features)")
            for key in ("by_decision", "by_strategy", "by_model"):
                counts = ", ".join(f"{k or '(unknown)'} {n}" for k, n in stats[key].items())
                print(f"  {key.replace('_', ' ')}: {counts or '-'}")
        return 0
    records = decision_trajectories(store.records())
    n = write_jsonl(args.out, records, append=False)
    print(f"wrote {n} training records from {path} to {args.out}")
    return 0


__all__ = ["candidate_messages", "decision_trajectories", "is_store", "load_store"]
