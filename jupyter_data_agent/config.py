"""Configuration shared by the server extension and the kernel-side magic.

Each setting is declared once, as a trait of :class:`DataAgent` with its help,
bounds and default; :class:`Settings`, the turn policies (``search/options.py``),
the request bounds and the sidebar's limits (``GET config``) are derived from
it. Both read the same traitlets config (``c.DataAgent.*`` in
``jupyter_data_agent_config.py`` or ``.json`` in any Jupyter config dir, or in
``jupyter_server_config.py``). As everywhere in Jupyter, the environment
variables (``OPENAI_API_KEY``, ``JUPYTER_DATA_AGENT_MODEL``, ...) are defaults
that a config file overrides. Secrets stay in :class:`Settings`;
:meth:`Settings.public` is the only view that leaves the process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from pydantic import Field
from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Unicode, Union
from traitlets.config import Config, Configurable
from traitlets.config.loader import ConfigFileNotFound, JSONFileConfigLoader, PyFileConfigLoader

CONFIG_BASENAME = "jupyter_data_agent_config"

ENV_BACKEND = "JUPYTER_DATA_AGENT_BACKEND"
ENV_MODEL = "JUPYTER_DATA_AGENT_MODEL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_CONFINEMENT = "JUPYTER_DATA_AGENT_CONFINEMENT"
ENV_THREADS = "JUPYTER_DATA_AGENT_THREADS"

BACKENDS = ("openai", "llamacpp", "transformers", "vllm")
#: The environment variables read, by the trait each one gives a default to.
ENVIRONMENT = {"backend": ENV_BACKEND, "model": ENV_MODEL, "base_url": ENV_BASE_URL, "api_key": ENV_API_KEY,
               "confinement": ENV_CONFINEMENT, "threads": ENV_THREADS}


class DataAgent(Configurable):
    """Model and limits; set as ``c.DataAgent.<name>`` in a Jupyter config file."""

    backend = Unicode(
        "",
        help="Model backend: 'openai', 'llamacpp', 'transformers' or 'vllm'. Empty: 'openai' "
        "when base_url is set, else the local model: 'llamacpp' when llama-cpp-python is "
        "installed and the model is a GGUF file (the embedded one included), else 'transformers'.",
    ).tag(config=True)
    model = Unicode(
        "",
        help="Model id, local directory or GGUF file. Empty: the backend's default "
        "(the embedded SmolLM2-135M-Instruct for transformers).",
    ).tag(config=True)
    base_url = Unicode("", help="OpenAI-compatible endpoint (e.g. http://localhost:8000/v1).").tag(
        config=True
    )
    api_key = Unicode("", help="API key for the openai backend. Never sent to the browser.").tag(
        config=True
    )
    api_mode = Enum(
        ["auto", "chat", "completion"],
        default_value="auto",
        help="Prompt style: chat messages or raw ARCADE completion prompts.",
    ).tag(config=True)
    device = Unicode("auto", help="transformers device: 'auto', 'cpu', 'cuda', 'cuda:1'...").tag(
        config=True
    )
    dtype = Unicode("auto", help="transformers/vllm dtype: 'auto', 'float32', 'bfloat16'...").tag(
        config=True
    )
    threads = Int(
        0,
        min=0,
        help="CPU threads of the local model (llamacpp; 0: follow the free cores, read before "
        "each request: the cores this process may use minus what other processes use, at "
        "least 1; transformers on CPU: torch.set_num_threads, 0: torch's default).",
    ).tag(config=True)
    wait_policy = Enum(
        ["bounded", "passive", "active", "default"],
        default_value="bounded",
        help="How llama.cpp's OpenMP threads wait at a barrier (libgomp's environment, set when "
        "llama_cpp is first imported): 'bounded' spins briefly then sleeps (GOMP_SPINCOUNT; fast "
        "idle, and a busy machine costs little), 'passive' sleeps at once (OMP_WAIT_POLICY), "
        "'active' spins; 'default': the library's own. OMP_WAIT_POLICY or GOMP_SPINCOUNT "
        "already in the environment wins.",
    ).tag(config=True)
    max_prompt_tokens = Int(3000, min=64, help="Token budget of the prompt (context is left-truncated).").tag(
        config=True
    )
    max_new_tokens = Int(512, min=1, help="Tokens generated per candidate.").tag(config=True)
    temperature = Float(0.2, min=0.0, max=2.0, help="Sampling temperature for a single candidate.").tag(
        config=True
    )
    sample_temperature = Float(0.7, min=0.0, max=2.0, help="Temperature when sampling several candidates.").tag(
        config=True
    )
    request_timeout = Float(120.0, min=0.001, help="Seconds before a model request is abandoned.").tag(
        config=True
    )
    max_retries = Int(3, min=0, help="Retries with backoff on 429/5xx from an endpoint.").tag(config=True)
    max_samples = Int(
        32,
        min=1,
        help="Most candidates one turn may sample (Vote's samples, Search's candidates per step); "
        "the sidebar's Samples input stops there.",
    ).tag(config=True)
    max_budget = Int(
        1000,
        min=1,
        help="Largest budget one turn may ask for (Search iterations, Agent steps); the sidebar's "
        "Budget input stops there.",
    ).tag(config=True)
    exemplars = Bool(True, help="Put the few-shot exemplars in completion prompts.").tag(config=True)
    vllm_args = List(Unicode(), help="Extra arguments for the managed `vllm serve`.").tag(config=True)
    extra = Dict(help="Backend-specific options passed through unchanged.").tag(config=True)
    strategy_defaults = Dict(
        help="Per-strategy option defaults, e.g. {'vote': {'samples': 8}, 'mcts': {'k': 4}} "
        "(fields of search.options; an unknown strategy or field is an error).",
    ).tag(config=True)
    snapshot_limits = Dict(
        help="Resource limits of kernel copies (kernel.results.Limits fields, e.g. "
        "{'timeout_s': 60, 'cpu_s': 60}); an unknown key is an error.",
    ).tag(config=True)
    models = List(
        Unicode(),
        help="Other models of the configured backend the sidebar offers in its model picker "
        "(e.g. ['gpt-4o', 'gpt-4o-mini'] next to c.DataAgent.model); a turn may name one of "
        "them or the configured model, the server refuses any other. Empty: no picker.",
    ).tag(config=True)
    prices = Dict(
        help="USD per million tokens by model name, e.g. {'gpt-4o-mini': {'input': 0.15, "
        "'output': 0.6}}: the sidebar shows a turn's estimated cost when the configured model "
        "has a price. Empty by default (a local model costs nothing per token).",
    ).tag(config=True)
    vision = Union(
        [Bool(), Enum(["auto"])],
        default_value="auto",
        help="Whether the model reads images: True, False, or 'auto' (an OpenAI-compatible "
        "model whose name is a known vision model: gpt-4o, gpt-4.1, gpt-5, o3, claude, gemini, "
        "llava, qwen-vl, pixtral, ... or contains 'vision' / '-vl').",
    ).tag(config=True)
    send_images = Bool(
        True,
        help="Send the image outputs (plots) of the active cell and of executed candidates to a "
        "vision model; False sends only their text summary.",
    ).tag(config=True)
    max_images = Int(4, min=0, max=32, help="Images sent with one model request at most.").tag(config=True)
    max_image_bytes = Int(
        400_000,
        min=1_000,
        help="Largest image sent, in bytes after resizing (Pillow, when installed, shrinks "
        "larger ones; without it they are left out).",
    ).tag(config=True)
    inline_completion = Enum(
        ["auto", "on", "off"],
        default_value="auto",
        help="Ghost-text completion in notebook cells: 'auto' is on unless the configured model "
        "has a price in c.DataAgent.prices (a hosted model bills every keystroke's request); "
        "'on' / 'off' decide for every model. Users can still switch it off in JupyterLab's settings.",
    ).tag(config=True)
    probes = Bool(
        True,
        help="Run cheap evidence probes in each candidate's kernel copy after each step (rows "
        "lost or duplicated, NaN introduced, numbers turned into text, empty results, a lost "
        "unique index, values out of range): shown as the candidate's checks and read by the "
        "evidence estimator.",
    ).tag(config=True)
    vote_adaptive = Bool(
        False,
        help="Vote draws its samples in rounds and stops once the answer is decided (see "
        "vote_stop_posterior), reporting the samples not drawn. Off: every sample is drawn in one "
        "request (pass@k measurements need them all).",
    ).tag(config=True)
    vote_stop_posterior = Float(
        0.95,
        min=0.5,
        max=1.0,
        help="An adaptive vote (vote_adaptive) stops drawing once the leading answer class cannot be "
        "overtaken by the samples left, or its posterior probability of beating the runner-up "
        "passes this (1.0: only the first rule).",
    ).tag(config=True)
    confinement = Enum(
        ["require", "warn"],
        default_value="require",
        help="Kernel copies missing a confinement layer: 'require' generates candidates but "
        "does not run them; 'warn' runs them and lists what is missing.",
    ).tag(config=True)


def declared(name: str) -> Any:
    """The default of ``c.DataAgent.<name>``: the one place it is written."""
    return DataAgent.class_traits()[name].default_value


@dataclass(frozen=True)
class FromSetting:
    """Marks a pydantic field whose server-wide default is ``Settings.<name>`` (``declared_field``)."""

    name: str


def declared_field(name: str, default: Any = ..., **extra: Any) -> Any:
    """A pydantic field bounded as the trait ``name`` is (and defaulting to it, unless given).

    The field carries ``FromSetting(name)``, so ``turn.resolve`` fills it from the
    resolved settings: a configured value, not only the trait's default, reaches the turn.
    """
    trait = DataAgent.class_traits()[name]
    bounds = {k: v for k, v in (("ge", getattr(trait, "min", None)), ("le", getattr(trait, "max", None)))
              if v is not None}
    info = Field(declared(name) if default is ... else default, **bounds, **extra)
    info.metadata.append(FromSetting(name))
    return info


def setting_of(info: Any) -> str | None:
    """The setting a pydantic field is declared from (``declared_field``), if any."""
    return next((m.name for m in getattr(info, "metadata", ()) if isinstance(m, FromSetting)), None)


@dataclass(frozen=True)
class Settings:
    """The resolved configuration one backend and its turns are built from; defaults are the traits'.

    One field per ``DataAgent`` trait, written out so that mypy types each one; a trait
    without its field (or a field without its trait) stops the import (below), so a new
    trait cannot be forgotten on its way to a turn.
    """

    backend: str
    model: str = declared("model")
    base_url: str = declared("base_url")
    api_key: str = field(default=declared("api_key"), repr=False)
    api_mode: Literal["auto", "chat", "completion"] = declared("api_mode")
    device: str = declared("device")
    dtype: str = declared("dtype")
    threads: int = declared("threads")
    wait_policy: Literal["bounded", "passive", "active", "default"] = declared("wait_policy")
    max_prompt_tokens: int = declared("max_prompt_tokens")
    max_new_tokens: int = declared("max_new_tokens")
    temperature: float = declared("temperature")
    sample_temperature: float = declared("sample_temperature")
    request_timeout: float = declared("request_timeout")
    max_retries: int = declared("max_retries")
    max_samples: int = declared("max_samples")
    max_budget: int = declared("max_budget")
    exemplars: bool = declared("exemplars")
    vllm_args: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)
    confinement: Literal["require", "warn"] = declared("confinement")
    strategy_defaults: dict = field(default_factory=dict)
    snapshot_limits: dict = field(default_factory=dict)
    prices: dict = field(default_factory=dict)
    models: tuple[str, ...] = ()
    inline_completion: Literal["auto", "on", "off"] = declared("inline_completion")
    vision: bool | Literal["auto"] = declared("vision")
    send_images: bool = declared("send_images")
    max_images: int = declared("max_images")
    max_image_bytes: int = declared("max_image_bytes")
    probes: bool = declared("probes")
    vote_adaptive: bool = declared("vote_adaptive")
    vote_stop_posterior: float = declared("vote_stop_posterior")

    @property
    def inline_enabled(self) -> bool:
        """Whether ghost-text completion is served: 'auto' is on for models without a price."""
        if self.inline_completion == "auto":
            return self.price is None
        return self.inline_completion == "on"

    @property
    def offered_models(self) -> list[str]:
        """The configured model first, then ``models`` (no duplicates, no blanks)."""
        out: list[str] = []
        for name in (self.model, *self.models):
            if name and name not in out:
                out.append(name)
        return out

    @property
    def price(self) -> dict | None:
        """The configured model's price (USD per million input/output tokens), if it has one."""
        return self.prices.get(self.model)

    def public(self) -> dict:
        """Everything but secrets: safe for the browser, logs and notebooks."""
        data = asdict(self)
        data.pop("api_key")
        data["api_key_set"] = bool(self.api_key)
        data["vllm_args"] = list(self.vllm_args)
        data["models"] = self.offered_models
        return data

    def with_overrides(self, **changes) -> "Settings":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _check_settings_fields() -> None:
    traits, names = set(DataAgent.class_traits(config=True)), {f.name for f in fields(Settings)}
    if traits != names:
        raise TypeError(f"Settings and c.DataAgent disagree: traits without a field {sorted(traits - names)}, "
                        f"fields without a trait {sorted(names - traits)}.")


_check_settings_fields()


def _config_dirs() -> list[str]:
    from jupyter_core.paths import jupyter_config_path

    # jupyter_config_path() lists user dirs first; later files must win, so load reversed.
    return list(reversed(jupyter_config_path()))


def load_file_config(dirs: list[str] | None = None) -> Config:
    """Merge ``jupyter_data_agent_config.{json,py}`` from the Jupyter config dirs."""
    merged = Config()
    for directory in dirs if dirs is not None else _config_dirs():
        for loader_cls, ext in ((JSONFileConfigLoader, ".json"), (PyFileConfigLoader, ".py")):
            with contextlib.suppress(ConfigFileNotFound):
                merged.merge(loader_cls(CONFIG_BASENAME + ext, path=directory).load_config())
    return merged


def llamacpp_available() -> bool:
    """Whether ``llama_cpp`` is installed (looked up, not imported: importing loads the library)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def default_local_backend(model: str) -> str:
    """The local backend when none is configured: llama.cpp for GGUF files when installed.

    The embedded model (empty ``model``) is a GGUF file; Hugging Face directories and ids
    stay with transformers, which is also the fallback without llama-cpp-python.
    """
    gguf = not model or model.strip().lower().endswith(".gguf")
    return "llamacpp" if gguf and llamacpp_available() else "transformers"


def environment_config(env: dict[str, str] | os._Environ) -> Config:
    """The environment variables as the lowest config layer (each a trait's default).

    Empty values count as unset. A value the trait refuses is an error that
    names the variable, not the trait.
    """
    config = Config()
    for name, variable in ENVIRONMENT.items():
        value: Any = (env.get(variable) or "").strip()
        if not value:
            continue
        if name == "threads":
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"{variable} must be a whole number (0: follow the free cores), "
                                 f"not {value!r}.") from None
        elif name in ("backend", "confinement"):
            value = value.lower()
        try:
            DataAgent(**{name: value})
        except TraitError as error:
            raise ValueError(f"{variable}={value!r}: {error}") from None
        config.DataAgent[name] = value
    return config


def check_prices(prices: dict) -> dict:
    """``c.DataAgent.prices`` as ``{model: {"input": float, "output": float}}``; a clear error otherwise.

    Checked at startup so a typo shows in the server log, not as a wrong cost in the sidebar.
    """
    checked = {}
    for model, price in prices.items():
        if not isinstance(price, dict) or set(price) != {"input", "output"}:
            raise ValueError(f"c.DataAgent.prices[{model!r}] must be {{'input': USD, 'output': USD}} "
                             f"per million tokens, not {price!r}.")
        values = {}
        for side in ("input", "output"):
            value = price[side]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"c.DataAgent.prices[{model!r}][{side!r}] must be a number of USD "
                                 f"per million tokens, at least 0, not {value!r}.")
            values[side] = float(value)
        checked[str(model)] = values
    return checked


def resolve_settings(
    config: Config | None = None,
    env: dict[str, str] | None = None,
    dirs: list[str] | None = None,
) -> Settings:
    """Environment variables, then config files, then ``config`` (e.g. the server's): later wins.

    The strategy defaults and copy limits are checked against the turn's
    options by ``turn.resolve.load_settings``, which entry points call.
    """
    merged = environment_config(os.environ if env is None else env)
    merged.merge(load_file_config(dirs))
    if config is not None:
        merged.merge(config)
    try:
        traits = DataAgent(config=merged)
    except TraitError as error:
        raise ValueError(f"c.DataAgent: {error}") from None

    backend = traits.backend.strip().lower()
    if not backend:
        backend = "openai" if traits.base_url else default_local_backend(traits.model)
    if backend not in BACKENDS:
        raise ValueError(
            f"Unknown backend {backend!r}: set {ENV_BACKEND} or c.DataAgent.backend "
            f"to one of {', '.join(BACKENDS)}."
        )
    values = {f.name: getattr(traits, f.name) for f in fields(Settings)}
    return Settings(**{
        **values,
        "backend": backend,
        "vllm_args": tuple(traits.vllm_args),
        "extra": dict(traits.extra),
        "strategy_defaults": {k: dict(v or {}) for k, v in traits.strategy_defaults.items()},
        "snapshot_limits": dict(traits.snapshot_limits),
        "prices": check_prices(traits.prices),
        "models": tuple(str(m).strip() for m in traits.models if str(m).strip()),
    })
