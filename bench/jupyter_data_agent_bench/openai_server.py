"""A small local server that speaks the OpenAI HTTP protocol: the model in tests and in the lab.

Tests run the real ``openai`` SDK (and everything built on it: the magic, the
server extension, the UI) against this server instead of mocking the SDK;
``bench loop`` serves the simulated policy through it to a real Jupyter
server.
It implements ``POST /v1/chat/completions``, ``POST /v1/completions``
(``n`` choices, ``stop``, ``max_tokens``, ``logprobs``, SSE streaming,
``usage``), ``GET /v1/models`` and ``GET /health`` (like ``vllm serve``).

In-process use::

    from jupyter_data_agent_bench.openai_server import OpenAITestServer

    with OpenAITestServer(reply=lambda req: "df.head()") as srv:
        settings = Settings(backend="openai", base_url=srv.base_url, model="test-model")
        ...
        assert "df" in srv.requests[-1].prompt

``reply`` is a string, a list of strings (one per choice, cycled), or a
function of the :class:`RecordedRequest` returning either. Failures are
scripted with :meth:`OpenAITestServer.fail_next`, replies that are not the
API's JSON (a proxy's HTML page) with :meth:`OpenAITestServer.raw_next`;
``delay`` slows every
generation response (for timeouts); ``api_key`` makes the server demand
``Authorization: Bearer <api_key>`` and answer 401 otherwise.

As a separate process (UI tests)::

    python -m jupyter_data_agent_bench.openai_server --port 0 --reply-file replies.json --log requests.jsonl

prints ``OPENAI_TEST_SERVER_READY <base_url>`` once listening. The reply file
is re-read on every request, so a test may rewrite it between turns: plain
text is the reply; a ``.json`` file holds a string, a list of strings (served
to successive requests, the last one repeating), or an object
``{"rules": [{"match": "substring of the prompt", "reply": "..."}],
"default": "..."}``; a rule's optional ``"chunk_delay"`` (seconds per
streamed token) slows that reply's stream, so a UI test can watch it being
written.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["OpenAITestServer", "RecordedRequest", "tokenize", "main"]

Reply = str | list[str]
ReplyFn = Callable[["RecordedRequest"], Reply]

_TOKEN_RE = re.compile(r"\s*\S+|\s+$")


def tokenize(text: str) -> list[str]:
    """The server's notion of tokens: words with their leading whitespace."""
    return _TOKEN_RE.findall(text)


def _content_text(content: object) -> str:
    """A chat message's content as text: a string, or its content parts' texts."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if p.get("type") == "text" else "[image]"
                         for p in content if isinstance(p, dict))
    return str(content)


@dataclass
class RecordedRequest:
    """One request as received, kept so tests can assert on prompts and parameters."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict = field(default_factory=dict)

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    @property
    def is_chat(self) -> bool:
        return self.path.rstrip("/").endswith("/chat/completions")

    @property
    def messages(self) -> list[dict]:
        return list(self.body.get("messages") or [])

    @property
    def prompt(self) -> str:
        """The completion prompt, or the chat messages' contents joined by newlines
        (of content parts, the text; an image part as ``[image]``)."""
        if self.is_chat:
            return "\n".join(_content_text(m.get("content", "")) for m in self.messages)
        prompt = self.body.get("prompt", "")
        return prompt[0] if isinstance(prompt, list) and prompt else str(prompt)

    @property
    def images(self) -> list[str]:
        """The ``image_url`` URLs of the chat messages' content parts (data: URLs), in order."""
        return [part["image_url"]["url"] for m in self.messages if isinstance(m.get("content"), list)
                for part in m["content"] if isinstance(part, dict) and part.get("type") == "image_url"]

    @property
    def n(self) -> int:
        return int(self.body.get("n") or 1)

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


@dataclass
class _Failure:
    status: int
    message: str
    headers: dict[str, str]
    raw: bytes | None = None  # sent as is instead of an OpenAI error object
    content_type: str = "application/json"


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


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
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
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


def _make_handler(server: OpenAITestServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # keep test output clean
            pass

        # -- plumbing --------------------------------------------------------
        def _headers(self) -> dict[str, str]:
            return {k.lower(): v for k, v in self.headers.items()}

        def _send_json(self, status: int, payload: dict, headers: dict | None = None) -> None:
            self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

        def _send_raw(self, status: int, data: bytes, content_type: str,
                      headers: dict | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _error(self, status: int, message: str, code: str | None = None, headers=None) -> None:
            self._send_json(
                status,
                {
                    "error": {
                        "message": message,
                        "type": _ERROR_TYPES.get(status, "server_error"),
                        "param": None,
                        "code": code,
                    }
                },
                headers,
            )

        def _read_body(self) -> dict | None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return {}
            try:
                body = json.loads(raw)
            except ValueError:
                return None
            return body if isinstance(body, dict) else None

        def _checks(self, req: RecordedRequest) -> bool:
            """Scripted failures, then auth, then the model: False when an error was sent."""
            failure = server._pop_failure()
            if failure is not None and failure.raw is not None:
                self._send_raw(failure.status, failure.raw, failure.content_type, failure.headers)
                return False
            if failure is not None:
                self._error(failure.status, failure.message, headers=failure.headers)
                return False
            if server.api_key is not None:
                auth = self.headers.get("Authorization", "")
                if auth != f"Bearer {server.api_key}":
                    given = auth.removeprefix("Bearer ")
                    # Like some real servers, echo what was sent: clients must not show it.
                    self._error(401, f"Incorrect API key provided: {given}", "invalid_api_key")
                    return False
            model = req.body.get("model")
            if req.method == "POST" and server.models is not None and model not in server.models:
                self._error(404, f"The model `{model}` does not exist.", "model_not_found")
                return False
            return True

        # -- routes ----------------------------------------------------------
        def do_GET(self):
            path = self.path.split("?")[0].rstrip("/")
            if path == "/health":
                self._send_json(200, {})
                return
            req = RecordedRequest("GET", path, self._headers(), {})
            server._record(req)
            if path == "/v1/models":
                if not self._checks(req):
                    return
                data = [
                    {"id": m, "object": "model", "created": 0, "owned_by": "test"}
                    for m in (server.models or ["test-model"])
                ]
                self._send_json(200, {"object": "list", "data": data})
                return
            self._error(404, f"No route for GET {path}")

        def do_POST(self):
            path = self.path.split("?")[0].rstrip("/")
            body = self._read_body()
            req = RecordedRequest("POST", path, self._headers(), body or {})
            server._record(req)
            if body is None:
                self._error(400, "Request body is not a JSON object.")
                return
            if path not in ("/v1/chat/completions", "/v1/completions"):
                self._error(404, f"No route for POST {path}")
                return
            if not self._checks(req):
                return
            if server.delay and server._stopping.wait(server.delay):
                return
            try:
                choices = server._choice_texts(req)
            except Exception as exc:  # noqa: BLE001 -- a broken reply function is a test bug: made visible as a 500
                self._error(500, f"reply function failed: {exc!r}")
                return
            if req.stream:
                self._stream(req, choices)
            else:
                self._respond(req, choices)

        # -- payloads --------------------------------------------------------
        def _usage(self, req: RecordedRequest, choices) -> dict:
            prompt_tokens = len(tokenize(req.prompt))
            completion_tokens = sum(len(t) for t, _ in choices)
            return {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }

        def _chat_logprobs(self, tokens: list[str]) -> dict:
            return {
                "content": [
                    {
                        "token": t,
                        "logprob": server.logprob,
                        "bytes": list(t.encode()),
                        "top_logprobs": [],
                    }
                    for t in tokens
                ],
                "refusal": None,
            }

        def _text_logprobs(self, tokens: list[str], offset: int = 0) -> dict:
            offsets, pos = [], offset
            for t in tokens:
                offsets.append(pos)
                pos += len(t)
            return {
                "tokens": tokens,
                "token_logprobs": [server.logprob] * len(tokens),
                "top_logprobs": [{t: server.logprob} for t in tokens],
                "text_offset": offsets,
            }

        def _wants_logprobs(self, req: RecordedRequest) -> bool:
            lp = req.body.get("logprobs")
            return bool(lp) if req.is_chat else lp is not None

        def _respond(self, req: RecordedRequest, choices) -> None:
            want_lp = self._wants_logprobs(req)
            created = int(time.time())
            model = req.body.get("model")
            if req.is_chat:
                payload = {
                    "id": f"chatcmpl-test-{next(server._ids)}",
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": i,
                            "message": {"role": "assistant", "content": "".join(tokens)},
                            "finish_reason": finish,
                            "logprobs": self._chat_logprobs(tokens) if want_lp else None,
                        }
                        for i, (tokens, finish) in enumerate(choices)
                    ],
                    "usage": self._usage(req, choices),
                }
            else:
                payload = {
                    "id": f"cmpl-test-{next(server._ids)}",
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": i,
                            "text": "".join(tokens),
                            "finish_reason": finish,
                            "logprobs": self._text_logprobs(tokens) if want_lp else None,
                        }
                        for i, (tokens, finish) in enumerate(choices)
                    ],
                    "usage": self._usage(req, choices),
                }
            self._send_json(200, payload)

        def _stream(self, req: RecordedRequest, choices) -> None:
            want_lp = self._wants_logprobs(req)
            created = int(time.time())
            model = req.body.get("model")
            chat = req.is_chat
            cid = f"{'chatcmpl' if chat else 'cmpl'}-test-{next(server._ids)}"
            base = {
                "id": cid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": model,
            }

            def chunk(index, text=None, finish=None, role=False, token=None):
                if chat:
                    delta = {}
                    if role:
                        delta["role"] = "assistant"
                    if text is not None:
                        delta["content"] = text
                    c = {"index": index, "delta": delta, "finish_reason": finish}
                    if want_lp and token is not None:
                        c["logprobs"] = self._chat_logprobs([token])
                else:
                    c = {"index": index, "text": text or "", "finish_reason": finish}
                    if want_lp and token is not None:
                        c["logprobs"] = self._text_logprobs([token])
                return {**base, "choices": [c]}

            events = []
            for i, _choice in enumerate(choices):
                if chat:
                    events.append(chunk(i, "", role=True))
            for step in range(max((len(t) for t, _ in choices), default=0)):
                for i, (tokens, _) in enumerate(choices):
                    if step < len(tokens):
                        events.append(chunk(i, tokens[step], token=tokens[step]))
            for i, (_, finish) in enumerate(choices):
                events.append(chunk(i, None if chat else "", finish=finish))
            if (req.body.get("stream_options") or {}).get("include_usage"):
                events.append({**base, "choices": [], "usage": self._usage(req, choices)})

            pause = server.chunk_delay(req) if callable(server.chunk_delay) else server.chunk_delay
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for event in events:
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self.wfile.flush()
                    if pause and server._stopping.wait(pause):
                        return
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with server._lock:
                    server.aborted_streams += 1

    return Handler


# -- CLI -------------------------------------------------------------------
def _file_reply(path: Path) -> ReplyFn:
    """Reply from a file re-read per request, so a UI test can change it between turns."""
    counter = itertools.count()

    def reply(req: RecordedRequest) -> Reply:
        number = next(counter)
        raw = path.read_text(encoding="utf-8")
        if path.suffix != ".json":
            return raw
        spec = json.loads(raw)
        if isinstance(spec, str):
            return spec
        if isinstance(spec, list):
            return spec[min(number, len(spec) - 1)] if spec else ""
        rule = _file_rule(spec, req)
        return rule["reply"] if rule else spec.get("default", "")

    return reply


def _file_rule(spec, req: RecordedRequest) -> dict | None:
    """The reply file's first rule matching the request's prompt, if it has rules."""
    rules = spec.get("rules", []) if isinstance(spec, dict) else []
    return next((r for r in rules if r.get("match", "") in req.prompt), None)


def _file_chunk_delay(path: Path, default: float) -> Callable[[RecordedRequest], float]:
    """Per-request stream pacing: the matching rule's ``chunk_delay``, else ``default``."""

    def delay(req: RecordedRequest) -> float:
        if path.suffix != ".json":
            return default
        rule = _file_rule(json.loads(path.read_text(encoding="utf-8")), req)
        return float(rule.get("chunk_delay", default)) if rule else default

    return delay


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--reply", default="Hello from the test server.")
    group.add_argument("--reply-file", type=Path)
    parser.add_argument("--model", action="append", help="served model (repeatable)")
    parser.add_argument("--any-model", action="store_true", help="accept any model name")
    parser.add_argument("--api-key", default=None)
    parser.add_argument(
        "--api-key-env", default=None, help="read the required key from this environment variable"
    )
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--log", type=Path, default=None, help="append requests as JSON lines")
    args = parser.parse_args(argv)

    models = None if args.any_model else (args.model or ["test-model"])
    if args.api_key_env:
        args.api_key = os.environ.get(args.api_key_env) or args.api_key
    reply = _file_reply(args.reply_file) if args.reply_file else args.reply
    srv = OpenAITestServer(
        reply,
        models=models,
        api_key=args.api_key,
        delay=args.delay,
        chunk_delay=_file_chunk_delay(args.reply_file, args.chunk_delay) if args.reply_file else args.chunk_delay,
        host=args.host,
        port=args.port,
        log_path=args.log,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    srv.start()
    print(f"OPENAI_TEST_SERVER_READY {srv.base_url}", flush=True)
    try:
        done.wait()
    finally:
        srv.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
