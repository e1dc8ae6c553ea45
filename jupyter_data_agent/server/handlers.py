"""HTTP and websocket handlers. Every one is authenticated and authorized by jupyter_server.

Jobs are private to the principal that started them: another user gets the
same 404 as for a job that never existed, so job ids cannot be probed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import tornado
from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.auth.identity import IdentityProvider, LegacyIdentityProvider, PasswordIdentityProvider
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from pydantic import ValidationError
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from ..config import Settings
from ..llm.factory import model_info
from ..llm.scrub import MASK, redact_url
from ..search.options import short_errors
from ..search.registry import available_strategies
from ..turn.resolve import catalog
from .agent_auth import unwrapped
from .job import KERNEL_OWNER, SERVER_OWNER
from .models import (
    API_VERSION,
    AgentConfig,
    AnalysisRevised,
    AnalysisRevision,
    CancelReply,
    DecisionRecorded,
    DecisionRequest,
    JobPoll,
    TurnAccepted,
    TurnRequestModel,
    ValueModelReply,
)
from .state import AgentState, agent_state

AUTH_RESOURCE = "jupyter_data_agent"

# Providers whose users are sessions of one person holding the server's token
# or password: their anonymous names change per browser session or per request.
_SINGLE_PRINCIPAL_PROVIDERS = (IdentityProvider, PasswordIdentityProvider, LegacyIdentityProvider)


_SECRET_WORDS = ("key", "token", "secret", "password")


def _secret_flag(arg: str) -> bool:
    return arg.startswith("--") and any(w in arg.split("=", 1)[0].lower() for w in _SECRET_WORDS)


def _mask_args(args: list[str]) -> list[str]:
    """``--api-key X`` and ``--api-key=X`` with the value masked."""
    out = []
    for i, arg in enumerate(args):
        if _secret_flag(arg) and "=" in arg:
            out.append(arg.split("=", 1)[0] + "=" + MASK)
        elif i > 0 and _secret_flag(args[i - 1]) and "=" not in args[i - 1] \
                and not arg.startswith("--"):
            out.append(MASK)
        else:
            out.append(arg)
    return out


def public_settings(settings: Settings) -> dict:
    """``Settings.public()`` fit for the browser: URL credentials and key arguments masked.

    ``public()`` drops the API key, but a base URL may carry ``user:password@``
    (or a key in its query) and ``vllm_args`` may hold ``--api-key X``.
    """
    data = settings.public()
    if data.get("base_url"):
        data["base_url"] = redact_url(data["base_url"])
    data["vllm_args"] = _mask_args(list(data.get("vllm_args") or []))
    return data


def one_principal(identity_provider: Any, scope: str) -> str | None:
    """``SERVER_OWNER`` when every request is the same person's (``owner_scope`` "server", or
    "auto" under the stock token/password providers); None when users are told apart."""
    provider = type(unwrapped(identity_provider))
    if scope == "server" or (scope == "auto" and provider in _SINGLE_PRINCIPAL_PROVIDERS):
        return SERVER_OWNER
    return None


class AgentMixin:
    """Shared access to the extension's state, for REST and websocket handlers."""

    auth_resource = AUTH_RESOURCE

    @property
    def agent_state(self) -> AgentState:
        return agent_state(self.settings)  # type: ignore[attr-defined]

    @property
    def agent_settings(self) -> Settings:
        return self.agent_state.settings

    @property
    def jobs(self):
        return self.agent_state.jobs

    @property
    def turns(self):
        """The turn service (``server.turns``): the one place turns start and are read."""
        return self.agent_state.turns

    def job_owner(self) -> str:
        """Who owns jobs started by this request.

        ``auto``: the username under an identity provider that names real
        users (JupyterHub, a custom one); one shared principal under the
        stock token/password providers, where every script request or browser
        session gets a fresh anonymous name.
        """
        shared = one_principal(self.identity_provider, self.agent_state.owner_scope)  # type: ignore[attr-defined]
        return shared or f"user:{self.current_user.username}"  # type: ignore[attr-defined]

    async def may(self, action: str, resource: str) -> bool:
        """The server's authorizer on this request's user."""
        return bool(await ensure_async(self.authorizer.is_authorized(  # type: ignore[attr-defined]
            self, self.current_user, action, resource)))  # type: ignore[attr-defined]

    async def require_execute(self, hint: str = "") -> None:
        """A 403 unless the user may ``execute`` on ``kernels``: forking a kernel (a turn's
        copies, a try, a proposal's run) or reading its variables runs code in it, which is
        what a kernel websocket needs too."""
        if not await self.may("execute", "kernels"):
            raise web.HTTPError(403, "You may not run code in kernels on this server" + (
                f"; {hint}" if hint else "."))

    async def owned_job(self, job_id: str):
        """The job if this user started it, or it is a kernel's ``%%agent`` turn and the user may
        run code in kernels; a 404 otherwise (as for a job that never existed)."""
        job = self.jobs.get(job_id, self.job_owner())
        if job is None:
            job = self.jobs.jobs.get(job_id)
            if job is None or not job.owner.startswith(KERNEL_OWNER) or not await self.may("execute", "kernels"):
                raise web.HTTPError(404, "No such job (it may have expired).")
        return job


def _readable(error: ValidationError) -> str:
    """The models' own sentences, when every problem is one (the sidebar shows them as they are)."""
    items = error.errors(include_url=False, include_input=False)
    sentences = [str(item.get("ctx", {}).get("error", "")) for item in items]
    if not items or any(i["type"] != "value_error" for i in items) or not all(s[:1].isupper() for s in sentences):
        return ""
    return " ".join(sentences)


class AgentAPIHandler(AgentMixin, APIHandler):
    def parse_body(self, model: Any, what: str) -> Any:
        """The JSON body as ``model``; a 400 that says what is wrong otherwise."""
        body = self.get_json_body()
        if not isinstance(body, dict):
            raise web.HTTPError(400, "The request body must be a JSON object.")
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            raise web.HTTPError(400, _readable(exc) or f"Invalid {what}: " + short_errors(exc)) from None


class ConfigHandler(AgentAPIHandler):
    """The active backend and model, and the strategies to offer, for the front end.

    Never holds a secret. ``strategies`` is the one catalog (name, label,
    summary, in order) the sidebar builds its chooser from;
    ``capabilities.strategies`` says which of them this server can run.
    """

    agent_access = frozenset({"GET"})  # an outside agent's token may (server.agent_auth)

    @tornado.web.authenticated
    @authorized
    def get(self) -> None:
        settings = self.agent_settings
        capabilities = {"strategies": available_strategies(), "chat": settings.api_mode != "completion",
                        "live_state": True, "events": "websocket",
                        "inline_completion": settings.inline_enabled}
        body = {**public_settings(settings), "strategies": catalog(settings), "capabilities": capabilities,
                "limits": self.agent_state.public_limits.model_dump(), "price": settings.price,
                "prices": {m: settings.prices[m] for m in settings.offered_models if m in settings.prices},
                "model_info": model_info(settings)}
        # The configured secrets, wherever they hide (extra options, a URL path).
        reply = AgentConfig.model_validate(self.jobs.scrub.json(body))
        self.finish(reply.model_dump_json())


class TurnsHandler(AgentAPIHandler):
    """``POST turns``: validate, start a job, answer 202 with its id. ``GET turns?notebook_path=``:
    the user's turns on that notebook from every source (sidebar, ``%%agent``, MCP, ACP), newest first."""

    agent_access = frozenset({"GET", "POST"})  # an outside agent's token may (server.agent_auth)

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        request = self.parse_body(TurnRequestModel, "turn request")
        if request.kernel_id and request.options.use_live_state:
            await self.require_execute("send use_live_state: false to use the notebook text only.")
        try:
            job = self.turns.start(self.job_owner(), request, request.source)
        except self.turns.Rejected as exc:
            raise web.HTTPError(exc.status, exc.message) from None
        self.log.info("jupyter_data_agent: turn %s started (strategy=%s, source=%s, kernel=%s)",
                      job.id, job.spec.strategy, job.source, "yes" if request.kernel_id else "no")
        self.set_status(202)
        self.finish(TurnAccepted(job_id=job.id, turn_id=job.turn_id).model_dump_json())

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        path = self.get_argument("notebook_path", "")
        # A kernel's own %%agent turns: seen by whoever may run code in kernels (as its cells are).
        kernels = await self.may("execute", "kernels")
        reply = self.turns.list(self.job_owner(), path,
                                also=lambda job: kernels and job.owner.startswith(KERNEL_OWNER))
        self.finish(reply.model_dump_json())


class JobHandler(AgentAPIHandler):
    """``GET jobs/<id>?after=<seq>``: status and the events after ``seq`` (polling)."""

    agent_access = frozenset({"GET"})  # an outside agent's token may (server.agent_auth)

    @tornado.web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        job = await self.owned_job(job_id)
        try:
            after = int(self.get_argument("after", "0"))
        except ValueError:
            raise web.HTTPError(400, "after must be an integer event number.") from None
        reply = JobPoll(job_id=job.id, status=job.status, events=job.events_after(after))
        self.finish(reply.model_dump_json())


class CancelHandler(AgentAPIHandler):
    """``POST jobs/<id>/cancel``: answers once the job's kernel copies are gone."""

    agent_access = frozenset({"POST"})  # an outside agent's token may (server.agent_auth)

    @tornado.web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        job = await self.owned_job(job_id)
        await self.jobs.cancel(job)
        self.finish(CancelReply(job_id=job.id, status=job.status).model_dump_json())


class FinishHandler(AgentAPIHandler):
    """``POST jobs/<id>/finish``: Stop. An analysis ends with the steps verified so far (its
    ``done`` follows); any other turn is cancelled as by ``cancel``."""

    agent_access = frozenset({"POST"})  # an outside agent's token may (server.agent_auth)

    @tornado.web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        job = await self.owned_job(job_id)
        await self.jobs.finish(job)
        self.set_status(202)
        self.finish(CancelReply(job_id=job.id, status=job.status).model_dump_json())


class AnalysisHandler(AgentAPIHandler):
    """``POST turns/<turn_id>/analysis``: after an edit or a drop in review, the steps from
    ``from_step`` on run again in the analysis's kept copies (no model is asked)."""

    @tornado.web.authenticated
    @authorized
    async def post(self, turn_id: str) -> None:
        request = self.parse_body(AnalysisRevision, "analysis revision")
        await self.require_execute()  # the steps run again in kernel copies
        try:
            steps = await self.jobs.revise(turn_id, self.job_owner(), request.from_step, request.steps)
        except self.jobs.Rejected as exc:
            raise web.HTTPError(exc.status, exc.message) from None
        ok = sum(1 for s in steps if s.status == "ok")
        message = (f"Steps {request.from_step}-{request.from_step + len(steps) - 1} ran again in kernel copies: "
                   f"{ok} of {len(steps)} ok." if steps else "Nothing to run again.")
        reply = {"version": API_VERSION, "steps": [self.jobs.scrub.json(s.to_json()) for s in steps],
                 "message": message}
        self.finish(AnalysisRevised.model_validate(reply).model_dump_json())


class NoKernelHandler(AgentAPIHandler):
    """``POST jobs/<id>/no-kernel``: stop waiting for a busy kernel and answer
    from the notebook text now (as after ``kernel_wait_timeout_s``)."""

    @tornado.web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        job = await self.owned_job(job_id)
        if job.finished:
            raise web.HTTPError(409, f"The turn has already ended ({job.status}).")
        job.skip_kernel.set()
        self.finish(CancelReply(job_id=job.id, status=job.status).model_dump_json())


class DecisionsHandler(AgentAPIHandler):
    """``POST decisions``: record an accept / accept & run / edit / reject in the local store.

    The turn's prompt, steps and outputs come from the server's own record of
    the turn (never from the browser); a turn the server no longer holds is
    recorded with what the browser sent, marked incomplete.
    """

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        request = self.parse_body(DecisionRequest, "decision")
        store = self.agent_state.decisions
        if store is None:  # recording is off (c.DataAgentExtension.record_decisions)
            self.finish(DecisionRecorded(recorded=False).model_dump_json())
            return
        from ..store.decisions import TurnOutcome

        outcome = self.jobs.find_turn(request.turn_id, self.job_owner()) or TurnOutcome(
            turn_id=request.turn_id, owner="", intent=request.intent,
            notebook_path=request.notebook_path)
        record = outcome.record(request.decision, request.candidate, request.code, request.final_code,
                                request.step)
        # The store is a file on disk: no configured secret goes into it (a cell may print one).
        scrub = self.jobs.scrub
        record.prompt, record.code, record.final_code = map(scrub.text, (record.prompt, record.code,
                                                                         record.final_code))
        record.candidate = scrub.json(record.candidate)
        try:
            row = await asyncio.to_thread(store.add, record)
        except Exception as exc:  # noqa: BLE001 -- a full disk, a locked file: said, the notebook is unaffected
            self.log.warning("jupyter_data_agent: decision not recorded: %s", exc)
            raise web.HTTPError(503, f"The decision could not be recorded: {exc}") from None
        self.finish(DecisionRecorded(recorded=True, complete=record.complete, id=row).model_dump_json())


class ValueModelReloadHandler(AgentAPIHandler):
    """``POST value-model/reload``: Search turns use the newest trained value model from now on."""

    @tornado.web.authenticated
    @authorized
    def post(self) -> None:
        label = self.agent_state.reload_value_model()
        self.finish(ValueModelReply(value_model=label).model_dump_json())


class VariablesHandler(AgentAPIHandler):
    """``GET variables?kernel_id=<id>``: the kernel's DataFrames and Series, for ``@`` mentions.

    Reading them runs a silent expression in the kernel: the same permission
    as a kernel websocket (``execute`` on ``kernels``).
    """

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        kernel_id = self.get_argument("kernel_id", "").strip()
        if not kernel_id:
            raise web.HTTPError(400, "Give the notebook's kernel: variables?kernel_id=<id>.")
        await self.require_execute()
        kernels = self.jobs.kernels
        if kernels.manager(kernel_id) is None:
            raise web.HTTPError(404, f"No running kernel {kernel_id!r}.")
        from .variables import kernel_variables

        reply = await kernel_variables(kernels, kernel_id)
        self.finish(reply.model_dump_json())


class WarmRootsHandler(AgentAPIHandler):
    """``GET warm-roots``: the kernels' warm roots (``server.warm_roots``), the copies kept between
    tries and turns: each one's own memory (USS, bytes, counted against the copies' budget), age,
    the executions it holds and the kernel has seen, and the copies forked from it in use now.
    For whoever may read kernels on this server (their ids are listed in ``api/kernels`` too)."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        if not await self.may("read", "kernels"):
            raise web.HTTPError(403, "You may not read kernels on this server.")
        warm = self.agent_state.tries.warm
        roots = await asyncio.to_thread(warm.stats) if warm is not None else []
        self.finish(json.dumps({
            "enabled": warm is not None, "idle_s": warm.idle_s if warm is not None else 0.0,
            "warm_roots": [root.to_json() for root in roots],
            "dropped": dict(warm.dropped) if warm is not None else {}}))


class JobEventsHandler(AgentMixin, WebSocketMixin, WebSocketHandler, JupyterHandler):
    """``jobs/<id>/events``: every event of the job, earlier ones replayed first.

    Authentication and authorization happen before the upgrade, like
    jupyter_server's kernel websocket; the origin check is jupyter_server's.
    The socket closes after the terminal event (``done`` or ``error``).
    """

    agent_access = frozenset({"GET"})  # an outside agent's token may (server.agent_auth)

    job: Any = None

    def set_default_headers(self) -> None:
        """JupyterHandler's headers make no sense on a websocket upgrade."""

    def get_compression_options(self):
        return self.settings.get("websocket_compression_options", None)

    async def pre_get(self) -> None:
        if not await self.may("read", AUTH_RESOURCE):
            raise web.HTTPError(403)
        self.job = await self.owned_job(self.job_id)

    @ws_authenticated
    async def get(self, job_id: str) -> None:
        self.job_id = job_id
        await self.pre_get()
        await super().get(job_id=job_id)

    def open(self, job_id: str) -> None:
        super().open()
        try:
            after = int(self.get_argument("after", "0"))
        except ValueError:
            after = 0
        for event in self.job.subscribe(self._send, after):
            self._send(event)
        if self.job.finished and self.ws_connection is not None and not self.ws_connection.is_closing():
            self.close(1000, "job finished")

    def _send(self, event: dict) -> None:
        if self.ws_connection is None or self.ws_connection.is_closing():
            self.job.unsubscribe(self._send)
            return
        try:
            self.write_message(json.dumps(event))
        except WebSocketClosedError:
            self.job.unsubscribe(self._send)
            return
        if event["type"] in ("done", "error"):
            self.job.unsubscribe(self._send)
            self.close(1000, "job finished")

    def on_message(self, message: str | bytes) -> None:
        """The stream is one-way; cancel with ``POST jobs/<id>/cancel``."""

    def on_close(self) -> None:
        if self.job is not None:
            self.job.unsubscribe(self._send)
