"""Each setting is declared once: change one trait and the magic, the server and the sidebar follow.

``c.DataAgent.max_samples`` / ``max_budget`` bound the sidebar's inputs (read
from ``GET config``; the Galata side is ui-tests/tests/limits.spec.ts), the
server's requests and the magic's flags, through the one check in
``turn.resolve``. Every other trait, set to a value that is not its default,
reaches the resolved settings and what it governs (a turn's spec, the backend,
``GET config``); and the vote's own settings, in the server's config file,
change how many completions a vote draws. A real Jupyter server, a real
kernel, the OpenAI test server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_data_agent.config import DataAgent
from jupyter_data_agent.llm.factory import create_backend
from jupyter_data_agent.server.state import agent_state
from jupyter_data_agent.turn.resolve import resolve
from jupyter_data_agent.turn.spec import TurnAsk
from tests.conftest import agent_server_config
from tests.kernel_helpers import run_cell, start_kernel, stop_kernel
from tests.test_server import KEY, NS, on_server_loop, post_turn, stream_events, turn_body
from tests.test_server import start_kernel as start_server_kernel

LIMITS = {"max_samples": 3, "max_budget": 7}


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=lambda request: "```python\n# Step 1: Count.\nlen(df)\n```")


@pytest.fixture
def agent_traits(request, model_server) -> dict:
    """The ``c.DataAgent`` traits of the server's config: the limits, none, or every trait changed."""
    kind = getattr(request, "param", "limits")
    if kind == "every":
        return {name: value for name, (value, _) in non_default(model_server).items()}
    return {} if kind == "none" else LIMITS


@pytest.fixture
def config_file() -> str:
    """Lines of the server's ``jupyter_server_config.py`` (a test parametrizes its own)."""
    return ""


@pytest.fixture
def jp_server_config(model_server, monkeypatch, agent_traits, config_file, jp_config_dir):
    (jp_config_dir / "jupyter_server_config.py").write_text(config_file)
    return agent_server_config(model_server, monkeypatch, **agent_traits)


@on_server_loop
async def test_the_server_offers_and_enforces_the_configured_limits(jp_fetch):
    config = json.loads((await jp_fetch(NS, "config")).body)
    assert {k: config["limits"][k] for k in LIMITS} == LIMITS
    vote = next(s for s in config["strategies"] if s["name"] == "vote")
    assert vote["samples"] == LIMITS["max_samples"]  # the default (5) lowered to the limit
    for options, word in (({"samples": 4}, "max_samples"), ({"budget": 8}, "max_budget")):
        strategy = "vote" if "samples" in options else "mcts"
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch(NS, "turns", method="POST",
                           body=json.dumps(turn_body(strategy=strategy, options=options)))
        assert refused.value.code == 400
        assert word in refused.value.response.body.decode()
    accepted = await jp_fetch(NS, "turns", method="POST", body=json.dumps(turn_body(
        strategy="vote", options={"samples": 3, "use_live_state": False})))
    assert accepted.code == 202


def test_the_magic_enforces_the_same_limits(model_server, tmp_path):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "jupyter_data_agent_config.json").write_text(json.dumps({"DataAgent": LIMITS}))
    env = {"JUPYTER_DATA_AGENT_BACKEND": "openai", "OPENAI_BASE_URL": model_server.base_url,
           "OPENAI_API_KEY": "sk-test", "JUPYTER_DATA_AGENT_MODEL": "test-model",
           "JUPYTER_CONFIG_DIR": str(config_dir)}
    km, kc = start_kernel(env)
    try:
        setup = run_cell(kc, "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n%load_ext jupyter_data_agent")
        assert setup.status == "ok", setup
        too_many = run_cell(kc, "%%agent --no-exec --samples 4\nHow many rows?")
        assert "samples is 4; at most 3" in too_many.stderr and "c.DataAgent.max_samples" in too_many.stderr
        too_long = run_cell(kc, "%%agent --no-exec --strategy mcts --budget 8\nHow many rows?")
        assert "budget is 8; at most 7" in too_long.stderr
        model_server.clear()
        fine = run_cell(kc, "%%agent --no-exec --samples 3\nHow many rows?")
        assert fine.status == "ok" and model_server.generation_requests[0].n == 3
    finally:
        stop_kernel(km, kc)
    assert os.environ.get("JUPYTER_CONFIG_DIR") != str(config_dir)


VOTE_CONFIG = "c.DataAgent.vote_adaptive = True\nc.DataAgent.vote_stop_posterior = 0.6\n"


@pytest.mark.parametrize(("agent_traits", "config_file"), [("none", VOTE_CONFIG)], indirect=["agent_traits"])
@on_server_loop
async def test_the_config_files_adaptive_vote_draws_fewer_completions(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                      model_server):
    """The bar of issue 36: c.DataAgent.vote_adaptive / vote_stop_posterior in the server's config
    file reach the turn; a unanimous vote asked for 8 samples stops before drawing them all."""
    kernel_id, _km, kc = await start_server_kernel(jp_fetch, jp_serverapp)
    try:
        model_server.clear()
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="vote", options={"samples": 8})
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
    finally:
        kc.stop_channels()
    assert events[-1]["type"] == "done", events[-1]
    drawn = sum(r.n for r in model_server.generation_requests)
    assert 1 <= drawn < 8, drawn
    stats = events[-1]["data"]["result"]["stats"]
    assert stats["unspent"] == 8 - drawn, stats


def non_default(model_server) -> dict:
    """A valid value, not the default, for every ``c.DataAgent`` trait, and what it must change.

    ``check(r)`` is given the running server's resolved state (``Reached``) and asserts on the
    thing the trait governs. A trait added to ``DataAgent`` without a row here fails the test.
    """
    model, key = "test-model", KEY
    return {
        "backend": ("openai", lambda r: type(r.backend).__name__ == "OpenAIBackend"),
        "model": (model, lambda r: r.backend.model == model and r.config["models"][0] == model),
        "base_url": (model_server.base_url, lambda r: r.backend.base_url == model_server.base_url.rstrip("/")),
        "api_key": (key, lambda r: r.backend._client.api_key == key and r.config["api_key_set"]
                    and key not in json.dumps(r.config)),
        "api_mode": ("completion", lambda r: r.vote.prompt.api_mode == "completion"
                     and r.config["capabilities"]["chat"] is False),
        "device": ("cpu", lambda r: r.backend.settings.device == "cpu"),
        "dtype": ("float32", lambda r: r.backend.settings.dtype == "float32"),
        "threads": (3, lambda r: r.backend.settings.threads == 3),
        "wait_policy": ("passive", lambda r: r.backend.settings.wait_policy == "passive"),
        "max_prompt_tokens": (1500, lambda r: r.vote.prompt.max_prompt_tokens == 1500),
        "max_new_tokens": (99, lambda r: r.vote.sampling.max_new_tokens == 99),
        "temperature": (0.3, lambda r: r.vote.sampling.temperature == 0.3),
        "sample_temperature": (0.9, lambda r: r.vote.sampling.temperature_for(2) == 0.9),
        "request_timeout": (33.0, lambda r: r.backend.timeout == 33.0),
        "max_retries": (1, lambda r: r.backend.max_retries == 1),
        "max_samples": (6, lambda r: r.config["limits"]["max_samples"] == 6),
        "max_budget": (50, lambda r: r.config["limits"]["max_budget"] == 50),
        "exemplars": (False, lambda r: r.vote.prompt.exemplars is False),
        "vllm_args": (["--enforce-eager"], lambda r: r.backend.settings.vllm_args == ("--enforce-eager",)),
        "extra": ({"retry_backoff": 0.25}, lambda r: r.backend.retry_backoff == 0.25),
        "strategy_defaults": ({"mcts": {"max_depth": 4}}, lambda r: r.mcts.options.max_depth == 4),
        "snapshot_limits": ({"timeout_s": 45}, lambda r: r.vote.copies.limits == {"timeout_s": 45}),
        "models": (["other-model"], lambda r: r.config["models"] == [model, "other-model"]),
        "prices": ({model: {"input": 1.5, "output": 2.5}},
                   lambda r: r.config["price"] == {"input": 1.5, "output": 2.5}),
        "vision": (True, lambda r: r.backend.capabilities.image_input is True),
        "send_images": (False, lambda r: r.vote.prompt.images == 0),
        "max_images": (2, lambda r: resolve(replace(r.settings, send_images=True),
                                            TurnAsk(intent="-")).prompt.images == 2),
        "max_image_bytes": (50_000, lambda r: r.vote.prompt.image_bytes == 50_000),
        # On although the model has a price ('auto' would be off).
        "inline_completion": ("on", lambda r: r.config["capabilities"]["inline_completion"] is True),
        "probes": (False, lambda r: r.vote.options.probes is False and r.mcts.options.probes is False),
        "vote_adaptive": (True, lambda r: r.vote.options.adaptive is True),
        "vote_stop_posterior": (0.6, lambda r: r.vote.options.stop_posterior == 0.6),
        "confinement": ("warn", lambda r: r.vote.copies.confinement == "warn"),
    }


@dataclass
class Reached:
    settings: object  # the server's resolved Settings
    config: dict  # GET config
    vote: object  # the TurnSpec the server resolved for a vote turn
    mcts: object  # ... and for a Search turn
    backend: object  # the backend built from the settings


@pytest.mark.parametrize("agent_traits", ["every"], indirect=True)
@on_server_loop
async def test_every_trait_reaches_the_settings_and_what_it_governs(jp_fetch, jp_serverapp, model_server):
    table = non_default(model_server)
    declared = DataAgent.class_traits(config=True)
    assert set(table) == set(declared), "a c.DataAgent trait without a row in non_default()"
    for name, (value, _) in table.items():
        assert value != declared[name].default_value, f"{name}: {value!r} is its default"

    state = agent_state(jp_serverapp.web_app.settings)
    config = json.loads((await jp_fetch(NS, "config")).body)
    specs = {}
    for strategy in ("vote", "mcts"):
        accepted = await post_turn(jp_fetch, strategy=strategy, options={"use_live_state": False})
        job = state.jobs.jobs[accepted["job_id"]]
        specs[strategy] = job.spec
        await jp_fetch(NS, "jobs", accepted["job_id"], "cancel", method="POST", body="{}")
    reached = Reached(state.settings, config, specs["vote"], specs["mcts"], create_backend(state.settings))

    for name, (value, check) in table.items():
        resolved = getattr(state.settings, name)
        assert resolved == (tuple(value) if isinstance(value, list) else value), (name, resolved)
        if name != "api_key":  # GET config holds every setting but the secret
            shown = config[name]
            assert shown == value or name == "models", (name, shown)
        assert check(reached), f"c.DataAgent.{name} = {value!r} did not reach what it governs"
