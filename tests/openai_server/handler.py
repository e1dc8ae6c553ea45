"""The test server's HTTP side: routes, the checks before a generation, errors as OpenAI sends them."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

from . import payloads
from .request import RecordedRequest

if TYPE_CHECKING:
    from .server import OpenAITestServer

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def make_handler(server: OpenAITestServer) -> type[BaseHTTPRequestHandler]:
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
            except Exception as exc:
                self._error(500, f"reply function failed: {exc!r}")
                return
            if req.stream:
                self._stream(req, choices)
            else:
                self._send_json(200, payloads.completion(req, choices, next(server._ids), server.logprob))

        def _stream(self, req: RecordedRequest, choices) -> None:
            events = payloads.stream_events(req, choices, next(server._ids), server.logprob)
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
