"""The jupyter_server extension: settings, model backend, turn jobs and handlers.

Model options live on ``c.DataAgent.*`` (shared with the ``%%agent`` magic);
what only the server needs — job concurrency, retention, kernel copies —
lives here as ``c.DataAgentExtension.*``.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from traitlets import Any, Bool, Enum, Float, Instance, Int, Unicode

from ..config import DataAgent, Settings
from ..search.estimators import default_estimator
from ..store.value_models import value_model_label, with_newest_value_model
from ..turn.resolve import load_settings
from .complete import CompleteHandler, SchemaCache
from .connect import ModelConnect
from .connect_handlers import CheckHandler, ConnectModelHandler, ModelsHandler, ServersHandler
from .handlers import (
    AnalysisHandler,
    CancelHandler,
    ConfigHandler,
    DecisionsHandler,
    FinishHandler,
    JobEventsHandler,
    JobHandler,
    NoKernelHandler,
    TurnsHandler,
    ValueModelReloadHandler,
    VariablesHandler,
    WarmRootsHandler,
)
from .jobs import JobLimits, JobManager
from .turns import TurnService

if TYPE_CHECKING:
    from .agent_auth import AgentIdentity
    from .magic_turns import MagicTurns
from .model_service import ModelService
from .models import MAX_INTENT_CHARS, ServerLimits
from .notebook_handlers import NotebooksHandler
from .proposal_handlers import ProposalDecisionHandler, ProposalHandler, ProposalsHandler
from .proposals import ProposalStore
from .state import STATE_KEY, AgentState
from .token_handlers import AgentTokensHandler
from .tries import TryLimits, TryManager
from .warm import WarmHandler

NAMESPACE = "jupyter-data-agent"
_JOB_ID = r"(?P<job_id>[^/]+)"
_PROPOSAL_ID = r"(?P<proposal_id>[^/]+)"
_TURN_ID = r"(?P<turn_id>[^/]+)"

class DataAgentExtension(ExtensionApp):
    name = "jupyter_data_agent"
    # The labextension is shipped prebuilt; nothing to serve from here.
    load_other_extensions = True

    # DataAgent options may live in jupyter_server_config.py as c.DataAgent.*.
    classes = [DataAgent, ModelConnect]

    agent_settings = Instance(Settings, allow_none=True)
    configured_settings = Instance(Settings, allow_none=True)  # before the trained value model
    jobs = Instance(JobManager, allow_none=True)
    tries = Instance(TryManager, allow_none=True)
    state = Instance(AgentState, allow_none=True)  # what the handlers read (server.state)

    max_concurrent_jobs = Int(
        2, min=1, help="Turns whose search runs at the same time; later ones wait (queued)."
    ).tag(config=True)
    max_pending_jobs = Int(
        16, min=0, help="Turns that may wait for a slot; beyond this POST turns answers 429."
    ).tag(config=True)
    max_jobs_per_user = Int(
        4, min=1, help="Turns one user may have running or queued (and cancelled turns still waiting "
        "for the model endpoint); beyond this POST turns answers 429 to that user only."
    ).tag(config=True)
    max_running_jobs_per_user = Int(
        0, min=0, help="Turns of one user whose search runs at the same time; 0: one less than "
        "max_concurrent_jobs (at least 1), so one user's turns never hold every slot and another "
        "user's turn starts when a slot frees before theirs. Under the stock token/password "
        "providers (one principal) the server-wide bound alone applies."
    ).tag(config=True)
    max_snapshot_processes = Int(
        16, min=1, help="Live kernel-copy processes per turn (idle leaves are evicted beyond it)."
    ).tag(config=True)
    max_total_snapshot_processes = Int(
        64, min=1, help="Live kernel-copy processes of all turns together in this server."
    ).tag(config=True)
    job_retention_s = Float(
        900.0, min=0.0, help="Seconds a finished turn's events stay available to late subscribers."
    ).tag(config=True)
    max_retained_jobs = Int(200, min=1, help="Finished turns kept at most (oldest dropped first).").tag(
        config=True
    )
    kernel_wait_notice_s = Float(
        1.0, min=0.0, help="Seconds without a kernel answer before the turn says it waits for the kernel."
    ).tag(config=True)
    kernel_wait_timeout_s = Float(
        600.0, min=0.0, help="Seconds a turn waits for a busy kernel before going on without live state."
    ).tag(config=True)
    snapshot_timeout_s = Float(60.0, min=0.1, help="Seconds allowed to fork the kernel into a copy.").tag(
        config=True
    )
    job_owner_scope = Enum(
        ["auto", "user", "server"],
        default_value="auto",
        help="Who may see a turn: 'user' = the user who started it; 'server' = anyone "
        "authenticated; 'auto' = 'user' under identity providers that name users "
        "(JupyterHub, custom), 'server' under the stock token/password providers.",
    ).tag(config=True)

    model_service = Bool(
        True, help="Serve the model to the kernels this server launches (the agent magic): one model "
        "per server, no weights in kernels. False: each kernel loads its own."
    ).tag(config=True)
    model_queue = Int(
        8, min=0, help="Model requests from kernels that may wait for the model; beyond: 'model busy'."
    ).tag(config=True)
    model_endpoint_concurrency = Int(
        8, min=1, help="Requests the model service sends to an endpoint (the openai backend) at the same "
        "time, from all kernels; a local model (llama.cpp, transformers, vLLM) serves one at a time."
    ).tag(config=True)
    service = Any(None, allow_none=True)

    # The try_code handles' own limits (ttl, handles per user) are MCP-only: c.MCPExtension.*.
    max_concurrent_tries = Int(
        32, min=1, help="Outside agents' try_code runs (and proposals' runs) forking or running at the "
        "same time, all users together."
    ).tag(config=True)
    max_concurrent_tries_per_user = Int(
        4, min=1, help="Of those, one user's at most; that user's further tries wait in a line of their own "
        "(another user's try starts at once while slots are free)."
    ).tag(config=True)
    warm_root_idle_s = Float(
        600.0, min=0.0, help="Seconds a kernel's warm root (a confined copy of it, made when it goes idle "
        "after a cell, that fresh tries fork from in milliseconds) is kept after the last try on that "
        "kernel; 0: no warm roots, each fresh try forks the live kernel."
    ).tag(config=True)
    max_proposals_per_user = Int(
        200, min=1, help="Proposals from outside agents kept per user (decided ones are dropped first)."
    ).tag(config=True)

    record_decisions = Bool(
        True,
        help="Record accept / accept & run / edit / reject of candidates, with the turn's prompt, "
        "steps and outputs, in a local SQLite file (decisions_path) for training the value model. "
        "Nothing leaves this machine.",
    ).tag(config=True)
    decisions_path = Unicode(
        "", help="The decisions store; empty: <jupyter data dir>/jupyter_data_agent/decisions.sqlite."
    ).tag(config=True)

    agent_tokens_path = Unicode(
        "", help="Where the outside agents' scoped tokens are kept (hashed); empty: "
        "<jupyter data dir>/jupyter_data_agent/agent_tokens.json, where `jupyter-data-agent token` "
        "writes them."
    ).tag(config=True)

    def initialize_settings(self) -> None:
        from ..kernel.forktree.snapshot import SnapshotTree

        self.configured_settings = load_settings(self.config)
        self.agent_settings = with_newest_value_model(self.configured_settings)
        SnapshotTree.max_processes = self.max_total_snapshot_processes
        limits = JobLimits(
            max_concurrent_jobs=self.max_concurrent_jobs,
            max_pending_jobs=self.max_pending_jobs,
            max_jobs_per_user=self.max_jobs_per_user,
            max_running_jobs_per_user=self.max_running_jobs_per_user or None,
            max_snapshot_processes=self.max_snapshot_processes,
            job_retention_s=self.job_retention_s,
            max_retained_jobs=self.max_retained_jobs,
            kernel_wait_notice_s=self.kernel_wait_notice_s,
            kernel_wait_timeout_s=self.kernel_wait_timeout_s,
            snapshot_timeout_s=self.snapshot_timeout_s,
        )
        assert self.serverapp is not None  # set by jupyter_server before initialize_settings
        self.jobs = JobManager(
            settings=self.agent_settings,
            limits=limits,
            kernel_manager=self.serverapp.kernel_manager,
            root_dir=getattr(self.serverapp, "root_dir", None),
            authorizer_log=self.log,
            secrets=[self._server_token()],
        )
        self.turns = TurnService(self.jobs)
        if self.model_service and self.service is None:
            self.service = ModelService(self.agent_settings, max_waiting=self.model_queue,
                                        endpoint_concurrency=self.model_endpoint_concurrency,
                                        log_=self.log)
            try:
                path = self.service.start()
                self.log.info("jupyter_data_agent: model service for kernels on %s", path)
            except OSError as exc:  # no Unix sockets here: kernels load their own model
                self.log.warning("jupyter_data_agent: model service not started: %s", exc)
                self.service = None
        if self.service is not None:
            self.service.turns = self._magic_turns(self.service)
        # ttl_s and max_handles_per_user: c.MCPExtension's (mcp.extension), set when it loads.
        self.tries = TryManager(jobs=self.jobs, session_manager=self.serverapp.session_manager,
                                redact=self.jobs.scrub.json,
                                limits=TryLimits(max_concurrent=self.max_concurrent_tries,
                                                 max_concurrent_per_user=self.max_concurrent_tries_per_user,
                                                 warm_root_idle_s=self.warm_root_idle_s))
        self.jobs.warm_roots = self.tries.warm  # turns fork their copies from the kernels' warm roots
        self.state = AgentState(
            settings=self.agent_settings,
            jobs=self.jobs,
            turns=self.turns,
            tries=self.tries,
            proposals=ProposalStore(self.max_proposals_per_user),
            public_limits=ServerLimits(
                max_samples=self.agent_settings.max_samples,
                max_budget=self.agent_settings.max_budget,
                max_intent_chars=MAX_INTENT_CHARS,
                max_concurrent_jobs=limits.max_concurrent_jobs,
            ),
            owner_scope=self.job_owner_scope,
            reload_value_model=self.reload_value_model,
            inline_schemas=SchemaCache(),
            decisions=self._decision_store(),
            model_service=self.service,
            agent_identity=self._agent_tokens(),
            use_model=self.use_model,
        )
        self.settings[STATE_KEY] = self.state
        self.log.info("jupyter_data_agent: Search turns are guided by %s",
                      value_model_label(self.agent_settings, default_estimator()))
        self.jobs.service = self.service
        self.log.info(
            "jupyter_data_agent: backend=%s model=%s",
            self.agent_settings.backend,
            self.agent_settings.model or "(default)",
        )

    def _magic_turns(self, service: ModelService) -> "MagicTurns":
        """``%%agent`` turns of this server's kernels run here, through the turn service."""
        from .handlers import one_principal
        from .magic_turns import MagicTurns, kernel_owner

        assert self.serverapp is not None
        shared = one_principal(self.serverapp.identity_provider, self.job_owner_scope)
        return MagicTurns(self.turns, self.serverapp.io_loop.asyncio_loop,  # type: ignore[attr-defined]
                          session_manager=self.serverapp.session_manager,
                          owner=lambda kernel_id: kernel_owner(shared, kernel_id),
                          settings_for=service.settings_for, fork_timeout_s=self.snapshot_timeout_s)

    def _agent_tokens(self) -> "AgentIdentity":
        """Agent tokens in front of the server's identity provider and authorizer (``agent_auth``)."""
        from ..store.agent_tokens import AgentTokenStore
        from .agent_auth import AgentAuthorizer, AgentIdentity

        assert self.serverapp is not None
        identity = self.settings.get("identity_provider") or self.serverapp.identity_provider
        if not isinstance(identity, AgentIdentity):
            identity = AgentIdentity(identity, AgentTokenStore(self.agent_tokens_path or None))
            self.settings["identity_provider"] = identity
            self.settings["authorizer"] = AgentAuthorizer(self.settings.get("authorizer")
                                                          or self.serverapp.authorizer)
        return identity

    def reload_value_model(self) -> str:
        """Search turns from now on use the newest trained value model; returns what guides them."""
        assert self.configured_settings is not None and self.jobs is not None and self.state is not None
        self.agent_settings = with_newest_value_model(self.configured_settings)
        self.state.settings = self.agent_settings
        self.jobs.settings = self.agent_settings
        label = value_model_label(self.agent_settings, default_estimator())
        self.log.info("jupyter_data_agent: Search turns are guided by %s", label)
        return label

    def use_model(self, changes: dict) -> Settings:
        """``POST connect``: turns, inline completion and the kernels' model service use the
        connected model from now on, as the server would after a restart with the file written."""
        assert self.configured_settings is not None and self.jobs is not None
        self.configured_settings = replace(self.configured_settings, **changes)
        self.jobs.scrub.add(self.configured_settings.api_key)
        self.reload_value_model()
        assert self.agent_settings is not None
        if self.service is not None:
            self.service.settings = self.agent_settings
        return self.agent_settings

    def _decision_store(self):
        if not self.record_decisions:
            return None
        from ..store.decisions import DecisionStore, default_store_path

        try:
            store = DecisionStore(self.decisions_path or default_store_path())
        except Exception as exc:  # noqa: BLE001 -- an unwritable data dir (or any store error) must not stop the server
            self.log.warning("jupyter_data_agent: decisions are not recorded: %s", exc)
            return None
        self.log.info("jupyter_data_agent: decisions recorded in %s", store.path)
        return store

    def _server_token(self) -> str:
        """The server's own token: a candidate that finds it must not show it in the browser."""
        provider = getattr(self.serverapp, "identity_provider", None)
        return str(getattr(provider, "token", "") or "")

    def initialize_handlers(self) -> None:
        # ExtensionApp prepends the server's base_url to these patterns.
        def route(*parts: str) -> str:
            return url_path_join(NAMESPACE, *parts)

        self.handlers.extend(
            [
                (route("config"), ConfigHandler),
                (route("complete"), CompleteHandler),
                (route("warm"), WarmHandler),
                (route("turns"), TurnsHandler),
                (route("turns", _TURN_ID, "analysis"), AnalysisHandler),
                (route("decisions"), DecisionsHandler),
                (route("value-model", "reload"), ValueModelReloadHandler),
                (route("variables"), VariablesHandler),
                (route("warm-roots"), WarmRootsHandler),
                (route("jobs", _JOB_ID), JobHandler),
                (route("jobs", _JOB_ID, "cancel"), CancelHandler),
                (route("jobs", _JOB_ID, "finish"), FinishHandler),
                (route("jobs", _JOB_ID, "no-kernel"), NoKernelHandler),
                (route("jobs", _JOB_ID, "events"), JobEventsHandler),
                (route("proposals"), ProposalsHandler),
                (route("proposals", _PROPOSAL_ID), ProposalHandler),
                (route("proposals", _PROPOSAL_ID, "decision"), ProposalDecisionHandler),
                (route("notebooks"), NotebooksHandler),
                (route("agent-tokens"), AgentTokensHandler),
                (route("agent-tokens", r"(?P<token_id>[^/]+)"), AgentTokensHandler),
                (route("connect"), ConnectModelHandler),
                (route("connect", "servers"), ServersHandler),
                (route("connect", "models"), ModelsHandler),
                (route("connect", "check"), CheckHandler),
            ]
        )

    async def stop_extension(self) -> None:
        """Cancel running turns and end every kernel copy; then release the model.

        jupyter_server awaits this on SIGTERM/SIGINT (``_cleanup`` ->
        ``cleanup_extensions``) before it shuts the kernels down, so no copy
        outlives its kernel's server.
        """
        if self.tries is not None:
            await self.tries.shutdown()
        if self.jobs is not None:
            await self.jobs.shutdown()
        if self.service is not None:
            service, self.service = self.service, None
            await asyncio.to_thread(service.stop)
        from ..llm.factory import close_backends

        await asyncio.to_thread(close_backends)
