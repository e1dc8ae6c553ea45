"""The evidence estimator: a logistic regression over a node's evidence, search facts and log-probs.

``features(state)`` turns a :class:`~.estimators.NodeState` into named
numbers: the execution facts the heuristic reads (its value among them),
each failed check of ``search.evidence`` (the copy's probes on the path, the
answer's type, agreement with the other answers), the step's mean token
log-prob and prior, the depth and the errors on the path, and the share of
the samples drawn beside each step of the path that proposed that same step
(identical sibling samples merge in ``mcts``: a step most samples agree on is
more likely right, whatever the log-probs say).

:class:`EvidenceModel` is the trained model as a small JSON file (names,
standardisation, coefficients), evaluated with numpy alone: no training
library is needed to use it, and it trains in seconds (``train.features``).
A default trained on the strategy lab's train split ships in the package
(``evidence_model.json``); ``EvidenceValue`` is the estimator that uses one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..prompts.answers import well_formed
from .base import SearchStats
from .estimators import ERROR_STATUSES, HeuristicValue, NodeState
from .evidence import CHECKS

#: The file a features model is saved as (inside a value-model version directory, or shipped).
MODEL_FILE = "evidence_model.json"
DEFAULT_MODEL = Path(__file__).with_name(MODEL_FILE)
#: Search's answers as its pick weighs them (``bench answer_model``: fitted on the lab's train split).
ANSWER_MODEL = Path(__file__).with_name("answer_model.json")
KIND = "features"

FEATURES: tuple[str, ...] = (
    "answered", "well_formed", "ran", "last_error", "invalid", "past_errors", "depth", "heuristic",
    *(f"failed_{c}" for c in CHECKS), "agree_share", "logprob", "has_logprob", "prior",
    "share", "path_share", "min_share")

_HEURISTIC = HeuristicValue()


def features(state: NodeState) -> dict[str, float]:
    """A node's named features (every name of ``FEATURES``, missing facts as 0)."""
    last = state.last
    status = last.status if last is not None else ""
    earlier = state.steps[:-1]
    failed = {c.name for c in state.checks if not c.passed}
    shares = state.shares or [1.0]
    out = {
        "answered": float(status == "answer"),
        "well_formed": float(status == "answer" and well_formed(last.answer if last else None, state.format)),
        "ran": float(status == "ok"),
        "last_error": float(status in ERROR_STATUSES),
        "invalid": float(status == "invalid"),
        "past_errors": float(sum(s.status in ERROR_STATUSES or s.status == "invalid" for s in earlier)),
        "depth": float(state.depth),
        "heuristic": _HEURISTIC.score(state),
        **{f"failed_{c}": float(c in failed) for c in CHECKS},
        "agree_share": float(state.agreement or 0.0) if status == "answer" else 0.0,
        "logprob": float(state.mean_logprob) if state.mean_logprob is not None else 0.0,
        "has_logprob": float(state.mean_logprob is not None),
        "prior": float(state.prior),
        # Step-level self-consistency: how many of the samples drawn beside each step proposed it.
        "share": float(shares[-1]),
        "path_share": float(sum(shares) / len(shares)),
        "min_share": float(min(shares)),
    }
    return out


@dataclass
class EvidenceModel:
    """A logistic regression: P(right) = sigmoid(w · (x - mean) / scale + b)."""

    names: list[str]
    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    meta: dict = field(default_factory=dict)  # what it was trained on, for the label and the docs

    def matrix(self, rows: Sequence[dict[str, float]]) -> np.ndarray:
        return np.array([[float(r.get(n, 0.0)) for n in self.names] for r in rows], dtype=float)

    def probability(self, rows: Sequence[dict[str, float]]) -> np.ndarray:
        if not rows:
            return np.zeros(0)
        z = (self.matrix(rows) - np.array(self.mean)) / np.array(self.scale)
        logits = z @ np.array(self.weights) + self.bias
        return 1.0 / (1.0 + np.exp(-np.clip(logits, -50, 50)))

    def to_json(self) -> dict:
        return {"kind": KIND, **asdict(self)}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "EvidenceModel":
        path = Path(path)
        if path.is_dir():
            path = path / MODEL_FILE
        data = json.loads(path.read_text())
        if data.get("kind") != KIND:
            raise ValueError(f"{path} is not an evidence (features) model")
        n = len(data["names"])
        if not (len(data["mean"]) == len(data["scale"]) == len(data["weights"]) == n) or not all(
                math.isfinite(float(v)) for v in [*data["weights"], data["bias"]]):
            raise ValueError(f"{path}: malformed evidence model")
        return cls(list(data["names"]), [float(v) for v in data["mean"]],
                   [float(v) or 1.0 for v in data["scale"]], [float(v) for v in data["weights"]],
                   float(data["bias"]), dict(data.get("meta") or {}))


@dataclass
class EvidenceValue:
    """The estimator of an :class:`EvidenceModel`: value = 2 P(right) - 1.

    ``answers``: a model of whole answers for Search's pick (``search.branching``), where one was
    fitted: the shipped node model learned from the tree's nodes and ranks Search's answers no
    better than chance (``meta.answer_auc``), the shipped answer model learned from those answers.
    """

    model: EvidenceModel
    name: str = "evidence"
    label: str = "evidence"
    answers: EvidenceModel | None = None

    def estimate(self, states: Sequence[NodeState], stats: SearchStats | None = None) -> list[float]:
        return [float(2 * p - 1) for p in self.model.probability([features(s) for s in states])]


def is_features_model(path: str | Path) -> bool:
    path = Path(path)
    return (path / MODEL_FILE).is_file() if path.is_dir() else path.name.endswith(".json") and path.is_file()


def load_evidence_value(path: str | Path | None = None) -> EvidenceValue:
    """The shipped default (``path`` None, with the shipped answer model) or a trained version's
    evidence estimator."""
    if path is None:
        answers = EvidenceModel.load(ANSWER_MODEL) if ANSWER_MODEL.is_file() else None
        return EvidenceValue(EvidenceModel.load(DEFAULT_MODEL), label="evidence (default)", answers=answers)
    return EvidenceValue(EvidenceModel.load(path), label=f"evidence {path}")


__all__ = ["ANSWER_MODEL", "DEFAULT_MODEL", "FEATURES", "KIND", "MODEL_FILE", "EvidenceModel", "EvidenceValue",
           "features", "is_features_model", "load_evidence_value"]
