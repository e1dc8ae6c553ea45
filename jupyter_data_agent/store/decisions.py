"""The decisions store: what the user did with each candidate, for training the value model.

One SQLite file in the Jupyter data directory (``decisions.sqlite``), WAL
mode so turns in several notebooks write while an export reads; each
decision is one committed transaction, so a crash loses at most the one in
flight. ``PRAGMA user_version`` is the schema version: a newer file is
refused with a clear error instead of being misread. Nothing leaves the
machine; ``c.DataAgentExtension.record_decisions = False`` turns recording off.
The file is its user's alone (0600, in a 0700 folder): other users of the
machine (JupyterHub) may be able to enter the home it lies in.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import agent_data_dir, private_dir, private_file

SCHEMA_VERSION = 3  # 2: ``step`` (an analysis step's decision); 3: ``features`` (the evidence estimator's)
FILE_NAME = "decisions.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at REAL NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('accepted', 'accepted_run', 'edited', 'rejected')),
    turn_id TEXT NOT NULL,
    job_id TEXT NOT NULL DEFAULT '',
    candidate_index INTEGER NOT NULL DEFAULT 0,
    intent TEXT NOT NULL DEFAULT '',
    strategy TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    notebook_path TEXT NOT NULL DEFAULT '',
    code TEXT NOT NULL DEFAULT '',
    final_code TEXT NOT NULL DEFAULT '',
    prompt TEXT NOT NULL DEFAULT '',
    candidate TEXT NOT NULL DEFAULT '{}',
    answer TEXT,
    asked_at REAL,
    complete INTEGER NOT NULL DEFAULT 0,
    step INTEGER,
    features TEXT
);
CREATE INDEX IF NOT EXISTS decisions_turn ON decisions (turn_id);
"""


@dataclass
class DecisionRecord:
    """One decision with what training needs: the turn's prompt and the candidate as it ran.

    ``candidate`` is ``Candidate.to_json()`` (steps, code, outputs, and for
    search turns ``meta.messages``, the path's message history); ``complete``
    says the server still held the turn when the decision came (otherwise
    only what the browser sent is known: intent and code).
    """

    decision: str
    turn_id: str
    job_id: str = ""
    candidate_index: int = 0
    intent: str = ""
    strategy: str = ""
    model: str = ""
    notebook_path: str = ""
    code: str = ""
    final_code: str = ""
    prompt: str = ""
    candidate: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None
    asked_at: float | None = None
    complete: bool = False
    # An analysis's step (1-based) the decision is about; ``candidate`` is then that step
    # (its code and its run in the copy). None: the turn's candidate as a whole.
    step: int | None = None
    # What the evidence estimator read of the candidate's answer node (``search.features``; mcts
    # candidates): ``train-value --kind features`` learns from these. None: not known.
    features: dict[str, float] | None = None
    recorded_at: float = 0.0
    id: int | None = None

    @property
    def accepted(self) -> bool:
        return self.decision in ("accepted", "accepted_run")


@dataclass
class TurnOutcome:
    """A done turn as a decision on it will record it; kept after the job's events expire."""

    turn_id: str
    owner: str
    job_id: str = ""
    intent: str = ""
    strategy: str = ""
    model: str = ""
    notebook_path: str = ""
    prompt: str = ""
    candidates: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None
    asked_at: float | None = None

    def record(self, decision: str, index: int, code: str = "", final_code: str = "",
               step: int | None = None) -> DecisionRecord:
        """The record of a decision on candidate ``index``, or on its analysis step ``step``."""
        candidate = self.candidates[index] if 0 <= index < len(self.candidates) else {}
        if step is not None:
            steps = candidate.get("analysis") or []
            candidate = steps[step - 1] if 0 < step <= len(steps) else {}
        turn = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("owner", "candidates")}
        feats = (candidate.get("meta") or {}).get("features")
        return DecisionRecord(decision=decision, candidate_index=index, code=str(candidate.get("code") or code),
                              final_code=final_code or code, candidate=candidate, complete=bool(candidate),
                              step=step, features=feats if isinstance(feats, dict) else None, **turn)


class StoreError(RuntimeError):
    """The store cannot be used (a newer schema, a broken file); says which file."""


class DecisionStore:
    """The SQLite file; safe to use from several threads and processes at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # The user's alone (0700 folder, 0600 file): other users of the machine may enter
        # the home it lies in. The default folder is tightened if an earlier version left
        # it open; a folder the user configured is only made 0700 when it is new.
        parent = self.path.parent
        private_dir(parent, tighten=parent.absolute() == agent_data_dir().absolute())
        private_file(self.path)
        conn = self._connect()
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema version {version}; this version of "
                                 f"jupyter_data_agent reads up to {SCHEMA_VERSION}. Upgrade the package.")
            conn.executescript(_SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(decisions)")}
            if "step" not in columns:  # a version-1 file: decisions on whole candidates only
                conn.execute("ALTER TABLE decisions ADD COLUMN step INTEGER")
            if "features" not in columns:  # version 1 or 2: no candidate's features
                conn.execute("ALTER TABLE decisions ADD COLUMN features TEXT")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.commit()
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=30.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt
        except sqlite3.Error as exc:
            raise StoreError(f"Cannot open the decisions store {self.path}: {exc}") from None
        return conn

    def add(self, record: DecisionRecord) -> int:
        """Commit one decision; returns its id."""
        row = asdict(record)
        row.pop("id")
        row["recorded_at"] = record.recorded_at or time.time()
        row["candidate"] = json.dumps(record.candidate, ensure_ascii=False, default=str)
        row["complete"] = int(record.complete)
        row["features"] = None if record.features is None else json.dumps(record.features)
        names = ", ".join(row)
        marks = ", ".join(f":{k}" for k in row)
        conn = self._connect()
        try:
            with conn:  # one transaction: committed whole or not at all
                cur = conn.execute(f"INSERT INTO decisions ({names}) VALUES ({marks})", row)
            return int(cur.lastrowid or 0)
        finally:
            conn.close()

    def records(self) -> Iterator[DecisionRecord]:
        """Every committed decision, oldest first."""
        names = [f.name for f in fields(DecisionRecord)]
        conn = self._connect()
        try:
            for row in conn.execute(f"SELECT {', '.join(names)} FROM decisions ORDER BY id"):
                data = dict(zip(names, row, strict=True))
                data["candidate"] = json.loads(data["candidate"] or "{}")
                data["complete"] = bool(data["complete"])
                data["features"] = json.loads(data["features"]) if data["features"] else None
                yield DecisionRecord(**data)
        finally:
            conn.close()

    def stats(self) -> dict[str, Any]:
        """Counts by decision, strategy and model; the time span."""
        conn = self._connect()
        try:
            total, first, last, complete, with_features = conn.execute(
                "SELECT COUNT(*), MIN(recorded_at), MAX(recorded_at), SUM(complete), "
                "SUM(features IS NOT NULL) FROM decisions").fetchone()

            def count(column: str) -> dict[str, int]:
                rows = conn.execute(f"SELECT {column}, COUNT(*) FROM decisions "
                                    f"GROUP BY {column} ORDER BY 2 DESC")
                return {str(k): int(n) for k, n in rows}

            return {"path": str(self.path), "schema_version": SCHEMA_VERSION, "decisions": int(total),
                    "complete": int(complete or 0), "with_features": int(with_features or 0),
                    "first": first, "last": last,
                    "by_decision": count("decision"), "by_strategy": count("strategy"),
                    "by_model": count("model")}
        finally:
            conn.close()


def default_store_path() -> Path:
    """``<jupyter data dir>/jupyter_data_agent/decisions.sqlite``."""
    return agent_data_dir() / FILE_NAME


__all__ = ["DecisionRecord", "DecisionStore", "SCHEMA_VERSION", "StoreError", "TurnOutcome",
           "default_store_path"]
