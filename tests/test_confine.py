"""Confinement of kernel copies: Landlock, rlimits, timeouts, reporting.

Real denials are tested where this machine's kernel supports Landlock (the
tests say so when skipped); the reporting of missing protections is tested
everywhere.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import psutil
import pytest
from jupyter_client import KernelManager

from jupyter_data_agent.kernel.copy import confine, harden
from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
from jupyter_data_agent.kernel.results import Limits, Protections

pytestmark = pytest.mark.timeout(300)

ABI = confine.landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="Landlock is not available on this kernel "
                                                    "(only the reporting can be tested)")
needs_net = pytest.mark.skipif(ABI < 4, reason=f"Landlock ABI {ABI} < 4: no network rules")
needs_scope = pytest.mark.skipif(ABI < 6, reason=f"Landlock ABI {ABI} < 6: no signal scoping")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    nb = tmp_path_factory.mktemp("notebook")
    (nb / "data.csv").write_text("a,b\n1,2\n3,4\n")
    (nb / "keep.txt").write_text("original")
    (nb / "sub").mkdir()
    (nb / "sub" / "inner.txt").write_text("inner")
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(nb))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    reply = kc.execute("import pandas as pd, numpy as np", reply=True, timeout=120)
    assert reply["content"]["status"] == "ok"
    yield km, kc, nb
    kc.stop_channels()
    km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def tree(kernel):
    _, kc, nb = kernel
    t = SnapshotTree.from_blocking_client(
        kc, notebook_dir=str(nb),
        limits=Limits(timeout_s=60, cpu_s=60, memory_extra_bytes=1 << 30))
    yield t
    t.close()


def running(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ------------------------------------------------------------------ reporting

def test_protections_are_reported(tree):
    p = tree.protections
    assert p.timeout and p.rlimit_cpu and p.rlimit_as and p.rlimit_fsize
    assert p.landlock_abi == ABI
    assert p.landlock_fs == (ABI >= 1)
    assert p.landlock_net == (ABI >= 4)
    assert p.scratch == tree.scratch and os.path.isdir(tree.scratch)
    assert Protections.from_json(p.to_json()) == p
    assert "landlock_fs=" in p.summary()


def test_missing_landlock_is_reported(kernel):
    """A copy without Landlock says so (what callers show the user)."""
    _, kc, nb = kernel
    with SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb),
                                           limits=Limits(landlock=False)) as t:
        p = t.protections
        assert not p.landlock_fs and not p.landlock_net and not p.complete
        assert set(p.missing()) == {"landlock_fs", "landlock_net"}
        assert p.reasons["landlock_fs"] == "disabled by configuration"
        assert "landlock_fs=OFF" in p.summary() and "disabled" in p.summary()
        assert t.root.fork().exec("1 + 1").value.value == 2


def test_unavailable_landlock_degrades_gracefully():
    fs, net, scope, notes = confine.apply_landlock(["/tmp"], True, abi=0)
    assert (fs, net, scope) == (False, False, False) and "unavailable" in notes[0]
    p = Protections(rlimit_cpu=True, rlimit_fsize=True, timeout=True, seccomp=True,
                    capabilities=True, descriptors=True, shared_mappings=True, secrets=True,
                    processes="subreaper", notes=notes)
    assert p.missing() == ["landlock_fs", "landlock_net", "limits"]


def test_the_verdict_says_nothing_ran_before_anything_did():
    """Sent before the first candidate runs: present tense, not "every candidate ran"."""
    from dataclasses import fields, replace

    from jupyter_data_agent.kernel.host.policy import decide

    every = Protections(processes="subreaper", **{f.name: True for f in fields(Protections)
                                                   if f.type in (bool, "bool")})
    assert not every.missing()
    statuses = set()
    for protections in (every, replace(every, seccomp=False)):
        for policy in ("require", "warn"):
            verdict = decide(protections, policy)
            statuses.add(verdict.status)
            assert " ran " not in f" {verdict.message} ", verdict.message
    assert statuses == {"confined", "partial", "not_executed"}


# ------------------------------------------------------------------ filesystem

def test_relative_reads_of_notebook_files_work(tree):
    c = tree.root.fork()
    r = c.exec("import os\n(pd.read_csv('data.csv').a.sum(), open('sub/inner.txt').read(), "
               "os.getcwd())")
    assert r.ok, r.text()
    total, inner, cwd = r.value.value
    assert (total, inner) == (4, "inner") and cwd == tree.scratch
    c.close()


@needs_landlock
def test_write_outside_scratch_fails_and_file_is_untouched(tree, kernel):
    _, _, nb = kernel
    c = tree.root.fork()
    for code in ("open('keep.txt', 'w').write('clobbered')",  # via the scratch symlink
                 f"open({str(nb / 'keep.txt')!r}, 'a').write('x')",
                 f"open({str(nb / 'new.txt')!r}, 'w').write('x')",
                 "import os; os.remove('sub/inner.txt')",
                 "open('/tmp/jda-escape.txt', 'w').write('x')",
                 "pd.DataFrame({'a': [1]}).to_csv('sub/out.csv')"):
        r = c.exec(code)
        assert r.status == "error" and r.ename == "PermissionError", (code, r.text())
        assert "Permission denied" in r.evalue
    assert (nb / "keep.txt").read_text() == "original"
    assert (nb / "sub" / "inner.txt").read_text() == "inner"
    assert not (nb / "new.txt").exists() and not (nb / "sub" / "out.csv").exists()
    assert not os.path.exists("/tmp/jda-escape.txt")
    c.close()


def test_write_inside_scratch_works(kernel):
    _, kc, nb = kernel
    # own tree: deleting a linked name changes this search's scratch only
    tree = SnapshotTree.from_blocking_client(kc, notebook_dir=str(nb))
    c = tree.root.fork()
    r = c.exec("df = pd.read_csv('data.csv')\ndf.to_csv('result.csv', index=False)\n"
               "import tempfile\nwith tempfile.NamedTemporaryFile() as f: f.write(b'x')\n"
               "import os; os.remove('keep.txt')  # only the link in scratch\n"
               "pd.read_csv('result.csv').shape")
    assert r.ok, r.text()
    assert r.value.value == [2, 2]
    assert os.path.exists(os.path.join(tree.scratch, "result.csv"))
    assert not (nb / "result.csv").exists() and (nb / "keep.txt").read_text() == "original"
    tree.close()
    assert not os.path.exists(tree.scratch)


# ------------------------------------------------------------------ network, signals

@needs_net
def test_network_connections_are_denied(tree, kernel):
    _, kc, _ = kernel
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        reply = kc.execute(f"import socket; socket.create_connection(('127.0.0.1', {port})).close()",
                           reply=True, timeout=60)
        assert reply["content"]["status"] == "ok"  # the kernel itself may connect
        srv.accept()[0].close()
        c = tree.root.fork()
        r = c.exec(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)")
        assert r.status == "error" and r.ename == "PermissionError", r.text()
        r = c.exec("s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()")
        assert r.status == "error" and r.ename == "PermissionError", r.text()
        c.close()
    finally:
        srv.close()


@needs_scope
def test_copies_cannot_signal_the_kernel_or_their_parent(tree, kernel):
    km, kc, _ = kernel
    kernel_pid = km.provisioner.process.pid
    p = tree.root.fork()
    c = p.fork()
    r = c.exec(f"import os, signal; os.kill({kernel_pid}, signal.SIGKILL)")
    assert r.ename == "PermissionError"
    r = c.exec("os.kill(os.getppid(), signal.SIGKILL)")
    assert r.ename == "PermissionError"
    assert km.is_alive() and p.ping()
    assert c.exec("os.kill(os.getpid(), 0)").ok  # itself: fine
    p.close()


# ------------------------------------------------------------------ limits

def test_infinite_loop_is_killed_at_timeout(tree):
    c = tree.root.fork()
    pid = c.pid
    t0 = time.monotonic()
    r = c.exec("while True:\n    pass", timeout=3)
    assert time.monotonic() - t0 < 30
    assert r.status == "timeout" and r.limit == "timeout" and r.ename == "TimeoutError"
    assert "3 s" in r.evalue and c.state == "dead"
    for _ in range(200):
        if not running(pid):
            break
        time.sleep(0.05)
    assert not running(pid)
    # the tree is unaffected, and the node can be rebuilt on demand
    assert tree.root.fork().exec("1").ok
    assert c.exec("2").value.value == 2 and c.rebuilds == 1
    c.close()


def test_cpu_limit_interrupts_the_cell(kernel):
    _, kc, nb = kernel
    with SnapshotTree.from_blocking_client(
            kc, notebook_dir=str(nb), limits=Limits(timeout_s=120, cpu_s=2)) as t:
        c = t.root.fork()
        r = c.exec("try:\n    while True: pass\nexcept Exception:\n    pass")
        assert r.status == "error" and r.ename == "CPUTimeLimitExceeded", r.text()
        assert r.limit == "cpu"
        assert c.exec("'still alive'").value.value == "still alive"


def test_memory_bomb_hits_the_limit(tree):
    c = tree.root.fork()
    r = c.exec("hog = []\nwhile True:\n    hog.append(bytearray(64 << 20))")
    assert r.status == "error" and r.ename == "MemoryError" and r.limit == "memory", r.text()
    assert c.exec("n = len(hog); del hog; n").value.value < 20  # ~1 GiB allowance
    assert c.exec("x = np.ones(10**6).sum(); x").ok  # usable again
    c.close()


def test_timeout_in_nested_node_kills_its_subtree_only(tree):
    a = tree.root.fork()
    b = a.fork()
    sib = tree.root.fork()
    pids = [a.pid, b.pid]
    r = a.exec("import time\ntime.sleep(60)", timeout=2)
    assert r.status == "timeout" and a.state == "dead" and b.state == "dead"
    for _ in range(200):
        if not any(running(p) for p in pids):
            break
        time.sleep(0.05)
    assert not any(running(p) for p in pids)
    assert sib.exec("1").ok
    sib.close()


def test_user_interrupt_does_not_reach_copies(tree, kernel):
    km, _, _ = kernel
    c = tree.root.fork()
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", c.exec(
        "import time\ntime.sleep(2)\n'ok'")))
    th.start()
    time.sleep(0.5)
    km.interrupt_kernel()
    th.join(60)
    assert box["r"].ok and box["r"].value.value == "ok"
    c.close()


# ------------------------------------------------------------------ the environment's allow-list

def test_environment_allow_list():
    """What a copy's environment keeps: listed names and prefixes, unless the name
    looks secret or the value carries credentials; everything else goes."""
    env = {"PATH": "/usr/bin", "LC_ALL": "C", "NLTK_DATA": "/data/nltk", "CONDA_PREFIX": "/c",
           "DB_PWD": "x", "GITHUB_PAT": "x", "API_PASS": "x", "SLACK_WEBHOOK_URL": "x",
           "CONDA_TOKEN": "x", "SPARK_HOME": "https://user:pw@host/", "JPY_SESSION_NAME": "x",
           "SOME_SETTING": "x", "PWD": "/home/u"}
    gone = harden.unkept_env_names(env)
    assert sorted(gone) == sorted(["DB_PWD", "GITHUB_PAT", "API_PASS", "SLACK_WEBHOOK_URL",
                                   "CONDA_TOKEN", "SPARK_HOME", "JPY_SESSION_NAME",
                                   "SOME_SETTING"])
    assert {"DB_PWD", "GITHUB_PAT", "API_PASS", "SLACK_WEBHOOK_URL", "CONDA_TOKEN",
            "SPARK_HOME"} <= set(harden.secret_env_names(env))  # these are wiped from memory too


def test_secrets_are_wiped_without_touching_pages_that_hold_nothing():
    """The wipe finds a secret in private anonymous memory and reads only pages that hold data:
    a page never written stays unmapped (reading it would map the zero page, and each later
    fork of a root copies every such entry)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page, pages = harden._PAGE, 64
    base = libc.mmap(None, pages * page, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    secret = b"not-a-real-key-7f3a9c"
    try:
        ctypes.memmove(base + 5 * page - 7, secret, len(secret))  # across pages 4 and 5
        ctypes.memset(base + 40 * page, 1, 1)
        pagemap = harden._open_pagemap()
        assert pagemap is not None
        try:
            runs = harden.held_runs(pagemap, base, base + pages * page)
            assert runs == [(base + 4 * page, base + 6 * page), (base + 40 * page, base + 41 * page)]
            assert harden.wipe_memory([secret]) >= 1
            assert ctypes.string_at(base + 5 * page - 7, len(secret)) == bytes(len(secret))
            assert harden.held_runs(pagemap, base, base + pages * page) == runs  # nothing else mapped
        finally:
            os.close(pagemap)
        assert harden.held_runs(None, base, base + page) == [(base, base + page)]
    finally:
        libc.munmap(base, pages * page)
