"""The one turn pipeline: resolve what was asked, open kernel copies, run the strategy.

Entry points (``%%agent``, the server's turn jobs, every benchmark runner)
gather the notebook's context and hold a ``kernel.handle`` on their kernel,
then call ``resolve`` -> ``aprepare`` (schemas, plots, copies; ``prepare`` blocking) -> ``run_turn``
and render the result; nothing else assembles a turn.
"""

from .copies import Copies, open_copies, replay_cells, secrets_scrubber
from .prepare import TurnInputs, aprepare, prepare
from .resolve import resolve
from .run import run_turn, turn_request
from .spec import CopyPolicy, TurnAsk, TurnSpec

__all__ = ["Copies", "CopyPolicy", "TurnAsk", "TurnInputs", "TurnSpec", "aprepare", "open_copies", "prepare",
           "replay_cells", "resolve", "run_turn", "secrets_scrubber", "turn_request"]
