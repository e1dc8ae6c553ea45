"""Search that contains the vote: whole samples first, then more where they part.

At budget B completions (``MCTSOptions.iterations`` x ``k``), Search

1. draws ``vote_share`` x B whole cells exactly as the adaptive vote draws
   them (``vote.draw_samples``: rounds, a fix for a cell that raised while
   the vote is open, each cell run in a fresh copy); a vote already decided
   (``vote.should_stop``: a unanimous first round) ends the turn there;
2. spends the rest where the cells disagree. Their steps form a tree (equal
   code is one step); from the root it follows a step while the samples
   agree on it, or lead with it clearly enough (``lead_posterior`` of its
   count against the runner-up's >= ``commit``); at the first step where they
   part and none leads clearly (else at the deepest step they parted on) it
   samples cells that keep the steps above that one
   (``generate.continuation_plan``): more evidence on that step, and whole
   answers that keep the clear leads above it. Each completion is a whole
   cell, run in a fresh copy, and votes; one that raised gets one fix while
   the vote is open and budget is left, as in the vote;
3. picks by the majority over every complete answer, the vote's classes
   (``majority.majority`` of ``equivalence.voted_output``), each answer
   weighted ``1 + alpha * value`` by the estimator's answer model (the
   shipped one, ``answer_model.json``, was fitted on Search's answers in the
   lab's train split: ``jupyter_data_agent_bench.answer_model``), where
   ``alpha = 2 AUC - 1`` of its measured AUC among answers
   (``meta.answer_auc``; 0 without one): with an uninformative estimator the
   pick is the vote over more samples. Never more completions than the budget.

Why: with agreement as the only signal (log-probs that say nothing), a tree
that does not contain the vote spent its budget on partial paths and lost
to it (docs/benchmarks.md, issue 39); a step most samples agree on is more
often right than a whole cell is, so completing it gives right answers more
often than a fresh sample does.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..prompts import UnparsableOutput
from ..prompts.parse import Step
from ..words import counted
from .base import Candidate, Event, RunContext, SearchResult, SearchStats, TraceStep, TurnRequest
from .equivalence import voted_output
from .estimators import NodeState, ValueEstimator
from .evidence import agree_check, plausible_check, probe_copy, type_check
from .features import EvidenceModel, EvidenceValue, features
from .generate import continuation_plan, execute, finish, plan_prompt, repair_skipped, sample_candidates
from .majority import majority
from .options import MCTSOptions, VoteOptions
from .tree_nodes import step_key
from .vote import answer_text, classes_of, draw_samples, lead_posterior, repair_in_place, should_stop


@dataclass
class Branch:
    """Where the next completions go: the steps they keep, and why."""

    steps: list[Step]
    why: str  # "parted": where the samples part without a clear leader; "leads": below the clear leads


def cell_steps(candidate: Candidate) -> list[Step]:
    """The candidate's steps; a cell without step comments is one step."""
    return candidate.steps or [Step(1, "", candidate.code)]


def step_keys(candidate: Candidate) -> list[tuple]:
    """The candidate's steps as comparable keys (code up to blank lines and trailing spaces)."""
    return [step_key("action", s.code, None) for s in cell_steps(candidate)]


def next_branch(candidates: Sequence[Candidate], commit: float) -> Branch:
    """Follow the steps the cells that ran agree on, or clearly lead with; stop where they part."""
    pool = [c for c in candidates if c.result is not None and c.result.ok]
    keys = {id(c): step_keys(c) for c in pool}
    prefix: list[Step] = []
    led: int | None = None  # the depth of the deepest step taken on a lead, not on agreement
    depth = 0
    while True:
        live = [c for c in pool if len(keys[id(c)]) > depth]
        if not live:
            break
        count = Counter(keys[id(c)][depth] for c in live)
        (top, a), *rest = count.most_common()
        b = rest[0][1] if rest else 0
        if rest and lead_posterior(a, b) < commit:
            return Branch(prefix, "parted")
        if rest:
            led = depth
        pool = [c for c in live if keys[id(c)][depth] == top]
        prefix.append(cell_steps(pool[0])[depth])
        depth += 1
    # Every contested step has a clear leader: sample again at the deepest one, keeping the steps above
    # it (its evidence grows, and its answers keep the leads above); cells that agree on every step
    # leave nothing to keep.
    return Branch(prefix[:led] if led is not None else [], "leads" if led else "parted")


def path_shares(candidate: Candidate, candidates: Sequence[Candidate]) -> list[float]:
    """Each step's share among the cells that ran and took the same steps before it."""
    pool = [step_keys(c) for c in candidates if c.result is not None and c.result.ok]
    mine = step_keys(candidate)
    shares = []
    for d in range(len(mine)):
        before = [k for k in pool if k[:d] == mine[:d] and len(k) > d]
        shares.append(sum(k[d] == mine[d] for k in before) / max(1, len(before)))
    return shares or [1.0]


def answer_model(estimator: ValueEstimator) -> EvidenceModel | None:
    """The model that weighs whole answers: the estimator's answer model where it has one (the
    shipped evidence estimator does), else its own model (a trained features model), else none."""
    answers = getattr(estimator, "answers", None)
    model = answers if answers is not None else getattr(estimator, "model", None)
    return model if isinstance(model, EvidenceModel) else None


def estimator_signal(estimator: ValueEstimator) -> float:
    """How much the estimator may weigh in the pick: 2 AUC - 1 of its answer model's measured AUC
    among answers (``meta.answer_auc``); 0 where none was measured."""
    model = answer_model(estimator)
    auc = (model.meta if model is not None else {}).get("answer_auc")
    return max(0.0, min(1.0, 2 * float(auc) - 1)) if auc is not None else 0.0


class BranchingSearch:
    """One Search turn: the vote's share, then the branches (see the module)."""

    def __init__(self, request: TurnRequest, ctx: RunContext, cfg: MCTSOptions,
                 estimator: ValueEstimator) -> None:
        if ctx.executor is None:
            raise ValueError("Search runs every candidate in a kernel copy, and none is available here "
                             "(--no-exec, or the kernel cannot be forked).")
        self.request, self.ctx, self.cfg, self.estimator = request, ctx, cfg, estimator
        self.stats = SearchStats()
        self.budget = cfg.iterations * cfg.k
        self.fmt = request.task.format  # the answer the cells vote with (``equivalence.voted_output``)

    def run(self) -> SearchResult:
        started = time.monotonic()
        request, ctx, cfg, stats = self.request, self.ctx, self.cfg, self.stats
        plan = plan_prompt(request, ctx, intent=task_intent(request))
        if cfg.probes:
            probe_copy(ctx.executor)
        share = max(1, min(self.budget, round(self.budget * cfg.vote_share)))
        vote_opts = VoteOptions(samples=share, probes=cfg.probes, adaptive=True)
        drawn = draw_samples(request, ctx, plan, stats, vote_opts, samples=share, adaptive=True,
                             probes=cfg.probes, announce=False)
        candidates = drawn.candidates
        self._progress(candidates)
        while (left := self.budget - stats.samples) > 0:
            ctx.check_cancelled()
            if should_stop(classes_of(candidates, self.fmt), left, vote_opts.stop_posterior):
                break
            branch = next_branch(candidates, cfg.commit)
            n = min(cfg.k, left)
            done = len(branch.steps)
            ctx.progress(f"branching: {n} more candidate{'s' if n > 1 else ''} "
                         + (f"after step {done} where the candidates agree" if branch.why == "leads"
                            else f"where the candidates part (step {done + 1})"),
                         state="prompt", samples=n)
            try:
                where = continuation_plan(plan, branch.steps) if branch.steps else plan
                new, _ = sample_candidates(request, ctx, where, n, stats)
            except UnparsableOutput:
                continue  # the completions were spent; the samples so far still vote
            for candidate in new:
                i = len(candidates)
                candidate.meta["kept_steps"] = done
                candidates.append(candidate)
                execute(candidate, ctx, stats, f"candidate {i + 1} (branch after step {done})", i,
                        probes=cfg.probes)
            for candidate in new:  # as the vote does while it is open: a cell that raised gets one fix
                result = candidate.result
                if (result is not None and not result.ok and stats.samples < self.budget
                        and not should_stop(classes_of(candidates, self.fmt), self.budget - stats.samples,
                                            vote_opts.stop_posterior)
                        and not repair_skipped(candidate, ctx)):
                    repair_in_place(candidate, candidates, request, ctx, plan, stats)
            self._progress(candidates)
        stats.unspent = max(0, self.budget - stats.samples)
        chosen = self._pick(candidates)
        for i, candidate in enumerate(candidates):  # sent once checked, valued and counted (the tree's way)
            ctx.events(Event("candidate", f"candidate {i + 1}", {"index": i, "candidate": candidate}))
        if drawn.unparsable:
            ctx.events(Event("log", f"Dropped {counted(drawn.unparsable, 'answer')} that held no code"))
        return finish("mcts", chosen, candidates, ctx, plan, stats, started)

    def _progress(self, candidates: list[Candidate]) -> None:
        """The answers so far and their votes (the sidebar's search panel), once per round."""
        self.stats.iterations += 1
        groups = majority([voted_output(c.result, self.fmt) for c in candidates])
        answers = [{"answer": answer_text(candidates[g[0]]) or "", "votes": len(g)} for g in groups]
        self.ctx.progress(f"search round {self.stats.iterations}: {len(candidates)} candidates, "
                          f"{len(groups)} distinct answer{'s' if len(groups) != 1 else ''}",
                          iterations=self.stats.iterations, answers=answers)

    def _pick(self, candidates: list[Candidate]) -> Candidate:
        """The weighted majority (module docstring); every candidate gets its support, checks, value."""
        outputs = [voted_output(c.result, self.fmt) for c in candidates]
        values = self._values(candidates, outputs)
        alpha = estimator_signal(self.estimator)
        groups = majority(outputs, scores=values, steps=[len(c.steps) for c in candidates])
        weight = {id(g): sum(1 + alpha * (values[i] or 0.0) for i in g) for g in groups}
        groups.sort(key=lambda g: -weight[id(g)])  # stable: size, then value, then age, as the vote
        total = sum(len(g) for g in groups)
        for g in groups:
            for i in g:
                candidates[i].support = len(g)
        self.stats.classes = sorted((len(g) for g in groups), reverse=True)
        winners = set(groups[0]) if groups else set()
        for i, c in enumerate(candidates):
            c.score = values[i]
            c.meta.update(value=values[i], q=values[i])
            answer = answer_text(c)
            c.checks = [*c.checks, type_check(answer, self.request.intent, self.request.task.format),
                        plausible_check(answer),
                        agree_check(c.support if outputs[i] is not None else 0, total, i in winners)]
        chosen = candidates[groups[0][0]] if groups else candidates[0]
        self.stats.value = chosen.score
        return chosen

    def _values(self, candidates: list[Candidate], outputs: list[dict | None]) -> list[float | None]:
        """The estimator's value of each cell, read as a node of the tree would be: an answer when it
        ran (``outputs``: what it voted with), an error when it raised (it does not vote, but a
        decision on it keeps its features)."""
        support = {i: len(g) for g in majority(outputs) for i in g}
        total = sum(support.values())
        states = []
        for i, c in enumerate(candidates):
            answer = answer_text(c)
            steps = [TraceStep(thought=s.explanation, code=s.code, status="ok") for s in c.steps]
            if outputs[i] is not None:
                steps.append(TraceStep(thought="", code="", status="answer", answer=answer))
            elif c.result is not None and not c.result.ok:
                steps = steps or [TraceStep(thought="", code=c.code, status="ok")]
                steps[-1].status = c.result.status if c.result.status in ("error", "timeout") else "died"
            # the exchange as a value model reads one: the question, the cell, what it showed
            messages = [{"role": "user", "content": self.request.intent},
                        {"role": "assistant", "content": c.code},
                        {"role": "user", "content": f"Observation: {answer or ''}"}]
            states.append(NodeState(messages=messages, steps=steps, format=self.request.task.format,
                                    depth=len(steps), checks=list(c.checks), mean_logprob=c.meta.get("mean_logprob"),
                                    prior=1.0, agreement=support.get(i, 0) / max(1, total),
                                    shares=path_shares(c, candidates)))
        values: list[float | None] = [None] * len(candidates)
        answers = getattr(self.estimator, "answers", None)  # an answer model: what the pick weighs
        scorer = EvidenceValue(answers) if answers is not None else self.estimator
        for i, (v, st) in enumerate(zip(scorer.estimate(states, self.stats), states)):
            c = candidates[i]
            c.meta.update(features=features(st),  # what a decision on it keeps (train-value)
                          messages=st.messages, reason="answer" if outputs[i] is not None else "error",
                          answer=c.result.stream("stdout").strip() if c.result is not None and c.result.ok
                          else None)
            if outputs[i] is not None:
                values[i] = 0.0 if math.isnan(v) else max(-1.0, min(1.0, float(v)))
        return values


def task_intent(request: TurnRequest) -> str:
    """The intent with the task's constraints and answer format, as the vote's one cell must see them."""
    task = request.task
    extra = [f"Constraints: {task.constraints.strip()}" if task.constraints.strip() else "",
             f"Format: {task.format.strip()}" if task.format.strip() else ""]
    return "\n".join([request.intent, *[e for e in extra if e]])


__all__ = ["Branch", "BranchingSearch", "answer_model", "estimator_signal", "next_branch", "path_shares", "step_keys",
           "task_intent"]
