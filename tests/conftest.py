"""Fixtures shared by several test modules: the Jupyter server's (pytest_jupyter), the model
server's (the OpenAI-protocol server in tests/openai_server/), a tiny transformers model."""

import contextlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# jp_fetch, jp_serverapp, jp_server_config...: declared once, here (pytest reads
# pytest_plugins only from the root conftest).
pytest_plugins = ["pytest_jupyter.jupyter_server"]

# The benchmarks are a distribution of their own (bench/, `pip install -e ./bench`), which only
# the bench's own tests import (tests/test_fixtures_layout.py). Where it is not installed, those
# tests use the checkout's, and so do their kernels and subprocesses.
if importlib.util.find_spec("jupyter_data_agent_bench") is None:
    _BENCH = str(Path(__file__).resolve().parents[1] / "bench")
    sys.path.insert(0, _BENCH)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_BENCH, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="module")
def model_server_factory() -> Iterator[Callable[..., Any]]:
    """Starts the tests' OpenAI-protocol model servers: ``model_server_factory(reply=..., **options)``
    takes :class:`tests.openai_server.OpenAITestServer`'s arguments and returns the running server;
    each stops when the module's tests are done. A module's ``model_server`` fixture is one call."""
    from tests.openai_server import OpenAITestServer

    with contextlib.ExitStack() as servers:
        yield lambda **options: servers.enter_context(OpenAITestServer(**options))


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny transformers model saved to disk (see tests/tiny_model.py)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def agent_server_config(model_server, monkeypatch, extension: dict | None = None, *, key: str | None = None,
                        clear: tuple[str, ...] = (), **agent) -> dict:
    """jp_server_config for a real Jupyter server with this extension and the OpenAI test server.

    The model's environment variables (and ``clear``) are removed so the config here decides;
    ``key`` is the API key the server is configured with (test_server.KEY by default).
    """
    from tests.test_server import KEY

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_BACKEND", "JUPYTER_DATA_AGENT_MODEL",
                 "JUPYTER_DATA_AGENT_CONFINEMENT", "JUPYTER_DATA_AGENT_VALUE_MODEL", *clear):
        monkeypatch.delenv(name, raising=False)
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_data_agent": True}},
        "DataAgent": {"backend": "openai", "base_url": model_server.base_url, "api_key": key or KEY,
                      "model": "test-model", "max_retries": 0, **agent},
        "DataAgentExtension": dict(extension or {}),
    }


def agent_extension(serverapp):
    """The running DataAgentExtension (the package also registers the MCP extension point)."""
    from jupyter_data_agent.server.app import DataAgentExtension

    apps = serverapp.extension_manager.extension_apps["jupyter_data_agent"]
    return next(app for app in apps if isinstance(app, DataAgentExtension))
