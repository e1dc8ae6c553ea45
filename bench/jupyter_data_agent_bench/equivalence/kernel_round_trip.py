"""The kernel round trip: every reference and variant as the last expression of a cell in a
fork copy of one real kernel, their ``exec_output`` forms judged like the Python values."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .judging import Case, RefSource, _verdict


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
    from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
    from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
    from jupyter_data_agent.kernel.results import Limits

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
