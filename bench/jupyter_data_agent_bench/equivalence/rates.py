"""The verdicts counted: accepted / judged per variant kind and judgment, and the wrong ones listed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import equivalence_cases as cases_mod
from .judging import Case

JUDGMENTS = (("same", "same_answer in-process"), ("same_rt", "same_answer round trip"),
             ("covers", "covers in-process"), ("covers_rt", "covers round trip"))


@dataclass
class RateRow:
    """Accepted / judged per judgment for one variant kind (or a total)."""

    kind: str
    rewrite: bool
    n: int
    accepted: dict[str, int]
    judged: dict[str, int]

    def rate(self, judgment: str) -> float | None:
        j = self.judged.get(judgment, 0)
        return self.accepted.get(judgment, 0) / j if j else None


def _row(kind: str, rewrite: bool, group: Sequence[Case]) -> RateRow:
    accepted = {j: sum(1 for c in group if getattr(c, j) is True) for j, _ in JUDGMENTS}
    judged = {j: sum(1 for c in group if getattr(c, j) is not None) for j, _ in JUDGMENTS}
    return RateRow(kind, rewrite, len(group), accepted, judged)


def rate_rows(cases: Sequence[Case]) -> list[RateRow]:
    """One row per kind, rewrites first, each block followed by its total."""
    rows = []
    for rewrite, kinds in ((True, cases_mod.REWRITES), (False, cases_mod.MUTATIONS)):
        block = [c for c in cases if c.rewrite == rewrite]
        rows += [_row(k, rewrite, [c for c in block if c.kind == k]) for k in kinds
                 if any(c.kind == k for c in block)]
        rows.append(_row("all rewrites" if rewrite else "all mutations", rewrite, block))
    return rows


def _short(x: Any, limit: int = 1200) -> str:
    """A repr that fits in a report: a few rows and columns of a frame, its type named."""
    import pandas as pd

    try:
        with pd.option_context("display.max_rows", 8, "display.max_columns", 8, "display.width", 110):
            text = repr(x)
    except Exception as e:  # noqa: BLE001
        text = f"<repr failed: {e}>"
    text = text if len(text) <= limit else text[:limit] + " ..."
    return f"{type(x).__module__}.{type(x).__qualname__}: {text}" if "\n" in text else text


def failures(cases: Sequence[Case], refs: Mapping[str, Any], per_kind: int = 3) -> list[dict]:
    """Up to ``per_kind`` wrong verdicts (of either path) per kind, with both values."""
    out: list[dict] = []
    seen: Counter = Counter()
    for c in cases:
        wrong = [j for j, _ in JUDGMENTS if c.correct(getattr(c, j)) is False and j.startswith("same")]
        if not wrong or seen[c.kind] >= per_kind:
            continue
        seen[c.kind] += 1
        out.append({"ref": c.ref, "kind": c.kind, "rewrite": c.rewrite, "wrong_in": wrong, "error": c.error,
                    "reference": _short(refs[c.ref]), "variant": _short(c.value)})
    return out


def wrong_verdicts(cases: Sequence[Case]) -> list[dict]:
    """Every case some judgment got wrong (no values: the JSON's full list)."""
    return [{"ref": c.ref, "kind": c.kind, "rewrite": c.rewrite, "error": c.error,
             "wrong_in": [j for j, _ in JUDGMENTS if c.correct(getattr(c, j)) is False]}
            for c in cases if any(c.correct(getattr(c, j)) is False for j, _ in JUDGMENTS)]
