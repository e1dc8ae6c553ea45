"""``%%agent`` in a kernel this server started: the turn runs here, the kernel is its handle.

The magic sends its turn over the model service's socket (``op: "turn"``,
authenticated by the token the server gave the kernel): its question, its
flags, the context read from its history, and which kernel it is. The turn
service runs it like any other (it is listed with source ``magic``, its
events stream back to the cell); the kernel is reached through the same
connection: the server sends each expression the turn needs evaluated (the
schema inspection, the fork of the root copy) and the magic, which holds the
kernel while its cell runs, evaluates it with IPython's ``user_expressions``,
exactly what a silent request over the shell channel would run.

Runs on the model service's request thread; the job lives on the server's
loop. A kernel that hangs up (an interrupted cell) cancels its turn.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..context.model import NotebookContext
from ..kernel import rpc
from ..kernel.host.handle import KernelHandle
from ..search.options import short_errors
from ..turn import TurnAsk, resolve
from .job import KERNEL_OWNER, Job
from .models import TurnOptions, TurnRequestModel
from .notebooks import open_notebooks
from .turns import TurnService

log = logging.getLogger(__name__)

CONTEXT = TypeAdapter(NotebookContext)
_START_S = 30.0  # to start the job on the server's loop (it only admits it)


class MagicTurn(BaseModel):
    """What the magic sends (``op: "turn"``)."""

    model_config = ConfigDict(extra="ignore")  # the token, op and settings_overrides are the service's

    kernel_id: str = Field(default="", max_length=256)
    notebook_dir: str = Field(default="", max_length=4096)
    ask: TurnAsk
    context: dict[str, Any]


class _Connection:
    """The magic's connection: events out, expressions out and their values back."""

    def __init__(self, send: Callable[[dict], None], rfile: Any) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, queue.Queue] = {}
        self.gone = threading.Event()
        self._rfile = rfile

    def send(self, message: dict) -> None:
        with self._lock:
            self._send(message)

    def read_replies(self, on_gone: Callable[[], None]) -> None:
        """The reader thread: values the magic sends back, until it hangs up."""
        import json

        try:
            for line in iter(self._rfile.readline, b""):
                try:
                    message = json.loads(line)
                    box = self._waiting.get(int(message["reply"]))
                except (ValueError, KeyError, TypeError):
                    continue
                if box is not None:
                    box.put(message.get("value"))
        except OSError:
            pass
        finally:
            self.gone.set()
            for box in list(self._waiting.values()):
                box.put(None)
            on_gone()

    def evaluate(self, expression: str, timeout: float | None) -> Any:
        """The expression's value in the magic's kernel (``kernel.rpc`` semantics)."""
        if self.gone.is_set():
            raise rpc.KernelRPCError("the kernel's %%agent cell ended")
        number = next(self._ids)
        box: queue.Queue = queue.Queue()
        self._waiting[number] = box
        try:
            self.send({"eval": expression, "id": number})
            try:
                entry = box.get(timeout=timeout)
            except queue.Empty:
                raise rpc.KernelTimeout(f"the kernel did not answer within {timeout or 0:g} s") from None
        finally:
            self._waiting.pop(number, None)
        if entry is None and self.gone.is_set():
            raise rpc.KernelRPCError("the kernel's %%agent cell ended")
        return rpc.decode_expression(entry)


class MagicTurns:
    """The model service's ``turn`` op (``ModelService.turns``)."""

    def __init__(self, turns: TurnService, loop: asyncio.AbstractEventLoop, *, session_manager: Any,
                 owner: Callable[[str], str], settings_for: Callable[[Any], Any],
                 fork_timeout_s: float = 60.0) -> None:
        self.turns = turns
        self.loop = loop
        self.session_manager = session_manager
        self.owner = owner  # kernel id -> the owner its turns get
        self.settings_for = settings_for
        self.fork_timeout_s = fork_timeout_s

    def __call__(self, req: dict, send: Callable[[dict], None], rfile: Any) -> None:
        try:
            asked = MagicTurn.model_validate(req)
            context = CONTEXT.validate_python(asked.context)
        except ValidationError as exc:
            send({"error": f"the turn request is malformed ({short_errors(exc)})"})
            return
        settings = self.settings_for(req.get("settings_overrides"))
        connection = _Connection(send, rfile)
        events: queue.Queue = queue.Queue()
        try:
            job = asyncio.run_coroutine_threadsafe(
                self._start(asked, context, settings, connection, events), self.loop).result(_START_S)
        except self.turns.Rejected as exc:
            send({"error": exc.message})
            return
        reader = threading.Thread(target=connection.read_replies, args=(lambda: self._hung_up(job),),
                                  name="jupyter-data-agent-magic-turn", daemon=True)
        reader.start()
        while True:
            event = events.get()
            if event["type"] != "delta":  # the cell shows progress lines, not the text as it streams
                try:
                    connection.send({"event": event})
                except OSError:
                    return  # the reader saw it too: the turn is cancelled
            if event["type"] in ("done", "error"):
                self.loop.call_soon_threadsafe(job.unsubscribe, events.put)
                return

    async def _start(self, asked: MagicTurn, context: NotebookContext, settings: Any,
                     connection: _Connection, events: queue.Queue) -> Job:
        path = await self._notebook(asked.kernel_id)
        ask = asked.ask
        try:
            strategy = resolve(settings, ask).strategy  # the configured default when the cell names none
        except ValueError as exc:
            raise self.turns.Rejected(400, str(exc)) from None
        request = TurnRequestModel(
            version=1, notebook_path=path, intent=ask.intent, strategy=strategy,  # type: ignore[arg-type]
            kernel_id=asked.kernel_id or None, model=settings.model or None,
            options=TurnOptions(samples=ask.samples, budget=ask.budget, temperature=ask.temperature,
                                use_live_state=ask.execute))
        handle = _handle(connection, asked.notebook_dir or None, self.fork_timeout_s)
        job = self.turns.start(self.owner(asked.kernel_id), request, "magic", context=context, ask=ask,
                               settings=settings, handle=handle)
        for event in job.subscribe(events.put):
            events.put(event)
        return job

    async def _notebook(self, kernel_id: str) -> str:
        """The notebook whose session holds the kernel ("" when none does: a console, a script)."""
        if not kernel_id:
            return ""
        for notebook in await open_notebooks(self.session_manager):
            if notebook.kernel_id == kernel_id:
                return notebook.path
        return ""

    def _hung_up(self, job: Job) -> None:
        """The magic's cell ended (interrupted): its turn ends too, copies closed."""
        def cancel() -> None:
            if not job.finished:
                asyncio.ensure_future(self.turns.cancel(job, "The %%agent cell was interrupted."))
        self.loop.call_soon_threadsafe(cancel)


def kernel_owner(shared: str | None, kernel_id: str) -> str:
    """Whose the magic's turn is: the server's one principal; under JupyterHub, the single-user
    server's user; else its kernel's (``KERNEL_OWNER``: seen by whoever may run code in kernels)."""
    hub_user = os.environ.get("JUPYTERHUB_USER", "")
    return shared or (f"user:{hub_user}" if hub_user else f"{KERNEL_OWNER}{kernel_id}")


def _handle(connection: _Connection, notebook_dir: str | None, timeout: float) -> KernelHandle:
    from ..kernel.host.handle import EvalHandle

    return EvalHandle(connection.evaluate, notebook_dir=notebook_dir, timeout=timeout)
