"""Model backends behind one interface (see :mod:`.base`).

Backends are imported lazily: ``import jupyter_data_agent.llm`` must stay
cheap (no torch) for the kernel-side magic and the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import (
    Backend,
    BackendError,
    Capabilities,
    ChatMessage,
    Completion,
    Prompt,
    SamplingParams,
    StopStream,
    cut_at_stop,
)
from .embedded import embedded_model_path
from .factory import close_backends, create_backend, describe

if TYPE_CHECKING:  # imported on first use (``__getattr__``); named here for checkers and ``__all__``
    from .openai_backend import OpenAIBackend
    from .transformers_backend import TransformersBackend
    from .vllm_backend import VLLMBackend

__all__ = [
    "Backend",
    "BackendError",
    "Capabilities",
    "ChatMessage",
    "Completion",
    "Prompt",
    "SamplingParams",
    "StopStream",
    "cut_at_stop",
    "embedded_model_path",
    "create_backend",
    "close_backends",
    "describe",
    "OpenAIBackend",
    "TransformersBackend",
    "VLLMBackend",
]

_LAZY = {
    "OpenAIBackend": ".openai_backend",
    "TransformersBackend": ".transformers_backend",
    "VLLMBackend": ".vllm_backend",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
