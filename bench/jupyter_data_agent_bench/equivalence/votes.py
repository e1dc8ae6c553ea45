"""The vote simulation: n samples, each right with probability p, else one of 3 recurring wrong
answers; the product's ``majority`` pick against the ideal majority over the true classes."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import equivalence_cases as cases_mod
from .judging import Case
from .kernel_round_trip import RoundTrip

PS = (0.2, 0.35, 0.5, 0.7)
NS = (4, 8, 16)
WRONG_POOL = 3


@dataclass
class VotePool:
    """The answers a sampler can give for one reference: right ones and 3 recurring wrong ones."""

    ref: str
    ref_form: Any
    right: list[Any]
    wrong: list[Any]
    right_kinds: list[str]
    wrong_kinds: list[str]


def _wrong_values(ref: Any, cases: Sequence[Case], rng: np.random.Generator) -> list[tuple[str, Any]]:
    """3 different wrong answers: the reference's mutations in random order, then (if it has fewer) a mutation
    applied twice or three times (+2, +3, two days off). Never two mutations composed: those can commute
    into one answer, which the ideal majority would count as two."""
    muts = [c for c in cases if not c.rewrite]
    order = rng.permutation(len(muts))
    first = [muts[i] for i in order]
    pool: list[tuple[str, Any]] = []
    for times in (1, 2, 3):
        for c in first:
            v = c.value
            for _ in range(times - 1):
                v = None if v is None else cases_mod.variant(v, c.kind)
            if len(pool) < WRONG_POOL and v is not None and not cases_mod.identical(v, ref) \
                    and not any(cases_mod.identical(v, p) for _, p in pool):
                pool.append((c.kind if times == 1 else f"{c.kind} x{times}", v))
    return pool


def vote_pools(refs: Mapping[str, Any], cases: Sequence[Case], rt: RoundTrip | None,
               seed: int = 0) -> tuple[list[VotePool], str]:
    """A pool per reference (forms from the round trip where there is one); and where forms came from."""
    from jupyter_data_agent.search.equivalence import as_form

    rng = np.random.default_rng(seed)
    by_ref: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        by_ref[c.ref].append(c)
    kernel_forms = {id(c.value): c.form for c in cases if c.form is not None}
    counts: Counter = Counter()

    def form(v: Any) -> Any:
        f = kernel_forms.get(id(v))
        counts["kernel" if f is not None else "here"] += 1
        return f if f is not None else as_form(v)

    pools = []
    for name, ref in refs.items():
        group = by_ref.get(name, [])
        wrong_values = _wrong_values(ref, group, rng)
        if len(wrong_values) < WRONG_POOL:
            continue
        ref_form = rt.ref_forms.get(name) if rt is not None else None
        if ref_form is None:
            ref_form = as_form(ref)
        rewrites = [c for c in group if c.rewrite]
        pools.append(VotePool(name, ref_form, [ref_form] + [form(c.value) for c in rewrites],
                              [form(v) for _, v in wrong_values], ["reference"] + [c.kind for c in rewrites],
                              [k for k, _ in wrong_values]))
    where = (f"{counts['kernel']} variant forms from the kernel round trip, {counts['here']} computed in-process "
             "(mutations of mutations, or no round trip)")
    return pools, where


def cross_merges(pools: Sequence[VotePool]) -> tuple[int, int, Counter]:
    """Right and wrong pool members that ``same_answer`` joins (it is not transitive: a renamed right frame
    equals a frame whose columns were swapped); such pairs put wrong votes in the right cluster or the reverse.
    Returns (pairs joined, pairs compared, joined pairs by kind)."""
    from jupyter_data_agent.search.equivalence import same_answer

    joined, total, kinds = 0, 0, Counter[str]()
    for pool in pools:
        for rk, r in zip(pool.right_kinds, pool.right):
            for wk, w in zip(pool.wrong_kinds, pool.wrong):
                total += 1
                if same_answer(r, w):
                    joined += 1
                    kinds[f"{rk} ~ {wk}"] += 1
    return joined, total, kinds


def ideal_pick(labels: Sequence[int]) -> int:
    """Majority over the true classes (0 = right); a tie goes to the class seen first, as in ``majority``."""
    counts = Counter(labels)
    best = max(counts.values())
    return next(label for label in labels if counts[label] == best)


@dataclass
class VoteRow:
    p: float
    n: int
    trials: int
    product: float  # the pick is right by same_answer(pick, reference), as the brief defines it
    product_true: float  # the pick is right by its true class (not by the relation under test)
    ideal: float
    any_right: float  # a right sample was drawn at all (an upper bound for any picker)

    @property
    def gap_points(self) -> float:
        """Ideal minus product; negative where the product looks better than the ideal (merged clusters)."""
        return 100 * (self.ideal - self.product)

    @property
    def gap_true_points(self) -> float:
        return 100 * (self.ideal - self.product_true)


def simulate_votes(pools: Sequence[VotePool], ps: Sequence[float] = PS, ns: Sequence[int] = NS,
                   trials: int = 2000, seed: int = 0) -> list[VoteRow]:
    """Pick accuracy of ``majority`` + ``same_answer`` against the ideal, per (p, n)."""
    from jupyter_data_agent.search.equivalence import same_answer
    from jupyter_data_agent.search.majority import majority

    rows = []
    for p in ps:
        for n in ns:
            rng = np.random.default_rng([seed, int(p * 1000), n])
            product = product_true = ideal = any_right = 0
            for _ in range(trials):
                pool = pools[int(rng.integers(len(pools)))]
                labels = [0 if rng.random() < p else 1 + int(rng.integers(WRONG_POOL)) for _ in range(n)]
                forms = [pool.right[int(rng.integers(len(pool.right)))] if lab == 0 else pool.wrong[lab - 1]
                         for lab in labels]
                groups = majority(forms)
                product += bool(groups) and same_answer(forms[groups[0][0]], pool.ref_form)
                product_true += bool(groups) and labels[groups[0][0]] == 0
                ideal += ideal_pick(labels) == 0
                any_right += 0 in labels
            rows.append(VoteRow(p, n, trials, product / trials, product_true / trials, ideal / trials,
                                any_right / trials))
    return rows
