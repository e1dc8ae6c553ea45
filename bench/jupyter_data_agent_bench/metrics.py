"""Sampling metrics: unbiased pass@k.

Self-consistency is not re-implemented here: the benchmarks score the
product's own pick (``search.majority.majority`` through ``vote``).
"""

from __future__ import annotations

__all__ = ["pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct (Chen et al., 2021).

    ``1 - C(n-c, k) / C(n, k)`` as a running product, which avoids the huge
    binomials of the direct formula.
    """
    if n < 0 or c < 0 or k < 1:
        raise ValueError(f"need n >= 0, c >= 0, k >= 1 (got n={n}, c={c}, k={k})")
    if c > n:
        raise ValueError(f"c={c} correct samples out of n={n}")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of samples n={n}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong
