"""Reference solutions of DABench tasks: multi-step notebooks whose last step prints the answer.

A reference is what a good model would write in JUPITER's step-by-step
format: 3-8 steps, each a thought and a code cell; the last prints every
``@name[value]`` the task's format asks for. They drive the simulated policy
(``bench.policy``) and are evaluation material: they live beside the data
(``bench-data/dabench-references.jsonl`` in the repository, or any file given
with ``--references``), never in the package.

``python -m jupyter_data_agent_bench.references verify --data DIR --file F``
runs each reference in a fresh Python process in a private copy of its table
(the steps in one namespace, as cells in one kernel) and scores what the
last step printed with the benchmark's own scorer; ``--keep OUT`` writes the
references that score 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .dabench import load_tasks
from .dabench_score import score_question

REPO_REFERENCES = Path(__file__).resolve().parents[2] / "bench-data" / "dabench-references.jsonl"


@dataclass
class RefStep:
    thought: str
    code: str


@dataclass
class Reference:
    id: int
    steps: list[RefStep] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: dict) -> "Reference":
        return cls(int(d["id"]), [RefStep(str(s["thought"]), str(s["code"])) for s in d["steps"]])

    def to_json(self) -> dict:
        return {"id": self.id, "steps": [asdict(s) for s in self.steps]}


def load_references(path: str | os.PathLike | None = None) -> dict[int, Reference]:
    """References by task id (the repository's file by default)."""
    p = Path(path) if path else REPO_REFERENCES
    if not p.is_file():
        raise FileNotFoundError(f"no reference solutions at {p}")
    refs = [Reference.from_json(json.loads(line)) for line in p.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return {r.id: r for r in refs}


_DRIVER = r"""
import contextlib, io, json, sys, traceback
steps = json.load(sys.stdin)
ns = {"__name__": "__main__"}
out = []
for code in steps:
    buf = io.StringIO()
    error = None
    with contextlib.redirect_stdout(buf):
        try:
            exec(compile(code, "<step>", "exec"), ns)
        except Exception:
            error = traceback.format_exc(limit=2)
    out.append({"stdout": buf.getvalue(), "error": error})
    if error:
        break
print(json.dumps(out))
"""


def run_reference(ref: Reference, table: Path, timeout: float = 120.0) -> list[dict]:
    """Each step's stdout (and error), run in order in one fresh process next to a copy of ``table``."""
    with tempfile.TemporaryDirectory(prefix=f"ref-{ref.id}-") as tmp:
        shutil.copy2(table, Path(tmp) / table.name)
        proc = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps([s.code for s in ref.steps]),
                              capture_output=True, text=True, cwd=tmp, timeout=timeout,
                              env={**os.environ, "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"})
    if proc.returncode != 0:
        return [{"stdout": "", "error": proc.stderr[-2000:]}]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verify(data: Path, refs: dict[int, Reference]) -> list[dict]:
    """Run and score every reference; one row per task: id, correct, steps, printed, error."""
    tasks, labels = load_tasks(data)
    by_id = {int(t["id"]): t for t in tasks}
    rows = []
    for tid, ref in sorted(refs.items()):
        task = by_id.get(tid)
        if task is None:
            rows.append({"id": tid, "correct": False, "error": "no such task"})
            continue
        try:
            steps = run_reference(ref, data / "tables" / task["file_name"])
        except subprocess.TimeoutExpired:
            steps = [{"stdout": "", "error": "timed out"}]
        printed = steps[-1]["stdout"] if steps else ""
        error = next((s["error"] for s in steps if s.get("error")), None)
        score = score_question(tid, printed, labels.get(tid, [])) if labels.get(tid) else None
        rows.append({"id": tid, "correct": bool(score and score.correct and not error),
                     "steps": len(ref.steps), "printed": printed[-500:], "error": error,
                     "wrong": [f"{s.name}: got {s.got!r}, expected {s.expected!r}"
                               for s in (score.subs if score else ()) if not s.correct]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check DABench reference solutions with the benchmark's scorer.")
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="run and score references")
    v.add_argument("--data", required=True, help="the DABench folder (questions.jsonl, labels.jsonl, tables/)")
    v.add_argument("--file", default=None, help=f"references JSONL (default {REPO_REFERENCES})")
    v.add_argument("--ids", nargs="*", type=int, default=None, help="only these task ids")
    v.add_argument("--keep", default=None, help="write the references that score 1 to this JSONL")
    args = parser.parse_args(argv)
    refs = load_references(args.file)
    if args.ids:
        refs = {i: r for i, r in refs.items() if i in set(args.ids)}
    rows = verify(Path(args.data), refs)
    for row in rows:
        status = "ok " if row["correct"] else "BAD"
        detail = "" if row["correct"] else (row.get("error") or "; ".join(row.get("wrong") or []))[-400:]
        print(f"{status} {row['id']:>4} steps={row.get('steps', 0)} {detail}")
    good = [r["id"] for r in rows if r["correct"]]
    print(f"{len(good)} of {len(rows)} references score 1")
    if args.keep:
        with open(args.keep, "w", encoding="utf-8") as f:
            for tid in good:
                f.write(json.dumps(refs[tid].to_json()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
