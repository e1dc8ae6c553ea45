"""Turns through the kernel's warm root (issue 37): their copies are a child of the root.

A real Jupyter server and kernel, the real OpenAI SDK against the local
OpenAI-protocol server (as ``test_server_turns``): a sidebar turn's copies
fork from the kernel's warm root (process parentage), a later turn reuses it
while it is current; a turn asked while the user's 20-s cell runs starts at
once from the state before the cell, reads the DataFrame schemas from a child
of the root, says the state's age in its events, and the cell runs undisturbed;
the same turn asked with ``fresh_state`` (the sidebar's "Wait for the cell and
run again") waits for the cell and runs on the state after it.
"""

from __future__ import annotations

import asyncio
import json
import time

import psutil
import pytest

from jupyter_data_agent.server import warm_turns
from tests.conftest import agent_server_config
from tests.test_server import on_server_loop, post_turn, replies, start_kernel, stream_events


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    model_server.clear()
    model_server.reply = replies
    return agent_server_config(model_server, monkeypatch)


def states(events: list[dict]) -> list[str]:
    return [e["data"].get("state") for e in events if e["type"] in ("progress", "log")]


def warm_of(app):
    return app.web_app.settings["jupyter_data_agent"].tries.warm


async def until(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def a_root_then_a_20_s_cell(jp_fetch, jp_ws_fetch, app, kernel_id: str, kc, df_after: str):
    """A turn (the kernel's warm root is made, then current), then a user's 20-s cell that sets
    ``df = <df_after>`` and ``y = 5``, running now: (the kernel's watch, the cell's msg_id)."""
    events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"])
    assert events[-1]["type"] == "done", events[-1]
    w = warm_of(app).watches[kernel_id]
    await until(lambda: w.root is not None and w.root.generation == w.generation and not w.running, what="root")
    msg_id = kc.execute(f"import time\ntime.sleep(20)\ndf = {df_after}\ny = 5")
    await until(lambda: w.running, what="the user's cell running")
    return w, msg_id


async def shell_reply(kc, msg_id: str, timeout: float) -> dict:
    """The user's cell's execute_reply (other replies on the shell channel skipped)."""
    reply = await kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = await kc.get_shell_msg(timeout=timeout)
    return reply


@pytest.fixture
def copies_made(monkeypatch) -> list[dict]:
    """Each turn's copies made from a warm root: the root's and the copy's processes, at once."""
    made: list[dict] = []
    real = warm_turns.WarmChildTree.__init__

    def record(self, base, top, release):
        real(self, base, top, release)
        made.append({"top": top.pid, "parent": psutil.Process(top.pid).ppid(), "root": base.root.pid})

    monkeypatch.setattr(warm_turns.WarmChildTree, "__init__", record)
    return made


@on_server_loop
async def test_a_sidebar_turns_copies_are_a_child_of_the_warm_root(jp_fetch, jp_ws_fetch, jp_serverapp, copies_made):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"])
        assert events[-1]["type"] == "done", events[-1]
        cand = [e for e in events if e["type"] == "candidate"][0]["data"]["candidate"]
        assert cand["result"]["status"] == "ok"
        assert "state_age" not in states(events)  # the kernel was idle: its state now
        root = warm_of(jp_serverapp).watches[kernel_id].root
        assert root is not None and len(copies_made) == 1
        assert copies_made[0]["parent"] == copies_made[0]["root"] == root.node.pid  # a child of the warm root
        assert psutil.Process(root.node.pid).ppid() == km.provisioner.pid  # the root: a fork of the kernel
        # the next turn, no cell ran since: the same root, no new fork of the live kernel
        events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"])
        assert events[-1]["type"] == "done", events[-1]
        assert warm_of(jp_serverapp).watches[kernel_id].root is root and len(copies_made) == 2
        assert copies_made[1]["parent"] == root.node.pid and copies_made[1]["top"] != copies_made[0]["top"]
        assert not psutil.pid_exists(copies_made[0]["top"]) or _zombie(copies_made[0]["top"])  # the turn's copy ended
        # the server reports the root: its own memory, age and generation
        await until(lambda: root.leases == 0, what="the turns' copies released the root")
        r = await jp_fetch("jupyter-data-agent", "warm-roots")
        body = json.loads(r.body)
        assert body["enabled"] and body["idle_s"] > 0
        (stats,) = [s for s in body["warm_roots"] if s["kernel_id"] == kernel_id]
        assert stats["generation"] == root.generation == stats["live_generation"] and stats["current"]
        assert stats["unique_bytes"] > 0 and 0 <= stats["age_s"] < 120 and stats["leases"] == 0
    finally:
        kc.stop_channels()


@on_server_loop
async def test_a_turn_during_a_20_s_cell_starts_at_once_and_says_the_states_age(
    jp_fetch, jp_ws_fetch, jp_serverapp, copies_made
):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        w, msg_id = await a_root_then_a_20_s_cell(jp_fetch, jp_ws_fetch, jp_serverapp, kernel_id, kc, "df.head(1)")
        root = w.root
        t0 = time.monotonic()
        events = await stream_events(jp_ws_fetch, (await post_turn(jp_fetch, kernel_id=kernel_id))["job_id"])
        took = time.monotonic() - t0
        assert events[-1]["type"] == "done", events[-1]
        assert took < 12.0, took
        got = states(events)
        assert "waiting_for_kernel" not in got, got
        aged = [e for e in events if e["data"].get("state") == "state_age"]
        assert aged, got
        age = aged[0]["data"]["state_age"]
        assert age["running"] and age["executions_since"] == 1 and "a cell is running now" in age["note"]
        assert "before the running cell" in aged[0]["message"]
        assert got.index("state_age") < got.index("schema_ready") < got.index("kernel_copy_ready")
        schema = [e for e in events if e["data"].get("state") == "schema_ready"][0]
        assert schema["data"]["frames"] == ["df"]  # read from a child of the root: the state before the cell
        cand = [e for e in events if e["type"] == "candidate"][0]["data"]["candidate"]
        assert cand["result"]["status"] == "ok" and "2" in str(cand["result"])  # 3 rows then: 2 above 1
        assert copies_made[-1]["parent"] == root.node.pid
        assert w.running  # the cell still runs
        # the user's cell ran to its end, undisturbed, in the live kernel
        reply = await shell_reply(kc, msg_id, 30)
        assert reply["content"]["status"] == "ok"
        assert time.monotonic() - t0 > 12
        check = await kc.execute("assert y == 5 and len(df) == 1", reply=True, timeout=30)
        assert check["content"]["status"] == "ok"
    finally:
        kc.stop_channels()


@on_server_loop
async def test_the_same_turn_with_fresh_state_waits_for_the_cell(jp_fetch, jp_ws_fetch, jp_serverapp, copies_made):
    """``options.fresh_state`` (the sidebar's "Wait for the cell and run again"): no state before the
    cell; the turn waits for it (saying so), reads the live kernel after it, and forks a root made then."""
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        w, msg_id = await a_root_then_a_20_s_cell(jp_fetch, jp_ws_fetch, jp_serverapp, kernel_id, kc, "df.head(2)")
        old_root, old_pid = w.root, w.root.node.pid
        t0 = time.monotonic()
        job_id = (await post_turn(jp_fetch, kernel_id=kernel_id, options={"fresh_state": True}))["job_id"]
        cell_ended: list[float] = []

        async def cell_reply() -> None:  # the user's cell, read as it ends (the turn goes on meanwhile)
            reply = await shell_reply(kc, msg_id, 60)
            cell_ended.append(time.monotonic())
            assert reply["content"]["status"] == "ok", reply["content"]

        waiting = asyncio.ensure_future(cell_reply())
        timed = await timed_events(jp_ws_fetch, job_id)
        await asyncio.wait_for(waiting, 60)
        events = [e for _, e in timed]
        assert events[-1]["type"] == "done", events[-1]
        got = states(events)
        assert "state_age" not in got, got  # never the state before the cell
        assert "waiting_for_kernel" in got and got.index("waiting_for_kernel") < got.index("schema_ready"), got
        assert got.index("schema_ready") < got.index("kernel_copy_ready"), got
        schema = [e for e in events if e["data"].get("state") == "schema_ready"][0]
        assert schema["data"]["frames"] == ["df"]
        first = [(at, e) for at, e in timed if e["type"] == "candidate"][0]
        assert cell_ended and first[0] > cell_ended[0] and first[0] - t0 > 12  # it came after the cell ended
        cand = first[1]["data"]["candidate"]
        # run on the state after the cell: df.head(2) has one row with a above 1 (before it: 2)
        assert cand["result"]["status"] == "ok" and cand["result"]["value"]["value"] == 1, cand["result"]
        # its copy: a child of a root made after the cell, not of the root from before it
        root = w.root
        assert root is not None and root is not old_root and root.generation == w.generation
        assert copies_made[-1]["parent"] == root.node.pid != old_pid
        # the user's cell ran undisturbed, in the live kernel
        check = await kc.execute("assert y == 5 and len(df) == 2", reply=True, timeout=30)
        assert check["content"]["status"] == "ok"
    finally:
        kc.stop_channels()


async def timed_events(jp_ws_fetch, job_id: str, timeout: float = 180.0) -> list[tuple[float, dict]]:
    """A job's events as ``stream_events`` reads them, each with when it came (monotonic)."""
    ws = await jp_ws_fetch("jupyter-data-agent", "jobs", job_id, "events")
    out: list[tuple[float, dict]] = []
    try:
        while (msg := await asyncio.wait_for(ws.read_message(), timeout)) is not None:
            out.append((time.monotonic(), json.loads(msg)))
    finally:
        ws.close()
    return out


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
