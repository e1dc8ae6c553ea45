"""Search strategies behind one interface (see base.Strategy)."""

from importlib import import_module

from .base import Cancelled, Candidate, Event, RunContext, SearchResult, Strategy, TurnRequest
from .options import STRATEGIES

#: The class of each strategy; each lives in the module of its name.
_CLASSES = {"direct": "DirectStrategy", "vote": "VoteStrategy", "react": "ReactStrategy",
            "explain": "ExplainStrategy", "mcts": "MCTSStrategy",
            "analysis": "AnalysisStrategy"}


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; a clear error lists the known ones."""
    if name not in _CLASSES:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")
    strategy: Strategy = getattr(import_module(f".{name}", __name__), _CLASSES[name])()
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
