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
from ..llm.base import SamplingParams
from ..prompts import UnparsableOutput, build_chat_prompt, build_prompt, stop_sequences
from ..prompts.arcade import (
    EXPLAIN_INSTRUCTION,
    EXPLAIN_PREAMBLE,
    EXPLAIN_SYSTEM_PROMPT,
    BuiltPrompt,
    uncomment_lines,
)
from .base import RunContext, SearchResult, SearchStats, TurnRequest
from .generate import prompt_text, use_chat

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


class ExplainStrategy:
    name = "explain"

    def build(self, request: TurnRequest, ctx: RunContext) -> BuiltPrompt:
        """The ARCADE builders with Explain's system prompt and instruction
        (chat) or a comment-block preamble (completion); no exemplars, which
        teach code."""
        policy, intent = request.prompt, question(request.intent, request.context)
        if use_chat(ctx.backend, policy):
            return build_chat_prompt(
                request.context, intent, schema=request.schema, count_tokens=ctx.backend.count_tokens,
                budget=policy.max_prompt_tokens, outputs=policy.outputs, output_chars=policy.output_chars,
                system=EXPLAIN_SYSTEM_PROMPT, instruction=EXPLAIN_INSTRUCTION,
            )
        return build_prompt(
            request.context, intent, schema=request.schema, count_tokens=ctx.backend.count_tokens,
            budget=policy.max_prompt_tokens, outputs=policy.outputs, output_chars=policy.output_chars,
            preamble=EXPLAIN_PREAMBLE, prefix="#",
        )

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        started = time.monotonic()
        stats = SearchStats()
        built = self.build(request, ctx)
        chat = built.prompt.is_chat
        ctx.check_cancelled()
        ctx.progress("asking the model for an explanation", samples=1)
        params = SamplingParams(
            n=1,
            temperature=request.sampling.temperature_for(1),
            max_tokens=request.sampling.max_new_tokens,
            stop=() if chat else stop_sequences(),
            seed=request.sampling.seed,
        )
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
        stats.wall_time_s = time.monotonic() - started
        return SearchResult(
            chosen=None,
            candidates=[],
            stats=stats,
            protections=ctx.protections,
            strategy=self.name,
            prompt=prompt_text(built.prompt),
            answer=answer,
        )
