import math

import pytest

from jupyter_data_agent_bench.metrics import pass_at_k


def test_pass_at_k_known_values():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 10, 5) == 1.0
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    expected = 1 - math.comb(7, 5) / math.comb(10, 5)  # = 1 - 21/252
    assert pass_at_k(10, 3, 5) == pytest.approx(expected)
    assert pass_at_k(10, 3, 5) == pytest.approx(11 / 12)


def test_pass_at_k_k1_is_fraction_correct_and_certain_when_few_wrong():
    for n, c in [(7, 3), (100, 37), (1, 1)]:
        assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    assert pass_at_k(10, 8, 3) == 1.0  # only 2 wrong samples: any 3 include a right one


def test_pass_at_k_large_n_is_stable():
    n, c, k = 2000, 3, 100
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("n,c,k", [(5, 1, 6), (0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 1, 0)])
def test_pass_at_k_invalid(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
