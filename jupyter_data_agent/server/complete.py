"""Inline (ghost-text) completion: ``POST complete``, streamed as newline-delimited JSON.

Each keystroke pause in a notebook cell may ask for a completion, so this
path is built for many short, often abandoned requests:

* the prompt is the ARCADE linearization of the cells above plus the live
  kernel's schema block (:mod:`jupyter_data_agent.prompts.inline`); the
  schema is read through the kernel's handle (``server.kernels``) and cached per
  kernel for :data:`SCHEMA_TTL_S`, so typing does not re-inspect (running a
  cell above, which changes the execution counts the request carries, does); a busy
  kernel is never waited for (the last schema, or none, is used);
* generation goes through the model service's line (``QueuedBackend``) like
  every turn, one at a time on a local model;
* a client that goes away (the user typed on: the front end aborts the
  request) sets the cancel flag: generation stops at the next token, or the
  request leaves the model's line.

:func:`complete` is the whole path without tornado; ``bench/inline.py``
measures it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tornado
from jupyter_server.auth.decorator import authorized
from tornado import web
from tornado.iostream import StreamClosedError

from ..config import Settings
from ..context.model import NotebookContext
from ..llm.base import Backend, BackendError, Completion, SamplingParams, Streamed, use_chat
from ..prompts.inline import MAX_TOKENS, InlinePrompt, InlineText, build_inline_prompt
from .handlers import AgentAPIHandler
from .kernels import KernelHandles
from .models import InlineCompletionChunk, InlineCompletionRequest

log = logging.getLogger(__name__)

#: Seconds a kernel's schema block is reused before it is read again.
SCHEMA_TTL_S = 10.0
#: Seconds an idle kernel may take to answer the schema request.
SCHEMA_TIMEOUT_S = 2.0


@dataclass
class _Entry:
    at: float
    block: str
    frames: list[str]
    # The execution counts of the cells above when read: a cell run since makes the entry stale.
    stamp: tuple[int | None, ...] = ()


@dataclass
class SchemaCache:
    """The schema block per kernel, read at most once per ``ttl`` (concurrent askers share one read)."""

    ttl: float = SCHEMA_TTL_S
    timeout: float = SCHEMA_TIMEOUT_S
    entries: dict[str, _Entry] = field(default_factory=dict)
    reads: int = 0  # inspections sent to kernels (tests and the benchmark read it)
    _pending: dict[str, asyncio.Future] = field(default_factory=dict)

    async def get(self, kernels: KernelHandles, kernel_id: str,
                  stamp: tuple[int | None, ...] = ()) -> tuple[str, list[str]]:
        km = kernels.manager(kernel_id)
        if km is None:
            return "", []
        entry = self.entries.get(kernel_id)
        fresh = entry is not None and entry.stamp == stamp and time.monotonic() - entry.at < self.ttl
        if entry is not None and (fresh or getattr(km, "execution_state", "") == "busy"):
            return entry.block, entry.frames
        if getattr(km, "execution_state", "") == "busy":  # never wait behind a running cell
            return "", []
        pending = self._pending.get(kernel_id)
        if pending is None:
            pending = self._pending[kernel_id] = asyncio.ensure_future(self._read(kernels, kernel_id, stamp))
            pending.add_done_callback(lambda _f: self._pending.pop(kernel_id, None))
        return await asyncio.shield(pending)

    async def _read(self, kernels: KernelHandles, kernel_id: str,
                    stamp: tuple[int | None, ...]) -> tuple[str, list[str]]:
        from ..kernel.host.handle import NoKernel
        from ..kernel.inkernel.schema import SchemaInspectionError, schema_block

        self.reads += 1
        async with kernels.reading(kernel_id) as handle:
            if isinstance(handle, NoKernel):  # not running, not reached (a gateway's handshake): no schema
                log.debug("no schema from kernel %s: %s", kernel_id, handle.reason)
                return self._last(kernel_id)
            try:
                frames = await handle.frames(self.timeout, time_limit=1.0)
            except SchemaInspectionError:
                return self._last(kernel_id)
        entry = _Entry(time.monotonic(), schema_block(frames) if frames else "", [f.name for f in frames], stamp)
        self.entries[kernel_id] = entry
        return entry.block, entry.frames

    def _last(self, kernel_id: str) -> tuple[str, list[str]]:
        """What was read last from this kernel (nothing if never): kept when a new read fails."""
        old = self.entries.get(kernel_id)
        return (old.block, old.frames) if old else ("", [])

    def forget(self, kernel_id: str) -> None:
        self.entries.pop(kernel_id, None)


def inline_chat(settings: Settings, backend: Backend) -> bool:
    """Ghost text in ``auto``: chat for endpoints (hosted models are chat models); local models continue the code."""
    return use_chat(settings.api_mode, backend.capabilities, auto=settings.backend == "openai")


def inline_prompt(settings: Settings, backend: Backend, context: NotebookContext, prefix: str,
                  suffix: str, schema: str) -> InlinePrompt:
    fim = settings.extra.get("inline_fim", "")
    return build_inline_prompt(context, prefix, suffix, schema=schema, chat=inline_chat(settings, backend),
                               fim_template=fim if isinstance(fim, str) else "",
                               count_tokens=backend.count_tokens)


@dataclass
class InlineResult:
    text: str
    prompt: InlinePrompt
    completion: Completion | None
    first_token_ms: float | None
    total_ms: float
    cancelled: bool


def generate_inline(backend: Backend, prompt: InlinePrompt, emit: Callable[[str], None],
                    cancel: threading.Event, *, started: float | None = None) -> InlineResult:
    """Stream one short completion (blocking; run it in a thread), ``emit`` per shown delta.

    Stops at the first delta after ``cancel`` is set and closes the backend's
    stream, which stops decoding (llama.cpp) or drops the HTTP stream (endpoints).
    """
    started = time.perf_counter() if started is None else started
    params = SamplingParams(n=1, temperature=0.0, max_tokens=MAX_TOKENS, stop=prompt.stop)
    cleaner = InlineText(prompt.prefix, prompt.suffix, chat=prompt.chat, stop=prompt.stop)
    streamed = Streamed(backend.stream(prompt.prompt, params))
    first: float | None = None
    cancelled = False
    deltas = iter(streamed)
    try:
        for delta in deltas:
            if cancel.is_set():
                cancelled = True
                break
            shown = cleaner.feed(delta)
            if shown:
                if first is None:
                    first = (time.perf_counter() - started) * 1000
                emit(shown)
            if cleaner.done:
                break
    finally:
        close = getattr(deltas, "close", None)
        if close is not None:
            close()
    if not cancelled:
        tail = cleaner.flush()
        if tail:
            if first is None:
                first = (time.perf_counter() - started) * 1000
            emit(tail)
    return InlineResult(cleaner.text, prompt, streamed.completion, first,
                        (time.perf_counter() - started) * 1000, cancelled)


def request_context(request: InlineCompletionRequest) -> NotebookContext:
    from ..context.notebook import from_notebook

    cells: list[dict[str, Any]] = [c.model_dump() for c in request.cells]
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}
    for cell in cells:
        cell["outputs"] = []  # the prompt shows sources only: keystrokes need a short prompt
        if cell["cell_type"] != "code":
            cell.pop("outputs")
            cell.pop("execution_count", None)
    return from_notebook(nb, path=request.notebook_path or None)


class CompleteHandler(AgentAPIHandler):
    """``POST complete``: ghost text for a cell, streamed; closing the request stops generation."""

    cancel: threading.Event | None = None

    def on_connection_close(self) -> None:
        if self.cancel is not None:
            self.cancel.set()

    @property
    def schemas(self) -> SchemaCache:
        return self.agent_state.inline_schemas

    async def _schema(self, kernel_id: str | None, stamp: tuple[int | None, ...]) -> tuple[str, list[str]]:
        if not kernel_id:
            return "", []
        # Reading the schema runs code in the kernel: the same permission as a kernel websocket.
        if not await self.may("execute", "kernels"):
            return "", []
        return await self.schemas.get(self.jobs.kernels, kernel_id, stamp)

    def _write(self, chunk: InlineCompletionChunk) -> None:
        self.write(chunk.model_dump_json() + "\n")

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        started = time.perf_counter()
        request = self.parse_body(InlineCompletionRequest, "completion request")
        settings: Settings = self.agent_settings
        if not settings.inline_enabled:
            raise web.HTTPError(409, "Inline completion is off on this server "
                                     "(c.DataAgent.inline_completion).")
        try:
            context = request_context(request)
        except Exception as exc:  # noqa: BLE001 -- cells from the browser: any failure to read them is a 400
            raise web.HTTPError(400, f"Could not read the notebook cells: {exc}") from None
        self.cancel = cancel = threading.Event()
        stamp = tuple(c.execution_count for c in request.cells if c.cell_type == "code")
        schema, frames = await self._schema(request.kernel_id, stamp)

        from ..llm.factory import create_backend

        backend = await asyncio.to_thread(create_backend, settings)
        service = self.agent_state.model_service
        queued = service.queued(settings, backend, lambda _ahead: None, cancel) if service else backend
        prompt = inline_prompt(settings, backend, context, request.prefix, request.suffix, schema)

        self.set_header("Content-Type", "application/x-ndjson; charset=UTF-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        def emit(delta: str) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone (server stopped)
                loop.call_soon_threadsafe(queue.put_nowait, delta)

        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = generate_inline(queued, prompt, emit, cancel, started=started)
            except BaseException as exc:  # noqa: BLE001 -- reported on the stream
                outcome["error"] = exc
            finally:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(queue.put_nowait, None)

        # A daemon thread of its own: a cancelled request must not hold a pool worker.
        threading.Thread(target=work, name="jda-inline", daemon=True).start()
        try:
            while (delta := await queue.get()) is not None:
                self._write(InlineCompletionChunk(delta=delta))
                await self.flush()
        except StreamClosedError:
            cancel.set()
        if cancel.is_set():  # the client went away: nobody reads the rest
            return
        error = outcome.get("error")
        if error is not None:
            self.log.info("jupyter_data_agent: inline completion failed: %s", error)
            message = str(error) if isinstance(error, BackendError) else f"{type(error).__name__}: {error}"
            self._write(InlineCompletionChunk(done=True, error=self.jobs.scrub.text(message)))
        else:
            result: InlineResult = outcome["result"]
            usage = result.completion
            self._write(InlineCompletionChunk(
                done=True, text=result.text, frames=frames,
                prompt_tokens=usage.prompt_tokens if usage else prompt.tokens,
                completion_tokens=usage.completion_tokens if usage else 0,
                first_token_ms=result.first_token_ms, total_ms=(time.perf_counter() - started) * 1000))
        with contextlib.suppress(StreamClosedError):
            self.finish()
