"""Warm roots (issue 37): fresh tries fork from one kept confined copy of the live kernel.

Against a real Jupyter server and a real ipykernel behind a notebook session,
as ``test_mcp``: a child of the warm root gives what a fork of the live kernel
gives (values, namespace, outputs: a mutated DataFrame, a deleted name, a file
a cell wrote, a changed working directory, random state); a root older than
the last execution is never used for the live state; a try while the user's
20-s cell runs answers at once with the state's age, and the cell and kernel
are unaffected; a restart or shutdown drops the root; the next try runs in
a child forked ahead of it (of the root, or of a handle used last).
"""

from __future__ import annotations

import asyncio
import re
import time

import psutil
import pytest

from jupyter_data_agent.server import warm_roots
from jupyter_data_agent.server.tries import TryLimits, TryManager
from tests import test_mcp
from tests.test_mcp import NOTEBOOK, client, data, live_value, open_notebook
from tests.test_server import kernel_children, on_server_loop

pytest.importorskip("mcp")

jp_server_config, server = test_mcp.jp_server_config, test_mcp.server  # the MCP tests' fixtures

OWNER = "tester"

LIVE_STATE = """\
import os, random
import numpy as np
df = df.copy()
df.loc[1, 'a'] = 99
df['d'] = df['a'] * 2
gone = 1
del gone
del extra
with open('written_by_cell.txt', 'w') as f:
    f.write('from the cell')
os.makedirs('sub', exist_ok=True)
os.chdir('sub')
random.seed(7); np.random.seed(7); random.random()
print('state set')
"""

PROBE = """\
import os, random
import numpy as np
names = sorted(k for k in globals() if not k.startswith('_') and k not in ('In', 'Out', 'exit', 'quit',
               'get_ipython', 'open'))
print(open('written_by_cell.txt').read())
print(sorted(e for e in os.listdir('.') if not e.startswith('.')))
(df.to_dict('list'), names, 'gone' in globals(), random.random(), float(np.random.rand()))
"""


def tries_of(app) -> TryManager:
    return app.web_app.settings["jupyter_data_agent"].tries


def watch_of(app, km):
    return tries_of(app).warm.watches.get(km.kernel_id)


async def until(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def current_root(app, km):
    """The kernel's warm root once it holds every execution the server has seen."""
    w = watch_of(app, km)
    await until(
        lambda: w.root is not None and w.root.generation == w.generation and not w.running, what="a current warm root"
    )
    return w.root


def comparable(outcome) -> dict:
    """What a try gave, without what differs between two copies by construction (handles)."""
    from jupyter_data_agent.mcp.render import exec_json

    out = exec_json(outcome.result)
    return {
        "status": out["status"],
        "stdout": out["stdout"],
        "value": out["value"]["preview"],
        "namespace": outcome.namespace.to_json(),
    }


@on_server_loop
async def test_a_child_of_the_warm_root_equals_a_fork_of_the_live_kernel(server, jp_fetch):
    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    tries = tries_of(app)
    classic = TryManager(
        jobs=tries.jobs,
        session_manager=tries.session_manager,
        redact=tries.redact,
        limits=TryLimits(warm_root_idle_s=0),
    )
    try:
        first = await tries.try_code(OWNER, NOTEBOOK, "df.shape")  # someone asks: the kernel is watched
        assert first.state is None and first.result.status == "ok"
        made = watch_of(app, km).root
        # the user runs a cell: when the kernel goes idle, the root is made again
        reply = await kc.execute(LIVE_STATE, reply=True, timeout=60)
        assert reply["content"]["status"] == "ok"
        root = await current_root(app, km)
        assert root is not made and made.retired

        warm = await tries.try_code(OWNER, NOTEBOOK, PROBE)
        assert tries.handles[warm.handle].tree.lease.root is root  # forked from the warm root
        fresh = await classic.try_code(OWNER, NOTEBOOK, PROBE)
        assert comparable(warm) == comparable(fresh)
        got = comparable(warm)
        assert got["status"] == "ok" and got["stdout"].startswith("from the cell\n")
        frame, names, gone, _, _ = got["value"]
        assert frame["a"] == [1, 99, 3] and frame["d"] == [2, 198, 6]
        assert "extra" not in names and "df" in names and gone is False
        assert "written_by_cell.txt" in got["stdout"] and "sub" in got["stdout"]
        # the random state is the live kernel's: the live kernel draws the same next numbers
        assert await live_value(kc, "(random.random(), float(np.random.rand()))") == repr(tuple(got["value"][3:]))
    finally:
        await classic.shutdown()
        kc.stop_channels()


@on_server_loop
async def test_a_root_older_than_the_last_execution_is_never_used_for_the_live_state(server, jp_fetch, monkeypatch):
    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    tries = tries_of(app)
    try:
        await tries.try_code(OWNER, NOTEBOOK, "1")
        old = await current_root(app, km)
        monkeypatch.setattr(warm_roots, "SETTLE_S", 60.0)  # no background remake: the root stays stale
        reply = await kc.execute("x = 41", reply=True, timeout=60)
        assert reply["content"]["status"] == "ok"
        await until(
            lambda: not watch_of(app, km).running and watch_of(app, km).generation > old.generation,
            what="the execution seen on IOPub",
        )
        assert watch_of(app, km).root is old  # stale, kept (a busy kernel could still start from it)
        out = await tries.try_code(OWNER, NOTEBOOK, "x + 1")
        assert out.result.status == "ok" and out.state is None
        used = tries.handles[out.handle].tree.lease.root
        assert used is not old and used.generation == watch_of(app, km).generation
        # a file the user adds to the notebook's folder (no execution) makes the root stale too
        await asyncio.sleep(0.01)
        (root_dir / "work" / "dropped.csv").write_text("a\n1\n")
        out = await tries.try_code(OWNER, NOTEBOOK, "open('dropped.csv').read()")
        assert out.result.status == "ok", out.result.evalue
        assert tries.handles[out.handle].tree.lease.root is not used
    finally:
        kc.stop_channels()


@on_server_loop
async def test_a_try_while_a_20_s_cell_runs_answers_at_once_with_the_state_age(server, jp_fetch):
    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    heard: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")

    try:
        async with client(app, port) as c:
            first = data(await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": "df.a.sum()"}))
            assert first["value"]["preview"] == 6 and "state" not in first
            await current_root(app, km)
            msg_id = kc.execute("import time\ntime.sleep(20)\ny = df.a.sum() * 10")
            await until(lambda: watch_of(app, km).running, what="the user's cell running")
            t0 = time.monotonic()
            out = data(
                await c.call_tool(
                    "try_code", {"notebook": NOTEBOOK, "code": "'y' in dir(), df.a.sum()"}, progress_callback=progress
                )
            )
            took = time.monotonic() - t0
            assert took < 2.0, took
            assert out["value"]["preview"] == [False, 6]
            state = out["state"]
            assert state["running"] and state["executions_since"] == 1
            assert "a cell is running now" in state["note"] and re.search(r"\d\d:\d\d:\d\d", state["note"])
            # a chained try from that copy is fast too, and stays in that state
            chained = data(
                await c.call_tool("try_code", {"notebook": NOTEBOOK, "code": "'y' in dir()", "from": out["handle"]})
            )
            assert chained["value"]["preview"] is False
            # fresh_state waits for the cell, with progress, and sees what it did
            heard.clear()
            waited = data(
                await c.call_tool(
                    "try_code", {"notebook": NOTEBOOK, "code": "y", "fresh_state": True}, progress_callback=progress
                )
            )
            assert waited["value"]["preview"] == 60 and "state" not in waited
            assert time.monotonic() - t0 > 15
            assert any("waiting for the cell" in m for m in heard), heard
        # the user's cell ran to its end, undisturbed, in the live kernel
        reply = await kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = await kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "ok"
        assert await live_value(kc, "int(y)") == "60"
        assert await live_value(kc, "'df' in dir() and 'extra' in dir()") == "True"
    finally:
        kc.stop_channels()


@on_server_loop
async def test_the_root_is_dropped_on_restart_and_shutdown(server, jp_fetch):
    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    tries = tries_of(app)
    try:
        out = await tries.try_code(OWNER, NOTEBOOK, "df.a.sum()", keep=False)
        assert out.result.status == "ok"
        root = await current_root(app, km)
        pid = root.node.pid
        assert pid in [p.pid for p in kernel_children(km)]
        await jp_fetch("api", "kernels", km.kernel_id, "restart", method="POST", body="{}")
        await until(lambda: root.closed and not psutil.pid_exists(pid) or _zombie(pid), what="the old root ending")
        after = await tries.try_code(OWNER, NOTEBOOK, "'df' in dir()", keep=False)
        assert comparable(after)["value"] is False  # the new kernel's state
        new_root = watch_of(app, km).root
        assert new_root is not None and new_root is not root
        new_pid = new_root.node.pid
        await jp_fetch("api", "kernels", km.kernel_id, method="DELETE")
        await until(lambda: km.kernel_id not in tries.warm.watches, timeout=20, what="the watch dropped")
        await until(lambda: new_root.closed, what="the root closed")
        await until(lambda: not psutil.pid_exists(new_pid) or _zombie(new_pid), what="the root's process ending")
        assert "shut down" in tries.warm.dropped[km.kernel_id]
    finally:
        kc.stop_channels()


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@on_server_loop
async def test_warm_roots_off_each_fresh_try_forks_the_live_kernel(server, jp_fetch):
    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    tries = tries_of(app)
    classic = TryManager(
        jobs=tries.jobs,
        session_manager=tries.session_manager,
        redact=tries.redact,
        limits=TryLimits(warm_root_idle_s=0),
    )
    try:
        assert classic.warm is None
        out = await classic.try_code(OWNER, NOTEBOOK, "df.a.sum()")
        assert out.result.status == "ok" and out.state is None
        assert classic.handles[out.handle].tree.lease is None
    finally:
        await classic.shutdown()
        kc.stop_channels()


#: Run in try A's copy: write a file everywhere it might, and say where that worked.
WRITE_EVERYWHERE = """\
import os, tempfile
here = os.getcwd()
places = {'cwd': here, 'tmpdir': os.environ.get('TMPDIR') or here, 'tempfile': tempfile.gettempdir(),
          'above cwd': os.path.dirname(here), 'tmp': '/tmp', 'dev/shm': '/dev/shm', 'var/tmp': '/var/tmp',
          'home': os.path.expanduser('~'), 'notebook folder': NOTEBOOK_DIR,
          'notebook folder/sub': os.path.join(NOTEBOOK_DIR, 'sub')}
wrote, paths = {}, []
for label, folder in places.items():
    path = os.path.join(folder, 'secret_of_alice.txt')
    try:
        with open(path, 'w') as f:
            f.write('alice-secret')
        wrote[label] = True
        paths.append(os.path.realpath(path))
    except OSError:
        wrote[label] = False
try:  # through the link to a notebook file in the copy's folder: the user's file is never written
    with open('flights.ipynb', 'a') as f:
        f.write('x')
    wrote['notebook file'] = True
except OSError:
    wrote['notebook file'] = False
(wrote, paths, here)
"""

#: Run in try B's copy: look for what A wrote, by its paths, by listing, by walking.
LOOK_FOR = """\
import os
seen = []
for path in PATHS + [os.path.join(os.getcwd(), 'secret_of_alice.txt')]:
    try:
        seen.append(('read', path, open(path).read()))
    except OSError:
        pass
for folder in {os.path.dirname(p) for p in PATHS} | {ALICE_CWD, os.path.dirname(ALICE_CWD), os.getcwd(),
                                                     os.path.dirname(os.getcwd())}:
    try:
        names = os.listdir(folder)
    except OSError:
        continue
    seen += [('listed', folder, n) for n in names if 'alice' in n or n.startswith('try-')]
for top in (os.path.dirname(os.getcwd()), os.getcwd()):
    for folder, dirs, files in os.walk(top):
        seen += [('walked', folder, n) for n in files if 'alice' in n]
(seen, os.getcwd())
"""


@on_server_loop
async def test_tries_from_one_warm_root_never_see_each_others_files(server, jp_fetch):
    """Every fresh try forks the one warm root: each has a scratch folder of its own, as a fork of
    the live kernel has, so a file alice's try wrote is seen neither by bob's try nor by alice's
    next fresh try (read by path, listed, walked); and a child of the warm root can write no more
    than a fork of the live kernel can (never the notebook's folder or files)."""
    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    tries = tries_of(app)
    classic = TryManager(
        jobs=tries.jobs,
        session_manager=tries.session_manager,
        redact=tries.redact,
        limits=TryLimits(warm_root_idle_s=0),
    )
    notebook_dir = str((root_dir / "work").resolve())
    write = WRITE_EVERYWHERE.replace("NOTEBOOK_DIR", repr(notebook_dir))
    try:
        alice = await tries.try_code("user:alice", NOTEBOOK, write)
        assert alice.result.status == "ok", alice.result.evalue
        assert tries.handles[alice.handle].tree.lease is not None  # a child of the warm root
        layers = {layer["name"]: layer["on"] for layer in alice.confinement.layers}
        assert layers["landlock_fs"], alice.confinement.message
        wrote, paths, alice_cwd = comparable(alice)["value"]
        assert wrote["cwd"] and wrote["tmpdir"] and paths
        assert not wrote["above cwd"], "a child of the warm root wrote in the root's scratch folder"
        for label in ("notebook folder", "notebook folder/sub", "notebook file", "home", "tmp"):
            assert not wrote[label], label
        assert not (root_dir / "work" / "secret_of_alice.txt").exists()
        # the same code in a fork of the live kernel writes exactly where the warm root's child does
        fresh = await classic.try_code("user:alice", NOTEBOOK, write)
        assert comparable(fresh)["value"][0] == wrote
        # alice's copy lives on (its handle is kept) while the others look
        look = LOOK_FOR.replace("PATHS", repr(paths)).replace("ALICE_CWD", repr(alice_cwd))
        for owner in ("user:bob", "user:alice"):
            other = await tries.try_code(owner, NOTEBOOK, look)
            assert other.result.status == "ok", other.result.evalue
            assert tries.handles[other.handle].tree.lease.root is tries.handles[alice.handle].tree.lease.root
            seen, cwd = comparable(other)["value"]
            assert seen == [], (owner, seen)
            assert cwd != alice_cwd
        # a child of alice's try (``from``) continues her state: her files are there
        child = await tries.try_code("user:alice", NOTEBOOK, "open('secret_of_alice.txt').read()", parent=alice.handle)
        assert comparable(child)["value"] == "alice-secret"
        assert tries.handles[alice.handle].node.is_live
    finally:
        await classic.shutdown()
        kc.stop_channels()


@on_server_loop
async def test_the_next_try_runs_in_a_child_forked_ahead(server, jp_fetch):
    """A warm root keeps a child forked ahead, and so does each of the handles a user used last
    (``server.fork_ahead``): the next fresh try, or try ``from`` such a handle, runs in that very
    process, with the right namespace diff, and the next spare is forked behind it; a handle that
    drops out of the last ``SPARES_PER_USER`` used ends its spare."""
    from jupyter_data_agent.server.tries import SPARES_PER_USER

    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    tries = tries_of(app)

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    try:
        await tries.try_code(OWNER, NOTEBOOK, "a = 1")
        root = await current_root(app, km)
        await until(lambda: root.ahead.pid is not None, what="a child of the warm root forked ahead")
        spare = root.ahead.pid
        fresh = await tries.try_code(OWNER, NOTEBOOK, "b = 2")
        assert tries.handles[fresh.handle].node.pid == spare
        assert [v.name for v in fresh.namespace.new] == ["b"] and not fresh.namespace.changed
        await until(lambda: root.ahead.pid not in (None, spare), what="the next child of the root forked ahead")
        base = tries.handles[fresh.handle]
        await until(lambda: base.ahead is not None and base.ahead.pid is not None, what="a child of the handle")
        ahead = base.ahead.pid
        child = await tries.try_code(OWNER, NOTEBOOK, "c = b + 1", parent=fresh.handle)
        assert tries.handles[child.handle].node.pid == ahead
        assert [v.name for v in child.namespace.new] == ["c"] and child.result.status == "ok"
        await until(lambda: base.ahead.pid not in (None, ahead), what="the base's next child forked ahead")
        dropped = base.ahead.pid
        for n in range(SPARES_PER_USER):
            await tries.try_code(OWNER, NOTEBOOK, f"d{n} = {n}")
        assert base.ahead is None and fresh.handle in tries.handles  # the handle stays, its spare goes
        await until(lambda: not alive(dropped), what="the dropped spare's end")
    finally:
        kc.stop_channels()


@on_server_loop
async def test_a_server_stop_ends_every_root_and_its_client_leased_ones_too(server, jp_fetch):
    """``shutdown`` (the server stopping) ends the kernel's root while a try still holds a lease on
    it, and a retired root whose copies are in use: their processes and their kernel clients (a
    client left open keeps threads that hold the server's process at exit)."""
    app, port, root_dir = server
    km, kc = await open_notebook(jp_fetch, app, root_dir)
    tries = tries_of(app)
    own = TryManager(jobs=tries.jobs, session_manager=tries.session_manager, redact=tries.redact, limits=TryLimits())
    try:
        held = await own.warm.acquire(km.kernel_id, NOTEBOOK)  # a try's lease, never released
        w = own.warm.watches[km.kernel_id]
        own.warm._retire(w)  # replaced (as after a cell) while the lease is held
        current = await own.warm.acquire(km.kernel_id, NOTEBOOK)
        assert current.root is not held.root and held.root.retired and not held.root.closed
        roots = (held.root, current.root)
        pids = [r.node.pid for r in roots]
        await own.shutdown()
        assert all(r.closed for r in roots)
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
        assert all(r.kernel.kc is None for r in roots)  # each root's kernel client closed (ClientHandle)
    finally:
        kc.stop_channels()
