"""Answer equivalence: does ``same_answer`` tell a right answer from a wrong one?

    python -m jupyter_data_agent_bench.equivalence --data ../shared/bench/dabench [--quick] [--json out.json]

Voting and scoring decide whether two cell outputs are one answer. This
benchmark measures that decision on answers a notebook really produces:

1. References: 167 values computed with pandas from the DABench tables
   (scalars, groupby aggregates keyed by group labels, value_counts,
   describe, pivots, MultiIndex groupbys, filtered and sorted frames,
   datetimes, strings, NaN, lists, arrays, dicts, a 16,683-row frame past
   the form's cell budget) and the turn outputs of the ARCADE notebooks
   (:mod:`jupyter_data_agent_bench.equivalence_cases`).
2. Variants of each: *rewrites* (the same answer in another representation:
   ``to_frame``, ``reset_index``, ``tolist``, renamed or reordered columns,
   ``astype(object)``, 1e-9 float noise, ...), which must be accepted, and
   *mutations* (a value off by one, swapped columns, shuffled or wrong group
   keys, NaN -> 0, reversed order, truncation, wrong rounding, ...), which
   must be rejected.
3. Every pair judged in-process (``same_answer(variant, reference)`` on the
   Python values) and through the kernel round trip: one real kernel builds
   the same references from the same tables, and each variant and reference
   is the last expression of a cell in a fork copy of it; their
   ``exec_output`` forms are compared. ``covers`` (ARCADE's lenient scorer)
   is reported too.
4. A vote simulation: n samples, each right with probability p (a random
   rewrite) else one of 3 mutations of the reference (wrong answers repeat
   and cluster); the product's ``majority`` pick against the ideal majority
   over the true classes.
5. Speed of ``same_answer``/``covers`` on a 1M-row frame and a 2,000-column
   frame, forms included.

Targets (issue 14): rewrites accepted >= 99%, mutations accepted <= 1%, vote
within 2 points of ideal at every (p, n), big comparisons under a second.
The tables are evaluation data: read at run time, never copied into the package.

The package, a module per step: :mod:`.judging` (the pairs, the references'
source, in-process verdicts), :mod:`.kernel_round_trip`, :mod:`.rates` (the
verdicts counted), :mod:`.votes`, :mod:`.speed`, :mod:`.report` (targets and
the Markdown tables), :mod:`.runner` (:func:`run`, :func:`main`). Two labs run on their own:
:mod:`.shapes` (comparison time at every shape up to 1,000 x 2,000) and :mod:`.covering` (whether
``majority`` merges classes where one covers the other).
"""

from .judging import Case, RefSource, judge_in_process, make_cases
from .kernel_round_trip import RoundTrip, forms_agree, judge_round_trip, round_trip
from .rates import JUDGMENTS, RateRow, failures, rate_rows, wrong_verdicts
from .report import (
    TARGET_RIGHT,
    TARGET_SPEED_S,
    TARGET_VOTE_POINTS,
    TARGET_WRONG,
    Report,
    check_targets,
    failures_markdown,
    rates_markdown,
    report_markdown,
    speed_markdown,
    votes_markdown,
)
from .runner import main, quick_source, run, table_dir
from .speed import SpeedRow, speed_lines, speed_pairs
from .votes import NS, PS, WRONG_POOL, VotePool, VoteRow, cross_merges, ideal_pick, simulate_votes, vote_pools

__all__ = [
    "JUDGMENTS", "NS", "PS", "TARGET_RIGHT", "TARGET_SPEED_S", "TARGET_VOTE_POINTS", "TARGET_WRONG", "WRONG_POOL",
    "Case", "RateRow", "RefSource", "Report", "RoundTrip", "SpeedRow", "VotePool", "VoteRow",
    "check_targets", "cross_merges", "failures", "failures_markdown", "forms_agree", "ideal_pick",
    "judge_in_process", "judge_round_trip", "main", "make_cases", "quick_source", "rate_rows", "rates_markdown",
    "report_markdown", "round_trip", "run", "simulate_votes", "speed_lines", "speed_markdown", "speed_pairs",
    "table_dir", "vote_pools", "votes_markdown", "wrong_verdicts",
]
