"""The answer a cell gave, as the canonical form votes and scores compare.

Snapshot processes never send pickles: a cell's last value arrives with its
canonical form (``ValueHandle.form``, built by ``kernel.answer_form`` inside
the copy), which ``search.equivalence`` compares.
"""

from __future__ import annotations

from ..kernel.answer_form import answer_form
from ..kernel.results import ExecResult


def exec_output(result: ExecResult | None) -> dict | None:
    """The answer a cell gave: its last expression's value, else its printed text.

    ``None`` when the cell failed or showed nothing, or its value has no form
    (such a sample never matches a reference and never votes).
    """
    if result is None or not result.ok:
        return None
    if result.value is not None:
        return result.value.form
    text = result.stream("stdout").strip()
    return answer_form(text) if text else None
