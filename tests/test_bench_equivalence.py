"""The equivalence benchmark on a small synthetic table: variants, both judging paths, rates, votes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jupyter_data_agent_bench import equivalence as bench
from jupyter_data_agent_bench import equivalence_cases as cases

pytestmark = pytest.mark.timeout(120)

TABLES = (("t", ("t.csv", {"parse_dates": ["day"]})),)
SPECS = (
    ("mean_score", "t['score'].mean()"),
    ("by_city", "t.groupby('city')['score'].mean()"),
    ("counts", "t['city'].value_counts()"),
    ("late", "t[t['n'] > 10][['city', 'score', 'w', 'n']]"),
    ("firsts", "t['city'].head(5)"),
    ("top", "t.nlargest(3, 'w')['city'].tolist()"),
    ("score_frame", "t[['score']].head(8)"),
    ("last_day", "t['day'].max()"),
)


def _write_table(folder) -> None:
    rng = np.random.default_rng(1)
    n = 30
    score = rng.normal(50, 10, n).round(3)
    score[[3, 17]] = np.nan
    pd.DataFrame({"city": rng.choice(["Oslo", "Lima", "Pune", "Kobe"], n), "score": score,
                  "w": rng.uniform(0, 1, n).round(4), "n": np.arange(n),
                  "day": pd.date_range("2024-01-01", periods=n, freq="D")}).to_csv(folder / "t.csv", index=False)


def test_variants_are_meaningful_only():
    s = pd.Series([1.5, 2.5], index=pd.Index(["a", "b"], name="k"))
    kinds = {k for k, _, _ in cases.variants(s)}
    assert {"to_frame", "reset_index", "float_noise", "wrong_key", "shuffle_index", "order_flip"} <= kinds
    assert "nan_to_zero" not in kinds  # no NaN to fill
    assert "truncate" not in kinds  # not a long result
    assert "to_numpy" not in kinds  # the keys would be lost: not the same answer
    assert cases.nan_to_zero(pd.Series([1.0, np.nan])).tolist() == [1.0, 0.0]
    assert cases.off_by_one(7) == 8 and cases.off_by_one(True) is False
    # a variant that leaves the value as it is is dropped
    assert "int_plus_one" not in {k for k, _, _ in cases.variants([1.5, 2.5])}


def test_ideal_pick_ties_go_to_the_first_class():
    assert bench.ideal_pick([2, 0, 0, 2]) == 2
    assert bench.ideal_pick([1, 0, 0, 2]) == 0


def test_small_suite_in_process_and_round_trip(tmp_path):
    _write_table(tmp_path)
    source = bench.RefSource(str(tmp_path), SPECS, arcade=False, tables=TABLES)
    report, judged, refs = bench.run(source, kernel=True, trials=40, speed=False)

    assert set(refs) == {name for name, _ in SPECS}
    kinds = {c.kind for c in judged}
    assert {"to_frame", "squeeze", "reset_index", "tolist", "rename_columns", "rename_axis", "astype_object",
            "float_noise",
            "off_by_one", "swap_columns", "wrong_key", "nan_to_zero", "order_flip", "datetime_shift"} <= kinds
    # the rates are the verdicts counted
    for row in report.rates:
        group = [c for c in judged if c.rewrite == row.rewrite and (row.kind.startswith("all ") or c.kind == row.kind)]
        assert row.n == len(group)
        for j, _ in bench.JUDGMENTS:
            assert row.judged[j] == len(group)
            assert row.accepted[j] == sum(getattr(c, j) is True for c in group)
    # every rewrite accepted and every mutation rejected, in-process and through the kernel
    wrong = [(c.ref, c.kind, j) for c in judged for j, _ in bench.JUDGMENTS if c.correct(getattr(c, j)) is not True]
    assert wrong == []
    assert report.failures == []
    assert report.round_trip["reference_forms_agree"] == len(refs)
    assert report.round_trip["failed_cells"] == []
    assert len(report.votes) == len(bench.PS) * len(bench.NS)
    # all samples right: the pick is right; none right: it is wrong
    pools, _ = bench.vote_pools(refs, judged, None)
    sure = bench.simulate_votes(pools, ps=(1.0, 0.0), ns=(3,), trials=20)
    assert [(v.product, v.ideal) for v in sure] == [(1.0, 1.0), (0.0, 0.0)]
    md = bench.report_markdown(report)
    assert "| rewrite | **all rewrites** |" in md and "100.0%" in md


def test_covering_lab_merges_only_right_answers(tmp_path):
    from jupyter_data_agent_bench.equivalence import covering

    _write_table(tmp_path)
    refs = bench.RefSource(str(tmp_path), SPECS, arcade=False, tables=TABLES).build()
    pools = covering.covering_pools(refs)
    assert pools and all(cp.covering for cp in pools)
    joined, total, _ = covering.wrong_covering_pairs(pools)
    # covering links no right and wrong answer that same_answer does not already join (renamed ~ swapped)
    assert total > 0 and joined <= bench.cross_merges([cp.pool for cp in pools])[0]
    # every sample right, in covering forms or not: the merged vote picks right; none right: wrong
    rows = covering.simulate(pools, ps=(1.0, 0.0), ns=(4,), trials=20, share=0.5)
    assert [(r.right_merged, r.wrong_merged, r.ideal) for r in rows] == [(1.0, 0.0, 1.0), (0.0, 1.0, 0.0)]
    assert "| 1.00 | 4 |" in covering.markdown(rows)


def test_shapes_bench_gives_right_verdicts_at_small_shapes():
    from jupyter_data_agent_bench.equivalence import shapes

    rows = shapes.measure(shapes=((3, 5), (40, 1)), repeats=1)
    assert len(rows) == 6 and all(r.same == r.expected and r.covers == r.expected for r in rows)
    assert "Slowest comparison" in shapes.markdown(rows)
