"""``train-value --kind features``: the evidence estimator (``search.features``) from trajectories
and from the decisions store.

Trajectory examples are the search nodes whose features the trajectories kept
(``extra["features"]``, written by ``mcts``), labelled by what their subtree
reached: a final answer is right when its reward is positive, a path ended by
its error or depth limit is wrong; any other node is right when some end
below it is right, wrong when every end below it is wrong, and left out when
none was reached (nothing is known about it).

Decision examples are the candidates the user decided on whose features the
store kept (``DecisionRecord.features``: an mcts candidate's answer node):
accepted (accept, accept & run) is right, rejected is wrong; edits are not
labels (the accept before them is).

``init`` continues from a trained model (``evidence``: the shipped default)
whose training data is not at hand: the fit keeps the init's standardisation
and shrinks each weight and the bias towards the init's (an L2 prior centred
on it, of strength ``l2``) instead of towards 0, so a few dozen decisions
adjust the init where they carry a signal and leave it alone elsewhere
(decisions of one class are then enough); a feature that does not vary
across the examples keeps the init's weight. A feature the init does not
know is standardised on the data, its prior weight 0.

The model is an L2-regularised logistic regression fitted by Newton's method
(iteratively reweighted least squares) in numpy: a few dozen features and a
few thousand nodes train in well under a second, the result depends only on
the data (the seed orders the examples and picks the held-out share whose
AUC is reported), and the saved JSON evaluates without any training library.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..search.features import DEFAULT_MODEL, FEATURES, MODEL_FILE, EvidenceModel
from ..search.trajectories import TrajectoryRecord, read_jsonl
from ..store.decisions import DecisionRecord, DecisionStore
from .decisions import is_store


@dataclass
class FeaturesResult:
    out: Path
    examples: int
    positives: int
    decisions: int  # of the examples, those from decisions stores
    train_auc: float | None
    heldout_auc: float | None


def auc(scores: list[float], labels: list[int]) -> float | None:
    """P(a positive scores above a negative), ties half; None without both classes."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def _reached(r: TrajectoryRecord, children: dict[str | None, list[TrajectoryRecord]],
             memo: dict[str, tuple[bool, bool]]) -> tuple[bool, bool]:
    """(some answer at or below ``r`` is right, some answer at or below ``r``)."""
    if r.node_id not in memo:
        if r.terminal and r.terminal_reward is not None:  # an answer's reward, or a failed path's
            memo[r.node_id] = (r.terminal_reward > 0, True)
        else:
            below = [_reached(c, children, memo) for c in children.get(r.node_id, [])]
            memo[r.node_id] = (any(b[0] for b in below), any(b[1] for b in below))
    return memo[r.node_id]


def examples(records: list[TrajectoryRecord]) -> list[tuple[dict[str, float], int]]:
    """(features, label) of every node with features whose subtree reached an answer."""
    by_tree: dict[str, list[TrajectoryRecord]] = defaultdict(list)
    for r in records:
        by_tree[r.search_id].append(r)
    out = []
    for nodes in by_tree.values():
        children: dict[str | None, list[TrajectoryRecord]] = defaultdict(list)
        for r in nodes:
            children[r.parent_id].append(r)
        memo: dict[str, tuple[bool, bool]] = {}
        for r in nodes:
            feats = r.extra.get("features") if isinstance(r.extra, dict) else None
            if not isinstance(feats, dict):
                continue
            right, any_answer = _reached(r, children, memo)
            if any_answer:
                out.append(({k: float(v) for k, v in feats.items()}, int(right)))
    return out


def decision_examples(records: Iterable[DecisionRecord]) -> list[tuple[dict[str, float], int]]:
    """(features, label) of every accept (1) or reject (0) whose candidate's features were kept."""
    return [({k: float(v) for k, v in r.features.items()}, int(r.accepted)) for r in records
            if r.features and r.decision != "edited"]


def load_init(spec: str | Path) -> EvidenceModel:
    """``evidence`` (the shipped default), a trained version's directory or a model's ``.json``."""
    return EvidenceModel.load(DEFAULT_MODEL if str(spec) == "evidence" else spec)


def fit(rows: list[dict[str, float]], labels: list[int], *, l2: float = 1.0, iterations: int = 50,
        meta: dict | None = None, init: EvidenceModel | None = None) -> EvidenceModel:
    """Logistic regression on standardised features, by Newton's method (IRLS) with an L2 penalty
    towards 0, or towards ``init``'s weights in ``init``'s standardisation (module docstring)."""
    names = list(FEATURES)
    x = np.array([[r.get(n, 0.0) for n in names] for r in rows], dtype=float)
    y = np.array(labels, dtype=float)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    prior = np.zeros(len(names) + 1)
    if init is not None:
        known = {n: i for i, n in enumerate(init.names)}
        for j, n in enumerate(names):
            if n in known:
                i = known[n]
                mean[j], scale[j], prior[j] = init.mean[i], init.scale[i], init.weights[i]
        prior[-1] = init.bias
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = prior.copy()
    penalty = np.full(z.shape[1], l2)
    if init is None:
        penalty[-1] = 0.0  # the bias is not shrunk (towards an init's bias it is: one class is then enough)
    # The data says nothing of a feature it never varies: from an init it keeps the init's weight
    # (fitted, it would only soak up a share of the bias shift, and rank by it where it does vary).
    free = np.flatnonzero(np.append(np.ptp(x, axis=0) > 0, True)) if init is not None else np.arange(len(w))

    def loss(v: np.ndarray) -> float:  # the penalised negative log-likelihood
        s = z @ v
        return float(np.sum(np.logaddexp(0.0, s) - y * s) + 0.5 * np.sum(penalty * (v - prior) ** 2))

    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -50, 50)))
        grad = z.T @ (p - y) + penalty * (w - prior)
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.zeros_like(w)
        step[free] = np.linalg.solve(hess[np.ix_(free, free)], grad[free])
        # Halved while it does not lower the loss: from a saturated start (an init far from the
        # data) a full Newton step overshoots.
        current = loss(w)
        for _ in range(30):
            if loss(w - step) <= current:
                break
            step = step / 2
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return EvidenceModel(names, [round(float(v), 10) for v in mean], [round(float(v), 10) for v in scale],
                         [round(float(v), 10) for v in w[:-1]], round(float(w[-1]), 10), dict(meta or {}))


def train_features_model(paths: list[str], out: str | Path, *, seed: int = 0, l2: float = 1.0,
                         heldout: float = 0.2, init: str | Path | None = None) -> FeaturesResult:
    """Fit on the trajectories and decisions stores in ``paths`` (from ``init``, when given), report
    train and held-out AUC, save to ``out``.

    ``out`` is a directory (a value-model version: ``evidence_model.json`` and the
    ``value_config.json`` that marks it complete) or a ``.json`` file.
    """
    records: list[TrajectoryRecord] = []
    decided: list[tuple[dict[str, float], int]] = []
    for path in paths:
        if is_store(path):
            if not Path(path).is_file():
                raise FileNotFoundError(f"no decisions store at {path}")
            decided += decision_examples(DecisionStore(path).records())
        else:
            records.extend(read_jsonl(path))
    data = examples(records) + decided
    if len({y for _, y in data}) < (1 if init is not None else 2):
        raise ValueError(f"{len(data)} examples with features ({len(decided)} of them decisions), not both "
                         "right and wrong ones: collect trajectories with mcts (the lab's --collect), or "
                         "accept and reject candidates of Search (mcts) turns, first")
    start = load_init(init) if init is not None else None
    rng = random.Random(seed)
    order = list(range(len(data)))
    rng.shuffle(order)
    cut = int(len(order) * heldout)
    test, train = order[:cut], order[cut:]

    def model_on(idx: list[int]) -> EvidenceModel:
        return fit([data[i][0] for i in idx], [data[i][1] for i in idx], l2=l2, init=start)

    held = model_on(train)
    held_auc = auc(held.probability([data[i][0] for i in test]).tolist(), [data[i][1] for i in test]) \
        if test else None
    rows, labels = [d[0] for d in data], [d[1] for d in data]
    model = fit(rows, labels, l2=l2, init=start, meta={
        "examples": len(data), "positives": sum(labels), "decisions": len(decided), "seed": seed, "l2": l2,
        "sources": [Path(p).name for p in paths], "init": None if init is None else str(init),
        "heldout_auc": held_auc})
    train_auc = auc(model.probability(rows).tolist(), labels)
    model.meta["train_auc"] = train_auc
    out = Path(out)
    if out.suffix == ".json":
        out.parent.mkdir(parents=True, exist_ok=True)
        model.save(out)
    else:
        out.mkdir(parents=True, exist_ok=True)
        model.save(out / MODEL_FILE)
        # Written last: it marks the version complete (store.value_models.newest_value_model).
        (out / "value_config.json").write_text(json.dumps({"kind": "features", "file": MODEL_FILE}) + "\n")
    return FeaturesResult(out, len(data), sum(labels), len(decided), train_auc, held_auc)


__all__ = ["FeaturesResult", "auc", "decision_examples", "examples", "fit", "load_init", "train_features_model"]
