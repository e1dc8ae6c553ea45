"""Each setting is declared once: change one trait and the magic, the server and the sidebar follow.

``c.DataAgent.max_samples`` / ``max_budget`` bound the sidebar's inputs (read
from ``GET config``; the Galata side is ui-tests/tests/limits.spec.ts), the
server's requests and the magic's flags, through the one check in
``turn.resolve``. A real Jupyter server, a real kernel, the OpenAI test server.
"""

from __future__ import annotations

import json
import os

import pytest
from tornado.httpclient import HTTPClientError

from tests.conftest import agent_server_config
from tests.kernel_helpers import run_cell, start_kernel, stop_kernel
from tests.openai_server import OpenAITestServer
from tests.test_server import NS, on_server_loop, turn_body

pytest_plugins = ["pytest_jupyter.jupyter_server"]

LIMITS = {"max_samples": 3, "max_budget": 7}


@pytest.fixture(scope="module")
def model_server():
    with OpenAITestServer(reply=lambda request: "```python\n# Step 1: Count.\nlen(df)\n```") as srv:
        yield srv


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    return agent_server_config(model_server, monkeypatch, **LIMITS)


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
