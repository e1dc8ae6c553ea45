"""Configuration shared by the server extension and the kernel-side magic.

Both read the same traitlets config (``c.DataAgent.*`` in
``jupyter_data_agent_config.py`` or ``.json`` in any Jupyter config dir, or in
``jupyter_server_config.py``) and then environment variables, which win.
Secrets stay in :class:`Settings`; :meth:`Settings.public` is the only view
that leaves the process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Literal

from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode, Union
from traitlets.config import Config, Configurable
from traitlets.config.loader import ConfigFileNotFound, JSONFileConfigLoader, PyFileConfigLoader

from .kernel.policy import check_policy

CONFIG_BASENAME = "jupyter_data_agent_config"

ENV_BACKEND = "JUPYTER_DATA_AGENT_BACKEND"
ENV_MODEL = "JUPYTER_DATA_AGENT_MODEL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_CONFINEMENT = "JUPYTER_DATA_AGENT_CONFINEMENT"
ENV_THREADS = "JUPYTER_DATA_AGENT_THREADS"

BACKENDS = ("openai", "llamacpp", "transformers", "vllm")


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
        help="CPU threads of the local model (llamacpp; 0: the number of physical cores; "
        "transformers on CPU: torch.set_num_threads, 0: torch's default).",
    ).tag(config=True)
    max_prompt_tokens = Int(3000, help="Token budget of the prompt (context is left-truncated).").tag(
        config=True
    )
    max_new_tokens = Int(512, help="Tokens generated per candidate.").tag(config=True)
    temperature = Float(0.2, help="Sampling temperature for a single candidate.").tag(config=True)
    sample_temperature = Float(0.7, help="Temperature when sampling several candidates.").tag(
        config=True
    )
    request_timeout = Float(120.0, help="Seconds before a model request is abandoned.").tag(
        config=True
    )
    max_retries = Int(3, help="Retries with backoff on 429/5xx from an endpoint.").tag(config=True)
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
    max_images = Int(4, help="Images sent with one model request at most.").tag(config=True)
    max_image_bytes = Int(
        400_000,
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
    confinement = Enum(
        ["require", "warn"],
        default_value="require",
        help="Kernel copies missing a confinement layer: 'require' generates candidates but "
        "does not run them; 'warn' runs them and lists what is missing.",
    ).tag(config=True)


@dataclass(frozen=True)
class Settings:
    """The resolved configuration one backend is built from."""

    backend: str
    model: str = ""
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    api_mode: Literal["auto", "chat", "completion"] = "auto"
    device: str = "auto"
    dtype: str = "auto"
    threads: int = 0
    max_prompt_tokens: int = 3000
    max_new_tokens: int = 512
    temperature: float = 0.2
    sample_temperature: float = 0.7
    request_timeout: float = 120.0
    max_retries: int = 3
    exemplars: bool = True
    vllm_args: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)
    confinement: Literal["require", "warn"] = "require"
    strategy_defaults: dict = field(default_factory=dict)
    snapshot_limits: dict = field(default_factory=dict)
    prices: dict = field(default_factory=dict)
    models: tuple[str, ...] = ()
    inline_completion: Literal["auto", "on", "off"] = "auto"
    vision: bool | Literal["auto"] = "auto"
    send_images: bool = True
    max_images: int = 4
    max_image_bytes: int = 400_000

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


def _threads(env_value: str | None, configured: int) -> int:
    if not env_value:
        return max(0, configured)
    try:
        return max(0, int(env_value))
    except ValueError:
        raise ValueError(f"{ENV_THREADS} must be a whole number (0: physical cores), not {env_value!r}.") from None


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
    """Config files, then ``config`` (e.g. the server's), then environment variables."""
    env = os.environ if env is None else env
    merged = load_file_config(dirs)
    if config is not None:
        merged.merge(config)
    traits = DataAgent(config=merged)

    backend = env.get(ENV_BACKEND) or traits.backend
    model = env.get(ENV_MODEL) or traits.model
    base_url = env.get(ENV_BASE_URL) or traits.base_url
    api_key = env.get(ENV_API_KEY) or traits.api_key
    if not backend:
        backend = "openai" if base_url else default_local_backend(model)
    backend = backend.strip().lower()
    if backend not in BACKENDS:
        raise ValueError(
            f"Unknown backend {backend!r}: set {ENV_BACKEND} or c.DataAgent.backend "
            f"to one of {', '.join(BACKENDS)}."
        )
    values = {f.name: getattr(traits, f.name) for f in fields(Settings)}
    settings = Settings(**{
        **values,
        "backend": backend,
        "model": model,
        "base_url": base_url,
        "api_key": api_key,
        "threads": _threads(env.get(ENV_THREADS), traits.threads),
        "vllm_args": tuple(traits.vllm_args),
        "extra": dict(traits.extra),
        "confinement": check_policy(env.get(ENV_CONFINEMENT) or traits.confinement),
        "strategy_defaults": {k: dict(v or {}) for k, v in traits.strategy_defaults.items()},
        "snapshot_limits": dict(traits.snapshot_limits),
        "prices": check_prices(traits.prices),
        "models": tuple(str(m).strip() for m in traits.models if str(m).strip()),
    })
    from .turn.resolve import check_settings

    check_settings(settings)
    return settings
