"""Replay sandbox: the fallback (and benchmark baseline) with the fork tree's
interface, against real ipykernel processes."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from jupyter_data_agent.kernel.copy import confine
from jupyter_data_agent.kernel.forktree.snapshot import ForkUnavailable, SnapshotClosed, SnapshotTree
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.host.replay import ReplayTree
from jupyter_data_agent.kernel.results import Limits
from jupyter_data_agent.kernel.tree import CopyTree, Executor

pytestmark = pytest.mark.timeout(600)

CELLS = ["import pandas as pd\ndf = pd.read_csv('data.csv')",
         "total = int(df.a.sum())\nprint('replayed', total)",
         "undefined_name  # an erroring notebook cell is replayed too"]


def running(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    nb = tmp_path_factory.mktemp("notebook")
    (nb / "data.csv").write_text("a,b\n1,2\n3,4\n")
    (nb / "keep.txt").write_text("original")
    return nb


@pytest.fixture(scope="module")
def tree(notebook):
    t = ReplayTree.start(CELLS, notebook_dir=str(notebook), limits=Limits(timeout_s=60))
    yield t
    t.close()


def test_replay_copy_has_the_notebook_state(tree):
    assert tree.root.is_live
    r = tree.root.exec("total, list(df.shape)")
    assert r.ok and r.value.value == [4, [2, 2]]


def test_replay_outputs(tree):
    r = tree.root.exec("print('hi')\nfrom IPython.display import display\ndisplay(3)\ndf")
    assert r.ok and r.stream() == "hi\n"
    assert [o.output_type for o in r.outputs] == ["stream", "display_data", "execute_result"]
    assert "<table" in r.outputs[-1].data["text/html"]
    assert r.value.type == "pandas.DataFrame"
    r = tree.root.exec("1/0")
    assert r.status == "error" and r.ename == "ZeroDivisionError"


def test_replay_fork_is_isolated(tree):
    c = tree.root.fork()
    assert c.is_live and c.pid != tree.root.pid
    assert c.exec("total").value.value == 4
    assert c.exec("total = -1").ok
    g = c.fork()  # replays the notebook, then c's cells
    assert g.exec("total").value.value == -1
    assert tree.root.exec("total").value.value == 4
    pids = [c.pid, g.pid]
    c.close()  # closes its subtree
    assert g.state == "closed"
    assert not any(running(p) for p in pids)
    with pytest.raises(SnapshotClosed):
        g.exec("1")


@pytest.mark.skipif(confine.landlock_abi() < 1, reason="Landlock unavailable on this kernel")
def test_replay_kernel_is_confined(tree, notebook):
    assert tree.protections.landlock_fs
    r = tree.root.exec("open('keep.txt', 'w').write('x')")
    assert r.ename == "PermissionError"
    assert (notebook / "keep.txt").read_text() == "original"
    assert tree.root.exec("open('out.txt', 'w').write('x')").ok
    assert os.path.exists(os.path.join(tree.scratch, "out.txt"))


def test_replay_timeout_kills_the_kernel(notebook):
    with ReplayTree.start(CELLS[:1], notebook_dir=str(notebook)) as t:
        pid = t.root.pid
        r = t.root.exec("while True: pass", timeout=3)
        assert r.status == "timeout" and t.root.state == "dead"
        time.sleep(0.5)
        assert not running(pid)


def test_fork_refused_names_why_and_both_trees_are_copy_trees(notebook, tree):
    """A kernel that cannot fork (os.fork removed) says why; a replay tree stands in."""
    km, kc = start_kernel(cwd=notebook)
    try:
        with SnapshotTree.from_blocking_client(kc, notebook_dir=str(notebook)) as ft:
            assert isinstance(ft, CopyTree) and ft.kind == "fork" and ft.fallback_reason is None
            assert isinstance(ft.root, Executor)
        assert kc.execute("import os\ndel os.fork", reply=True, timeout=60)["content"]["status"] == "ok"
        with pytest.raises(ForkUnavailable, match="cannot fork this kernel: .*fork"):
            SnapshotTree.from_blocking_client(kc, notebook_dir=str(notebook))
    finally:
        stop_kernel(km, kc)
    assert isinstance(tree, CopyTree) and tree.kind == "replay" and isinstance(tree.root, Executor)
    assert tree.protections.notes[0].startswith("replay sandbox")


# Expansions as an MCTS makes them: the node expanded (a path of child indices
# from the root) gets three children at once, each forked and run in parallel.
EXPANSIONS = [(), (0,), (0, 1), (2,), (0, 1, 2), (1,)]


def test_replay_tree_evicts_and_rebuilds_18_nodes(notebook):
    """max_live=4 and 18 nodes (children of children, evicted parents expanded,
    evicted nodes run again): every node's state is its lineage's, never more
    than 4 kernels live."""
    t = ReplayTree.start(["acc = []"], notebook_dir=str(notebook), max_live=4,
                         limits=Limits(timeout_s=60))
    expected = {t.root: []}
    seen_pids: set[int] = set()
    peak = {"live": 0, "running": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            seen_pids.update(n.pid for n in list(t.nodes.values()) if n.pid)
            peak["live"] = max(peak["live"], len(t.live()))
            peak["running"] = max(peak["running"], sum(map(running, list(seen_pids))))
            time.sleep(0.02)

    def child(parent, number):
        c = parent.fork()
        r = c.exec(f"acc = acc + [{number}]\nsum(acc)")
        return c, r

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t.root.pinned = True  # a pinned copy is never evicted
    root_pid = t.root.pid
    try:
        numbers = iter(range(1, 19))
        with ThreadPoolExecutor(3) as pool:
            for path in EXPANSIONS:
                parent = t.root
                for i in path:
                    parent = parent.children[i]
                batch = [next(numbers) for _ in range(3)]
                for number, (c, r) in zip(batch, pool.map(lambda k, p=parent: child(p, k), batch)):
                    expected[c] = expected[parent] + [number]
                    assert r.ok and r.value.value == sum(expected[c]), (r.ename, r.evalue)
        assert len(expected) == 19 and t.evictions > 0
        # revisit every node: evicted ones are rebuilt by replaying their lineage
        for node, acc in expected.items():
            assert node.exec("acc").value.value == acc, node
        assert sum(n.rebuilds for n in expected) > 0
        # a cell run after a fork is not in the state of the children forked before it
        first, its_child = t.root.children[0], t.root.children[0].children[0]
        assert first.exec("acc = acc + [100]\nacc").value.value == expected[first] + [100]
        assert first.fork().exec("acc").value.value == expected[first] + [100]
        assert its_child.exec("acc").value.value == expected[its_child]
        assert t.root.pid == root_pid and t.root.rebuilds == 0
    finally:
        stop.set()
        sampler.join()
        t.close()
    assert peak["live"] <= 4 and peak["running"] <= 4, peak
    assert len(seen_pids) > 19  # rebuilt kernels are new processes
    assert not any(running(p) for p in seen_pids)
