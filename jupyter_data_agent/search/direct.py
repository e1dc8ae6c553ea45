"""``direct``: one step-by-step cell, executed in a copy, repaired once if it raises (not if a limit stopped it)."""

from __future__ import annotations

import time

from .base import Event, RunContext, SearchResult, SearchStats, TurnRequest
from .generate import execute, finish, options, plan_prompt, repair, repair_skipped, sample_candidates
from .options import DirectOptions


class DirectStrategy:
    name = "direct"

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        opts = options(request, DirectOptions)
        started = time.monotonic()
        stats = SearchStats()
        plan = plan_prompt(request, ctx)
        candidates, _ = sample_candidates(request, ctx, plan, 1, stats)
        chosen = candidates[0]
        result = execute(chosen, ctx, stats)
        if result is not None and not result.ok and opts.repair and not repair_skipped(chosen, ctx):
            fixed = repair(chosen, request, ctx, plan, stats)
            if fixed is not None and fixed.ok:
                candidates.append(fixed)
                chosen = fixed
        ctx.events(Event("candidate", "candidate ready",
                         {"index": candidates.index(chosen), "candidate": chosen}))
        return finish(self.name, chosen, candidates, ctx, plan, stats, started)
