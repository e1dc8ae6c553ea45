"""Server turns through the one pipeline: what the model is shown, and what is picked.

A real Jupyter server and kernels, the real OpenAI SDK against the local
OpenAI-protocol server; helpers come from ``test_server.py``.
"""

from __future__ import annotations

import pytest

from tests.conftest import agent_server_config
from tests.test_server import on_server_loop, post_turn, replies, start_kernel, stream_events

SILENT = "```python\n# Step 1: Sum a, print nothing.\ntotal = df['a'].sum()\n```"
ANSWER = "```python\n# Step 1: Sum a.\ndf['a'].sum()\n```"


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    model_server.clear()
    model_server.reply = replies
    return agent_server_config(model_server, monkeypatch, temperature=0.05)


def chosen_code(events: list[dict]) -> str:
    done = events[-1]
    assert done["type"] == "done", done
    sent = {e["data"]["index"]: e["data"]["candidate"] for e in events if e["type"] == "candidate"}
    return sent[done["data"]["result"]["chosen"]]["code"]


FAILED_CELL = {
    "cell_type": "code", "id": "c2", "source": "df['colum'].sum()", "metadata": {},
    "execution_count": 2,
    "outputs": [{"output_type": "error", "ename": "KeyError", "evalue": "'colum'",
                 "traceback": ["\x1b[31mKeyError\x1b[0m: 'colum'"]}],
}


@pytest.mark.parametrize("api_mode", ["chat", "completion"])
@on_server_loop
async def test_fix_shows_the_model_the_active_cells_error(jp_fetch, jp_ws_fetch, model_server,
                                                          api_mode, jp_serverapp):
    """"Fix the error in this cell": the traceback reaches the prompt (chat and completion)."""
    jp_serverapp.web_app.settings["jupyter_data_agent"].jobs.settings = \
        jp_serverapp.web_app.settings["jupyter_data_agent"].settings.with_overrides(api_mode=api_mode)
    from tests.test_server import notebook_cells

    accepted = await post_turn(jp_fetch, cells=[*notebook_cells(), FAILED_CELL], active_index=2,
                               intent="Fix the error in this cell.",
                               options={"use_live_state": False})
    events = await stream_events(jp_ws_fetch, accepted["job_id"])
    assert events[-1]["type"] == "done", events[-1]
    request = model_server.generation_requests[-1]
    assert "KeyError" in request.prompt and "'colum'" in request.prompt
    assert request.body["temperature"] == pytest.approx(0.05)


@on_server_loop
async def test_vote_picks_the_answer_over_silent_cells(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                        model_server):
    """Two candidates that print nothing never out-vote the one that answers."""
    model_server.reply = lambda request: [SILENT, SILENT, ANSWER]
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="vote",
                                   options={"samples": 3})
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
        assert chosen_code(events) == "# Step 1: Sum a.\ndf['a'].sum()"
    finally:
        kc.stop_channels()


@on_server_loop
async def test_an_unknown_strategy_is_refused_with_the_choices(jp_fetch):
    from tornado.httpclient import HTTPClientError

    with pytest.raises(HTTPClientError) as error:
        await post_turn(jp_fetch, strategy="fastest")
    assert error.value.code == 400
