"""The pairs to judge, how the references are built, and the in-process judgment.

A :class:`Case` is one (reference, variant) pair and carries every verdict; a
:class:`RefSource` builds the references here and, as the same call, in the kernel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import equivalence_cases as cases_mod


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
