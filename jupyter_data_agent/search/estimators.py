"""Value estimators: how promising is a notebook state (a search node)?

The search only sees :class:`ValueEstimator` (``estimate(states) -> values in
[-1, 1]``), so the heuristic, an LLM self-rating and a trained value model
(``value_net.ValueModel``, JUPITER's LM + head) are interchangeable.

Without a trained model the heuristic is the default: it is free, and the
facts it reads (errors, empty or repeated outputs, a well-formed answer) are
the ones that separate dead ends from progress in practice. The learned
model lives in ``value_net`` so that importing this module never imports
torch.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..kernel.inkernel.probes import Check
from ..llm.base import Backend, SamplingParams
from ..prompts.answers import well_formed
from ..prompts.react import to_prompt
from .base import SearchStats, TraceStep

ENV_VALUE_MODEL = "JUPYTER_DATA_AGENT_VALUE_MODEL"
ERROR_STATUSES = frozenset({"error", "timeout", "died"})


@dataclass
class NodeState:
    """What an estimator may look at: the message history (what the value
    model reads) and the same path as typed steps (what the heuristic reads)."""

    messages: list[dict]
    steps: list[TraceStep] = field(default_factory=list)
    format: str = ""
    depth: int = 0
    # Evidence (``search.evidence``): the path's checks, the step's mean token log-prob and
    # prior among its siblings, and the share of the search's answers that agree with it.
    checks: list[Check] = field(default_factory=list)
    mean_logprob: float | None = None
    prior: float = 1.0
    agreement: float | None = None  # answers: the share of the search's answers that say the same
    # Each step's share of the samples drawn at its parent (identical samples merged; 1.0 alone).
    shares: list[float] = field(default_factory=list)

    @property
    def last(self) -> TraceStep | None:
        return self.steps[-1] if self.steps else None


@runtime_checkable
class ValueEstimator(Protocol):
    name: str

    def estimate(self, states: Sequence[NodeState], stats: SearchStats | None = None) -> list[float]:
        """One value in [-1, 1] per state (batched: a model scores them together)."""
        ...


def clip(v: float) -> float:
    return max(-1.0, min(1.0, float(v)))


class ZeroValue:
    """No estimate: MCTS then relies on terminal rewards and the prior alone."""

    name = "none"

    def estimate(self, states: Sequence[NodeState], stats: SearchStats | None = None) -> list[float]:
        return [0.0 for _ in states]


@dataclass
class HeuristicValue:
    """A value from execution facts alone. Rules (summed, then clipped to [-1, 1]):

    - final answer: ``+answer`` when well formed (non-empty and, when the
      output format names ``@tags``, carrying all of them) and grounded (some
      earlier step ran without error), ``+ungrounded`` when well formed but
      nothing ran yet, ``malformed`` otherwise;
    - invalid reply (neither code nor answer): ``invalid``;
    - the last cell raised, timed out or died: ``error``;
    - the last cell ran: ``+progress`` with output, ``empty`` without;
      ``repeat`` when it repeats an earlier cell's code or the previous
      output (a loop makes no progress);
    - every earlier error on the path: ``past_error`` each;
    - answers only: ``per_step`` per step (shorter solutions are preferred).
      Intermediate states carry no depth penalty: with ``c_puct = 0`` it would
      make the search breadth-first, and notebooks need depth, not width.
    """

    answer: float = 0.6
    ungrounded: float = 0.2
    malformed: float = -0.2
    invalid: float = -0.6
    error: float = -0.5
    progress: float = 0.1
    empty: float = -0.1
    repeat: float = -0.3
    past_error: float = -0.1
    per_step: float = -0.02
    name: str = "heuristic"

    def score(self, state: NodeState) -> float:
        last = state.last
        if last is None:
            return 0.0
        earlier = state.steps[:-1]
        v = 0.0
        if last.status == "answer":
            if well_formed(last.answer, state.format):
                v += self.answer if any(s.status == "ok" for s in earlier) else self.ungrounded
            else:
                v += self.malformed
        elif last.status == "invalid":
            v += self.invalid
        elif last.status in ERROR_STATUSES:
            v += self.error
        else:
            out = last.output.strip()
            empty = not out or out == "(no output)"
            v += self.empty if empty else self.progress
            code = last.code.strip()
            if any(s.code.strip() == code for s in earlier if s.code) or (
                    not empty and earlier and earlier[-1].status == "ok"
                    and earlier[-1].output.strip() == out):
                v += self.repeat
        v += self.past_error * sum(s.status in ERROR_STATUSES for s in earlier)
        if last.status == "answer":
            v += self.per_step * len(state.steps)
        return clip(v)

    def estimate(self, states: Sequence[NodeState], stats: SearchStats | None = None) -> list[float]:
        return [self.score(s) for s in states]


_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")

JUDGE_INSTRUCTION = (
    "Rate the steps above: how likely do they lead to a correct final answer to the task? "
    "Reply with one number from 0 (hopeless) to 10 (certainly right), nothing else."
)


@dataclass
class LLMJudgeValue:
    """The generator model rates the state 0-10 (mapped to [-1, 1]).

    Off by default: one extra model call per node, and small models rate
    poorly; where the reply holds no number the heuristic answers instead.
    """

    backend: Backend
    fallback: HeuristicValue = field(default_factory=HeuristicValue)
    max_tokens: int = 4
    name: str = "llm-judge"

    def estimate(self, states: Sequence[NodeState], stats: SearchStats | None = None) -> list[float]:
        out = []
        for state in states:
            msgs = list(state.messages) + [{"role": "user", "content": JUDGE_INSTRUCTION}]
            prompt = to_prompt(msgs, self.backend.capabilities.chat, "Rating:")
            completions = self.backend.generate(
                prompt, SamplingParams(n=1, temperature=0.0, max_tokens=self.max_tokens))
            if stats is not None:
                stats.count_call(completions)
            m = _NUMBER_RE.search(completions[0].text if completions else "")
            if m is None:
                out.append(self.fallback.score(state))
            else:
                out.append(clip(min(10.0, float(m.group())) / 5.0 - 1.0))
        return out


_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


def load_value_model(path: str, device: str = "cpu"):
    """A trained value model directory, loaded once per process (it holds an LM)."""
    from .value_net import ValueModel

    key = f"{os.path.abspath(path)}@{device}"
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = ValueModel.load(path, device=device)
        return _MODELS[key]


def default_estimator() -> str:
    """What guides a search when nothing is configured: the shipped evidence model, where installed."""
    from .features import DEFAULT_MODEL

    return "evidence" if DEFAULT_MODEL.is_file() else "heuristic"


def resolve_estimator(spec: Any, backend: Backend | None = None) -> ValueEstimator:
    """``spec``: an estimator, "evidence" (default: the shipped evidence model, ``search.features``),
    "heuristic", "none", "judge", or the directory of a trained value model, LM or features (also
    taken from $JUPYTER_DATA_AGENT_VALUE_MODEL)."""
    from .features import is_features_model, load_evidence_value

    if spec is None:
        spec = os.environ.get(ENV_VALUE_MODEL) or default_estimator()
    if isinstance(spec, str) and spec == "evidence":
        return load_evidence_value()
    if isinstance(spec, str) and os.path.exists(spec) and is_features_model(spec):
        return load_evidence_value(spec)
    if isinstance(spec, ValueEstimator) and not isinstance(spec, str):
        return spec
    name = str(spec)
    if name == "heuristic":
        return HeuristicValue()
    if name in ("none", "zero"):
        return ZeroValue()
    if name in ("judge", "llm", "llm-judge"):
        if backend is None:
            raise ValueError("the LLM judge needs the generator backend")
        return LLMJudgeValue(backend)
    if os.path.isdir(name):
        return load_value_model(name)
    raise ValueError(f"Unknown value estimator {name!r}: use 'evidence', 'heuristic', 'none', 'judge' or the "
                     "directory of a trained value model (jupyter-data-agent train-value).")


__all__ = [
    "ENV_VALUE_MODEL",
    "HeuristicValue",
    "LLMJudgeValue",
    "NodeState",
    "ValueEstimator",
    "ZeroValue",
    "default_estimator",
    "load_value_model",
    "resolve_estimator",
]
