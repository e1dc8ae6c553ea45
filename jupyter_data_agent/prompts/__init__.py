"""Prompt building (ARCADE cells; JUPITER's ReAct turns in ``react``), few-shot exemplars,
output parsing, and final answers (``answers``)."""

from .arcade import (
    CELL_HEADER,
    CELL_SEP,
    SOLUTION_PREAMBLE,
    STEP_PREFIX,
    SYSTEM_PROMPT,
    BuiltPrompt,
    build_chat_prompt,
    build_prompt,
    join_cells,
    linearize,
)
from .exemplars import EXEMPLARS, Exemplar
from .parse import (
    ParsedCode,
    Step,
    UnparsableOutput,
    parse_chat,
    parse_completion,
    parse_output,
    split_steps,
    stop_sequences,
)

__all__ = [
    "CELL_HEADER",
    "CELL_SEP",
    "EXEMPLARS",
    "SOLUTION_PREAMBLE",
    "STEP_PREFIX",
    "SYSTEM_PROMPT",
    "BuiltPrompt",
    "Exemplar",
    "ParsedCode",
    "Step",
    "UnparsableOutput",
    "build_chat_prompt",
    "build_prompt",
    "join_cells",
    "linearize",
    "parse_chat",
    "parse_completion",
    "parse_output",
    "split_steps",
    "stop_sequences",
]
