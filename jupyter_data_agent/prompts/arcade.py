"""ARCADE-style prompt builder (completion and chat variants).

Completion layout (every cell starts with a ``# In[ ]:`` header line, cells
are joined by ``"\\n\\n\\n# In[ ]:\\n\\n\\n"`` exactly as ARCADE does)::

    # In[ ]:


    <exemplar 1 schema block>          \\
    # In[ ]:                            |  exemplars=True only: per exemplar a
    # Problem: <exemplar intent>        |  schema cell, a problem cell and a
    # In[ ]:                            |  solution cell (preamble + steps)
    # Solution: Let's solve ...         /
    # Step 1: ...
    # In[ ]:
    <notebook cells, oldest first: code as is, markdown as "# " comments;
     a prior turn is a "# Problem: <intent>" cell right before its first
     solution cell>
    # In[ ]:
    <schema block>                     the live kernel's DataFrames
    # In[ ]:
    # Problem: <intent>
    # In[ ]:
    # Solution: Let's solve this problem step-by-step.
    # Step 1:                          <- the model continues from here

(blank lines between cells omitted above; see ``CELL_SEP``.)

Choices:

- The schema block has its own cell right before the new problem, not after
  the cell that loaded each frame: it is inspected from the kernel *now*,
  so it describes the current state, and next to the intent it is never hit
  by left-truncation (ARCADE: dropping it costs ~11 pass@30 points).
- Left-truncation drops whole units from the left: exemplars first (they
  are generic, the user's cells are specific to the task), then the oldest
  notebook cells. Schema, problem and preamble are never dropped; when they
  alone exceed the budget they are kept and ``over_budget`` is set.
- Outputs (``outputs=``): ``"active"`` (default) shows only the active
  cell's outputs and error — ARCADE prompts carry the notebook's code and
  text, the schema block already says what the data looks like and outputs
  are the costliest tokens, but "fix this cell" and "explain this cell" are
  about what that one cell printed and raised. ``"all"`` shows every cell's,
  ``"none"`` none. Outputs follow the code of their cell as ``# Output:``
  comment lines; an error as ``# Error: <ename>: <evalue>`` and the
  traceback's last lines. The active cell is pinned: left-truncation drops
  every other cell first, as it never drops the schema or the intent.
- Cells of turns the user rejected are left out: they are known-wrong code.
  Empty cells and raw cells are left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..context.model import Cell, NotebookContext, Turn
from ..kernel.plots import PLOT_PREFIX
from ..kernel.results import truncate_text
from ..llm.base import ChatMessage, ImagePart, Prompt, estimate_tokens
from ..llm.images import IMAGE_TOKENS
from .exemplars import EXEMPLARS, Exemplar

CELL_HEADER = "# In[ ]:"
CELL_SEP = f"\n\n\n{CELL_HEADER}\n\n\n"
SOLUTION_PREAMBLE = "# Solution: Let's solve this problem step-by-step."
STEP_PREFIX = "# Step 1:"

CountTokens = Callable[[str], int]
#: Which cells' outputs the prompt shows (search.options.PromptPolicy.outputs).
OutputsMode = Literal["none", "active", "all"]

SYSTEM_PROMPT = (
    "You are a data science pair programmer working inside the user's Jupyter notebook. "
    "You write the code of the next notebook cell. The notebook's cells have already run: "
    "use the variables and DataFrames that exist in the kernel instead of loading or "
    "recreating data.\n"
    "Rules:\n"
    "- Reply with exactly ONE ```python fenced code block and no prose outside it.\n"
    "- Solve the problem step by step: before each step write a comment "
    "`# Step N: <short explanation>`, numbering the steps from 1.\n"
    "- Keep simple questions simple: a one-line question deserves a one-line step.\n"
    "- End the cell with an expression that shows the answer (a value, Series or "
    "DataFrame) rather than printing it.\n"
    "- Do not modify the user's existing DataFrames in place unless the problem asks for it."
)

CHAT_INSTRUCTION = (
    "Write the next cell: exactly one ```python code block, with a "
    "`# Step N: <explanation>` comment before each step, and nothing outside the block."
)

# Said with the images a vision model is shown (the active cell's plot outputs).
IMAGES_NOTE = "The plot output(s) of the active cell are attached as images."

# Explain answers in words: the code-writing rules above would make it
# return a cell, so it has a system prompt and an instruction of its own.
EXPLAIN_SYSTEM_PROMPT = (
    "You are a data science pair programmer working inside the user's Jupyter notebook. "
    "The user asks you about a cell of the notebook. Answer in Markdown prose for a data "
    "scientist: what the cell does, what its output shows, and, if it raised an error, what "
    "the error means, its most likely cause in this notebook and how to fix it.\n"
    "Rules:\n"
    "- Write prose, not a new cell: no full code listing; quote at most a short expression "
    "in backticks.\n"
    "- Be concise: a few short paragraphs or bullet points.\n"
    "- Rely on the notebook, its outputs and the DataFrames shown; say when something you "
    "would need is not visible."
)
EXPLAIN_INSTRUCTION = "Answer in Markdown prose, not code."
# Completion models continue a comment block, as ARCADE writes markdown cells.
EXPLAIN_PREAMBLE = "# Explanation (in words, not code):"


@dataclass
class BuiltPrompt:
    """A prompt plus what truncation did to it (shown to the user, logged).

    ``prefix`` is the text the completion prompt ends with and the model
    continues (pass it to ``parse_completion``); "" for chat prompts.
    """

    prompt: Prompt
    dropped_cells: int
    tokens: int
    truncated: bool
    dropped_exemplars: int = 0
    over_budget: bool = False
    prefix: str = ""
    # Outputs, errors and tracebacks of the cells shown that were cut to ``output_chars``.
    outputs_cut: int = 0


# --------------------------------------------------------------------------
# linearization


def join_cells(blocks: Sequence[str]) -> str:
    """Cells as ARCADE writes them: each preceded by a ``# In[ ]:`` header."""
    return f"{CELL_HEADER}\n\n\n" + CELL_SEP.join(blocks)


def comment_lines(text: str, first_prefix: str = "# ") -> str:
    """Text as ``#`` comment lines (blank lines become a bare ``#``)."""
    out = []
    for i, line in enumerate(text.strip("\n").splitlines() or [""]):
        prefix = first_prefix if i == 0 else "# "
        out.append((prefix + line).rstrip() if line.strip() else prefix.rstrip())
    return "\n".join(out)


def uncomment_lines(text: str) -> str:
    """The inverse of :func:`comment_lines` for a completion that continued a
    comment block: the leading comment lines as text, up to the first line
    of code or cell header (a model that drifts into a cell has stopped
    explaining)."""
    out = []
    for line in text.strip("\n").splitlines():
        stripped = line.strip()
        if (stripped and not stripped.startswith("#")) or stripped.startswith("# In["):
            break
        out.append(stripped[2:] if stripped.startswith("# ") else stripped[1:])
    return "\n".join(out).strip()


def problem_block(intent: str) -> str:
    return comment_lines(intent.strip(), "# Problem: ")


def _plain_outputs(texts: Sequence[str], output_chars: int) -> tuple[str, bool]:
    """A cell's non-error outputs as one text and whether it was cut: the text cut to
    ``output_chars``, then the plot summaries (``kernel/plots.py``, bounded when the notebook was
    read) whole, since for a text-only model the summary is the plot."""
    plots = [t for t in texts if t.startswith(PLOT_PREFIX)]
    other = "\n".join(t for t in texts if not t.startswith(PLOT_PREFIX))
    text, cut = truncate_text(other, output_chars) if other else ("", False)
    return "\n".join(([text] if text else []) + plots), cut


def _outputs_block(cell: Cell, output_chars: int) -> str:
    """``# Output:`` lines, then per error ``# Error: ename: evalue`` and the
    traceback's last lines (each part cut to ``output_chars``; a traceback
    keeps its end, where it failed)."""
    shown = [o.text.rstrip("\n") for o in cell.outputs if o.output_type != "error" and o.text.strip()]
    plain = "\n".join(shown)
    parts = []
    if plain:
        plain = _plain_outputs(shown, output_chars)[0]
        if "\n" in plain:
            parts.append("# Output:\n" + comment_lines(plain))
        else:
            parts.append("# Output: " + plain.strip())
    for err in cell.outputs:
        if err.output_type != "error" or not (err.text.strip() or err.traceback.strip()):
            continue
        parts.append(comment_lines(truncate_text(err.text.strip(), output_chars)[0], "# Error: "))
        if err.traceback.strip():
            tb = truncate_text(err.traceback.strip("\n"), output_chars, tail=True)[0]
            parts.append("# Traceback (last lines):\n" + comment_lines(tb))
    return "\n".join(parts)


def cut_outputs(cell: Cell, output_chars: int = 200) -> int:
    """How many parts of :func:`_outputs_block` (plain output, each error and
    traceback) ``truncate_text`` cuts: the context gauge shows it."""
    shown = [o for o in cell.outputs if o.output_type != "error" and o.text.strip()]
    plain = "\n".join(o.text.rstrip("\n") for o in shown)
    # Cut here, or already when the notebook was read (``Output.truncated``).
    cut = int(bool(plain) and (_plain_outputs([o.text.rstrip("\n") for o in shown], output_chars)[1]
                               or any(o.truncated for o in shown)))
    for err in cell.outputs:
        if err.output_type == "error":
            cut += sum(truncate_text(p, output_chars)[1] for p in (err.text.strip(), err.traceback.strip("\n")))
    return cut


def render_cell(cell: Cell, with_outputs: bool = False, output_chars: int = 200) -> str:
    """One cell's text in the prompt, or "" when the cell is left out."""
    if cell.cell_type == "markdown":
        return comment_lines(cell.source) if cell.source.strip() else ""
    if cell.cell_type != "code":
        return ""
    code = cell.source.strip("\n").rstrip()
    if not code.strip():
        return ""
    if with_outputs and cell.outputs:
        outs = _outputs_block(cell, output_chars)
        if outs:
            code = f"{code}\n{outs}"
    return code


@dataclass(frozen=True)
class _Unit:
    cell: Cell
    text: str
    # The active cell shown with its outputs: never dropped by truncation.
    pinned: bool = False
    # Outputs of this cell cut to ``output_chars`` (0 when its outputs are not shown).
    cut: int = 0


@dataclass(frozen=True)
class NotebookBlocks:
    """The notebook part of a prompt as truncation units, oldest first.

    ``blocks(drop)`` leaves out the ``drop`` oldest droppable cells (the
    active cell is pinned, like the schema and the intent) and puts each
    surviving turn's ``# Problem:`` cell before the first of its cells, so
    it is never left dangling. Builders that truncate on their own (the
    ReAct task) search ``drop`` in ``range(droppable + 1)``.
    """

    units: tuple[_Unit, ...]
    turns: Mapping[str, Turn]

    @classmethod
    def of(cls, context: NotebookContext, outputs: OutputsMode = "active",
           output_chars: int = 200) -> NotebookBlocks:
        if outputs not in ("none", "active", "all"):
            raise ValueError(f"outputs must be 'none', 'active' or 'all', not {outputs!r}")
        turns = {t.turn_id: t for t in context.turns if t.turn_id}
        active = context.active_cell() if outputs != "none" else None
        units = []
        end = None if context.active_index is None else context.active_index + 1
        for i, cell in enumerate(context.cells[:end]):
            is_active = active is not None and i == active.index
            turn = turns.get(cell.turn_id or "")
            # The user's own pick overrides the rejection of the turn it came from.
            if turn is not None and turn.status == "rejected" and not is_active:
                continue
            shown = outputs == "all" or is_active
            text = render_cell(cell, shown, output_chars)
            if text:
                cut = cut_outputs(cell, output_chars) if shown and cell.cell_type == "code" else 0
                units.append(_Unit(cell, text, pinned=is_active, cut=cut))
        return cls(tuple(units), turns)

    @property
    def droppable(self) -> int:
        return sum(not u.pinned for u in self.units)

    def outputs_cut(self, drop: int = 0) -> int:
        """Cut outputs among the cells ``blocks(drop)`` keeps."""
        total = 0
        for u in self.units:
            if drop and not u.pinned:
                drop -= 1
                continue
            total += u.cut
        return total

    def blocks(self, drop: int = 0) -> list[str]:
        blocks: list[str] = []
        seen: set[str] = set()
        for u in self.units:
            if drop and not u.pinned:
                drop -= 1
                continue
            tid = u.cell.turn_id
            if tid and tid in self.turns and tid not in seen and self.turns[tid].intent.strip():
                seen.add(tid)
                blocks.append(problem_block(self.turns[tid].intent))
            blocks.append(u.text)
        return blocks


def linearize(
    context: NotebookContext, *, outputs: OutputsMode = "active", output_chars: int = 200
) -> list[str]:
    """The notebook part of the prompt as cell blocks (no schema, no intent);
    for callers that extend a prompt, e.g. a search appending executed steps."""
    return NotebookBlocks.of(context, outputs, output_chars).blocks()


def _resolve_exemplars(exemplars: bool | Sequence[Exemplar]) -> list[Exemplar]:
    return list(EXEMPLARS) if exemplars is True else list(exemplars or ())


# --------------------------------------------------------------------------
# truncation


@dataclass(frozen=True)
class _Fit:
    dropped_exemplars: int
    dropped_cells: int
    tokens: int
    over_budget: bool

    def built(self, prompt: Prompt, prefix: str = "") -> BuiltPrompt:
        return BuiltPrompt(prompt, self.dropped_cells, self.tokens,
                           truncated=bool(self.dropped_cells or self.dropped_exemplars),
                           dropped_exemplars=self.dropped_exemplars, over_budget=self.over_budget,
                           prefix=prefix)


def fit_to_budget(
    n_exemplars: int,
    n_cells: int,
    measure: Callable[[int, int], int],
    budget: int | None,
) -> _Fit:
    """Fewest left-most units to drop so ``measure`` fits ``budget``.

    States are ordered by how much is dropped (exemplars first, then cells)
    and token counts fall along that order, so a binary search needs only
    O(log n) full measurements; each candidate is measured exactly with the
    backend's tokenizer (token counts of pieces do not add up exactly).
    """

    def split(s: int) -> tuple[int, int]:
        return min(s, n_exemplars), max(0, s - n_exemplars)

    cache: dict[int, int] = {}

    def tokens(s: int) -> int:
        if s not in cache:
            cache[s] = measure(*split(s))
        return cache[s]

    last = n_exemplars + n_cells
    if budget is None or tokens(0) <= budget:
        return _Fit(0, 0, tokens(0), False)
    if tokens(last) > budget:
        return _Fit(*split(last), tokens(last), True)
    lo, hi = 1, last  # tokens(hi) <= budget
    while lo < hi:
        mid = (lo + hi) // 2
        if tokens(mid) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return _Fit(*split(hi), tokens(hi), False)


# --------------------------------------------------------------------------
# builders


def _check_intent(intent: str) -> str:
    intent = intent.strip()
    if not intent:
        raise ValueError("the intent is empty: say what the code should do")
    return intent


def build_prompt(
    context: NotebookContext,
    intent: str,
    *,
    schema: str = "",
    count_tokens: CountTokens | None = None,
    budget: int | None = None,
    exemplars: bool | Sequence[Exemplar] = False,
    outputs: OutputsMode = "active",
    output_chars: int = 200,
    preamble: str = SOLUTION_PREAMBLE,
    prefix: str = STEP_PREFIX,
) -> BuiltPrompt:
    """Completion prompt ending in ``# Step 1:``; see the module doc for layout.

    ``schema`` is the formatted ``# Schema of Dataframes:`` block ("" for
    none). ``budget`` is the number of prompt tokens allowed (context window
    minus generation length) as measured by ``count_tokens``. ``outputs``
    says whose outputs are shown, each cut to ``output_chars``. The last
    cell is ``preamble`` then ``prefix``, which the model continues
    (Explain passes ``EXPLAIN_PREAMBLE`` and ``"#"``).
    """
    intent = _check_intent(intent)
    count = count_tokens or estimate_tokens
    exs = _resolve_exemplars(exemplars)
    notebook = NotebookBlocks.of(context, outputs, output_chars)
    tail = ([schema.strip()] if schema.strip() else []) + [
        problem_block(intent),
        f"{preamble}\n{prefix}",
    ]

    def render(drop_ex: int, drop_cells: int) -> str:
        blocks: list[str] = []
        for ex in exs[drop_ex:]:
            blocks += [ex.schema.strip(), problem_block(ex.intent),
                       f"{SOLUTION_PREAMBLE}\n{ex.solution.strip()}"]
        blocks.extend(notebook.blocks(drop_cells))
        return join_cells(blocks + tail)

    fit = fit_to_budget(len(exs), notebook.droppable, lambda e, c: count(render(e, c)), budget)
    built = fit.built(Prompt(text=render(fit.dropped_exemplars, fit.dropped_cells)), prefix)
    built.outputs_cut = notebook.outputs_cut(fit.dropped_cells)
    return built


def stable_prefix(prompt: Prompt, intent: str) -> Prompt:
    """``prompt`` (built for ``intent``) cut where the intent starts: what the next turn's prompt
    will begin with whatever the user asks (system, exemplars, cells, schema), to warm a model's
    cache with. The prompts are laid out for this: the parts that change come last."""
    if prompt.text is not None:
        at = prompt.text.rfind(problem_block(intent))
        return Prompt(text=prompt.text[:at] if at >= 0 else prompt.text)
    messages = list(prompt.messages or ())
    if messages:
        last = messages[-1]
        at = last.content.rfind(f"Problem: {intent}")
        messages[-1] = ChatMessage(last.role, last.content[:at] if at >= 0 else last.content)
    return Prompt.chat(messages)


def code_fence(text: str, lang: str = "python") -> str:
    """A fence longer than any backtick run starting a line inside ``text``."""
    longest = max(map(len, re.findall(r"^\s*(`*)", text, re.M)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _chat_request(notebook: str | None, schema: str, intent: str, instruction: str = CHAT_INSTRUCTION) -> str:
    parts = []
    if notebook:
        parts.append(
            "My notebook so far (cells are separated by `# In[ ]:`, markdown cells are "
            "shown as `#` comments):\n\n" + code_fence(notebook)
        )
    if schema.strip():
        parts.append("DataFrames in the kernel right now:\n\n" + code_fence(schema.strip()))
    parts.append(f"Problem: {intent}")
    parts.append(instruction)
    return "\n\n".join(parts)


def build_chat_prompt(
    context: NotebookContext,
    intent: str,
    *,
    schema: str = "",
    count_tokens: CountTokens | None = None,
    budget: int | None = None,
    exemplars: bool | Sequence[Exemplar] = False,
    outputs: OutputsMode = "active",
    output_chars: int = 200,
    system: str = SYSTEM_PROMPT,
    instruction: str = CHAT_INSTRUCTION,
    images: Sequence[ImagePart] = (),
) -> BuiltPrompt:
    """The same linearized notebook for chat models.

    Messages: system (role and rules); per exemplar a user request and an
    assistant reply with one fenced cell; then the user request with the
    notebook (fenced), the schema block (fenced), the problem and the
    ``instruction`` (by default: one cell). Tokens are the sum over message
    contents (chat-template overhead is the backend's margin to keep).
    ``outputs`` and truncation work as in :func:`build_prompt`. ``images`` (the active
    cell's plots, for a vision model) go with the last user message, each counted as
    ``IMAGE_TOKENS``.
    """
    intent = _check_intent(intent)
    count = count_tokens or estimate_tokens
    exs = _resolve_exemplars(exemplars)
    notebook = NotebookBlocks.of(context, outputs, output_chars)
    images = tuple(images)
    if images:
        instruction = f"{IMAGES_NOTE}\n\n{instruction}"

    def messages(drop_ex: int, drop_cells: int) -> list[ChatMessage]:
        msgs = [ChatMessage("system", system)]
        for ex in exs[drop_ex:]:
            msgs.append(ChatMessage("user", _chat_request(None, ex.schema, ex.intent.strip())))
            msgs.append(ChatMessage("assistant", code_fence(ex.solution.strip())))
        blocks = notebook.blocks(drop_cells)
        shown = join_cells(blocks) if blocks else None
        msgs.append(ChatMessage("user", _chat_request(shown, schema, intent, instruction), images))
        return msgs

    fit = fit_to_budget(len(exs), notebook.droppable,
               lambda e, c: sum(count(m.content) for m in messages(e, c)) + IMAGE_TOKENS * len(images),
               budget)
    built = fit.built(Prompt.chat(messages(fit.dropped_exemplars, fit.dropped_cells)))
    built.outputs_cut = notebook.outputs_cut(fit.dropped_cells)
    return built


__all__ = [
    "CELL_HEADER",
    "CELL_SEP",
    "EXPLAIN_INSTRUCTION",
    "EXPLAIN_PREAMBLE",
    "EXPLAIN_SYSTEM_PROMPT",
    "SOLUTION_PREAMBLE",
    "STEP_PREFIX",
    "SYSTEM_PROMPT",
    "BuiltPrompt",
    "NotebookBlocks",
    "OutputsMode",
    "build_chat_prompt",
    "build_prompt",
    "comment_lines",
    "cut_outputs",
    "join_cells",
    "linearize",
    "problem_block",
    "stable_prefix",
    "render_cell",
    "uncomment_lines",
]
