"""Search strategies behind one interface (see base.Strategy)."""

from importlib import import_module

from .base import Cancelled, Candidate, Event, RunContext, SearchResult, Strategy, TurnRequest
from .options import STRATEGIES
from .registry import BY_NAME


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name`` (its class lives in the module of its name, ``registry``)."""
    if name not in BY_NAME:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")
    strategy: Strategy = getattr(import_module(f".{name}", __name__), BY_NAME[name].cls)()
    return strategy


__all__ = [
    "Candidate",
    "Cancelled",
    "Event",
    "RunContext",
    "SearchResult",
    "Strategy",
    "TurnRequest",
    "STRATEGIES",
    "get_strategy",
]
