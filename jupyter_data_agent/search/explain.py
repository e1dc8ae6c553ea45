"""``explain``: an answer in words about the active cell (Explain this cell).

The code strategies' system prompt demands exactly one code block, so
asking them to explain returns code. This strategy makes one model call with
a prompt that asks for Markdown prose, over the same linearized notebook
(the active cell with its outputs and error, per ``request.prompt``), and
returns the text as ``SearchResult.answer``: no copy is used, no code runs,
no cell is inserted.
"""

from __future__ import annotations

import time

from ..context.model import NotebookContext
from ..prompts import UnparsableOutput
from ..prompts.arcade import EXPLAIN_INSTRUCTION, EXPLAIN_PREAMBLE, EXPLAIN_SYSTEM_PROMPT, uncomment_lines
from .base import RunContext, SearchResult, SearchStats, TurnRequest
from .generate import finish, plan_prompt, sampling

DEFAULT_QUESTION = "Explain this cell."


def question(intent: str, context: NotebookContext) -> str:
    """The user's words plus which cell they mean: the prompt shows the whole
    notebook, and without a cursor (the magic) "this cell" is the last one
    that raised."""
    text = intent.strip() or DEFAULT_QUESTION
    active = context.active_cell()
    if active is None or not active.source.strip():
        return text
    last = (context.active_index + 1 if context.active_index is not None else len(context.cells)) - 1
    if active.index == last:
        return f"{text}\nThe cell in question is the last cell of the notebook."
    first = active.source.strip().splitlines()[0].strip()
    return f"{text}\nThe cell in question is the one that starts with `{first}`."


#: The ARCADE builders' arguments for Explain: its system prompt and instruction
#: (chat) or a comment-block preamble (completion); no exemplars, which teach code.
CHAT_KW = {"system": EXPLAIN_SYSTEM_PROMPT, "instruction": EXPLAIN_INSTRUCTION, "exemplars": False}
COMPLETION_KW = {"preamble": EXPLAIN_PREAMBLE, "prefix": "#", "exemplars": False}


class ExplainStrategy:
    name = "explain"

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        started = time.monotonic()
        stats = SearchStats()
        plan = plan_prompt(request, ctx, intent=question(request.intent, request.context),
                           chat_kw=CHAT_KW, completion_kw=COMPLETION_KW)
        built, chat = plan.built, plan.chat
        ctx.check_cancelled()
        ctx.progress("asking the model for an explanation", samples=1)
        params = sampling(request, 1, stop=plan.stop, logprobs=False)
        completions = ctx.backend.generate(built.prompt, params)
        stats.count_call(completions)
        text = completions[0].text if completions else ""
        # A completion continued the "#" comment block: back to plain Markdown.
        answer = text.strip() if chat else uncomment_lines(built.prefix + text)
        if not answer:
            raise UnparsableOutput(
                "The model gave no explanation. Try again, or configure a stronger model "
                "(see `%agent config`).", stats
            )
        return finish(self.name, None, [], ctx, plan, stats, started, answer)
