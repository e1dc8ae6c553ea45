"""Two users under a real JupyterHub: nothing of one reaches the other (issue 24, "Multi-user").

``tests/hub_helpers.py`` starts JupyterHub 6 with the real configurable-http-proxy and the
LocalProcessSpawner, two real Unix users (``jda-alice-<tag>``, ``jda-bob-<tag>``; homes open
to others, Debian's default), and each user's ``jupyterhub-singleuser`` server with this extension. The
one thing they share is the model endpoint the admin configured (``c.DataAgent.*`` in a
config folder on both servers' ``JUPYTER_CONFIG_PATH``): the tests' OpenAI-protocol server,
which demands the shared key. Everything goes through the Hub's proxy with each user's own
API token, as from JupyterLab.

What holds, each checked by a real attempt:

* Both users run vote turns at the same time; every candidate runs in a confined fork copy
  of its own user's kernel (as that user, on that user's DataFrame), through that user's
  model service, and both servers ask the one shared endpoint.
* Each server keeps its own decisions store, value models, model service socket, kernel
  copies and scratch folders, owned by its user and closed to others (0700 folders, 0600
  files), and resolves its own newest value model.
* With her own token, alice gets 403 from every route of bob's server (his job, its cancel
  and events, config, decisions, value model, variables, kernels) and 404 for his job id on
  her own server; bob's turn goes on untouched.
* From alice's live kernel (her own code, unconfined) and from a candidate in a copy of it,
  reading bob's decisions store, value models, Jupyter runtime dir and kernel connection
  file, connecting to his model service, reading his server's environment, entering or
  writing his copies' scratch folder, and signalling his kernel, server and copies
  (SIGKILL, while they run) all fail; the same attempts on alice's own files succeed from
  her live kernel (so the attack code works), and a copy has no Hub API token.
* When alice shares her server with bob (JupyterHub's sharing), he reaches it, but neither
  sees, cancels nor follows the other's turn there (404: turns belong to the Hub's user).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import sqlite3
import stat
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.hub_helpers import (
    NS,
    Hub,
    HubUnavailable,
    hub_unavailable,
    jupyterhub_deployment,
    kernel_channel,
    user_names,
)

pytestmark = [pytest.mark.hub, pytest.mark.timeout(300)]

ALICE, BOB = user_names()  # jda-alice-<tag>, jda-bob-<tag>: this run's own
API_KEY = "sk-hub-shared-endpoint-4f1c9e"
FRAMES = {ALICE: [1, 2, 3], BOB: [10, 20, 30]}  # each user's own data: the copies must see their user's

SUM_INTENT = "Whose kernel is this, and what is the sum of a?"
HOLD_INTENT = "Keep this copy busy until released, then sum a."
ATTACK_INTENT = "Reach for the other user's agent files and processes."

SUM_CODE = ("# Step 1: Say who runs this copy, then sum a.\n"
            "import os, pwd\n"
            "print('IDENTITY', pwd.getpwuid(os.getuid()).pw_name, os.getpid())\n"
            "print('SUM', int(df['a'].sum()))\n")

ATTEMPTS = '''
import json, os, signal, socket
seen = {}
def attempt(name, fn):
    try:
        seen[name] = "ok " + repr(fn())[:120]
    except Exception as e:
        seen[name] = type(e).__name__ + ": " + str(e)[:200]
def read(path):
    with open(path, "rb") as f:
        return f.read(16)
def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return "connected"
    finally:
        s.close()
def write(path):
    with open(path, "w") as f:
        f.write("written by another user")
steps = {
    "read the decisions store": lambda: read(T["decisions"]),
    "list the agent's data folder": lambda: os.listdir(T["agent_dir"]),
    "list the value models": lambda: os.listdir(T["value_models"]),
    "read a trained value model": lambda: read(T["value_model"]),
    "list the Jupyter runtime dir": lambda: os.listdir(T["runtime_dir"]),
    "read the kernel's connection file": lambda: read(T["connection_file"]),
    "connect to the model service": lambda: connect(T["model_socket"]),
    "list the model service's folder": lambda: os.listdir(os.path.dirname(T["model_socket"])),
    "read the server's environment": lambda: read("/proc/%d/environ" % T["server_pid"]),
    "signal the server": lambda: os.kill(T["server_pid"], 0),
    "signal the kernel": lambda: os.kill(T["kernel_pid"], 0),
}
for i, path in enumerate(T.get("scratch", [])):
    steps["list a copy's scratch folder %d" % i] = lambda path=path: os.listdir(path)
    steps["write into a copy's scratch folder %d" % i] = lambda path=path: write(os.path.join(path, "x.txt"))
for pid in T.get("copy_pids", []):
    steps["SIGKILL copy %d" % pid] = lambda pid=pid: os.kill(pid, signal.SIGKILL)
for name, fn in steps.items():
    attempt(name, fn)
print("ATTEMPTS " + json.dumps(seen))
print("ENV " + json.dumps({"uid": os.getuid(), "tokens": sorted(k for k in os.environ if "TOKEN" in k)}))
'''

FIXED_ATTEMPTS = ATTEMPTS.count('": lambda: ')  # the steps every target set has (scratch and copies vary)


def attack_code(targets: dict) -> str:
    return ("# Step 1: Try every door to the other user's files and processes.\n"
            f"T = {json.dumps(targets)!r}\nimport json as _json\nT = _json.loads(T)\n" + ATTEMPTS)


def hold_code(release: str) -> str:
    return ("# Step 1: Stay alive (so the other user can try to reach this copy) until released.\n"
            "import os, pwd, time\n"
            "print('IDENTITY', pwd.getpwuid(os.getuid()).pw_name, os.getpid())\n"
            "open('holding', 'w').close()\n"
            "deadline = time.monotonic() + 50\n"
            f"while not os.path.exists({release!r}) and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            f"print('RELEASED', os.path.exists({release!r}))\n"
            "print('SUM', int(df['a'].sum()))\n")


class Script:
    """What the shared endpoint answers: set by the tests before each turn."""

    release = ""
    targets: dict = {}


def replies(request) -> str:
    prompt = request.prompt
    if ATTACK_INTENT in prompt:
        code = attack_code(Script.targets)
    elif HOLD_INTENT in prompt:
        code = hold_code(Script.release)
    else:
        code = SUM_CODE
    return f"```python\n{code}```"


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies, api_key=API_KEY)


@pytest.fixture(scope="module")
def hub(model_server, tmp_path_factory):
    reason = hub_unavailable()
    if reason:
        pytest.skip(reason)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            deployed = stack.enter_context(jupyterhub_deployment(
                tmp_path_factory.mktemp("hub"), model_server.base_url, API_KEY, (ALICE, BOB)))
        except HubUnavailable as exc:
            pytest.skip(str(exc))
        print(f"\nhub, proxy and both users' servers up in {time.monotonic() - t0:.1f} s "
              f"(log: {deployed.log_path})")
        yield deployed
    print(f"hub stopped, users removed; module total {time.monotonic() - t0:.1f} s")


def df_cell(user: str) -> str:
    return f"import pandas as pd\ndf = pd.DataFrame({{'a': {FRAMES[user]!r}}})"


@pytest.fixture(scope="module")
def kernels(hub):
    """Each user's kernel, started through their server, holding their own ``df``."""
    opened = {}
    try:
        for user in (ALICE, BOB):
            reply = hub.call(user, "POST", "api/kernels", {"name": "python3"})
            assert reply.status == 201, reply.text
            channel = kernel_channel(hub, user, reply.body["id"])
            opened[user] = (reply.body["id"], channel)
            done = channel.execute(df_cell(user), timeout=90)
            assert done["content"]["status"] == "ok", done["content"]
        yield opened
    finally:
        for _, channel in opened.values():
            channel.close()


@pytest.fixture(scope="module")
def value_models(hub):
    """A trained value model of each user's own, where ``train-value`` writes it (as that user)."""
    made = {}
    for user in (ALICE, BOB):
        proc = hub.run_as(user, ["-c", "from jupyter_data_agent.store.value_models import next_version_dir\n"
                                       "p = next_version_dir(); p.mkdir(parents=True)\n"
                                       "(p / 'value_config.json').write_text('{}'); print(p)"])
        assert proc.returncode == 0, proc.stderr
        made[user] = proc.stdout.strip()
    return made


# ------------------------------------------------------------------ helpers

def turn_body(user: str, kernel_id: str, intent: str, **options) -> dict:
    return {"version": 1, "notebook_path": "analysis.ipynb", "active_index": 0, "kernel_id": kernel_id,
            "cells": [{"cell_type": "code", "id": "c1", "source": df_cell(user), "metadata": {}, "outputs": [],
                       "execution_count": 1}],
            "intent": intent, "strategy": "vote", "options": {"samples": 2, **options}}


def start_turn(hub: Hub, user: str, body: dict) -> dict:
    reply = hub.call(user, "POST", f"{NS}/turns", body)
    assert reply.status == 202, reply.text
    return reply.body


def poll(hub: Hub, user: str, job_id: str) -> dict:
    reply = hub.call(user, "GET", f"{NS}/jobs/{job_id}?after=0")
    assert reply.status == 200, reply.text
    return reply.body


def wait_turn(hub: Hub, user: str, job_id: str, timeout: float = 120.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = poll(hub, user, job_id)
        if reply["status"] != "running":
            assert reply["status"] == "done", [e["message"] for e in reply["events"]]
            return reply["events"]
        time.sleep(0.3)
    raise TimeoutError(f"{user}'s turn {job_id} did not end within {timeout:.0f} s")


def candidates(events: list[dict]) -> list[dict]:
    return [e["data"]["candidate"] for e in events if e["type"] == "candidate"]


def stdout(candidate: dict) -> str:
    result = candidate["result"] or {}
    return "".join(o.get("text") or "" for o in result.get("outputs", []) if o["output_type"] == "stream")


def marked(text: str, mark: str) -> list[str]:
    return [line[len(mark) + 1:] for line in text.splitlines() if line.startswith(mark + " ")]


def assert_ran_confined_in_copies(events: list[dict]) -> None:
    states = [(e.get("data") or {}).get("state") for e in events]
    assert "kernel_copy_ready" in states, states
    verdicts = [e["data"]["confinement"] for e in events if (e.get("data") or {}).get("state") == "confinement"]
    assert verdicts and verdicts[-1]["status"] == "confined" and verdicts[-1]["execute"], verdicts


def data_dir(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir) / ".local" / "share" / "jupyter"


def env_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:  # as root
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def model_socket(hub: Hub, user: str) -> str:
    """The server's model service socket, as its kernels inherit it (the server sets it after start)."""
    return env_of(kernel_process(hub, user).pid)["JUPYTER_DATA_AGENT_MODEL_SOCKET"]


def kernel_process(hub: Hub, user: str) -> psutil.Process:
    server = psutil.Process(hub.server_pid(user))
    found = [p for p in server.children() if "ipykernel_launcher" in " ".join(p.cmdline())]
    assert len(found) == 1, [p.cmdline() for p in server.children()]
    return found[0]


def kernels_pid(hub: Hub, user: str) -> int:
    return kernel_process(hub, user).pid


def connection_file(kernel: psutil.Process) -> str:
    args = kernel.cmdline()
    return args[args.index("-f") + 1]


def private(path: Path | str, uid: int) -> str | None:
    """None when ``path`` is owned by ``uid`` and closed to group and others; else what is wrong."""
    st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != uid or mode & 0o077:
        return f"{path}: uid {st.st_uid}, mode {oct(mode)}"
    return None


def targets_of(hub: Hub, user: str, *, copies: bool) -> dict:
    """Where ``user``'s agent state lives, read as root: what the other user will reach for."""
    kernel = kernel_process(hub, user)
    server_pid = hub.server_pid(user)
    agent = data_dir(user) / "jupyter_data_agent"
    targets = {"decisions": str(agent / "decisions.sqlite"), "agent_dir": str(agent),
               "value_models": str(agent / "value_models"),
               "value_model": str(agent / "value_models" / "v1" / "value_config.json"),
               "runtime_dir": str(data_dir(user) / "runtime"), "connection_file": connection_file(kernel),
               "model_socket": model_socket(hub, user),
               "server_pid": server_pid, "kernel_pid": kernel.pid}
    if copies:
        targets["copy_pids"] = [p.pid for p in kernel.children(recursive=True)]
        targets["scratch"] = sorted(glob.glob(f"{tempfile.gettempdir()}/jda-scratch-k{kernel.pid}-*"))
    return targets


# ------------------------------------------------------------------ the tests

def test_both_users_run_turns_at_once_each_in_their_own_copies(hub, kernels, value_models, model_server):
    asked_before = len(model_server.requests)
    t0 = time.monotonic()
    jobs = {user: start_turn(hub, user, turn_body(user, kernels[user][0], SUM_INTENT)) for user in (ALICE, BOB)}
    events = {user: wait_turn(hub, user, jobs[user]["job_id"]) for user in (ALICE, BOB)}
    print(f"two concurrent vote turns (2 samples each) in {time.monotonic() - t0:.1f} s")

    for user in (ALICE, BOB):
        assert_ran_confined_in_copies(events[user])
        got = candidates(events[user])
        assert got, [e["message"] for e in events[user]]
        for candidate in got:
            out = stdout(candidate)
            assert candidate["result"]["status"] == "ok", candidate["result"]
            # run as this user, on this user's DataFrame, in a process that is not the kernel
            name, pid = marked(out, "IDENTITY")[0].split()
            assert name == user and int(pid) != kernels_pid(hub, user)
            assert marked(out, "SUM") == [str(sum(FRAMES[user]))]
    # Both servers asked the one shared endpoint, with its key.
    asked = model_server.requests[asked_before:]
    assert len(asked) >= 2 and all(r.header("authorization") == f"Bearer {API_KEY}" for r in asked)
    for user in (ALICE, BOB):
        assert any(repr(FRAMES[user]) in r.prompt for r in asked), f"no prompt with {user}'s cell"

    # Decisions go to each user's own store.
    for user in (ALICE, BOB):
        reply = hub.call(user, "POST", f"{NS}/decisions",
                         {"turn_id": jobs[user]["turn_id"], "candidate": 0, "decision": "accepted"})
        assert reply.status == 200 and reply.body["recorded"] and reply.body["complete"], reply.text
    for user in (ALICE, BOB):
        uid = pwd.getpwnam(user).pw_uid
        store = data_dir(user) / "jupyter_data_agent" / "decisions.sqlite"
        with sqlite3.connect(store) as con:  # as root
            rows = con.execute("SELECT turn_id FROM decisions").fetchall()
        assert rows == [(jobs[user]["turn_id"],)]
        for path in (store, store.parent):  # the folder holds the value models too
            assert private(path, uid) is None, private(path, uid)

    # Each server resolves its own newest value model.
    for user in (ALICE, BOB):
        reply = hub.call(user, "POST", f"{NS}/value-model/reload")
        assert reply.status == 200, reply.text
        assert reply.body["value_model"] == value_models[user]
        assert value_models[user] == str(data_dir(user) / "jupyter_data_agent" / "value_models" / "v1")

    # Each server has its own model service: its own socket, in a folder only its user can enter.
    sockets = {user: model_socket(hub, user) for user in (ALICE, BOB)}
    assert sockets[ALICE] != sockets[BOB]
    for user, path in sockets.items():
        uid = pwd.getpwnam(user).pw_uid
        assert private(os.path.dirname(path), uid) is None and private(path, uid) is None


def test_nothing_of_one_user_reaches_the_other(hub, kernels, value_models):
    users = {u: pwd.getpwnam(u) for u in (ALICE, BOB)}
    Script.release = f"{tempfile.gettempdir()}/jda-hub-release-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    try:
        # Bob's turn: its candidates hold their copies open until released.
        bob_job = start_turn(hub, BOB, turn_body(BOB, kernels[BOB][0], HOLD_INTENT))
        bob_kernel = kernels_pid(hub, BOB)
        deadline = time.monotonic() + 90
        # a copy's scratch: the tree's, or a folder of its own in the warm root's (server.warm_turns)
        while not glob.glob(f"{tempfile.gettempdir()}/jda-scratch-k{bob_kernel}-*/**/holding", recursive=True):
            assert time.monotonic() < deadline, [e["message"] for e in poll(hub, BOB, bob_job["job_id"])["events"]]
            assert poll(hub, BOB, bob_job["job_id"])["status"] == "running"
            time.sleep(0.2)
        bob = targets_of(hub, BOB, copies=True)
        assert bob["copy_pids"] and bob["scratch"], bob
        for pid in bob["copy_pids"]:
            assert psutil.Process(pid).uids().real == users[BOB].pw_uid
        print(f"bob's copies {bob['copy_pids']} up after {time.monotonic() - t0:.1f} s")

        # (1) Bob's server, with alice's token: every route refuses her.
        job = bob_job["job_id"]
        refused = {
            "GET his job": hub.call(BOB, "GET", f"{NS}/jobs/{job}?after=0", as_user=ALICE),
            "cancel his job": hub.call(BOB, "POST", f"{NS}/jobs/{job}/cancel", as_user=ALICE),
            "skip his kernel": hub.call(BOB, "POST", f"{NS}/jobs/{job}/no-kernel", as_user=ALICE),
            "read his config": hub.call(BOB, "GET", f"{NS}/config", as_user=ALICE),
            "record into his decisions": hub.call(BOB, "POST", f"{NS}/decisions", as_user=ALICE, body={
                "turn_id": bob_job["turn_id"], "decision": "rejected"}),
            "reload his value model": hub.call(BOB, "POST", f"{NS}/value-model/reload", as_user=ALICE),
            "read his variables": hub.call(BOB, "GET", f"{NS}/variables?kernel_id={kernels[BOB][0]}",
                                           as_user=ALICE),
            "start a turn on his kernel": hub.call(BOB, "POST", f"{NS}/turns", as_user=ALICE,
                                                   body=turn_body(BOB, kernels[BOB][0], SUM_INTENT)),
            "list his kernels": hub.call(BOB, "GET", "api/kernels", as_user=ALICE),
        }
        assert {k: r.status for k, r in refused.items()} == dict.fromkeys(refused, 403)
        events_ws = hub.websocket_status(BOB, f"{NS}/jobs/{job}/events", as_user=ALICE)
        assert events_ws == 403
        # ... and her own server does not know his job.
        assert hub.call(ALICE, "GET", f"{NS}/jobs/{job}?after=0").status == 404
        assert hub.call(ALICE, "POST", f"{NS}/jobs/{job}/cancel").status == 404
        # ... nor does the Hub let her stop or read his server.
        assert hub.api("DELETE", f"users/{BOB}/server", token=hub.tokens[ALICE]).status in (403, 404)
        assert hub.api("GET", f"users/{BOB}", token=hub.tokens[ALICE]).status in (403, 404)

        # (2a) Alice's live kernel (her own code, no confinement): the OS keeps her out.
        _, channel = kernels[ALICE]
        own = targets_of(hub, ALICE, copies=False)
        control = run_in_kernel(channel, attack_code(own))
        assert all(v.startswith("ok") for v in control["attempts"].values()), control  # the code works
        assert len(control["attempts"]) == FIXED_ATTEMPTS
        assert "JUPYTERHUB_API_TOKEN" in control["env"]["tokens"]  # her kernel holds her Hub token
        live = run_in_kernel(channel, attack_code(bob))
        assert_all_refused(live["attempts"], bob)

        # (2b) A candidate in a copy of alice's kernel, while bob's turn runs.
        Script.targets = bob
        alice_job = start_turn(hub, ALICE, turn_body(ALICE, kernels[ALICE][0], ATTACK_INTENT, samples=1))
        events = wait_turn(hub, ALICE, alice_job["job_id"])
        assert_ran_confined_in_copies(events)
        [candidate] = candidates(events)
        assert candidate["result"]["status"] == "ok", candidate["result"]
        out = stdout(candidate)
        in_copy = json.loads(marked(out, "ATTEMPTS")[0])
        env = json.loads(marked(out, "ENV")[0])
        assert env == {"uid": users[ALICE].pw_uid, "tokens": []}  # no Hub token, no model-service token
        assert_all_refused(in_copy, bob)
        print(f"alice's attacks (live kernel and copy) done after {time.monotonic() - t0:.1f} s")

        # Every folder either user's agent made in the shared /tmp is theirs alone.
        check_tmp(users)

        # Bob's turn went on untouched: still running, then done with every copy's answer.
        assert poll(hub, BOB, job)["status"] == "running"
        Path(Script.release).touch()
        bob_events = wait_turn(hub, BOB, job)
        assert_ran_confined_in_copies(bob_events)
        got = candidates(bob_events)
        assert got
        for candidate in got:
            assert candidate["result"]["status"] == "ok", candidate["result"]
            out = stdout(candidate)
            assert marked(out, "IDENTITY")[0].split()[0] == BOB
            assert marked(out, "RELEASED") == ["True"] and marked(out, "SUM") == [str(sum(FRAMES[BOB]))]
        assert not os.path.exists(os.path.join(bob["scratch"][0], "x.txt"))
        print(f"isolation checks in {time.monotonic() - t0:.1f} s")
    finally:  # never leave bob's copies waiting
        Path(Script.release).touch()
        time.sleep(0.5)
        Path(Script.release).unlink()


def run_in_kernel(channel, code: str) -> dict:
    before = len(channel.seen)
    reply = channel.execute(code, timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    text = "".join(m["content"].get("text", "") for m in channel.seen[before:]
                   if m.get("msg_type") == "stream"
                   and m["parent_header"].get("msg_id") == reply["parent_header"]["msg_id"])
    return {"attempts": json.loads(marked(text, "ATTEMPTS")[0]), "env": json.loads(marked(text, "ENV")[0])}


def assert_all_refused(attempts: dict[str, str], targets: dict) -> None:
    expected = FIXED_ATTEMPTS + 2 * len(targets.get("scratch", [])) + len(targets.get("copy_pids", []))
    assert len(attempts) == expected, attempts
    leaked = {k: v for k, v in attempts.items() if not v.startswith("PermissionError")}
    assert not leaked, leaked


def check_tmp(users: dict[str, pwd.struct_passwd]) -> None:
    uids = {u.pw_uid: name for name, u in users.items()}
    seen = []
    for entry in os.scandir(tempfile.gettempdir()):
        st = entry.stat(follow_symlinks=False)
        if st.st_uid in uids and entry.name.startswith("jda-"):
            seen.append(entry.name)
            assert private(entry.path, st.st_uid) is None, (uids[st.st_uid], private(entry.path, st.st_uid))
    assert any(name.startswith("jda-model-") for name in seen) and any(
        name.startswith("jda-scratch-") for name in seen), seen


def test_a_data_dir_shared_by_mistake_keeps_each_users_data(hub, value_models):
    """An admin who points every user at one data dir (``JUPYTER_DATA_DIR``): the first user's
    agent folder is 0700, so the next user's server finds no value model in it (the heuristic
    guides Search) and records no decision there (the server says so and goes on); before,
    it read and wrote the other user's."""
    proc = hub.run_as(BOB, ["-c", (
        "from jupyter_data_agent.store.value_models import newest_value_model\n"
        "from jupyter_data_agent.store.decisions import DecisionStore, default_store_path\n"
        "print('VALUE', newest_value_model())\n"
        "try:\n"
        "    DecisionStore(default_store_path()); print('STORE opened')\n"
        "except OSError as e:\n"
        "    print('STORE', type(e).__name__)\n")], JUPYTER_DATA_DIR=str(data_dir(ALICE)))
    assert proc.returncode == 0, proc.stderr
    assert marked(proc.stdout, "VALUE") == ["None"] and marked(proc.stdout, "STORE") == ["PermissionError"]


def test_a_shared_server_still_keeps_each_users_turns(hub, kernels):
    """JupyterHub's sharing: alice lets bob use her server. He reaches it (the Hub's rules),
    but the extension keeps turns per user (``job_owner_scope`` 'auto' names the Hub's users):
    neither sees, cancels nor follows the other's turn on it. Revoked, he is refused again."""
    assert hub.call(ALICE, "GET", f"{NS}/config", as_user=BOB).status == 403
    share = hub.api("POST", f"shares/{ALICE}/", {"user": BOB})
    assert share.status in (200, 201), share.text
    seen = hub.tokens[BOB]
    # A single-user server caches what a token may do (HubAuth.cache_max_age, 5 min): a token
    # it has not seen yet carries the share.
    hub.make_token(BOB)
    try:
        assert hub.call(ALICE, "GET", f"{NS}/config", as_user=BOB).status == 200
        hers = start_turn(hub, ALICE, turn_body(ALICE, kernels[ALICE][0], SUM_INTENT))["job_id"]
        reply = hub.call(ALICE, "POST", f"{NS}/turns", turn_body(ALICE, kernels[ALICE][0], SUM_INTENT), as_user=BOB)
        assert reply.status == 202, reply.text
        his = reply.body["job_id"]
        for job, other in ((hers, BOB), (his, ALICE)):
            tries = {"GET": hub.call(ALICE, "GET", f"{NS}/jobs/{job}?after=0", as_user=other).status,
                     "cancel": hub.call(ALICE, "POST", f"{NS}/jobs/{job}/cancel", as_user=other).status,
                     "no-kernel": hub.call(ALICE, "POST", f"{NS}/jobs/{job}/no-kernel", as_user=other).status,
                     "events": hub.websocket_status(ALICE, f"{NS}/jobs/{job}/events", as_user=other)}
            assert tries == dict.fromkeys(tries, 404), (other, tries)
        wait_turn(hub, ALICE, hers)
        deadline = time.monotonic() + 120
        while (reply := hub.call(ALICE, "GET", f"{NS}/jobs/{his}?after=0", as_user=BOB)).body["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert reply.body["status"] == "done", [e["message"] for e in reply.body["events"]]
    finally:
        revoked = hub.api("DELETE", f"shares/{ALICE}/")
        assert revoked.status == 204, revoked.text
    # (A token her server saw while shared keeps working until its cache entry expires.)
    hub.make_token(BOB)
    assert hub.call(ALICE, "GET", f"{NS}/config", as_user=BOB).status == 403
    hub.tokens[BOB] = seen
    assert hub.call(ALICE, "GET", f"{NS}/config", as_user=BOB).status == 403


# ------------------------------------------------------------------ outside agents through the Hub

AGENT_NOTEBOOK = "agents.ipynb"


def open_agent_notebook(hub: Hub, user: str, kernel_id: str) -> None:
    """``agents.ipynb`` saved in the user's root, its session on the user's kernel (holding ``df``)."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(df_cell(user), id="c1", execution_count=1)])
    saved = hub.call(user, "PUT", f"api/contents/{AGENT_NOTEBOOK}",
                     {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))})
    assert saved.status in (200, 201), saved.text
    session = hub.call(user, "POST", "api/sessions", {"path": AGENT_NOTEBOOK, "name": AGENT_NOTEBOOK,
                                                      "type": "notebook", "kernel": {"id": kernel_id}})
    assert session.status == 201, session.text


async def mcp_try(hub: Hub, user: str, token: str, code: str) -> dict:
    """``try_code`` on ``user``'s server through the Hub's proxy, with the MCP SDK's HTTP client."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http_client = httpx2.AsyncClient(headers={"Authorization": f"token {token}"},
                                     timeout=httpx2.Timeout(60, read=120))
    url = f"{hub.url}/user/{user}/{NS}/mcp"
    async with Client(streamable_http_client(url, http_client=http_client)) as client:
        listed = json.loads((await client.call_tool("list_notebooks", {})).content[0].text)
        assert AGENT_NOTEBOOK in [n["path"] for n in listed["notebooks"]], listed
        result = await client.call_tool("try_code", {"notebook": AGENT_NOTEBOOK, "code": code})
        assert not result.is_error, result.content[0].text[:2000]
        return json.loads(result.content[0].text)


async def acp_prompt(hub: Hub, user: str, workdir: Path) -> tuple[str, str]:
    """One ACP prompt to ``jupyter-data-agent acp`` pointed at ``user``'s server through the Hub."""
    import sys

    import acp

    from tests.test_acp import REPO, RecordingClient

    env = {**os.environ, "JUPYTER_DATA_AGENT_SERVER_URL": f"{hub.url}/user/{user}",
           "JUPYTER_DATA_AGENT_TOKEN": hub.tokens[user],
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    client = RecordingClient()
    async with acp.spawn_agent_process(lambda agent: client, sys.executable, "-m", "jupyter_data_agent.cli",
                                       "acp", env=env, cwd=str(workdir)) as (conn, _proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION,
                              client_info=acp.schema.Implementation(name="hub-ide", version="1"))
        session = await conn.new_session(cwd=str(workdir), mcp_servers=[])
        reply = await conn.prompt(session_id=session.session_id, prompt=[
            acp.text_block(f"/vote @{AGENT_NOTEBOOK} {SUM_INTENT}")])
    return reply.stop_reason, client.texts("agent_message_chunk")


def test_mcp_and_acp_through_the_hub_each_with_their_users_token(hub, kernels, tmp_path):
    """Issue 35: an outside agent reaches its user's server through the Hub's proxy with that user's
    Hub token: MCP ``try_code`` runs in a copy of that user's kernel (as that user, on their data),
    an ACP prompt becomes a proposal on their server; the other user's token is refused on both."""
    import asyncio

    code = "import os, pwd\nprint('WHO', pwd.getpwuid(os.getuid()).pw_name)\nprint('SUM', int(df['a'].sum()))"
    for user in (ALICE, BOB):
        open_agent_notebook(hub, user, kernels[user][0])
        out = asyncio.run(mcp_try(hub, user, hub.tokens[user], code))
        assert out["status"] == "ok", out
        assert f"WHO {user}" in out["stdout"] and f"SUM {sum(FRAMES[user])}" in out["stdout"], out["stdout"]
    other = BOB
    with pytest.raises(Exception):  # noqa: B017 -- the SDK's error for an HTTP refusal varies by era
        asyncio.run(mcp_try(hub, ALICE, hub.tokens[other], code))
    refused = hub.call(ALICE, "POST", f"{NS}/mcp", {}, as_user=other)
    assert refused.status == 401, refused.text  # the MCP spec's answer, with the Hub's way in
    assert "Hub API token" in refused.body["error"]["message"], refused.body

    stop, said = asyncio.run(acp_prompt(hub, ALICE, tmp_path))
    assert stop == "end_turn", said
    assert f"Proposed as a new cell in {AGENT_NOTEBOOK}" in said, said
    proposals = hub.call(ALICE, "GET", f"{NS}/proposals?notebook_path={AGENT_NOTEBOOK}")
    assert proposals.status == 200, proposals.text
    pending = proposals.body["proposals"]
    assert len(pending) == 1 and pending[0]["status"] == "pending", pending
    assert "SUM" in pending[0]["code"] and pending[0]["agent"] == "Data Agent (ACP, hub-ide)", pending[0]
    assert hub.call(ALICE, "GET", f"{NS}/proposals?notebook_path={AGENT_NOTEBOOK}", as_user=other).status == 403
    # neither the tries nor the proposal ran in the live kernel: it waits for alice's Accept
    channel = kernels[ALICE][1]
    before = len(channel.seen)
    reply = channel.execute("print('RAN', any('IDENTITY' in c or \"'WHO'\" in c for c in In[:-1]))", timeout=30)
    assert reply["content"]["status"] == "ok", reply["content"]
    text = "".join(m["content"].get("text", "") for m in channel.seen[before:] if m.get("msg_type") == "stream")
    assert "RAN False" in text, text
