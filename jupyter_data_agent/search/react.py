"""``react``: one multi-turn trajectory — Thought, Action (a code cell), Observation.

The model sees JUPITER's task prompt (question, constraints, output format,
local files; in the product also the notebook and its DataFrames) and
answers one step at a time at the one-candidate temperature; each action runs in a child
copy forked from the previous step's copy, so state accumulates like in a
notebook while every earlier state stays intact (for the UI, and for a
search that wants to branch later). Past the live-process cap the newest
copy is reused instead of forked. It ends with ``Final Answer:`` (or
JUPITER's ``Formatted answer:``) or after ``ReactOptions.max_turns`` turns.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any

from ..kernel.results import ExecResult
from ..kernel.tree import SnapshotError
from ..llm.base import ImagePart
from ..prompts.react import (
    INVALID_OBSERVATION,
    STOP,
    fit_messages,
    format_observation,
    history_messages,
    parse_reply,
    solution_cell,
    to_prompt,
)
from .base import (
    Cancelled,
    Candidate,
    Event,
    RunContext,
    SearchResult,
    SearchStats,
    TraceStep,
    TurnRequest,
    copy_failed,
)
from .generate import (
    generate_one,
    jupiter_task,
    options,
    prompt_text,
    result_images,
    sampling,
    show_latest_images,
    turn_chat,
)
from .options import ReactOptions
from .trajectories import TrajectoryRecord, path_histories, write_jsonl

log = logging.getLogger(__name__)


def exec_cancellable(snapshot: Any, code: str, ctx: RunContext, pool) -> ExecResult:
    """Run a cell while watching the cancel flag: cancelling kills the copy at once."""
    fut = pool.submit(snapshot.exec, code)
    while True:
        try:
            return fut.result(timeout=0.05)
        except concurrent.futures.TimeoutError:
            if ctx.cancel.is_set():
                snapshot.close()
                raise Cancelled("the search was cancelled") from None


class ReactStrategy:
    """One trajectory; ``reward_fn(answer)`` and ``ReactOptions.trajectory_path``
    export it as training records (one visit per step, Q = the reward);
    ``overrides`` replace fields of the request's ``ReactOptions``."""

    name = "react"

    def __init__(self, *, reward_fn=None, **overrides: Any) -> None:
        self.reward_fn = reward_fn
        self.overrides = overrides

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        if ctx.executor is None:
            raise ValueError("The react strategy runs every step in a kernel copy, and none is "
                             "available here (--no-exec, or the kernel cannot be forked).")
        opts = options(request, ReactOptions, **self.overrides)
        started = time.monotonic()
        task = jupiter_task(request, ctx.backend)
        chat = turn_chat(ctx.backend, request.prompt)
        stats = SearchStats()
        tree = getattr(ctx.executor, "tree", None)
        window = opts.max_copies or max(1, (getattr(tree, "max_live", 10) or 10) - 2)
        lineage: list[Any] = []
        current = ctx.executor
        steps: list[TraceStep] = []
        history: list[tuple[str, str | None]] = []
        results: list[ExecResult | None] = []
        latest_images: tuple[ImagePart, ...] = ()  # the plots of the step just run (vision models)
        answer: str | None = None
        first_prompt = ""
        raw_last = ""
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jda-react")
        try:
            for turn in range(1, opts.max_turns + 1):
                ctx.check_cancelled()
                prompt = to_prompt(show_latest_images(fit_messages(history_messages(task, history),
                                                                   ctx.backend.count_tokens,
                                                                   request.prompt.max_prompt_tokens),
                                                      latest_images), chat)
                first_prompt = first_prompt or prompt_text(prompt)
                ctx.progress(f"step {turn}: asking the model", iterations=turn, nodes=len(lineage),
                             turn=turn)
                params = sampling(request, 1, stop=STOP, seed_offset=turn)
                raw_last = generate_one(ctx, prompt, params, stats).text
                stats.iterations = turn
                ctx.check_cancelled()
                p = parse_reply(raw_last, chat)
                if p.kind == "answer":
                    steps.append(TraceStep(p.thought, status="answer", answer=p.answer))
                    results.append(None)
                    history.append((p.message(), None))
                    answer = p.answer
                    break
                if p.kind == "invalid":
                    steps.append(TraceStep(p.thought, status="invalid", output=INVALID_OBSERVATION))
                    results.append(None)
                    history.append((p.message(), INVALID_OBSERVATION))
                    latest_images = ()
                    continue
                ctx.progress(f"step {turn}: running the action in a kernel copy", iterations=turn,
                             nodes=len(lineage), turn=turn)
                try:
                    if current is ctx.executor or len(lineage) < window:
                        current = current.fork()
                        lineage.append(current)
                    result = exec_cancellable(current, p.code, ctx, pool)
                except SnapshotError as exc:  # the copy it came from broke the protocol: this step fails
                    result = copy_failed(exc)
                stats.executions += 1
                status = result.status if result.status in ("ok", "error", "timeout") else "died"
                obs = format_observation(result, opts.observation_chars)
                latest_images = result_images(result, request, ctx.backend)
                steps.append(TraceStep(p.thought, p.code, obs, status))
                results.append(result)
                history.append((p.message(), obs))
                if status in ("timeout", "died") and current is not ctx.executor:
                    # the copy was killed (or could not be forked from): go on from its parent
                    if current in lineage:
                        lineage.remove(current)
                    current.close()
                    current = lineage[-1] if lineage else ctx.executor
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            if lineage:
                try:
                    lineage[0].close()  # the whole lineage: each copy is the next one's parent
                except Exception:  # the turn's answer stands; the tree closes what is left
                    log.warning("closing the agent's copies failed", exc_info=True)
        ok = [(s, r) for s, r in zip(steps, results) if s.status == "ok"]
        code, cell_steps = solution_cell([(s.thought, s.code) for s, _ in ok], answer)
        candidate = Candidate(
            code=code,
            steps=cell_steps,
            result=ok[-1][1] if ok else None,
            raw=raw_last,
            trace=steps,
            meta={"answer": answer, "turns": stats.iterations,
                  "messages": history_messages(task, history),
                  "reason": "answer" if answer is not None else "turn_limit"},
        )
        stats.nodes = len(steps)
        stats.wall_time_s = time.monotonic() - started
        if self.reward_fn is not None:
            candidate.meta["reward"] = float(self.reward_fn(answer))
        if opts.trajectory_path:
            write_jsonl(opts.trajectory_path, records(candidate, request.task.task_id))
        ctx.events(Event("candidate", "trajectory finished", {"index": 0, "candidate": candidate}))
        return SearchResult(chosen=candidate, candidates=[candidate], stats=stats,
                            protections=ctx.protections, strategy=self.name, prompt=first_prompt,
                            answer=answer)


def records(candidate: Candidate, task_id: object = None) -> list[TrajectoryRecord]:
    """The trajectory's nodes; without a reward they carry no visits (no target yet)."""
    reward = candidate.meta.get("reward")
    histories = path_histories(candidate.meta["messages"])
    last = len(histories)
    return [TrajectoryRecord(
        messages=hist, depth=d, visits=0 if reward is None else 1,
        value_sum=0.0 if reward is None else reward, terminal=d == last and step.status == "answer",
        terminal_reward=reward if d == last else None, final_answer=step.answer,
        node_id=f"s{d}", parent_id=f"s{d - 1}" if d > 1 else None,
        task_id=None if task_id is None else str(task_id), status=step.status,
        source="react") for d, (hist, step) in enumerate(zip(histories, candidate.trace), 1)]
