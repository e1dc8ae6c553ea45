"""same_answer (votes), covers (ARCADE's scorer), answer_key and majority, in-process.

The round trip through a real kernel copy is in tests/test_vote.py.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from jupyter_data_agent.kernel.answer_form import answer_form
from jupyter_data_agent.search.equivalence import answer_key, as_form, covers, same_answer
from jupyter_data_agent.search.majority import majority

SALES = pd.DataFrame({
    "city": ["Lima", "Oslo", "Pune", "Lima", "Oslo", "Pune", "Lima"],
    "amount": [3.5, np.nan, 2.25, 4.0, np.nan, 6.0, 1.5],
    "units": [1, 2, 3, 4, 5, 6, 7],
})
BY_CITY = SALES.groupby("city")["amount"].sum()  # Lima 9.0, Oslo 0.0 (all NaN), Pune 8.25
MEAN_BY_CITY = SALES.groupby("city")["amount"].mean()  # Oslo NaN
FRAME = pd.DataFrame({"name": ["a", "b", "c"], "score": [1.5, 2.5, 3.5], "rank": [3, 2, 1]})


def same_both_ways(a, b) -> bool:
    ab, ba = same_answer(a, b), same_answer(b, a)
    assert ab is ba, f"same_answer is not symmetric: {ab} vs {ba}"
    return ab


# ------------------------------------------------------------------ same answer

POSITIVES = [
    pytest.param(BY_CITY, BY_CITY.to_frame(), id="series-vs-to_frame"),
    pytest.param(BY_CITY, BY_CITY.reset_index(), id="series-vs-reset_index"),
    pytest.param(BY_CITY.to_frame(), BY_CITY.reset_index(), id="to_frame-vs-reset_index"),
    pytest.param(MEAN_BY_CITY, MEAN_BY_CITY.reset_index(), id="reset_index-with-nan"),
    pytest.param(BY_CITY, BY_CITY.reset_index().rename(columns={"amount": "total", "city": "where"}),
                 id="reset_index-renamed"),
    pytest.param(SALES.groupby(["city", "units"])["amount"].sum(),
                 SALES.groupby(["city", "units"])["amount"].sum().reset_index(), id="multiindex-reset_index"),
    pytest.param(pd.Series(["a", "b", "a"]).value_counts(), pd.DataFrame({"key": ["a", "b"], "n": [2, 1]}),
                 id="value_counts-vs-frame"),
    pytest.param(SALES["amount"], SALES["amount"].to_numpy(), id="to_numpy"),
    pytest.param(SALES["amount"], SALES["amount"].tolist(), id="tolist-with-nan"),
    pytest.param(SALES["units"], np.array(SALES["units"], dtype=np.int32), id="int32-array"),
    pytest.param(FRAME, FRAME.rename(columns={"score": "mean_score", "rank": "r"}), id="renamed-columns"),
    pytest.param(FRAME, FRAME[["rank", "name", "score"]], id="reordered-columns"),
    pytest.param(FRAME, FRAME.astype(object), id="astype-object"),
    pytest.param(SALES, SALES.astype(object), id="astype-object-with-nan"),
    pytest.param(FRAME, FRAME.assign(rank=FRAME["rank"].astype(float)), id="int-vs-integral-float"),
    pytest.param(FRAME, FRAME.assign(score=FRAME["score"] * (1 + 1e-9)), id="1e-9-relative-noise"),
    pytest.param(0.1 + 0.2, 0.3, id="float-rounding"),
    pytest.param(2.0, 2.0000015, id="within-rtol-1e-6"),
    pytest.param(1e-9, 0.0, id="within-atol"),
    pytest.param(42, [42], id="scalar-vs-one-element-list"),
    pytest.param(3.5, pd.Series([3.5]), id="scalar-vs-one-element-series"),
    pytest.param(7, pd.DataFrame({"x": [7]}), id="scalar-vs-1x1-frame"),
    pytest.param("Lima", np.array(["Lima"]), id="string-vs-one-element-array"),
    pytest.param(5, {5}, id="scalar-vs-one-element-set"),
    pytest.param(np.float64(2.5), 2.5, id="numpy-float"),
    pytest.param(np.int64(3), 3, id="numpy-int"),
    pytest.param(np.int64(3), 3.0, id="numpy-int-vs-float"),
    pytest.param(np.bool_(True), True, id="numpy-bool"),
    pytest.param(np.str_("abc"), "abc", id="numpy-str"),
    pytest.param("Paris\n", "Paris", id="trailing-whitespace"),
    pytest.param("  Paris ", "Paris", id="surrounding-whitespace"),
    pytest.param(["Paris "], "Paris", id="whitespace-one-element-list"),
    pytest.param({3, 1, 2}, {1, 2, 3}, id="set-vs-set"),
    pytest.param([1, "a"], (1, "a"), id="list-vs-tuple"),
    pytest.param({"a": 1.0, "b": 2.0}, {"b": 2, "a": 1.0000001}, id="dict"),  # a float near a float; an int is exact
    pytest.param([[1, 2], [3.0]], [[1, 2], [3.0000001]], id="ragged"),
    pytest.param(pd.DataFrame({"p": [1, 2], "q": [3, 4]}), [[1, 3], [2, 4]], id="frame-vs-list-of-rows"),
    pytest.param(pd.Series([1, 2], index=pd.Index([5, 6], name="k")), pd.Series([1, 2], index=[5, 6]),
                 id="index-name-generic"),
    pytest.param(np.nan, pd.NA, id="nan-vs-na"),
    pytest.param(pd.Series([1.0, None]), [1.0, pd.NA], id="missing-cells"),
    pytest.param(pd.Timestamp("2020-01-01"), np.datetime64("2020-01-01"), id="timestamp-vs-datetime64"),
]


@pytest.mark.parametrize("a, b", POSITIVES)
def test_same_answer_up_to_representation(a, b):
    assert same_both_ways(a, b)
    assert same_answer(as_form(a), b) and same_answer(a, as_form(b)) and same_answer(as_form(a), as_form(b))


SHUFFLED_KEYS = pd.Series(BY_CITY.to_numpy(), index=pd.Index(["Oslo", "Lima", "Pune"], name="city"))
WRONG_KEY = pd.Series(BY_CITY.to_numpy(), index=pd.Index(["Lima", "Oslo", "Rome"], name="city"))
BIG = pd.DataFrame({"id": np.arange(1200), "v": np.arange(1200) * 0.25, "s": [f"r{i}" for i in range(1200)]})

NEGATIVES = [
    # a label names what the value is (a one-row group result keeps its key)
    pytest.param(3.5, pd.Series([3.5], index=["mean"]), id="scalar-vs-one-element-labelled-series"),
    pytest.param(FRAME, FRAME.assign(rank=[3, 2, 2]), id="off-by-one-int"),
    pytest.param(FRAME, FRAME.assign(score=[1.5, 2.5, 3.6]), id="off-by-0.1-float"),
    pytest.param(pd.DataFrame({"a": [1, 2], "b": [3, 4]}), pd.DataFrame({"a": [3, 4], "b": [1, 2]}),
                 id="swapped-values-of-named-columns"),
    pytest.param(FRAME, FRAME.rename(columns={"score": "rank", "rank": "score"}), id="swapped-names"),
    pytest.param(BY_CITY, SHUFFLED_KEYS, id="shuffled-index-labels"),
    pytest.param(BY_CITY, WRONG_KEY, id="wrong-group-key"),
    pytest.param(BY_CITY, BY_CITY.to_numpy(), id="group-keys-dropped"),
    pytest.param(MEAN_BY_CITY, MEAN_BY_CITY.fillna(0), id="nan-to-0"),
    pytest.param(np.nan, 0, id="nan-to-0-scalar"),
    pytest.param([1.0, None], [1.0, 0.0], id="none-cell-to-0"),
    pytest.param(None, 0, id="none-vs-0"),
    pytest.param(1179160, 1179161, id="int-plus-1"),
    pytest.param(1179160.0, 1179161.0, id="int-plus-1-as-floats"),
    pytest.param(1179160, 1179161.0, id="int-plus-1-int-vs-float"),
    pytest.param(pd.Series([1179160, 5]), pd.Series([1179161.0, 5.0]), id="int-plus-1-in-a-column"),
    pytest.param([1179160.0, 0.5], [1179161.0, 0.5], id="int-plus-1-in-a-float-column"),
    pytest.param(BY_CITY.sort_values(), BY_CITY.sort_values(ascending=False), id="ascending-vs-descending"),
    pytest.param([1, 2, 3], [3, 2, 1], id="reversed-list"),
    pytest.param(BIG, BIG.head(60), id="1200-rows-vs-first-60"),
    pytest.param(BIG, BIG.head(1199), id="1200-rows-vs-1199"),
    pytest.param(True, 1, id="bool-vs-int"),
    pytest.param(False, 0, id="false-vs-0"),
    pytest.param(pd.Series([True, False]), pd.Series([1, 0]), id="bool-column-vs-int-column"),
    pytest.param("1", 1, id="str-vs-int"),
    pytest.param("paris", "Paris", id="case"),
    pytest.param("New  York", "New York", id="inner-whitespace"),
    pytest.param(1.001, 1.0, id="1e-3-relative"),
    pytest.param([41], 42, id="one-element-wrong"),
    pytest.param([42, 43], 42, id="two-elements-vs-scalar"),
    pytest.param([], 0, id="empty-vs-0"),
    pytest.param(FRAME, FRAME.assign(extra=0), id="extra-column"),
    pytest.param({"a": 1}, {"b": 1}, id="dict-other-key"),
    pytest.param(pd.Timestamp("2020-01-01", tz="UTC"), pd.Timestamp("2020-01-01"), id="tz-vs-naive"),
    pytest.param(pd.Timestamp("2020-01-01 01:00", tz="Europe/Paris"), pd.Timestamp("2020-01-01", tz="UTC"),
                 id="same-instant-other-zone"),
    pytest.param([1, "a"], ["1", "a"], id="mixed-not-stringified"),
]


@pytest.mark.parametrize("a, b", NEGATIVES)
def test_different_answers(a, b):
    assert not same_both_ways(a, b)
    assert answer_key(a) != answer_key(b)  # equal keys would imply the same answer


def test_none_is_never_an_answer():
    assert as_form(None) is None
    assert not same_answer(None, None)
    assert not covers(None, None) and not covers(1, None) and not covers(None, 1)
    assert answer_key(None) == ""


def test_a_set_is_not_a_list_even_sorted():
    # documented behaviour: a set's form is a sorted "seq" node, a flat list's a table column,
    # so the two never meet (a one-element set still equals its element)
    assert not same_answer({3, 1, 2}, [1, 2, 3])
    assert not same_answer({3, 1, 2}, [3, 1, 2])
    assert same_answer({"b", "a"}, {"a", "b"})
    assert not same_answer({1, 2}, {1, 2, 3})


def test_a_one_million_row_frame_with_its_last_text_cell_changed():
    n = 1_000_000
    a = pd.DataFrame({"i": np.arange(n), "t": np.array([f"w{i % 997}" for i in range(n)], dtype=object)})
    b = a.copy()
    b.iloc[-1, 1] = "w-changed"
    started = time.perf_counter()
    fa, fb = answer_form(a), answer_form(b)
    formed = time.perf_counter()
    assert not same_answer(fa, fb)
    compared = time.perf_counter()
    assert "values" not in fa["cols"][1]  # past the budget: digests only
    assert not same_answer(a, b) and same_answer(fa, a.copy())
    # two forms of 1M rows (vectorised hashing, about 1.5 s here), then digests compare at once
    assert formed - started < 5.0 and compared - formed < 0.5


def test_one_row_group_result_vs_its_reset_index():
    one = SALES[SALES.city == "Pune"].groupby("city")["amount"].sum()  # Pune 8.25
    assert same_answer(one, one.reset_index())


def test_integers_past_64_bits_are_exact():
    assert not same_answer(2**70, 2**70 + 1)


def test_equal_keys_imply_same_answer_with_duplicate_column_names():
    a = pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"])
    b = a.iloc[:, ::-1]
    assert answer_key(a) != answer_key(b) or same_answer(a, b)


def test_equal_keys_for_equal_representations():
    # what keeps majority linear: plain re-representations share one key
    for a, b in [(BY_CITY, BY_CITY.to_frame()), (BY_CITY, BY_CITY.reset_index()), ([1, 2, 3], np.array([1, 2, 3])),
                 (FRAME, FRAME[["rank", "name", "score"]]), (42, [42]), ("Paris\n", "Paris")]:
        assert answer_key(a) == answer_key(b) and same_answer(a, b)


# ------------------------------------------------------------------ covers

REF = pd.DataFrame({"name": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]})


def test_covers_allows_extra_predicted_columns():
    pred = pd.DataFrame({"id": [1, 2, 3], "S": [1.0, 2.0, 3.0000001], "N": ["a", "b", "c"]})
    assert covers(pred, REF)
    assert not same_answer(pred, REF)  # symmetric relation: extras count
    assert not covers(REF, pred)  # a reference column the prediction lacks


def test_covers_one_predicted_column_cannot_serve_two_reference_columns():
    ref = pd.DataFrame({"x": [1, 2, 3], "y": [1, 2, 3]})
    assert not covers(pd.DataFrame({"z": [1, 2, 3]}), ref)
    assert not covers(pd.DataFrame({"z": [1, 2, 3], "w": [7, 8, 9]}), ref)
    assert covers(pd.DataFrame({"z": [1, 2, 3], "w": [1.0, 2.0, 3.0]}), ref)


def test_covers_needs_the_reference_group_keys():
    assert covers(BY_CITY.reset_index(), BY_CITY)
    assert covers(BY_CITY.reset_index().assign(rank=[1, 3, 2]), BY_CITY)
    assert covers(BY_CITY.to_frame("total"), BY_CITY)
    assert not covers(pd.DataFrame({"amount": BY_CITY.to_numpy()}), BY_CITY)  # keys missing
    assert not covers(WRONG_KEY, BY_CITY)
    assert not covers(SHUFFLED_KEYS, BY_CITY)
    assert covers(BY_CITY, pd.Series(BY_CITY.to_numpy()))  # keys the reference lacks are extras


def test_covers_needs_the_reference_group_key_of_a_single_group():
    ref = pd.Series([8.25], index=pd.Index(["Pune"], name="city"), name="amount")
    assert not covers(pd.Series([8.25], index=pd.Index(["Rome"], name="city"), name="amount"), ref)


def test_covers_same_meaningful_name_must_hold_the_same_values():
    pred = pd.DataFrame({"score": [9.0, 9.0, 9.0], "other": [1.0, 2.0, 3.0], "name": ["a", "b", "c"]})
    assert not covers(pred, REF)


def test_covers_nan_is_only_nan():
    ref = pd.DataFrame({"v": [1.0, np.nan]})
    assert not covers(pd.DataFrame({"v": [1.0, 0.0]}), ref)
    assert not covers(ref, pd.DataFrame({"v": [1.0, 0.0]}))
    assert covers(pd.DataFrame({"v": [1.0, None], "e": [0, 0]}), ref)
    assert not covers(0, np.nan)


def test_covers_integers_exact():
    assert not covers(pd.DataFrame({"v": [1179161, 2]}), pd.DataFrame({"v": [1179160, 2]}))
    assert not covers(pd.DataFrame({"v": [1179161.0, 2.5]}), pd.DataFrame({"v": [1179160.0, 2.5]}))
    assert not covers(1179161, 1179160)
    assert covers(1179160.0, 1179160)


def test_covers_rows_and_scalars():
    assert not covers(REF.iloc[:2], REF) and not covers(REF, REF.iloc[:2])
    assert not covers(REF.iloc[::-1].reset_index(drop=True), REF)
    assert covers([3.0], 3) and covers("Paris ", "Paris") and not covers("Lima", "Paris")


# ------------------------------------------------------------------ majority

def test_none_never_votes():
    assert majority([None, None, None, "b", "a", "a"]) == [[4, 5], [3]]
    assert majority([None, None]) == [] and majority([]) == []


def test_two_silent_candidates_cannot_outvote_one_answer():
    assert majority([None, 42, None]) == [[1]]


def test_largest_class_first_then_best_score_then_first_seen():
    assert majority(["b", 1.0, np.float64(1.0000001), "b", [1.0], 2, "c", "c"]) == [[1, 2, 4], [0, 3], [6, 7], [5]]
    assert majority(["x", "y", "y", "x"]) == [[0, 3], [1, 2]]
    assert majority(["x", "y", "y", "x"], scores=[0.1, 0.2, 0.3, 0.0]) == [[2, 1], [0, 3]]


def test_representative_is_the_member_most_like_the_others():
    # 1.0 ~ 1.0+9e-7 ~ 1.0+1.8e-6, but 1.0 !~ 1.0+1.8e-6: one class through tolerance, the middle speaks for it
    assert majority([1.0, 1.0 + 9e-7, 1.0 + 1.8e-6]) == [[1, 0, 2]]
    assert not same_answer(1.0, 1.0 + 1.8e-6)
    frames = [pd.DataFrame({"v": [1.0, 2.0]}) + d for d in (0.0, 9e-7, 1.8e-6)]
    assert not same_answer(frames[0], frames[2])
    assert majority(frames) == [[1, 0, 2]]


def test_representative_ties_by_score_then_fewer_steps_then_earlier():
    assert majority([5, 5.0, [5]], scores=[0.1, 0.9, 0.5]) == [[1, 2, 0]]
    assert majority([5, 5, 5], scores=[0.5, 0.5, 0.5], steps=[3, 1, 2]) == [[1, 2, 0]]
    assert majority([5, 5, 5], steps=[3, 1, 1]) == [[1, 2, 0]]
    assert majority([5, 5, 5], scores=[None, 0.2, None], steps=[1, 9, 1]) == [[1, 0, 2]]


def test_many_answers_few_values():
    answers = [[i % 3, 10] for i in range(200)]
    started = time.perf_counter()
    groups = majority(answers)
    assert time.perf_counter() - started < 5.0
    assert [len(g) for g in groups] == [67, 67, 66]
    assert [sorted(g) for g in groups] == [list(range(r, 200, 3)) for r in range(3)]


def test_forms_and_values_vote_together():
    forms = [as_form(BY_CITY), BY_CITY.reset_index(), as_form(WRONG_KEY), BY_CITY.to_frame(), None]
    assert majority(forms) == [[0, 1, 3], [2]]


def test_own_relation_for_text_answers():
    same = lambda x, y: x.strip().lower() == y.strip().lower()  # noqa: E731
    assert majority(["Lima", "oslo", "lima ", "OSLO", "Oslo", None], same=same) == [[1, 3, 4], [0, 2]]
    assert majority(["A", "a", "b"], same=lambda x, y: x.lower() == y.lower()) == [[0, 1], [2]]


# ------------------------------------------------------------------ issue 27: the last defects

def test_float_noise_is_accepted_whatever_the_size():
    # past the form's cell budget the verdict used to rest on rounded digests, which noise splits
    rng = np.random.default_rng(0)
    x = pd.Series(rng.normal(size=100_000) * 1000)
    assert same_answer(x, x * (1 + 1e-9))
    assert same_answer(x, x.astype(np.float32).astype(np.float64)) is same_answer(x[:100], x[:100].astype(np.float32))
    assert same_answer(x.to_frame("v"), (x * (1 + 1e-9)).to_frame("w"))


def test_past_the_budget_a_wrong_float_is_still_rejected():
    rng = np.random.default_rng(1)
    x = pd.Series(rng.normal(size=100_000))
    for i in (0, 50_000, 99_999):
        y = x * (1 + 1e-9)
        y.iloc[i] += 1.0
        assert not same_answer(x, y), i
    assert not same_answer(x, x.round(1)) and not same_answer(x, x[::-1].reset_index(drop=True))
    big = pd.Series(rng.normal(size=1_000_000) * 100)  # one unsampled cell + 1: found by its block's sums
    off = big * (1 + 1e-9)
    off.iloc[500_000] += 1.0
    assert same_answer(big, big * (1 + 1e-9)) and not same_answer(big, off) and not covers(off, big)


def test_wide_noisy_frames_pair_columns_quickly():
    # nothing pairs by name or digest: 1,000 columns (or 2,000) paired by value
    rng = np.random.default_rng(2)
    for rows, cols in ((50, 1000), (24, 2000)):
        a = pd.DataFrame(rng.normal(size=(rows, cols)))
        b = pd.DataFrame(a.to_numpy()[:, ::-1] * (1 + 1e-9), columns=[f"c{j}" for j in range(cols)])
        fa, fb = as_form(a), as_form(b)
        started = time.perf_counter()
        assert same_answer(fa, fb) and covers(fb, fa)
        changed = b.copy()
        changed.iloc[3, 7] += 1.0
        assert not same_answer(fa, as_form(changed))
        assert time.perf_counter() - started < 10.0  # a bound against a stall (62-101 s before), not a benchmark


def test_a_dict_equals_the_series_made_from_it():
    d = {"x": 1, "y": 2.5, "z": 3}
    assert same_both_ways(d, pd.Series(d))
    assert same_both_ways(d, pd.Series(d).iloc[::-1])  # a dict's keys carry no order
    assert covers(pd.Series(d), d) and covers(d, pd.Series(d))
    assert not same_both_ways(d, pd.Series({"x": 1, "y": 2.5, "z": 4}))
    assert not same_both_ways(d, pd.Series({"x": 1, "y": 2.5, "w": 3}))


def test_covers_allows_extra_columns_on_one_row_answers():
    ref = pd.DataFrame({"a": [1]})
    assert covers(pd.DataFrame({"a": [1], "b": [2]}), ref)
    assert covers(pd.DataFrame({"b": [2], "total": [1]}), pd.Series([1], name="n"))
    assert not covers(pd.DataFrame({"a": [2], "b": [3]}), ref)
    assert not covers(pd.DataFrame({"a": [1], "b": [2]}), pd.DataFrame({"a": [1], "c": [5]}))


def test_cells_holding_tuples_or_lists_match_the_list_of_rows():
    rows = [(1, "a"), (2, "b"), (3, "c")]
    assert same_both_ways(pd.Series(rows), rows)
    assert same_both_ways(pd.Series([list(r) for r in rows]), pd.DataFrame(rows, columns=["n", "s"]))
    assert not same_both_ways(pd.Series(rows), [(1, "a"), (2, "b"), (3, "d")])


def test_majority_can_merge_classes_where_one_covers_the_other():
    # one value column by key (a two-column table lacking a third is *missing* it: see test_equivalence_bounds)
    right = pd.Series([1.5, 2.5], index=pd.Index(["a", "b"], name="k"), name="x")
    extra = right.to_frame().assign(n=[3, 4])  # the same answer with an extra column
    wrong = pd.Series([1.5, 9.0], index=right.index, name="x")
    answers = [right, wrong, wrong, extra]
    assert majority(answers, covering=False)[0] == [1, 2]  # by same_answer alone: 2 wrong vs 1 + 1 right
    merged = majority(answers)
    assert sorted(merged[0]) == [0, 3] and sorted(merged[1]) == [1, 2]  # a tie: first seen goes first
    assert majority([right, extra, extra]) == [[1, 2, 0]]  # the representative: from the larger sub-class
    assert len(majority(["a b", "a"], lambda a, b: a == b)) == 2  # an own relation: nothing covers
    # an answer that both a right and a wrong answer cover (values without their keys) bridges nothing
    keyed = pd.Series([3, 1], index=pd.Index(["Lima", "Oslo"], name="city"))
    wrong_keys = pd.Series([3, 1], index=pd.Index(["Lima", "Rome"], name="city"))
    assert sorted(map(sorted, majority([keyed, wrong_keys, [3, 1]]))) == [[0], [1], [2]]
