"""The test server as a process of its own (UI tests): ``python -m tests.openai_server``.

Replies come from ``--reply`` or a reply file re-read on every request (see the package's
docstring for its forms); ``OPENAI_TEST_SERVER_READY <base_url>`` is printed once listening.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .request import RecordedRequest, Reply, ReplyFn
from .server import OpenAITestServer

DESCRIPTION = "A small local server that speaks the OpenAI HTTP protocol: the model in tests and in the lab."


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
    parser = argparse.ArgumentParser(description=DESCRIPTION)
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

