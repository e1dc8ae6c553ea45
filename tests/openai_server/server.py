"""The OpenAI-protocol test server: its lifecycle, scripted failures, and the choices of a reply.

The HTTP side is :mod:`.handler`; the response bodies, :mod:`.payloads`.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

from .handler import make_handler
from .request import RecordedRequest, Reply, ReplyFn, tokenize


@dataclass
class _Failure:
    status: int
    message: str
    headers: dict[str, str]
    raw: bytes | None = None  # sent as is instead of an OpenAI error object
    content_type: str = "application/json"


class OpenAITestServer:
    """OpenAI-compatible HTTP server on 127.0.0.1 in a background thread."""

    def __init__(
        self,
        reply: Reply | ReplyFn = "Hello from the test server.",
        *,
        models: Sequence[str] | None = ("test-model",),
        api_key: str | None = None,
        delay: float = 0.0,
        chunk_delay: float | Callable[["RecordedRequest"], float] = 0.0,
        logprob: float = -0.5,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | Path | None = None,
    ) -> None:
        self.reply = reply
        # None accepts any model name; otherwise unknown models get a 404 like OpenAI.
        self.models = list(models) if models is not None else None
        self.api_key = api_key
        self.delay = delay
        self.chunk_delay = chunk_delay
        self.logprob = logprob
        self.log_path = Path(log_path) if log_path else None
        self.requests: list[RecordedRequest] = []
        # Streams the client closed before their last event (a cancelled generation).
        self.aborted_streams = 0
        self._failures: list[_Failure] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer((host, port), make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Server root (``/health`` lives here)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return self.url + "/v1"

    def start(self) -> "OpenAITestServer":
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> "OpenAITestServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- scripting ---------------------------------------------------------
    def fail_next(
        self,
        status: int = 500,
        times: int = 1,
        message: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` /v1 requests with HTTP ``status``."""
        with self._lock:
            for _ in range(times):
                self._failures.append(
                    _Failure(status, message or f"Injected failure {status}", dict(headers or {}))
                )

    def raw_next(
        self,
        body: str | bytes,
        status: int = 200,
        content_type: str = "text/html; charset=utf-8",
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` /v1 requests with ``body`` as is (e.g. an HTML page)."""
        raw = body.encode() if isinstance(body, str) else body
        with self._lock:
            for _ in range(times):
                self._failures.append(_Failure(status, "", {}, raw, content_type))

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self._failures.clear()
            self.aborted_streams = 0

    @property
    def generation_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST"]

    # -- internals ---------------------------------------------------------
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)
        if self.log_path is not None:
            with self._lock, self.log_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"method": req.method, "path": req.path, "body": req.body}) + "\n")

    def _pop_failure(self) -> _Failure | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    def _replies(self, req: RecordedRequest) -> list[str]:
        reply = self.reply(req) if callable(self.reply) else self.reply
        if isinstance(reply, str):
            return [reply] * req.n
        replies = list(reply) or [""]
        return [replies[i % len(replies)] for i in range(req.n)]

    def _choice_texts(self, req: RecordedRequest) -> list[tuple[list[str], str]]:
        """Per choice: tokens after applying ``stop`` and ``max_tokens``, and the finish reason."""
        stop = req.body.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        max_tokens = req.body.get("max_tokens") or req.body.get("max_completion_tokens")
        out = []
        for text in self._replies(req):
            finish = "stop"
            cuts = [text.find(s) for s in stop if s and s in text]
            if cuts:
                text = text[: min(cuts)]
            tokens = tokenize(text)
            if max_tokens is not None and len(tokens) > int(max_tokens):
                tokens = tokens[: int(max_tokens)]
                finish = "length"
            out.append((tokens, finish))
        return out
