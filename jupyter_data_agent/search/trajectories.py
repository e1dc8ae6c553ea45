"""Search trajectories as training data for the value model.

One JSONL record per search node — the format JUPITER trains its value model
on: the node's message history (system, task, then per step the assistant's
thought + action and the observation), its depth, MCTS visit count and value
sum (the target is Q = value_sum / visits), and for terminal nodes the reward
and the final answer.

User decisions are a second source: a candidate the user accepted (rejected)
in the chat panel yields one record per node of the path that produced it,
each with Q = +1 (-1), as a one-visit Monte Carlo return. The candidate's
``meta["messages"]`` (the leaf's history) is enough: every ancestor's
history is a prefix of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

FORMAT = "jda-trajectory@1"


@dataclass
class TrajectoryRecord:
    messages: list[dict]
    depth: int
    visits: int
    value_sum: float
    terminal: bool = False
    terminal_reward: float | None = None
    final_answer: str | None = None
    node_id: str = ""
    parent_id: str | None = None
    search_id: str = ""
    task_id: str | None = None
    prior: float | None = None
    value: float | None = None  # the estimator's own value of this node
    status: str = ""
    source: str = "mcts"  # mcts | react | decision
    format: str = FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def q(self) -> float | None:
        return self.value_sum / self.visits if self.visits else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["q"] = self.q
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TrajectoryRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def write_jsonl(path: str | os.PathLike, records: Iterable[TrajectoryRecord | dict],
                append: bool = True) -> int:
    """Append (or write) records; returns how many were written."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        lines = [json.dumps(r.to_json() if isinstance(r, TrajectoryRecord) else r,
                            ensure_ascii=False, default=str) + "\n" for r in records]
        f.writelines(lines)
    return len(lines)


def read_jsonl(path: str | os.PathLike) -> list[TrajectoryRecord]:
    with open(path, encoding="utf-8") as f:
        return [TrajectoryRecord.from_json(json.loads(line)) for line in f if line.strip()]


# ------------------------------------------------------------------ decisions

def path_histories(messages: Sequence[dict]) -> list[list[dict]]:
    """The history of every node on the path to the leaf whose history is ``messages``.

    A step is an assistant message plus the observation that follows it (a
    final answer has none); the task head (system + first user message) is
    shared by all.
    """
    out = []
    i = next((i + 1 for i, m in enumerate(messages) if m.get("role") == "user"), 0)
    while i < len(messages):
        if messages[i].get("role") != "assistant":
            i += 1
            continue
        end = i + 1
        if end < len(messages) and messages[end].get("role") == "user":
            end += 1
        out.append(list(messages[:end]))
        i = end
    return out


def decision_records(candidate: Any, accepted: bool, *, search_id: str | None = None,
                     task_id: str | None = None) -> list[TrajectoryRecord]:
    """Rewards from the chat panel: +1 (accepted) or -1 (rejected) for each
    node of the path that produced ``candidate`` (a Candidate or its JSON)."""
    meta = candidate.get("meta", {}) if isinstance(candidate, dict) else candidate.meta
    messages = meta.get("messages")
    if not messages:
        return []
    reward = 1.0 if accepted else -1.0
    ids = list(meta.get("node_ids") or [])
    histories = path_histories(messages)
    records = []
    for d, hist in enumerate(histories, 1):
        last = d == len(histories)
        node_id = ids[d - 1] if d - 1 < len(ids) else f"d{d}"
        records.append(TrajectoryRecord(
            messages=hist, depth=d, visits=1, value_sum=reward, terminal=last,
            terminal_reward=reward if last else None,
            final_answer=meta.get("answer") if last else None,
            node_id=node_id, parent_id=(ids[d - 2] if 0 < d - 1 <= len(ids) else None),
            search_id=search_id or meta.get("search_id", ""), task_id=task_id,
            status="accepted" if accepted else "rejected", source="decision"))
    return records


def export_decisions(path: str | os.PathLike, decisions: Iterable[tuple[Any, bool]]) -> int:
    """Append the records of several (candidate, accepted) decisions to ``path``."""
    records = [r for cand, ok in decisions for r in decision_records(cand, ok)]
    return write_jsonl(path, records)


__all__ = [
    "FORMAT",
    "TrajectoryRecord",
    "decision_records",
    "export_decisions",
    "path_histories",
    "read_jsonl",
    "write_jsonl",
]
