"""The analysis strategy through the server: a real Jupyter server and kernel, the real OpenAI
SDK against the local OpenAI-protocol server. The turn streams its plan, the steps run in a
chain of copies (the live kernel sees none of them), Stop keeps the verified prefix, an edit
in review re-runs the later steps in the kept copies, and decisions are recorded per step."""

from __future__ import annotations

import json
import re

import pytest
from tornado.httpclient import HTTPClientError

from tests.conftest import agent_server_config
from tests.test_server import NS, on_server_loop, poll_until, post_turn, start_kernel, stream_events

pytestmark = pytest.mark.timeout(300)

PLAN = "1. Sum the column a\n2. Double the total\n3. Show both"
CODE = {1: "total = df['a'].sum()", 2: "double = total * 2", 3: "print(total, double)"}
_ASK = re.compile(r"Write step (\d+):")


def reply(request, code=CODE) -> str:
    prompt = request.prompt
    if "Plan an analysis" in prompt:
        return PLAN
    m = _ASK.search(prompt)
    number = int(m.group(1)) if m else 1
    return f"Step {number}, explained.\n```python\n{code[number]}\n```"


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=reply)


@pytest.fixture
def jp_server_config(model_server, monkeypatch, tmp_path):
    model_server.clear()
    model_server.reply = reply
    return agent_server_config(model_server, monkeypatch, {"data_dir": str(tmp_path / "data")})


async def live_names(kc) -> str:
    out = []
    msg = await kc.execute("print(sorted(k for k in ('total', 'double') if k in globals()))", reply=True)
    assert msg["content"]["status"] == "ok"
    while True:
        m = await kc.get_iopub_msg(timeout=10)
        if m["msg_type"] == "stream":
            out.append(m["content"]["text"])
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" and out:
            return "".join(out).strip()


@on_server_loop
async def test_an_analysis_streams_its_plan_and_revises_in_its_kept_copies(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                           model_server):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="analysis",
                                   intent="Total of a, doubled.")
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
        done = events[-1]
        assert done["type"] == "done", done
        steps = next(e for e in events if e["type"] == "candidate")["data"]["candidate"]["analysis"]
        assert [s["status"] for s in steps] == ["ok"] * 3
        assert steps[2]["result"]["outputs"][0]["text"].strip() == "6 12"
        assert steps[0]["explanation"] == "Step 1, explained."
        plans = [e["data"]["plan"] for e in events if e["type"] == "progress" and "plan" in e["data"]]
        assert [p["status"] for p in plans[-1]] == ["ok"] * 3 and plans[0][0]["title"] == "Sum the column a"
        assert done["data"]["result"]["strategy"] == "analysis"
        assert await live_names(kc) == "[]"

        # review: step 2 edited; step 3 runs again from step 1's copy, no model call
        calls = len(model_server.requests)
        turn_id = done["data"]["turn_id"]
        body = {"version": 1, "from_step": 2, "steps": [
            {"code": "double = total * 100", "title": "Times a hundred"}, {"code": CODE[3]}]}
        r = await jp_fetch(NS, "turns", turn_id, "analysis", method="POST", body=json.dumps(body))
        revised = json.loads(r.body)
        assert [s["number"] for s in revised["steps"]] == [2, 3]
        assert revised["steps"][1]["result"]["outputs"][0]["text"].strip() == "6 600"
        assert "ran again" in revised["message"]
        assert len(model_server.requests) == calls
        assert await live_names(kc) == "[]"

        # decisions per step: kept, dropped, edited
        for step, decision in ((1, "accepted"), (2, "edited"), (3, "rejected")):
            r = await jp_fetch(NS, "decisions", method="POST", body=json.dumps(
                {"version": 1, "turn_id": turn_id, "decision": decision, "step": step,
                 "final_code": "double = total * 100" if step == 2 else ""}))
            assert json.loads(r.body)["recorded"] is True
        store = jp_serverapp.web_app.settings["jupyter_data_agent"].decisions
        records = [r for r in store.records() if r.turn_id == turn_id]
        assert [(r.step, r.decision) for r in records] == [(1, "accepted"), (2, "edited"), (3, "rejected")]
        assert records[1].code == "double = total * 100" and records[1].candidate["result"]["status"] == "ok"

        # bad requests say what is wrong; another turn id is unknown
        with pytest.raises(HTTPClientError) as error:
            await jp_fetch(NS, "turns", turn_id, "analysis", method="POST",
                           body=json.dumps({"version": 1, "from_step": 9, "steps": []}))
        assert error.value.code == 400
        with pytest.raises(HTTPClientError) as error:
            await jp_fetch(NS, "turns", "t-unknown", "analysis", method="POST", body=json.dumps(body))
        assert error.value.code == 404

        # the kept copies close with the job: then a revision is refused in words
        jobs = jp_serverapp.web_app.settings["jupyter_data_agent"].jobs
        job = jobs.jobs[accepted["job_id"]]
        await jobs._close_tree(job)
        with pytest.raises(HTTPClientError) as error:
            await jp_fetch(NS, "turns", turn_id, "analysis", method="POST", body=json.dumps(body))
        assert error.value.code == 409 and "ask again" in error.value.response.body.decode()
    finally:
        kc.stop_channels()


@on_server_loop
async def test_stop_keeps_the_verified_steps(jp_fetch, jp_ws_fetch, jp_serverapp, model_server):
    slow = {**CODE, 2: "import time\ntime.sleep(30)\ndouble = total * 2"}
    model_server.reply = lambda request: reply(request, slow)
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="analysis", intent="Total, doubled.")
        job_id = accepted["job_id"]
        await poll_until(jp_fetch, job_id, lambda e: e["type"] == "progress"
                         and "step 2: running" in e["message"])
        r = await jp_fetch(NS, "jobs", job_id, "finish", method="POST", body="{}")
        assert r.code == 202
        events = await poll_until(jp_fetch, job_id, lambda e: e["type"] in ("done", "error"), timeout=60)
        done = events[-1]
        assert done["type"] == "done", done
        steps = next(e for e in events if e["type"] == "candidate")["data"]["candidate"]["analysis"]
        assert [(s["number"], s["status"]) for s in steps] == [(1, "ok")]
        assert done["data"]["result"]["answer"].startswith("Stopped: 1 verified step kept of 3 planned.")
        assert await live_names(kc) == "[]"
    finally:
        kc.stop_channels()
