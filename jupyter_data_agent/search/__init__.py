"""Search strategies behind one interface (see base.Strategy)."""

from .base import (
    Cancelled,
    Candidate,
    Event,
    Executor,
    RunContext,
    SearchResult,
    SearchStats,
    Strategy,
    TraceStep,
    TurnRequest,
)
from .options import STRATEGIES


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; a clear error lists the known ones."""
    if name == "direct":
        from .direct import DirectStrategy

        return DirectStrategy()
    if name == "vote":
        from .vote import VoteStrategy

        return VoteStrategy()
    if name == "react":
        from .react import ReactStrategy

        return ReactStrategy()
    if name == "explain":
        from .explain import ExplainStrategy

        return ExplainStrategy()
    if name == "mcts":
        from .mcts import MCTSStrategy

        return MCTSStrategy()
    raise ValueError(f"Unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")


__all__ = [
    "Candidate",
    "Cancelled",
    "Event",
    "Executor",
    "RunContext",
    "SearchResult",
    "SearchStats",
    "Strategy",
    "TraceStep",
    "TurnRequest",
    "STRATEGIES",
    "get_strategy",
]
