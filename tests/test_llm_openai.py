"""OpenAIBackend against a real local server speaking the OpenAI protocol (no SDK mocks)."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from urllib.parse import quote

import pytest

from jupyter_data_agent.config import Settings
from jupyter_data_agent.llm import BackendError, ChatMessage, Prompt, SamplingParams, create_backend
from jupyter_data_agent.llm.openai_backend import OpenAIBackend
from jupyter_data_agent.llm.scrub import Scrubber, redact_url
from tests.openai_server import OpenAITestServer, tokenize

SECRET = "sk-test-0123456789abcdefSECRET"


@pytest.fixture
def server():
    with OpenAITestServer(reply="df.groupby('airline').delay.mean()") as srv:
        yield srv


def make(srv: OpenAITestServer, **overrides) -> OpenAIBackend:
    fields = dict(
        backend="openai",
        model="test-model",
        base_url=srv.base_url,
        request_timeout=5.0,
        max_retries=2,
        extra={"retry_backoff": 0.01},
    )
    fields.update(overrides)
    return OpenAIBackend(Settings(**fields))


CHAT = Prompt.chat([ChatMessage("system", "You write pandas."), ChatMessage("user", "mean delay?")])


def test_chat_sends_messages_and_returns_text(server):
    backend = make(server)
    [c] = backend.generate(CHAT, SamplingParams(temperature=0.3, top_p=0.9, max_tokens=50))
    assert c.text == "df.groupby('airline').delay.mean()"
    assert c.finish_reason == "stop"
    assert c.token_logprobs is None
    req = server.generation_requests[-1]
    assert req.path == "/v1/chat/completions"
    assert req.messages == [
        {"role": "system", "content": "You write pandas."},
        {"role": "user", "content": "mean delay?"},
    ]
    assert req.body["temperature"] == 0.3 and req.body["top_p"] == 0.9
    assert req.body["max_tokens"] == 50 and req.body["model"] == "test-model"
    assert c.prompt_tokens == len(tokenize("You write pandas.\nmean delay?"))
    assert c.completion_tokens == len(tokenize(c.text))


def test_text_prompt_uses_completions_api(server):
    backend = make(server)
    [c] = backend.generate(Prompt(text="# In[ ]:\nimport pandas"), SamplingParams())
    req = server.generation_requests[-1]
    assert req.path == "/v1/completions"
    assert req.body["prompt"] == "# In[ ]:\nimport pandas"
    assert c.text.startswith("df.groupby")


def test_api_mode_chat_wraps_text_prompt(server):
    backend = make(server, api_mode="chat")
    backend.generate(Prompt(text="plain prompt"), SamplingParams())
    req = server.generation_requests[-1]
    assert req.is_chat and req.messages == [{"role": "user", "content": "plain prompt"}]


def test_api_mode_completion_renders_chat_as_transcript(server):
    backend = make(server, api_mode="completion")
    backend.generate(CHAT, SamplingParams())
    req = server.generation_requests[-1]
    assert not req.is_chat
    assert req.body["prompt"].endswith("User: mean delay?\n\nAssistant:")


def test_n_samples_in_one_call():
    replies = ["a = 1", "b = 2", "c = 3"]
    with OpenAITestServer(reply=replies) as srv:
        out = make(srv).generate(CHAT, SamplingParams(n=3, temperature=0.7))
        assert [c.text for c in out] == replies
        assert len(srv.generation_requests) == 1 and srv.generation_requests[0].n == 3


def test_server_returning_fewer_choices_is_asked_again():
    # Like llama.cpp/Ollama, which ignore n.
    count = iter(range(100))

    class OneChoice(OpenAITestServer):
        def _replies(self, req):
            return [f"sample {next(count)}"]  # always a single choice

    with OneChoice() as srv:
        out = make(srv).generate(Prompt(text="x"), SamplingParams(n=3, temperature=1.0))
        assert [c.text for c in out] == ["sample 0", "sample 1", "sample 2"]
        assert [r.n for r in srv.generation_requests] == [3, 2, 1]


@pytest.mark.parametrize("prompt", [CHAT, Prompt(text="x = ")], ids=["chat", "completion"])
def test_logprobs_mapped(prompt):
    with OpenAITestServer(reply="x = df.shape[0]", logprob=-0.25) as srv:
        [c] = make(srv).generate(prompt, SamplingParams(logprobs=True))
        req = srv.generation_requests[-1]
        assert req.body["logprobs"] == (True if prompt.is_chat else 1)
        assert c.token_logprobs == [-0.25] * len(tokenize("x = df.shape[0]"))
        assert c.mean_logprob == -0.25
        assert c.completion_tokens == len(c.token_logprobs)


def test_stop_passed_through_and_applied():
    with OpenAITestServer(reply="df.head()\n# In[ ]:\nmore") as srv:
        backend = make(srv)
        [c] = backend.generate(Prompt(text="p"), SamplingParams(stop=("# In[ ]:", "\n\n\n")))
        assert srv.generation_requests[-1].body["stop"] == ["# In[ ]:", "\n\n\n"]
        assert c.text == "df.head()\n" and c.finish_reason == "stop"


def test_stop_cut_even_when_server_ignores_it_and_limited_to_four():
    class IgnoresStop(OpenAITestServer):
        def _choice_texts(self, req):
            body = dict(req.body)
            body.pop("stop", None)
            return super()._choice_texts(type(req)(req.method, req.path, req.headers, body))

    stops = ("A", "B", "C", "D", "END")
    with IgnoresStop(reply="print(1)\nEND\nprint(2)") as srv:
        [c] = make(srv).generate(Prompt(text="p"), SamplingParams(stop=stops, logprobs=True))
        assert srv.generation_requests[-1].body["stop"] == ["A", "B", "C", "D"]
        assert c.text == "print(1)\n" and c.finish_reason == "stop"


def test_max_tokens_finish_length():
    with OpenAITestServer(reply="one two three four five") as srv:
        [c] = make(srv).generate(Prompt(text="p"), SamplingParams(max_tokens=2))
        assert c.text == "one two" and c.finish_reason == "length"


@pytest.mark.parametrize("prompt", [CHAT, Prompt(text="x")], ids=["chat", "completion"])
def test_streaming_yields_deltas(prompt):
    with OpenAITestServer(reply="import pandas as pd\npd.read_csv('f.csv')") as srv:
        deltas = list(make(srv).stream(prompt, SamplingParams()))
        assert len(deltas) > 1
        assert "".join(deltas) == "import pandas as pd\npd.read_csv('f.csv')"
        assert srv.generation_requests[-1].stream


@pytest.mark.parametrize("chat", [True, False])
def test_a_stream_returns_the_servers_usage_and_logprobs(chat):
    from jupyter_data_agent.llm.base import Streamed

    reply = "import pandas as pd\npd.read_csv('f.csv')"
    prompt = CHAT if chat else Prompt(text="df = ")
    with OpenAITestServer(reply=reply, logprob=-0.25) as srv:
        streamed = Streamed(make(srv).stream(prompt, SamplingParams(logprobs=True)))
        assert "".join(streamed) == reply
        got = streamed.completion
        assert got is not None and got.text == reply
        assert got.completion_tokens == len(tokenize(reply))
        assert got.prompt_tokens == len(tokenize(srv.generation_requests[-1].prompt))
        assert got.token_logprobs == [-0.25] * len(tokenize(reply))


def test_streaming_stops_at_stop_sequence_split_across_chunks():
    class NoServerStop(OpenAITestServer):
        def _choice_texts(self, req):
            body = {k: v for k, v in req.body.items() if k != "stop"}
            return super()._choice_texts(type(req)(req.method, req.path, req.headers, body))

    with NoServerStop(reply="a = 1 # In[ ]: b = 2") as srv:
        # Tokens are " #", " In[", " ]:" so the stop string arrives in three deltas.
        text = "".join(make(srv).stream(Prompt(text="x"), SamplingParams(stop=("# In[ ]:",))))
        assert text == "a = 1 "


def test_401_is_clear_and_never_shows_the_key():
    with OpenAITestServer(api_key="sk-the-right-key-000000") as srv:
        backend = make(srv, api_key=SECRET)
        with pytest.raises(BackendError) as info:
            backend.generate(CHAT, SamplingParams())
        message = str(info.value)
        assert "401" in message and "OPENAI_API_KEY" in message and "c.DataAgent.api_key" in message
        assert SECRET not in message and "SECRET" not in message
        # The SDK error (which carries the server's echo of the key) is not chained for display.
        assert info.value.__cause__ is None and info.value.__suppress_context__
        # The server got the key, so the failure really was the key's.
        assert srv.generation_requests[-1].header("Authorization") == f"Bearer {SECRET}"


def test_right_key_is_accepted():
    with OpenAITestServer(api_key=SECRET, reply="ok") as srv:
        assert make(srv, api_key=SECRET).generate(CHAT, SamplingParams())[0].text == "ok"


def test_unknown_model_404():
    with OpenAITestServer() as srv:
        with pytest.raises(BackendError, match="not-a-model.*404.*c.DataAgent.model"):
            make(srv, model="not-a-model").generate(CHAT, SamplingParams())


def test_429_then_success_is_retried():
    with OpenAITestServer(reply="fine") as srv:
        srv.fail_next(429, times=2, message="Rate limit reached")
        start = time.perf_counter()
        [c] = make(srv).generate(CHAT, SamplingParams())
        assert c.text == "fine"
        assert len(srv.generation_requests) == 3
        assert time.perf_counter() - start < 2


def test_5xx_retried_then_gives_up_with_clear_error():
    with OpenAITestServer() as srv:
        srv.fail_next(503, times=10)
        with pytest.raises(BackendError, match="503 after 2 retries"):
            make(srv).generate(CHAT, SamplingParams())
        assert len(srv.generation_requests) == 3  # first try + max_retries


def test_400_not_retried():
    with OpenAITestServer() as srv:
        srv.fail_next(400, message="temperature out of range")
        with pytest.raises(BackendError, match="400.*temperature out of range"):
            make(srv).generate(CHAT, SamplingParams())
        assert len(srv.generation_requests) == 1


def test_timeout_is_backend_error():
    with OpenAITestServer(delay=3.0) as srv:
        backend = make(srv, request_timeout=0.3)
        start = time.perf_counter()
        with pytest.raises(BackendError, match="within 0.3 s.*request_timeout"):
            backend.generate(CHAT, SamplingParams())
        assert time.perf_counter() - start < 2.5  # not retried


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_is_backend_error():
    backend = OpenAIBackend(
        Settings(
            backend="openai",
            model="m",
            base_url=f"http://127.0.0.1:{_closed_port()}/v1",
            max_retries=1,
            request_timeout=2,
            extra={"retry_backoff": 0.01},
        )
    )
    with pytest.raises(BackendError, match="Cannot reach.*OPENAI_BASE_URL"):
        backend.generate(CHAT, SamplingParams())


def test_no_key_for_openai_proper_is_explained():
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        OpenAIBackend(Settings(backend="openai"))


def test_empty_model_takes_first_listed_model():
    with OpenAITestServer(models=["served-model", "other"], reply="hi") as srv:
        backend = make(srv, model="")
        assert backend.model == "served-model"
        backend.generate(CHAT, SamplingParams())
        assert srv.generation_requests[-1].body["model"] == "served-model"


def test_count_tokens_estimate_and_tiktoken():
    with OpenAITestServer() as srv:
        backend = make(srv, model="some-local-model")
        assert backend.count_tokens("") == 0
        assert 5 <= backend.count_tokens("df.groupby('a').b.mean()") <= 12


def test_factory_reuses_instance(server):
    settings = Settings(backend="openai", model="test-model", base_url=server.base_url)
    assert create_backend(settings) is create_backend(settings)
    assert create_backend(settings) is not create_backend(
        Settings(backend="openai", model="test-model", base_url=server.base_url, temperature=0.9)
    )


def test_server_cli_mode(tmp_path):
    """The UI tests run the server as a process; the reply file is re-read per request."""
    reply_file = tmp_path / "replies.json"
    reply_file.write_text('{"rules": [{"match": "airline", "reply": "AIR"}], "default": "DEF"}')
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.openai_server", "--reply-file", str(reply_file), "--log", str(log)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(__import__("pathlib").Path(__file__).parent.parent),
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("OPENAI_TEST_SERVER_READY ")
        base_url = line.split()[1]
        backend = OpenAIBackend(Settings(backend="openai", model="test-model", base_url=base_url))
        assert backend.generate(Prompt(text="airline delays"), SamplingParams())[0].text == "AIR"
        assert backend.generate(Prompt(text="other"), SamplingParams())[0].text == "DEF"
        reply_file.write_text('"CHANGED"')
        assert backend.generate(Prompt(text="airline"), SamplingParams())[0].text == "CHANGED"
        assert len(log.read_text().splitlines()) == 3
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


# -- replies that are not the API's JSON --------------------------------------------

PROXY_PAGE = ("<html><head><title>502 Bad Gateway</title></head>"
              "<body><h1>Bad Gateway</h1><p>nginx</p></body></html>")
NOT_JSON = {
    "html": (PROXY_PAGE, "text/html; charset=utf-8"),
    "broken-json": ('{"choices": [', "application/json"),
}


@pytest.mark.parametrize("kind", sorted(NOT_JSON))
@pytest.mark.parametrize("call", ["chat", "completion", "stream", "models"])
def test_non_json_reply_is_a_clear_error_naming_the_endpoint(kind, call):
    body, content_type = NOT_JSON[kind]
    with OpenAITestServer(reply="ok") as srv:
        base_url = srv.base_url.replace("http://", "http://user:pw-hunter2@")
        backend = make(srv, base_url=base_url, api_key=SECRET, max_retries=0,
                       model="" if call == "models" else "test-model")
        srv.raw_next(body, content_type=content_type)
        with pytest.raises(BackendError) as info:
            if call == "models":
                _ = backend.model
            elif call == "stream":
                list(backend.stream(CHAT, SamplingParams()))
            else:
                backend.generate(CHAT if call == "chat" else Prompt(text="x"), SamplingParams())
        message = str(info.value)
        assert f"http://***@127.0.0.1:{srv.port}/v1" in message
        assert "not JSON" in message and "c.DataAgent.base_url" in message
        if kind == "html":
            assert "502 Bad Gateway" in message and "<" not in message
        assert "hunter2" not in message and SECRET not in message
        assert info.value.__cause__ is None
        # The next, proper reply works with the same backend.
        if call != "models":
            assert backend.generate(CHAT, SamplingParams())[0].text == "ok"


def test_stream_answered_without_events_is_an_error():
    with OpenAITestServer(reply="ok") as srv:
        srv.raw_next('{"id": "x", "choices": []}', content_type="application/json")
        with pytest.raises(BackendError, match="without streaming"):
            list(make(srv).stream(CHAT, SamplingParams()))


def test_errors_show_the_endpoint_without_url_credentials():
    backend = OpenAIBackend(Settings(backend="openai", model="m", max_retries=0,
                                     base_url=f"http://me:s3cret-pw@127.0.0.1:{_closed_port()}/v1",
                                     request_timeout=2))
    with pytest.raises(BackendError) as info:
        backend.generate(CHAT, SamplingParams())
    assert "http://***@127.0.0.1:" in str(info.value) and "s3cret" not in str(info.value)
    assert backend.capabilities.extra["base_url"].startswith("http://***@127.0.0.1:")


@pytest.mark.parametrize("url, shown", [
    ("http://user:secret@host:8000/v1", "http://***@host:8000/v1"),
    ("https://token@host/v1", "https://***@host/v1"),
    ("http://host:8000/v1", "http://host:8000/v1"),
    ("https://host/v1?api-key=abc&deployment=x", "https://host/v1?api-key=***&deployment=x"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


# -- the secret scrubber (one implementation: server events and backend errors) -----

KEY = "sk-proj-Zq8vX2mN4bT7wR1yL6"


def _base64_forms(secret: str) -> dict[str, str]:
    forms = {}
    for prefix in ("", "a", "ab"):  # the three byte alignments inside a longer value
        data = f"{prefix}{secret}".encode()
        for name, encode in (("std", base64.b64encode), ("url", base64.urlsafe_b64encode)):
            encoded = encode(data).decode()
            forms[f"b64-{name}-{len(prefix)}"] = encoded
            forms[f"b64-{name}-{len(prefix)}-nopad"] = encoded.rstrip("=")
    forms["b64-mime-lines"] = base64.encodebytes(("x" * 50 + secret).encode()).decode()
    return forms


def _encodings(secret: str) -> dict[str, str]:
    raw = secret.encode()
    forms = {
        "plain": secret,
        "reversed": secret[::-1],
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "hex-spaced": " ".join(f"{b:02x}" for b in raw),
        "hex-0x": ", ".join(f"0x{b:02X}" for b in raw),
        "hex-escapes": "".join(f"\\x{b:02x}" for b in raw),
        "percent-all": "".join(f"%{b:02X}" for b in raw),
        "percent-quote": quote(secret, safe=""),
        "json-dumps": json.dumps(secret),
        "json-unicode": "".join(f"\\u{ord(c):04x}" for c in secret),
        "reversed-spaced": " ".join(secret[::-1]),
    }
    for name, sep in (("spaces", " "), ("dashes", "-"), ("dots", "."), ("commas", ", "),
                      ("newlines", "\n")):
        forms[f"sep-{name}"] = sep.join(secret)
    forms.update(_base64_forms(secret))
    return forms


@pytest.mark.parametrize("name, encoded", sorted(_encodings(KEY).items()))
def test_scrubber_catches_encodings_of_the_secret(name, encoded):
    scrub = Scrubber([KEY])
    out = scrub.text(f"value: {encoded} (end)")
    assert "***" in out and out.startswith("value: ") and out.endswith(" (end)")
    if name.startswith("b64"):
        # At most a few bits at either end remain: nothing that decodes to the key.
        assert not any(len(w) >= 8 and w in out for w in _base64_cores_of(KEY))
    else:
        assert encoded.strip() not in out
    # In a JSON event payload too, keys and nested values included.
    payload = scrub.json({"outputs": [{"text": encoded}], encoded: 1})
    assert "***" in payload["outputs"][0]["text"] and encoded not in payload


def _base64_cores_of(secret: str) -> list[str]:
    from jupyter_data_agent.llm.scrub import base64_cores

    return sorted(base64_cores(secret.encode()))


def test_scrubber_keeps_ordinary_text():
    scrub = Scrubber([KEY])
    text = "df.groupby('airline').delay.mean()\nCheck the key column; sk is a prefix."
    assert scrub.text(text) == text


def test_short_secrets_only_match_whole_tokens():
    scrub = Scrubber(["EMPTY"])
    assert scrub.text("Check EMPTY, EMPTYish and notEMPTY (EMPTY)") == \
        "Check ***, EMPTYish and notEMPTY (***)"
    assert Scrubber(["heck"]).text("Check the heck") == "Check the ***"
    # Too short to be a secret at all: left alone.
    assert Scrubber(["k"]).text("Check") == "Check"


def test_backend_errors_use_the_same_scrubber():
    with OpenAITestServer() as srv:
        reversed_key = SECRET[::-1]
        encoded = base64.b64encode(SECRET.encode()).decode()
        srv.fail_next(400, message=f"bad request: {reversed_key} / {encoded} / {' '.join(SECRET)}")
        with pytest.raises(BackendError) as info:
            make(srv, api_key=SECRET, max_retries=0).generate(CHAT, SamplingParams())
        message = str(info.value)
        assert "400" in message
        assert reversed_key not in message and encoded.rstrip("=") not in message
        assert " ".join(SECRET) not in message
