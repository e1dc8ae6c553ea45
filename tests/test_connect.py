"""Connect a model (``server/connect.py``): GET config names the model; the server finds the
OpenAI-compatible servers on this machine, checks a model with a real request and writes the setting.

A real Jupyter server with the embedded model configured (no model settings at all), and the
OpenAI-protocol test server on loopback as the server found; a port nothing listens on and one
that accepts connections but never answers stand for the servers that are not there.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import time
from pathlib import Path

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError
from traitlets.config import Config

from jupyter_data_agent.server.connect import (
    CONNECT_FILE,
    ConnectError,
    base_url_of,
    overridden,
    write_setting,
    written_setting,
)
from tests.test_server import NS, on_server_loop, poll_until, post_turn

KEY = "sk-connect-test-9f8e7d6c5b4a39281706"
PROBE_TIMEOUT = 1.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply="OK", models=["small-coder", "big-coder"])


@pytest.fixture(scope="module")
def keyed_server(model_server_factory):
    """A hosted-style endpoint: demands the key (and echoes a wrong one, as some real servers do)."""
    return model_server_factory(reply="OK", models=["hosted-model"], api_key=KEY)


@pytest.fixture(scope="module")
def silent_port():
    """Accepts connections (the kernel's backlog) and never answers: a probe must give up in time."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


class MayNotChangeTheServer(Authorizer):
    """A viewer: may use the agent, not change the server (``write`` on ``server``)."""

    def is_authorized(self, handler, user, action, resource):
        return not (action == "write" and resource == "server")


@pytest.fixture
def jp_server_config(model_server, silent_port, monkeypatch, tmp_path, request):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUPYTER_DATA_AGENT_BACKEND", "JUPYTER_DATA_AGENT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    model_server.clear()
    viewer = {"authorizer_class": MayNotChangeTheServer} if request.node.get_closest_marker("viewer") else {}
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_data_agent": True}, **viewer},
        # No model settings: the embedded SmolLM2-135M, as after a fresh install.
        "DataAgentExtension": {"record_decisions": False},
        "ModelConnect": {
            "ports": {"Test server": model_server.port, "Closed": _free_port(), "Silent": silent_port},
            "probe_timeout_s": PROBE_TIMEOUT,
            "config_dir": str(tmp_path / "user-config"),
        },
    }


async def get(jp_fetch, *path) -> dict:
    return json.loads((await jp_fetch(NS, *path)).body)


async def post(jp_fetch, *path, **body) -> dict:
    return json.loads((await jp_fetch(NS, *path, method="POST", body=json.dumps(body))).body)


async def refused(jp_fetch, *path, **body) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as info:
        await post(jp_fetch, *path, **body)
    return info.value.code, json.loads(info.value.response.body)["message"]


@on_server_loop
async def test_config_names_the_embedded_model(jp_fetch):
    config = await get(jp_fetch, "config")
    assert config["model_info"] == {"name": "SmolLM2-135M-Instruct", "kind": "embedded",
                                    "note": "small and weak at code"}
    assert config["model"] == "" and config["backend"] in ("llamacpp", "transformers")


@on_server_loop
async def test_the_probe_finds_the_test_server_and_not_the_closed_ports(jp_fetch, model_server):
    started = time.monotonic()
    reply = await get(jp_fetch, "connect", "servers")
    elapsed = time.monotonic() - started
    servers = {s["label"]: s for s in reply["servers"]}
    assert servers["Test server"] == {"label": "Test server", "base_url": model_server.base_url,
                                      "models": ["small-coder", "big-coder"], "error": ""}
    assert servers["Closed"]["models"] == [] and "Nothing answers at" in servers["Closed"]["error"]
    assert servers["Silent"]["models"] == [] and "No answer from" in servers["Silent"]["error"]
    # In parallel: the silent port's timeout once, not once per port (and well short of a hang).
    assert elapsed < PROBE_TIMEOUT * 2 + 2, elapsed
    assert [r.path for r in model_server.requests] == ["/v1/models"]


@on_server_loop
async def test_the_check_sends_a_real_one_token_request(jp_fetch, model_server):
    reply = await post(jp_fetch, "connect", "check", base_url=model_server.base_url, model="big-coder")
    assert reply["ok"] is True and reply["message"].startswith("big-coder answered")
    sent = model_server.generation_requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "big-coder" and sent.body["max_tokens"] == 1

    reply = await post(jp_fetch, "connect", "check", base_url=model_server.base_url, model="no-such-model")
    assert reply["ok"] is False and "does not serve 'no-such-model'" in reply["message"]


@on_server_loop
async def test_a_wrong_url_gets_a_clear_error(jp_fetch, model_server):
    code, message = await refused(jp_fetch, "connect", "check", base_url="ftp://example.org", model="m")
    assert code == 400 and "is not an http(s) URL" in message
    code, message = await refused(jp_fetch, "connect", "models", base_url="http://127.0.0.1:notaport/v1")
    assert code == 400 and "port that is not a number" in message

    wrong_path = model_server.url + "/api"
    reply = await post(jp_fetch, "connect", "models", base_url=wrong_path)
    assert reply["servers"][0]["models"] == []
    assert "/api/models does not exist (HTTP 404)" in reply["servers"][0]["error"]

    closed = f"http://127.0.0.1:{_free_port()}/v1"
    reply = await post(jp_fetch, "connect", "check", base_url=closed, model="m")
    assert reply["ok"] is False and reply["message"].startswith(f"Nothing answers at {closed}")
    code, message = await refused(jp_fetch, "connect", base_url=closed, model="m")
    assert code == 502 and message.startswith("Not connected: Nothing answers at")
    assert not list((Path(os.environ["JUPYTER_CONFIG_DIR"]).parent).rglob(CONNECT_FILE))


@on_server_loop
async def test_a_typed_url_lists_its_models_with_the_key(jp_fetch, keyed_server):
    # No scheme, no /v1: the server's address is enough.
    bare = keyed_server.url.removeprefix("http://")
    reply = await post(jp_fetch, "connect", "models", base_url=bare)
    assert reply["servers"][0]["base_url"] == keyed_server.base_url
    assert "HTTP 401" in reply["servers"][0]["error"]
    reply = await post(jp_fetch, "connect", "models", base_url=bare, api_key=KEY)
    assert reply["servers"][0]["models"] == ["hosted-model"]


@on_server_loop
async def test_connecting_writes_the_setting_and_never_shows_the_key(jp_fetch, jp_server_config, keyed_server,
                                                                     caplog):
    caplog.set_level(logging.DEBUG)
    # A wrong key: the server echoes it in its 401, and that must not come back either.
    wrong = "sk-wrong-key-0a1b2c3d4e5f60718293"
    code, message = await refused(jp_fetch, "connect", base_url=keyed_server.base_url, model="hosted-model",
                                  api_key=wrong)
    assert code == 502 and "HTTP 401" in message and wrong not in message

    raw = (await jp_fetch(NS, "connect", method="POST", body=json.dumps(
        {"base_url": keyed_server.base_url, "model": "hosted-model", "api_key": KEY}))).body.decode()
    reply = json.loads(raw)
    assert reply["applied"] is True and reply["message"].startswith("Connected: hosted-model")
    assert reply["model_info"] == {"name": "hosted-model", "kind": "openai",
                                   "note": f"at 127.0.0.1:{keyed_server.port}"}

    path = Path(jp_server_config["ModelConnect"]["config_dir"]) / CONNECT_FILE
    assert reply["path"] == str(path) and reply["overridden"] == []
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["DataAgent"] == {
        "backend": "openai", "base_url": keyed_server.base_url, "model": "hosted-model", "api_key": KEY,
        "models": []}

    # The running server uses it now: GET config names it, and says a key is set without showing it.
    config_raw = (await jp_fetch(NS, "config")).body.decode()
    config = json.loads(config_raw)
    assert config["model_info"]["name"] == "hosted-model" and config["api_key_set"] is True
    for text in (raw, config_raw, caplog.text):
        assert KEY not in text and wrong not in text
    assert "connected hosted-model" in caplog.text

    # A turn now asks the connected model, with the key (the test server checks it).
    keyed_server.clear()
    job_id = (await post_turn(jp_fetch))["job_id"]
    await poll_until(jp_fetch, job_id, lambda e: e["type"] in ("done", "error"))
    asked = keyed_server.generation_requests
    assert asked and {r.body["model"] for r in asked} == {"hosted-model"}
    assert {r.header("authorization") for r in asked} == {f"Bearer {KEY}"}


@pytest.mark.viewer
@on_server_loop
async def test_a_user_who_may_not_change_the_server_cannot_connect(jp_fetch, jp_server_config, model_server):
    assert (await get(jp_fetch, "config"))["model_info"]["kind"] == "embedded"  # the agent itself: yes
    with pytest.raises(HTTPClientError) as info:
        await get(jp_fetch, "connect", "servers")
    assert info.value.code == 403
    for path in (("connect", "models"), ("connect", "check"), ("connect",)):
        code, message = await refused(jp_fetch, *path, base_url=model_server.base_url, model="small-coder")
        assert code == 403 and "may not change this server's model" in message, path
    assert model_server.requests == []
    assert not (Path(jp_server_config["ModelConnect"]["config_dir"]) / CONNECT_FILE).exists()


def test_the_written_file_is_the_next_servers_setting(tmp_path, model_server, monkeypatch):
    """Where the server and the kernels' %%agent read their settings (as at a restart), over the
    environment; a setting of the server's own config still wins, and is named."""
    from jupyter_data_agent.config import resolve_settings

    path = tmp_path / CONNECT_FILE
    write_setting(path, model_server.base_url, "small-coder", "", ["small-coder", "big-coder"])
    env = {"OPENAI_BASE_URL": "http://elsewhere:1/v1", "OPENAI_API_KEY": KEY}
    settings = resolve_settings(env=env, dirs=[str(tmp_path)])
    assert (settings.backend, settings.base_url, settings.model, settings.api_key) == (
        "openai", model_server.base_url, "small-coder", "")
    # The endpoint's other models are the picker's (the connected one first, not twice).
    assert settings.offered_models == ["small-coder", "big-coder"]

    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(tmp_path / "none"))
    setting = written_setting(model_server.base_url, "small-coder", "", ["small-coder", "big-coder"])
    assert overridden(Config(), path, setting) == []
    assert overridden(Config({"DataAgent": {"model": "pinned", "backend": "openai"}}), path, setting) == ["model"]


def test_an_existing_file_keeps_its_other_settings_and_is_made_private(tmp_path):
    path = tmp_path / CONNECT_FILE
    path.write_text(json.dumps({"DataAgent": {"max_samples": 8, "models": ["a", "b"]}, "Other": {"x": 1}}))
    path.chmod(0o644)
    write_setting(path, "http://127.0.0.1:1234/v1", "m", KEY)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["Other"] == {"x": 1}
    assert data["DataAgent"] == {"max_samples": 8, **written_setting("http://127.0.0.1:1234/v1", "m", KEY)}
    assert [p.name for p in tmp_path.iterdir()] == [CONNECT_FILE]

    path.write_text("c.DataAgent.model = 'x'")  # not JSON: the user's, left alone
    with pytest.raises(ConnectError, match="not a JSON config file"):
        write_setting(path, "http://127.0.0.1:1234/v1", "m", KEY)
    assert path.read_text() == "c.DataAgent.model = 'x'"


@pytest.mark.parametrize(("typed", "base"), [
    ("127.0.0.1:11434", "http://127.0.0.1:11434/v1"),
    ("http://localhost:8000/", "http://localhost:8000/v1"),
    (" https://api.example.com/v1/ ", "https://api.example.com/v1"),
    ("http://host:8080/openai/v1", "http://host:8080/openai/v1"),
])
def test_a_typed_url_becomes_a_base_url(typed, base):
    assert base_url_of(typed) == base


@pytest.mark.parametrize("typed", ["", "ftp://host/v1", "http://", "http://host:port/v1"])
def test_a_url_that_cannot_be_one_is_refused(typed):
    with pytest.raises(ConnectError):
        base_url_of(typed)
