"""The server extension end to end: real Jupyter server, real kernels, the real
OpenAI SDK against the local OpenAI-protocol test server.

Timeouts are generous on purpose: CI machines here have two slow cores and
every turn forks a real kernel.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import time

import psutil
import pytest
from jupyter_server.auth.identity import IdentityProvider, User
from tornado.httpclient import HTTPClientError

KEY = "sk-test-server-secret-9876"
NS = "jupyter-data-agent"

STEP_REPLY = (
    "```python\n"
    "# Step 1: Keep the rows where a is above 1.\n"
    "big = df[df['a'] > 1]\n"
    "# Step 2: Count them.\n"
    "len(big)\n"
    "```"
)

DF_CELL = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'city': ['Oslo', 'Lima', 'Pune']})"


def replies(request) -> str:
    if "Echo the key please." in request.prompt:
        return "```python\n# Step 1: Fail.\nraise ValueError('nope')\n```"
    return STEP_REPLY


class TwoUsers(IdentityProvider):
    """Maps one token per user, as a multi-user deployment (JupyterHub) would."""

    tokens = {"alice-token": "alice", "bob-token": "bob"}

    def get_user(self, handler):
        name = self.tokens.get(self.get_token(handler) or "")
        if name is None:
            return None
        handler._token_authenticated = True  # token auth: no XSRF cookie, like the stock provider
        return User(username=name)


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


@pytest.fixture
def two_users():
    """Requesting this fixture runs the server with the two-user identity provider."""


@pytest.fixture
def priced():
    """Requesting this fixture runs the server with ``c.DataAgent.prices`` for its model, one more
    it offers (``c.DataAgent.models``) and one it does not."""
    return {"test-model": {"input": 0.15, "output": 0.6}, "other-model": {"input": 5, "output": 15},
            "unoffered-model": {"input": 1, "output": 1}}


@pytest.fixture
def jp_server_config(model_server, monkeypatch, request):
    from tests.conftest import agent_server_config

    model_server.clear()
    model_server.delay = 0.0
    agent = ({"prices": request.getfixturevalue("priced"), "models": ["other-model"]}
             if "priced" in request.fixturenames else {})
    config = agent_server_config(model_server, monkeypatch, {"kernel_wait_notice_s": 1.0}, **agent)
    if "two_users" in request.fixturenames:
        config["ServerApp"]["identity_provider_class"] = TwoUsers
    return config


# -- helpers -------------------------------------------------------------------------


def on_server_loop(fn):
    """Run an async test on pytest-jupyter's loop, where the server lives.

    pytest-asyncio (auto mode, for the rest of the suite) would otherwise run
    it on a loop of its own, and every request to the server would hang.
    """
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if "jp_asyncio_loop" not in sig.parameters:
        params.append(inspect.Parameter("jp_asyncio_loop", inspect.Parameter.KEYWORD_ONLY))

    def wrapper(**kwargs):
        loop = kwargs["jp_asyncio_loop"]
        return loop.run_until_complete(fn(**{k: v for k, v in kwargs.items() if k in sig.parameters}))

    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    wrapper.__module__ = fn.__module__
    wrapper.__signature__ = sig.replace(parameters=params)
    return wrapper


def notebook_cells() -> list[dict]:
    return [
        {"cell_type": "markdown", "id": "m1", "source": "# Flights analysis", "metadata": {}},
        {"cell_type": "code", "id": "c1", "source": DF_CELL, "metadata": {}, "outputs": [],
         "execution_count": 1},
    ]


def turn_body(**overrides) -> dict:
    body = {
        "version": 1,
        "notebook_path": "analysis.ipynb",
        "cells": notebook_cells(),
        "active_index": 1,
        "kernel_id": None,
        "intent": "How many rows have a above 1?",
        "strategy": "direct",
        "options": {},
    }
    body.update(overrides)
    return body


async def post_turn(jp_fetch, headers=None, **overrides) -> dict:
    r = await jp_fetch(NS, "turns", method="POST", body=json.dumps(turn_body(**overrides)),
                       headers=headers)
    assert r.code == 202
    return json.loads(r.body)


async def poll(jp_fetch, job_id, after=0, headers=None) -> dict:
    r = await jp_fetch(NS, "jobs", job_id, params={"after": after}, headers=headers)
    return json.loads(r.body)


async def poll_until(jp_fetch, job_id, predicate, timeout=120.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = await poll(jp_fetch, job_id)
        if any(predicate(e) for e in reply["events"]) or reply["status"] != "running":
            return reply["events"]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no matching event within {timeout} s")


async def stream_events(jp_ws_fetch, job_id, timeout=180.0, headers=None) -> list[dict]:
    ws = await jp_ws_fetch(NS, "jobs", job_id, "events", headers=headers)
    events = []
    try:
        while True:
            msg = await asyncio.wait_for(ws.read_message(), timeout)
            if msg is None:
                break
            events.append(json.loads(msg))
    finally:
        ws.close()
    return events


async def start_kernel(jp_fetch, jp_serverapp, code: str | None = DF_CELL):
    r = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    kernel_id = json.loads(r.body)["id"]
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=120)
    if code:
        reply = await kc.execute(code, reply=True, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
    return kernel_id, km, kc


def kernel_children(km, but=()) -> list[psutil.Process]:
    """The kernel's live descendants, but the pids in ``but`` (a kept warm root)."""
    try:
        return [p for p in psutil.Process(km.provisioner.pid).children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE and p.pid not in but]
    except psutil.NoSuchProcess:
        return []


class warm_root_pids:  # lower case: used as the set it stands for
    """The processes kept between tries, read anew at each look (a spare is forked in the
    background): the kernels' warm roots (``server.warm_roots``), the child each keeps forked
    ahead, and the children kept ahead of the handles used last (``server.fork_ahead``)."""

    def __init__(self, app) -> None:
        self.tries = app.web_app.settings["jupyter_data_agent"].tries

    def __contains__(self, pid: object) -> bool:
        warm = self.tries.warm
        roots = [w.root for w in warm.watches.values() if w.root is not None] if warm is not None else []
        aheads = [r.ahead for r in roots] + [h.ahead for h in self.tries.handles.values() if h.ahead is not None]
        return pid in {r.node.pid for r in roots} | {a.pid for a in aheads}


async def wait_no_children(km, timeout=15.0, but=()) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := kernel_children(km, but)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return left


def assert_ordered(events: list[dict], job_id: str) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    for e in events:
        assert e["version"] == 1 and e["job_id"] == job_id
        assert e["type"] in ("progress", "candidate", "log", "delta", "done", "error")


def states(events):
    return [e["data"].get("state") for e in events if e["type"] in ("progress", "log")]


def sent_candidates(events: list[dict]) -> list[dict]:
    """The candidates of a finished turn, by index: only ``candidate`` events carry them."""
    by_index = {e["data"]["index"]: e["data"]["candidate"] for e in events if e["type"] == "candidate"}
    assert sorted(by_index) == list(range(len(by_index))), sorted(by_index)
    done = events[-1]
    if done["type"] == "done":
        # ``done`` refers to them (count, chosen index) and never repeats them.
        assert done["data"]["result"]["candidates"] == len(by_index)
        assert set(done["data"]["result"]) == {"strategy", "answer", "chosen", "candidates",
                                               "support", "checks", "stats", "protections", "model"}
        assert len(done["data"]["result"]["support"]) == len(by_index)
        assert len(done["data"]["result"]["checks"]) == len(by_index)
    return [by_index[i] for i in range(len(by_index))]


def confinement_of(events: list[dict]) -> dict:
    """The turn's one confinement report; the ``done`` event repeats it."""
    reports = [e for e in events if e["type"] == "progress" and e["data"].get("state") == "confinement"]
    assert len(reports) == 1, [e["message"] for e in reports]
    report = reports[0]["data"]["confinement"]
    assert set(report) == {"policy", "status", "execute", "message", "layers", "missing", "transport"}
    assert report["message"] == reports[0]["message"]
    if events[-1]["type"] == "done":
        assert events[-1]["data"]["confinement"] == report
    return report


# -- tests ---------------------------------------------------------------------------


@on_server_loop
async def test_turn_against_real_kernel(jp_fetch, jp_ws_fetch, jp_serverapp, model_server):
    """Schema in the prompt, an executed preview, ordered events, no copy left behind."""
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id)
        job_id = accepted["job_id"]
        events = await stream_events(jp_ws_fetch, job_id)

        assert_ordered(events, job_id)
        assert events[-1]["type"] == "done", events[-1]
        assert "kernel_copy_ready" in states(events)
        report = confinement_of(events)
        assert report["status"] == "confined" and report["execute"] is True, report
        assert report["policy"] == "require" and report["missing"] == []
        assert [layer["on"] for layer in report["layers"]] == [True] * len(report["layers"])
        assert {"seccomp", "landlock_fs", "descriptors"} <= {l["name"] for l in report["layers"]}
        # The transport was probed: a kernel of this machine is copied over local sockets.
        assert report["transport"] == "local"
        assert events[-1]["data"]["result"]["stats"]["transport"] == "local"
        assert states(events).index("confinement") < states(events).index("searching")
        candidates = [e for e in events if e["type"] == "candidate"]
        assert candidates and candidates[0]["data"]["index"] == 0
        cand = candidates[0]["data"]["candidate"]
        assert "big = df[df['a'] > 1]" in cand["code"]
        assert cand["steps"][0]["explanation"] == "Keep the rows where a is above 1."
        assert cand["result"]["status"] == "ok"
        assert any("2" in json.dumps(o.get("data", {})) for o in cand["result"]["outputs"]
                   if o["output_type"] == "execute_result")

        done = events[-1]["data"]
        assert done["turn_id"] == accepted["turn_id"]
        assert done["result"]["strategy"] == "direct"
        assert done["result"]["chosen"] == 0 and done["result"]["candidates"] == 1
        assert sent_candidates(events) == [cand]

        prompt = model_server.generation_requests[-1].prompt
        assert "# Columns in df with example values:" in prompt
        assert "a (1), city (Oslo)" in prompt
        assert "How many rows have a above 1?" in prompt

        # The user's kernel is untouched and no kernel copy outlives the turn.
        reply = await kc.execute("'big' in globals()", reply=True, timeout=60,
                                 user_expressions={"x": "'big' in globals()"})
        assert reply["content"]["user_expressions"]["x"]["data"]["text/plain"] == "False"
        assert await wait_no_children(km, but=warm_root_pids(jp_serverapp)) == []

        # Polling sees the same stream; `after` skips what was already seen.
        reply = await poll(jp_fetch, job_id)
        assert reply["status"] == "done" and reply["events"] == events
        tail = await poll(jp_fetch, job_id, after=len(events) - 2)
        assert [e["seq"] for e in tail["events"]] == [len(events) - 1, len(events)]

        # A late subscriber gets the whole replay, then the socket closes.
        assert await stream_events(jp_ws_fetch, job_id) == events
    finally:
        kc.stop_channels()


@on_server_loop
async def test_waits_visibly_for_a_busy_kernel(jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        kc.execute("import time; time.sleep(6)")
        await asyncio.sleep(0.5)
        job_id = (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"]
        events = await stream_events(jp_ws_fetch, job_id)
        assert_ordered(events, job_id)
        got = states(events)
        assert "waiting_for_kernel" in got
        assert got.index("waiting_for_kernel") < got.index("kernel_ready") < got.index("kernel_copy_ready")
        assert events[-1]["type"] == "done"
        cand = [e for e in events if e["type"] == "candidate"][0]["data"]["candidate"]
        assert cand["result"]["status"] == "ok"
    finally:
        kc.stop_channels()


@on_server_loop
async def test_without_live_state_skips_the_kernel(jp_fetch, jp_ws_fetch, jp_serverapp, model_server):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        job_id = (await post_turn(jp_fetch, kernel_id=kernel_id,
                                  options={"use_live_state": False}))["job_id"]
        events = await stream_events(jp_ws_fetch, job_id)
        assert events[-1]["type"] == "done"
        assert "no_live_state" in states(events)
        report = confinement_of(events)
        assert report["status"] == "not_executed" and report["execute"] is False
        assert "live kernel state is off" in report["message"]
        assert sent_candidates(events)[0]["result"] is None
        assert "# Columns in df" not in model_server.generation_requests[-1].prompt
    finally:
        kc.stop_channels()


@on_server_loop
async def test_cancel_ends_job_and_its_kernel_copies(jp_fetch, jp_serverapp, model_server):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        model_server.delay = 10.0  # the search sits in the model call, copies alive
        job_id = (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"]
        await poll_until(jp_fetch, job_id, lambda e: e["data"].get("state") == "searching")
        assert kernel_children(km), "the root kernel copy should be running"

        r = await jp_fetch(NS, "jobs", job_id, "cancel", method="POST", body="{}")
        assert json.loads(r.body)["status"] == "cancelled"
        # The reply comes only once every copy is gone (the kernel's warm root is kept): no waiting here.
        assert kernel_children(km, but=warm_root_pids(jp_serverapp)) == []

        reply = await poll(jp_fetch, job_id)
        assert reply["status"] == "cancelled"
        last = reply["events"][-1]
        assert last["type"] == "error" and last["data"]["state"] == "cancelled"
        # Cancelling again is harmless and says the same.
        r = await jp_fetch(NS, "jobs", job_id, "cancel", method="POST", body="{}")
        assert json.loads(r.body)["status"] == "cancelled"
    finally:
        model_server.delay = 0.0
        kc.stop_channels()


@on_server_loop
async def test_stop_extension_leaves_no_kernel_copies(jp_fetch, jp_serverapp, model_server):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        model_server.delay = 10.0
        job_id = (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"]
        await poll_until(jp_fetch, job_id, lambda e: e["data"].get("state") == "searching")
        assert kernel_children(km)
        from tests.conftest import agent_extension

        app = agent_extension(jp_serverapp)
        await app.stop_extension()
        assert await wait_no_children(km) == []
        assert app.jobs.jobs[job_id].status == "cancelled"
    finally:
        model_server.delay = 0.0
        kc.stop_channels()


@on_server_loop
async def test_missing_kernel_runs_on_notebook_text(jp_fetch, jp_ws_fetch, model_server):
    job_id = (await post_turn(jp_fetch, kernel_id="no-such-kernel"))["job_id"]
    events = await stream_events(jp_ws_fetch, job_id)
    assert events[-1]["type"] == "done"
    notice = [e for e in events if e["data"].get("state") == "no_kernel"]
    assert notice and "notebook text alone" in notice[0]["message"]
    report = confinement_of(events)
    assert report["status"] == "not_executed" and "kernel is not running" in report["message"]
    assert sent_candidates(events)[0]["result"] is None  # nothing was run: no preview
    assert "df = pd.DataFrame" in model_server.generation_requests[-1].prompt


@on_server_loop
async def test_dead_kernel_runs_on_notebook_text(jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp, code=None)
    kc.stop_channels()
    # In this order: stop_restarter() does nothing once autorestart is off (jupyter_client), and
    # the restarter would bring the kernel back before a loaded machine's turn looks at it.
    km.stop_restarter()
    km.autorestart = False
    os.kill(km.provisioner.pid, signal.SIGKILL)
    for _ in range(100):
        if not await km.is_alive():
            break
        await asyncio.sleep(0.1)
    job_id = (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"]
    events = await stream_events(jp_ws_fetch, job_id)
    assert events[-1]["type"] == "done"
    assert "no_kernel" in states(events)
    assert confinement_of(events)["status"] == "not_executed"
    assert not await km.is_alive()  # it stayed dead: nothing restarted it under the turn


@on_server_loop
async def test_unauthenticated_requests_are_refused(jp_fetch, jp_ws_fetch):
    job_id = (await post_turn(jp_fetch, options={"use_live_state": False}))["job_id"]
    no_token = {"Authorization": ""}
    requests = [
        (("config",), {}),
        (("turns",), {"method": "POST", "body": json.dumps(turn_body())}),
        (("jobs", job_id), {}),
        (("jobs", job_id, "cancel"), {"method": "POST", "body": "{}"}),
    ]
    for parts, kwargs in requests:
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(NS, *parts, headers=dict(no_token), **kwargs)
        assert err.value.code in (401, 403), parts
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch(NS, "jobs", job_id, "events", headers=dict(no_token))
    assert err.value.code in (401, 403)
    # A wrong token is no better than none.
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "config", headers={"Authorization": "token wrong"})
    assert err.value.code in (401, 403)


@on_server_loop
async def test_cookie_sessions_need_same_origin_and_xsrf(jp_fetch, jp_ws_fetch, jp_http_port):
    """A browser's cookie alone (a foreign page riding it) opens no stream and starts no turn."""
    job_id = (await post_turn(jp_fetch, options={"use_live_state": False}))["job_id"]
    # The login cookie's name carries the host: ask for it as the socket will connect.
    r = await jp_fetch(NS, "config", headers={"Host": f"localhost:{jp_http_port}"})
    cookie = "; ".join(c.split(";", 1)[0] for c in r.headers.get_list("Set-Cookie"))
    assert cookie
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch(NS, "jobs", job_id, "events",
                          headers={"Authorization": "", "Cookie": cookie,
                                   "Origin": "http://evil.example"})
    assert err.value.code == 403
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "turns", method="POST", body=json.dumps(turn_body()),
                       headers={"Authorization": "", "Cookie": cookie,
                                "Host": f"localhost:{jp_http_port}"})
    assert err.value.code == 403
    assert "xsrf" in err.value.response.body.decode().lower()
    same_site = {"Authorization": "", "Cookie": cookie, "Origin": f"http://localhost:{jp_http_port}"}
    events = await stream_events(jp_ws_fetch, job_id, headers=same_site)
    assert events and events[-1]["type"] in ("done", "error")


@on_server_loop
async def test_jobs_are_private_to_their_user(two_users, jp_fetch, jp_ws_fetch):
    alice = {"Authorization": "token alice-token"}
    bob = {"Authorization": "token bob-token"}
    job_id = (await post_turn(jp_fetch, headers=alice, options={"use_live_state": False}))["job_id"]

    for kwargs in ({}, {"method": "POST", "body": "{}"}):
        parts = ("jobs", job_id) if not kwargs else ("jobs", job_id, "cancel")
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(NS, *parts, headers=dict(bob), **kwargs)
        assert err.value.code in (403, 404)
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch(NS, "jobs", job_id, "events", headers=dict(bob))
    assert err.value.code in (403, 404)

    events = await stream_events(jp_ws_fetch, job_id, headers=dict(alice))
    assert events[-1]["type"] == "done"
    reply = await poll(jp_fetch, job_id, headers=alice)
    assert reply["status"] == "done"
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "config", headers={"Authorization": "token mallory"})
    assert err.value.code in (401, 403)


@on_server_loop
async def test_one_user_cannot_fill_the_server(two_users, jp_fetch, jp_serverapp, model_server):
    """Issue 22, finding 8: one user's turns gave everyone else 429. Each user has a
    quota of their own (``max_jobs_per_user``) inside the global one."""
    jobs = jp_serverapp.web_app.settings["jupyter_data_agent"].jobs
    jobs.limits.max_jobs_per_user = 2
    model_server.delay = 5.0  # the turns stay running while the quota is tried
    alice = {"Authorization": "token alice-token"}
    bob = {"Authorization": "token bob-token"}
    body = {"options": {"use_live_state": False}}
    started = [(await post_turn(jp_fetch, headers=alice, **body))["job_id"] for _ in range(2)]
    with pytest.raises(HTTPClientError) as err:
        await post_turn(jp_fetch, headers=alice, **body)
    assert err.value.code == 429
    assert "at most 2 per user" in err.value.response.body.decode()
    mine = (await post_turn(jp_fetch, headers=bob, **body))["job_id"]  # bob is not refused
    for job_id, who in [*((j, alice) for j in started), (mine, bob)]:
        await jp_fetch(NS, "jobs", job_id, "cancel", method="POST", body="{}", headers=who)
    model_server.delay = 0.0


@on_server_loop
async def test_one_users_queued_turns_do_not_hold_up_anothers(two_users, jp_fetch, jp_serverapp, model_server):
    """Issue 34, finding E: with ``max_jobs_per_user`` (4) above ``max_concurrent_jobs`` (2), bob's
    quick turn was accepted and then waited 239.9 s behind alice's. A user now runs at most one
    less than the server's slots; the rest of their turns wait in a line of their own."""
    model_server.delay = 4.0
    alice = {"Authorization": "token alice-token"}
    bob = {"Authorization": "token bob-token"}
    body = {"options": {"use_live_state": False}}
    try:
        mine = [(await post_turn(jp_fetch, headers=alice, **body))["job_id"] for _ in range(3)]
        theirs = (await post_turn(jp_fetch, headers=bob, **body))["job_id"]

        async def states(job_id, headers):
            events = (await poll(jp_fetch, job_id, headers=headers))["events"]
            return [e["data"].get("state") for e in events if e["type"] == "progress"]

        deadline = time.monotonic() + 60
        while "searching" not in await states(theirs, bob) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert "searching" in await states(theirs, bob) and "queued" not in await states(theirs, bob)
        queued = [await states(j, alice) for j in mine]
        assert sum("searching" in s for s in queued) == 1  # alice: one running, two in her own line
        assert sum("queued" in s for s in queued) == 2
        messages = [e["message"] for j in mine for e in (await poll(jp_fetch, j, headers=alice))["events"]]
        assert "Waiting for your other turn to finish." in messages
    finally:
        model_server.delay = 0.0
        for job_id, who in [*((j, alice) for j in mine), (theirs, bob)]:
            await jp_fetch(NS, "jobs", job_id, "cancel", method="POST", body="{}", headers=who)


@on_server_loop
async def test_config_never_holds_the_key(jp_fetch):
    r = await jp_fetch(NS, "config")
    text = r.body.decode()
    assert KEY not in text
    body = json.loads(text)
    assert body["api_key_set"] is True
    assert body["backend"] == "openai" and body["model"] == "test-model"
    assert {"direct", "vote", "react", "mcts"} <= set(body["capabilities"]["strategies"])
    assert "api_key" not in body
    # The one catalog the sidebar's chooser is built from, in order, labels included.
    from jupyter_data_agent.search.options import STRATEGIES

    assert [s["name"] for s in body["strategies"]] == list(STRATEGIES)
    labels = {s["name"]: s["label"] for s in body["strategies"]}
    assert labels["react"] == "Agent" and "explain" in labels
    assert all(s["summary"] for s in body["strategies"])
    # The sidebar's knobs show the server's defaults (one place: search/options.py).
    knobs = {s["name"]: (s["samples"], s["budget"]) for s in body["strategies"]}
    assert knobs == {"direct": (None, None), "vote": (5, None), "react": (None, 10),
                     "mcts": (3, 40), "analysis": (1, 6), "explain": (None, None)}


@on_server_loop
async def test_config_has_no_price_by_default(jp_fetch):
    body = json.loads((await jp_fetch(NS, "config")).body)
    # No c.DataAgent.prices: the sidebar shows no cost (a local model costs nothing per token).
    assert body["price"] is None


@on_server_loop
async def test_config_carries_the_configured_models_price(jp_fetch, priced):
    body = json.loads((await jp_fetch(NS, "config")).body)
    assert body["model"] == "test-model"
    assert body["price"] == {"input": 0.15, "output": 0.6}
    # N5: each offered model's price, so a model picked in the sidebar shows its cost; a model
    # the server does not offer is not named.
    assert body["models"] == ["test-model", "other-model"]
    assert body["prices"] == {"test-model": {"input": 0.15, "output": 0.6},
                              "other-model": {"input": 5, "output": 15}}


@on_server_loop
async def test_model_errors_are_clear_and_secret_free(jp_fetch, jp_ws_fetch, model_server, caplog):
    caplog.set_level("DEBUG")
    model_server.fail_next(400, times=5, message=f"Bad request for key {KEY}")
    job_id = (await post_turn(jp_fetch, options={"use_live_state": False}))["job_id"]
    events = await stream_events(jp_ws_fetch, job_id)
    assert events[-1]["type"] == "error"
    assert events[-1]["data"]["state"] == "error"
    assert events[-1]["message"]
    assert KEY not in json.dumps(events)
    assert KEY not in caplog.text
    reply = await poll(jp_fetch, job_id)
    assert reply["status"] == "error"


@on_server_loop
async def test_invalid_requests_get_400(jp_fetch):
    bad = [
        turn_body(version=2),
        turn_body(intent="   "),
        turn_body(strategy="telepathy"),
        turn_body(active_index=7),
        turn_body(options={"samples": 0}),
        turn_body(options={"typo": 1}),
        turn_body(cells=[{"cell_type": "widget", "source": ""}]),
        turn_body(notebook_path="analysis\x00.ipynb"),
        turn_body(notebook_path="dir/\nanalysis.ipynb"),
        {"version": 1},
    ]
    for body in bad:
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(NS, "turns", method="POST", body=json.dumps(body))
        assert err.value.code == 400, body
        message = json.loads(err.value.response.body)["message"]
        assert message and "Traceback" not in message
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "turns", method="POST", body=json.dumps(turn_body(notebook_path="a\x00b")))
    message = json.loads(err.value.response.body)["message"]
    assert "notebook_path" in message and "control character (U+0000)" in message
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "turns", method="POST", body="{not json")
    assert err.value.code == 400
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "jobs", "0123456789abcdef")
    assert err.value.code == 404


@on_server_loop
async def test_an_intent_too_long_is_refused_in_words(jp_fetch):
    from jupyter_data_agent.server.models import MAX_INTENT_CHARS, TurnRequestModel

    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(NS, "turns", method="POST", body=json.dumps(turn_body(intent="x" * (MAX_INTENT_CHARS + 5))))
    assert err.value.code == 400
    message = json.loads(err.value.response.body)["message"]
    # A sentence for the sidebar, not a validation dump.
    assert message == ("The question is 20,005 characters long; the server takes at most 20,000. "
                       "Shorten it, or put the long text in a cell and ask about that cell.")
    # The limit itself is still accepted.
    assert len(TurnRequestModel.model_validate(turn_body(intent="x" * MAX_INTENT_CHARS)).intent) == MAX_INTENT_CHARS


@on_server_loop
async def test_strategy_defaults_fill_missing_options(jp_fetch, jp_ws_fetch, model_server):
    """``vote`` without ``samples`` asks for the configured default number of samples."""
    job_id = (await post_turn(jp_fetch, strategy="vote", options={"use_live_state": False}))["job_id"]
    events = await stream_events(jp_ws_fetch, job_id)
    assert events[-1]["type"] == "done", events[-1]
    first = model_server.generation_requests[0]
    assert first.n == 5
    assert first.body.get("temperature") == pytest.approx(0.7)
    result = events[-1]["data"]["result"]
    assert result["strategy"] == "vote" and result["candidates"] == 5
    assert [e["data"]["index"] for e in events if e["type"] == "candidate"] == [0, 1, 2, 3, 4]
    assert len(sent_candidates(events)) == 5


def explain_replies(request) -> str:
    if "Explain this cell" in request.prompt:
        return "This cell builds **df**:\n\n- `a`: a number\n- `city`: where"
    return STEP_REPLY


@on_server_loop
async def test_explain_answers_in_words_and_sends_no_candidate(jp_fetch, jp_ws_fetch,
                                                              model_server):
    """Explain this cell: ``done`` holds the Markdown answer; no candidate event, none chosen."""
    model_server.reply = explain_replies
    try:
        accepted = await post_turn(jp_fetch, strategy="explain", intent="Explain this cell",
                                   options={"use_live_state": False})
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
    finally:
        model_server.reply = replies
    assert_ordered(events, accepted["job_id"])
    assert events[-1]["type"] == "done", events[-1]
    assert sent_candidates(events) == []
    result = events[-1]["data"]["result"]
    assert result == {**result, "strategy": "explain", "chosen": None, "candidates": 0}
    assert result["answer"].startswith("This cell builds **df**")
    assert "df = pd.DataFrame" in model_server.generation_requests[-1].prompt


def search_replies(request) -> str:
    """A model that counts the rows in one step: every one of Search's samples agrees."""
    return "```python\n# Step 1: count the rows.\nbig = df[df['a'] > 1]\nlen(big)\n```"


@on_server_loop
async def test_search_strategy_streams_live_statistics(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                       model_server):
    """The chat panel's Search (mcts): progress with its answers and votes, then the solution."""
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    model_server.reply = search_replies
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="mcts",
                                   options={"budget": 5})
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
        assert_ordered(events, accepted["job_id"])
        assert events[-1]["type"] == "done", events[-1]
        stats = [e["data"] for e in events if e["type"] == "progress" and "iterations" in e["data"]]
        assert stats, [e["message"] for e in events]
        # Budget 5 x 3 completions, a vote share of 5: 3 agree, 3 more agree, and the vote is decided.
        assert stats[-1]["answers"] == [{"answer": "2", "votes": 6}]
        result = events[-1]["data"]["result"]
        assert result["strategy"] == "mcts" and result["stats"]["unspent"] == 9
        chosen = sent_candidates(events)[result["chosen"]]
        assert chosen["code"] == "# Step 1: count the rows.\nbig = df[df['a'] > 1]\nlen(big)"
        assert chosen["result"]["value"]["value"] == 2
        assert result["stats"]["iterations"] >= 1
        # Guided by the shipped evidence estimator; the candidate carries its checks to the browser.
        assert result["stats"]["estimator"] == "evidence (default)"
        checks = {c["name"]: c for c in chosen["checks"]}
        assert list(checks) == ["rows", "nan", "dtype", "empty", "index", "range", "type", "plausible", "agree"]
        assert checks["agree"] == {"name": "agree", "passed": True, "detail": "6 of 6 answers agree"}
        assert checks["empty"]["passed"] and checks["rows"]["passed"]
        assert await wait_no_children(km, but=warm_root_pids(jp_serverapp)) == []
    finally:
        model_server.reply = replies
        kc.stop_channels()


def cleaning_replies(request) -> str:
    """A cell that adds a frame and narrows ``df``: what accepting it would change."""
    return ("```python\n# Step 1: Keep the rows above 1 and write them out.\n"
            "clean = df[df['a'] > 1]\ndf = df[df['a'] > 2]\nclean.to_csv('out.csv')\nlen(clean)\n```")


@on_server_loop
async def test_a_turns_candidate_carries_its_namespace_diff_kept_with_the_turn(jp_fetch, jp_ws_fetch,
                                                                               jp_serverapp, model_server):
    """Issue 40 item 6: the candidate event says what accepting changes (from its fork of the
    kernel); the turn the server keeps says it again after a reload; the kernel is untouched."""
    from jupyter_data_agent.turn.report import TurnReport

    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    model_server.reply = cleaning_replies
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="direct")
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
        assert events[-1]["type"] == "done", events[-1]
        [candidate] = sent_candidates(events)
        diff = candidate["namespace"]
        assert diff["new"] == [{"name": "clean", "type": "pandas.DataFrame", "shape": [2, 2], "before": None}]
        assert diff["changed"] == [{"name": "df", "type": "pandas.DataFrame", "shape": [1, 2], "before": [3, 2]}]
        assert diff["files"] == ["out.csv"] and diff["note"] == "" and not diff["deleted"]
        # A reload reads the turn back from the server: the same diff, in its events and its record.
        kept = await poll(jp_fetch, accepted["job_id"])
        assert TurnReport.of(kept["events"]).candidates[0]["namespace"] == diff
        jobs = jp_serverapp.web_app.settings["jupyter_data_agent"].jobs
        outcome = jobs.find_turn(events[-1]["data"]["turn_id"], jobs.jobs[accepted["job_id"]].owner)
        assert outcome.candidates[0]["namespace"] == diff
        # Before Accept nothing of it is in the user's kernel.
        reply = await kc.execute("assert len(df) == 3 and 'clean' not in dir()", reply=True, timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        model_server.reply = replies
        kc.stop_channels()


# -- the wire contract (no server needed) -------------------------------------------


def test_committed_wire_schema_is_current():
    """src/wire.schema.json (what src/wire.ts is generated from) is what pydantic says now."""
    from pathlib import Path

    from jupyter_data_agent.server.models import wire_schema_text

    committed = Path(__file__).resolve().parents[1] / "src" / "wire.schema.json"
    assert committed.read_text(encoding="utf-8") == wire_schema_text(), (
        "the wire models changed: run `jlpm build:schema` (python -m "
        "jupyter_data_agent.server.models --schema -o src/wire.schema.json) and commit both files")


def make_job(**overrides):
    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.llm.scrub import Scrubber
    from jupyter_data_agent.server.job import Job
    from jupyter_data_agent.server.models import TurnRequestModel
    from jupyter_data_agent.turn import TurnAsk, resolve

    request = TurnRequestModel.model_validate(turn_body(**overrides))
    spec = resolve(Settings(backend="openai"), TurnAsk(intent=request.intent, strategy=request.strategy))
    return Job("owner", request, spec, None, Scrubber([KEY]))


def exec_ok():
    from jupyter_data_agent.kernel.results import ExecResult, OutputItem

    return ExecResult(status="ok", outputs=[OutputItem("stream", name="stdout", text="2\n")],
                      duration_s=0.1)


def verdict():
    from jupyter_data_agent.kernel.host.policy import decide

    return decide(None, "require", unavailable="no kernel copy in this test")


def test_done_refers_to_the_candidates_already_sent():
    from jupyter_data_agent.search import Candidate, Event, SearchResult

    job = make_job(strategy="vote")
    first, second, fixed = Candidate("len(df)", result=exec_ok()), Candidate("df.shape[0]"), \
        Candidate("len(df.index)", repaired=True)
    job.progress("Preparing the model.", state="loading_model", backend="openai")
    job.strategy_event(Event("progress", "asking the model for 2 candidates", {"samples": 2}))
    job.strategy_event(Event("candidate", "candidate 2 ran", {"index": 1, "candidate": second}))
    job.strategy_event(Event("candidate", "again", {"index": 1, "candidate": second}))  # once only
    job.strategy_event(Event("log", "1 answer(s) held no code and were dropped"))
    result = SearchResult(chosen=fixed, candidates=[first, second, fixed], strategy="vote")
    job.complete(result, verdict())

    assert job.status == "done"
    assert [e["seq"] for e in job.events] == list(range(1, len(job.events) + 1))
    assert [e["type"] for e in job.events] == ["progress", "progress", "candidate", "log",
                                              "candidate", "candidate", "done"]
    # Progress data holds only what the event set.
    assert job.events[0]["data"] == {"state": "loading_model", "backend": "openai"}
    assert job.events[1]["data"] == {"samples": 2}
    assert sent_candidates(job.events) == [first.to_json(), second.to_json(), fixed.to_json()]
    assert sent_candidates(job.events)[0]["result"]["outputs"][0]["text"] == "2\n"
    done = job.events[-1]["data"]
    assert done["result"]["chosen"] == 2 and done["result"]["candidates"] == 3
    assert done["result"]["strategy"] == "vote" and done["result"]["answer"] is None
    assert done["turn_id"] == job.turn_id
    assert done["confinement"]["status"] == "not_executed"
    # Nothing after the end.
    assert job.emit("progress", "late") is None and job.events[-1]["type"] == "done"


def test_done_carries_the_support_the_vote_gave_after_the_candidates_went_out():
    """N1: a candidate event goes out as it runs (support 1); the vote counts it with its
    repaired twin afterwards, and ``done`` says each one's final support by index."""
    from jupyter_data_agent.search import Candidate, Event, SearchResult
    from jupyter_data_agent.search.vote import vote

    job = make_job(strategy="vote")
    first = Candidate("print(3)", result=exec_ok())
    second = Candidate("1/0")
    twin = Candidate("print(2)", result=exec_ok(), repaired=True)
    for i, c in enumerate([first, second]):
        job.strategy_event(Event("candidate", f"candidate {i + 1} ran", {"index": i, "candidate": c}))
    candidates = [first, second, twin]
    chosen = vote(candidates)
    job.complete(SearchResult(chosen=chosen, candidates=candidates, strategy="vote"), verdict())
    sent = sent_candidates(job.events)
    assert [c["support"] for c in sent] == [1, 1, 2]  # the first went out before the vote
    result = job.events[-1]["data"]["result"]
    assert result["support"] == [2, 1, 2] and result["chosen"] == 0


def test_an_answer_without_candidates_is_done_with_none_chosen():
    """Explain: prose in ``answer``, no candidate, nothing chosen."""
    from jupyter_data_agent.search import SearchResult

    job = make_job(strategy="explain", intent="Explain this cell")
    job.complete(SearchResult(chosen=None, candidates=[], answer="It **counts** the rows.",
                              strategy="explain"), verdict())
    assert [e["type"] for e in job.events] == ["done"]
    result = job.events[-1]["data"]["result"]
    assert result["candidates"] == 0 and result["chosen"] is None
    assert result["answer"] == "It **counts** the rows." and result["strategy"] == "explain"


@pytest.mark.parametrize("type_, data, where", [
    ("progress", {"state": "thinking"}, "data.state"),  # a state the contract does not name
    ("progress", {"stage": "queued"}, "data.stage"),  # an unknown field
    ("error", {}, "data.state"),  # error needs error | cancelled
    ("candidate", {"index": 0, "candidate": {"code": "x"}}, "data.candidate"),
    ("done", {"result": {}, "turn_id": "t"}, "data"),
    ("telepathy", {}, "telepathy"),
])
def test_a_malformed_event_is_never_sent(type_, data, where):
    from jupyter_data_agent.turn.events import MalformedEvent

    job = make_job()
    seen = []
    job.listeners.append(seen.append)
    job.progress("Waiting for another turn to finish.", state="queued")
    with pytest.raises(MalformedEvent, match=where):
        job.emit(type_, f"a bad event with {KEY}", data)
    # The turn ends with an error that says so; the bad event went nowhere.
    assert job.status == "error" and job.cancel_event.is_set()
    assert [e["type"] for e in job.events] == ["progress", "error"] == [e["type"] for e in seen]
    assert job.events[-1]["data"] == {"state": "error"}
    assert "bug" in job.events[-1]["message"] and KEY not in json.dumps(job.events)


def test_events_are_scrubbed_before_they_are_checked_and_sent():
    from jupyter_data_agent.search import Candidate, SearchResult

    job = make_job()
    leaky = Candidate(f"key = '{KEY}'", meta={"prompt": f"Authorization: Bearer {KEY}"})
    job.complete(SearchResult(chosen=leaky, candidates=[leaky], strategy="direct"), verdict())
    assert job.status == "done" and KEY not in json.dumps(job.events)


def test_poll_reply_validates_and_keeps_the_events_as_sent():
    from jupyter_data_agent.server.models import JobPoll

    job = make_job()
    job.progress("Read 1 DataFrame schema(s) from the kernel.", state="schema_ready", frames=["df"])
    job.finish("cancelled", "error", "The turn was cancelled.", {"state": "cancelled"})
    reply = json.loads(JobPoll(job_id=job.id, status=job.status, events=job.events).model_dump_json())
    assert reply == {"version": 1, "job_id": job.id, "status": "cancelled", "events": job.events}
