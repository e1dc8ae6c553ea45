"""``vote``: N samples, each executed; the answer of the largest cluster wins.

Self-consistency as in ARCADE: candidates whose outputs are the same answer
(``equivalence.same_answer``) vote together; errors and silent cells do not.
"""

from __future__ import annotations

import time

from .base import Candidate, Event, RunContext, SearchResult, SearchStats, TurnRequest
from .equivalence import exec_output, majority
from .generate import execute, finish, options, plan_prompt, repair, repair_skipped, sample_candidates
from .options import VoteOptions


def vote(candidates: list[Candidate], stats: SearchStats | None = None) -> Candidate | None:
    """The representative of the largest class of equal outputs (``majority``).

    Sets each candidate's support and, given ``stats``, the class sizes.
    """
    groups = majority([exec_output(c.result) for c in candidates],
                      scores=[c.score for c in candidates], steps=[len(c.steps) for c in candidates])
    for group in groups:
        for i in group:
            candidates[i].support = len(group)
    if stats is not None:
        stats.classes = [len(g) for g in groups]
    return candidates[groups[0][0]] if groups else None


class VoteStrategy:
    name = "vote"

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        opts = options(request, VoteOptions)
        started = time.monotonic()
        stats = SearchStats()
        plan = plan_prompt(request, ctx)
        candidates, unparsable = sample_candidates(request, ctx, plan, opts.samples, stats)
        runs = ctx.executor is not None  # without a copy nothing runs, and nothing says it did
        for i, candidate in enumerate(list(candidates)):
            result = execute(candidate, ctx, stats, f"candidate {i + 1} of {len(candidates)}", i)
            said = f"candidate {i + 1} ran" if runs else f"candidate {i + 1} (not run)"
            ctx.events(Event("candidate", said, {"index": i, "candidate": candidate}))
            if result is not None and not result.ok and opts.repair and not repair_skipped(candidate, ctx):
                fixed = repair(candidate, request, ctx, plan, stats)
                if fixed is not None:
                    candidates.append(fixed)
        chosen = vote(candidates, stats) if ctx.executor is not None else None
        if chosen is None:
            chosen = candidates[0]
        if unparsable:
            ctx.events(Event("log", f"{unparsable} answer(s) held no code and were dropped"))
        return finish(self.name, chosen, candidates, ctx, plan, stats, started)
