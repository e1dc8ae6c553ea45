"""The canonical form of an answer (``kernel.answer_form``), built in-process.

The same function runs inside kernel copies (see tests/test_vote.py for the
round trip); here: one column whichever way it arrives, missing cells, time
zones, MultiIndex labels, nesting, shapes, the cell budget and JSON.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from jupyter_data_agent.kernel.answer_form import BUDGET_CELLS, SKETCH_BLOCKS, SKETCH_SAMPLE, answer_form, is_form
from jupyter_data_agent.search.equivalence import answer_key, same_answer


def only_column(x, **kw) -> dict:
    form = answer_form(x, **kw)
    assert form["k"] == "table" and len(form["cols"]) == 1 and form["index"] == [], form
    return form["cols"][0]


# ------------------------------------------------------------------ one column, many arrivals

INTS = [3, 1, 4, 1, 5]


@pytest.mark.parametrize("value", [
    pytest.param(list(INTS), id="list"),
    pytest.param(tuple(INTS), id="tuple"),
    pytest.param(np.array(INTS), id="ndarray-int64"),
    pytest.param(np.array(INTS, dtype=np.int32), id="ndarray-int32"),
    pytest.param(np.array(INTS, dtype=np.uint64), id="ndarray-uint64"),
    pytest.param(pd.Series(INTS), id="Series"),
    pytest.param(pd.Series(INTS).astype(object), id="Series-astype-object"),
    pytest.param(pd.Series(INTS, dtype="Int64"), id="Series-Int64"),
    pytest.param([float(v) for v in INTS], id="list-of-integral-floats"),
    pytest.param(np.array(INTS, dtype=np.float64), id="ndarray-float64"),
    pytest.param(pd.Series(INTS).astype(float), id="Series-astype-float"),
    pytest.param(pd.Index(INTS), id="Index"),
])
def test_an_integer_column_has_one_digest_however_it_arrives(value):
    ref = only_column(INTS)
    col = only_column(value)
    assert col["kind"] == "num" and col["integral"] is True
    assert col["digest"] == ref["digest"]
    assert col["values"] == INTS and all(type(v) is int for v in col["values"])


@pytest.mark.parametrize("value", [
    pytest.param(["a", "b", None], id="list"),
    pytest.param(np.array(["a", "b", None], dtype=object), id="ndarray-object"),
    pytest.param(pd.Series(["a", "b", None]), id="Series-default-str"),
    pytest.param(pd.Series(["a", "b", None], dtype="string"), id="Series-string"),
    pytest.param(pd.Series(["a", "b", None]).astype(object), id="Series-astype-object"),
    pytest.param(["a", "b", np.nan], id="list-nan-for-missing"),
])
def test_a_text_column_has_one_digest_however_it_arrives(value):
    col = only_column(value)
    assert col["kind"] == "str" and col["nulls"] == 1 and col["values"] == ["a", "b", None]
    assert col["digest"] == only_column(["a", "b", None])["digest"]


def test_float_columns_keep_exact_values_and_differ_from_ints():
    col = only_column(pd.Series([0.5, 1.25, np.inf]))
    assert col["kind"] == "num" and col["integral"] is False
    assert col["values"] == [0.5, 1.25, "inf"]  # JSON has no inf
    assert len(col["q"]) == 2  # the rounded digests that carry tolerance past the budget
    assert col["digest"] != only_column([0.5, 1.25, 1e308])["digest"]
    assert only_column([1, 2])["digest"] != only_column([1, 3])["digest"]


def test_bool_columns_are_not_numbers():
    col = only_column(pd.Series([True, False]))
    assert col["kind"] == "bool" and col["values"] == [True, False]
    assert col["digest"] == only_column([True, False])["digest"] == only_column(np.array([True, False]))["digest"]
    assert col["digest"] != only_column([1, 0])["digest"]


# ------------------------------------------------------------------ missing

@pytest.mark.parametrize("missing", [np.nan, pd.NA, pd.NaT, float("nan"), np.float32("nan")],
                         ids=["np.nan", "pd.NA", "pd.NaT", "float-nan", "float32-nan"])
def test_nan_na_nat_are_one_missing_scalar(missing):
    form = answer_form(missing)
    assert (form["k"], form["t"], form["v"]) == ("scalar", "missing", None)


def test_a_bare_none_is_no_value_not_a_missing_cell():
    assert answer_form(None)["t"] == "none"
    assert answer_form(np.nan)["t"] == "missing"


@pytest.mark.parametrize("missing", [np.nan, None, pd.NA, pd.NaT], ids=["nan", "None", "NA", "NaT"])
def test_missing_cells_are_one_thing_in_every_kind_of_column(missing):
    num = only_column([1.5, missing])
    assert num["kind"] == "num" and num["nulls"] == 1 and num["values"] == [1.5, None]
    assert num["digest"] == only_column(pd.Series([1.5, np.nan]))["digest"]
    text = only_column(["x", missing])
    assert text["kind"] == "str" and text["values"] == ["x", None]
    assert text["digest"] == only_column(pd.Series(["x", None]))["digest"]
    ts = pd.Timestamp("2021-03-04")
    times = only_column([ts, missing])
    assert times["kind"] == "time" and times["nulls"] == 1 and times["values"] == [ts.value, None]
    assert times["digest"] == only_column(pd.Series([ts, pd.NaT]))["digest"]


def test_integer_with_missing_matches_float_with_nan():
    assert only_column(pd.Series([7, None], dtype="Int64"))["digest"] == only_column([7.0, np.nan])["digest"]
    # and a missing cell is not a zero
    assert only_column([7.0, np.nan])["digest"] != only_column([7.0, 0.0])["digest"]


# ------------------------------------------------------------------ time

def test_naive_timestamps_are_nanoseconds_whatever_the_unit():
    stamps = pd.date_range("2020-01-01", periods=3, freq="D", unit="s")
    col = only_column(pd.Series(stamps))
    assert col["kind"] == "time" and col["tz"] is None
    assert col["values"] == [t.value for t in stamps]  # ns since the epoch
    assert col["digest"] == only_column(list(stamps))["digest"] == only_column(stamps.to_numpy())["digest"]


def test_tz_aware_timestamps_keep_their_zone():
    stamp = pd.Timestamp("2020-06-01 12:00", tz="Europe/Paris")
    form = answer_form(stamp)
    assert (form["t"], form["tz"], form["v"]) == ("time", "Europe/Paris", stamp.value)
    col = only_column(pd.Series(pd.date_range("2020-06-01", periods=2, tz="Asia/Tokyo", unit="ns")))
    assert col["kind"] == "time" and col["tz"] == "Asia/Tokyo"
    utc = only_column(pd.Series(pd.date_range("2020-06-01", periods=2, tz="Asia/Tokyo", unit="ns")
                                .tz_convert("UTC")))
    assert utc["tz"] == "UTC" and utc["values"] == col["values"]  # the same instants...
    assert utc["digest"] != col["digest"]  # ...in another zone are another column


def test_tz_aware_ns_column_one_digest_as_series_list_or_objects():
    s = pd.Series(pd.date_range("2020-01-01", periods=3, tz="Europe/Paris", unit="ns"))
    digests = {only_column(v)["digest"] for v in (s, list(s), s.astype(object))}
    assert len(digests) == 1


def test_tz_aware_default_unit_column_one_digest_as_series_list_or_objects():
    s = pd.Series(pd.date_range("2020-01-01", periods=3, tz="Europe/Paris"))  # datetime64[us, Europe/Paris]
    col = only_column(s)
    assert col["values"] == [t.value for t in s]
    assert col["digest"] == only_column(list(s))["digest"] == only_column(s.astype(object))["digest"]


# ------------------------------------------------------------------ labels and index

def test_default_index_is_dropped_and_a_meaningful_one_is_kept():
    assert answer_form(pd.Series([1, 2]))["index"] == []
    assert answer_form(pd.Series([1, 2], index=[0, 1]))["index"] == []
    kept = answer_form(pd.Series([1, 2], index=[1, 0]))["index"]
    assert len(kept) == 1 and kept[0]["values"] == [1, 0]
    named = answer_form(pd.Series([1, 2], index=pd.RangeIndex(2, name="row")))["index"]
    assert named[0]["name"] == "row"  # a named index means something


def test_multiindex_rows_are_key_columns():
    idx = pd.MultiIndex.from_product([["a", "b"], [2020, 2021]], names=["city", "year"])
    form = answer_form(pd.DataFrame({"v": [1.5, 2.5, 3.5, 4.5]}, index=idx))
    assert form["shape"] == [4, 1] and form["rows"] == 4
    assert [(c["name"], c["kind"], c["values"]) for c in form["index"]] == [
        ("city", "str", ["a", "a", "b", "b"]), ("year", "num", [2020, 2021, 2020, 2021])]
    assert [c["name"] for c in form["cols"]] == ["v"]


def test_multiindex_column_labels_are_lists():
    cols = pd.MultiIndex.from_tuples([("sales", "min"), ("sales", "max"), ("qty", 1)])
    form = answer_form(pd.DataFrame([[1, 2, 3], [4, 5, 6]], columns=cols))
    assert [c["name"] for c in form["cols"]] == [["sales", "min"], ["sales", "max"], ["qty", 1]]
    assert [c["values"] for c in form["cols"]] == [[1, 4], [2, 5], [3, 6]]


def test_a_multiindex_on_its_own_is_a_table_of_its_levels():
    idx = pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["k", "n"])
    form = answer_form(idx)
    assert form["src"] == "Index" and [c["name"] for c in form["cols"]] == ["k", "n"]
    assert [c["values"] for c in form["cols"]] == [["a", "b"], [1, 2]]


# ------------------------------------------------------------------ nesting and shape

def test_dict_of_lists_is_a_dict_with_sorted_keys_of_columns():
    form = answer_form({"b": [1, 2], "a": ["x"]})
    assert form["k"] == "dict" and form["n"] == 2
    keys = [k["v"] for k, _ in form["items"]]
    assert keys == ["a", "b"]
    values = [v for _, v in form["items"]]
    assert values[0]["cols"][0]["values"] == ["x"] and values[1]["cols"][0]["values"] == [1, 2]
    assert answer_form({"a": ["x"], "b": [1, 2]}) == form  # insertion order does not count


def test_list_of_frames_is_a_sequence_of_tables():
    form = answer_form([pd.DataFrame({"x": [1, 2]}), pd.DataFrame({"y": ["a"]})])
    assert form["k"] == "seq" and form["n"] == 2
    assert [item["k"] for item in form["items"]] == ["table", "table"]
    assert form["items"][0]["cols"][0]["name"] == "x" and form["items"][1]["cols"][0]["values"] == ["a"]


def test_ragged_lists_and_sets():
    ragged = answer_form([[1, 2], [3]])
    assert ragged["k"] == "seq" and [i["rows"] for i in ragged["items"]] == [2, 1]
    assert answer_form({3, 1, 2}) == answer_form({1, 2, 3})
    assert answer_form({3, 1, 2})["src"] == "set"


@pytest.mark.parametrize("value, shape, rows", [
    (pd.DataFrame(np.zeros((4, 3))), [4, 3], 4),
    (pd.DataFrame(index=range(5)), [5, 0], 5),
    (np.zeros((3, 2)), [3, 2], 3),
    (np.arange(24).reshape(2, 3, 4), [2, 3, 4], None),
    ([[1, 2, 3], [4, 5, 6]], [2, 3], 2),
    (pd.Series(range(7)), [7], 7),
    ([], [0], 0),
], ids=["frame", "frame-no-columns", "2d-array", "3d-array", "list-of-rows", "series", "empty-list"])
def test_exact_shape_is_kept(value, shape, rows):
    form = answer_form(value)
    assert form["shape"] == shape
    if rows is not None:
        assert form["rows"] == rows


# ------------------------------------------------------------------ the cell budget

def test_past_the_budget_a_column_keeps_its_digest_never_a_prefix():
    frame = pd.DataFrame({"a": np.arange(1000), "b": np.arange(1000) * 0.5, "c": np.arange(1000) % 7})
    full = answer_form(frame)
    small = answer_form(frame, budget_cells=1500)
    a, b, c = small["cols"]
    assert a["values"] == list(range(1000))  # fits: kept whole
    assert "values" not in b and "values" not in c  # past the budget: nothing, not the first 500
    assert [col["digest"] for col in small["cols"]] == [col["digest"] for col in full["cols"]]
    assert b["q"] == full["cols"][1]["q"] and b["n"] == c["n"] == 1000
    assert small["shape"] == [1000, 3]


def test_the_default_budget_is_cells_not_rows():
    long = answer_form(pd.Series(np.arange(BUDGET_CELLS + 1)))
    assert "values" not in long["cols"][0] and long["rows"] == BUDGET_CELLS + 1
    assert "values" in answer_form(pd.Series(np.arange(BUDGET_CELLS)))["cols"][0]


def test_digests_alone_still_tell_a_changed_last_cell():
    n = BUDGET_CELLS * 2
    a = pd.DataFrame({"i": np.arange(n), "s": ["w"] * n})
    b = a.copy()
    b.iloc[-1, 1] = "x"
    fa, fb = answer_form(a), answer_form(b)
    assert "values" not in fa["cols"][1] and "values" not in fb["cols"][1]
    assert fa["cols"][0] == fb["cols"][0] and fa["cols"][1]["digest"] != fb["cols"][1]["digest"]
    assert not same_answer(fa, fb)


# ------------------------------------------------------------------ JSON

ROUND_TRIP = [
    pytest.param(pd.DataFrame({"t": pd.date_range("2020", periods=3, tz="UTC", unit="ns"), "x": [1.5, np.nan, 3.0],
                               "s": ["a", None, "c"], "o": [1, "a", None], "b": [True, False, True]}),
                 id="mixed-frame"),
    pytest.param(pd.Series([2.0, np.nan], index=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["k", "n"])),
                 id="multiindex-series"),
    pytest.param({"a": [1, 2], "b": {"c": (1, 2)}, 3: None}, id="nested-dict"),
    pytest.param([pd.DataFrame({"x": [1]}), pd.Series([1.0, 2.0]), "tail"], id="list-of-frames"),
    pytest.param([float("inf"), float("-inf"), 0.1], id="infinities"),
    pytest.param(2**70, id="big-int"),
    pytest.param(1 + 2j, id="complex"),
    pytest.param({3, 1, 2}, id="set"),
    pytest.param(np.arange(24).reshape(2, 3, 4), id="3d-array"),
    pytest.param(pd.Timedelta("1D 2h"), id="timedelta"),
    pytest.param(pd.Timestamp("2021-01-01", tz="America/New_York"), id="tz-timestamp"),
    pytest.param([[1, 2], [3]], id="ragged"),
    pytest.param(pd.DataFrame({"x": np.arange(2000) * 0.1}), id="past-budget"),
]


@pytest.mark.parametrize("value", ROUND_TRIP)
def test_json_round_trip_compares_identically(value):
    form = answer_form(value, budget_cells=1000)
    back = json.loads(json.dumps(form))
    assert back == form
    assert is_form(back)
    assert answer_key(back) == answer_key(form)
    assert same_answer(back, form)
    assert same_answer(back, value) is same_answer(form, value)


def test_form_json_is_strict_json():
    form = answer_form(pd.Series([np.nan, np.inf, 1.0]))
    json.dumps(form, allow_nan=False)  # no NaN/Infinity literals


def test_is_form():
    assert is_form(answer_form(3))
    assert not is_form({"k": "scalar", "t": "int", "v": 3})
    assert not is_form([1])
    assert not is_form(None)


def test_pandas_extension_arrays_are_columns():
    """``Series.unique()`` of text is a StringArray: one column, like the list it holds."""
    from jupyter_data_agent.search.equivalence import same_answer

    ports = pd.Series(["S", "C", "Q", None]).dropna().unique()
    assert isinstance(ports, pd.api.extensions.ExtensionArray)
    assert answer_form(ports)["k"] == "table"
    assert same_answer(ports, ["S", "C", "Q"])
    assert same_answer(pd.Categorical(["a", "b"]), np.array(["a", "b"], dtype=object))
    assert not same_answer(ports, ["S", "Q", "C"])


# ------------------------------------------------------------------ levels by position

def test_integer_level_names_do_not_shadow_level_positions():
    # pandas' get_level_values(i) resolves i as a level NAME first: names [1, 0] would read the levels swapped,
    # and names [1, "x"] would read level 0 twice and lose level 1
    index = pd.MultiIndex.from_arrays([["a", "b"], [10, 20]], names=[1, "x"])
    form = answer_form(pd.Series([1.5, 2.5], index=index))
    assert [c["name"] for c in form["index"]] == [1, "x"]
    assert [c["values"] for c in form["index"]] == [["a", "b"], [10, 20]]
    swapped = answer_form(index.set_names([1, 0]))
    assert [c["values"] for c in swapped["cols"]] == [["a", "b"], [10, 20]]


# ------------------------------------------------------------------ past the budget: a sketch, not a verdict by size

def test_past_the_budget_a_float_column_keeps_a_size_free_sketch():
    n = BUDGET_CELLS * 2
    form = answer_form(pd.Series(np.linspace(0.0, 1.0, n)))
    col = form["cols"][0]
    assert "values" not in col
    sketch = col["sketch"]
    assert len(sketch["sample"]) == SKETCH_SAMPLE and len(sketch["wsums"]) == len(sketch["abs"]) == 32768
    wide = answer_form(pd.DataFrame(np.zeros((1000, 2000)) + 0.5))  # 2,000 columns share the sketch budget
    assert {len(c["sketch"]["wsums"]) for c in wide["cols"] if "sketch" in c} == {SKETCH_BLOCKS}
    assert all("values" in c or "sketch" in c for c in wide["cols"])
    assert sketch["sample"][0] == 0.0 and sketch["sample"][-1] == 1.0  # both ends are sampled
    assert json.loads(json.dumps(form)) == form
