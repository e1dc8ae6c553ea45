"""One turn's job: its request, the resolved turn, and the ordered event log it streams.

Everything the job says goes into one ordered event list, so a websocket
that connects late, or a client that polls, sees exactly the same stream.
Events are scrubbed of the configured secrets as they go out. Threading rule:
job state and events are only touched on the event loop; the worker thread
reaches them through ``loop.call_soon_threadsafe`` (``jobs.JobManager``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..config import Settings
from ..context.model import NotebookContext
from ..context.turns import new_turn_id
from ..kernel.host.handle import KernelHandle
from ..kernel.host.policy import Confinement
from ..kernel.tree import CopyTree
from ..llm.scrub import Scrubber
from ..prompts.edit import edit_intent, edit_question
from ..store.decisions import TurnOutcome
from ..turn import Copies, TurnSpec
from .models import API_VERSION, TurnRequestModel

log = logging.getLogger(__name__)

TERMINAL = ("done", "error", "cancelled")
#: The one principal of the stock token/password providers (``handlers.AgentMixin.job_owner``).
SERVER_OWNER = "<server-owner>"
#: The owner prefix of a kernel's ``%%agent`` turns where users are told apart (``server.magic_turns``).
KERNEL_OWNER = "kernel:"


def question(request: TurnRequestModel) -> str:
    """The turn's question as the user would say it (stored, shown, recorded with decisions)."""
    edit = request.edit
    return request.intent or (edit_question(edit.kind, edit.instruction) if edit else "")


def model_intent(request: TurnRequestModel) -> str:
    """What the model is asked: the user's words, or a Fix/Improve written from its typed cell."""
    edit = request.edit
    if edit is None:
        return request.intent
    error = edit.error
    return edit_intent(edit.kind, instruction=edit.instruction or request.intent,
                       ename=error.ename if error else "", evalue=error.evalue if error else "")


class Job:
    """One turn: its request, its events and everything it started."""

    def __init__(self, owner: str, request: TurnRequestModel, spec: TurnSpec,
                 context: NotebookContext, scrub: Scrubber) -> None:
        self.id = uuid.uuid4().hex
        self.turn_id = new_turn_id()
        self.owner = owner
        self.request = request
        self.spec = spec  # the resolved turn (turn.resolve), fixed when the job is accepted
        self.context = context
        self.status = "running"
        self.phase = "queued"
        self.finished_at: float | None = None
        self.events: list[dict] = []
        self.listeners: list[Callable[[dict], None]] = []
        self.cancel_event = threading.Event()
        # Set by ``POST jobs/<id>/finish``: an analysis ends with its verified steps.
        self.finish_event = threading.Event()
        # A done analysis's copies, kept for its review (``search.analysis.AnalysisChain``).
        self.chain: Any = None
        self.chain_used = 0.0  # time.monotonic() of the chain's last use
        # Set by ``POST jobs/<id>/no-kernel``: stop waiting for a busy kernel (read by a worker).
        self.skip_kernel = threading.Event()
        self.task: asyncio.Task | None = None
        self.handle: KernelHandle | None = None  # on the notebook's kernel, while the turn runs
        self.given_handle: KernelHandle | None = None  # the caller's own (the magic's kernel)
        self.copies: Copies | None = None  # once turn.prepare has run
        self.tree: CopyTree | None = None  # the copies' tree while one is open
        self.close_task: asyncio.Future | None = None  # closing the tree, once started
        self.prepared = asyncio.Event()  # set once no kernel reading or copying is in flight
        self.prepared.set()
        self._scrub = scrub
        self._streamed: list[Any] = []  # (index, Candidate) pairs already sent as events
        self._rendered: dict[int, dict] = {}  # id(Candidate) -> its event body, scrubbed off the loop
        self.created = time.time()
        self.source = "sidebar"  # where it was asked (``TurnSource``), set by ``server.turns``
        self.agent: str | None = None  # the MCP client's or ACP agent's name
        self.outcome: TurnOutcome | None = None  # once done: what a decision on this turn records
        self.model = ""  # the model that answered
        self.settings: Settings | None = None  # the server's, with the turn's model (JobManager.start)

    # -- events (event loop only) -------------------------------------------
    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def render(self, type_: str, message: str = "", data: dict | None = None) -> dict:
        """An event's body as plain JSON, secrets removed: any thread may call it,
        and the worker does for what the search sends (candidates with their
        outputs are large: scrubbing them must not stall the event loop)."""
        return self._scrub.json({"type": type_, "message": message, "data": data or {}})

    def emit(self, type_: str, message: str = "", data: dict | None = None, *,
             rendered: dict | None = None) -> dict | None:
        """Validate, append and broadcast one event; nothing is added after a terminal one.

        ``data`` may hold the result dataclasses: the scrubber writes them as
        their ``to_json``, secrets removed (``render``; ``rendered`` when that
        was done off the loop). Every event then goes through the
        wire model (``turn.events.JobEvent``); one the contract does not allow
        is never sent: the turn ends with an error event that says so, and
        this raises ``MalformedEvent`` (a bug in the server fails loudly).
        """
        from pydantic import ValidationError

        from ..search.options import short_errors
        from ..turn.events import MalformedEvent, validate_event

        if self.finished:
            return None
        body = rendered if rendered is not None else self.render(type_, message, data)
        raw = {"version": API_VERSION, "job_id": self.id, "seq": len(self.events) + 1, **body}
        try:
            event = validate_event(raw)
        except ValidationError as exc:
            detail = f"a malformed {type_!r} event ({short_errors(exc, empty=type_)})"
            self._refuse(detail)
            raise MalformedEvent(f"job {self.id}: {detail}") from exc
        self.events.append(event)
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:  # a broken socket must not break the job
                log.debug("event listener failed", exc_info=True)
        return event

    def _refuse(self, detail: str) -> None:
        """End the turn on a server bug: an error event instead of what was refused."""
        log.error("jupyter_data_agent: turn %s refused to send %s", self.id, detail)
        self.cancel_event.set()  # the search has nowhere to send its results
        self.finish("error", "error", f"The server produced {detail}; this is a bug in "
                                      f"jupyter-data-agent.", {"state": "error"})

    def progress(self, message: str, **data: Any) -> None:
        self.emit("progress", message, data)

    def log(self, message: str, **data: Any) -> None:
        self.emit("log", message, data)

    def finish(self, status: str, type_: str, message: str, data: dict) -> None:
        if self.finished:
            return
        self.emit(type_, message, data)
        self.status = status
        self.finished_at = time.time()

    def events_after(self, after: int) -> list[dict]:
        return [e for e in self.events if e["seq"] > after]

    def subscribe(self, listener: Callable[[dict], None], after: int = 0) -> list[dict]:
        """Register ``listener`` and return the events it missed; atomic on the loop."""
        if not self.finished:
            self.listeners.append(listener)
        return self.events_after(after)

    def unsubscribe(self, listener: Callable[[dict], None]) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    # -- strategy events --------------------------------------------------------
    def strategy_event(self, event: Any, rendered: dict | None = None) -> None:
        """Forward a search ``Event`` (``search.base.Event``) as the wire event of its kind;
        ``rendered``: its body, scrubbed by the worker (``render``)."""
        if event.kind == "candidate":
            if rendered is not None:
                self._rendered[id(event.data["candidate"])] = rendered
            self._send_candidate(event.data["candidate"], event.data.get("index"), event.message)
        else:
            self.emit(event.kind, event.message, event.data, rendered=rendered)

    def prerender(self, result: Any) -> Any:
        """In the worker: scrub the candidates ``complete`` will send that no event carried."""
        for candidate in result.candidates:
            if id(candidate) not in self._rendered:
                self._rendered[id(candidate)] = self.render("candidate", "", {"candidate": candidate})
        return result

    def _send_candidate(self, candidate: Any, index: Any, message: str = "") -> None:
        """One ``candidate`` event; each candidate once, each index once.

        ``self._streamed`` holds ``(index, candidate)`` of every one sent, so
        ``done`` can name the chosen one by the index the browser has.
        """
        if any(candidate is c for _, c in self._streamed):
            return
        taken = {i for i, _ in self._streamed}
        if not isinstance(index, int) or isinstance(index, bool) or index < 0 or index in taken:
            index = next(i for i in range(len(taken) + 1) if i not in taken)
        self._streamed.append((index, candidate))
        message = message or f"candidate {index + 1}"
        body = self._rendered.pop(id(candidate), None)
        if body is not None:  # scrubbed by the worker; the index and message are the loop's
            body = {**body, "message": self._scrub.text(message),
                    "data": {**body["data"], "index": index}}
        self.emit("candidate", message, {"index": index, "candidate": candidate}, rendered=body)

    def complete(self, result: Any, confinement: Confinement) -> None:
        """The final ``done`` event, after every candidate has been sent.

        ``done`` refers to those candidate events (their count and the index
        of the chosen one); it never repeats a candidate. Those no event carried
        yet go out first, at their place in the result's list where it is free.
        """
        self.outcome = TurnOutcome(
            turn_id=self.turn_id, owner=self.owner, job_id=self.id, intent=question(self.request),
            strategy=result.strategy or self.request.strategy, model=self.model,
            notebook_path=self.request.notebook_path or "", prompt=result.prompt or "",
            candidates=[c.to_json() for c in result.candidates], answer=result.answer,
            asked_at=self.created)
        for index, candidate in enumerate(result.candidates):
            self._send_candidate(candidate, index)
        if self.finished:
            return
        sent = sorted(i for i, _ in self._streamed)
        if sent != list(range(len(sent))):
            self._refuse(f"candidate events with indices {sent} (not 0..{len(sent) - 1})")
            return
        chosen = next((i for i, c in self._streamed if c is result.chosen), None)
        self.finish("done", "done", "The turn is complete.", {
            "result": {
                "strategy": result.strategy or self.request.strategy,
                "answer": result.answer,
                "chosen": chosen,
                "candidates": len(sent),
                "support": [c.support for _, c in sorted(self._streamed, key=lambda sent: sent[0])],
                "checks": [c.checks for _, c in sorted(self._streamed, key=lambda sent: sent[0])],
                "stats": result.stats,
                "protections": result.protections,
                "model": self.model,
            },
            "turn_id": self.turn_id,
            "confinement": confinement,
        })
