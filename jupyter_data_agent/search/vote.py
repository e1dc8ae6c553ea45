"""``vote``: up to N samples, each executed; the answer of the largest cluster wins.

Self-consistency as in ARCADE: candidates whose outputs are the same answer
(``equivalence.same_answer``) vote together; errors and silent cells do not.

Adaptive (``VoteOptions.adaptive``, off by default): samples are drawn in
rounds, and drawing stops (``should_stop``)
as soon as the leading class cannot be overtaken by the samples left, or the
posterior probability that it beats the runner-up passes
``VoteOptions.stop_posterior``. Each round draws the fewest samples that
could meet the rule, so a unanimous start ends early and a split one goes on;
the samples not drawn are reported as ``SearchStats.unspent``. A sample that
raised is repaired (one more completion) only when its round left the vote
undecided: a decided vote does not pay for fixes that cannot change it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from math import comb

from ..kernel.results import ExecResult
from ..prompts import UnparsableOutput
from ..words import counted
from .base import Candidate, Event, RunContext, SearchResult, SearchStats, TurnRequest
from .equivalence import exec_output, voted_output
from .evidence import agree_check, plausible_check, type_check
from .generate import (
    PromptPlan,
    execute,
    finish,
    options,
    plan_prompt,
    probe_copy,
    repair,
    repair_skipped,
    sample_candidates,
)
from .majority import majority
from .options import VoteOptions


def vote(candidates: list[Candidate], stats: SearchStats | None = None, fmt: str = "") -> Candidate | None:
    """The representative of the largest class of equal outputs (``majority``)."""
    winners = vote_class(candidates, stats, fmt)
    return candidates[winners[0]] if winners else None


def vote_class(candidates: list[Candidate], stats: SearchStats | None = None, fmt: str = "") -> list[int]:
    """The indices of the class the vote picks, the largest of equal outputs (``majority`` of
    ``voted_output``: the tags ``fmt`` asks for, where printed; empty: nothing voted). Sets each
    candidate's support and, given ``stats``, the class sizes: the classes are computed once (each
    comparison may take up to its time bound)."""
    groups = majority([voted_output(c.result, fmt) for c in candidates],
                      scores=[c.score for c in candidates], steps=[len(c.steps) for c in candidates])
    for group in groups:
        for i in group:
            candidates[i].support = len(group)
    if stats is not None:
        stats.classes = [len(g) for g in groups]
    return groups[0] if groups else []


def lead_posterior(leader: int, runner_up: int) -> float:
    """P(the leader's class is more likely than the runner-up's | the counts), uniform prior.

    With θ = the leader's share of the two classes, θ ~ Beta(a + 1, b + 1), and
    P(θ > 1/2) = P(Binomial(a + b + 1, 1/2) <= a): exact, in integers.
    """
    n = leader + runner_up + 1
    return sum(comb(n, i) for i in range(leader + 1)) / 2 ** n


def should_stop(classes: list[int], remaining: int, threshold: float) -> bool:
    """Stop drawing: no class voted yet is never a stop; else the leader (``classes[0]``,
    largest first) cannot be overtaken or tied by the ``remaining`` draws, or its posterior
    against the runner-up reaches ``threshold`` (1.0 disables that rule)."""
    if not classes:
        return remaining <= 0
    lead, second = classes[0], (classes[1] if len(classes) > 1 else 0)
    return lead - second > remaining or (threshold < 1.0 and lead_posterior(lead, second) >= threshold)


def next_draw(classes: list[int], remaining: int, threshold: float) -> int:
    """The fewest further samples that could meet the stop rule (all joining the leader)."""
    lead, second = (classes + [0, 0])[:2]
    for d in range(1, remaining + 1):
        if should_stop([lead + d, second], remaining - d, threshold):
            return d
    return remaining


class VoteStrategy:
    name = "vote"

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        opts = options(request, VoteOptions)
        started = time.monotonic()
        stats = SearchStats()
        plan = plan_prompt(request, ctx)
        runs = ctx.executor is not None  # without a copy nothing runs, and nothing says it did
        probes = runs and opts.probes
        if probes:
            probe_copy(ctx.executor)  # the baseline each candidate's probes compare with
        adaptive = runs and opts.adaptive  # without copies nothing votes: every sample at once
        drawn = draw_samples(request, ctx, plan, stats, opts, samples=opts.samples, adaptive=adaptive,
                             probes=probes)
        candidates = drawn.candidates
        stats.unspent = opts.samples - drawn.drawn
        if stats.unspent:
            ctx.progress(f"the vote is decided: {stats.unspent} of {opts.samples} samples not drawn")
        winners = vote_class(candidates, stats, request.task.format) if runs else []
        chosen = candidates[winners[0]] if winners else None
        if runs:
            total = sum(stats.classes)
            for i, c in enumerate(candidates):
                voted = exec_output(c.result) is not None
                answer = answer_text(c)
                c.checks = [*c.checks, type_check(answer, request.intent, request.task.format),
                            plausible_check(answer),
                            agree_check(c.support if voted else 0, total, voted and i in winners)]
        if chosen is None:
            chosen = candidates[0]
        if drawn.unparsable:
            ctx.events(Event("log", f"Dropped {counted(drawn.unparsable, 'answer')} that held no code"))
        return finish(self.name, chosen, candidates, ctx, plan, stats, started)


@dataclass
class Drawn:
    """What :func:`draw_samples` drew: the candidates (fixes right after the one they fix), the
    completions that sampling spent (fixes not included) and the replies that held no code."""

    candidates: list[Candidate] = field(default_factory=list)
    drawn: int = 0
    unparsable: int = 0


def draw_samples(request: TurnRequest, ctx: RunContext, plan: PromptPlan, stats: SearchStats,
                 opts: VoteOptions, *, samples: int, adaptive: bool, probes: bool, announce: bool = True) -> Drawn:
    """The vote's samples, each run in a fresh copy: all at once, or (``adaptive``) in rounds that
    stop once :func:`should_stop` says the vote is decided. Search draws its vote share with this,
    so its first samples are drawn as the vote draws them (``search.branching``, which sends the
    candidates once its pick has checked them all: ``announce=False``)."""
    out = Drawn()
    runs = ctx.executor is not None
    batch = next_draw([], samples, opts.stop_posterior) if adaptive else samples
    while out.drawn < samples:
        try:
            new, dropped = sample_candidates(request, ctx, plan, batch, stats)
        except UnparsableOutput:
            if not out.candidates:
                raise
            new, dropped = [], batch  # a later round with no code: the earlier ones still vote
        out.drawn += batch
        out.unparsable += dropped
        raised: list[Candidate] = []
        for candidate in new:
            i = len(out.candidates)
            out.candidates.append(candidate)
            result = execute(candidate, ctx, stats, f"candidate {i + 1} of {samples}", i, probes=probes)
            said = f"candidate {i + 1} ran" if runs else f"candidate {i + 1} (not run)"
            if announce:
                ctx.events(Event("candidate", said, {"index": i, "candidate": candidate}))
            if result is not None and not result.ok and opts.repair and not repair_skipped(candidate, ctx):
                raised.append(candidate)
                if not adaptive:
                    repair_in_place(candidate, out.candidates, request, ctx, plan, stats)
        if not adaptive:
            break
        remaining = samples - out.drawn
        if not should_stop(classes_of(out.candidates, request.task.format), remaining, opts.stop_posterior):
            # Repairs cost completions too: an adaptive vote pays for them only when the
            # round's samples that ran have not already decided it.
            for candidate in raised:
                repair_in_place(candidate, out.candidates, request, ctx, plan, stats)
        classes = classes_of(out.candidates, request.task.format)
        if should_stop(classes, remaining, opts.stop_posterior):
            break
        batch = next_draw(classes, remaining, opts.stop_posterior)
    return out


def classes_of(candidates: list[Candidate], fmt: str = "") -> list[int]:
    """The sizes of the candidates' answer classes (``vote_class``'s), largest first."""
    return [len(g) for g in majority([voted_output(c.result, fmt) for c in candidates])]


def repair_in_place(candidate: Candidate, candidates: list[Candidate], request: TurnRequest, ctx: RunContext,
                    plan: PromptPlan, stats: SearchStats) -> None:
    """One fix for a cell that raised (one completion); the fix votes right after the cell it fixes."""
    fixed = repair(candidate, request, ctx, plan, stats)
    if fixed is not None:
        candidates.insert(candidates.index(candidate) + 1, fixed)


def answer_text(candidate: Candidate) -> str | None:
    """What the candidate answered in words: its printed output, else its value's sample."""
    return run_answer(candidate.result)


def run_answer(result: ExecResult | None) -> str | None:
    """What a run answered in words: its last printed line, else its value's sample."""
    if result is None or not result.ok:
        return None
    printed = result.stream("stdout").strip()
    if printed:
        return printed.splitlines()[-1]
    return None if result.value is None else str(result.value.value)
