"""The answer-level checks that need no copy: the answer's type and its plausibility."""

from __future__ import annotations

import pytest

from jupyter_data_agent.search.evidence import CHECKS, all_checks, plausible_check, type_check


@pytest.mark.parametrize("answer,detail", [
    ("@price_range_mean[-460045.13]\n@n[3]", "@price_range_mean = -460045.13: negative"),
    ("@correlation_coefficient[1.2]", "@correlation_coefficient = 1.2: a correlation beyond ±1"),
    ("@pearson_r[-1.5]", "@pearson_r = -1.5: a correlation beyond ±1"),
    ("@mean_age[nan]", "@mean_age is nan"),
    ("@p_value[1.3]", "@p_value = 1.3: outside 0..1"),
    ("@missing_percentage[130.5]", "@missing_percentage = 130.5: outside 0..100"),
    ("@number_of_outliers[-2]", "@number_of_outliers = -2: negative"),
    ("@std_fare[-0.5]", "@std_fare = -0.5: negative"),
    ("inf", "is inf"),
])
def test_implausible_values_fail_with_what_they_are(answer, detail):
    check = plausible_check(answer)
    assert check.name == "plausible" and not check.passed and check.detail == detail


@pytest.mark.parametrize("answer", [
    "@correlation_coefficient[-0.43]", "@correlation_coefficient[1.00]", "@relationship_type[none]",
    "@mean_delta[-3]", "@p_value[0.0001]", "@pct[45]", "@r2[0.5]",
    "@Highest_Monthly_Average_Close_Price[1, 2018, 88.3]", "@name[Smith]", "42", "", None,
    "@count[12]\n@mean_change[-4.5]"])
def test_plausible_values_pass(answer):
    assert plausible_check(answer).passed


def test_the_answer_checks_come_in_the_sidebars_order():
    checks = all_checks([None], "@corr[1.3]", "What is the correlation?", "@corr[value]", 1, 3, False)
    assert [c.name for c in checks] == ["type", "plausible", "agree"]
    assert [c.passed for c in checks] == [True, False, False]
    assert CHECKS[-3:] == ("type", "plausible", "agree")
    assert not type_check("@corr[high]", "What is the correlation?", "@corr[value]").passed
