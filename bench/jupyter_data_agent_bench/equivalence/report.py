"""The report: its targets checked, and its Markdown (the rates, wrong verdicts, votes, speed tables)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .rates import JUDGMENTS, RateRow
from .speed import SpeedRow
from .votes import VoteRow

TARGET_RIGHT = 0.99
TARGET_WRONG = 0.01
TARGET_VOTE_POINTS = 2.0
TARGET_SPEED_S = 1.0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def rates_markdown(rows: Sequence[RateRow]) -> str:
    """Rewrites: the share accepted (should be ~100%); mutations: the share accepted (should be ~0%)."""
    lines = ["| variant | kind | n | " + " | ".join(h for _, h in JUDGMENTS) + " |",
             "|---|---|---:|" + "---:|" * len(JUDGMENTS)]
    for r in rows:
        total = r.kind.startswith("all ")
        name = f"**{r.kind}**" if total else r.kind
        cells = []
        for j, _ in JUDGMENTS:
            cell = f"{_pct(r.rate(j))} ({r.accepted[j]}/{r.judged[j]})"
            cells.append(f"**{cell}**" if total else cell)
        lines.append(f"| {'rewrite' if r.rewrite else 'mutation'} | {name} | {r.n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fenced(label: str, text: str) -> str:
    body = "\n".join("  " + line for line in text.splitlines())
    return f"  {label}:\n  ```\n{body}\n  ```"


def failures_markdown(items: Sequence[dict]) -> str:
    if not items:
        return "No wrong verdict from same_answer."
    parts = []
    for f in items:
        what = "rewrite rejected" if f["rewrite"] else "mutation accepted"
        parts.append(f"- `{f['ref']}` / `{f['kind']}` ({what}; {', '.join(f['wrong_in'])})"
                     + (f" error: {f['error']}" if f["error"] else "")
                     + "\n\n" + _fenced("reference", f["reference"]) + "\n" + _fenced("variant", f["variant"]))
    return "\n".join(parts)


def votes_markdown(rows: Sequence[VoteRow]) -> str:
    lines = ["| p (sample right) | n | product pick right (same_answer) | (true class) | ideal majority "
             "| gap, points | gap true class, points | any sample right |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.p:.2f} | {r.n} | {_pct(r.product)} | {_pct(r.product_true)} | {_pct(r.ideal)} "
                     f"| {r.gap_points:+.1f} | {r.gap_true_points:+.1f} | {_pct(r.any_right)} |")
    return "\n".join(lines)


def speed_markdown(rows: Sequence[SpeedRow]) -> str:
    lines = ["| values | forms of both s | same_answer s | covers s | same_answer on values s (forms incl.) "
             "| verdicts |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ok = r.same == r.expected and r.covers == r.expected
        lines.append(f"| {r.case} | {r.form_s:.3f} | {r.same_s:.4f} | {r.covers_s:.4f} | {r.total_s:.3f} "
                     f"| same={r.same} covers={r.covers} ({'right' if ok else 'WRONG'}) |")
    return "\n".join(lines)


def check_targets(rows: Sequence[RateRow], votes: Sequence[VoteRow], speed: Sequence[SpeedRow]) -> list[str]:
    msgs = []
    for r in rows:
        if not r.kind.startswith("all "):
            continue
        for j, label in JUDGMENTS[:2]:
            rate = r.rate(j)
            if rate is None:
                continue
            ok = rate >= TARGET_RIGHT if r.rewrite else rate <= TARGET_WRONG
            target = f">= {TARGET_RIGHT:.0%}" if r.rewrite else f"<= {TARGET_WRONG:.0%}"
            msgs.append(f"{r.kind[4:]} accepted, {label}: {_pct(rate)} (target {target}): {'PASS' if ok else 'FAIL'}")
    for label, gap in (("same_answer", lambda v: v.gap_points), ("true class", lambda v: v.gap_true_points)):
        if not votes:
            break
        worst = max(votes, key=lambda v: abs(gap(v)))
        msgs.append(f"vote ({label}): largest gap to ideal {gap(worst):+.1f} points at p={worst.p}, n={worst.n} "
                    f"(target within {TARGET_VOTE_POINTS:.0f}): "
                    f"{'PASS' if abs(gap(worst)) <= TARGET_VOTE_POINTS else 'FAIL'}")
    for s in speed:
        ok = s.total_s < TARGET_SPEED_S and s.same == s.expected and s.covers == s.expected
        msgs.append(f"speed, {s.case}: {s.total_s:.3f} s end to end, right verdicts: "
                    f"{s.same == s.expected and s.covers == s.expected} (target < {TARGET_SPEED_S:.0f} s): "
                    f"{'PASS' if ok else 'FAIL'}")
    return msgs


@dataclass
class Report:
    references: int
    cases: int
    rates: list[RateRow]
    failures: list[dict]
    wrong_verdicts: list[dict]
    votes: list[VoteRow]
    vote_forms: str
    vote_merges: dict[str, Any]
    speed: list[SpeedRow]
    targets: list[str]
    seconds: dict[str, float]
    round_trip: dict[str, Any]

    def to_json(self) -> dict:
        return asdict(self)


def report_markdown(r: Report) -> str:
    parts = [f"{r.references} references, {r.cases} variants.", "", "### Accepted as the same answer", "",
             rates_markdown(r.rates), ""]
    if r.round_trip:
        parts += [f"Round trip: {r.round_trip['cells']} cells; reference forms equal in-process and in the kernel: "
                  f"{r.round_trip['reference_forms_agree']}"
                  + (f" (differ: {', '.join(r.round_trip['reference_forms_differ'])})"
                     if r.round_trip["reference_forms_differ"] else "")
                  + (f"; failed cells: {len(r.round_trip['failed_cells'])}" if r.round_trip["failed_cells"] else ""),
                  ""]
    parts += ["### Wrong verdicts (up to 3 per kind)", "", failures_markdown(r.failures), ""]
    if r.votes:
        parts += ["### Vote simulation", "", f"Forms: {r.vote_forms}. {r.votes[0].trials} trials per cell.", "",
                  votes_markdown(r.votes), "",
                  f"Right and wrong pool members that same_answer joins: {r.vote_merges['joined']} of "
                  f"{r.vote_merges['compared']} pairs"
                  + (" (" + ", ".join(f"{k}: {v}" for k, v in r.vote_merges["by_kind"].items()) + ")"
                     if r.vote_merges["by_kind"] else "") + ".", ""]
    if r.speed:
        parts += ["### Speed", "", speed_markdown(r.speed), ""]
    parts += ["### Targets", ""] + [f"- {m}" for m in r.targets]
    parts += ["", "Seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items())]
    return "\n".join(parts)
