import pytest

from jupyter_data_agent_bench.dabench_score import (
    QuestionScore,
    SubScore,
    Summary,
    extract_answers,
    is_equal,
    score_question,
    summarize,
    summary_markdown,
)


def test_extract_answers_basic_and_last_wins():
    text = "First @mean[1.5] then @std[0.2]; corrected: @mean[1.75]"
    assert extract_answers(text) == {"mean": "1.75", "std": "0.2"}
    assert extract_answers("no tags here") == {}
    assert extract_answers("") == {}


def test_extract_is_non_greedy_and_single_line():
    assert extract_answers("@a[x] and @b[y]") == {"a": "x", "b": "y"}
    assert extract_answers("@a[line\nbreak]") == {}
    assert extract_answers("@a[]") == {"a": ""}
    assert extract_answers("@col_name[New York, NY]") == {"col_name": "New York, NY"}


def test_exact_string_match_without_normalisation():
    assert is_equal("Pclass", "Pclass")
    assert not is_equal("pclass", "Pclass")
    assert not is_equal(" Pclass", "Pclass")  # values are not stripped
    s = score_question(1, "@feature[Pclass]", [("feature", "Pclass")])
    assert s.correct and s.share == 1.0 and s.answered
    assert s.subs == (SubScore("feature", "Pclass", "Pclass", True),)


def test_float_tolerance():
    assert is_equal("0.3000001", "0.3")  # 1e-7 off
    assert not is_equal("0.301", "0.3")  # 1e-3 off
    assert is_equal("1e2", "100.00")
    assert is_equal(" 3", "3")  # float() ignores surrounding whitespace
    assert not is_equal("abc", "3")
    assert score_question(2, "@r[0.3000001]", [("r", "0.3")]).correct
    assert not score_question(2, "@r[0.301]", [("r", "0.3")]).correct


def test_missing_answer_is_wrong():
    s = score_question(3, "@a[1]", [("a", "1"), ("b", "2")])
    assert not s.correct and s.share == 0.5 and s.answered
    assert s.subs[1] == SubScore("b", "2", None, False)


def test_repeated_names_last_wins_in_scoring():
    assert score_question(4, "@a[5] ... @a[1]", [("a", "1")]).correct
    assert not score_question(4, "@a[1] ... @a[5]", [("a", "1")]).correct


def test_unanswered_question():
    s = score_question(5, None, [("a", "1"), ("b", "2")])
    assert not s.answered and not s.correct and s.share == 0.0
    assert all(sub.got is None and not sub.correct for sub in s.subs)
    empty = score_question(5, "", [("a", "1")])
    assert empty.answered and not empty.correct


def test_proportional_share_multi_answer():
    labels = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "x")]
    s = score_question(6, "@a[1] @b[2] @c[4] @d[x]", labels)
    assert s.share == 0.75 and not s.correct


def test_no_labels_is_an_error():
    with pytest.raises(ValueError):
        score_question(7, "@a[1]", [])


def _small_set():
    # q1: 2/2 right; q2: 1/2; q3: 0/1 (unanswered); q4: 1/1; q5: 0/3
    scores = [
        score_question("q1", "@a[1] @b[2]", [("a", "1"), ("b", "2")]),
        score_question("q2", "@a[1] @b[9]", [("a", "1"), ("b", "2")]),
        score_question("q3", None, [("a", "1")]),
        score_question("q4", "@m[3.14159]", [("m", "3.14159")]),
        score_question("q5", "@x[0] @y[0]", [("x", "1"), ("y", "1"), ("z", "1")]),
    ]
    meta = {
        "q1": {"level": "easy", "concepts": ["Summary Statistics"]},
        "q2": {"level": "medium", "concepts": ["Summary Statistics", "Correlation Analysis"]},
        "q3": {"level": "hard", "concepts": ["Correlation Analysis"]},
        "q4": {"level": "easy", "concepts": ["Summary Statistics"]},
        "q5": {"level": "hard", "concepts": ["Machine Learning"]},
    }
    return scores, meta


def test_summary_metrics_by_hand():
    scores, meta = _small_set()
    s = summarize(scores, meta)
    assert isinstance(s, Summary)
    assert (s.n_questions, s.n_answered, s.n_correct) == (5, 4, 2)
    assert (s.n_subquestions, s.n_sub_correct) == (9, 4)
    assert s.accuracy_by_question == pytest.approx(2 / 5)
    # shares 1, 0.5, 0, 1, 0
    assert s.proportional_accuracy_by_subquestion == pytest.approx(2.5 / 5)
    assert s.accuracy_by_subquestion == pytest.approx(4 / 9)


def test_summary_by_level_and_concept():
    scores, meta = _small_set()
    s = summarize(scores, meta)
    assert list(s.by_level) == ["easy", "medium", "hard"]
    easy, medium, hard = s.by_level["easy"], s.by_level["medium"], s.by_level["hard"]
    assert (easy.n_questions, easy.accuracy_by_question) == (2, 1.0)
    assert medium.proportional_accuracy_by_subquestion == pytest.approx(0.5)
    assert (hard.n_questions, hard.n_answered, hard.accuracy_by_subquestion) == (2, 1, 0.0)

    assert sorted(s.by_concept) == ["Correlation Analysis", "Machine Learning", "Summary Statistics"]
    stats = s.by_concept["Summary Statistics"]  # q1, q2, q4
    assert stats.n_questions == 3
    assert stats.accuracy_by_question == pytest.approx(2 / 3)
    assert stats.proportional_accuracy_by_subquestion == pytest.approx(2.5 / 3)
    assert stats.accuracy_by_subquestion == pytest.approx(4 / 5)
    corr = s.by_concept["Correlation Analysis"]  # q2 and q3: counted under each concept
    assert corr.n_questions == 2 and corr.accuracy_by_subquestion == pytest.approx(1 / 3)


def test_summary_unknown_meta_and_empty():
    s = summarize([score_question("z", "@a[1]", [("a", "1")])], {})
    assert list(s.by_level) == ["unknown"] and s.by_concept == {}
    empty = summarize([], {})
    assert empty.n_questions == 0 and empty.accuracy_by_question == 0.0


def test_summary_markdown_contains_figures():
    scores, meta = _small_set()
    md = summary_markdown(summarize(scores, meta))
    lines = md.strip().splitlines()
    assert lines[0].startswith("| Group |") and set(lines[1]) <= set("|-:")
    overall = lines[2]
    for fig in ("| 5 |", "| 4 |", "40.00", "50.00", "44.44"):
        assert fig in overall
    assert any(l.startswith("| level: easy | 2 | 2 | 100.00 |") for l in lines)
    assert any("concept: Summary Statistics" in l and all(x in l for x in ("66.67", "83.33", "80.00"))
               for l in lines)
    assert all(l.count("|") == 7 for l in lines)


def test_question_score_is_typed():
    s = score_question(1, "@a[1]", [("a", 1)])  # non-str label is compared as str
    assert isinstance(s, QuestionScore) and s.correct and s.subs[0].expected == "1"
