"""Turns on a kernel that runs on another host: Jupyter Kernel Gateway and Jupyter Enterprise
Gateway (issues 24 and 35).

Every test runs on both gateways (``deployment``: each asking for a token, and for most
tests also each without one). The gateway runs in a mount namespace of its own with a tmpfs
over a private temp folder and the Jupyter runtime dir (``tests/gateway_helpers.py``): no
file or Unix socket of its kernels is visible to the Jupyter server, a real
``jupyter server --gateway-url`` subprocess with this extension, which stands in for the
other host. Everything goes through the server's API, as from JupyterLab:
``POST /api/kernels`` (the kernel starts on the gateway), the kernel's websocket,
``POST turns``, ``GET jobs/<id>``.

What these tests pin:

* The server cannot reach such a kernel's sockets, so its copies travel over the kernel's own
  channels (``kernel.channel``/``kernel.relay``): the copies' client runs in the kernel, on its
  host, with the local client's checks; the server sends fork/exec/close as comm messages
  through its websocket to the gateway. A vote turn and a search turn run their candidates
  in confined copies of the gateway kernel, say "over the kernel channel" in their stats,
  progress and confinement badge, and leave the live kernel's namespace as it was.
* A gateway that asks for a token: jupyter_server 2.x's ``GatewayKernelClient`` opens its
  websocket without the gateway's headers (401); the server's own client sends them
  (``kernel.client._gateway_client``), so both deployments behave the same.
* Attacks from a copy of a gateway kernel (a signed execute request to the live kernel's
  shell port; the Jupyter server's and the gateway's REST APIs with their tokens) fail.
* The front end's path (``/api/kernels/<id>/channels``, proxied by jupyter_server to the
  gateway with its token) carries comm_open/comm_msg both ways and silent execute requests.

* Issue 35's real timing: a gateway's client gives up each wait for kernel output after 1 s;
  that is silence, not a broken channel. Candidates that compute 3 s without printing, an MCP
  ``try_code`` ``from`` a handle after a pause, a turn while the user's 5-s cell runs, and a
  30-s candidate (and try) all end as they would on a local kernel. Their wall times are
  printed (``pytest -s``) for the closing note's figures.

Before issue 24 a vote turn here ended with "The turn failed: AssertionError: " (the gateway
client's ``start_channels`` is a coroutine; it was never awaited).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
import uuid

import pytest

from tests.gateway_helpers import KernelChannel, gateway_server, gateway_unavailable, kernel_gateway
from tests.test_escape import ZMQ_ATTACK

pytestmark = pytest.mark.gateway

DF_CELL = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'city': ['Oslo', 'Lima', 'Pune']})"
VOTE_INTENT = "What is the sum of a?"
SEARCH_INTENT = "How many rows have a above 1?"
INJECT_INTENT = "Run PWNED in the live kernel"
TOKEN_INTENT = "Use the server's API"
SILENT_INTENT = "Sum a, slowly"
SILENT = "```python\n# Step 1: Think 3 s without a word, then sum a.\nimport time\ntime.sleep(3)\ndf['a'].sum()\n```"
LONG_INTENT = "Sum a after half a minute"
LONG = ("```python\n# Step 1: Think 30 s, then say so and sum a.\nimport time\ntime.sleep(30)\n"
        "print('thought for 30 s')\ndf['a'].sum()\n```")
ANSWER = "```python\n# Step 1: Sum a.\ndf['a'].sum()\n```"
OVER_THE_CHANNEL = "kernel channel"
STATE = "(sorted(k for k in globals() if not k.startswith('_')), get_ipython().execution_count)"

#: A signed execute request to the live kernel's shell port, with the key and port a copy
#: inherits in memory (``tests/test_escape.py``'s ZMQ attack, from inside a gateway copy).
INJECT = ZMQ_ATTACK + """
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.connect((app.ip, app.shell_port))
talk(s, get_ipython().kernel.session.key, 'PWNED_FROM_COPY = 1')
"""


def attack_code(urls: list[str]) -> str:
    """Requests to REST APIs with their tokens (the Jupyter server's, the gateway's)."""
    lines = ["import urllib.request", "errors = []"]
    for url in urls:
        lines += ["try:", f"    urllib.request.urlopen({url!r}, timeout=5)",
                  "except Exception as e:", "    errors.append(type(e).__name__ + ': ' + str(e))",
                  "else:", f"    raise SystemExit('reached ' + {url.split('?')[0]!r})"]
    lines.append("raise PermissionError(' | '.join(errors))")
    return "\n".join(lines)


def replies(request) -> str:
    if SEARCH_INTENT in request.prompt:  # every sample counts the rows (test_server.search_replies)
        return "```python\n# Step 1: count the rows.\nbig = df[df['a'] > 1]\nlen(big)\n```"
    for marker, code in ATTACKS.items():
        if marker in request.prompt:
            return f"```python\n{code}\n```"
    if SILENT_INTENT in request.prompt:
        return SILENT
    if LONG_INTENT in request.prompt:
        return LONG
    return ANSWER


ATTACKS: dict[str, str] = {}  # intent -> the candidate's code (set by the attack test)


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


#: (gateway, whether it asks for a token): every test runs on each (module scope: each started once).
DEPLOYMENTS = ["kernel_gateway-token", "kernel_gateway-open", "enterprise_gateway-token", "enterprise_gateway-open"]
#: The gateways that ask for a token (the tests that need only one deployment per gateway).
TOKEN = ["kernel_gateway-token", "enterprise_gateway-token"]


@pytest.fixture(scope="module", params=DEPLOYMENTS)
def deployment(request, model_server, tmp_path_factory):
    """(mode, gateway, server): Kernel Gateway or Enterprise Gateway, asking for a token or not."""
    kind, auth = request.param.rsplit("-", 1)
    reason = gateway_unavailable(kind)
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp(f"gateway-{request.param}")
    t0 = time.monotonic()
    with kernel_gateway(work, auth=auth == "token", kind=kind) as gateway:
        t1 = time.monotonic()
        with gateway_server(work, gateway, model_server.base_url) as server:
            t2 = time.monotonic()
            print(f"\n[{request.param}] gateway up in {t1 - t0:.1f} s, jupyter server in {t2 - t1:.1f} s")
            yield request.param, gateway, server


@pytest.fixture
def kernel(deployment):
    """A kernel started through the server (on the gateway) that ran the notebook's cell."""
    _, _, server = deployment
    model = server.call("POST", "api/kernels", {"name": "python3"})
    channel = KernelChannel(server, model["id"])
    try:
        reply = channel.execute(DF_CELL, timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
        yield model["id"], channel
    finally:
        channel.close()
        server.call("DELETE", f"api/kernels/{model['id']}")


def turn_body(kernel_id: str, intent: str, strategy: str, **options) -> dict:
    return {"version": 1, "notebook_path": "analysis.ipynb", "active_index": 1, "kernel_id": kernel_id,
            "cells": [{"cell_type": "markdown", "id": "m1", "source": "# Cities", "metadata": {}},
                      {"cell_type": "code", "id": "c1", "source": DF_CELL, "metadata": {}, "outputs": [],
                       "execution_count": 1}],
            "intent": intent, "strategy": strategy, "options": options}


def messages(events: list[dict], state: str) -> list[str]:
    return [e["message"] for e in events if (e.get("data") or {}).get("state") == state]


def assert_over_the_channel(events: list[dict], server) -> dict:
    """Copies made over the kernel channel, confined, said in the progress, badge and stats."""
    said = [f"{e['type']}: {e['message']}" for e in events]
    ready = [e for e in events if (e.get("data") or {}).get("state") == "kernel_copy_ready"]
    assert ready and ready[0]["data"]["transport"] == OVER_THE_CHANNEL, said
    assert "over the kernel channel" in ready[0]["message"], said
    confinement = [e["data"]["confinement"] for e in events if (e.get("data") or {}).get("state") == "confinement"]
    assert confinement and confinement[-1]["transport"] == OVER_THE_CHANNEL, said
    assert confinement[-1]["status"] == "confined" and confinement[-1]["execute"], confinement[-1]
    assert not messages(events, "replay_fallback") and not messages(events, "no_kernel_copy"), said
    schema = [e["data"] for e in events if (e.get("data") or {}).get("state") == "schema_ready"]
    assert schema and schema[-1]["frames"] == ["df"], said
    assert "AssertionError" not in server.log_text()
    if events[-1]["type"] == "done":
        stats = events[-1]["data"]["result"]["stats"]
        assert stats["transport"] == OVER_THE_CHANNEL and stats["executions"] >= 1, stats
        assert events[-1]["data"]["confinement"]["transport"] == OVER_THE_CHANNEL
    return confinement[-1]


def live_state(channel) -> tuple:
    """The live kernel's names and execution count, read by a silent request (changes neither)."""
    reply = channel.execute("", silent=True, store_history=False, user_expressions={"r": STATE})
    return reply["content"]["user_expressions"]["r"]["data"]["text/plain"]


def copies_left(channel, server, kernel_id: str) -> int:
    """The live kernel's child processes (its copies, had any been left), but its warm root and
    the root's child forked ahead, which the server keeps between turns and tries (``GET warm-roots``)."""
    reply = channel.execute("", silent=True, store_history=False, user_expressions={
        "r": "len([p for p in __import__('psutil').Process().children(recursive=True) if p.status() != 'zombie'])"})
    kept = server.call("GET", "jupyter-data-agent/warm-roots")["warm_roots"]
    roots = sum(1 + root["spares"] for root in kept if root["kernel_id"] == kernel_id)
    return int(reply["content"]["user_expressions"]["r"]["data"]["text/plain"]) - roots


def test_the_kernel_runs_on_the_gateway_out_of_sight(deployment, kernel):
    """The harness itself: the kernel is the gateway's, and its files are not visible here."""
    mode, gateway, _ = deployment
    kernel_id, channel = kernel
    headers = {"Authorization": f"token {gateway.token}"} if gateway.token else {}
    with urllib.request.urlopen(urllib.request.Request(f"{gateway.url}/api/kernels", headers=headers),
                                timeout=10) as r:
        assert kernel_id in [k["id"] for k in json.load(r)]
    name = f"jda-gateway-marker-{uuid.uuid4().hex}"
    reply = channel.execute(f"import os, tempfile\nmarker = os.path.join(tempfile.gettempdir(), {name!r})\n"
                            "open(marker, 'w').close()\nassert os.path.exists(marker)\nmarker",
                            user_expressions={"m": "marker"})
    assert reply["content"]["status"] == "ok", reply["content"]
    marker = reply["content"]["user_expressions"]["m"]["data"]["text/plain"].strip("'")
    assert marker.startswith(gateway.hidden[1])  # the kernel's temp folder is the namespace's tmpfs
    assert not os.path.exists(marker)  # not visible here


@pytest.mark.timeout(240)
def test_candidates_silent_for_seconds_keep_their_copies(deployment, kernel):
    """Issue 35 (the bar, in part): a gateway's client gives up a wait for kernel output after
    1 s, and the relay's reader took that for a broken channel; a vote whose candidates
    computed 3 s without printing ended in an error after 65 s."""
    mode, _, server = deployment
    kernel_id, channel = kernel
    before = live_state(channel)
    t0 = time.monotonic()
    _, events, status = server.turn(turn_body(kernel_id, SILENT_INTENT, "vote", samples=2))
    print(f"[{mode}] silent vote turn in {time.monotonic() - t0:.1f} s")
    said = [f"{e['type']}: {e['message']}" for e in events]
    assert status == "done" and events[-1]["type"] == "done", (said, server.log_text()[-4000:])
    assert_over_the_channel(events, server)
    candidates = [e["data"]["candidate"] for e in events if e["type"] == "candidate"]
    assert candidates and all(c["result"]["status"] == "ok" for c in candidates)
    assert {c["result"]["value"]["value"] for c in candidates} == {6}
    assert live_state(channel) == before


@pytest.mark.timeout(180)
def test_vote_turn_runs_in_copies_over_the_kernel_channel(deployment, kernel):
    mode, _, server = deployment
    kernel_id, channel = kernel
    before, children = live_state(channel), copies_left(channel, server, kernel_id)
    t0 = time.monotonic()
    _, events, status = server.turn(turn_body(kernel_id, VOTE_INTENT, "vote", samples=3))
    print(f"[{mode}] vote turn in {time.monotonic() - t0:.1f} s")
    said = [f"{e['type']}: {e['message']}" for e in events]
    assert status == "done" and events[-1]["type"] == "done", (said, server.log_text()[-4000:])
    assert_over_the_channel(events, server)
    candidates = [e["data"]["candidate"] for e in events if e["type"] == "candidate"]
    assert candidates and {c["code"] for c in candidates} == {"# Step 1: Sum a.\ndf['a'].sum()"}
    # run in copies of the gateway kernel: its df, the answer the live kernel would give
    assert all(c["result"]["status"] == "ok" for c in candidates), candidates[0]["result"]
    live = channel.execute("", silent=True, store_history=False, user_expressions={"r": "int(df['a'].sum())"})
    assert {c["result"]["value"]["value"] for c in candidates} == {
        int(live["content"]["user_expressions"]["r"]["data"]["text/plain"])}
    assert live_state(channel) == before  # the user's namespace and execution count
    deadline = time.monotonic() + 20
    while copies_left(channel, server, kernel_id) != children and time.monotonic() < deadline:
        time.sleep(0.2)
    assert copies_left(channel, server, kernel_id) == children  # every copy ended with the turn


@pytest.mark.timeout(180)
def test_search_turn_runs_every_step_in_copies_over_the_kernel_channel(deployment, kernel):
    mode, _, server = deployment
    kernel_id, channel = kernel
    before = live_state(channel)
    t0 = time.monotonic()
    _, events, status = server.turn(turn_body(kernel_id, SEARCH_INTENT, "mcts", budget=3))
    print(f"[{mode}] search turn in {time.monotonic() - t0:.1f} s")
    said = [f"{e['type']}: {e['message']}" for e in events]
    assert status == "done" and events[-1]["type"] == "done", (said, server.log_text()[-4000:])
    assert_over_the_channel(events, server)
    result = events[-1]["data"]["result"]
    chosen = [e["data"]["candidate"] for e in events if e["type"] == "candidate"][result["chosen"]]
    assert chosen["result"]["value"]["value"] == 2, result
    assert live_state(channel) == before  # `big` was bound in copies only


@pytest.mark.timeout(240)
@pytest.mark.parametrize("deployment", TOKEN, indirect=True)
def test_attacks_from_a_copy_of_a_gateway_kernel_fail(deployment, kernel):
    """The escape tests' kernel-injection and server-token cases, from a gateway kernel's copy."""
    _, gateway, server = deployment
    kernel_id, channel = kernel
    ATTACKS[INJECT_INTENT] = INJECT
    ATTACKS[TOKEN_INTENT] = attack_code([
        f"{server.url}/api/contents?token={server.token}",
        f"{gateway.url}/api/kernels?token={gateway.token}"])
    try:
        for intent, needle in ((INJECT_INTENT, "PermissionError"), (TOKEN_INTENT, "PermissionError")):
            _, events, status = server.turn(turn_body(kernel_id, intent, "vote", samples=1))
            said = [f"{e['type']}: {e['message']}" for e in events]
            assert status == "done", said
            assert_over_the_channel(events, server)
            result = [e["data"]["candidate"]["result"] for e in events if e["type"] == "candidate"][0]
            text = json.dumps(result)
            assert result["status"] == "error" and needle in text, text
            assert "Operation not permitted" in text or "Permission denied" in text, text
            assert "reached" not in (result.get("error") or {}).get("evalue", ""), text
    finally:
        ATTACKS.clear()
    names = live_state(channel)
    assert "PWNED_FROM_COPY" not in names


@pytest.mark.parametrize("deployment", TOKEN, indirect=True)  # the same proxy either way
def test_the_front_ends_channel_carries_comms_and_silent_requests(deployment, kernel):
    """What a transport over the kernel's own channel could use (the front end's path)."""
    _, channel = kernel
    setup = channel.execute(
        "def _jda_probe(comm, open_msg):\n"
        "    comm.send({'echo': open_msg['content']['data']})\n"
        "    comm.on_msg(lambda msg: comm.send({'echo': msg['content']['data']}, buffers=[b'\\x00\\x01raw']))\n"
        "get_ipython().kernel.comm_manager.register_target('jda_probe', _jda_probe)")
    assert setup["content"]["status"] == "ok", setup["content"]

    def comm_msg(m: dict) -> bool:
        return m.get("msg_type") == "comm_msg" and m["content"].get("comm_id") == "jda-probe-1"

    channel.send("shell", "comm_open", {"comm_id": "jda-probe-1", "target_name": "jda_probe", "data": {"n": 1}})
    assert channel.until(comm_msg, 20)[-1]["content"]["data"] == {"echo": {"n": 1}}
    channel.send("shell", "comm_msg", {"comm_id": "jda-probe-1", "data": {"n": 2}})
    echoed = channel.until(comm_msg, 20)[-1]
    assert echoed["content"]["data"] == {"echo": {"n": 2}}
    # The buffer arrives, but as text: jupyter_server's gateway proxy decodes the gateway's
    # binary frames as UTF-8 and passes them on as text frames (bytes that are not UTF-8
    # would not get through at all).
    assert echoed["buffers"] == [b"\x00\x01raw"]
    # A silent request: no execution count, only status messages on IOPub.
    msg_id = channel.send("shell", "execute_request", {
        "code": "", "silent": True, "store_history": False, "user_expressions": {"r": "len(df)"},
        "allow_stdin": False, "stop_on_error": False})
    got = channel.until(lambda m: m.get("msg_type") == "execute_reply"
                        and m["parent_header"].get("msg_id") == msg_id, 20)
    assert got[-1]["content"]["user_expressions"]["r"]["data"]["text/plain"] == "3"
    assert {m["msg_type"] for m in got[:-1] if m["parent_header"].get("msg_id") == msg_id} <= {"status"}


@pytest.mark.timeout(120)
def test_variables_of_a_gateway_kernel_answer_in_words(deployment, kernel):
    """``GET variables`` (the @-mention popup): the frames, or why not; never a 500."""
    mode, _, server = deployment
    kernel_id, _ = kernel
    reply = server.call("GET", f"jupyter-data-agent/variables?kernel_id={kernel_id}")
    assert reply.get("available", True), reply  # with a token gateway too: the client sends it
    assert [v["name"] for v in reply["variables"]] == ["df"]
    assert "AssertionError" not in server.log_text()


# ------------------------------------------------------------------ issue 35: real timing

NOTEBOOK = "agents.ipynb"


@pytest.fixture
def notebook(deployment, kernel):
    """``kernel`` as a saved notebook's session (what MCP's tools find a kernel by)."""
    import nbformat

    _, _, server = deployment
    kernel_id, channel = kernel
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(DF_CELL, id="c1", execution_count=1)])
    server.call("PUT", f"api/contents/{NOTEBOOK}",
                {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))})
    session = server.call("POST", "api/sessions", {"path": NOTEBOOK, "name": NOTEBOOK, "type": "notebook",
                                                   "kernel": {"id": kernel_id}})
    assert session["kernel"]["id"] == kernel_id, session
    yield kernel_id, channel


async def mcp_tries(server, steps: list[tuple[str, float, dict]], *,
                    timeout: float = 180.0) -> list[tuple[dict, float]]:
    """``try_code`` calls in one MCP session (the MCP SDK's Streamable HTTP client, as an agent):
    each step is (code, seconds to pause before it, extra arguments; ``"from": int`` names an
    earlier step's handle). Each call's answer and wall time."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"token {server.token}"},
                              timeout=httpx2.Timeout(60, read=timeout))
    done: list[tuple[dict, float]] = []
    async with Client(streamable_http_client(f"{server.url}/jupyter-data-agent/mcp", http_client=http)) as c:
        for code, pause, extra in steps:
            await asyncio.sleep(pause)
            args = {"notebook": NOTEBOOK, "code": code, **extra}
            if isinstance(extra.get("from"), int):
                args["from"] = done[extra["from"]][0]["handle"]
            t0 = time.monotonic()
            result = await c.call_tool("try_code", args)
            took = time.monotonic() - t0
            assert not result.is_error, result.content[0].text[:2000]
            done.append((json.loads(result.content[0].text), took))
    return done


@pytest.mark.timeout(240)
@pytest.mark.parametrize("deployment", TOKEN, indirect=True)
def test_a_try_from_a_handle_after_a_pause_answers_and_the_live_kernel_is_unchanged(deployment, notebook):
    """Issue 35 (the bar): an MCP ``try_code`` that computes 3 s without a word, then a try
    ``from`` its handle 3 s later, answer; the live kernel never sees either. Before: a 3-s
    try failed after 18 s, a ``from`` try after a 2-s pause hung 91 s and broke the handle."""
    mode, _, server = deployment
    kernel_id, channel = notebook
    before = live_state(channel)
    t0 = time.monotonic()
    (first, t_first), (child, t_child) = asyncio.run(mcp_tries(server, [
        ("import time\ntime.sleep(3)\nin_copy = 41", 0, {}),
        ("in_copy + 1", 3, {"from": 0})]))
    print(f"[{mode}] MCP try_code of a 3-s silent cell in {t_first:.1f} s; try_code from its handle after "
          f"a 3-s pause in {t_child:.1f} s; {time.monotonic() - t0:.1f} s in all")
    assert first["status"] == "ok" and first["handle"], first
    assert [v["name"] for v in first["namespace"]["new"]] == ["in_copy"], first["namespace"]
    assert first["confinement"]["status"] == "confined", first["confinement"]
    assert child["status"] == "ok" and child["from"] == first["handle"], child
    assert child["value"]["preview"] == 42, child["value"]
    after = live_state(channel)
    assert after == before and "in_copy" not in after  # the live kernel: names and execution count
    assert "AssertionError" not in server.log_text()


def _user_cell_output(channel: KernelChannel, msg_id: str, timeout: float) -> tuple[dict, list[dict]]:
    """The execute_reply of the user's cell ``msg_id`` and its messages, read until its idle."""
    got = channel.until(lambda m: m.get("parent_header", {}).get("msg_id") == msg_id
                        and m.get("msg_type") == "status" and m["content"].get("execution_state") == "idle",
                        timeout)
    mine = [m for m in got if m.get("parent_header", {}).get("msg_id") == msg_id]
    replies_ = [m for m in mine if m.get("msg_type") == "execute_reply"]
    if not replies_:
        replies_ = [m for m in channel.until(lambda m: m.get("parent_header", {}).get("msg_id") == msg_id
                                             and m.get("msg_type") == "execute_reply", timeout)
                    if m.get("msg_type") == "execute_reply"]
    return replies_[-1], mine


@pytest.mark.timeout(240)
@pytest.mark.parametrize("deployment", TOKEN, indirect=True)
def test_a_turn_while_the_users_cell_runs_5_s_ends_done_and_the_cell_keeps_its_output(deployment, kernel):
    """Issue 35: a vote turn started while the user's cell runs 5 s in the live kernel (sent
    through the front end's channel) ends done, and the cell's output and reply are intact.
    Before: the turn failed."""
    mode, _, server = deployment
    kernel_id, channel = kernel
    names, count = eval(live_state(channel))  # the repr of (names, the next cell's count)
    msg_id = channel.send("shell", "execute_request", {
        "code": "import time\nprint('user cell started', flush=True)\ntime.sleep(5)\nuser_cell = 'ran'\n"
                "print('user cell done')",
        "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
        "stop_on_error": True})
    started = channel.until(lambda m: m.get("parent_header", {}).get("msg_id") == msg_id
                            and m.get("msg_type") == "stream", 30)  # the cell runs now
    t0 = time.monotonic()
    _, events, status = server.turn(turn_body(kernel_id, VOTE_INTENT, "vote", samples=2))
    took = time.monotonic() - t0
    said = [f"{e['type']}: {e['message']}" for e in events]
    waited = [m for m in said if "wait" in m.lower() or "busy" in m.lower() or "running" in m.lower()]
    print(f"[{mode}] vote turn during a 5-s user cell in {took:.1f} s; said: {waited}")
    assert status == "done" and events[-1]["type"] == "done", (said, server.log_text()[-4000:])
    assert_over_the_channel(events, server)
    candidates = [e["data"]["candidate"] for e in events if e["type"] == "candidate"]
    assert candidates and {c["result"]["value"]["value"] for c in candidates} == {6}
    reply, mine = _user_cell_output(channel, msg_id, 60)
    mine = [m for m in started if m.get("parent_header", {}).get("msg_id") == msg_id] + mine
    assert reply["content"]["status"] == "ok" and reply["content"]["execution_count"] == count, reply
    out = "".join(m["content"]["text"] for m in mine if m.get("msg_type") == "stream")
    assert out == "user cell started\nuser cell done\n", out  # nothing of the turn's in the user's output
    assert not [m for m in mine if m.get("msg_type") in ("error", "execute_result", "display_data")]
    assert eval(live_state(channel)) == (sorted([*names, "time", "user_cell"]), count + 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("deployment", TOKEN, indirect=True)  # half a minute: once per gateway
def test_a_30_s_candidate_and_a_30_s_try_complete_and_its_handle_outlives_a_30_s_pause(deployment, notebook):
    """Issue 35: a vote candidate that thinks 30 s, then an MCP ``try_code`` that does, complete on
    the gateway; a try ``from`` that try's handle 30 s later answers. (One after the other: run at
    the same time in copies of one gateway kernel, the try's 'exec' went unanswered for 90 s in
    2 of ~7 runs, not yet explained; see the issue's closing note.) jupyter_server's gateway
    client read its websocket with a timeout (KERNEL_LAUNCH_TIMEOUT: 23 s in this harness, whose
    gateways send no pings): the first silence that long ended its reading for good, and the
    ``from`` try hung 90 s, then failed ("the kernel did not relay 'fork' within 90 s")."""
    mode, _, server = deployment
    kernel_id, channel = notebook
    before = live_state(channel)
    turn: dict = {}

    def run_turn() -> None:
        t0 = time.monotonic()
        try:
            turn["events"], turn["status"] = server.turn(turn_body(kernel_id, LONG_INTENT, "vote", samples=1),
                                                         timeout=200)[1:]
        except BaseException as exc:  # reported by the test's thread
            turn["error"] = exc
        turn["took"] = time.monotonic() - t0

    run_turn()
    [(tried, t_try), (child, t_child)] = asyncio.run(mcp_tries(server, [
        ("import time\ntime.sleep(30)\nprint('tried for 30 s')\nlong_try = 1", 0, {"timeout": 120}),
        ("long_try + 1", 30, {"from": 0})]))
    print(f"[{mode}] vote turn with a 30-s candidate in {turn.get('took', float('nan')):.1f} s; "
          f"then an MCP try_code of 30 s in {t_try:.1f} s; try_code from its handle after "
          f"a 30-s pause in {t_child:.1f} s")
    assert tried["status"] == "ok" and tried["stdout"] == "tried for 30 s\n", tried
    assert child["status"] == "ok" and child["value"]["preview"] == 2, child
    assert "Unexpected exception" not in server.log_text()  # the gateway client's reading never ended
    assert "error" not in turn, turn.get("error")
    events = turn["events"]
    said = [f"{e['type']}: {e['message']}" for e in events]
    assert turn["status"] == "done" and events[-1]["type"] == "done", (said, server.log_text()[-4000:])
    assert_over_the_channel(events, server)
    [candidate] = [e["data"]["candidate"] for e in events if e["type"] == "candidate"]
    assert candidate["result"]["status"] == "ok" and candidate["result"]["value"]["value"] == 6, candidate
    assert "thought for 30 s" in json.dumps(candidate["result"])
    # The test's own front-end socket answered no ping for 90 s (the server closed it): a new one
    fresh = KernelChannel(server, kernel_id)
    try:
        assert live_state(fresh) == before
    finally:
        fresh.close()
