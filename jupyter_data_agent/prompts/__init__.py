"""Prompt building (ARCADE cells; JUPITER's ReAct turns in ``react``), few-shot exemplars,
output parsing, and final answers (``answers``)."""

from .arcade import STEP_PREFIX, BuiltPrompt, build_chat_prompt, build_prompt, join_cells, linearize
from .exemplars import EXEMPLARS
from .parse import ProseAnswer, UnparsableOutput, parse_chat, parse_completion, parse_output, stop_sequences

__all__ = [
    "EXEMPLARS",
    "STEP_PREFIX",
    "BuiltPrompt",
    "ProseAnswer",
    "UnparsableOutput",
    "build_chat_prompt",
    "build_prompt",
    "join_cells",
    "linearize",
    "parse_chat",
    "parse_completion",
    "parse_output",
    "stop_sequences",
]
