"""Prompts of the analysis strategy: a numbered plan, then one explained cell per step.

The plan is a short numbered list, one line per step; a step that changes
an existing cell instead of adding one starts with ``[edit cell <id>]``
(only ids of the notebook's cells count). Each step is then written on its
own, seeing the plan, the earlier steps' code and what they printed in their
copies (like ReAct's observations): a short Markdown explanation and one
```python block. When an output shows that the rest of the plan cannot work
as written, the model may reply ``Revised plan:`` with new remaining steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..context.model import NotebookContext
from .arcade import code_fence
from .parse import UnparsableOutput, cut_end_tokens, parse_chat
from .react import Task

PLAN_SYSTEM = (
    "You are a data analyst working in a Jupyter notebook. Plan an analysis that answers the "
    "user's request as a short sequence of notebook cells. Reply with a numbered list and nothing "
    "else, one line per step, at most {max_steps} steps:\n"
    "1. <what the first cell does>\n2. <what the next cell does>\n"
    "Each step is one cell whose output the next steps can use. A step that should change an "
    "existing cell instead of adding one starts with `[edit cell <id>]`, using an id listed below."
)

STEP_SYSTEM = (
    "You are a data analyst working in a Jupyter notebook, carrying out a plan one cell at a time. "
    "Write only the step you are asked for. Reply with one to three sentences of Markdown that "
    "explain the step for the reader, then exactly one ```python block with the cell's code. "
    "Variables of earlier steps persist, like in a notebook; end the cell with the value to show. "
    "If an earlier step's output shows that the rest of the plan cannot work as written, reply "
    "instead with `Revised plan:` and a numbered list of the remaining steps."
)

FIX_REQUEST = ("Running that cell raised:\n{error}\n\nFix step {number}. Reply with the explanation "
               "and exactly one ```python block.")

#: How many existing cells the plan may offer for editing (the latest ones).
EDITABLE_CELLS = 20


@dataclass(frozen=True)
class PlannedStep:
    """One line of the plan: what the step does, and the cell it edits (None: a new cell)."""

    title: str
    cell_id: str | None = None


@dataclass(frozen=True)
class StepReply:
    """A step as the model wrote it, or a revised plan for the steps left."""

    explanation: str = ""
    code: str = ""
    revised: tuple[PlannedStep, ...] = ()


_ITEM_RE = re.compile(r"^\s*(?:step\s*)?(\d{1,2})\s*[.):\-]\s*(.+?)\s*$", re.I | re.M)
_EDIT_RE = re.compile(r"^\[\s*edit\s+cell\s+([^\]\s]+)\s*\]\s*", re.I)
_REVISED_RE = re.compile(r"^[ \t>*_#]*revised[ \t]+plan[ \t*_]*:", re.I | re.M)
_EXPLANATION_RE = re.compile(r"^[ \t*_#]*(?:explanation|step\s*\d+)[ \t*_]*:[ \t*_]*", re.I)


def editable_cells(context: NotebookContext) -> list[tuple[str, str]]:
    """(id, first line) of the latest code cells that have an id: what a plan may edit."""
    cells = [(c.cell_id, c.source.strip().splitlines()[0][:80]) for c in context.cells
             if c.cell_type == "code" and c.cell_id and c.source.strip()]
    return cells[-EDITABLE_CELLS:]


def plan_messages(task: Task, context: NotebookContext, max_steps: int) -> list[dict]:
    """System + the task (notebook, schema, question) + the cells a step may edit."""
    user = task.message()
    cells = editable_cells(context)
    if cells:
        user += "\n\nCells you may edit (id: first line):\n" + "\n".join(f"{i}: {line}" for i, line in cells)
    return [{"role": "system", "content": PLAN_SYSTEM.format(max_steps=max_steps)},
            {"role": "user", "content": user}]


def parse_plan(text: str, *, known_cells: Sequence[str] = (), max_steps: int = 10) -> list[PlannedStep]:
    """The numbered steps of a reply, in order; an edit of an unknown cell becomes a new cell.

    A reply without a numbered list is one step (the reply's first line), so
    a weak model still gets a one-cell analysis instead of nothing.
    """
    text = cut_end_tokens(text)
    steps: list[PlannedStep] = []
    for m in _ITEM_RE.finditer(text):
        title = m.group(2).strip().strip("*_").strip()
        cell_id = None
        edit = _EDIT_RE.match(title)
        if edit:
            title = title[edit.end():].strip() or "Edit the cell"
            cell_id = edit.group(1) if edit.group(1) in known_cells else None
        if title:
            steps.append(PlannedStep(title, cell_id))
    if not steps:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if first:
            steps.append(PlannedStep(first[:200]))
    return steps[:max_steps]


def plan_text(plan: Sequence[PlannedStep]) -> str:
    return "\n".join(f"{i}. " + (f"[edit cell {s.cell_id}] " if s.cell_id else "") + s.title
                     for i, s in enumerate(plan, 1))


def step_messages(task: Task, plan: Sequence[PlannedStep], done: Sequence[tuple[str, str]],
                  number: int, current_source: str | None = None) -> list[dict]:
    """The conversation that asks for step ``number``: the task and plan, then per earlier step
    the assistant's cell and its output in the copy (``done``: (message, observation))."""
    msgs = [{"role": "system", "content": STEP_SYSTEM},
            {"role": "user", "content": task.message() + "\n\nThe plan:\n" + plan_text(plan)}]
    for message, observation in done:
        msgs.append({"role": "assistant", "content": message})
        msgs.append({"role": "user", "content": f"Output:\n{observation}"})
    step = plan[number - 1]
    ask = f"Write step {number}: {step.title}"
    if step.cell_id and current_source is not None:
        ask += (f"\nThis step replaces the source of cell {step.cell_id}, which is now:\n"
                + code_fence(current_source))
    msgs.append({"role": "user", "content": ask})
    return msgs


def step_message(explanation: str, code: str) -> str:
    """A written step as later prompts show it."""
    return (explanation.strip() + "\n" if explanation.strip() else "") + code_fence(code)


def parse_step_reply(text: str, *, known_cells: Sequence[str] = (), max_steps: int = 10) -> StepReply:
    """The step's explanation and code; or a revised plan. UnparsableOutput when neither."""
    text = cut_end_tokens(text)
    revised = _REVISED_RE.search(text)
    if revised is not None:
        plan = parse_plan(text[revised.end():], known_cells=known_cells, max_steps=max_steps)
        if plan:
            return StepReply(revised=tuple(plan))
    code = parse_chat(text).code  # raises UnparsableOutput when there is no code
    fence = text.find("```")
    head = text[:fence] if fence >= 0 else ""
    explanation = _EXPLANATION_RE.sub("", head.strip()).strip()
    return StepReply(explanation=explanation, code=code)


__all__ = [
    "FIX_REQUEST",
    "PLAN_SYSTEM",
    "STEP_SYSTEM",
    "PlannedStep",
    "StepReply",
    "UnparsableOutput",
    "editable_cells",
    "parse_plan",
    "parse_step_reply",
    "plan_messages",
    "plan_text",
    "step_message",
    "step_messages",
]
