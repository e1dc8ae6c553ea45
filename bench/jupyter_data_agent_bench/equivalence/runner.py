"""The whole benchmark (:func:`run`) and its command line (:func:`main`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import equivalence_cases as cases_mod
from .judging import Case, RefSource, judge_in_process, make_cases
from .kernel_round_trip import forms_agree, judge_round_trip, round_trip
from .rates import failures, rate_rows, wrong_verdicts
from .report import Report, check_targets, report_markdown
from .speed import _timed, speed_lines, speed_pairs
from .votes import NS, PS, cross_merges, simulate_votes, vote_pools


def table_dir(data: str | os.PathLike) -> str:
    d = Path(data)
    return str((d / "tables" if (d / "tables").is_dir() else d).resolve())


def quick_source(tables: str) -> RefSource:
    """Every third reference, no ARCADE notebooks: a run of about a minute."""
    return RefSource(tables, tuple(cases_mod.REFERENCES[::3]), arcade=False)


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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(sys.modules[__package__].__doc__ or "").split("\n\n")[0])
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
