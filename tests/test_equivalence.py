import numpy as np
import pandas as pd

from jupyter_data_agent.search.equivalence import cluster, equivalent, majority, outputs_match

# --- normalisation ---------------------------------------------------------


def test_numpy_scalars_equal_python_values():
    assert outputs_match(np.float64(2.5), 2.5)
    assert outputs_match(3, np.int32(3))
    assert outputs_match(np.bool_(True), True)
    assert outputs_match(np.str_("abc"), "abc")
    assert not outputs_match(np.float64(2.5), 3.5)
    assert not outputs_match(np.int64(3), 4)


def test_nan_counts_as_zero_on_both_sides():
    assert outputs_match(float("nan"), 0)
    assert outputs_match(0.0, np.nan)
    assert outputs_match(np.nan, float("nan"))
    assert outputs_match([1.0, np.nan], [1.0, 0.0])
    assert outputs_match(pd.Series([np.nan, 2.0]), [0, 2])
    assert not outputs_match(float("nan"), 1.0)
    assert not outputs_match([np.nan, 1.0], [1.0, 1.0])


def test_missing_markers_inside_collections_are_zero_but_bare_none_is_not():
    assert outputs_match(pd.Series(["a", None]), ["a", None])  # str-dtype NaN vs None
    assert outputs_match(pd.Series([1, None], dtype="Int64"), [1, 0])
    assert outputs_match([None, 1], [0, 1])
    assert not outputs_match(None, 0)
    assert not outputs_match(pd.Series(["a", None]), ["a", "b"])


# --- strict equality -------------------------------------------------------


def test_strict_equality_of_frames_arrays_and_objects():
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    assert outputs_match(df, df.copy())
    assert outputs_match(np.arange(4), np.arange(4))
    assert outputs_match(("a", 1), ("a", 1))
    assert not outputs_match(df, df.assign(a=[1, 3]))
    assert not outputs_match(np.arange(4), np.arange(1, 5))


# --- collections as value lists ---------------------------------------------


def test_list_tuple_array_compare_by_values():
    assert outputs_match([1, 2, 3], np.array([1, 2, 3]))
    assert outputs_match((1.0, 2.0), [1, 2.000001])
    assert outputs_match(np.array([[1, 2], [3, 4]]), [[1, 2], [3, 4]])
    assert not outputs_match([1, 2, 3], [1, 2])
    assert not outputs_match([1, 2, 3], [3, 2, 1])  # order matters for lists
    assert not outputs_match([1, 2], [1, 2.001])


def test_headers_and_index_are_ignored_for_value_lists():
    s = pd.Series([10, 20], index=["a", "b"], name="whatever")
    assert outputs_match(s, [10, 20])
    assert outputs_match(pd.Series([10, 20], index=[7, 8]), pd.Series([10, 20]))
    df = pd.DataFrame({"p": [1, 2], "q": [3, 4]})
    assert outputs_match(df, [[1, 3], [2, 4]])
    assert not outputs_match(df, [[1, 2], [3, 4]])


def test_sets_are_order_free():
    assert outputs_match({3, 1, 2}, [1, 2, 3])
    assert outputs_match([3, 1, 2], {1, 2, 3})
    assert outputs_match({"b", "a"}, {"a", "b"})
    assert not outputs_match({1, 2}, [1, 2, 3])


def test_mixed_types_are_not_stringified():
    assert not outputs_match([1, "a"], ["1", "a"])
    assert outputs_match([1, "a"], (1, "a"))


def test_dicts():
    assert outputs_match({"a": 1, "b": 2.0}, {"b": 2, "a": 1.0000001})
    assert not outputs_match({"a": 1}, {"b": 1})
    assert not outputs_match({"a": 1}, {"a": 2})
    # a dict against a Series is compared as pd.Series(dict)
    assert outputs_match({"x": 1, "y": 2}, pd.Series([1, 2], index=["x", "y"]))


# --- Series vs DataFrame -----------------------------------------------------


def test_series_becomes_frame_with_index_column():
    counts = pd.Series([3, 1], index=pd.Index(["a", "b"], name="k"), name="n")
    frame = pd.DataFrame({"key": ["a", "b"], "count": [3, 1]})
    assert outputs_match(counts, frame)  # value_counts() vs reset frame
    assert outputs_match(frame, counts)
    assert equivalent(counts, frame)
    assert not outputs_match(counts, pd.DataFrame({"key": ["a", "c"], "count": [3, 1]}))
    # a reference Series with a meaningful index needs that index in the prediction
    assert not outputs_match(pd.DataFrame({"count": [3, 1]}), counts)


def test_series_with_default_index_vs_single_column_frame():
    assert outputs_match(pd.DataFrame({"v": [1.5, 2.5]}), pd.Series([1.5, 2.5]))
    assert outputs_match(pd.Series([1.5, 2.5]), pd.DataFrame({"v": [1.5, 2.5]}))
    assert not outputs_match(pd.Series([1.5, 2.5]), pd.DataFrame({"v": [1.5, 9.0]}))


# --- DataFrame column-subset rule -------------------------------------------


REF = pd.DataFrame({"name": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]})


def test_extra_predicted_columns_are_fine():
    pred = pd.DataFrame(
        {"id": [1, 2, 3], "S": [1.0, 2.0, 3.0000001], "N": ["a", "b", "c"]}
    )
    assert outputs_match(pred, REF)  # other header names, other column order


def test_missing_reference_column_is_not_fine():
    pred = pd.DataFrame({"name": ["a", "b", "c"], "id": [7, 8, 9]})
    assert not outputs_match(pred, REF)
    # asymmetric: the wider frame as reference is not covered by the narrow one
    wide = REF.assign(extra=[0, 0, 0])
    assert outputs_match(wide, REF)
    assert not outputs_match(REF, wide)
    assert not equivalent(wide, REF)


def test_row_count_and_row_order_matter():
    assert not outputs_match(REF.iloc[:2], REF)
    assert not outputs_match(REF.iloc[::-1].reset_index(drop=True), REF)
    assert not outputs_match(REF.assign(score=[1.0, 2.0, 3.01]), REF)


def test_predicted_index_counts_as_a_column():
    pred = pd.DataFrame({"score": [1.0, 2.0, 3.0]}, index=pd.Index(["a", "b", "c"], name="n"))
    assert outputs_match(pred, REF)


def test_missing_values_in_frames_count_as_zero():
    pred = pd.DataFrame({"v": [1.0, np.nan]})
    assert outputs_match(pred, pd.DataFrame({"w": [1.0, 0.0]}))
    assert not outputs_match(pred, pd.DataFrame({"w": [1.0, 5.0]}))


# --- one-element collections vs scalars -------------------------------------


def test_one_element_collection_matches_scalar():
    assert outputs_match([42], 42)
    assert outputs_match(42.0, np.array([42]))
    assert outputs_match(pd.Series([3.14], index=["mean"]), 3.14)
    assert outputs_match(pd.DataFrame({"x": [7]}), 7)
    assert outputs_match(["abc"], "abc")
    assert not outputs_match([42, 43], 42)
    assert not outputs_match([41], 42)
    assert not outputs_match([], 0)


# --- scalars ----------------------------------------------------------------


def test_numeric_tolerance():
    assert outputs_match(0.1 + 0.2, 0.3)
    assert outputs_match(1.000001, 1.0)  # 1e-6 off
    assert not outputs_match(1.001, 1.0)  # 1e-3 off
    assert outputs_match(5, 5.0)


def test_strings_exact_after_strip():
    assert outputs_match("Paris", "Paris")
    assert outputs_match("Paris\n", " Paris")
    assert not outputs_match("paris", "Paris")
    assert not outputs_match("New  York", "New York")


def test_incomparable_types_are_false_not_errors():
    assert not outputs_match("1", 1)
    assert not outputs_match(True, 1)
    assert not outputs_match(None, 0)
    assert not outputs_match(object(), object())
    assert not outputs_match(pd.DataFrame({"a": [1]}), {"a": "b"})
    assert not outputs_match(lambda: 1, [1])
    assert outputs_match(None, None)
    assert outputs_match(pd.NA, pd.NA)

    class Angry:
        def __eq__(self, other):
            raise RuntimeError("no")

        __hash__ = object.__hash__

    assert not outputs_match(Angry(), Angry())
    assert not outputs_match([Angry()], [Angry()])


def test_ragged_and_nested_values():
    assert outputs_match([[1, 2], [3]], [[1, 2], [3.0000001]])
    assert not outputs_match([[1, 2], [3]], [[1, 2], [4]])
    assert outputs_match([pd.Series([1, 2]), "x"], [[1, 2], "x"])


def test_equivalent_is_symmetric_match():
    a = pd.DataFrame({"a": [1, 2]})
    b = pd.DataFrame({"a": [1, 2], "b": [3, 4]})
    assert outputs_match(b, a) and not outputs_match(a, b)
    assert not equivalent(a, b) and not equivalent(b, a)
    assert equivalent([1, 2], np.array([1.0, 2.0]))


# --- clustering ---------------------------------------------------------------


def test_cluster_groups_largest_first_ties_by_first_occurrence():
    values = ["b", 1, np.float64(1.0000001), "b", [1], 2, "c", "c"]
    assert cluster(values) == [[1, 2, 4], [0, 3], [6, 7], [5]]


def test_cluster_tie_empty_and_own_equality():
    assert cluster(["x", "y", "y", "x"]) == [[0, 3], [1, 2]]
    assert cluster([]) == []
    assert cluster(["A", "a", "b"], same=lambda x, y: x.lower() == y.lower()) == [[0, 1], [2]]


# --- the one majority pick -----------------------------------------------------


def test_majority_none_never_votes():
    # None: a candidate that raised or printed nothing
    assert majority([None, None, None, "b", "a", "a"]) == [[4, 5], [3]]
    assert majority([None, None]) == [] and majority([]) == []
    assert majority([1.0, 2.0, np.float64(2.0000001), [2], 3.0])[0] == [1, 2, 3]


def test_majority_over_frames_votes_by_value():
    ref = pd.DataFrame({"k": ["a", "b"], "v": [1, 2]})
    s = pd.Series([1, 2], index=pd.Index(["a", "b"], name="k"))
    groups = majority([pd.DataFrame({"v": [9, 9]}), s, ref.rename(columns={"v": "value"})])
    assert groups == [[1, 2], [0]]
