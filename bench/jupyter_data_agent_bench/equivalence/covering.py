"""Covering classes: should ``majority`` merge two classes where one ``covers`` the other?

    python -m jupyter_data_agent_bench.equivalence.covering --data ../shared/bench/dabench [--trials 2000]

Right answers that differ only in carrying an extra column, in keeping a filtered frame's row labels, or in
keeping the key both as index and as column are right under ARCADE's scorer (``covers``) but are different
answers to ``same_answer``, so they split the vote. This lab adds such *covering variants* to the right
answers of the vote simulation (:mod:`.votes`): a right sample is one with probability ``share``, else the
reference or a plain rewrite; wrong samples are the pool's 3 recurring mutations. On the same draws it picks
with ``majority`` as it is and with ``majority(covering=True)``, and reports the share of picks that are
right and that are wrong (by true class: a right sample, covering or not, is right) against the ideal
majority over the true classes. It also counts the right/wrong pool pairs where one covers the other: the
pairs a covering merge would join wrongly.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .. import equivalence_cases as cases_mod
from .judging import make_cases
from .runner import table_dir
from .votes import NS, PS, WRONG_POOL, VotePool, ideal_pick, vote_pools

SHARE = 0.4  # the chance that a right sample carries its answer in a covering form


def extra_column(x: Any) -> Any:
    """The answer with one more column (a count beside the asked-for values)."""
    if isinstance(x, pd.Series):
        x = x.to_frame("value" if x.name is None else x.name)
    if not isinstance(x, pd.DataFrame) or isinstance(x.columns, pd.MultiIndex) or "n_extra" in x.columns:
        return None
    return x.assign(n_extra=np.arange(len(x)) + 1)


def row_labels(x: Any) -> Any:
    """A result with a default index keeping the row labels of the frame it was filtered from."""
    if not isinstance(x, (pd.Series, pd.DataFrame)) or not cases_mod.is_default_index(x.index) or len(x) < 2:
        return None
    return x.set_axis(np.arange(len(x)) * 3 + 5, axis=0)


def key_twice(x: Any) -> Any:
    """A keyed result whose key is both the index and a column (``set_index(k, drop=False)``)."""
    if not isinstance(x, (pd.Series, pd.DataFrame)) or cases_mod.is_default_index(x.index) \
            or isinstance(x.index, pd.MultiIndex):
        return None
    try:
        y = x.reset_index()
    except ValueError:
        return None
    y.index = x.index
    return y


COVERING: dict[str, Callable[[Any], Any]] = {"extra_column": extra_column, "row_labels": row_labels,
                                             "key_twice": key_twice}


@dataclass
class CoverPool:
    """A vote pool and the covering forms of its reference."""

    pool: VotePool
    covering: list[Any]
    covering_kinds: list[str]


def covering_pools(refs: Mapping[str, Any]) -> list[CoverPool]:
    """The vote pools (forms built in-process) whose reference has a covering variant that ``covers``
    accepts and ``same_answer`` does not."""
    from jupyter_data_agent.search.equivalence import as_form, covers, same_answer

    pools, _ = vote_pools(refs, make_cases(refs), None)
    out = []
    for pool in pools:
        forms, kinds = [], []
        for kind, fn in COVERING.items():
            try:
                v = fn(refs[pool.ref])
            except (TypeError, ValueError):
                v = None
            if v is None:
                continue
            f = as_form(v)
            if covers(f, pool.ref_form) and not same_answer(f, pool.ref_form):
                forms.append(f)
                kinds.append(kind)
        if forms:
            out.append(CoverPool(pool, forms, kinds))
    return out


def wrong_covering_pairs(pools: Sequence[CoverPool]) -> tuple[int, int, Counter]:
    """Right (plain or covering) / wrong pool pairs where one covers the other: how many, of how many,
    and by kind (right kind ~ wrong kind)."""
    from jupyter_data_agent.search.equivalence import covers

    joined, total, kinds = 0, 0, Counter[str]()
    for cp in pools:
        for rk, r in zip(cp.pool.right_kinds + cp.covering_kinds, cp.pool.right + cp.covering):
            for wk, w in zip(cp.pool.wrong_kinds, cp.pool.wrong):
                total += 1
                if covers(r, w) or covers(w, r):
                    joined += 1
                    kinds[f"{rk} ~ {wk}"] += 1
    return joined, total, kinds


@dataclass
class CoverRow:
    p: float
    n: int
    trials: int
    right_plain: float  # the pick's true class is right: majority as it is
    right_merged: float  # majority(covering=True)
    wrong_plain: float  # the pick is a wrong answer
    wrong_merged: float
    ideal: float  # majority over the true classes


def simulate(pools: Sequence[CoverPool], ps: Sequence[float] = PS, ns: Sequence[int] = NS, trials: int = 2000,
             share: float = SHARE, seed: int = 0) -> list[CoverRow]:
    """Both pickers on the same seeded draws, per (p, n)."""
    from jupyter_data_agent.search.majority import majority

    rows = []
    for p in ps:
        for n in ns:
            rng = np.random.default_rng([seed, int(p * 1000), n, 7])
            rp = rm = wp = wm = ideal = 0
            for _ in range(trials):
                cp = pools[int(rng.integers(len(pools)))]
                labels = [0 if rng.random() < p else 1 + int(rng.integers(WRONG_POOL)) for _ in range(n)]
                forms = []
                for lab in labels:
                    if lab:
                        forms.append(cp.pool.wrong[lab - 1])
                    elif rng.random() < share:
                        forms.append(cp.covering[int(rng.integers(len(cp.covering)))])
                    else:
                        forms.append(cp.pool.right[int(rng.integers(len(cp.pool.right)))])
                plain, merged = majority(forms, covering=False), majority(forms, covering=True)
                rp += labels[plain[0][0]] == 0
                wp += labels[plain[0][0]] != 0
                rm += labels[merged[0][0]] == 0
                wm += labels[merged[0][0]] != 0
                ideal += ideal_pick(labels) == 0
            rows.append(CoverRow(p, n, trials, rp / trials, rm / trials, wp / trials, wm / trials, ideal / trials))
    return rows


def markdown(rows: Sequence[CoverRow]) -> str:
    lines = ["| p | n | right: majority | right: covering merge | wrong pick: majority | wrong pick: merge "
             "| ideal |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.p:.2f} | {r.n} | {100 * r.right_plain:.1f}% | {100 * r.right_merged:.1f}% "
                     f"| {100 * r.wrong_plain:.1f}% | {100 * r.wrong_merged:.1f}% | {100 * r.ideal:.1f}% |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--data", required=True, help="DABench folder (its tables/ are read) or a folder of CSV tables")
    ap.add_argument("--trials", type=int, default=2000, help="vote trials per (p, n)")
    ap.add_argument("--share", type=float, default=SHARE, help="chance a right sample is a covering variant")
    args = ap.parse_args(argv)
    refs = cases_mod.build_references(table_dir(args.data))
    pools = covering_pools(refs)
    kinds = sorted({k for cp in pools for k in cp.covering_kinds})
    joined, total, by_kind = wrong_covering_pairs(pools)
    print(f"{len(pools)} pools with covering variants ({', '.join(kinds)}); right/wrong pairs where one covers "
          f"the other: {joined} of {total} ({', '.join(f'{k}: {v}' for k, v in by_kind.most_common(8))})\n")
    for share in (args.share, 0.0):
        print(f"Right samples in a covering form: {100 * share:.0f}%, {args.trials} trials per row\n")
        print(markdown(simulate(pools, trials=args.trials, share=share)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
