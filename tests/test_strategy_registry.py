"""Every list of strategies is the registry's (``search.registry``): derived from it, or, where a
file cannot import Python (the settings schema, the generated TypeScript), checked against it here."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from jupyter_data_agent.config import Settings
from jupyter_data_agent.magics import USAGE
from jupyter_data_agent.mcp.acp_updates import COMMANDS, STRATEGY_WORDS, available_commands
from jupyter_data_agent.mcp.tools import build_server
from jupyter_data_agent.search import get_strategy
from jupyter_data_agent.search.options import OPTIONS_BY_STRATEGY, STRATEGIES
from jupyter_data_agent.search.registry import (
    ALIASES,
    BY_NAME,
    REGISTRY,
    SURFACES,
    StrategyName,
    available_strategies,
    names,
    words,
)
from jupyter_data_agent.server.models import TurnRequestModel
from jupyter_data_agent.turn.resolve import catalog

ROOT = Path(__file__).resolve().parents[1]


def test_the_registry_names_every_strategy_once_with_its_class_and_options():
    assert tuple(BY_NAME) == STRATEGIES == tuple(OPTIONS_BY_STRATEGY)
    for entry in REGISTRY:
        assert type(get_strategy(entry.name)).__name__ == entry.cls
        assert entry.label and entry.summary and entry.for_agents
        assert all(surface in SURFACES and why for surface, why in entry.not_on.items()), entry
    assert available_strategies() == list(BY_NAME)
    assert [s["name"] for s in catalog(Settings(backend="openai"))] == list(BY_NAME)


def test_one_alias_table_for_every_word():
    assert ALIASES["search"] == "mcts" and ALIASES["quick"] == "direct"
    assert {ALIASES[name] for name in BY_NAME} == set(BY_NAME)
    assert set(words("mcp")) <= set(ALIASES) and set(words("acp")) <= set(ALIASES)


def test_the_wire_models_and_the_generated_typescript_spell_the_registry():
    from typing import get_args

    assert get_args(StrategyName) == tuple(BY_NAME)
    schema = TurnRequestModel.model_json_schema()
    assert tuple(schema["properties"]["strategy"]["enum"]) == tuple(BY_NAME)
    literal = " | ".join(f"'{name}'" for name in BY_NAME)
    wire = (ROOT / "src" / "wire.ts").read_text()
    assert re.search(rf"strategy\??: {re.escape(literal)};", wire), "src/wire.ts is not regenerated"


def test_the_settings_schema_offers_the_registrys_chat_and_cell_edit_strategies():
    schema = json.loads((ROOT / "schema" / "plugin.json").read_text())["properties"]
    assert tuple(o["const"] for o in schema["defaultStrategy"]["oneOf"]) == names("chat")
    assert tuple(o["const"] for o in schema["cellEditStrategy"]["oneOf"]) == names("cell_edit")
    assert schema["defaultStrategy"]["default"] in names("chat")
    assert schema["cellEditStrategy"]["default"] in names("cell_edit")


def test_the_magic_lists_its_strategies_from_the_registry():
    assert "--strategy " + "|".join(names("magic")) in USAGE
    assert set(names("magic")) == set(BY_NAME)


def test_mcp_and_acp_offer_the_registrys_words_and_say_why_not_the_others():
    tools = asyncio.run(build_server().list_tools())
    strategy = next(t for t in tools if t.name == "ask_data_agent").input_schema["properties"]["strategy"]
    assert tuple(strategy["enum"]) == words("mcp") == ("direct", "vote", "react", "search", "analysis")
    assert all(f"{word}:" in strategy["description"] for word in words("mcp"))
    offered = [c.name for c in available_commands().available_commands]
    assert tuple(offered) == tuple(COMMANDS) == words("acp")
    assert set(STRATEGY_WORDS.values()) == set(names("acp")) == set(BY_NAME) - {"explain"}
    assert BY_NAME["explain"].not_on["mcp"] and BY_NAME["explain"].not_on["acp"]
