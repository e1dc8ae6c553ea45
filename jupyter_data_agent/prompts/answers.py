"""Final answers in words: ``@name[value]`` tags, and when two answers say the same.

Neutral ground for the search (which votes over answers and rates them) and
the benchmarks (which score them). Extraction and equality follow
InfiAgent-DABench's published scorer, so our numbers compare with reported
ones: every tag is found with ``@(\\w+)\\[(.*?)\\]`` (no DOTALL, a value never
spans lines) and a repeated name keeps its last value; a value is right when
it equals the label exactly, or both parse with ``float()`` and differ by
less than 1e-6. No normalisation (``@s[ abc]`` is wrong for ``abc``).
"""

from __future__ import annotations

import re

ANSWER_PATTERN = re.compile(r"@(\w+)\[(.*?)\]")
FLOAT_TOL = 1e-6


def extract_answers(text: str) -> dict[str, str]:
    """All ``@name[value]`` tags in ``text``; a repeated name keeps its last value."""
    return dict(ANSWER_PATTERN.findall(text or ""))


def is_equal(got: str, expected: str) -> bool:
    """Exact string equality, else numeric equality within ``FLOAT_TOL``."""
    if got == expected:
        return True
    try:
        return abs(float(got) - float(expected)) < FLOAT_TOL
    except (TypeError, ValueError, OverflowError):
        return False


def expected_tags(fmt: str) -> list[str]:
    """Answer names a DABench-style format asks for (``@name[...]``)."""
    return [name for name, _ in ANSWER_PATTERN.findall(fmt or "")]


def well_formed(answer: str | None, fmt: str = "") -> bool:
    """Non-empty, and carrying every ``@name[value]`` tag the format asks for."""
    if not answer or not answer.strip():
        return False
    return set(expected_tags(fmt)) <= extract_answers(answer).keys()


def _plain(answer: str) -> str:
    return " ".join(answer.strip().split()).strip("`'\"").rstrip(".").strip().lower()


def same_text_answer(a: str, b: str) -> bool:
    """Answers vote together when they say the same: equal ``@name[value]``
    tags (numbers within 1e-6, whitespace ignored), else equal text up to case,
    spacing, quotes and a final period, or equal numbers."""
    ta, tb = extract_answers(a), extract_answers(b)
    if ta or tb:
        return ta.keys() == tb.keys() and all(is_equal(ta[k].strip(), tb[k].strip()) for k in ta)
    pa, pb = _plain(a), _plain(b)
    return pa == pb or is_equal(pa, pb)


__all__ = ["ANSWER_PATTERN", "FLOAT_TOL", "expected_tags", "extract_answers", "is_equal",
           "same_text_answer", "well_formed"]
