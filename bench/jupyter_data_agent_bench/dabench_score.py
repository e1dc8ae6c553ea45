"""Closed-form scoring for InfiAgent-DABench.

DABench answers are ``@name[value]`` tags; a question has one or more named
sub-answers. Extraction and equality are the benchmark's published rules
(:mod:`jupyter_data_agent.prompts.answers`, shared with the search). A
missing name is wrong; a question without a response (``None``) is wrong
with share 0.

Metrics: accuracy by question (all sub-answers right), proportional accuracy
by sub-question (mean of per-question right shares), accuracy by
sub-question (right sub-answers / all sub-answers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from jupyter_data_agent.prompts.answers import extract_answers, is_equal

__all__ = [
    "SubScore",
    "QuestionScore",
    "Breakdown",
    "Summary",
    "dabench_reward",
    "extract_answers",
    "is_equal",
    "score_question",
    "summarize",
    "summary_markdown",
]

_LEVEL_ORDER = ("easy", "medium", "hard")


@dataclass(frozen=True)
class SubScore:
    name: str
    expected: str
    got: str | None
    correct: bool


@dataclass(frozen=True)
class QuestionScore:
    id: object
    subs: tuple[SubScore, ...]
    correct: bool
    share: float
    answered: bool


@dataclass
class Breakdown:
    """The three DABench metrics with the counts they come from."""

    n_questions: int = 0
    n_answered: int = 0
    n_correct: int = 0
    n_subquestions: int = 0
    n_sub_correct: int = 0
    accuracy_by_question: float = 0.0
    proportional_accuracy_by_subquestion: float = 0.0
    accuracy_by_subquestion: float = 0.0


@dataclass
class Summary(Breakdown):
    by_level: dict[str, Breakdown] = field(default_factory=dict)
    by_concept: dict[str, Breakdown] = field(default_factory=dict)


def score_question(
    qid: object, response: str | None, labels: Sequence[tuple[str, str]]
) -> QuestionScore:
    """Score one response against its ``(name, value)`` labels.

    Raises ``ValueError`` for a question with no labels: such a question
    cannot be scored and would silently inflate accuracy if counted right.
    """
    if not labels:
        raise ValueError(f"question {qid!r} has no labels")
    answers = extract_answers(response) if response is not None else {}
    subs = []
    for name, expected in labels:
        expected = str(expected)
        got = answers.get(name)
        subs.append(SubScore(name, expected, got, got is not None and is_equal(got, expected)))
    n_right = sum(s.correct for s in subs)
    return QuestionScore(
        id=qid,
        subs=tuple(subs),
        correct=n_right == len(subs),
        share=n_right / len(subs),
        answered=response is not None,
    )


def dabench_reward(labels: Sequence[tuple[str, str]], qid: object = None) -> Callable[[str | None], float]:
    """Trajectory collection's reward: +1 when every ``@name[value]`` is right, else -1."""

    def reward(answer: str | None) -> float:
        return 1.0 if answer and score_question(qid, answer, labels).correct else -1.0

    return reward


def _breakdown(scores: Sequence[QuestionScore], into: Breakdown | None = None) -> Breakdown:
    b = into if into is not None else Breakdown()
    b.n_questions = len(scores)
    b.n_answered = sum(s.answered for s in scores)
    b.n_correct = sum(s.correct for s in scores)
    b.n_subquestions = sum(len(s.subs) for s in scores)
    b.n_sub_correct = sum(sub.correct for s in scores for sub in s.subs)
    if scores:
        b.accuracy_by_question = b.n_correct / len(scores)
        b.proportional_accuracy_by_subquestion = sum(s.share for s in scores) / len(scores)
    if b.n_subquestions:
        b.accuracy_by_subquestion = b.n_sub_correct / b.n_subquestions
    return b


def summarize(
    scores: Iterable[QuestionScore], meta: Mapping[object, Mapping[str, object]]
) -> Summary:
    """Overall metrics plus breakdowns by level and concept.

    ``meta[id]`` holds ``{"level": str, "concepts": [str, ...]}``; a question
    counts under each of its concepts, and one missing from ``meta`` falls
    under level ``"unknown"`` with no concept.  Unanswered questions must be
    passed in as ``score_question(qid, None, labels)`` to count as wrong.
    """
    scores = list(scores)
    summary = _breakdown(scores, Summary())
    assert isinstance(summary, Summary)
    by_level: dict[str, list[QuestionScore]] = {}
    by_concept: dict[str, list[QuestionScore]] = {}
    for s in scores:
        m = meta.get(s.id) or {}
        level = str(m.get("level") or "unknown")
        by_level.setdefault(level, []).append(s)
        concepts = m.get("concepts") or []
        if isinstance(concepts, str):
            concepts = [concepts]
        for c in dict.fromkeys(str(c) for c in concepts):  # dedupe, keep order
            by_concept.setdefault(c, []).append(s)
    order = {lv: i for i, lv in enumerate(_LEVEL_ORDER)}
    for level in sorted(by_level, key=lambda lv: (order.get(lv, len(order)), lv)):
        summary.by_level[level] = _breakdown(by_level[level])
    for concept in sorted(by_concept):
        summary.by_concept[concept] = _breakdown(by_concept[concept])
    return summary


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _row(label: str, b: Breakdown) -> str:
    return (
        f"| {label} | {b.n_questions} | {b.n_answered} | {_pct(b.accuracy_by_question)} "
        f"| {_pct(b.proportional_accuracy_by_subquestion)} | {_pct(b.accuracy_by_subquestion)} |"
    )


def summary_markdown(summary: Summary) -> str:
    """A Markdown table (percentages, two decimals) for reports."""
    lines = [
        "| Group | Questions | Answered | Acc. by question (%) "
        "| Prop. acc. by sub-question (%) | Acc. by sub-question (%) |",
        "|---|---:|---:|---:|---:|---:|",
        _row("**Overall**", summary),
    ]
    lines += [_row(f"level: {k}", v) for k, v in summary.by_level.items()]
    lines += [_row(f"concept: {k}", v) for k, v in summary.by_concept.items()]
    return "\n".join(lines) + "\n"
