"""``%%agent``'s output preview tables (``render.table_html``) from real pandas values."""

from __future__ import annotations

import pandas as pd

from jupyter_data_agent.kernel.results import describe_value
from jupyter_data_agent.render import table_html


def test_a_grouped_series_keeps_its_index_name_and_no_stray_count():
    by_city = pd.DataFrame({"city": ["Lima", "Oslo", "Lima"], "amount": [3.0, 1.0, 5.0]}) \
        .groupby("city")["amount"].mean()
    html = table_html(describe_value(by_city))
    assert "<thead><tr><th>city</th><th>amount</th></tr></thead>" in html
    assert "<tr><th>Lima</th><td>4.0</td></tr>" in html
    # The whole table is shown: no bare "2" under it.
    assert html.endswith("</table>")


def test_a_frame_with_a_multiindex_names_both_levels():
    frame = pd.DataFrame({"year": [2020, 2021], "city": ["Lima", "Oslo"], "n": [1, 2]}) \
        .set_index(["year", "city"])
    html = table_html(describe_value(frame))
    assert "<th>year / city</th><th>n</th>" in html


def test_an_unnamed_index_has_an_empty_corner():
    html = table_html(describe_value(pd.DataFrame({"a": [1, 2]})))
    assert "<thead><tr><th></th><th>a</th></tr></thead>" in html


def test_a_cut_table_says_its_size_in_words():
    html = table_html(describe_value(pd.DataFrame({"a": range(30), "b": range(30)})))
    assert html.endswith("<div>30 rows × 2 columns (first rows and columns shown)</div>")
    assert html.count("<tr><th>") == 1 + 20  # the header, then the first 20 rows
    series = table_html(describe_value(pd.Series(range(25), name="n")))
    assert series.endswith("<div>25 rows (first rows and columns shown)</div>")
