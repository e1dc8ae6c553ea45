"""The evidence estimator: features from real searches, training deterministic under a seed, served.

Trajectories come from real MCTS collections (a scripted model over real
kernel copies, DABench rewards): some answers right, some wrong, some paths
that break a table on the way. The estimator trained on them must evaluate
from its JSON alone, be byte-identical for the same seed, and be picked up
as the newest value model version and resolved by ``resolve_estimator``.
"""

from __future__ import annotations

import json

import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.search import RunContext, TurnRequest
from jupyter_data_agent.search.estimators import NodeState, default_estimator, resolve_estimator
from jupyter_data_agent.search.features import (
    DEFAULT_MODEL,
    FEATURES,
    EvidenceModel,
    EvidenceValue,
    features,
    load_evidence_value,
)
from jupyter_data_agent.search.mcts import MCTSStrategy
from jupyter_data_agent.search.options import MCTSOptions, PromptPolicy, TaskInfo
from jupyter_data_agent.search.trajectories import read_jsonl
from jupyter_data_agent.store.value_models import newest_value_model
from jupyter_data_agent.train import cli
from jupyter_data_agent.train.features import auc, examples, fit, train_features_model
from tests.scripted_backend import ScriptedBackend, action, exact_reward, final, start_tree, stop_tree

pytestmark = pytest.mark.timeout(300)

SETUP = "import pandas as pd\nsales = pd.DataFrame({'store': [1, 2, 3, 4], 'units': [5, 6, 7, 8]})"


def rule(call):
    """Right path: sum the units; wrong paths: a filter that empties the table, or NaN."""
    if call.depth == 0:
        return [action("sum", "total = sales['units'].sum()\ntotal", -0.2),
                action("empty", "sales = sales[sales['units'] > 100]", -0.3),
                action("nan", "sales['units'] = sales['units'].where(sales['units'] > 6)", -0.4)]
    if call.thoughts[0] == "sum":
        return [final("right", "@total[26]", -0.1), final("right too", "@total[26]", -0.2),
                final("wrong", "@total[27]", -0.5)]
    return [final("wrong after", "@total[15]", -0.3), final("none", "@total[0]", -0.3),
            final("text", "@total[many]", -0.6)]


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("evidence")
    km, kc, tree = start_tree(cwd, timeout_s=10, setup=SETUP)
    path = cwd / "traj.jsonl"
    try:
        for _ in range(2):  # two trees of one search id each
            request = TurnRequest(intent="What is the total number of units sold?", context=NotebookContext(),
                                  options=MCTSOptions(iterations=4, trajectory_path=str(path), early_stop=False),
                                  task=TaskInfo(format="@total[value] where value is an integer"),
                                  prompt=PromptPolicy(max_prompt_tokens=6000))
            strategy = MCTSStrategy(reward_fn=exact_reward("@total[26]"))
            strategy.run(request, RunContext(backend=ScriptedBackend(rule), executor=tree.root))
        yield path
    finally:
        stop_tree(km, kc, tree)


def test_trajectories_keep_each_nodes_evidence(trajectories):
    records = read_jsonl(trajectories)
    feats = {r.extra["features"]["failed_empty"] for r in records if r.extra.get("features")}
    assert feats == {0.0, 1.0}  # the filter that emptied the table was seen in its copy
    nan = [r for r in records if r.extra.get("features", {}).get("failed_nan")]
    assert nan and all(set(r.extra["features"]) == set(FEATURES) for r in records if r.extra)
    data = examples(records)
    assert {y for _, y in data} == {0, 1}
    # Every node under "sum" reached a right answer; the node that emptied the table did not.
    assert all(y == 0 for f, y in data if f["failed_empty"])


def test_training_is_deterministic_under_a_seed(trajectories, tmp_path):
    a = train_features_model([str(trajectories)], tmp_path / "a.json", seed=3)
    b = train_features_model([str(trajectories)], tmp_path / "b.json", seed=3)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert a.examples == b.examples and a.train_auc == b.train_auc
    assert a.train_auc is not None and a.train_auc > 0.8  # the evidence separates right from wrong here
    c = train_features_model([str(trajectories)], tmp_path / "c.json", seed=4)
    model_a, model_c = EvidenceModel.load(tmp_path / "a.json"), EvidenceModel.load(tmp_path / "c.json")
    assert model_a.weights == model_c.weights  # the fit uses all examples; the seed only picks the held-out share
    assert c.examples == a.examples


def test_fit_recovers_a_known_logistic_rule():
    import numpy as np

    rng = np.random.default_rng(0)
    rows, labels = [], []
    for _ in range(2000):
        x = {"logprob": float(rng.normal()), "failed_nan": float(rng.integers(0, 2))}
        p = 1 / (1 + np.exp(-(1.5 * x["logprob"] - 2.0 * x["failed_nan"] + 0.5)))
        rows.append(x)
        labels.append(int(rng.random() < p))
    model = fit(rows, labels, l2=0.01)
    w = dict(zip(model.names, model.weights))
    i = model.names.index("logprob")
    j = model.names.index("failed_nan")
    assert w["logprob"] / model.scale[i] == pytest.approx(1.5, rel=0.15)
    assert w["failed_nan"] / model.scale[j] == pytest.approx(-2.0, rel=0.15)
    assert auc(model.probability(rows).tolist(), labels) > 0.75


def test_a_trained_version_is_newest_and_resolves_to_the_evidence_estimator(trajectories, tmp_path):
    root = tmp_path / "value_models"
    rc = cli.main(["--kind", "features", "-t", str(trajectories), "--out", str(root / "v1"), "--seed", "0"])
    assert rc == 0
    assert newest_value_model(root) == root / "v1"
    estimator = resolve_estimator(str(root / "v1"))
    assert isinstance(estimator, EvidenceValue) and estimator.label.startswith("evidence ")
    state = NodeState(messages=[], depth=1)
    assert -1.0 <= estimator.estimate([state])[0] <= 1.0
    assert json.loads((root / "v1" / "value_config.json").read_text())["kind"] == "features"


def test_features_cli_refuses_trajectories_without_features(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"messages": [], "depth": 1, "visits": 1, "value_sum": 1.0}) + "\n")
    assert cli.main(["--kind", "features", "-t", str(path), "--out", str(tmp_path / "m.json")]) == 2
    assert "not both right and wrong" in capsys.readouterr().err


def test_the_shipped_default_evaluates_without_a_training_library():
    assert DEFAULT_MODEL.is_file() and default_estimator() == "evidence"
    estimator = resolve_estimator(None)
    assert isinstance(estimator, EvidenceValue) and estimator.label == "evidence (default)"
    assert load_evidence_value().model.names == list(FEATURES)
    assert estimator.model.meta.get("examples", 0) > 0
    values = estimator.estimate([NodeState(messages=[], depth=2)])
    assert len(values) == 1 and -1.0 <= values[0] <= 1.0
    assert set(features(NodeState(messages=[]))) == set(FEATURES)


# -- from decisions: the store's accepts and rejects, from the shipped model as the prior -----------


def _decisions(n: int, seed: int) -> tuple[list[dict[str, float]], list[int]]:
    """Answers whose rightness shows in a check the shipped model gives no weight (failed_range:
    it never fired in its training trees), the rest noise it does weigh (the log-prob)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for _ in range(n):
        right = int(rng.random() < 0.4)
        out_of_range = float(rng.random() < (0.1 if right else 0.8))
        rows.append({"answered": 1.0, "well_formed": 1.0, "depth": float(rng.integers(3, 6)),
                     "heuristic": 0.8, "failed_range": out_of_range, "logprob": float(rng.normal(-0.4, 0.2)),
                     "has_logprob": 1.0, "agree_share": float(rng.choice([0.5, 1.0]))})
        labels.append(right)
    return rows, labels


def _store_of(path, rows, labels):
    from jupyter_data_agent.store.decisions import DecisionRecord, DecisionStore

    store = DecisionStore(path)
    for i, (row, y) in enumerate(zip(rows, labels)):
        store.add(DecisionRecord(decision="accepted" if y else "rejected", turn_id=f"t-{i}", strategy="mcts",
                                 features=row, complete=True))
    # neither an edit nor a decision without features is an example
    store.add(DecisionRecord(decision="edited", turn_id="t-0", features=rows[0], complete=True))
    store.add(DecisionRecord(decision="rejected", turn_id="t-x", strategy="direct", complete=True))
    return store.path


def test_decisions_train_the_evidence_model_from_the_shipped_one_deterministically(tmp_path):
    shipped = EvidenceModel.load(DEFAULT_MODEL)
    rows, labels = _decisions(30, seed=1)  # the loop's 30 decisions
    test_rows, test_labels = _decisions(300, seed=2)
    store = _store_of(tmp_path / "decisions.sqlite", rows, labels)

    a = train_features_model([str(store)], tmp_path / "a.json", seed=0, init="evidence")
    b = train_features_model([str(store)], tmp_path / "b.json", seed=0, init="evidence")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert a.examples == a.decisions == 30 and a.positives == sum(labels) and b.examples == 30

    trained = EvidenceModel.load(tmp_path / "a.json")
    before = auc(shipped.probability(test_rows).tolist(), test_labels)
    after = auc(trained.probability(test_rows).tolist(), test_labels)
    assert before is not None and after is not None and after >= before + 0.2, (before, after)
    weight = dict(zip(trained.names, trained.weights))
    prior = dict(zip(shipped.names, shipped.weights))
    assert weight["failed_range"] < -0.5 and prior["failed_range"] == 0.0
    kept = {n: (m, sc) for n, m, sc in zip(trained.names, trained.mean, trained.scale)}
    assert all(kept[n] == (m, sc) for n, m, sc in zip(shipped.names, shipped.mean, shipped.scale) if n in kept)
    # The prior is centred on the shipped model: held strongly, the decisions barely move it.
    train_features_model([str(store)], tmp_path / "held.json", init="evidence", l2=1e6)
    held = EvidenceModel.load(tmp_path / "held.json")
    assert [dict(zip(held.names, held.weights)).get(n, w) for n, w in zip(shipped.names, shipped.weights)] == \
        pytest.approx(shipped.weights, abs=1e-3)
    assert held.bias == pytest.approx(shipped.bias, abs=1e-3)
    assert trained.meta["init"] == "evidence" and trained.meta["decisions"] == 30


def test_one_class_of_decisions_is_enough_from_an_init_but_not_from_nothing(tmp_path):
    rows, _ = _decisions(6, seed=3)
    store = _store_of(tmp_path / "decisions.sqlite", rows, [1] * len(rows))
    with pytest.raises(ValueError, match="not both right and wrong"):
        train_features_model([str(store)], tmp_path / "none.json")
    result = train_features_model([str(store)], tmp_path / "init.json", init="evidence")
    assert result.examples == 6 and result.heldout_auc is None


def test_features_cli_trains_on_trajectories_and_the_store_together(trajectories, tmp_path, capsys):
    rows, labels = _decisions(30, seed=1)
    store = _store_of(tmp_path / "decisions.sqlite", rows, labels)
    out = tmp_path / "value_models" / "v1"
    assert cli.main(["--kind", "features", "-t", str(trajectories), str(store), "--init", "evidence",
                     "--out", str(out)]) == 0
    said = capsys.readouterr().out
    nodes = len(examples(read_jsonl(trajectories)))
    assert f"trained on {nodes + 30} nodes" in said and "30 of them decisions, from evidence" in said
    assert isinstance(resolve_estimator(str(out)), EvidenceValue)
    assert cli.main(["--kind", "features", "-t", str(tmp_path / "missing.sqlite"), "--out",
                     str(tmp_path / "m.json")]) == 2
    assert "no decisions store" in capsys.readouterr().err
