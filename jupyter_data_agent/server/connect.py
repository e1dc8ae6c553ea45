"""Connect a model: find OpenAI-compatible servers, check one, write the setting.

The embedded SmolLM2-135M answers without configuration but is weak at code;
most newcomers already run a better model in Ollama, LM Studio, vLLM or
llama.cpp's server on this machine. The sidebar's "Connect a model" asks the
server (not the browser: the browser may be elsewhere, and the page's origin
could not read those servers anyway) to look on their usual loopback ports,
list each one's models (``GET <base>/models``), send the chosen model a real
one-token chat request, and write ``c.DataAgent.backend/base_url/model/api_key``
to the user's ``jupyter_data_agent_config.json`` (read by the server at its
next start and by the kernels' ``%%agent``; ``jupyter_server_config.d`` would
not do: jupyter_server reads only extension switches there). The key typed in
the dialog is written there only (mode 0600), and every message that could
quote it goes through a scrubber.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
from traitlets import Dict, Float, Int, Unicode
from traitlets.config import Config, Configurable

from ..llm.scrub import Scrubber, redact_url
from .connect_models import ModelServer

#: The file ``POST connect`` writes in the user's Jupyter config dir: the agent's own config file,
#: which the server and the kernels' ``%%agent`` read (``config.load_file_config``).
CONNECT_FILE = "jupyter_data_agent_config.json"
TYPED = "The URL you typed"
_TAGS = re.compile(r"<[^>]*>|\s+")


class ModelConnect(Configurable):
    """Where "Connect a model" looks; set as ``c.ModelConnect.<name>``."""

    ports = Dict(
        value_trait=Int(min=1, max=65535),
        default_value={"Ollama": 11434, "LM Studio": 1234, "vLLM": 8000, "llama.cpp server": 8080},
        help="The OpenAI-compatible servers looked for on this machine: label -> port (on host, "
        "under /v1), all at once, each for at most probe_timeout_s.",
    ).tag(config=True)
    host = Unicode("127.0.0.1", help="The host the ports are looked on.").tag(config=True)
    probe_timeout_s = Float(1.5, min=0.05, help="Seconds one server may take to list its models.").tag(
        config=True
    )
    check_timeout_s = Float(
        120.0, min=0.1, help="Seconds the check's one-token request may take (a server may load the "
        "model first)."
    ).tag(config=True)
    config_dir = Unicode(
        "", help=f"The Jupyter config dir the setting is written to ({CONNECT_FILE}); empty: the "
        "user's, jupyter_core.paths.jupyter_config_dir(). Another folder is read at the next start "
        "only if it is on JUPYTER_CONFIG_PATH."
    ).tag(config=True)

    def target(self) -> Path:
        from jupyter_core.paths import jupyter_config_dir

        return Path(self.config_dir or jupyter_config_dir()) / CONNECT_FILE


class ConnectError(ValueError):
    """A URL or a server that cannot be used, said so that the user knows what to change."""


def base_url_of(raw: str) -> str:
    """``raw`` as a base URL: ``http://`` when no scheme is given, ``/v1`` when no path is."""
    url = raw.strip()
    if not url:
        raise ConnectError("Type the server's base URL, e.g. http://127.0.0.1:11434/v1.")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 -- raises on a port that is not a number
    except ValueError:
        raise ConnectError(f"{redact_url(raw.strip())!r} has a port that is not a number.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectError(f"{redact_url(raw.strip())!r} is not an http(s) URL; type one like "
                           "http://127.0.0.1:11434/v1.")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") or "/v1", parts.query, ""))


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _excerpt(response: httpx.Response) -> str:
    """The server's own error message, else the start of its reply as text."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)[:300]
    return _TAGS.sub(" ", response.text).strip()[:200]


def _http_problem(url: str, response: httpx.Response) -> str:
    status = response.status_code
    if status in (401, 403):
        return (f"{url} refused the request (HTTP {status}): it needs an API key, or another one. "
                f"{_excerpt(response)}").strip()
    return f"{url} answered HTTP {status}. {_excerpt(response)}".strip()


def _network_problem(url: str, exc: httpx.HTTPError, timeout: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"No answer from {url} within {timeout:g} s."
    if isinstance(exc, httpx.ConnectError):
        return f"Nothing answers at {url} (is the server running, on this port?)."
    return f"{url}: {type(exc).__name__}: {exc}"


async def list_models(label: str, base_url: str, api_key: str = "", *, timeout: float,
                      trust_env: bool = True) -> ModelServer:
    """What the server at ``base_url`` serves (``GET <base_url>/models``); the error in words otherwise."""
    shown = redact_url(base_url)
    scrub = Scrubber([api_key])
    models: list[str] = []
    error = ""
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=trust_env) as client:
            response = await client.get(f"{base_url}/models", headers=_headers(api_key))
        if response.status_code == 404:
            error = (f"{shown}/models does not exist (HTTP 404): OpenAI-compatible servers list their "
                     "models there; is the base URL right (most end in /v1)?")
        elif response.status_code >= 400:
            error = _http_problem(shown, response)
        else:
            try:
                data = response.json().get("data")
                models = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]
            except (ValueError, AttributeError, TypeError):
                error = (f"{shown} answered, but not as an OpenAI-compatible server (its /models is "
                         "not a model list).")
            else:
                if not models:
                    error = f"{shown} serves no model yet (its /models list is empty)."
    except httpx.HTTPError as exc:
        error = _network_problem(shown, exc, timeout)
    return ModelServer(label=label, base_url=shown, models=models, error=scrub.text(error))


async def find_servers(options: ModelConnect) -> list[ModelServer]:
    """Every configured port on ``options.host`` looked at in parallel; each within the probe timeout."""
    host = f"[{options.host}]" if ":" in options.host else options.host
    probes = [list_models(label, f"http://{host}:{port}/v1", timeout=options.probe_timeout_s,
                          trust_env=False)  # loopback: never through a proxy
              for label, port in options.ports.items()]
    return list(await asyncio.gather(*probes))


async def check_model(base_url: str, model: str, api_key: str = "", *, timeout: float) -> tuple[bool, str]:
    """Send ``model`` a real chat request for one token: (answered, what happened in words)."""
    if not model.strip():
        raise ConnectError("Pick the model to check.")
    shown = redact_url(base_url)
    scrub = Scrubber([api_key])
    body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}],
            "max_tokens": 1, "temperature": 0}
    started = time.monotonic()
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.post(f"{base_url}/chat/completions", json=body,
                                         headers=_headers(api_key))
    except httpx.HTTPError as exc:
        return False, scrub.text(_network_problem(shown, exc, timeout))
    elapsed = time.monotonic() - started
    if response.status_code == 404:
        return False, scrub.text(f"{shown} does not serve {model!r} (HTTP 404). {_excerpt(response)}".strip())
    if response.status_code >= 400:
        return False, scrub.text(_http_problem(shown, response))
    try:
        choices = response.json()["choices"]
        assert isinstance(choices, list) and choices
    except (ValueError, KeyError, TypeError, AssertionError):
        return False, scrub.text(f"{shown} answered, but not with an OpenAI chat completion.")
    return True, f"{model} answered a one-token request in {elapsed:.1f} s."


def write_setting(path: Path, base_url: str, model: str, api_key: str, others: Sequence[str] = ()) -> Path:
    """``c.DataAgent`` for this endpoint in ``path``, the user's ``jupyter_data_agent_config.json``.

    Its other settings stay; ``models`` becomes ``others``, the endpoint's other models (the
    picker's earlier ones belonged to the previous backend). Mode 0600, since it may hold the
    key, also for a file that was not: the file is written whole to a private temporary file and
    moved over the old one. A file that is not JSON is left alone (a ``ConnectError``): it is the
    user's.
    """
    data: dict = {}
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8") or "{}")
            assert isinstance(data, dict) and isinstance(data.get("DataAgent", {}), dict)
        except (ValueError, AssertionError):
            raise ConnectError(f"{path} is not a JSON config file (an object with a DataAgent object); "
                               "fix or remove it, then connect again.") from None
    data["DataAgent"] = {**data.get("DataAgent", {}), **written_setting(base_url, model, api_key, others)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".connect-", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return path


def written_setting(base_url: str, model: str, api_key: str, others: Sequence[str] = ()) -> dict:
    """The ``c.DataAgent`` traits "Connect a model" sets: the model, and the endpoint's others for
    the sidebar's picker."""
    return {"backend": "openai", "base_url": base_url, "model": model, "api_key": api_key,
            "models": [m for m in others if m != model]}


def overridden(server_config: Config, path: Path, setting: dict) -> list[str]:
    """The traits of ``setting`` (written to ``path``) that will not hold at the next start.

    The settings are resolved again as the server resolves them (``config.resolve_settings``:
    environment, config files, then the server's own config: ``jupyter_server_config``, the
    command line), with ``path``'s folder as the user's config dir: whatever another layer sets
    wins over the file, and is named so the user can remove it there.
    """
    from jupyter_core.paths import jupyter_config_path

    from ..config import resolve_settings

    highest_first = [str(path.parent), *(d for d in jupyter_config_path() if Path(d) != path.parent)]
    try:
        settings = resolve_settings(server_config, dirs=list(reversed(highest_first)))
    except ValueError:
        return sorted(setting)
    return [name for name, value in setting.items()
            if getattr(settings, name) != (tuple(value) if isinstance(value, list) else value)]
