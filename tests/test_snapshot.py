"""Fork snapshot tree against real ipykernel processes.

Kernels are module-scoped (starting one costs seconds on a slow machine);
every test forks its own copies from the shared root, so tests stay
independent. Fixtures live here, not in conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import threading
import time

import psutil
import pytest
from jupyter_client import AsyncKernelClient

from jupyter_data_agent.kernel.forktree.snapshot import CapacityError, SnapshotClosed, SnapshotTree
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.results import ExecResult, Limits

pytestmark = pytest.mark.timeout(300)

SETUP = """
import pandas as pd, numpy as np
df = pd.DataFrame({"x": [1, 2, 3], "y": ["a", "b", "c"]})
counter = 10
lst = [1, 2, 3]
"""


def run_kernel(kc, code, timeout=120):
    """Execute in the user's kernel; return (status, visible output text)."""
    out = []

    def hook(msg):
        t, c = msg["msg_type"], msg["content"]
        if t == "stream":
            out.append(c["text"])
        elif t in ("execute_result", "display_data"):
            out.append(c["data"].get("text/plain", "") + "\n")
        elif t == "error":
            out.append(f"{c['ename']}: {c['evalue']}\n")

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return reply["content"]["status"], "".join(out)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_not_running(pids, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(running(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(running(p) for p in pids)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    nb = tmp_path_factory.mktemp("notebook")
    (nb / "data.csv").write_text("a,b\n1,2\n3,4\n")
    km, kc = start_kernel(cwd=nb)
    status, out = run_kernel(kc, SETUP)
    assert status == "ok", out
    yield km, kc, nb
    stop_kernel(km, kc)


@pytest.fixture(scope="module")
def tree(kernel):
    km, kc, nb = kernel
    t = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb),
                                          limits=Limits(timeout_s=60))
    yield t
    t.close()


def value(res: ExecResult):
    assert res.status == "ok", (res.ename, res.evalue, res.text())
    return res.value.value


# ------------------------------------------------------------------ state

def test_copy_sees_kernel_variables(tree):
    c = tree.root.fork()
    assert value(c.exec("counter, list(df.shape), lst")) == [10, [3, 2], [1, 2, 3]]
    c.close()


def test_changes_in_copy_stay_in_copy(tree, kernel):
    _, kc, _ = kernel
    a = tree.root.fork()
    b = tree.root.fork()
    r = a.exec("counter = 99\ndf['x'] += 100\ndf.loc[0, 'y'] = 'zzz'\ndel lst\n"
               "import json as jjj_mod\n")
    assert r.ok, r.text()
    assert value(a.exec("counter, df.x.tolist(), 'lst' in dir(), 'jjj_mod' in dir()")) == \
        [99, [101, 102, 103], False, True]
    # sibling copy: untouched
    assert value(b.exec("counter, df.x.tolist(), df.y[0], 'lst' in dir(), 'jjj_mod' in dir()")) \
        == [10, [1, 2, 3], "a", True, False]
    # the user's kernel: untouched
    status, out = run_kernel(kc, "print(counter, df.x.tolist(), df.y[0], 'lst' in dir(), "
                                 "'jjj_mod' in dir())")
    assert status == "ok" and out.strip() == "10 [1, 2, 3] a True False"
    a.close()
    b.close()


def test_child_of_child_sees_parent_changes(tree):
    c = tree.root.fork()
    assert c.exec("counter = 50\nnew_var = 'p'").ok
    g = c.fork()
    assert value(g.exec("counter, new_var")) == [50, "p"]
    assert g.exec("counter = 51\nnew_var = 'g'").ok
    assert value(c.exec("counter, new_var")) == [50, "p"]
    # the parent's cells after the fork are not part of the child's state
    assert g.lineage() == ["counter = 50\nnew_var = 'p'", "counter, new_var",
                           "counter = 51\nnew_var = 'g'"]
    c.close()
    assert g.state == "closed" and c.state == "closed"


def test_a_cell_says_what_it_changed_in_the_namespace_in_its_own_answer(tree):
    """``exec(namespace=True)``: new, changed and deleted variables come with the cell's result
    (``copy.namespace_diff``); the fingerprint after it is kept outside the user's namespace and
    inherited by a fork, and a cell run without asking drops it (the next diff is still right)."""
    def names(res):
        ns = res.namespace
        return {k: [v["name"] for v in ns[k]] for k in ("new", "changed", "deleted")}

    c = tree.root.fork()
    first = c.exec("counter = 11\nlst.append(4)\ndel df\nfresh = pd.Series([1, 2])", namespace=True)
    assert first.ok and names(first) == {"new": ["fresh"], "changed": ["counter", "lst"], "deleted": ["df"]}
    assert [v["shape"] for v in first.namespace["new"]] == [[2]] and first.namespace["truncated"] is False
    g = c.fork()  # starts from the fingerprint its parent kept
    assert names(g.exec("lst = 'x'", namespace=True)) == {"new": [], "changed": ["lst"], "deleted": []}
    assert g.exec("counter = 12").namespace is None  # not asked: none, and the kept one is dropped
    assert names(g.exec("z = counter", namespace=True)) == {"new": ["z"], "changed": [], "deleted": []}
    assert value(g.exec("[k for k in globals() if 'jda' in k.lower()]")) == []
    c.close()


def test_copies_run_at_lower_priority_than_the_kernel(tree, kernel):
    """Copies yield the cores to the model and the user's kernel: niceness ``Limits.nice``,
    inherited by a copy's copies; the user's kernel keeps its own."""
    _, kc, _ = kernel
    status, out = run_kernel(kc, "import os\nprint(os.getpriority(os.PRIO_PROCESS, 0))")
    assert status == "ok"
    own = int(out.strip())  # the user's kernel: as it was started (0 unless the tests run niced)
    assert own == os.getpriority(os.PRIO_PROCESS, 0)
    c = tree.root.fork()
    want = max(own, Limits().nice)
    assert Limits().nice == 10 and want > own or own >= 10
    assert value(c.exec("import os\nos.getpriority(os.PRIO_PROCESS, 0)")) == want
    g = c.fork()
    assert value(g.exec("os.getpriority(os.PRIO_PROCESS, 0)")) == want
    c.close()


# ------------------------------------------------------------------ outputs

def test_outputs_like_a_notebook_cell(tree):
    c = tree.root.fork()
    r = c.exec("print('hello')\nimport sys; print('warn', file=sys.stderr)\n"
               "from IPython.display import display, Markdown\n"
               "display(Markdown('**md**'))\n"
               "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\n"
               "df")
    assert r.ok, r.text()
    types = [o.output_type for o in r.outputs]
    assert "stream" in types and "display_data" in types and "execute_result" in types
    assert r.stream("stdout") == "hello\n"
    assert r.stream("stderr") == "warn\n"
    md = [o for o in r.outputs if "text/markdown" in o.data]
    assert md and md[0].data["text/markdown"] == "**md**"
    result = [o for o in r.outputs if o.output_type == "execute_result"][0]
    assert "text/plain" in result.data and "<table" in result.data["text/html"]
    pngs = [o for o in r.outputs if "image/png" in o.data]
    assert len(pngs) == 1 and len(pngs[0].data["image/png"]) > 1000
    assert r.value.type == "pandas.DataFrame" and r.value.shape == [3, 2]
    assert r.value.value["columns"] == ["x", "y"]
    assert r.outputs[0].to_json()["text"] == "hello\n"
    c.close()


def test_error_output(tree):
    c = tree.root.fork()
    r = c.exec("x = 1\n{}['missing']")
    assert r.status == "error" and r.ename == "KeyError" and r.evalue == "'missing'"
    err = r.outputs[-1]
    assert err.output_type == "error" and err.traceback
    # state up to the error is kept, like in a notebook
    assert value(c.exec("x")) == 1
    r = c.exec("def f(:\n  pass")
    assert r.status == "error" and r.ename == "SyntaxError"
    c.close()


def test_value_handles_and_semicolon(tree):
    c = tree.root.fork()
    v = c.exec("df.x * 2").value
    assert v.type == "pandas.Series" and v.shape == [3] and v.value["values"] == [2, 4, 6]
    v = c.exec("np.arange(6).reshape(2, 3)").value
    assert v.type == "numpy.ndarray" and v.shape == [2, 3] and v.value == [0, 1, 2, 3, 4, 5]
    assert value(c.exec("3.5")) == 3.5
    r = c.exec("counter;")
    assert r.ok and r.value is None and not any(o.output_type == "execute_result"
                                                for o in r.outputs)
    c.close()


def test_output_is_bounded(tree):
    c = tree.root.fork()
    r = c.exec("print('x' * 300000)\nfor i in range(300): display(i)")
    limit = tree.limits.max_output_chars
    assert r.truncated
    assert len(r.stream()) < limit + 200 and "more chars truncated]" in r.stream()
    assert len(r.outputs) <= tree.limits.max_outputs + 2
    c.close()


def test_fd_level_output_captured_and_kernel_iopub_clean(tree, kernel):
    _, kc, _ = kernel
    while True:  # drain
        try:
            kc.get_iopub_msg(timeout=0.2)
        except Exception:
            break
    c = tree.root.fork()
    r = c.exec("print('LEAKPY')\nimport os\nos.system('echo LEAKFD')\n"
               "os.write(2, b'LEAKRAW\\n')\nNone")
    assert "LEAKPY" in r.stream("stdout") and "LEAKFD" in r.stream("stdout")
    assert "LEAKRAW" in r.stream("stderr")
    seen = []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            seen.append(json.dumps(kc.get_iopub_msg(timeout=0.3)["content"]))
    assert not any("LEAK" in s for s in seen)
    c.close()


def test_process_death_is_reported_and_node_rebuilt(tree):
    c = tree.root.fork()
    assert c.exec("before = 1").ok
    r = c.exec("import os; os._exit(3)")
    assert r.status == "died" and "exited with status 3" in r.evalue, r.evalue
    assert c.state == "dead"
    assert value(c.exec("before")) == 1 and c.rebuilds == 1
    c.close()


def test_interrupt_ends_the_cell_not_the_copy(tree):
    c = tree.root.fork()
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", c.exec(
        "import time\ntime.sleep(60)")))
    th.start()
    while th.is_alive():
        time.sleep(0.5)
        c.interrupt()
    th.join()
    assert box["r"].status == "error" and box["r"].ename == "KeyboardInterrupt"
    assert value(c.exec("'alive'")) == "alive"
    c.close()


def test_input_is_refused(tree):
    c = tree.root.fork()
    r = c.exec("input('name?')")
    assert r.status == "error" and "not available" in r.evalue
    c.close()


# ------------------------------------------------------------------ kernel unaffected

def test_kernel_keeps_executing_during_and_after_search(tree, kernel):
    km, kc, _ = kernel
    c = tree.root.fork()
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", c.exec(
        "import time\ntime.sleep(3)\n'done'")))
    t.start()
    time.sleep(0.3)
    status, out = run_kernel(kc, "kernel_side = counter + 32\nprint(kernel_side)")
    assert status == "ok" and out.strip() == "42"
    km.interrupt_kernel()  # the user's interrupt must not reach copies
    t.join(60)
    assert box["r"].ok and box["r"].value.value == "done"
    assert value(c.exec("'kernel_side' in dir()")) is False
    c.close()
    status, out = run_kernel(kc, "print(kernel_side, counter)")
    assert status == "ok" and out.strip() == "42 10"


# ------------------------------------------------------------------ lifecycle

def test_eviction_and_rebuild(kernel):
    _, kc, nb = kernel
    t = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb), max_live=3)
    try:
        a = t.root.fork()
        b = t.root.fork()
        assert a.exec("v = 'a'").ok and b.exec("v = 'b'").ok
        a.priority, b.priority = 0.9, 0.1  # b is the least useful leaf
        c = t.root.fork()  # cap 3 reached: evicts b
        assert b.state == "evicted" and a.is_live and c.is_live
        assert len(t.live()) == 3 and t.evictions == 1
        # rebuilt from the root by replaying its cells (evicting another leaf)
        assert value(b.exec("v")) == "b"
        assert b.is_live and b.rebuilds == 1 and len(t.live()) == 3
        assert b.cells == ["v = 'b'", "v"]
    finally:
        t.close()


def test_rebuild_replays_evicted_ancestors(kernel):
    _, kc, nb = kernel
    t = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb), max_live=4)
    try:
        a = t.root.fork()
        assert a.exec("depth1 = 1").ok
        b = a.fork()
        assert b.exec("depth2 = depth1 + 1").ok
        t._evict(b)
        t._evict(a)
        assert a.state == b.state == "evicted"
        assert value(b.exec("depth1, depth2")) == [1, 2]
        assert a.state == "evicted"  # only the node asked for is rebuilt
        # a parent that moved on after the fork is not a valid base
        p = t.root.fork()
        assert p.exec("w = 1").ok
        q = p.fork()
        assert p.exec("w = 2").ok
        t._evict(q)
        assert value(q.exec("w")) == 1
    finally:
        t.close()


def test_memory_watch_evicts_least_useful_leaf(kernel):
    _, kc, nb = kernel
    t = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb), memory_budget=10 << 30)
    try:
        keep = t.root.fork()
        drop = t.root.fork()
        keep.priority, drop.priority = 1.0, 0.0
        for n in (keep, drop):
            assert n.exec("big = np.ones(40_000_000 // 8)").ok  # ~40 MB private
        usage = t.memory_usage()
        assert usage[drop.id] > 30e6 and usage[keep.id] > 30e6
        t.memory_budget = usage["root"] + usage[keep.id] + 10_000_000
        assert t.check_memory() == 1
        assert drop.state == "evicted" and keep.is_live
    finally:
        t.close()


def test_capacity_error_when_nothing_can_be_evicted(kernel):
    _, kc, nb = kernel
    t = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb), max_live=2)
    try:
        a = t.root.fork()
        a.pinned = True
        with pytest.raises(CapacityError):
            t.root.fork()
        a.pinned = False
        a.close()
        old = SnapshotTree.max_processes
        SnapshotTree.max_processes = len(SnapshotTree._global_live)  # process-wide cap
        try:
            with pytest.raises(CapacityError):
                t.root.fork()
        finally:
            SnapshotTree.max_processes = old
    finally:
        t.close()


def test_cancel_leaves_no_processes(kernel):
    _, kc, nb = kernel
    t = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb))
    a = t.root.fork()
    b = a.fork()
    c = b.fork()
    t.root.fork()
    busy = a.fork()
    th = threading.Thread(target=lambda: busy.exec("import time; time.sleep(30)"))
    th.start()
    time.sleep(0.5)
    pids = t.pids()
    assert len(pids) == 6 and all(running(p) for p in pids)
    t.close()
    th.join(30)
    for p in pids:  # killed and reaped by their parents: not even zombies
        assert not psutil.pid_exists(p) or not running(p)
    assert wait_not_running(pids, 1)
    assert not os.path.exists(t.scratch)
    with pytest.raises(SnapshotClosed):
        c.exec("1")
    with pytest.raises(SnapshotClosed):
        t.root.fork()


def test_dead_kernel_leaves_no_orphans(tmp_path):
    km, kc = start_kernel(cwd=tmp_path)
    try:
        t = SnapshotTree.from_blocking_client(kc, notebook_dir=str(tmp_path))
        a = t.root.fork()
        a.fork().fork()
        t.root.fork()
        pids = t.pids()
        assert len(pids) == 5
        os.kill(km.provisioner.process.pid, signal.SIGKILL)
        assert wait_not_running(pids, 20), [p for p in pids if running(p)]
        r = a.exec("1")
        assert r.status == "died"
        t.close()
    finally:
        stop_kernel(km, kc)


async def test_fork_through_an_async_kernel_client(kernel):
    """The server's path: the root request on its loop, the copies from threads."""
    km, _, nb = kernel
    akc = AsyncKernelClient()
    akc.load_connection_info(km.get_connection_info())
    akc.start_channels()
    try:
        t = await SnapshotTree.from_kernel_client(akc, notebook_dir=str(nb))
        with t:
            a, b = await asyncio.gather(*(asyncio.to_thread(t.root.fork) for _ in range(2)))
            ra, rb = await asyncio.gather(asyncio.to_thread(a.exec, "counter * 2"),
                                          asyncio.to_thread(b.exec, "counter * 3"))
            assert ra.value.value == 20 and rb.value.value == 30
            pids = t.pids()
        assert wait_not_running(pids, 10)
    finally:
        akc.stop_channels()


def test_in_kernel_path_for_the_magic(kernel):
    """The %%agent magic forks the kernel it runs in (socketpair, sync API)."""
    _, kc, _ = kernel
    code = """
import json as _json
from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree as _ST
from jupyter_data_agent.kernel.results import Limits as _L
_t = _ST.from_current_kernel(limits=_L(timeout_s=60))
_c = _t.root.fork()
_r1 = _c.exec("magic_var = counter + 113\\nprint('from copy')\\nmagic_var")
_g = _c.fork()
_r2 = _g.exec("magic_var + 1")
_r3 = _g.exec("while True: pass", timeout=2)
_pids = _t.pids()
_t.close()
print(_json.dumps({"r1": _r1.to_json(), "r2": _r2.to_json(), "r3": _r3.status,
                   "pids": _pids, "prot": _t.protections.to_json(),
                   "magic_var": "magic_var" in dir()}))
"""
    status, out = run_kernel(kc, code)
    assert status == "ok", out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out  # only the magic's own print reached the notebook
    d = json.loads(lines[0])
    assert d["r1"]["value"]["value"] == 123 and "from copy" in d["r1"]["outputs"][0]["text"]
    assert d["r2"]["value"]["value"] == 124
    assert d["r3"] == "timeout"
    assert d["magic_var"] is False
    assert wait_not_running(d["pids"], 10)
    status, out = run_kernel(kc, "del _t, _c, _g, _r1, _r2, _r3, _pids\nprint(counter)")
    assert status == "ok" and out.strip() == "10"
