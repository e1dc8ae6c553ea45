"""What a turn said, read once: its events (as the wire carries them) as one typed report.

Every reader of a turn reads it here: MCP's ``ask_data_agent``, the ACP agent
(over REST), the ``%%agent`` magic (in process or through the server) and the
turn list. The events are the ``turn.events.JobEvent`` contract; the report
keeps the candidates by the index the events gave them, so ``chosen`` is the
index the sidebar and every client see.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..kernel.results import ExecResult
from ..search.vote import run_answer

TurnStatus = Literal["running", "done", "error", "cancelled"]
#: Characters of a run's output in a summary (an IDE's tool call card, a chat reply).
OUTPUT_CHARS = 2000


@dataclass
class TurnReport:
    """A turn as its events tell it: where it stands, its candidates and its outcome."""

    status: TurnStatus = "running"
    message: str = ""  # the last event's words: the progress line, or why it failed
    turn_id: str = ""
    strategy: str = ""
    answer: str | None = None  # the strategy's own answer in words (react, mcts, explain)
    chosen: int | None = None
    candidates: dict[int, dict] = field(default_factory=dict)  # index -> the wire candidate
    support: list[int] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    confinement: dict[str, Any] = field(default_factory=dict)
    model: str = ""  # the model the turn ran on ("": not said)
    seen: int = 0  # the last event's seq: ``after=`` resumes from it

    @classmethod
    def of(cls, events: Iterable[dict]) -> "TurnReport":
        report = cls()
        report.read(events)
        return report

    @classmethod
    def of_result(cls, result: dict, confinement: dict) -> "TurnReport":
        """A turn run in this process (``SearchResult.to_json``), read as its events would be."""
        candidates = list(result.get("candidates") or [])
        return cls(status="done", strategy=str(result.get("strategy", "")), answer=result.get("answer"),
                   chosen=result.get("chosen"), candidates=dict(enumerate(candidates)),
                   support=[int(c.get("support") or 0) for c in candidates],
                   stats=dict(result.get("stats") or {}), confinement=dict(confinement))

    def read(self, events: Iterable[dict]) -> "TurnReport":
        """Fold more events in (in ``seq`` order; ones already read are skipped)."""
        for event in events:
            seq = int(event.get("seq", self.seen + 1))
            if seq <= self.seen:
                continue
            self.seen = seq
            kind, data = event.get("type"), event.get("data") or {}
            if event.get("message"):
                self.message = str(event["message"])
            if kind == "candidate":
                self.candidates[int(data["index"])] = data["candidate"]
            elif kind == "done":
                result = data["result"]
                self.status = "done"
                self.turn_id = str(data.get("turn_id", ""))
                self.strategy = str(result.get("strategy", ""))
                self.answer = result.get("answer")
                self.chosen = result.get("chosen")
                self.support = list(result.get("support") or [])
                self.stats = dict(result.get("stats") or {})
                self.model = str(result.get("model") or "")
                self.confinement = dict(data.get("confinement") or {})
            elif kind == "error":
                self.status = "cancelled" if data.get("state") == "cancelled" else "error"
        return self

    @property
    def finished(self) -> bool:
        return self.status != "running"

    @property
    def chosen_candidate(self) -> dict | None:
        return self.candidates.get(self.chosen) if self.chosen is not None else None

    def run(self, index: int | None) -> ExecResult | None:
        """Candidate ``index``'s run in its copy, as the kernel reported it (None: not run)."""
        candidate = self.candidates.get(index) if index is not None else None
        result = (candidate or {}).get("result")
        return ExecResult.from_json(result) if result else None

    def support_of(self, index: int) -> int:
        """The candidate's vote count at the end (a candidate event went out before the vote)."""
        if 0 <= index < len(self.support):
            return self.support[index]
        return int((self.candidates.get(index) or {}).get("support") or 0)

    @property
    def classes(self) -> list[int]:
        return list(self.stats.get("classes") or [])

    @property
    def answer_text(self) -> str | None:
        """The turn's answer in words: the strategy's own, else what the chosen run printed last
        or its value, as the vote reads an answer (``search.vote.run_answer``)."""
        if self.answer:
            return str(self.answer)
        return run_answer(self.run(self.chosen))


def run_summary(candidate: dict) -> str:
    """What a candidate's run in its copy gave, in a few lines (its outputs, else its value or error)."""
    result = candidate.get("result") or {}
    if not result:
        return "not run"
    text = "".join(_output_text(o) for o in result.get("outputs") or [])
    if result.get("status") != "ok":
        error = f"{result.get('ename')}: {result.get('evalue')}" if result.get("ename") else result.get("status")
        text = f"{text}\n{error}".strip()
    elif not text.strip() and result.get("value"):
        text = _value_text(result["value"])
    return text.strip()[:OUTPUT_CHARS] or "(no output)"


def _output_text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text") or "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    data = output.get("data") or {}
    return str(data.get("text/plain", "")) + "\n"


def _value_text(value: dict) -> str:
    inner = value.get("value")
    return inner if isinstance(inner, str) else json.dumps(inner, default=str)[:OUTPUT_CHARS]
