"""Scheduling turn jobs: one search per ``POST turns``, run off the event loop.

The manager admits a job (per-user and server-wide limits), picks the
handle on the notebook's kernel (``server.kernels``: local, or over the
kernel channel for a gateway's kernel), awaits ``turn.aprepare`` on the
loop and runs the turn in a worker thread; the job (``server/job.py``) holds its event log. Cancelling (or stopping the
server) ends every snapshot process the job started before it answers.
The worker reaches the loop through ``loop.call_soon_threadsafe``, which
keeps the strategy's events in order ahead of the final ``done``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..config import Settings
from ..context.model import NotebookContext
from ..kernel.host.handle import KernelHandle, NoKernel
from ..llm.base import BackendError
from ..store.decisions import TurnOutcome
from ..turn import TurnAsk, resolve, secrets_scrubber
from .fair import FairSlots
from .job import SERVER_OWNER, Job, model_intent
from .kernels import KernelHandles
from .model_progress import loading_text, preparing_text, waiting_text
from .models import TurnRequestModel
from .threads import in_thread

log = logging.getLogger(__name__)

MAX_DECIDABLE_TURNS = 500  # done turns a late accept/reject can still be recorded against


@dataclass
class JobLimits:
    """Server-side knobs (traitlets on the extension app feed this)."""

    max_concurrent_jobs: int = 2
    max_pending_jobs: int = 16
    max_jobs_per_user: int = 4
    # Running at once per user; None: one less than max_concurrent_jobs (at least 1).
    max_running_jobs_per_user: int | None = None
    max_snapshot_processes: int = 16
    job_retention_s: float = 900.0
    max_retained_jobs: int = 200
    kernel_wait_notice_s: float = 1.0
    kernel_wait_timeout_s: float = 600.0
    schema_time_limit_s: float = 2.0
    snapshot_timeout_s: float = 60.0
    # A done analysis keeps its chain of copies for its review: edits re-run later steps there.
    analysis_keep_s: float = 900.0
    max_kept_analyses_per_user: int = 2


class _Rejected(Exception):
    """A request the manager refuses (becomes an HTTP error)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class JobManager:
    """All jobs of this server; bounded in concurrency and retention."""

    Rejected = _Rejected

    def __init__(self, *, settings: Settings, limits: JobLimits, kernel_manager: Any,
                 root_dir: str | None, authorizer_log: logging.Logger | None = None,
                 secrets: Iterable[str] = ()) -> None:
        self.settings = settings
        self.limits = limits
        self.kernel_manager = kernel_manager
        self.root_dir = root_dir
        self.log = authorizer_log or log
        # The model key and whatever else the server holds (its token): never sent out.
        self.scrub = secrets_scrubber(settings.api_key, *secrets)
        self.jobs: dict[str, Job] = {}
        self.done_turns: dict[str, TurnOutcome] = {}  # oldest first, past the jobs' retention
        # Fair between users: one user's queued turns never hold up another's.
        self._slots = FairSlots(max(1, limits.max_concurrent_jobs), limits.max_running_jobs_per_user,
                                exempt=frozenset({SERVER_OWNER}))
        # Search threads, including those of cancelled turns still stuck in a model call.
        self._workers: dict[threading.Thread, Job] = {}
        self._closing = False
        # The model service (server/model_service.py), when it runs: its line is the turns' too.
        self.service: Any = None
        # The kernels' warm roots (``server.warm_roots``, the tries' manager's): turns fork from them.
        self.warm_roots: Any = None

    # -- public API ---------------------------------------------------------------
    def start(self, owner: str, request: TurnRequestModel, context: NotebookContext, *,
              ask: TurnAsk | None = None, settings: Settings | None = None,
              handle: KernelHandle | None = None) -> Job:
        """Create the job and schedule it on the running loop (``server.turns`` calls it).

        ``ask``: the turn as asked, when the request's fields do not carry it all (the magic's
        flags); ``settings``: the model settings the caller resolved (the magic's ``--model``);
        ``handle``: the kernel, when the caller reaches it itself (the magic's connection).
        """
        if self._closing:
            raise _Rejected(503, "The server is shutting down.")
        self.prune()
        # Per user first: one user's turns never fill the server for the others.
        mine = sum(1 for j in self.jobs.values() if not j.finished and j.owner == owner)
        if mine >= self.limits.max_jobs_per_user:
            raise _Rejected(429, f"You have {mine} turns running or queued (at most "
                                 f"{self.limits.max_jobs_per_user} per user); try again when one "
                                 f"has finished, or cancel one.")
        stuck_mine = sum(1 for t, j in self._workers.items()
                         if j.finished and t.is_alive() and j.owner == owner)
        if stuck_mine >= self.limits.max_jobs_per_user:
            raise _Rejected(429, f"{stuck_mine} of your cancelled turns are still waiting for the "
                                 f"model endpoint to answer; try again in a moment.")
        active = sum(1 for j in self.jobs.values() if not j.finished)
        if active >= self.limits.max_concurrent_jobs + self.limits.max_pending_jobs:
            raise _Rejected(429, f"{active} turns are already running or queued; try again when "
                                 f"one has finished.")
        stuck = sum(1 for t, j in self._workers.items() if j.finished and t.is_alive())
        if stuck >= self.limits.max_concurrent_jobs + self.limits.max_pending_jobs:
            raise _Rejected(429, f"{stuck} cancelled turns are still waiting for the model "
                                 f"endpoint to answer; try again in a moment.")
        offered = self.settings.offered_models
        if settings is None and request.model and request.model not in offered:
            raise _Rejected(400, f"The model {request.model!r} is not offered by this server; "
                                 f"choose one of: {', '.join(offered) or 'none configured'} "
                                 "(c.DataAgent.model and c.DataAgent.models).")
        try:
            spec = resolve(settings or self.settings, ask or TurnAsk(
                intent=model_intent(request), strategy=request.strategy, samples=request.options.samples,
                budget=request.options.budget, temperature=request.options.temperature,
                execute=request.options.use_live_state,
                no_exec_reason="live kernel state is off for this turn"))
        except ValueError as exc:
            raise _Rejected(400, str(exc)) from None
        job = Job(owner, request, spec, context, self.scrub)
        job.given_handle = handle
        if settings is not None:
            job.settings = settings
        elif request.model and request.model != self.settings.model:
            job.settings = replace(self.settings, model=request.model)
        else:
            job.settings = self.settings
        self.jobs[job.id] = job
        job.task = asyncio.ensure_future(self._run(job))
        return job

    def get(self, job_id: str, owner: str) -> Job | None:
        """The job if it exists and belongs to ``owner`` (else None: a 404, no hint)."""
        self.prune()
        job = self.jobs.get(job_id)
        return job if job is not None and job.owner == owner else None

    async def cancel(self, job: Job, message: str = "The turn was cancelled.") -> None:
        """Stop the job; returns once every snapshot process it started has ended."""
        if job.finished:
            return
        job.cancel_event.set()
        job.finish("cancelled", "error", message, {"state": "cancelled"})
        # The worker thread of a running search cannot be interrupted (it may sit
        # in a model call for up to request_timeout); it is abandoned: it sees the
        # cancel flag at its next step and its events are dropped. Cancelling the
        # task releases the job's slot now, so a queued turn starts at once. While
        # the kernel is read and copied the task is waited for instead (the
        # preparation sees the flag within a second, or once its fork ends), so
        # the copies it made can be closed.
        if job.task is not None and job.phase != "preparing":
            job.task.cancel()
        try:
            await asyncio.wait_for(job.prepared.wait(), self.limits.snapshot_timeout_s + 10)
        except asyncio.TimeoutError:
            self.log.warning("jupyter_data_agent: snapshot creation of job %s did not end", job.id)
        await self._close_tree(job)

    async def finish(self, job: Job) -> None:
        """Stop: an analysis that is running ends with its verified steps (a normal ``done``);
        any other turn, or one not yet running its strategy, is cancelled."""
        if job.finished:
            return
        if job.spec.strategy == "analysis" and job.phase == "searching":
            job.finish_event.set()
            job.progress("Stopping: keeping the steps verified so far.", state="step")
            return
        await self.cancel(job, "The turn was stopped.")

    async def revise(self, turn_id: str, owner: str, from_step: int, steps: list) -> list:
        """Steps ``from_step``.. of a done analysis replaced and run again in its kept copies."""
        from ..search.analysis import StepCode, analysis_code

        job = next((j for j in self.jobs.values() if j.turn_id == turn_id and j.owner == owner), None)
        if job is None or job.outcome is None or job.spec.strategy != "analysis":
            raise _Rejected(404, "No such analysis (it may have expired).")
        chain = job.chain
        if chain is None or chain.closed:
            minutes = self.limits.analysis_keep_s / 60
            raise _Rejected(409, f"The kernel copies of this analysis were closed (they are kept "
                                 f"{minutes:g} minutes after the turn, for at most "
                                 f"{self.limits.max_kept_analyses_per_user} analyses); ask again to "
                                 "build it anew. Your edits in the notebook are kept.")
        if not 1 <= from_step <= len(chain.steps) + 1:
            raise _Rejected(400, f"from_step must be between 1 and {len(chain.steps) + 1}; got {from_step}.")
        job.chain_used = time.monotonic()
        edits = [StepCode(code=s.code, cell_id=s.cell_id, title=s.title, explanation=s.explanation)
                 for s in steps]
        try:
            new = await asyncio.to_thread(chain.revise, from_step, edits)
        except RuntimeError as exc:  # closed meanwhile
            raise _Rejected(409, f"The kernel copies of this analysis were closed: {exc}.") from None
        job.chain_used = time.monotonic()
        candidate = job.outcome.candidates[0]
        candidate["analysis"] = [s.to_json() for s in chain.steps]
        candidate["code"] = analysis_code(chain.steps)
        return new

    async def shutdown(self) -> None:
        """Cancel every running job and close every snapshot tree (no orphans)."""
        self._closing = True
        running = [j for j in self.jobs.values() if not j.finished]
        await asyncio.gather(*(self.cancel(j, "The server is shutting down.") for j in running),
                             return_exceptions=True)
        # Trees of jobs that finished but whose worker is still unwinding.
        await asyncio.gather(*(self._close_tree(j) for j in self.jobs.values()),
                             return_exceptions=True)
        # Worker threads are daemons: one stuck in a model call does not hold up the exit.
        if running:
            self.log.info("jupyter_data_agent: cancelled %d running turn(s) and closed their "
                          "kernel copies", len(running))

    def prune(self) -> None:
        """Forget finished jobs past their retention, oldest first.

        A done turn's result outlives its events (``MAX_DECIDABLE_TURNS`` of
        them): a user may accept or reject a suggestion long after it arrived.
        """
        now = time.time()
        ttl = self.limits.job_retention_s
        finished = sorted((j for j in self.jobs.values() if j.finished), key=lambda j: j.finished_at or 0)
        excess = len(self.jobs) - self.limits.max_retained_jobs
        for i, job in enumerate(finished):
            if i < excess or (job.finished_at is not None and now - job.finished_at > ttl):
                del self.jobs[job.id]
                if job.chain is not None:  # an analysis's copies go with it
                    asyncio.ensure_future(self._close_tree(job))
                if job.outcome is not None:
                    self.done_turns[job.turn_id] = job.outcome
        while len(self.done_turns) > MAX_DECIDABLE_TURNS:
            self.done_turns.pop(next(iter(self.done_turns)))

    def find_turn(self, turn_id: str, owner: str) -> TurnOutcome | None:
        """What the done turn ``turn_id`` produced, if ``owner`` started it."""
        self.prune()
        job = next((j for j in self.jobs.values() if j.turn_id == turn_id), None)
        outcome = job.outcome if job is not None else self.done_turns.get(turn_id)
        return outcome if outcome is not None and outcome.owner == owner else None

    # -- the job ------------------------------------------------------------------
    async def _run(self, job: Job) -> None:
        from ..search import Cancelled

        try:
            if self._slots.would_wait(job.owner):
                mine = self._slots.held.get(job.owner, 0)
                job.progress("Waiting for your other turn to finish." if mine >= self._slots.cap(job.owner)
                             else "Waiting for another turn to finish.", state="queued")
            async with self._slots.slot(job.owner):
                if job.finished:
                    return
                await self._run_in_slot(job)
        except asyncio.CancelledError:  # unless cancel() finished the job: the loop is going away
            job.finish("cancelled", "error", "The turn was interrupted.", {"state": "cancelled"})
        except Cancelled:
            job.finish("cancelled", "error", "The turn was cancelled.", {"state": "cancelled"})
        except Exception as exc:  # noqa: BLE001 -- whatever failed, the turn ends with it in words (and logged)
            if not job.finished:
                job.finish("error", "error", self._error_message(exc), {"state": "error"})
                self.log.warning("jupyter_data_agent: turn %s failed: %s", job.id,
                                 self.scrub.text("".join(traceback.format_exception(exc))))
        finally:
            if job.chain is not None and job.status == "done" and not self._closing:
                self._keep(job)
            else:
                await self._close_tree(job)

    def _keep(self, job: Job) -> None:
        """Keep a done analysis's copies for its review: closed when idle for ``analysis_keep_s``,
        beyond ``max_kept_analyses_per_user`` (the oldest first), when pruned, at shutdown."""
        job.chain_used = time.monotonic()
        kept = sorted((j for j in self.jobs.values() if j.owner == job.owner and j.chain is not None
                       and j is not job), key=lambda j: j.chain_used)
        for old in kept[:max(0, len(kept) + 1 - self.limits.max_kept_analyses_per_user)]:
            asyncio.ensure_future(self._close_tree(old))
        asyncio.get_running_loop().call_later(self.limits.analysis_keep_s, self._expire, job)

    def _expire(self, job: Job) -> None:
        if job.chain is None:
            return
        idle = time.monotonic() - job.chain_used
        if idle >= self.limits.analysis_keep_s:
            asyncio.ensure_future(self._close_tree(job))
        else:
            asyncio.get_running_loop().call_later(self.limits.analysis_keep_s - idle, self._expire, job)

    async def _run_in_slot(self, job: Job) -> None:
        from ..llm.factory import create_backend
        from ..turn import aprepare, run_turn

        spec = job.spec
        settings = job.settings or self.settings  # with the model the turn picked
        job.phase = "loading_model"
        job.progress("Preparing the model.", state="loading_model", backend=settings.backend)
        backend = await asyncio.to_thread(create_backend, settings)
        if backend.needs_loading:
            # A local model loads on its first use (or a warm-up loads it now: this waits for
            # that load, never counted as a turn ahead): here, where the turn says so.
            job.progress(f"{loading_text(backend)}.", state="loading_model", backend=settings.backend)
            await asyncio.to_thread(backend.load)
        job.model = backend.model
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def sink(event: Any) -> None:
            if job.finished:
                return
            if threading.get_ident() == loop_thread:  # the preparation, awaited here: in order, now
                job.strategy_event(event)
                return
            rendered = job.render(event.kind, event.message, event.data)  # in the worker, not on the loop
            with contextlib.suppress(RuntimeError):  # the loop is gone (server stopped)
                loop.call_soon_threadsafe(job.strategy_event, event, rendered)

        # The kernel's state and copies: awaited here, on the loop (it may wait for a busy kernel).
        job.phase = "preparing"
        job.prepared.clear()
        try:
            job.handle = handle = self._through_warm_root(job, await self._kernel_handle(job), sink)
            inputs = await aprepare(
                spec, job.context, handle, events=sink, cancel=job.cancel_event, give_up=job.skip_kernel,
                max_live=self.limits.max_snapshot_processes, redact=self.scrub.json)
            job.copies = inputs.copies
            job.tree = inputs.copies.tree
        finally:
            job.prepared.set()
        if job.finished:  # cancelled meanwhile: cancel() closes the tree it was waiting for
            return

        if self.service is not None:  # one line for the model, with the magic's turns
            from ..search.base import Event

            def waiting(ahead: int) -> None:
                sink(Event("progress", waiting_text(ahead), {"state": "waiting_model", "queue": ahead}))

            def started(prompt: Any, inner: Any = backend) -> None:
                work = inner.prompt_work(prompt)
                text = preparing_text(work) if work is not None else None
                if work is not None and text is not None:
                    sink(Event("progress", text, {"state": "prompt", "prompt_tokens": work.tokens}))

            backend = self.service.queued(settings, backend, waiting, job.cancel_event, started)

        job.phase = "searching"
        job.progress(f"Running the {spec.strategy} strategy.", state="searching",
                     strategy=spec.strategy)
        result = await self._in_worker(job, lambda: job.prerender(run_turn(
            spec, inputs.context, backend, schema=inputs.schema, schema_cuts=inputs.schema_cuts,
            copies=inputs.copies, events=sink, cancel=job.cancel_event, finish=job.finish_event,
            prose_answers=True)))
        job.chain = getattr(result, "chain", None)
        if job.finished:
            return
        result.stats.transport = inputs.transport
        job.complete(result, inputs.copies.confinement)

    def _in_worker(self, job: Job, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """``fn`` in a daemon thread of its own (``server.threads``), noted as the job's while it
        runs: a cancelled turn's thread stuck in a model call still counts against its owner."""
        future, thread = in_thread(fn, *args, name=f"jda-turn-{job.id[:8]}",
                                   ended=lambda t: self._workers.pop(t, None))
        self._workers[thread] = job
        thread.start()
        return future

    # -- the kernel ------------------------------------------------------------------
    async def _kernel_handle(self, job: Job) -> KernelHandle:
        """The handle ``turn.aprepare`` reads the notebook's kernel through (``server.kernels``)."""
        request = job.request
        if job.given_handle is not None:
            return job.given_handle
        if not request.options.use_live_state:
            return NoKernel("live kernel state is off for this turn", kind="log", state="no_live_state",
                            message="Live kernel state is off for this turn: the model sees the notebook "
                                    "text only and candidates are not run before you see them.")
        return await self.kernels.open(request.kernel_id, request.notebook_path)

    def _through_warm_root(self, job: Job, handle: KernelHandle, sink: Callable[[Any], None]) -> KernelHandle:
        """The turn's handle, its copies forked from the kernel's warm root (``server.warm_turns``)
        where the server keeps warm roots and the turn's copy policy is the tries' (the roots');
        ``options.fresh_state``: never the state before a running cell (it waits for the cell)."""
        request, policy = job.request, job.spec.copies
        if (self.warm_roots is None or job.given_handle is not None or isinstance(handle, NoKernel)
                or not request.kernel_id or policy.mode not in ("auto", "fork")
                or policy.confinement != self.settings.confinement):
            return handle
        from ..kernel.results import Limits
        from ..search.base import Event
        from .warm_turns import WarmRootHandle

        def say(message: str, age: dict) -> None:
            sink(Event("progress", message, {"state": "state_age", "state_age": age}))

        return WarmRootHandle(handle, self.warm_roots, request.kernel_id, request.notebook_path,
                              limits=Limits.from_json(self.settings.snapshot_limits), say=say,
                              fresh=request.options.fresh_state)

    @property
    def kernels(self) -> KernelHandles:
        """Handles on this server's kernels by id (``server.kernels``), with these limits' waits:
        turns', tries', and the variables', inline completion's and MCP's readers'."""
        limits = self.limits
        return KernelHandles(self.kernel_manager, self.root_dir, wait_notice_s=limits.kernel_wait_notice_s,
                             wait_timeout_s=limits.kernel_wait_timeout_s, fork_timeout_s=limits.snapshot_timeout_s)

    async def _close_tree(self, job: Job) -> None:
        """Close the job's tree, then its kernel handle; every caller waits for the same close."""
        if job.close_task is None:
            tree, job.tree = job.tree, None
            handle, job.handle = job.handle, None
            chain, job.chain = job.chain, None
            if tree is None and handle is None and chain is None:
                return
            job.close_task = asyncio.ensure_future(asyncio.to_thread(_close_everything, tree, handle, chain))
        try:
            await asyncio.shield(job.close_task)
        except Exception:
            self.log.warning("jupyter_data_agent: closing the kernel copies of job %s failed",
                             job.id, exc_info=True)

    def _error_message(self, exc: BaseException) -> str:
        """What the user sees: actionable (``Job.emit`` scrubs the secrets)."""
        from ..prompts import UnparsableOutput

        if isinstance(exc, (BackendError, UnparsableOutput)):
            return str(exc)
        return f"The turn failed: {type(exc).__name__}: {exc}"


def _close_everything(tree: Any, handle: KernelHandle | None, chain: Any = None) -> None:
    """Close an analysis's kept chain, the tree, then any copy a racing fork attached after the
    close, then the handle (the copies over the kernel channel travel through its client)."""
    try:
        if chain is not None:
            chain.close()
        if tree is not None:
            tree.close()
            for node in list(tree.live()):
                try:
                    node.close()
                except Exception:  # one copy's failure must not leave the others running
                    log.warning("closing a kernel copy failed", exc_info=True)
    finally:
        if handle is not None:
            handle.close()
