"""JUPITER-style multi-turn prompts: Thought / Action / Observation / Final Answer.

Shared by the ``react`` strategy (one trajectory), ``mcts`` (a tree of them)
and the value model, which reads the same message history. The task message
carries what JUPITER's input prompt carries — the question, its constraints,
the required output format and the available local files — plus, in the
product, the live notebook (ARCADE's linearization, cut by whole cells to a
token budget) and the schema of its DataFrames (what the model most needs).

Parsing is lenient about layout (markdown bold, missing labels, unfenced
code after ``Action:``) and strict about one rule: an answer written *after*
an action in the same reply was not grounded in that action's output, so the
action is run and the answer dropped; the model restates it next turn.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..context.model import NotebookContext
from ..kernel.results import ExecResult, strip_ansi
from ..llm.base import Prompt
from .arcade import NotebookBlocks, OutputsMode, code_fence, comment_lines, fit_to_budget, join_cells
from .parse import FENCE_RE, PY_LANGS, Step, cut_end_tokens, looks_like_code

STOP = ("\nObservation:",)

SYSTEM = (
    "You are a data analyst working in a Jupyter notebook. Solve the task step by step. "
    "In each reply write exactly one step:\n"
    "Thought: <what you do next and why, in one or two sentences>\n"
    "Action:\n```python\n<the code of one notebook cell>\n```\n"
    "Then stop: the cell is run and you get its output as `Observation:`. Variables persist "
    "between cells, like in a notebook. Print or end the cell with the values you need to see.\n"
    "When the observations give you the answer, reply instead with:\n"
    "Thought: <why this is the answer>\n"
    "Final Answer: <the answer, exactly in the required output format>"
)


@dataclass(frozen=True)
class Task:
    """What the first (user) message of every trajectory says."""

    question: str
    constraints: str = ""
    format: str = ""
    files: tuple[str, ...] = ()
    notebook: str = ""
    schema: str = ""

    def message(self) -> str:
        parts = []
        if self.notebook:
            parts.append("The notebook so far (its cells have already run):\n"
                         + code_fence(self.notebook))
        if self.schema:
            parts.append("DataFrames in the kernel:\n" + code_fence(self.schema, ""))
        parts.append(f"Task: {self.question}")
        if self.constraints:
            parts.append(f"Constraints: {self.constraints}")
        if self.format:
            parts.append(f"Output format: {self.format}")
        if self.files:
            parts.append("Available local files: " + ", ".join(self.files))
        return "\n\n".join(parts)


def build_task(intent: str, context: NotebookContext, *, count_tokens: Callable[[str], int],
               budget: int | None, schema: str = "", constraints: str = "", format: str = "",
               files: Sequence[str] = (), outputs: OutputsMode = "active",
               output_chars: int = 200) -> Task:
    """The task, its notebook cut from the left by whole cells so that the system
    and task messages fit ``budget`` tokens (exactly counted, as for ARCADE
    prompts); the question, schema, format and the active cell always stay."""
    task = Task(intent.strip(), constraints.strip(), format.strip(), tuple(str(f) for f in files),
                schema=schema.strip())
    notebook = NotebookBlocks.of(context, outputs, output_chars)

    def with_cells(drop: int) -> Task:
        blocks = notebook.blocks(drop)
        return replace(task, notebook=join_cells(blocks) if blocks else "")

    fit = fit_to_budget(0, notebook.droppable, lambda _, drop: count_tokens(SYSTEM)
               + count_tokens(with_cells(drop).message()), budget)
    return with_cells(fit.dropped_cells)


# ------------------------------------------------------------------ parsing

_LABEL = r"^[ \t>*_#]*{}[ \t*_]*:[ \t*_]*"
_FINAL_RE = re.compile(_LABEL.format(r"(?:final[ \t]+answer|formatted[ \t]+answer)"), re.I | re.M)
_OBS_RE = re.compile(_LABEL.format("observation"), re.I | re.M)
_ACTION_RE = re.compile(_LABEL.format(r"action(?:[ \t]+input)?"), re.I | re.M)
_THOUGHT_RE = re.compile(_LABEL.format("thought"), re.I | re.M)


@dataclass
class ParsedStep:
    """One model reply: an action to run, a final answer, or neither (invalid)."""

    thought: str
    code: str | None = None
    answer: str | None = None
    raw: str = ""

    @property
    def kind(self) -> str:
        if self.answer is not None and self.code is None:
            return "answer"
        return "action" if self.code is not None else "invalid"

    def message(self) -> str:
        """The canonical assistant message (what later prompts and the value model see)."""
        head = f"Thought: {self.thought}" if self.thought else "Thought:"
        if self.kind == "answer":
            return f"{head}\nFinal Answer: {self.answer}"
        if self.kind == "action":
            return f"{head}\nAction:\n{code_fence(self.code or '')}"
        return self.raw.strip() or head


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def parse_step(text: str) -> ParsedStep:
    raw, text = text, cut_end_tokens(text)
    m = _OBS_RE.search(text)
    if m:  # the model went on to invent the observation
        text = text[: m.start()]
    code, code_pos = None, None
    for f in FENCE_RE.finditer(text):
        if f.group("lang").lower() in PY_LANGS and f.group("body").strip():
            code, code_pos = f.group("body").strip("\n").rstrip(), f.start()
            break
    action = _ACTION_RE.search(text)
    if code is None and action is not None:
        rest = text[action.end():]
        stop = min([x.start() for x in (_FINAL_RE.search(rest), _THOUGHT_RE.search(rest)) if x]
                   or [len(rest)])
        code = looks_like_code(rest[:stop])
        code_pos = action.start() if code else None
    answer, final_pos = None, None
    final = _FINAL_RE.search(text)
    if final is not None:
        rest = text[final.end():]
        nxt = [x.start() for x in (_THOUGHT_RE.search(rest), _ACTION_RE.search(rest)) if x]
        ans = (rest[: min(nxt)] if nxt else rest).strip().strip("*_").strip()
        if ans:
            answer, final_pos = ans, final.start()
    ends = [p for p in (action.start() if action else None, code_pos, final_pos) if p is not None]
    head = text[: min(ends)] if ends else text
    t = _THOUGHT_RE.search(head)
    thought = _one_line(head[t.end():] if t else head)
    if answer is not None and code is not None and final_pos < code_pos:
        code = None  # answered first: the code after it is an afterthought
    if code is not None:
        answer = None  # not grounded in this action's output
    return ParsedStep(thought=thought, code=code, answer=answer, raw=raw)


def parse_reply(text: str, chat: bool) -> ParsedStep:
    """A reply in the prompt's mode (completion replies continue after ``Thought:``)."""
    if not chat and not _THOUGHT_RE.match(text.lstrip()):
        text = "Thought: " + text.lstrip(" ")
    return parse_step(text)


# ------------------------------------------------------------------ history

INVALID_OBSERVATION = ("Your reply had neither an Action with a ```python code block nor a "
                       "Final Answer. Reply with `Thought:` and then either `Action:` and one "
                       "```python block, or `Final Answer:`.")
OMITTED_OBSERVATION = "Observation:\n[output omitted to fit the prompt]"


def format_observation(result: ExecResult | None, max_chars: int = 2000) -> str:
    """A cell's outputs as the model sees them: text outputs, then the error, cut to size."""
    if result is None:
        return "(not run)"
    text = strip_ansi(result.text()) if result.outputs else ""
    if not result.ok:
        # The error output item duplicates ename/evalue: keep the other outputs, then the error.
        text = result.text(errors=False)
        text = (text.rstrip() + "\n" if text.strip() else "") + "Error: " + result.error_line()
    text = text.strip("\n")
    if not text.strip():
        return "(no output)"
    if len(text) > max_chars:
        head = max_chars * 2 // 3
        text = (text[:head] + f"\n... [{len(text) - max_chars} characters cut] ...\n"
                + text[len(text) - (max_chars - head):])
    return text


def history_messages(task: Task, steps: Sequence[tuple[str, str | None]]) -> list[dict]:
    """System + task + per step the assistant message and (unless final) its observation."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.message()}]
    for assistant, observation in steps:
        msgs.append({"role": "assistant", "content": assistant})
        if observation is not None:
            msgs.append({"role": "user", "content": f"Observation:\n{observation}"})
    return msgs


def fit_messages(messages: Sequence[dict], count_tokens: Callable[[str], int],
                 budget: int | None) -> list[dict]:
    """The history within ``budget`` prompt tokens; the system and task messages always stay.

    Old outputs go first (oldest first; the latest observation stays whole):
    the code that made them still tells the model what the state holds. Only
    then do the oldest steps go.
    """
    ms = list(messages)
    if not budget or sum(len(m["content"]) for m in ms) // 2 <= budget:
        return ms  # far below (a token spans ~3-4 characters): skip exact counting

    def total() -> int:
        return sum(count_tokens(m["content"]) for m in ms)

    if total() <= budget:
        return ms
    head = 2
    for i in range(head, len(ms) - 1):
        if ms[i]["role"] == "user" and ms[i]["content"] != OMITTED_OBSERVATION:
            ms[i] = {"role": "user", "content": OMITTED_OBSERVATION}
            if total() <= budget:
                return ms
    while len(ms) > head + 2 and total() > budget:
        del ms[head]
        if len(ms) > head + 1 and ms[head]["role"] == "user":
            del ms[head]
    return ms


def to_prompt(messages: Sequence[dict], chat: bool, cue: str = "Thought:") -> Prompt:
    """Chat messages, or for completion models the same transcript ending in ``cue``."""
    if chat:
        return Prompt.chat(messages)
    return Prompt(text="\n\n".join(m["content"] for m in messages) + f"\n\n{cue}")


def solution_cell(steps: Sequence[tuple[str, str]], answer: str | None = None) -> tuple[str, list[Step]]:
    """The (thought, code) steps as one cell, each preceded by ``# Step N: <thought>``
    (an answer reached without running anything as a comment: say so, not ""), and as Steps."""
    code = "\n\n".join(f"# Step {i}: {_one_line(thought) or 'next step'}\n{code.strip()}"
                       for i, (thought, code) in enumerate(steps, 1))
    if not code and answer:
        code = comment_lines(answer, "# Final answer: ")
    return code, [Step(i, thought, code) for i, (thought, code) in enumerate(steps, 1)]


__all__ = [
    "INVALID_OBSERVATION",
    "OMITTED_OBSERVATION",
    "STOP",
    "SYSTEM",
    "ParsedStep",
    "Task",
    "build_task",
    "fit_messages",
    "format_observation",
    "history_messages",
    "parse_reply",
    "parse_step",
    "solution_cell",
    "to_prompt",
]
