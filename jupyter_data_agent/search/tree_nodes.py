"""The search tree's parts: nodes, answer groups, the prior over siblings, an iteration's timing.

Kept apart from the search loop (``search/mcts.py``) so the benchmarks and
the trajectory export read them without the loop's machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..kernel.inkernel.probes import Finding
from ..kernel.results import ExecResult
from ..prompts.answers import same_text_answer
from .base import TraceStep
from .majority import majority

__all__ = ["AnswerGroup", "IterationTiming", "Node", "group_answers", "priors", "step_key"]


@dataclass(eq=False)
class Node:
    id: str
    parent: "Node | None"
    depth: int
    step: TraceStep | None = None  # None for the root
    message: str = ""  # the canonical assistant message of this step
    observation: str | None = None  # None for the root and final answers
    result: ExecResult | None = None
    prior: float = 1.0
    mean_logprob: float | None = None
    raw: str = ""
    errors: int = 0  # execution errors on the path, this node included
    value: float | None = None  # this node's own evaluation
    reward: float | None = None  # reward_fn's verdict on a final answer
    visits: int = 0
    value_sum: float = 0.0
    best: float | None = None  # the highest value at or below this node (``MCTSOptions.backup="max"``)
    terminal: bool = False
    reason: str | None = None  # answer | error_limit | depth_limit
    exhausted: bool = False
    children: list["Node"] = field(default_factory=list)
    snapshot: Any = None
    findings: list[Finding] | None = None  # the copy's probes after this step (None: not probed)
    features: dict[str, float] | None = None  # what the evidence estimator read (``search.features``)
    final_features: dict[str, float] | None = None  # an answer's, once the search ended (whole tree)
    samples: int = 1  # the model's samples that proposed this step (identical siblings merge)
    key: tuple = ()  # what makes two sibling samples the same step (``step_key``)

    @property
    def share(self) -> float:
        """This step's share of the samples drawn at its parent: step-level self-consistency."""
        if self.parent is None:
            return 1.0
        return self.samples / max(1, sum(c.samples for c in self.parent.children))

    @property
    def q(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    @property
    def answer(self) -> str | None:
        return self.step.answer if self.step is not None else None

    def path(self) -> list["Node"]:
        """Nodes from the root's first child down to this one."""
        out, n = [], self
        while n is not None and n.parent is not None:
            out.append(n)
            n = n.parent
        return out[::-1]

    def __repr__(self) -> str:
        return f"<Node {self.id} d={self.depth} N={self.visits} Q={self.q:.3f} {self.reason or ''}>"


@dataclass
class AnswerGroup:
    answer: str
    nodes: list[Node]

    @property
    def votes(self) -> int:
        return sum(n.samples for n in self.nodes)  # a merged answer counts each sample that gave it

    @property
    def best(self) -> Node:
        return max(self.nodes, key=lambda n: (n.value if n.value is not None else -2.0))

    @property
    def value(self) -> float:
        return self.best.value if self.best.value is not None else 0.0


def group_answers(nodes: list[Node]) -> list[AnswerGroup]:
    """Equivalent answers vote together; most votes first, then value, then age."""
    groups = [AnswerGroup(nodes[g[0]].answer, [nodes[i] for i in g])
              for g in majority([n.answer for n in nodes], same_text_answer)]
    return sorted(groups, key=lambda g: (-g.votes, -g.value))  # stable: then age


def step_key(kind: str, code: str | None, answer: str | None) -> tuple:
    """Sibling samples with the same key are one step: the same code (up to blank lines and
    trailing spaces), the same final answer, or both replies that held neither."""
    if kind == "action":
        return ("action", "\n".join(line.rstrip() for line in (code or "").strip().splitlines() if line.strip()))
    if kind == "answer":
        return ("answer", " ".join((answer or "").split()))
    return ("invalid",)


def priors(logprobs: list[float | None]) -> list[float]:
    """Softmax of mean token log-probabilities over siblings; uniform without them."""
    if not logprobs:
        return []
    if any(lp is None for lp in logprobs):
        return [1.0 / len(logprobs)] * len(logprobs)
    m = max(logprobs)
    ex = [math.exp(lp - m) for lp in logprobs]
    s = sum(ex)
    return [e / s for e in ex]


@dataclass
class IterationTiming:
    """Where one iteration's time went (seconds), for the overhead benchmark."""

    select: float = 0.0
    prompt: float = 0.0
    model: float = 0.0
    execute: float = 0.0  # fork + exec round trips, wall (parallel)
    user_code: float = 0.0  # time the cells themselves ran (sum over children)
    evaluate: float = 0.0
    backprop: float = 0.0
    total: float = 0.0
    children: int = 0
    executed: int = 0
