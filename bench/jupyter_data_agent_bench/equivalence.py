"""Answer equivalence: does ``same_answer`` tell a right answer from a wrong one?

    python -m jupyter_data_agent_bench.equivalence --data ../shared/bench/dabench [--quick] [--json out.json]

Voting and scoring decide whether two cell outputs are one answer. This
benchmark measures that decision on answers a notebook really produces:

1. References: 167 values computed with pandas from the DABench tables
   (scalars, groupby aggregates keyed by group labels, value_counts,
   describe, pivots, MultiIndex groupbys, filtered and sorted frames,
   datetimes, strings, NaN, lists, arrays, dicts, a 16,683-row frame past
   the form's cell budget) and the turn outputs of the ARCADE notebooks
   (:mod:`.equivalence_cases`).
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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import equivalence_cases as cases_mod

PS = (0.2, 0.35, 0.5, 0.7)
NS = (4, 8, 16)
WRONG_POOL = 3
TARGET_RIGHT = 0.99
TARGET_WRONG = 0.01
TARGET_VOTE_POINTS = 2.0
TARGET_SPEED_S = 1.0


# --------------------------------------------------------------------------
# cases


@dataclass
class Case:
    """One (reference, variant) pair and its verdicts (None: not judged)."""

    ref: str
    kind: str
    rewrite: bool  # True: must be the same answer; False: must not
    value: Any = field(repr=False)
    form: Any = field(default=None, repr=False)  # the variant's form from the kernel round trip
    same: bool | None = None
    covers: bool | None = None
    same_rt: bool | None = None
    covers_rt: bool | None = None
    error: str | None = None  # a comparison raised, or the variant's cell failed in the kernel

    def correct(self, verdict: bool | None) -> bool | None:
        return None if verdict is None else verdict == self.rewrite


@dataclass(frozen=True)
class RefSource:
    """How to build the references, here and in the kernel: the same call on both sides."""

    table_dir: str
    specs: tuple[tuple[str, str], ...] = tuple(cases_mod.REFERENCES)
    arcade: bool = True
    tables: tuple[tuple[str, tuple[str, dict]], ...] = tuple(cases_mod.TABLES.items())

    def build(self) -> dict[str, Any]:
        return cases_mod.build_references(self.table_dir, self.specs, arcade=self.arcade, tables=dict(self.tables))

    def kernel_code(self) -> str:
        """The kernel's setup cell: the same references bound to ``REFS``."""
        return ("import warnings\nwarnings.simplefilter('ignore')\n"
                "from jupyter_data_agent_bench.equivalence_cases import build_references as _build, "
                "variant as _variant\n"
                f"REFS = _build({self.table_dir!r}, {list(self.specs)!r}, arcade={self.arcade!r}, "
                f"tables={dict(self.tables)!r})\n")


def make_cases(refs: Mapping[str, Any]) -> list[Case]:
    return [Case(name, kind, rewrite, value) for name, ref in refs.items()
            for kind, rewrite, value in cases_mod.variants(ref)]


def _verdict(fn: Callable[[Any, Any], bool], a: Any, b: Any, case: Case) -> bool:
    """A comparison that raises counts as 'different' and is reported."""
    try:
        return bool(fn(a, b))
    except Exception as e:  # noqa: BLE001
        case.error = f"{fn.__name__}: {type(e).__name__}: {e}"
        return False


def judge_in_process(refs: Mapping[str, Any], cases: Iterable[Case]) -> float:
    """``same_answer``/``covers`` on the Python values; returns seconds spent."""
    from jupyter_data_agent.search.equivalence import covers, same_answer

    t0 = time.perf_counter()
    for c in cases:
        c.same = _verdict(same_answer, c.value, refs[c.ref], c)
        c.covers = _verdict(covers, c.value, refs[c.ref], c)
    return time.perf_counter() - t0


# --------------------------------------------------------------------------
# kernel round trip


@dataclass
class RoundTrip:
    ref_forms: dict[str, Any]
    seconds: float
    cells: int
    failed_cells: list[str]


def _kernel_run(kc, code: str, timeout: float = 600) -> None:
    reply = kc.execute(code, reply=True, timeout=timeout)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"setup cell failed: {reply['content'].get('ename')}: {reply['content'].get('evalue')}")


def _cell_form(copy, code: str, failed: list[str]) -> Any:
    from jupyter_data_agent.search.equivalence import exec_output

    r = copy.exec(code)
    if not r.ok:
        failed.append(f"{code}: {r.error_line()}")
    return exec_output(r)


def round_trip(source: RefSource, cases: Sequence[Case], log: Callable[[str], None] = lambda m: None) -> RoundTrip:
    """Forms of every reference and variant as a fork copy of a real kernel reports them."""
    from jupyter_data_agent.kernel.launch import start_kernel, stop_kernel
    from jupyter_data_agent.kernel.results import Limits
    from jupyter_data_agent.kernel.snapshot import SnapshotTree

    by_ref: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        by_ref[c.ref].append(c)
    d = tempfile.mkdtemp(prefix="jda-equivalence-")
    km, kc = start_kernel({"PYTHONWARNINGS": "ignore"}, d)
    ref_forms: dict[str, Any] = {}
    failed: list[str] = []
    t0 = time.perf_counter()
    try:
        _kernel_run(kc, source.kernel_code())
        tree = SnapshotTree.from_blocking_client(kc, notebook_dir=d, limits=Limits(timeout_s=120, cpu_s=120))
        try:
            for i, (ref, group) in enumerate(by_ref.items()):
                copy = tree.root.fork()
                try:
                    ref_forms[ref] = _cell_form(copy, f"REFS[{ref!r}]", failed)
                    for c in group:
                        c.form = _cell_form(copy, f"_variant(REFS[{ref!r}], {c.kind!r})", failed)
                finally:
                    copy.close()
                if (i + 1) % 25 == 0:
                    log(f"  round trip: {i + 1}/{len(by_ref)} references")
        finally:
            tree.close()
    finally:
        stop_kernel(km, kc)
        shutil.rmtree(d, ignore_errors=True)
    cells = len(ref_forms) + len(cases)
    return RoundTrip(ref_forms, time.perf_counter() - t0, cells, failed)


def judge_round_trip(rt: RoundTrip, cases: Iterable[Case]) -> None:
    from jupyter_data_agent.search.equivalence import covers, same_answer

    for c in cases:
        ref = rt.ref_forms.get(c.ref)
        if c.form is None or ref is None:
            c.error = c.error or "no form from the kernel"
            c.same_rt = c.covers_rt = False
            continue
        c.same_rt = _verdict(same_answer, c.form, ref, c)
        c.covers_rt = _verdict(covers, c.form, ref, c)


def forms_agree(refs: Mapping[str, Any], rt: RoundTrip) -> tuple[int, list[str]]:
    """References whose in-process form has the kernel's key: (agreeing, names that differ)."""
    from jupyter_data_agent.search.equivalence import answer_key, as_form

    differ = [n for n, v in refs.items() if n in rt.ref_forms
              and answer_key(as_form(v)) != answer_key(rt.ref_forms[n])]
    return sum(1 for n in refs if n in rt.ref_forms) - len(differ), differ


# --------------------------------------------------------------------------
# rates


JUDGMENTS = (("same", "same_answer in-process"), ("same_rt", "same_answer round trip"),
             ("covers", "covers in-process"), ("covers_rt", "covers round trip"))


@dataclass
class RateRow:
    """Accepted / judged per judgment for one variant kind (or a total)."""

    kind: str
    rewrite: bool
    n: int
    accepted: dict[str, int]
    judged: dict[str, int]

    def rate(self, judgment: str) -> float | None:
        j = self.judged.get(judgment, 0)
        return self.accepted.get(judgment, 0) / j if j else None


def _row(kind: str, rewrite: bool, group: Sequence[Case]) -> RateRow:
    accepted = {j: sum(1 for c in group if getattr(c, j) is True) for j, _ in JUDGMENTS}
    judged = {j: sum(1 for c in group if getattr(c, j) is not None) for j, _ in JUDGMENTS}
    return RateRow(kind, rewrite, len(group), accepted, judged)


def rate_rows(cases: Sequence[Case]) -> list[RateRow]:
    """One row per kind, rewrites first, each block followed by its total."""
    rows = []
    for rewrite, kinds in ((True, cases_mod.REWRITES), (False, cases_mod.MUTATIONS)):
        block = [c for c in cases if c.rewrite == rewrite]
        rows += [_row(k, rewrite, [c for c in block if c.kind == k]) for k in kinds
                 if any(c.kind == k for c in block)]
        rows.append(_row("all rewrites" if rewrite else "all mutations", rewrite, block))
    return rows


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def rates_markdown(rows: Sequence[RateRow]) -> str:
    """Rewrites: the share accepted (should be ~100%); mutations: the share accepted (should be ~0%)."""
    lines = ["| variant | kind | n | " + " | ".join(h for _, h in JUDGMENTS) + " |",
             "|---|---|---:|" + "---:|" * len(JUDGMENTS)]
    for r in rows:
        total = r.kind.startswith("all ")
        name = f"**{r.kind}**" if total else r.kind
        cells = []
        for j, _ in JUDGMENTS:
            cell = f"{_pct(r.rate(j))} ({r.accepted[j]}/{r.judged[j]})"
            cells.append(f"**{cell}**" if total else cell)
        lines.append(f"| {'rewrite' if r.rewrite else 'mutation'} | {name} | {r.n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _short(x: Any, limit: int = 1200) -> str:
    """A repr that fits in a report: a few rows and columns of a frame, its type named."""
    import pandas as pd

    try:
        with pd.option_context("display.max_rows", 8, "display.max_columns", 8, "display.width", 110):
            text = repr(x)
    except Exception as e:  # noqa: BLE001
        text = f"<repr failed: {e}>"
    text = text if len(text) <= limit else text[:limit] + " ..."
    return f"{type(x).__module__}.{type(x).__qualname__}: {text}" if "\n" in text else text


def failures(cases: Sequence[Case], refs: Mapping[str, Any], per_kind: int = 3) -> list[dict]:
    """Up to ``per_kind`` wrong verdicts (of either path) per kind, with both values."""
    out: list[dict] = []
    seen: Counter = Counter()
    for c in cases:
        wrong = [j for j, _ in JUDGMENTS if c.correct(getattr(c, j)) is False and j.startswith("same")]
        if not wrong or seen[c.kind] >= per_kind:
            continue
        seen[c.kind] += 1
        out.append({"ref": c.ref, "kind": c.kind, "rewrite": c.rewrite, "wrong_in": wrong, "error": c.error,
                    "reference": _short(refs[c.ref]), "variant": _short(c.value)})
    return out


def wrong_verdicts(cases: Sequence[Case]) -> list[dict]:
    """Every case some judgment got wrong (no values: the JSON's full list)."""
    return [{"ref": c.ref, "kind": c.kind, "rewrite": c.rewrite, "error": c.error,
             "wrong_in": [j for j, _ in JUDGMENTS if c.correct(getattr(c, j)) is False]}
            for c in cases if any(c.correct(getattr(c, j)) is False for j, _ in JUDGMENTS)]


def _fenced(label: str, text: str) -> str:
    body = "\n".join("  " + line for line in text.splitlines())
    return f"  {label}:\n  ```\n{body}\n  ```"


def failures_markdown(items: Sequence[dict]) -> str:
    if not items:
        return "No wrong verdict from same_answer."
    parts = []
    for f in items:
        what = "rewrite rejected" if f["rewrite"] else "mutation accepted"
        parts.append(f"- `{f['ref']}` / `{f['kind']}` ({what}; {', '.join(f['wrong_in'])})"
                     + (f" error: {f['error']}" if f["error"] else "")
                     + "\n\n" + _fenced("reference", f["reference"]) + "\n" + _fenced("variant", f["variant"]))
    return "\n".join(parts)


# --------------------------------------------------------------------------
# vote simulation


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
    from jupyter_data_agent.search.equivalence import majority, same_answer

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


def votes_markdown(rows: Sequence[VoteRow]) -> str:
    lines = ["| p (sample right) | n | product pick right (same_answer) | (true class) | ideal majority "
             "| gap, points | gap true class, points | any sample right |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.p:.2f} | {r.n} | {_pct(r.product)} | {_pct(r.product_true)} | {_pct(r.ideal)} "
                     f"| {r.gap_points:+.1f} | {r.gap_true_points:+.1f} | {_pct(r.any_right)} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# speed


@dataclass
class SpeedRow:
    """Seconds (medians): forms of both values, the comparisons on forms, and end to end on the values."""

    case: str
    form_s: float
    same_s: float
    covers_s: float
    total_s: float  # same_answer on the two Python values, forms included
    same: bool
    covers: bool
    expected: bool


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def speed_pairs(rows: int = 1_000_000, wide: tuple[int, int] = (1000, 2000)) -> list[tuple[str, Any, Any, bool]]:
    """(name, a, b, same?) — a 1M-row frame vs one whose last text cell differs; a wide frame vs its equal
    copy and vs a copy with one column changed."""
    import pandas as pd

    rng = np.random.default_rng(0)
    long = pd.DataFrame({"id": np.arange(rows), "x": rng.normal(size=rows), "k": rng.integers(0, 100, rows),
                         "name": [f"item {i}" for i in range(rows)]})
    long_b = long.copy()
    long_b.iat[-1, 3] = "item changed"
    w = pd.DataFrame(rng.normal(size=wide), columns=[f"c{j}" for j in range(wide[1])])
    w_changed = w.copy()
    w_changed.isetitem(wide[1] // 2, w.iloc[:, wide[1] // 2] + 1.0)
    return [(f"{rows:,} rows x 4 columns, last text cell differs", long, long_b, False),
            (f"{wide[0]:,} rows x {wide[1]:,} columns, equal copy", w, w.copy(), True),
            (f"{wide[0]:,} rows x {wide[1]:,} columns, one column changed", w, w_changed, False)]


def _median_timed(repeats: int, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """The result and the median time of ``repeats`` calls (the machine may be shared)."""
    runs = [_timed(fn, *args) for _ in range(max(1, repeats))]
    return runs[0][0], statistics.median(t for _, t in runs)


def speed_lines(pairs: Sequence[tuple[str, Any, Any, bool]], repeats: int = 3) -> list[SpeedRow]:
    """Median of ``repeats`` timings of each step."""
    from jupyter_data_agent.search.equivalence import as_form, covers, same_answer

    out = []
    for name, a, b, expected in pairs:
        fa, form_a = _median_timed(repeats, as_form, a)
        fb, form_b = _median_timed(repeats, as_form, b)
        same, same_s = _median_timed(repeats, same_answer, fa, fb)
        cov, covers_s = _median_timed(repeats, covers, fb, fa)
        _, total_s = _median_timed(repeats, same_answer, a, b)
        out.append(SpeedRow(name, form_a + form_b, same_s, covers_s, total_s, bool(same), bool(cov), expected))
    return out


def speed_markdown(rows: Sequence[SpeedRow]) -> str:
    lines = ["| values | forms of both s | same_answer s | covers s | same_answer on values s (forms incl.) "
             "| verdicts |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ok = r.same == r.expected and r.covers == r.expected
        lines.append(f"| {r.case} | {r.form_s:.3f} | {r.same_s:.4f} | {r.covers_s:.4f} | {r.total_s:.3f} "
                     f"| same={r.same} covers={r.covers} ({'right' if ok else 'WRONG'}) |")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# report


def check_targets(rows: Sequence[RateRow], votes: Sequence[VoteRow], speed: Sequence[SpeedRow]) -> list[str]:
    msgs = []
    for r in rows:
        if not r.kind.startswith("all "):
            continue
        for j, label in JUDGMENTS[:2]:
            rate = r.rate(j)
            if rate is None:
                continue
            ok = rate >= TARGET_RIGHT if r.rewrite else rate <= TARGET_WRONG
            target = f">= {TARGET_RIGHT:.0%}" if r.rewrite else f"<= {TARGET_WRONG:.0%}"
            msgs.append(f"{r.kind[4:]} accepted, {label}: {_pct(rate)} (target {target}): {'PASS' if ok else 'FAIL'}")
    for label, gap in (("same_answer", lambda v: v.gap_points), ("true class", lambda v: v.gap_true_points)):
        if not votes:
            break
        worst = max(votes, key=lambda v: abs(gap(v)))
        msgs.append(f"vote ({label}): largest gap to ideal {gap(worst):+.1f} points at p={worst.p}, n={worst.n} "
                    f"(target within {TARGET_VOTE_POINTS:.0f}): "
                    f"{'PASS' if abs(gap(worst)) <= TARGET_VOTE_POINTS else 'FAIL'}")
    for s in speed:
        ok = s.total_s < TARGET_SPEED_S and s.same == s.expected and s.covers == s.expected
        msgs.append(f"speed, {s.case}: {s.total_s:.3f} s end to end, right verdicts: "
                    f"{s.same == s.expected and s.covers == s.expected} (target < {TARGET_SPEED_S:.0f} s): "
                    f"{'PASS' if ok else 'FAIL'}")
    return msgs


def table_dir(data: str | os.PathLike) -> str:
    d = Path(data)
    return str((d / "tables" if (d / "tables").is_dir() else d).resolve())


def quick_source(tables: str) -> RefSource:
    """Every third reference, no ARCADE notebooks: a run of about a minute."""
    return RefSource(tables, tuple(cases_mod.REFERENCES[::3]), arcade=False)


@dataclass
class Report:
    references: int
    cases: int
    rates: list[RateRow]
    failures: list[dict]
    wrong_verdicts: list[dict]
    votes: list[VoteRow]
    vote_forms: str
    vote_merges: dict[str, Any]
    speed: list[SpeedRow]
    targets: list[str]
    seconds: dict[str, float]
    round_trip: dict[str, Any]

    def to_json(self) -> dict:
        return asdict(self)


def run(source: RefSource, *, kernel: bool = True, trials: int = 2000, speed: bool = True,
        log: Callable[[str], None] = lambda m: None) -> tuple[Report, list[Case], dict[str, Any]]:
    """The whole benchmark; the cases carry every verdict."""
    seconds: dict[str, float] = {}
    refs, seconds["references"] = _timed(source.build)
    cases = make_cases(refs)
    log(f"{len(refs)} references, {len(cases)} variants "
        f"({sum(c.rewrite for c in cases)} rewrites, {sum(not c.rewrite for c in cases)} mutations)")
    seconds["in_process"] = judge_in_process(refs, cases)
    rt = None
    rt_info: dict[str, Any] = {}
    if kernel:
        rt = round_trip(source, cases, log)
        judge_round_trip(rt, cases)
        agree, differ = forms_agree(refs, rt)
        seconds["round_trip"] = rt.seconds
        rt_info = {"cells": rt.cells, "failed_cells": rt.failed_cells[:20], "reference_forms_agree": agree,
                   "reference_forms_differ": differ}
        log(f"round trip: {rt.cells} cells in {rt.seconds:.1f} s")
    pools, where = vote_pools(refs, cases, rt)
    votes, seconds["votes"] = _timed(simulate_votes, pools, PS, NS, trials) if trials else ([], 0.0)
    joined, compared, merged = cross_merges(pools) if trials else (0, 0, Counter())
    merges = {"joined": joined, "compared": compared, "by_kind": dict(merged.most_common(12))}
    speed_rows = speed_lines(speed_pairs()) if speed else []
    rows = rate_rows(cases)
    report = Report(len(refs), len(cases), rows, failures(cases, refs), wrong_verdicts(cases), votes,
                    f"{len(pools)} pools; {where}", merges, speed_rows, check_targets(rows, votes, speed_rows),
                    seconds, rt_info)
    return report, cases, refs


def report_markdown(r: Report) -> str:
    parts = [f"{r.references} references, {r.cases} variants.", "", "### Accepted as the same answer", "",
             rates_markdown(r.rates), ""]
    if r.round_trip:
        parts += [f"Round trip: {r.round_trip['cells']} cells; reference forms equal in-process and in the kernel: "
                  f"{r.round_trip['reference_forms_agree']}"
                  + (f" (differ: {', '.join(r.round_trip['reference_forms_differ'])})"
                     if r.round_trip["reference_forms_differ"] else "")
                  + (f"; failed cells: {len(r.round_trip['failed_cells'])}" if r.round_trip["failed_cells"] else ""),
                  ""]
    parts += ["### Wrong verdicts (up to 3 per kind)", "", failures_markdown(r.failures), ""]
    if r.votes:
        parts += ["### Vote simulation", "", f"Forms: {r.vote_forms}. {r.votes[0].trials} trials per cell.", "",
                  votes_markdown(r.votes), "",
                  f"Right and wrong pool members that same_answer joins: {r.vote_merges['joined']} of "
                  f"{r.vote_merges['compared']} pairs"
                  + (" (" + ", ".join(f"{k}: {v}" for k, v in r.vote_merges["by_kind"].items()) + ")"
                     if r.vote_merges["by_kind"] else "") + ".", ""]
    if r.speed:
        parts += ["### Speed", "", speed_markdown(r.speed), ""]
    parts += ["### Targets", ""] + [f"- {m}" for m in r.targets]
    parts += ["", "Seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items())]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--data", required=True, help="DABench folder (its tables/ are read) or a folder of CSV tables")
    ap.add_argument("--quick", action="store_true", help="a third of the references, no ARCADE, 300 vote trials")
    ap.add_argument("--trials", type=int, default=None, help="vote trials per (p, n) (default 2000; --quick 300)")
    ap.add_argument("--no-kernel", action="store_true", help="in-process only (no kernel round trip)")
    ap.add_argument("--no-speed", action="store_true", help="skip the 1M-row and 2,000-column timings")
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    tables = table_dir(args.data)
    source = quick_source(tables) if args.quick else RefSource(tables)
    trials = args.trials if args.trials is not None else (300 if args.quick else 2000)
    report, _, _ = run(source, kernel=not args.no_kernel, trials=trials, speed=not args.no_speed, log=log)
    print(report_markdown(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
