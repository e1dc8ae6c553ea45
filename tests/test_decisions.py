"""The decisions store: a real SQLite file, concurrent writers, a crash mid-write, and the server API.

The server tests run a real Jupyter server with the extension, a real turn
against the OpenAI-protocol test server, then post decisions as the sidebar
does (helpers from ``test_server.py``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import sqlite3
import stat
import threading
import time

import pytest

from jupyter_data_agent.store.decisions import (
    SCHEMA_VERSION,
    DecisionRecord,
    DecisionStore,
    StoreError,
    TurnOutcome,
    default_store_path,
)
from jupyter_data_agent.store.value_models import next_version_dir


def record(i: int = 0, decision: str = "accepted") -> DecisionRecord:
    return DecisionRecord(decision=decision, turn_id=f"turn-{i}", intent=f"question {i}", code="len(df)",
                          candidate={"code": "len(df)", "meta": {"messages": [{"role": "user", "content": "q"}]}},
                          complete=True)


def test_round_trip_in_wal_mode_with_a_schema_version(tmp_path):
    store = DecisionStore(tmp_path / "d" / "decisions.sqlite")
    first = store.add(record(1))
    store.add(record(2, "rejected"))
    got = list(store.records())
    assert [r.id for r in got] == [first, first + 1]
    assert got[0].candidate["meta"]["messages"][0]["content"] == "q" and got[0].complete
    assert got[1].decision == "rejected" and not got[1].accepted and got[0].accepted
    assert got[0].recorded_at > 0
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    stats = store.stats()
    assert stats["decisions"] == 2 and stats["by_decision"] == {"accepted": 1, "rejected": 1}


def test_a_newer_schema_is_refused_not_misread(tmp_path):
    path = tmp_path / "decisions.sqlite"
    DecisionStore(path)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version"):
        DecisionStore(path)


def test_an_unknown_decision_is_refused_by_the_file_itself(tmp_path):
    store = DecisionStore(tmp_path / "decisions.sqlite")
    with pytest.raises(sqlite3.IntegrityError):
        store.add(record(1, "maybe"))
    assert list(store.records()) == []


def test_a_candidates_features_are_stored_and_a_schema_2_store_is_migrated(tmp_path):
    """Schema 3 keeps what the evidence estimator read of an mcts candidate; a schema-2 file gains
    the column in place, its rows reading as decisions without features."""
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE decisions (id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at REAL NOT NULL, "
                       "decision TEXT NOT NULL, turn_id TEXT NOT NULL, job_id TEXT NOT NULL DEFAULT '', "
                       "candidate_index INTEGER NOT NULL DEFAULT 0, intent TEXT NOT NULL DEFAULT '', "
                       "strategy TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', "
                       "notebook_path TEXT NOT NULL DEFAULT '', code TEXT NOT NULL DEFAULT '', "
                       "final_code TEXT NOT NULL DEFAULT '', prompt TEXT NOT NULL DEFAULT '', "
                       "candidate TEXT NOT NULL DEFAULT '{}', answer TEXT, asked_at REAL, "
                       "complete INTEGER NOT NULL DEFAULT 0, step INTEGER); PRAGMA user_version = 2;")
    conn.execute("INSERT INTO decisions (recorded_at, decision, turn_id) VALUES (1, 'rejected', 't-old')")
    conn.commit()
    conn.close()
    store = DecisionStore(path)
    feats = {"answered": 1.0, "failed_agree": 0.0, "agree_share": 0.75}
    outcome = TurnOutcome(turn_id="t-1", owner="me", intent="Total?", strategy="mcts", candidates=[
        {"code": "total", "meta": {"answer": "@total[26]", "features": feats}}, {"code": "x", "meta": {}}])
    store.add(outcome.record("accepted", 0))
    store.add(outcome.record("rejected", 1))
    old, accepted, rejected = store.records()
    assert old.turn_id == "t-old" and old.features is None
    assert accepted.features == feats and accepted.candidate["meta"]["features"] == feats
    assert rejected.features is None  # a candidate that carried none
    assert store.stats()["with_features"] == 1
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_the_store_is_its_users_alone(tmp_path, monkeypatch):
    """0700 folder, 0600 file (and journal): under JupyterHub the home it lies in may be open to
    other users (tests/test_hub.py shows another user's kernel copy reading it otherwise)."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data").mkdir(mode=0o755)
    old = tmp_path / "data" / "jupyter_data_agent"
    old.mkdir(mode=0o755)  # as an earlier version left it
    os.chmod(old, 0o755)
    store = DecisionStore(default_store_path())
    assert store.path.parent == old and _mode(old) == 0o700 and _mode(store.path) == 0o600
    store.add(record(1))
    conn = sqlite3.connect(store.path)  # open: the WAL file stays until the last connection closes
    conn.execute("INSERT INTO decisions (recorded_at, decision, turn_id) VALUES (0, 'accepted', 't')")
    conn.commit()
    assert _mode(f"{store.path}-wal") == 0o600
    conn.close()
    # A folder the user configured is left as it is; a new one is made 0700; the file is 0600 either way.
    shared = tmp_path / "chosen"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    assert _mode(DecisionStore(shared / "mine.sqlite").path) == 0o600 and _mode(shared) == 0o755
    assert _mode(DecisionStore(tmp_path / "new" / "d.sqlite").path.parent) == 0o700
    # Training's next version lands in the same private folder.
    shutil.rmtree(old)
    version = next_version_dir()
    assert version == old / "value_models" / "v1" and _mode(old) == 0o700


def _writer(path: str, start: int, n: int) -> None:
    store = DecisionStore(path)
    for i in range(start, start + n):
        store.add(record(i))


def test_concurrent_threads_and_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "decisions.sqlite")
    DecisionStore(path)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 1000 * (k + 1), 40)) for k in range(2)]
    threads = [threading.Thread(target=_writer, args=(path, 10 * k, 10)) for k in range(4)]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ids = sorted(r.turn_id for r in DecisionStore(path).records())
    assert len(ids) == len(set(ids)) == 2 * 40 + 4 * 10


def _write_forever(path: str, done) -> None:
    store = DecisionStore(path)
    i = 0
    while True:
        store.add(record(i))
        done.value = i + 1  # set only once the row is committed
        i += 1


def test_a_crash_mid_write_loses_nothing_already_committed(tmp_path):
    path = str(tmp_path / "decisions.sqlite")
    DecisionStore(path)
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Value("i", 0)
    proc = ctx.Process(target=_write_forever, args=(path, done))
    proc.start()
    deadline = time.monotonic() + 60
    while done.value < 30 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)  # wherever it is: inside a transaction, most likely
    proc.join(10)
    committed = done.value
    assert committed >= 30
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    turns = {r.turn_id for r in DecisionStore(path).records()}
    assert {f"turn-{i}" for i in range(committed)} <= turns


# -- through the Jupyter server ---------------------------------------------------------

NS = "jupyter-data-agent"


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    from tests.test_server import replies

    return model_server_factory(reply=replies)


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store" / "decisions.sqlite"


@pytest.fixture
def jp_server_config(model_server, monkeypatch, store_path, request):
    from tests.conftest import agent_server_config

    return agent_server_config(model_server, monkeypatch, extension={
        "decisions_path": str(store_path), "record_decisions": "recording_off" not in request.fixturenames})


@pytest.fixture
def recording_off():
    """Requesting this fixture runs the server with c.DataAgentExtension.record_decisions = False."""


def _on_server_loop(fn):
    from tests.test_server import on_server_loop

    return on_server_loop(fn)


async def _decide(jp_fetch, **body) -> dict:
    r = await jp_fetch(NS, "decisions", method="POST", body=json.dumps({"version": 1, **body}))
    return json.loads(r.body)


@_on_server_loop
async def test_decisions_on_a_real_turn_land_in_the_store(jp_fetch, jp_ws_fetch, jp_serverapp, store_path):
    from tests.test_server import post_turn, start_kernel, stream_events

    kernel_id, _km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id)
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
    finally:
        kc.stop_channels()
    assert events[-1]["type"] == "done"
    turn_id = accepted["turn_id"]

    reply = await _decide(jp_fetch, turn_id=turn_id, candidate=0, decision="accepted_run",
                          final_code="big = df[df['a'] > 1]\nlen(big)\n")
    assert reply["recorded"] and reply["complete"] and reply["id"] >= 1
    reply = await _decide(jp_fetch, turn_id=turn_id, candidate=0, decision="edited",
                          final_code="len(df[df['a'] > 2])")
    assert reply["complete"]
    # A turn this server never ran (another server, a restart): what the browser knows.
    reply = await _decide(jp_fetch, turn_id="turn-elsewhere", decision="rejected", intent="old question",
                          code="df.tail()")
    assert reply["recorded"] and not reply["complete"]

    rows = list(DecisionStore(store_path).records())
    assert [r.decision for r in rows] == ["accepted_run", "edited", "rejected"]
    run = rows[0]
    assert run.turn_id == turn_id and run.intent == "How many rows have a above 1?"
    assert run.strategy == "direct" and run.model == "test-model"
    assert "a above 1" in run.prompt  # the turn's prompt, from the server's own record
    assert run.candidate["steps"][0]["explanation"].startswith("Keep the rows")
    assert run.candidate["result"]["status"] == "ok"  # the candidate's outputs in the kernel copy
    assert "2" in json.dumps(run.candidate["result"]["outputs"])
    assert run.code.startswith("# Step 1") and "len(big)" in run.final_code
    assert rows[2].intent == "old question" and rows[2].code == "df.tail()" and not rows[2].candidate

    # A configured secret never lands in the file (a cell may print one).
    from tests.test_server import KEY

    await _decide(jp_fetch, turn_id="turn-secret", decision="rejected", code=f"print('{KEY}')")
    assert KEY not in store_path.read_bytes().decode("utf-8", "replace")
    assert KEY not in list(DecisionStore(store_path).records())[-1].code


@_on_server_loop
async def test_bad_decisions_get_400_and_recording_can_be_off(jp_fetch, recording_off, store_path):
    from tornado.httpclient import HTTPClientError

    for body in ({"turn_id": "t", "decision": "maybe"}, {"turn_id": "", "decision": "accepted"},
                 {"turn_id": "t", "decision": "accepted", "secret_extra": 1}):
        with pytest.raises(HTTPClientError) as info:
            await _decide(jp_fetch, **body)
        assert info.value.code == 400
    reply = await _decide(jp_fetch, turn_id="t", decision="accepted")
    assert reply == {"version": 1, "recorded": False, "complete": False, "id": None}
    assert not store_path.exists()
