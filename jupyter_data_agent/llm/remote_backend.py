"""A backend that asks the Jupyter server's model service instead of loading a model.

A kernel started by a Jupyter server running this extension inherits
``JUPYTER_DATA_AGENT_MODEL_SOCKET`` (a Unix socket in a private directory)
and ``JUPYTER_DATA_AGENT_MODEL_TOKEN`` from the server's environment; the
``%%agent`` magic then sends its generation requests there
(:mod:`jupyter_data_agent.server.model_service`), so the weights live once in
the server and never in user kernels.

Protocol: one JSON object per line, one request per connection. The client
sends ``{"token", "op", "settings_overrides", ...}``; the service answers
``{"queue": k}`` lines while the request waits behind ``k`` others, then
``{"delta": text}`` lines (``stream``) and one final ``{"done": result}`` or
``{"error": message}``.

Kernel-side module: standard library only (no torch, no transformers).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict

from .base import Backend, BackendError, Capabilities, Completion, Prompt, SamplingParams
from .local import chat_dicts

log = logging.getLogger(__name__)

ENV_SOCKET = "JUPYTER_DATA_AGENT_MODEL_SOCKET"
ENV_TOKEN = "JUPYTER_DATA_AGENT_MODEL_TOKEN"

#: Tokens of model services running in *this* process: a server never sends
#: requests to itself (it loads the model in-process instead).
LOCAL_SERVICE_TOKENS: set[str] = set()

#: Settings a kernel may change on the server's model (``%%agent --model``).
ALLOWED_OVERRIDES = ("model",)

_GRACE_S = 300.0  # beyond the request timeout: a queued turn may wait for others


def service_address(environ=None) -> tuple[str, str] | None:
    """(socket path, token) of the server's model service for this process, or None.

    None when the variables are missing or empty (an empty socket variable
    opts out: the model then loads in-process), or when the service runs in
    this very process.
    """
    environ = os.environ if environ is None else environ
    path, token = environ.get(ENV_SOCKET, ""), environ.get(ENV_TOKEN, "")
    if not path or not token or token in LOCAL_SERVICE_TOKENS:
        return None
    return path, token


def encode_prompt(prompt: Prompt) -> dict:
    if prompt.messages is not None:
        return {"messages": chat_dicts(prompt)}
    return {"text": prompt.text}


def decode_prompt(data: dict) -> Prompt:
    if not isinstance(data, dict):
        raise ValueError("prompt must be an object")
    if data.get("messages") is not None:
        if not isinstance(data["messages"], list):
            raise ValueError("prompt messages must be a list")
        return Prompt.chat([{"role": str(m["role"]), "content": str(m["content"])}
                            for m in data["messages"]])
    return Prompt(text=str(data.get("text", "")))


def decode_params(data: dict) -> SamplingParams:
    if not isinstance(data, dict):
        raise ValueError("params must be an object")
    known = set(SamplingParams.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown sampling parameters: {', '.join(sorted(unknown))}")
    data = dict(data)
    if "stop" in data:
        data["stop"] = tuple(str(s) for s in data["stop"] or ())
    return SamplingParams(**data)


class RemoteBackend(Backend):
    """Generation through the Jupyter server's model service (see the module docstring)."""

    name = "remote"

    def __init__(self, socket_path: str, token: str, *, overrides: dict | None = None,
                 timeout: float = 120.0, on_wait: Callable[[int], None] | None = None) -> None:
        self.socket_path = socket_path
        self._token = token
        self.overrides = {k: v for k, v in (overrides or {}).items() if k in ALLOWED_OVERRIDES}
        self.timeout = timeout
        #: Called with the number of turns ahead while a request waits; default prints it.
        self.on_wait = on_wait if on_wait is not None else _print_wait
        self._info: dict | None = None

    def __repr__(self) -> str:  # never shows the token
        return f"RemoteBackend({self.socket_path!r}, overrides={self.overrides!r})"

    # -- protocol ------------------------------------------------------------
    def _request(self, op: str, **fields) -> Iterator[dict]:
        body = {"token": self._token, "op": op, "settings_overrides": self.overrides, **fields}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout + _GRACE_S)
            try:
                sock.connect(self.socket_path)
            except OSError as exc:
                raise BackendError(
                    f"The Jupyter server's model service is gone ({self.socket_path}: "
                    f"{exc.strerror or exc}). Restart the kernel from a running Jupyter server, "
                    f"or set {ENV_SOCKET}= (empty) to load the model in this kernel."
                ) from None
            with sock.makefile("rb") as reader:
                sock.sendall(json.dumps(body).encode() + b"\n")
                last_wait = None
                while True:
                    try:
                        line = reader.readline()
                    except (socket.timeout, TimeoutError):
                        raise BackendError(
                            "The Jupyter server's model service did not answer in time."
                        ) from None
                    except OSError as exc:
                        raise BackendError(
                            f"The connection to the Jupyter server's model service broke: {exc}"
                        ) from None
                    if not line:
                        raise BackendError(
                            "The Jupyter server's model service closed the connection "
                            "(was the server stopped?)."
                        )
                    msg = json.loads(line)
                    if "error" in msg:
                        raise BackendError(str(msg["error"]))
                    if "queue" in msg:
                        ahead = int(msg["queue"])
                        if ahead != last_wait and ahead > 0:
                            last_wait = ahead
                            try:
                                self.on_wait(ahead)
                            except Exception:  # a progress callback must not end the generation
                                log.debug("on_wait callback failed", exc_info=True)
                        continue
                    yield msg
                    if "done" in msg:
                        return

    def _call(self, op: str, **fields):
        for msg in self._request(op, **fields):
            if "done" in msg:
                return msg["done"]
        raise BackendError("The Jupyter server's model service sent no result.")

    def info(self) -> dict:
        if self._info is None:
            self._info = self._call("info")
        return self._info

    # -- Backend -------------------------------------------------------------
    @property
    def model(self) -> str:
        return str(self.info().get("model", ""))

    @property
    def capabilities(self) -> Capabilities:
        caps = self.info().get("capabilities") or {}
        return Capabilities(chat=bool(caps.get("chat")), completion=bool(caps.get("completion")),
                            logprobs=bool(caps.get("logprobs")),
                            streaming=bool(caps.get("streaming", True)),
                            extra=dict(caps.get("extra") or {}))

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        done = self._call("generate", prompt=encode_prompt(prompt), params=asdict(params))
        return [Completion(**c) for c in done]

    def stream(self, prompt: Prompt, params: SamplingParams) -> Generator[str, None, Completion | None]:
        for msg in self._request("stream", prompt=encode_prompt(prompt), params=asdict(params)):
            if "delta" in msg:
                yield str(msg["delta"])
            elif isinstance(msg.get("done"), dict):  # the service's runtime reported the completion
                return Completion(**msg["done"])
        return None

    def count_tokens(self, text: str) -> int:
        return int(self._call("count_tokens", text=text))


def _print_wait(ahead: int) -> None:
    print(f"waiting for the model: {ahead} turn{'s' if ahead != 1 else ''} ahead", file=sys.stdout,
          flush=True)
