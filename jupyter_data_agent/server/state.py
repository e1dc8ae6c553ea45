"""The extension's state, shared by its handlers and the MCP extension point: one typed object.

``DataAgentExtension.initialize_settings`` builds it once and puts it in the
Tornado settings under ``STATE_KEY``; handlers read it as ``agent_state``
(``handlers.AgentMixin``), the MCP bridge passes it on to its tools
(``mcp.caller.Caller.state``). Only ``settings`` changes later (a reloaded value model, a
connected model).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Settings
    from ..store.decisions import DecisionStore
    from .agent_auth import AgentIdentity
    from .complete import SchemaCache
    from .jobs import JobManager
    from .model_service import ModelService
    from .models import ServerLimits
    from .proposals import ProposalStore
    from .tries import TryManager
    from .turns import TurnService

#: The key of the state in the Tornado settings (the extension's name).
STATE_KEY = "jupyter_data_agent"


@dataclass(eq=False)
class AgentState:
    settings: Settings  # the resolved settings turns start from (with the newest value model)
    jobs: JobManager
    turns: TurnService  # the one place turns start and are read
    tries: TryManager
    proposals: ProposalStore
    public_limits: ServerLimits  # the bounds GET config tells the sidebar
    owner_scope: str  # c.DataAgentExtension.job_owner_scope: "auto", "user" or "server"
    reload_value_model: Callable[[], str]  # POST value-model/reload; returns what guides Search now
    inline_schemas: SchemaCache  # the schema block of each kernel, for inline completion and warm-up
    agent_identity: AgentIdentity  # the outside agents' tokens in front of the server's identity provider
    decisions: DecisionStore | None = None  # None: decisions are not recorded
    model_service: ModelService | None = None  # None: kernels load their own model
    # POST connect: this server answers with the connected model from now on (settings changes).
    use_model: Callable[[dict], Settings] | None = None
    # MCP sessions (or agents) already told the confinement layers (``mcp.tools``), oldest first.
    mcp_confinement_told: OrderedDict[tuple[str, str], bool] = field(default_factory=OrderedDict)


def agent_state(settings: dict[str, Any]) -> AgentState:
    """The extension's state in the Tornado ``settings`` (of the web app or a handler)."""
    state = settings[STATE_KEY]
    assert isinstance(state, AgentState), type(state)
    return state
