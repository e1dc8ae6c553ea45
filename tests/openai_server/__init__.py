"""A small local server that speaks the OpenAI HTTP protocol: the model in the tests.

Tests run the real ``openai`` SDK (and everything built on it: the magic, the
server extension, the UI) against this server instead of mocking the SDK; it
lives with them (no test of the runtime needs the benchmarks). The benchmarks
reuse it from the same checkout: ``bench loop`` serves its simulated policy
through it to a real Jupyter server (``jupyter_data_agent_bench.model_server``).
It implements ``POST /v1/chat/completions``, ``POST /v1/completions``
(``n`` choices, ``stop``, ``max_tokens``, ``logprobs``, SSE streaming,
``usage``), ``GET /v1/models`` and ``GET /health`` (like ``vllm serve``).

In-process use::

    from tests.openai_server import OpenAITestServer

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

    python -m tests.openai_server --port 0 --reply-file replies.json --log requests.jsonl

prints ``OPENAI_TEST_SERVER_READY <base_url>`` once listening. The reply file
is re-read on every request, so a test may rewrite it between turns: plain
text is the reply; a ``.json`` file holds a string, a list of strings (served
to successive requests, the last one repeating), or an object
``{"rules": [{"match": "substring of the prompt", "reply": "..."}],
"default": "..."}``; a rule's optional ``"chunk_delay"`` (seconds per
streamed token) slows that reply's stream, so a UI test can watch it being
written.

The package: :mod:`.request` (a request as recorded, the server's tokens),
:mod:`.server` (the server: lifecycle, scripted failures, the replies' choices),
:mod:`.handler` (HTTP: routes, checks, errors), :mod:`.payloads` (the OpenAI
response bodies and stream events), :mod:`.cli` (the command line, reply files).
"""

from .cli import main
from .request import RecordedRequest, tokenize
from .request import Reply as Reply  # the types of ``reply``, importable from here as before
from .request import ReplyFn as ReplyFn
from .server import OpenAITestServer

__all__ = ["OpenAITestServer", "RecordedRequest", "tokenize", "main"]
