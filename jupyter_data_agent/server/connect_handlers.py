"""The routes of "Connect a model" (``server.connect``): look, list, check, connect.

Each one makes this server send requests to other servers, and ``POST connect``
changes the model every user of this server talks to: authenticated, authorized
on this extension, and refused (403) to a user who may not change the server
(``write`` on ``server``, which the stock authorizer grants to the token's holder).
"""

from __future__ import annotations

import asyncio
import time

import tornado
from jupyter_server.auth.decorator import authorized
from tornado import web
from traitlets.config import Config

from ..llm.factory import model_info
from ..llm.scrub import Scrubber, redact_url
from .connect import (
    TYPED,
    ConnectError,
    ModelConnect,
    base_url_of,
    check_model,
    find_servers,
    list_models,
    overridden,
    write_setting,
    written_setting,
)
from .connect_models import ConnectCheck, Connected, ConnectRequest, ModelInfo, ModelServers
from .handlers import AgentAPIHandler


class ConnectHandler(AgentAPIHandler):
    """Shared: the options (``c.ModelConnect``), the permission, the request's URL."""

    @property
    def connect_options(self) -> ModelConnect:
        return ModelConnect(config=self.config)

    @property
    def listing_timeout(self) -> float:
        """Seconds a typed server may take to list its models (a hosted endpoint, far away)."""
        return max(self.connect_options.probe_timeout_s, 10.0)

    async def allowed(self) -> None:
        if not await self.may("write", "server"):
            raise web.HTTPError(403, "You may not change this server's model.")

    def request_body(self, need_model: bool) -> tuple[ConnectRequest, str]:
        """The body and its base URL; a 400 that says what to type otherwise."""
        request = self.parse_body(ConnectRequest, "connect request")
        try:
            base_url = base_url_of(request.base_url)
        except ConnectError as exc:
            raise web.HTTPError(400, str(exc)) from None
        if need_model and not request.model.strip():
            raise web.HTTPError(400, "Pick the model to use.")
        return request, base_url

    async def check(self, request: ConnectRequest, base_url: str) -> tuple[bool, str]:
        return await check_model(base_url, request.model.strip(), request.api_key,
                                 timeout=self.connect_options.check_timeout_s)


class ServersHandler(ConnectHandler):
    """``GET connect/servers``: the OpenAI-compatible servers on this machine's usual ports."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        await self.allowed()
        started = time.monotonic()
        servers = await find_servers(self.connect_options)
        self.finish(ModelServers(servers=servers, elapsed_s=time.monotonic() - started).model_dump_json())


class ModelsHandler(ConnectHandler):
    """``POST connect/models``: what the server at a typed URL serves (with the key typed, if any)."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        await self.allowed()
        request, base_url = self.request_body(need_model=False)
        started = time.monotonic()
        server = await list_models(TYPED, base_url, request.api_key, timeout=self.listing_timeout)
        self.finish(ModelServers(servers=[server], elapsed_s=time.monotonic() - started).model_dump_json())


class CheckHandler(ConnectHandler):
    """``POST connect/check``: the model answers a real one-token chat request, or why not."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        await self.allowed()
        request, base_url = self.request_body(need_model=True)
        started = time.monotonic()
        ok, message = await self.check(request, base_url)
        self.finish(ConnectCheck(ok=ok, message=message, elapsed_s=time.monotonic() - started).model_dump_json())


class ConnectModelHandler(ConnectHandler):
    """``POST connect``: check the model once more, write the setting, use it from now on.

    The key is written to the file only; the reply, the log line and any error are scrubbed of it.
    """

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        await self.allowed()
        request, base_url = self.request_body(need_model=True)
        ok, message = await self.check(request, base_url)
        if not ok:
            raise web.HTTPError(502, f"Not connected: {message}")
        model = request.model.strip()
        scrub = Scrubber([request.api_key])
        target = self.connect_options.target()
        # The endpoint's other models go in the picker (it answered /models for the dialog).
        served = await list_models(TYPED, base_url, request.api_key, timeout=self.listing_timeout)
        try:
            path = await asyncio.to_thread(write_setting, target, base_url, model, request.api_key,
                                           served.models)
        except ConnectError as exc:
            raise web.HTTPError(409, str(exc)) from None
        except OSError as exc:
            raise web.HTTPError(500, scrub.text(f"The setting could not be written: {exc}")) from None
        setting = written_setting(base_url, model, request.api_key, served.models)
        lost = await asyncio.to_thread(overridden, Config(self.config or {}), path, setting)
        use = self.agent_state.use_model
        if use is not None:
            use({**setting, "models": tuple(setting["models"])})
        where = f"written to {path}"
        if lost:
            where += (f"; but at the next start c.DataAgent.{', c.DataAgent.'.join(lost)} set elsewhere wins "
                      "(the server's jupyter_server_config, its command line, or a "
                      "jupyter_data_agent_config.py): remove it there to keep this model")
        message = (f"Connected: {model} at {redact_url(base_url)} answers from now on ({where})."
                   if use is not None else f"The setting is {where}. Restart JupyterLab to use it.")
        self.log.info("jupyter_data_agent: connected %s at %s (%s, key %s)", model, redact_url(base_url),
                      path, "set" if request.api_key else "not set")
        info = ModelInfo.model_validate(model_info(self.agent_settings)) if use is not None else ModelInfo(
            name=model, kind="openai", note="after a restart")
        reply = Connected(path=str(path), applied=use is not None, message=scrub.text(message),
                          model_info=info, overridden=lost)
        self.finish(reply.model_dump_json())
