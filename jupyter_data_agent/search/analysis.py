"""``analysis``: a whole analysis as a chain of verified cells, reviewed as one change.

The model writes a short plan (numbered steps, possibly edits of existing
cells), then each step on its own: a Markdown explanation and one cell. Each
step runs in a copy forked from the previous step's copy, so it sees the
earlier steps' variables while the live kernel sees none of them; a step
that raises is repaired (``max_repairs``); a reply ``Revised plan:`` or a
step that stays broken re-plans the rest (``max_replans``). With
``samples`` > 1 each step is a small vote: the candidates run in sibling
copies and the largest class of equal answers wins.

The copies outlive the turn in an :class:`AnalysisChain`: when the user
edits or drops a step in review, the steps after it run again from the
copy before it (``AnalysisChain.revise``), without asking the model.
Stopping (``RunContext.finish``) ends the turn with the verified prefix.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..kernel.results import ExecResult
from ..kernel.tree import SnapshotError
from ..prompts.analysis import (
    FIX_REQUEST,
    PlannedStep,
    StepReply,
    UnparsableOutput,
    editable_cells,
    parse_plan,
    parse_step_reply,
    plan_messages,
    step_message,
    step_messages,
)
from ..prompts.parse import Step
from ..prompts.react import fit_messages, format_observation, to_prompt
from .base import (
    AnalysisStep,
    Cancelled,
    Candidate,
    Event,
    RunContext,
    SearchResult,
    SearchStats,
    TurnRequest,
    copy_failed,
)
from .equivalence import exec_output
from .generate import generate_one, jupiter_task, options, prompt_text, sampling, turn_chat
from .majority import majority
from .options import AnalysisOptions

log = logging.getLogger(__name__)


class Finished(Exception):
    """The user asked the analysis to stop: it ends with the steps verified so far."""


@dataclass
class _StoppableContext(RunContext):
    """The turn's context whose cancel checks also see Stop, so a model call streaming a
    step ends at its next batch instead of running to its end."""

    def check_cancelled(self) -> None:
        super().check_cancelled()
        if self.finish.is_set():
            raise Finished()

    @classmethod
    def of(cls, ctx: RunContext) -> _StoppableContext:
        return cls(**{f.name: getattr(ctx, f.name) for f in fields(ctx)})


@dataclass(frozen=True)
class StepCode:
    """A step to run again as the user left it in review (no model is asked)."""

    code: str
    cell_id: str | None = None
    title: str = ""
    explanation: str = ""


def _wait(fut: concurrent.futures.Future, copy: Any, ctx: RunContext | None) -> Any:
    """The future's result, watching the cancel and finish flags: either kills the copy at once."""
    while True:
        try:
            return fut.result(timeout=0.05)
        except concurrent.futures.TimeoutError:
            if ctx is None:
                continue
            if ctx.cancel.is_set():
                copy.close()
                raise Cancelled("the analysis was cancelled") from None
            if ctx.finish.is_set():
                copy.close()
                raise Finished() from None


def _status(result: ExecResult) -> str:
    return result.status if result.status in ("ok", "error", "timeout", "died") else "died"


@dataclass
class AnalysisChain:
    """An analysis's copies: ``copies[k - 1]`` holds the state after step k, each a fork of the
    one before (``base``, the turn's root copy, before step 1). Closed by whoever keeps it."""

    base: Any
    steps: list[AnalysisStep] = field(default_factory=list)
    copies: list[Any] = field(default_factory=list)
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def parent(self, number: int) -> Any:
        """The copy step ``number`` forks from."""
        return self.base if number == 1 else self.copies[number - 2]

    def run_step(self, parent: Any, code: str, ctx: RunContext | None = None,
                 pool: concurrent.futures.ThreadPoolExecutor | None = None) -> tuple[Any, ExecResult]:
        """``code`` in a new fork of ``parent``: the copy (closed if it did not survive) and the result."""
        own = pool is None
        pool = pool or concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jda-analysis")
        try:
            try:
                copy = parent.fork()
            except SnapshotError as exc:  # the step before broke its copy's protocol: this step fails
                return None, copy_failed(exc)
            result = _wait(pool.submit(copy.exec, code), copy, ctx)
        finally:
            if own:
                pool.shutdown(wait=False, cancel_futures=True)
        if _status(result) in ("timeout", "died"):
            _close(copy)
        return copy, result

    def revise(self, from_step: int, steps: Sequence[StepCode], ctx: RunContext | None = None) -> list[AnalysisStep]:
        """Steps ``from_step``.. replaced by ``steps`` and run again from the copy before them.

        The run stops at the first step that does not end ok (later steps are
        ``not_run``, as a notebook's Run All stops); the old copies of those
        steps are closed once the new ones stand.
        """
        with self._lock:
            if self.closed:
                raise RuntimeError("the analysis's kernel copies were closed")
            if not 1 <= from_step <= len(self.steps) + 1:
                raise ValueError(f"from_step must be between 1 and {len(self.steps) + 1}; got {from_step}")
            parent = self.parent(from_step)
            new_steps: list[AnalysisStep] = []
            new_copies: list[Any] = []
            broken = False
            try:
                for offset, edit in enumerate(steps):
                    step = AnalysisStep(number=from_step + offset, title=edit.title, explanation=edit.explanation,
                                        code=edit.code, cell_id=edit.cell_id)
                    new_steps.append(step)
                    if broken:
                        continue
                    copy, result = self.run_step(parent, edit.code, ctx)
                    step.result, step.status = result, _status(result)
                    if step.status in ("timeout", "died"):
                        broken = True
                        continue
                    new_copies.append(copy)
                    parent = copy
                    broken = step.status != "ok"
            except BaseException:
                if new_copies:
                    _close(new_copies[0])  # forked from the kept parent: its subtree is theirs
                raise
            old = self.copies[from_step - 1:]
            if old:
                _close(old[0])  # the old lineage from this step on
            self.copies = self.copies[:from_step - 1] + new_copies
            self.steps = self.steps[:from_step - 1] + new_steps
            return new_steps

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self.copies:
                _close(self.copies[0])  # every later copy descends from the first
            self.copies = []


def _close(copy: Any) -> None:
    if copy is None:  # never made (a refused fork)
        return
    try:
        copy.close()
    except Exception:  # one copy's failure must not leave the others running
        log.warning("closing an analysis's kernel copy failed", exc_info=True)


class AnalysisStrategy:
    """Plan, then write, run and repair one step at a time in a chain of copies."""

    name = "analysis"

    def __init__(self, **overrides: Any) -> None:
        self.overrides = overrides

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        if ctx.executor is None:
            raise ValueError("The analysis strategy runs every step in a kernel copy, and none is "
                             "available here (--no-exec, or the kernel cannot be forked).")
        return _Run(request, _StoppableContext.of(ctx), options(request, AnalysisOptions, **self.overrides)).run()


class _Run:
    """One analysis turn's state (the plan, the steps, the chain) and its loop."""

    def __init__(self, request: TurnRequest, ctx: RunContext, opts: AnalysisOptions) -> None:
        self.request, self.ctx, self.opts = request, ctx, opts
        self.started = time.monotonic()
        self.stats = SearchStats()
        self.chat = turn_chat(ctx.backend, request.prompt)
        self.task = jupiter_task(request, ctx.backend)
        self.known = [cell_id for cell_id, _ in editable_cells(request.context)]
        self.sources = {c.cell_id: c.source for c in request.context.cells if c.cell_id}
        self.chain = AnalysisChain(ctx.executor)
        self.plan: list[PlannedStep] = []
        self.replanned_from: int | None = None  # steps from this number on come from a new plan
        self.status: dict[int, str] = {}
        self.first_prompt = ""
        self.replans = 0
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jda-analysis")

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> SearchResult:
        reason = "plan_done"
        try:
            self.plan = self._ask_plan()
            self._progress("planned", state="planning")
            while len(self.chain.steps) < len(self.plan):
                self.ctx.check_cancelled()  # Finished once Stop was asked for
                if not self._do_step(len(self.chain.steps) + 1):
                    reason = "step_failed"
                    break
        except Finished:
            reason = "stopped"
            self._drop_unverified()
        except BaseException:
            self.chain.close()
            raise
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
        return self._result(reason)

    def _do_step(self, number: int) -> bool:
        """Write, run and repair step ``number``; False when it stays broken and the plan ends here."""
        planned = self.plan[number - 1]
        self._set(number, "generating", f"step {number} of {len(self.plan)}: asking the model")
        written = self._write(number)
        if written and written[0].revised:
            if self.replans < self.opts.max_replans:
                self._replan(number, written[0].revised)
                return True
            written = []
        if not written:  # no code came: the step fails visibly instead of vanishing
            written = [StepReply(code=f"raise RuntimeError('the model wrote no code for step {number}')")]
        parent = self.chain.parent(number)
        copy, result, reply = self._run_candidates(number, written, parent)
        repairs = 0
        while result.status == "error" and repairs < self.opts.max_repairs:
            repairs += 1
            self._set(number, "repairing", f"step {number}: it raised {result.error_line()}; asking for a fix")
            _close(copy)
            fixed = self._fix(number, reply, result)
            if fixed is None:
                break
            reply = fixed
            self._set(number, "running", f"step {number}: running the fix in a kernel copy")
            copy, result = self.chain.run_step(parent, reply.code, self.ctx, self.pool)
            self.stats.executions += 1
        step = AnalysisStep(number=number, title=planned.title, explanation=reply.explanation, code=reply.code,
                            cell_id=planned.cell_id, result=result, status=_status(result), repairs=repairs,
                            replanned=self.replanned_from is not None and number >= self.replanned_from)
        if step.status == "ok":
            self.chain.steps.append(step)
            self.chain.copies.append(copy)
            self._set(number, "ok", f"step {number} of {len(self.plan)}: done in its copy")
            return True
        if step.status == "error":
            _close(copy)
        if self.replans < self.opts.max_replans and self._replan_after_failure(number, step):
            return True
        self.chain.steps.append(step)  # shown (status error) so the user sees where it broke
        self._set(number, "error", f"step {number}: {result.error_line() or step.status}; the analysis stops here")
        return False

    # -- the model ----------------------------------------------------------------------
    def _ask(self, messages: list[dict], *, n: int = 1, seed_offset: int = 0) -> list[str]:
        messages = fit_messages(messages, self.ctx.backend.count_tokens, self.request.prompt.max_prompt_tokens)
        prompt = to_prompt(messages, self.chat, cue="")
        self.first_prompt = self.first_prompt or prompt_text(prompt)
        params = sampling(self.request, n, seed_offset=seed_offset)
        if n == 1:
            return [generate_one(self.ctx, prompt, params, self.stats).text]
        completions = self.ctx.backend.generate(prompt, params)
        self.stats.count_call(completions)
        return [c.text for c in completions]

    def _ask_plan(self, messages: list[dict] | None = None) -> list[PlannedStep]:
        self.ctx.progress("writing the plan", state="planning")
        text = self._ask(messages or plan_messages(self.task, self.request.context, self.opts.max_steps))[0]
        plan = parse_plan(text, known_cells=self.known, max_steps=self.opts.max_steps)
        if not plan:
            raise UnparsableOutput("The model's plan held no steps. Try rephrasing the request, or "
                                   "configure a stronger model (see `%agent config`).", self.stats)
        return plan

    def _messages(self, number: int) -> list[dict]:
        done = [(step_message(s.explanation, s.code), format_observation(s.result, self.opts.observation_chars))
                for s in self.chain.steps[:number - 1]]
        planned = self.plan[number - 1]
        current = self.sources.get(planned.cell_id) if planned.cell_id else None
        return step_messages(self.task, self.plan, done, number, current)

    def _parse(self, text: str) -> StepReply | None:
        try:
            return parse_step_reply(text, known_cells=self.known, max_steps=self.opts.max_steps)
        except UnparsableOutput:
            return None

    def _write(self, number: int) -> list[StepReply]:
        """The step's candidates (one unless a vote per step), or ``[revised plan]``, or ``[]``."""
        n = self.opts.samples
        replies = [self._parse(t) for t in self._ask(self._messages(number), n=n, seed_offset=number)]
        usable = [r for r in replies if r is not None]
        revised = next((r for r in usable if r.revised), None)
        coded = [r for r in usable if r.code]
        if revised is not None and len(coded) < n / 2:
            return [revised]
        return coded

    def _fix(self, number: int, reply: StepReply, result: ExecResult) -> StepReply | None:
        messages = self._messages(number)
        messages.append({"role": "assistant", "content": step_message(reply.explanation, reply.code)})
        messages.append({"role": "user", "content": FIX_REQUEST.format(error=result.error_line(), number=number)})
        fixed = self._parse(self._ask(messages, seed_offset=100 + number)[0])
        if fixed is None or not fixed.code:
            return None
        return StepReply(explanation=fixed.explanation or reply.explanation, code=fixed.code)

    # -- running ------------------------------------------------------------------------
    def _run_candidates(self, number: int, candidates: list[StepReply],
                        parent: Any) -> tuple[Any, ExecResult, StepReply]:
        """The step's candidate(s) in sibling copies of ``parent``; with several, the majority's first."""
        runs: list[tuple[Any, ExecResult, StepReply]] = []
        try:
            for i, cand in enumerate(candidates):
                self._set(number, "running", f"step {number}: running "
                          + (f"candidate {i + 1} of {len(candidates)} " if len(candidates) > 1 else "")
                          + "in a kernel copy")
                copy, result = self.chain.run_step(parent, cand.code, self.ctx, self.pool)
                self.stats.executions += 1
                runs.append((copy, result, cand))
        except BaseException:
            for copy, _, _ in runs:
                _close(copy)
            raise
        pick = 0
        if len(runs) > 1:
            answers = [exec_output(r) if r.ok else None for _, r, _ in runs]
            groups = majority(answers)
            ok = [i for i, (_, r, _) in enumerate(runs) if r.ok]
            pick = groups[0][0] if groups else (ok[0] if ok else 0)
            self.stats.classes = [len(g) for g in groups]
        for i, (copy, _, _) in enumerate(runs):
            if i != pick:
                _close(copy)
        return runs[pick]

    # -- the plan -----------------------------------------------------------------------
    def _replan(self, number: int, revised: Sequence[PlannedStep]) -> None:
        self.replans += 1
        self.replanned_from = number
        self.plan = (self.plan[:number - 1] + list(revised))[:self.opts.max_steps]
        self._progress(f"the plan was revised from step {number}", state="planning")

    def _replan_after_failure(self, number: int, failed: AnalysisStep) -> bool:
        """Ask for a new plan of the steps left, given what broke; False when none came."""
        messages = self._messages(number)
        messages.append({"role": "assistant", "content": step_message(failed.explanation, failed.code)})
        messages.append({"role": "user", "content": (
            f"Output:\n{format_observation(failed.result, self.opts.observation_chars)}\n\n"
            f"Step {number} cannot be fixed as planned. Reply with `Revised plan:` and a numbered list "
            "of the remaining steps, starting with a different step " + str(number) + ".")})
        self._set(number, "repairing", f"step {number} stayed broken; planning the rest again")
        reply = self._parse(self._ask(messages, seed_offset=200 + number)[0])
        if reply is None or not reply.revised:
            return False
        self._replan(number, reply.revised)
        return True

    # -- events and the result ----------------------------------------------------------
    def _set(self, number: int, status: str, message: str) -> None:
        self.status[number] = status
        self._progress(message, state="step", turn=number)

    def _progress(self, message: str, **data: Any) -> None:
        done = {s.number: s.status for s in self.chain.steps}
        plan = []
        for i, s in enumerate(self.plan, 1):
            status = done.get(i) or self.status.get(i, "pending")
            if i > len(self.chain.steps) + 1 and status not in ("pending", "skipped"):
                status = "pending"  # a re-planned rest starts afresh
            plan.append({"number": i, "title": s.title, "status": "error" if status in ("timeout", "died")
                         else status})
        self.ctx.progress(message, plan=plan, iterations=len(self.chain.steps), **data)

    def _drop_unverified(self) -> None:
        """Stopped: keep the prefix of steps that ran ok; the rest of the plan is skipped."""
        kept = 0
        while kept < len(self.chain.steps) and self.chain.steps[kept].status == "ok":
            kept += 1
        self.chain.steps = self.chain.steps[:kept]
        for number in range(kept + 1, len(self.plan) + 1):
            self.status[number] = "skipped"
        self._progress(f"stopped: keeping the {kept} verified step{'s' if kept != 1 else ''}", state="step")

    def _result(self, reason: str) -> SearchResult:
        steps = self.chain.steps
        code = analysis_code(steps)
        last_ok = next((s for s in reversed(steps) if s.status == "ok"), None)
        candidate = Candidate(code=code, steps=[Step(s.number, s.title, s.code) for s in steps],
                              result=last_ok.result if last_ok else None, analysis=list(steps),
                              meta={"reason": reason, "planned": len(self.plan), "replans": self.replans})
        self.stats.iterations = len(steps)
        self.stats.nodes = len(steps)
        self.stats.wall_time_s = time.monotonic() - self.started
        self.ctx.events(Event("candidate", "analysis finished", {"index": 0, "candidate": candidate}))
        return SearchResult(chosen=candidate, candidates=[candidate], stats=self.stats,
                            protections=self.ctx.protections, strategy="analysis", prompt=self.first_prompt,
                            answer=summary(steps, len(self.plan), reason), chain=self.chain)


def analysis_code(steps: Sequence[AnalysisStep]) -> str:
    """The new cells of an analysis as one cell, a ``# Step N:`` block each (edits of cells left out)."""
    return "\n\n".join(f"# Step {s.number}: {s.title}\n{s.code.strip()}" for s in steps if s.cell_id is None)


def summary(steps: Sequence[AnalysisStep], planned: int, reason: str) -> str:
    """The turn's answer in words: what was built and what each step did."""
    ok = sum(1 for s in steps if s.status == "ok")
    head = {"stopped": f"Stopped: {ok} verified step{'s' if ok != 1 else ''} kept of {planned} planned.",
            "step_failed": f"{ok} of {planned} steps ran; step {len(steps)} still fails, so the analysis "
                           "stops there.",
            }.get(reason, f"{ok} step{'s' if ok != 1 else ''}, each run in a kernel copy chained on the one "
                          "before; nothing ran in your kernel.")
    lines = [f"{s.number}. {s.title}" + ("" if s.status == "ok" else f" ({s.status})") for s in steps]
    return "\n".join([head, *lines])
