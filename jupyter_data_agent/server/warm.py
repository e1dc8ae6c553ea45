"""``POST warm``: put the next prompt's stable start in the local model's cache, ahead of time.

llama.cpp keeps the tokens it last evaluated, and a request re-evaluates only
what differs from them (``llm/llamacpp_backend.py``). Between two sidebar
turns, ghost-text requests and other prompts take that cache, so the next
turn would read its whole ~1,600-token prompt again before its first token.
The front end calls this when the user focuses the composer or a cell has run
(``turn``), and when a cell gets focus (``inline``): the server builds the
prompt the next request will start with -- the same builders and settings, up
to where the user's words go (prompts put what changes last:
:func:`~..prompts.arcade.stable_prefix`) -- and evaluates it, one token
generated. Only a local model is warmed (an endpoint caches on its own, and
would bill the tokens); one warm at a time, never in the model's line (it
takes the model only while nobody waits, ``ModelService.background``), and
it gives the model up within its next step of prompt tokens when a turn asks:
warming waits for nobody and nobody waits for it longer than one step (``WARM_STEP``).
A warm is best effort: what fails on the model's side (loading it, building or
reading the prompt) is logged and answered 200 with ``warmed: false`` and the
reason, never a 5xx; the model loads off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable

import tornado
from jupyter_server.auth.decorator import authorized
from tornado import web

from ..config import Settings
from ..context.model import NotebookContext
from ..llm.base import Backend, Completion, Prompt, SamplingParams, Streamed, inner_stream
from ..prompts.arcade import build_chat_prompt, build_prompt, stable_prefix
from ..search.generate import turn_chat
from ..turn.resolve import resolve
from ..turn.spec import TurnAsk
from .complete import CompleteHandler, inline_prompt, request_context
from .models import InlineCompletionRequest, WarmReply, WarmRequest

#: Prompt tokens a warm reads between two looks at "a turn waits" (a 512-token batch is
#: 10-30 s on a busy 2-core machine, all of it a question's wait when the warm's prompt is not its).
WARM_STEP = 128

#: Stands for the user's words while the prompt is built; the prompt is cut before it.
PLACEHOLDER = "(the question)"


def turn_prompt(settings: Settings, backend: Backend, context: NotebookContext, schema: str,
                intent: str) -> Prompt:
    """A sidebar turn's first prompt for ``intent``: ``search.generate.plan_prompt``'s builders
    with the turn's resolved prompt policy."""
    policy = resolve(settings, TurnAsk(intent=intent)).prompt
    builder = build_chat_prompt if turn_chat(backend, policy) else build_prompt
    return builder(context, intent, schema=schema, count_tokens=backend.count_tokens,
                   budget=policy.max_prompt_tokens, outputs=policy.outputs,
                   output_chars=policy.output_chars, exemplars=policy.exemplars).prompt


def turn_prefix(settings: Settings, backend: Backend, context: NotebookContext, schema: str) -> Prompt:
    """The start of the next sidebar turn's prompt, up to the intent."""
    return stable_prefix(turn_prompt(settings, backend, context, schema, PLACEHOLDER), PLACEHOLDER)


def warm_prompt(settings: Settings, backend: Backend, kind: str, context: NotebookContext, schema: str) -> Prompt:
    """What ``POST warm`` evaluates: the inline prompt with nothing typed yet (``inline``), or
    the next sidebar turn's prompt up to the intent (``turn``)."""
    if kind == "inline":
        return inline_prompt(settings, backend, context, "", "", schema).prompt
    return turn_prefix(settings, backend, context, schema)


def warm(backend: Backend, prompt: Prompt, give_way: Callable[[], bool] = lambda: False) -> Completion | None:
    """Evaluate ``prompt`` into the model's cache (one token generated): the prompt's Completion.

    Streamed, so it stops within ``WARM_STEP`` prompt tokens after ``give_way()`` turns true
    (a turn is waiting for the model): None then. What it evaluated stays cached."""
    params = SamplingParams(max_tokens=1, temperature=0.0)
    if "prefill_step" in inspect.signature(backend.stream).parameters:  # llama.cpp: give way sooner
        streamed = Streamed(backend.stream(prompt, params, prefill_step=WARM_STEP))  # type: ignore[call-arg]
    else:
        streamed = Streamed(inner_stream(backend, prompt, params))
    chunks = iter(streamed)
    try:
        for _ in chunks:
            if give_way():
                return None
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if streamed.completion is not None:
        return streamed.completion
    return Completion(text="", prompt_tokens=backend.count_tokens(prompt.text or ""))


class WarmHandler(CompleteHandler):
    """``POST warm``: evaluate the next prompt's stable start now (see the module doc)."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        request = self.parse_body(WarmRequest, "warm request")
        settings: Settings = self.agent_settings
        warm_roots = self.agent_state.tries.warm
        if warm_roots is not None and request.kernel_id:
            warm_roots.touch(request.kernel_id)  # the sidebar is open on it: keep its kernel's warm root
        if settings.backend == "openai":
            return self._reply(WarmReply(warmed=False, reason="an endpoint model keeps its own cache"))
        if request.kind == "inline" and not settings.inline_enabled:
            return self._reply(WarmReply(warmed=False, reason="inline completion is off"))
        from ..context.notebook import from_notebook

        try:
            if request.kind == "inline":
                context = request_context(InlineCompletionRequest(cells=request.cells, prefix="",
                                                           notebook_path=request.notebook_path))
            else:
                context = from_notebook(request.notebook(), active_index=request.active_index,
                                        path=request.notebook_path or None)
        except Exception as exc:  # noqa: BLE001 -- cells from the browser: any failure to read them is a 400
            raise web.HTTPError(400, f"Could not read the notebook cells: {exc}") from None
        service = self.agent_state.model_service
        if service is not None and service.busy(settings):
            return self._reply(WarmReply(warmed=False, reason="the model is busy with a turn"))
        stamp = tuple(c.execution_count for c in request.cells if c.cell_type == "code")
        try:
            schema, _ = await self._schema(request.kernel_id, stamp)
        except web.HTTPError:
            raise  # the request's own fault (a kernel it may not use): a 4xx that says so
        except Exception as exc:  # noqa: BLE001 -- best effort: the prompt without the schema
            self.log.info("jupyter_data_agent: warm without the schema: %s: %s", type(exc).__name__, exc)
            schema = ""

        def run() -> WarmReply:
            # Off the event loop: the first warm loads the model (a turn meanwhile says "loading
            # the model" and waits for that load, never for a turn ahead) and tokenizes the prompt.
            from ..llm.factory import create_backend

            try:
                backend = create_backend(settings)
                prompt = warm_prompt(settings, backend, request.kind, context, schema)
            except Exception as exc:  # noqa: BLE001 -- background work: said in the log and the reply, never a 500
                return self._failed("preparing the warm", exc)
            # At most one warm at a time and never in the model's line: it takes the model only
            # while nobody waits, and gives it up at the next batch of tokens when a turn comes.
            with (service.background(settings) if service else contextlib.nullcontext(lambda: False)) as give_way:
                if give_way is None:
                    return WarmReply(warmed=False, reason="the model is busy")
                try:
                    out = warm(backend, prompt, give_way)
                except Exception as exc:  # noqa: BLE001 -- background work: said in the log and the reply, never a 500
                    return self._failed("warming", exc)
            if out is None:
                return WarmReply(warmed=False, reason="a turn needed the model")
            return WarmReply(warmed=True, prompt_tokens=out.prompt_tokens, cached_tokens=out.cached_tokens)

        self._reply(await asyncio.to_thread(run))

    def _failed(self, what: str, exc: Exception) -> WarmReply:
        """A model-side failure of a warm: logged, and a 200 that says so (a warm is best effort)."""
        self.log.warning("jupyter_data_agent: %s the model failed: %s: %s", what, type(exc).__name__, exc)
        return WarmReply(warmed=False, reason=f"{what} failed ({type(exc).__name__}: {str(exc)[:200]})")

    def _reply(self, reply: WarmReply) -> None:
        self.finish(reply.model_dump_json())
