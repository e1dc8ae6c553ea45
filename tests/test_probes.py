"""Evidence probes (``kernel.probes``) in fork copies of one real ipykernel.

Each silent error is made by a step in its own copy of a baseline copy; the
probe cell run after it must report that probe, and only that one, and a
clean step must pass every probe.
"""

from __future__ import annotations

import pytest

from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.inkernel import probes
from jupyter_data_agent.kernel.results import Limits

SETUP = """
import numpy as np
import pandas as pd
sales = pd.DataFrame({"store": [1, 2, 3, 4, 5, 6], "units": [10, 20, 30, 40, 50, 60],
                      "price": [1.5, 2.0, 2.5, 3.0, 3.5, 4.0], "city": list("abcabc")})
stores = pd.DataFrame({"store": [1, 2, 3, 4], "region": ["n", "s", "n", "s"]})
"""

CASES = {
    "rows": [
        "merged = sales.merge(stores, on='store')",  # inner join drops stores 5 and 6
        "sales = pd.concat([sales, sales.head(2)], ignore_index=True)",
    ],
    "nan": [
        "sales['units'] = sales['units'].where(sales['units'] > 20)",
        "sales['ratio'] = np.nan",
    ],
    "dtype": ["sales['units'] = sales['units'].astype(str)"],
    "empty": [
        "big = sales[sales['units'] > 1000]",
        "sales['flag'] = 1",
    ],
    "index": ["sales = sales.set_index('city')"],
    "range": ["sales['price'] = sales['price'].fillna(-999).where(sales['store'] != 3, -999)"],
}

CLEAN = [
    "total = sales['units'].sum()",
    "top = sales[sales['units'] > 25]",
    "sales['revenue'] = sales['units'] * sales['price']",
    "by_city = sales.groupby('city')['units'].mean()",
    "merged = sales.merge(stores, on='store', how='left')\nmerged['region'] = merged['region'].fillna('?')",
    "print(sales.describe())",
]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    nb = tmp_path_factory.mktemp("notebook")
    km, kc = start_kernel(cwd=nb)
    tree = None
    try:
        reply = kc.execute_interactive(SETUP, timeout=120)
        assert reply["content"]["status"] == "ok"
        tree = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb), limits=Limits(timeout_s=60))
        node = tree.root.fork()
        first = node.exec(probes.CELL)
        assert first.ok and probes.parse(first.stream("stdout")) == []  # the baseline finds nothing
        yield node
    finally:
        if tree is not None:
            tree.close()
        stop_kernel(km, kc)


def findings_after(baseline, code: str) -> list[probes.Finding]:
    child = baseline.fork()
    try:
        ran = child.exec(code)
        assert ran.ok, ran.text()
        report = child.exec(probes.CELL)
        assert report.ok, report.text()
        found = probes.parse(report.stream("stdout"))
        assert found is not None
        return found
    finally:
        child.close()


@pytest.mark.parametrize("probe,code", [(p, c) for p, codes in CASES.items() for c in codes])
def test_each_probe_detects_its_case(baseline, probe, code):
    found = findings_after(baseline, code)
    assert {f.probe for f in found} == {probe}, found
    assert all(f.detail for f in found)


@pytest.mark.parametrize("code", CLEAN)
def test_a_clean_step_passes_every_probe(baseline, code):
    assert findings_after(baseline, code) == []


def test_the_probe_compares_with_the_parent_not_the_root(baseline):
    """A grandchild is judged against its parent: the loss its parent made is not its own."""
    child = baseline.fork()
    try:
        assert child.exec("merged = sales.merge(stores, on='store')").ok
        assert {f.probe for f in probes.parse(child.exec(probes.CELL).stream("stdout"))} == {"rows"}
        grandchild = child.fork()
        try:
            assert grandchild.exec("n = len(merged)").ok
            assert probes.parse(grandchild.exec(probes.CELL).stream("stdout")) == []
        finally:
            grandchild.close()
    finally:
        child.close()


def test_checks_list_every_probe():
    found = [probes.Finding("nan", "df", "df['a'] has 2 NaN")]
    checks = probes.checks(found)
    assert [c.name for c in checks] == list(probes.PROBES)
    assert [c.name for c in checks if not c.passed] == ["nan"]
    assert checks[1].detail == "df['a'] has 2 NaN"


def test_a_report_that_is_not_json_is_no_report():
    assert probes.parse("hello") is None
    assert probes.parse("") is None
    assert probes.parse('{"findings": [{"probe": "bogus"}]}') == []
