"""Reference answers and their variants for the equivalence benchmark.

This module is imported both by the benchmark and *inside the kernel* whose
copies give the round-trip forms: the same code builds the same references
on both sides from the same CSV tables, so nothing is pickled across. It
needs only pandas and numpy.

- :func:`build_references`: typical answers computed with pandas from the
  DABench tables (scalars, groupby aggregates, pivots, filtered frames, ...)
  plus the reference outputs of the built-in ARCADE notebooks.
- :data:`REWRITES`: representation changes of an answer (must compare equal).
- :data:`MUTATIONS`: wrong answers close to the reference (must not).

Every variant function returns ``None`` where it is not meaningful for the
value (no NaN to fill, no index to reset, ...); :func:`variants` also drops a
variant that leaves the value unchanged.

The package: :mod:`.references` (the tables, the expressions, building them),
:mod:`.rewrites`, :mod:`.mutations`, :mod:`.values` (what both need of a
value); here, :func:`variant` and :func:`variants`. The kernel imports
``build_references`` and ``variant`` from here by name.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from .mutations import (
    FLOAT_WRONG,
    MUTATIONS,
    datetime_shift,
    int_plus_one,
    nan_to_zero,
    off_by_one,
    order_flip,
    shuffle_index,
    string_changed,
    swap_columns,
    truncate,
    wrong_key,
    wrong_rounding,
)
from .references import REFERENCES, TABLES, arcade_references, build_references, load_tables, run_cell
from .rewrites import (
    FLOAT_NOISE,
    REWRITES,
    astype_object,
    dict_reorder,
    dict_series,
    float_noise,
    numpy_python,
    one_element,
    rename_axis,
    rename_columns,
    reorder_columns,
    reset_index,
    reset_reorder,
    squeeze,
    strip_pad,
    to_array,
    to_frame,
    to_numpy,
    tolist,
)
from .values import identical, is_default_index, is_missing, mutate_one

__all__ = [
    "FLOAT_NOISE", "FLOAT_WRONG", "MUTATIONS", "REFERENCES", "REWRITES", "TABLES",
    "arcade_references", "build_references", "identical", "is_default_index", "is_missing", "load_tables",
    "mutate_one", "run_cell", "variant", "variants",
    # rewrites
    "astype_object", "dict_reorder", "dict_series", "float_noise", "numpy_python", "one_element", "rename_axis",
    "rename_columns", "reorder_columns", "reset_index", "reset_reorder", "squeeze", "strip_pad", "to_array",
    "to_frame", "to_numpy", "tolist",
    # mutations
    "datetime_shift", "int_plus_one", "nan_to_zero", "off_by_one", "order_flip", "shuffle_index",
    "string_changed", "swap_columns", "truncate", "wrong_key", "wrong_rounding",
]


def variant(x: Any, kind: str) -> Any:
    """``x`` rewritten or mutated by ``kind`` (None: not meaningful). Runs in the kernel too."""
    fn = REWRITES.get(kind) or MUTATIONS[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(x)


def variants(x: Any) -> Iterator[tuple[str, bool, Any]]:
    """(kind, is_rewrite, value) for every meaningful variant of ``x``."""
    for kinds, rewrite in ((REWRITES, True), (MUTATIONS, False)):
        for kind in kinds:
            try:
                y = variant(x, kind)
            except Exception:  # noqa: BLE001 - a variant that does not apply to this value
                continue
            if y is not None and not identical(x, y):
                yield kind, rewrite, y
