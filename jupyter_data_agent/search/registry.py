"""The strategies this installation can run (one registry; entry points derive their lists here)."""

from __future__ import annotations

from .options import STRATEGIES


def available_strategies() -> list[str]:
    """The strategies whose code imports here, in the catalog's order."""
    from . import get_strategy

    names = []
    for name in STRATEGIES:
        try:
            get_strategy(name)
        except (ValueError, ImportError):
            continue
        names.append(name)
    return names
