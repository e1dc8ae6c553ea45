"""A step's evidence: the copy's probes (``kernel.probes``), the answer's type, agreement with others.

The probes run in the copy of the step (``probe_copy``); the two checks that
need no copy are computed here:

- ``type``: the answer against what the question and its format ask for: a
  number where it names a number (``how many``, ``average``, ``float``,
  ``integer``...), at most the decimals it asks to round to, every value of a
  ``@name[value]`` format given;
- ``plausible``: values no right answer can hold, read from the names the
  format gives them: NaN or infinity, a correlation beyond ±1, a p-value or
  proportion outside 0..1, a
  percentage outside 0..100, a negative count, range, spread or size;
- ``agree``: the share of the search's other answers (siblings and cousins
  in a tree, the other samples in a vote) that say the same.

``Check`` lists go on candidates (the sidebar's "checks" line) and, as
counts, into the evidence estimator's features (``search.features``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..kernel.inkernel import probes
from ..kernel.inkernel.probes import Check, Finding
from ..prompts.answers import expected_tags, extract_answers

log = logging.getLogger(__name__)

#: Every check a candidate may carry, in the sidebar's order.
CHECKS: tuple[str, ...] = (*probes.PROBES, "type", "plausible", "agree")

_NUMBER_WORDS = re.compile(
    r"\b(how many|how much|number of|count of|average|mean|median|sum|total|percentage|proportion|"
    r"ratio|rate|correlation|coefficient|standard deviation|std|variance|p-value|float|integer|"
    r"rounded to)\b", re.I)
_LIST_WORDS = re.compile(r"\b(list|which (?:\w+ )?are|top \d+|names of)\b", re.I)
_ROUND = re.compile(r"(\d+)\s+decimal", re.I)
_NUMERIC = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?%?$")


def probe_copy(copy: Any) -> list[Finding] | None:
    """Run the probes in ``copy`` (after its step, or once on a search's root as the baseline).

    None when the copy could not report (it died, or has no pandas): no evidence,
    not a clean bill.
    """
    try:
        result = copy.exec(probes.CELL)
    except Exception:  # evidence is optional: a copy that cannot be probed is just unprobed
        log.debug("probing a copy failed", exc_info=True)
        return None
    return probes.parse(result.stream("stdout")) if result.ok else None


def asks_for(question: str, fmt: str = "") -> str:
    """``number``, ``list`` or ``any``: what the question (and its answer format) asks for."""
    text = f"{question}\n{fmt}"
    if fmt and re.search(r"\b(float|integer|number|decimal)\b", fmt, re.I) and not re.search(
            r"\b(string|list|name)\b", fmt, re.I):
        return "number"
    if _LIST_WORDS.search(question):
        return "list"
    return "number" if _NUMBER_WORDS.search(text) and not re.search(r"\bwhich\b", question, re.I) else "any"


def type_check(answer: str | None, question: str, fmt: str = "") -> Check:
    """The answer's values against the type, count and rounding the question asks for."""
    if answer is None or not answer.strip():
        return Check("type", False, "no answer")
    tags = extract_answers(answer)
    values = list(tags.values()) if tags else [answer.strip()]
    missing = [t for t in expected_tags(fmt) if t not in tags]
    if missing:
        return Check("type", False, f"missing {', '.join('@' + m for m in missing[:5])}")
    want = asks_for(question, fmt)
    if want == "number":
        bad = [v for v in values if not _NUMERIC.match(v.strip().replace(",", ""))]
        if bad:
            return Check("type", False, f"asks for a number, got {bad[0][:40]!r}")
        m = _ROUND.search(fmt or question)
        if m:
            places = int(m.group(1))
            long = [v for v in values if "." in v and len(v.strip().split(".")[1].rstrip("%")) > places]
            if long:
                return Check("type", False, f"asks for {places} decimals, got {long[0][:40]!r}")
    if want == "list" and len(values) == 1 and _NUMERIC.match(values[0].strip()):
        return Check("type", False, "asks for a list, got one number")
    return Check("type", True, f"a {want}" if want != "any" else "")


_NOT_A_NUMBER = re.compile(r"^[-+]?(nan|inf(inity)?)$", re.I)  # "none" may be a category's name
# (name pattern, test on the value, what it means): the first that a named value fails is reported.
_IMPLAUSIBLE: tuple[tuple[re.Pattern, Callable[[float], bool], str], ...] = (
    (re.compile(r"corr|pearson|spearman|r_?value|r_?squared|\br2?\b", re.I),
     lambda v: abs(v) > 1 + 1e-9, "a correlation beyond ±1"),
    (re.compile(r"p_?val|pvalue|proportion|probability|fraction", re.I),
     lambda v: not 0 <= v <= 1, "outside 0..1"),
    (re.compile(r"percent|pct", re.I), lambda v: not 0 <= v <= 100, "outside 0..100"),
    (re.compile(r"count|number|num_|^n_|range|std|stdev|deviation|variance|\bvar\b|_var|size|length|iqr",
                re.I), lambda v: v < 0, "negative"),
)


def plausible_check(answer: str | None) -> Check:
    """Values no right answer holds, judged by the names the format gives them (see the module)."""
    if answer is None or not answer.strip():
        return Check("plausible", True, "")
    tags = extract_answers(answer) or {"": answer.strip()}
    for name, value in tags.items():
        for part in (p.strip().strip("'\"") for p in value.split(",")):
            if _NOT_A_NUMBER.match(part):
                return Check("plausible", False, f"{'@' + name + ' ' if name else ''}is {part}")
            try:
                number = float(part.rstrip("%"))
            except ValueError:
                continue
            if not math.isfinite(number):
                return Check("plausible", False, f"@{name} is {part}")
            for pattern, bad, meaning in _IMPLAUSIBLE:
                if name and pattern.search(name) and bad(number):
                    return Check("plausible", False, f"@{name} = {part}: {meaning}")
    return Check("plausible", True, "")


def agree_check(support: int, total: int, picked: bool) -> Check:
    """Agreement with the other answers: passed when the vote picked this answer's class
    (``picked``) and it holds at least half of the answers. An answer the vote did not pick
    fails it, even with half of them (a tie lost): its "checks" must not read all passed."""
    if total <= 1:
        return Check("agree", picked or support > 0, "the only answer")
    words = f"{support} of {total} answers agree"
    if not picked:
        return Check("agree", False, f"{words}; the vote picked another answer")
    return Check("agree", support / total >= 0.5, words)


def path_checks(findings: Sequence[list[Finding] | None]) -> list[Check]:
    """The probes over a whole path: a probe fails if it failed at any step. No step probed
    (probes off, no pandas, the copy died): no probe checks at all, rather than a clean bill."""
    if all(step is None for step in findings):
        return []
    return probes.checks([f for step in findings if step for f in step])


def all_checks(findings: Sequence[list[Finding] | None], answer: str | None, question: str, fmt: str,
               support: int, total: int, picked: bool) -> list[Check]:
    return [*path_checks(findings), type_check(answer, question, fmt), plausible_check(answer),
            agree_check(support, total, picked)]


def failed(checks: Sequence[Check]) -> list[str]:
    return [c.name for c in checks if not c.passed]


__all__ = ["CHECKS", "agree_check", "all_checks", "asks_for", "failed", "path_checks", "plausible_check",
           "probe_copy", "type_check"]
