"""Turning a typed request into parsed, executed candidate cells.

Every strategy reads its options, the chat-or-completion choice and the
sampling parameters through the helpers at the top, so each rule exists
once. The rest is shared by ``direct`` and ``vote`` (and the repair step):
the prompt style follows the backend (chat messages for chat models, the raw
ARCADE completion prompt otherwise), every candidate runs in its own fork of
the root copy so siblings never see each other's changes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from pydantic import BaseModel

from ..context.notebook import image_of
from ..context.report import ContextReport
from ..kernel.copy import namespace_diff
from ..kernel.results import ExecResult
from ..llm.base import (
    Backend,
    ChatMessage,
    Completion,
    ImagePart,
    Prompt,
    SamplingParams,
    Streamed,
    streams,
    use_chat,
)
from ..llm.images import prepare_images
from ..prompts import (
    BuiltPrompt,
    ProseAnswer,
    UnparsableOutput,
    build_chat_prompt,
    build_prompt,
    parse_output,
    stop_sequences,
)
from ..prompts.arcade import CELL_SEP, SOLUTION_PREAMBLE, STEP_PREFIX
from ..prompts.parse import Step
from ..prompts.react import OMITTED_OBSERVATION, Task, build_task
from .base import Candidate, RunContext, SearchResult, SearchStats, TurnRequest
from .evidence import path_checks, probe_copy
from .options import PromptPolicy

O = TypeVar("O", bound=BaseModel)


def options(request: TurnRequest, kind: type[O], **overrides) -> O:
    """``request.options`` as the strategy's own model, with validated overrides
    (a strategy given another strategy's options is a caller's bug: say so)."""
    opts = request.options
    if not isinstance(opts, kind):
        raise ValueError(f"{kind.__name__} expected, got options of the "
                         f"{getattr(opts, 'strategy', type(opts).__name__)!r} strategy")
    return kind.model_validate({**opts.model_dump(), **overrides}) if overrides else opts


def turn_chat(backend: Backend, policy: PromptPolicy) -> bool:
    """Whether this turn's prompts are chat messages (``llm.base.use_chat``, the one rule)."""
    return use_chat(policy.api_mode, backend.capabilities)


def sampling(request: TurnRequest, n: int, *, stop: Sequence[str] = (), seed_offset: int = 0,
             temperature: float | None = None, logprobs: bool = True) -> SamplingParams:
    """The one sampling rule: ``temperature_for(n)`` unless the strategy fixes it;
    a seed makes a run reproducible, offset per model call."""
    s = request.sampling
    return SamplingParams(n=n, temperature=s.temperature_for(n) if temperature is None else temperature,
                          max_tokens=s.max_new_tokens, stop=tuple(stop), logprobs=logprobs,
                          seed=None if s.seed is None else s.seed + seed_offset)


def prompt_text(prompt: Prompt) -> str:
    """A prompt as one text, for the result and the logs."""
    if prompt.text is not None:
        return prompt.text
    return "\n\n".join(f"[{m.role}]\n{m.content}" + (f"\n[{len(m.images)} image(s) attached]" if m.images else "")
                       for m in prompt.messages or ())


def jupiter_task(request: TurnRequest, backend: Backend) -> Task:
    """The ReAct/MCTS task message; its notebook gets half the prompt budget
    (the steps need the rest)."""
    p, t = request.prompt, request.task
    return build_task(request.intent, request.context, count_tokens=backend.count_tokens,
                      budget=p.max_prompt_tokens // 2, schema=request.schema,
                      constraints=t.constraints, format=t.format, files=t.files,
                      outputs=p.outputs, output_chars=p.output_chars)


@dataclass
class PromptPlan:
    built: BuiltPrompt
    chat: bool

    @property
    def stop(self) -> tuple[str, ...]:
        """Completion prompts stop at the next cell; chat replies end on their own."""
        return () if self.chat else stop_sequences()


def plan_prompt(request: TurnRequest, ctx: RunContext, *, intent: str | None = None,
                chat_kw: dict | None = None, completion_kw: dict | None = None) -> PromptPlan:
    """The ARCADE prompt in the backend's style; a strategy that asks for something
    else than a cell (Explain) passes its own ``intent`` and per-style builder arguments."""
    chat = turn_chat(ctx.backend, request.prompt)
    builder = build_chat_prompt if chat else build_prompt
    p = request.prompt
    extra = {"exemplars": p.exemplars, **((chat_kw if chat else completion_kw) or {})}
    if chat:
        extra.setdefault("images", prompt_images(request, ctx.backend))
    built = builder(request.context, request.intent if intent is None else intent, schema=request.schema,
                    count_tokens=ctx.backend.count_tokens, budget=p.max_prompt_tokens,
                    outputs=p.outputs, output_chars=p.output_chars, **extra)
    if ctx.context_report is None:
        ctx.context_report = context_report(built, request)
    return PromptPlan(built, chat)


def prompt_images(request: TurnRequest, backend: Backend) -> tuple[ImagePart, ...]:
    """The active cell's plots for a vision model, resized and bounded by the prompt policy;
    none when the model reads no images, images are off, or outputs are not shown."""
    p = request.prompt
    active = request.context.active_cell()
    if active is None or p.images <= 0 or p.outputs == "none" or not backend.capabilities.image_input:
        return ()
    return prepare_images(active.images, max_images=p.images, max_bytes=p.image_bytes)


def result_images(result: ExecResult | None, request: TurnRequest, backend: Backend) -> tuple[ImagePart, ...]:
    """The plots an executed candidate drew in its kernel copy, for a vision model (resized and
    bounded like the active cell's); none for a text-only model, whose observation has their summary."""
    p = request.prompt
    if result is None or p.images <= 0 or not backend.capabilities.image_input:
        return ()
    found = [found for found in (image_of(o.data) for o in result.outputs) if found is not None]
    return prepare_images(found, max_images=p.images, max_bytes=p.image_bytes)


def show_latest_images(messages: list[dict], images: tuple[ImagePart, ...]) -> list[dict]:
    """``messages`` with ``images`` on the last one when it is the latest observation (the step just
    run): earlier plots were seen already, and an observation cut to fit the prompt loses its images."""
    last = messages[-1] if messages else None
    if (images and last is not None and last["role"] == "user" and last["content"].startswith("Observation:")
            and last["content"] != OMITTED_OBSERVATION):
        return [*messages[:-1], {**last, "images": images}]
    return messages


def context_report(built: BuiltPrompt, request: TurnRequest) -> ContextReport:
    """What the context gauge shows for a built prompt: its fill and every cut."""
    cuts = request.schema_cuts
    return ContextReport(prompt_tokens=built.tokens, window=request.prompt.max_prompt_tokens,
                         cells_dropped=built.dropped_cells, exemplars_dropped=built.dropped_exemplars,
                         outputs_cut=built.outputs_cut, over_budget=built.over_budget,
                         mentioned=list(cuts.mentioned), frames_cut=list(cuts.frames_cut))


def to_candidate(completion: Completion, plan: PromptPlan) -> Candidate | None:
    try:
        parsed = parse_output(completion.text, chat=plan.chat, prefix=plan.built.prefix)
    except UnparsableOutput:
        return None
    return Candidate(
        code=parsed.code,
        steps=parsed.steps,
        raw=completion.text,
        meta={"mean_logprob": completion.mean_logprob},
    )


#: Streamed text goes out at most this often (seconds), "generating: ..." progress at most each second.
DELTA_INTERVAL_S = 0.1
GENERATING_INTERVAL_S = 1.0


def generate_one(ctx: RunContext, prompt: Prompt, params: SamplingParams, stats: SearchStats, *,
                 candidate: int | None = None, prompt_tokens: int | None = None) -> Completion:
    """One completion, streamed to the turn's events as it is written.

    Deltas go out batched (``DELTA_INTERVAL_S``) with a "generating: N
    tokens, S s" progress line each second; the turn's cancel flag is read
    between deltas and closes the stream (the backend ends its HTTP request or
    its generation thread). The completion is the one the stream returned
    (llama.cpp, also through the model service: usage, reused tokens and
    log-probabilities); otherwise the tokens are counted with
    ``backend.count_tokens`` and it has no log-probabilities.
    Backends that do not stream get one ``generate`` call.
    """
    backend = ctx.backend
    ctx.check_cancelled()
    if params.n != 1 or not streams(backend):
        completions = backend.generate(prompt, params)
        stats.count_call(completions)
        return completions[0] if completions else Completion(text="")
    if prompt_tokens is None:
        prompt_tokens = backend.count_tokens(prompt_text(prompt))
    started = last_delta = last_progress = time.monotonic()
    parts: list[str] = []
    pending = ""
    first = True
    streamed = Streamed(backend.stream(prompt, params))
    gen = iter(streamed)
    try:
        for delta in gen:
            ctx.check_cancelled()
            parts.append(delta)
            pending += delta
            now = time.monotonic()
            if now - last_delta >= DELTA_INTERVAL_S and pending:
                ctx.delta(pending, candidate=candidate, start=first)
                pending, first, last_delta = "", False, now
            if now - last_progress >= GENERATING_INTERVAL_S:
                last_progress = now
                tokens = backend.count_tokens("".join(parts))
                elapsed = now - started
                if tokens:
                    ctx.progress(f"generating: {tokens:,} token{'s' if tokens != 1 else ''}, {elapsed:.0f} s",
                                 state="generating",
                                 tokens=tokens, elapsed_s=round(elapsed, 1))
                else:  # a local model still reading the prompt (it yields "" between batches)
                    ctx.progress(f"preparing the prompt cache: {prompt_tokens:,} prompt tokens, {elapsed:.0f} s",
                                 state="prompt", prompt_tokens=prompt_tokens, elapsed_s=round(elapsed, 1))
    finally:
        gen.close()
    ctx.check_cancelled()
    if pending:
        ctx.delta(pending, candidate=candidate, start=first)
    text = "".join(parts)
    completion = streamed.completion or Completion(text=text, finish_reason=None, prompt_tokens=prompt_tokens,
                                                   completion_tokens=backend.count_tokens(text))
    stats.count_call([completion])
    return completion


def sample_candidates(
    request: TurnRequest, ctx: RunContext, plan: PromptPlan, n: int, stats: SearchStats
) -> tuple[list[Candidate], int]:
    """Sample ``n`` completions; returns the parsable candidates (at least one, else
    :class:`UnparsableOutput`) and how many were not.

    A chat model that replied in words only raises :class:`ProseAnswer` with its reply:
    a question asked in the composer gets its answer shown, not an error.
    """
    ctx.check_cancelled()
    prompt = plan.built.prompt
    tokens = ctx.backend.count_tokens(prompt_text(prompt))
    ctx.progress(f"asking the model for {n} candidate{'s' if n > 1 else ''} (prompt {tokens:,} tokens)",
                 state="prompt", samples=n, prompt_tokens=tokens)
    params = sampling(request, n, stop=plan.stop, seed_offset=stats.model_calls)
    if n == 1:
        completions = [generate_one(ctx, prompt, params, stats, candidate=0, prompt_tokens=tokens)]
    else:
        completions = ctx.backend.generate(prompt, params)
        stats.count_call(completions)
    candidates = [c for c in (to_candidate(x, plan) for x in completions) if c is not None]
    if not candidates:
        which = "The model's answer" if n == 1 else f"None of the model's {n} answers"
        message = (f"{which} held no Python code. Try rephrasing the intent, or configure a "
                   "stronger model (see `%agent config`).")
        prose = next((c.text.strip() for c in completions if c.text.strip()), "")
        if plan.chat and prose:
            raise ProseAnswer(message, prose, stats)
        raise UnparsableOutput(message, stats)
    return candidates, len(completions) - len(candidates)


def execute(candidate: Candidate, ctx: RunContext, stats: SearchStats, which: str = "the candidate",
            index: int | None = None, *, probes: bool = False) -> ExecResult | None:
    """Run the candidate in a fresh fork of the root copy (None without a copy).

    The progress says so while it runs (``which``: "candidate 2 of 5", ``index`` its number):
    the line must not still say the model is being asked. ``probes``: then run the evidence
    probes in that copy (``search.evidence``; the root must hold their baseline) and keep
    their checks on the candidate. The copy also says what the cell changed in its namespace
    and scratch (``Candidate.namespace``: what accepting it will change; taken off the result,
    so that it travels once).
    """
    if ctx.executor is None:
        return None
    ctx.check_cancelled()
    extra = {} if index is None else {"candidate": index}
    ctx.progress(f"running {which} in a kernel copy", state="running", **extra)
    child = ctx.executor.fork()
    try:
        result = child.exec(candidate.code, namespace=True)
        candidate.namespace = (namespace_diff.parse(result.namespace) if result.status in ("ok", "error")
                               else None)
        result.namespace = None
        if probes and result.ok:
            candidate.checks = path_checks([probe_copy(child)])
    finally:
        child.close()
    stats.executions += 1
    candidate.result = result
    return result


def repair_prompt(plan: PromptPlan, candidate: Candidate) -> Prompt:
    """The original prompt plus the failing cell and its error, asking for a fix."""
    error = candidate.result.error_line() if candidate.result else "error"
    if plan.chat:
        messages = list(plan.built.prompt.messages or ())
        messages.append(ChatMessage("assistant", f"```python\n{candidate.code}\n```"))
        messages.append(
            ChatMessage(
                "user",
                f"Running that cell raised:\n{error}\n\nFix it. Reply with exactly one "
                "```python fenced cell, with a `# Step N: ...` comment before each step.",
            )
        )
        return Prompt(messages=tuple(messages))
    body = (plan.built.prompt.text or "") + candidate.code.split(STEP_PREFIX, 1)[-1]
    comment = "\n".join("# " + line for line in error.splitlines())
    fixed = SOLUTION_PREAMBLE.replace("# Solution:", "# Solution (fixed):")
    return Prompt(text=f"{body}\n# The cell above raised:\n{comment}{CELL_SEP}{fixed}\n{plan.built.prefix}")


#: The words that ask a chat model to complete a solution whose first steps are given.
CONTINUE_WORDS = "Complete this solution, keeping its first {n} step(s) exactly as they are"


def step_cell(steps: Sequence[Step]) -> str:
    """Steps as the cell they came from: each step's comment, then its code."""
    return "\n".join(s.code if s.number == 0 else f"# Step {s.number}: {s.explanation}\n{s.code}".rstrip()
                     for s in steps)


def continuation_plan(plan: PromptPlan, steps: Sequence[Step]) -> PromptPlan:
    """The ARCADE prompt with a solution's first ``steps`` fixed, so every sample completes that branch.

    A completion model continues the cell after them (the prompt's ``prefix`` becomes them plus the
    next step's comment); a chat model gets them in the question and writes the whole cell again.
    """
    cell = step_cell(steps)
    built = plan.built
    if plan.chat:
        ask = (f"\n\n{CONTINUE_WORDS.format(n=sum(s.number > 0 for s in steps))}:\n```python\n{cell}\n```\n"
               "Reply with exactly one ```python fenced cell: those steps, then the rest, with a "
               "`# Step N: ...` comment before each step.")
        messages = list(built.prompt.messages or ())
        if messages and messages[-1].role == "user":
            messages[-1] = replace(messages[-1], content=messages[-1].content + ask)
        else:
            messages.append(ChatMessage("user", ask.lstrip()))
        return PromptPlan(replace(built, prompt=Prompt(messages=tuple(messages))), chat=True)
    text = built.prompt.text or ""
    head = text[: len(text) - len(built.prefix)] if built.prefix and text.endswith(built.prefix) else text
    prefix = f"{cell}\n# Step {max((s.number for s in steps), default=0) + 1}:"
    return PromptPlan(replace(built, prompt=Prompt(text=head + prefix), prefix=prefix), chat=False)


def repair_skipped(candidate: Candidate, ctx: RunContext) -> bool:
    """Whether a failed candidate is left unrepaired, saying why on it and in the progress.

    A cell stopped by a limit (the wall-clock timeout above all) is slow, not wrong in a
    way its error shows: the repair would run a close copy of it again, to be stopped
    again (a 60 s timeout made a 120 s turn).
    """
    result = candidate.result
    if result is None or result.ok or not (result.status == "timeout" or result.limit):
        return False
    limit = result.limit or "time"
    took = f" after {result.duration_s:.0f} s" if result.duration_s else ""
    reason = (f"Not repaired: it was stopped by the {limit} limit{took}, and a fix would run "
              "it again. Ask for a lighter computation (a sample, fewer rows).")
    candidate.meta["not_repaired"] = reason  # the sidebar shows it under the candidate
    ctx.progress(f"the candidate was stopped by the {limit} limit; not repairing it")
    return True


def repair(
    candidate: Candidate, request: TurnRequest, ctx: RunContext, plan: PromptPlan, stats: SearchStats
) -> Candidate | None:
    """One repair attempt for a candidate that raised; None when it does not help."""
    ctx.check_cancelled()
    ctx.progress("the candidate raised an error; asking the model to fix it")
    prompt = repair_prompt(plan, candidate)
    completion = generate_one(ctx, prompt, sampling(request, 1, stop=plan.stop), stats)
    fixed = to_candidate(completion, plan)
    if fixed is None:
        return None
    fixed.repaired = True
    execute(fixed, ctx, stats, "the fixed candidate", probes=bool(getattr(request.options, "probes", False)))
    return fixed


def finish(
    name: str,
    chosen: Candidate | None,
    candidates: list[Candidate],
    ctx: RunContext,
    plan: PromptPlan,
    stats: SearchStats,
    started: float,
    answer: str | None = None,
) -> SearchResult:
    """The result of a one-prompt strategy, with its statistics completed."""
    stats.nodes = len(candidates)
    stats.wall_time_s = time.monotonic() - started
    return SearchResult(
        chosen=chosen,
        candidates=candidates,
        stats=stats,
        protections=ctx.protections,
        strategy=name,
        prompt=prompt_text(plan.built.prompt),
        answer=answer,
    )
