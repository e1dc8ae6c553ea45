"""The one turn service: every surface starts, reads, lists and stops a turn here.

The sidebar (``POST turns``), an ACP agent (the same REST route), MCP's
``ask_data_agent``, the ``%%agent`` magic of a kernel this server started
(``server.magic_turns``) and Jupyter AI all go through :class:`TurnService`;
the jobs themselves (limits, kernel copies, the worker) are ``server.jobs``'.
A turn is read back only as its events, folded into a ``turn.report.TurnReport``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..search.registry import available_strategies
from ..turn.report import TurnReport
from .job import Job, question
from .models import TurnList, TurnRequestModel, TurnSource, TurnSummary

if TYPE_CHECKING:
    from ..config import Settings
    from ..context.model import NotebookContext
    from ..kernel.host.handle import KernelHandle
    from ..turn import TurnAsk
    from .jobs import JobManager


class TurnService:
    """Starts turns for an owner, waits for them, reports and lists them."""

    def __init__(self, jobs: JobManager) -> None:
        self.jobs = jobs
        self.Rejected = jobs.Rejected

    def start(self, owner: str, request: TurnRequestModel, source: TurnSource, *,
              context: NotebookContext | None = None, agent: str | None = None,
              ask: TurnAsk | None = None, settings: Settings | None = None,
              handle: KernelHandle | None = None) -> Job:
        """A running job for ``request``; ``Rejected`` (status and words) when it cannot start.

        ``context``: the notebook as the caller read it (the magic's kernel history), else the
        request's cells; ``ask``/``settings``/``handle``: the magic's own flags, its ``--model``
        and its kernel, reached through its connection.
        """
        available = available_strategies()
        strategy = ask.strategy if ask is not None and ask.strategy else request.strategy
        if strategy not in available:
            raise self.Rejected(400, f"The {strategy!r} strategy is not available on this server; "
                                     f"choose one of {', '.join(available)}.")
        if context is None:
            from ..context.notebook import from_notebook

            try:
                context = from_notebook(request.notebook(), active_index=request.active_index,
                                        path=request.notebook_path or None)
            except Exception as exc:  # noqa: BLE001 -- cells from a client: any failure to read them is a 400
                raise self.Rejected(400, f"Could not read the notebook cells: {exc}") from None
        job = self.jobs.start(owner, request, context, ask=ask, settings=settings, handle=handle)
        job.source = source
        job.agent = agent or request.agent
        return job

    def get(self, job_id: str, owner: str) -> Job | None:
        return self.jobs.get(job_id, owner)

    async def cancel(self, job: Job, message: str = "The turn was cancelled.") -> None:
        await self.jobs.cancel(job, message)

    async def finish(self, job: Job) -> None:
        await self.jobs.finish(job)

    @staticmethod
    def report(job: Job) -> TurnReport:
        """What the job's events say so far."""
        return TurnReport.of(job.events)

    async def wait(self, job: Job, *, timeout: float, doing: Callable[[str], None] | None = None,
                   timeout_message: str = "The turn took too long.") -> TurnReport:
        """The job's report once it ends (cancelled after ``timeout`` s); ``doing`` hears each
        progress line as it comes."""
        done = asyncio.Event()

        def listen(event: dict) -> None:
            if event["type"] in ("done", "error"):
                done.set()
            elif doing is not None and event["type"] in ("progress", "candidate") and event.get("message"):
                doing(str(event["message"]))

        missed = job.subscribe(listen)
        if job.finished or any(e["type"] in ("done", "error") for e in missed):
            done.set()
        try:
            await asyncio.wait_for(done.wait(), timeout)
        except asyncio.TimeoutError:
            await self.jobs.cancel(job, timeout_message)
        finally:
            job.unsubscribe(listen)
        return self.report(job)

    def list(self, owner: str, notebook_path: str, *, also: Callable[[Job], bool] = lambda _: False) -> TurnList:
        """The owner's kept turns on ``notebook_path``, newest first (``also``: others' turns the
        caller may see, e.g. a kernel's ``%%agent`` turns for a user who may run code in it)."""
        self.jobs.prune()
        path = notebook_path.strip().lstrip("/")
        mine = [j for j in self.jobs.jobs.values()
                if (j.owner == owner or also(j)) and (j.request.notebook_path or "").lstrip("/") == path]
        mine.sort(key=lambda j: j.created, reverse=True)
        return TurnList(turns=[summary(j) for j in mine])


def summary(job: Job) -> TurnSummary:
    return TurnSummary(job_id=job.id, turn_id=job.turn_id, source=job.source, agent=job.agent,  # type: ignore[arg-type]
                       strategy=job.spec.strategy, status=job.status, intent=question(job.request)[:500],  # type: ignore[arg-type]
                       notebook_path=job.request.notebook_path or "", started=job.created,
                       finished=job.finished_at, model=job.model)

