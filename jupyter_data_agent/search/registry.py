"""Every strategy once: its name, class, options, the words outside agents use, and where it is offered.

The magic's ``--strategy`` help, the strategy classes (``search.get_strategy``),
the MCP tool's and ACP's choices and the alias table derive from ``REGISTRY``;
``StrategyName`` (written out, for mypy and the generated TypeScript) and the
settings schema (``schema/plugin.json``) cannot be computed: they are checked
against it (at import, and by ``tests/test_strategy_registry.py``). A surface that leaves a strategy out says why here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from .options import OPTIONS_BY_STRATEGY

#: Every strategy's name, as the wire (and ``src/wire.ts``) spells it; equal to ``REGISTRY``'s (checked below).
StrategyName = Literal["direct", "vote", "react", "mcts", "analysis", "explain"]
#: Where a strategy can be offered: the sidebar's chat, its cell menu's Fix / Improve, the
#: ``%%agent`` magic, the MCP tool ``ask_data_agent``, and ACP's slash commands.
Surface = Literal["chat", "cell_edit", "magic", "mcp", "acp"]
SURFACES: tuple[Surface, ...] = ("chat", "cell_edit", "magic", "mcp", "acp")

#: Why outside agents (MCP, ACP) are not offered Explain: they are language models that read the
#: notebook themselves (MCP's read tools, ACP's links) and explain code in their own words; what they
#: come to this server for is candidates run in kernel copies, which Explain does not do.
_AGENTS_EXPLAIN = "an outside agent is a model that reads the notebook and explains code itself; Explain runs nothing"


@dataclass(frozen=True)
class StrategyEntry:
    name: StrategyName  # the wire name (TurnRequest.strategy, events, c.DataAgent.strategy_defaults keys)
    cls: str  # its class, in search/<name>.py
    word: str  # what outside agents call it (MCP's choice; ACP's slash command unless ``command``)
    for_agents: str  # what it does, for an outside agent (MCP's description, ACP's command list)
    command: str = ""  # ACP's slash command, when it is not ``word`` (``word`` is still accepted)
    not_on: dict[Surface, str] = field(default_factory=dict)  # surfaces that leave it out, and why

    @property
    def label(self) -> str:
        return OPTIONS_BY_STRATEGY[self.name].label  # type: ignore[attr-defined,no-any-return]

    @property
    def summary(self) -> str:
        return OPTIONS_BY_STRATEGY[self.name].summary  # type: ignore[attr-defined,no-any-return]

    def offered_on(self, surface: Surface) -> bool:
        return surface not in self.not_on


#: In the order the sidebar and the magic list them (``search.options.OPTIONS_BY_STRATEGY``'s).
REGISTRY: tuple[StrategyEntry, ...] = (
    StrategyEntry("direct", "DirectStrategy", "direct",
                  "One candidate, run once in a kernel copy: the fastest answer", command="quick"),
    StrategyEntry("vote", "VoteStrategy", "vote",
                  "Sample several candidates, run each in a kernel copy, keep the answer most agree on"),
    StrategyEntry("react", "ReactStrategy", "react",
                  "Think, run a step in a kernel copy, look at its output, repeat",
                  not_on={"cell_edit": "Fix and Improve edit one cell; the agent loop writes several"}),
    StrategyEntry("mcts", "MCTSStrategy", "search",
                  "Sample candidates as the vote does, then more where they disagree, each run in a kernel "
                  "copy; the answer most agree on",
                  not_on={"cell_edit": "Fix and Improve edit one cell with one candidate or a vote"}),
    StrategyEntry("analysis", "AnalysisStrategy", "analysis",
                  "A multi-step analysis: a plan, then one verified cell per step",
                  not_on={"cell_edit": "Fix and Improve edit one cell; an analysis adds several"}),
    StrategyEntry("explain", "ExplainStrategy", "explain", "An answer in words; no code is run",
                  not_on={"chat": "the cell menu's Explain this cell asks for it; the chat runs code",
                          "cell_edit": "it edits nothing", "mcp": _AGENTS_EXPLAIN, "acp": _AGENTS_EXPLAIN}),
)
BY_NAME: dict[str, StrategyEntry] = {entry.name: entry for entry in REGISTRY}
if not tuple(BY_NAME) == tuple(OPTIONS_BY_STRATEGY) == get_args(StrategyName):  # pragma: no cover - a contract
    raise ImportError(f"search.registry {tuple(BY_NAME)} differs from search.options {tuple(OPTIONS_BY_STRATEGY)} "
                      f"or StrategyName {get_args(StrategyName)}")

#: Every word that names a strategy (its name, its agents' word and command, e.g. ``search``,
#: ``quick``): the one alias table.
ALIASES: dict[str, StrategyName] = {word: entry.name for entry in REGISTRY
                           for word in (entry.name, entry.word, entry.command) if word}


def offered(surface: Surface) -> tuple[StrategyEntry, ...]:
    """The strategies ``surface`` offers, in the registry's order."""
    return tuple(entry for entry in REGISTRY if entry.offered_on(surface))


def names(surface: Surface) -> tuple[str, ...]:
    return tuple(entry.name for entry in offered(surface))


def words(surface: Surface) -> tuple[str, ...]:
    """What an outside agent on ``surface`` picks from (MCP's choices, ACP's slash commands)."""
    return tuple((entry.command if surface == "acp" else "") or entry.word for entry in offered(surface))


def agent_help(surface: Surface) -> str:
    """``word: what it does`` for each strategy ``surface`` offers (the MCP tool's description)."""
    return "; ".join(f"{entry.word}: {entry.for_agents}" for entry in offered(surface)) + "."


def available_strategies() -> list[str]:
    """The strategies whose code imports here, in the catalog's order."""
    from . import get_strategy

    out = []
    for entry in REGISTRY:
        try:
            get_strategy(entry.name)
        except (ValueError, ImportError):
            continue
        out.append(entry.name)
    return out
