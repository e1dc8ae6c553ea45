"""The one turn pipeline: resolve what was asked, open kernel copies, run the strategy.

Entry points (``%%agent``, the server's turn jobs, every benchmark runner)
gather context, then call ``resolve`` -> ``open_copies`` -> ``run_turn``
and render the result; nothing else assembles a turn.
"""

from .copies import Copies, open_copies, replay_cells, secrets_scrubber
from .resolve import resolve
from .run import run_turn, turn_request
from .spec import CopyPolicy, TurnAsk, TurnSpec

__all__ = ["Copies", "CopyPolicy", "TurnAsk", "TurnSpec", "open_copies", "replay_cells", "resolve", "secrets_scrubber",
           "run_turn", "turn_request"]
