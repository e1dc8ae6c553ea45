"""A managed ``vllm serve`` subprocess, reached through :class:`OpenAIBackend`.

Running vLLM as a child process (rather than ``vllm.LLM`` in-process) keeps its
CUDA state, worker processes and crashes out of the Jupyter server and kernel,
and reuses the OpenAI-protocol client we already have: prefix caching makes
repeated notebook prefixes cheap across the many samples of a search. At
scale, run ``vllm serve`` yourself (tensor/pipeline parallel, multi-node) and
use the ``openai`` backend with ``OPENAI_BASE_URL``.

The server listens on 127.0.0.1 on a free port and is protected by a random
key (passed in the environment, not on the command line where ``ps`` shows
it). It is stopped (SIGTERM to its process group, then SIGKILL) on
:meth:`VLLMBackend.close`, when the backend is garbage collected, and at
interpreter exit.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from ..config import Settings
from .base import Backend, BackendError, Capabilities, Completion, Prompt, SamplingParams
from .openai_backend import OpenAIBackend, estimate_tokens

HOST = "127.0.0.1"
DEFAULT_STARTUP_TIMEOUT = 900.0  # large models take minutes to load and compile
NOT_INSTALLED = (
    "vLLM is not installed: pip install 'jupyter_data_agent[vllm]' on a GPU machine, or run "
    "`vllm serve <model>` elsewhere and use the openai backend with OPENAI_BASE_URL "
    "(c.DataAgent.backend = 'openai', c.DataAgent.base_url = 'http://host:8000/v1')."
)

CommandFactory = Callable[[Settings, int], Sequence[str]]


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None or shutil.which("vllm") is not None


def free_port(host: str = HOST) -> int:
    """A port the OS says is free now (there is a small race until the server binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def vllm_command(settings: Settings, port: int, executable: str = "vllm") -> list[str]:
    """The ``vllm serve`` command line; ``settings.vllm_args`` come last so they can override."""
    if not settings.model:
        raise BackendError(
            "The vllm backend needs a model: set c.DataAgent.model / JUPYTER_DATA_AGENT_MODEL to a "
            "Hugging Face id or a local model directory."
        )
    return [
        executable,
        "serve",
        settings.model,
        "--host",
        HOST,
        "--port",
        str(port),
        "--dtype",
        settings.dtype or "auto",
        "--enable-prefix-caching",
        *settings.vllm_args,
    ]


def _api_key_arg(args: Sequence[str]) -> str | None:
    """A ``--api-key`` the user put in vllm_args overrides ours; the client must use it."""
    key = None
    for i, arg in enumerate(args):
        if arg.startswith("--api-key="):
            key = arg.split("=", 1)[1]
        elif arg == "--api-key" and i + 1 < len(args):
            key = args[i + 1]
    return key


def _get(url: str, timeout: float, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_until_ready(
    url: str,
    timeout: float,
    *,
    interval: float = 0.25,
    process: subprocess.Popen | None = None,
    log_tail: Callable[[], str] | None = None,
    api_key: str | None = None,
) -> None:
    """Poll ``<url>/health`` then ``<url>/v1/models`` until both answer 200.

    ``url`` is the server root (a trailing ``/v1`` is dropped). Fails early,
    with the process's last output, if ``process`` exits.
    """
    root = url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + timeout

    def tail() -> str:
        text = log_tail() if log_tail else ""
        return f"\nLast output:\n{text}" if text.strip() else ""

    while True:
        if process is not None and process.poll() is not None:
            raise BackendError(
                f"The model server exited with code {process.returncode} before it was ready. "
                f"Check the model name, GPU memory and c.DataAgent.vllm_args.{tail()}"
            )
        try:
            if _get(root + "/health", 2.0) == 200 and _get(root + "/v1/models", 5.0, headers) == 200:
                return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise BackendError(
                f"The model server at {root} was not ready after {timeout:g} s. Raise "
                f"c.DataAgent.extra['vllm_startup_timeout'] for large models.{tail()}"
            )
        time.sleep(interval)


def _stop_process(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the server's process group (vLLM has worker children), then SIGKILL."""
    if process.poll() is not None:
        return

    def send(sig: int) -> None:
        try:
            if os.name == "posix":
                os.killpg(process.pid, sig)
            else:  # only SIGTERM is sent there (no process groups; terminate() is a kill)
                process.terminate()
        except (ProcessLookupError, PermissionError):
            pass

    send(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL sent; nothing more to do
            process.wait(5)


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(
        self,
        settings: Settings,
        *,
        command: CommandFactory | None = None,
        startup_timeout: float | None = None,
        env: dict[str, str] | None = None,
        stop_grace: float = 10.0,
        retry_backoff: float | None = None,
    ) -> None:
        """``command(settings, port)`` replaces ``vllm serve`` (tests run a small real server)."""
        self.settings = settings
        if command is None:
            if not vllm_available():
                raise BackendError(NOT_INSTALLED)
            executable = shutil.which("vllm") or str(Path(sys.executable).with_name("vllm"))
            command = lambda s, p: vllm_command(s, p, executable)  # noqa: E731
        if startup_timeout is None:
            startup_timeout = float(settings.extra.get("vllm_startup_timeout", DEFAULT_STARTUP_TIMEOUT))
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self._key = _api_key_arg(settings.vllm_args) or secrets.token_urlsafe(24)
        argv = list(command(settings, self.port))
        child_env = dict(os.environ if env is None else env)
        child_env["VLLM_API_KEY"] = self._key
        self._log: collections.deque[str] = collections.deque(maxlen=200)
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=child_env,
                start_new_session=(os.name == "posix"),
                text=True,
                errors="replace",
            )
        except OSError as exc:
            raise BackendError(f"Could not start the model server ({argv[0]}): {exc}") from exc
        self._finalizer = weakref.finalize(self, _stop_process, self.process, stop_grace)
        self._reader = threading.Thread(
            target=self._read_output, args=(self.process.stdout, self._log), daemon=True
        )
        self._reader.start()
        try:
            wait_until_ready(
                self.url,
                startup_timeout,
                process=self.process,
                log_tail=self.log_tail,
                api_key=self._key,
            )
        except BaseException:
            self._finalizer()
            raise
        client_settings = replace(
            settings, backend="openai", base_url=self.url + "/v1", api_key=self._key
        )
        self._client = OpenAIBackend(client_settings, retry_backoff=retry_backoff)

    @staticmethod
    def _read_output(stream, sink: collections.deque) -> None:
        # Drain the pipe so a chatty server never blocks on a full buffer.
        for line in stream:
            sink.append(line.rstrip("\n"))
        stream.close()

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self._log)[-lines:])

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    # -- Backend API: everything goes through the OpenAI protocol ------------------
    @property
    def model(self) -> str:
        return self._client.model

    @property
    def capabilities(self) -> Capabilities:
        caps = self._client.capabilities
        extra = {**caps.extra, "managed": True, "pid": self.process.pid, "port": self.port}
        return replace(caps, extra=extra)

    def _check_alive(self) -> None:
        if not self.running:
            raise BackendError(
                f"The managed vLLM server exited (code {self.process.returncode}). Recreate the "
                f"backend or check its output:\n{self.log_tail()}"
            )

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        self._check_alive()
        return self._client.generate(prompt, params)

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        self._check_alive()
        return self._client.stream(prompt, params)

    def count_tokens(self, text: str) -> int:
        """vLLM's ``/tokenize`` (the served model's tokenizer), else an estimate."""
        if not text:
            return 0
        body = json.dumps({"model": self.model, "prompt": text, "add_special_tokens": False}).encode()
        request = urllib.request.Request(
            self.url + "/tokenize",
            data=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(json.load(response)["count"])
        except (OSError, ValueError, KeyError, TypeError):
            return estimate_tokens(text)

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
        self._finalizer()
