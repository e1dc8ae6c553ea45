"""Attacks from inside a real copy of a real kernel, one test each.

Every test runs a candidate cell in a kernel copy (the same fork snapshot tree
the server and the magic use) and asserts two things: the attack failed with
a clear error in the candidate's output, and nothing of the user's changed —
the real kernel's namespace, open files, mappings and sqlite connection, its
process (alive, same limits, niceness and affinity), the notebook folder
(contents and metadata) and the Jupyter server. Where an attack needs a
network path, a control runs the same attack code unconfined first and shows
that it really works.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
import urllib.request

import psutil
import pytest

from jupyter_data_agent.kernel.copy import confine, procs, syscall_filter
from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
from jupyter_data_agent.kernel.host.policy import decide
from jupyter_data_agent.kernel.results import Limits
from tests.kernel_helpers import run_cell, start_kernel, stop_kernel

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(confine.landlock_abi() < 6 or not sys.platform.startswith("linux"),
                                 reason="the attacks need Linux with Landlock ABI >= 6")]

SECRET = "sk-jdaescape-" + "7f3a9c1e5b2d4f60a8e1c3b5d7f9a1c3"
TOKEN = "jda-escape-token-5e1f0c9a7b3d2e4f"

# Secrets under names no deny-list knew, and a harmless variable: none is kept in a copy.
UNNAMED_SECRETS = {"DB_PWD": "pwd-5c1e9a7f3b", "GITHUB_PAT": "ghp_4e8a1c6f2b9d",
                   "API_PASS": "pass-7d3f1b9e5a", "SLACK_WEBHOOK_URL": "https://hooks.example/T0/B1",
                   "ANALYSIS_SETTING": "fast", "JDA_UNLISTED_SETTING": "unlisted-value-6d5c4b3a"}

SETUP = """
import os, mmap, sqlite3, numpy as np, pandas as pd
df = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})
fh = open('data.csv'); first = fh.readline()
wf = open('log.txt', 'a')
mfile = open('shared.bin', 'r+b'); mm = mmap.mmap(mfile.fileno(), 0)
nm = np.memmap('memmap.bin', dtype='uint8', mode='r+', shape=(4096,))
con = sqlite3.connect('db.sqlite')
con.execute('create table if not exists t(x)'); con.execute('insert into t values (1)'); con.commit()
"""

STATE = ("__import__('json').dumps({'names': sorted(k for k in globals() if not k.startswith('_')), "
         "'df': __import__('hashlib').sha256(__import__('pickle').dumps(df)).hexdigest(), "
         "'fh': fh.tell(), 'wf': wf.closed, 'mm': bytes(mm[:16]).hex(), "
         "'nm': nm[:16].tolist(), 'rows': con.execute('select count(*) from t').fetchone()[0], "
         "'history': get_ipython().history_manager.db.execute("
         "'select count(*) from history').fetchone()[0]})")


def kernel_state(kc) -> dict:
    reply = kc.execute("", silent=True, store_history=False, user_expressions={"s": STATE},
                       reply=True, timeout=60)
    return json.loads(eval(reply["content"]["user_expressions"]["s"]["data"]["text/plain"]))


def process_state(pid: int) -> dict:
    p = psutil.Process(pid)
    return {"running": p.is_running() and p.status() != psutil.STATUS_ZOMBIE, "nice": p.nice(),
            "affinity": sorted(p.cpu_affinity()),
            "limits": [p.rlimit(r) for r in (psutil.RLIMIT_NOFILE, psutil.RLIMIT_CPU,
                                             psutil.RLIMIT_AS, psutil.RLIMIT_NPROC)]}


def folder_state(folder) -> dict:
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            content = ""
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    content = hashlib.sha256(f.read()).hexdigest()
            try:
                xattrs = sorted(os.listxattr(path, follow_symlinks=False))
            except OSError:
                xattrs = []
            out[os.path.relpath(path, folder)] = (content, st.st_mode, st.st_uid, st.st_gid,
                                                  st.st_mtime_ns, xattrs)
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A notebook folder, a Jupyter server on it, and a real kernel holding user state."""
    nb = tmp_path_factory.mktemp("notebook")
    runtime = tmp_path_factory.mktemp("runtime")
    (nb / "data.csv").write_text("a,b\n1,2\n3,4\n")
    (nb / "analysis.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                   "nbformat_minor": 5}))
    (nb / "shared.bin").write_bytes(b"S" * 4096)
    (nb / "memmap.bin").write_bytes(b"\x07" * 4096)
    (nb / "log.txt").write_text("user log\n")
    port = _free_port()
    env = {"JUPYTER_RUNTIME_DIR": str(runtime), "OPENAI_API_KEY": SECRET,
           "JUPYTER_TOKEN": TOKEN}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "server", "--no-browser", "--allow-root",
         f"--port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={nb}",
         f"--IdentityProvider.token={TOKEN}", "--ServerApp.jpserver_extensions={}"],
        env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    km, kc = start_kernel(env={**env, **UNNAMED_SECRETS}, cwd=str(nb))
    assert run_cell(kc, SETUP).status == "ok"
    yield {"nb": nb, "runtime": runtime, "km": km, "kc": kc, "base": base, "port": port,
           "server": server, "kernel_pid": km.provisioner.process.pid}
    stop_kernel(km, kc)
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="module")
def tree(lab):
    t = SnapshotTree.from_blocking_client(lab["kc"], notebook_dir=str(lab["nb"]),
                                          limits=Limits(timeout_s=60))
    assert t.protections.complete, t.protections.summary()
    yield t
    t.close()


@pytest.fixture()
def unchanged(lab):
    """Snapshot everything of the user's before the attack; compare after it."""
    before = (kernel_state(lab["kc"]), process_state(lab["kernel_pid"]), folder_state(lab["nb"]),
              _server_files(lab))
    yield
    after = (kernel_state(lab["kc"]), process_state(lab["kernel_pid"]), folder_state(lab["nb"]),
             _server_files(lab))
    # the kernel itself saves history in batches: it may grow, never shrink
    assert after[0].pop("history") >= before[0].pop("history"), "history was deleted"
    assert after[0] == before[0], "the real kernel's state changed"
    assert after[1] == before[1], "the real kernel's process changed"
    assert after[2] == before[2], "the notebook folder changed"
    assert after[3] == before[3], "the server's view changed"


def _server_files(lab) -> list:
    with urllib.request.urlopen(f"{lab['base']}/api/contents?token={TOKEN}", timeout=10) as r:
        listing = json.load(r)
    with urllib.request.urlopen(f"{lab['base']}/api/terminals?token={TOKEN}", timeout=10) as r:
        terminals = json.load(r)
    return [sorted((c["name"], c["last_modified"]) for c in listing["content"]), terminals]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def attack(tree, code: str):
    """Run ``code`` as a candidate in a fresh copy; the copy is closed after."""
    copy = tree.root.fork()
    try:
        return copy.exec(textwrap.dedent(code))
    finally:
        copy.close()


def denied(result, *needles: str) -> None:
    text = result.text()
    assert result.status == "error", f"the attack did not fail:\n{text}"
    assert any(n in text for n in needles), text


# --------------------------------------------------------------- the attack code

ZMQ_ATTACK = '''
import hashlib, hmac, json, socket, struct, uuid, datetime

def frame(body, more, command=False):
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body

def execute_request(key, code):
    header = json.dumps({"msg_id": uuid.uuid4().hex, "username": "x", "session": uuid.uuid4().hex,
                         "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                         "msg_type": "execute_request", "version": "5.3"}).encode()
    content = json.dumps({"code": code, "silent": False, "store_history": False,
                          "user_expressions": {}, "allow_stdin": False,
                          "stop_on_error": True}).encode()
    parts = [header, b"{}", b"{}", content]
    sig = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        sig.update(p)
    frames = [b"<IDS|MSG>", sig.hexdigest().encode()] + parts
    return b"".join(frame(f, i < len(frames) - 1) for i, f in enumerate(frames))

GREETING = b"\\xff" + b"\\0" * 8 + b"\\x7f" + b"\\x03\\x00" + b"NULL" + b"\\0" * 16 + b"\\0" + b"\\0" * 31
READY = frame(b"\\x05READY" + b"\\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
              + b"\\x08Identity" + struct.pack(">I", 0), False, command=True)

def talk(sock, key, code, first=None):
    if first is None:
        sock.sendall(GREETING)
    sock.settimeout(10)
    got = b""
    while len(got) < 64:
        got += sock.recv(64 - len(got))
    sock.sendall(READY + execute_request(key, code))
    sock.recv(4096)
    return "sent"
'''


def zmq_attack(kind: str, target, key: bytes, code: str) -> str:
    """Candidate code: a signed execute_request to the kernel's shell port."""
    opener = {
        "tcp": f"s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\ns.connect({target!r})",
        "mptcp": f"s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)\ns.connect({target!r})",
        "unix": f"s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ns.connect({target!r})",
        "tfo": (f"s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
                f"s.sendto(GREETING, 0x20000000, {target!r})"),
    }[kind]
    first = "True" if kind == "tfo" else "None"
    return ZMQ_ATTACK + opener + f"\ntalk(s, {key!r}, {code!r}, first={first})\n"


# --------------------------------------------------------------- network and kernel takeover

def test_control_signed_execute_request_works_unconfined(lab):
    """The attack code is real: run unconfined, it executes code in the kernel."""
    info = lab["km"].get_connection_info()
    target = (info["ip"], info["shell_port"])
    scope: dict = {}
    exec(zmq_attack("tcp", target, info["key"], "PWNED_CONTROL = 1"), scope)
    for _ in range(100):
        if "PWNED_CONTROL" in kernel_state(lab["kc"])["names"]:
            break
        time.sleep(0.05)
    assert "PWNED_CONTROL" in kernel_state(lab["kc"])["names"]
    run_cell(lab["kc"], "del PWNED_CONTROL")


@pytest.mark.parametrize("kind", ["tcp", "mptcp", "tfo"])
def test_signed_execute_request_to_the_shell_port(tree, lab, unchanged, kind):
    info = lab["km"].get_connection_info()
    r = attack(tree, zmq_attack(kind, (info["ip"], info["shell_port"]), info["key"], "PWNED = 1"))
    denied(r, "PermissionError", "Operation not permitted")


def test_signed_execute_request_over_a_unix_socket(tmp_path, unchanged, tree):
    """An IPC-transport kernel: its shell port is a Unix socket file."""
    from jupyter_client import KernelManager

    ipc = KernelManager(kernel_name="python3", transport="ipc",
                        connection_file=str(tmp_path / "kernel-ipc.json"))
    ipc.kernel_spec.argv[0] = sys.executable
    ipc.start_kernel(cwd=str(tmp_path))
    ikc = ipc.client()
    ikc.start_channels()
    try:
        ikc.wait_for_ready(timeout=60)
        info = ipc.get_connection_info()
        path = f"{info['ip']}-{info['shell_port']}"
        scope: dict = {}
        exec(zmq_attack("unix", path, info["key"], "PWNED_IPC = 1"), scope)  # control
        reply = ikc.execute("", user_expressions={"p": "'PWNED_IPC' in globals()"}, reply=True,
                            timeout=30)
        assert reply["content"]["user_expressions"]["p"]["data"]["text/plain"] == "True"
        with SnapshotTree.from_blocking_client(ikc, notebook_dir=str(tmp_path)) as t:
            r = attack(t, zmq_attack("unix", path, info["key"], "PWNED_IPC2 = 1"))
        denied(r, "PermissionError")
        reply = ikc.execute("", user_expressions={"p": "'PWNED_IPC2' in globals()"},
                            reply=True, timeout=30)
        assert reply["content"]["user_expressions"]["p"]["data"]["text/plain"] == "False"
    finally:
        ikc.stop_channels()
        ipc.shutdown_kernel(now=True)


def test_plain_tcp_and_udp_sockets(tree, unchanged):
    r = attack(tree, "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)")
    denied(r, "PermissionError")
    r = attack(tree, "import socket; socket.create_connection(('127.0.0.1', 9))")
    denied(r, "PermissionError")


def test_inherited_sockets_and_eventfds_are_dead(tree, lab, unchanged):
    """Writing every inherited descriptor (the kernel's ZMQ eventfds and
    sockets, capture pipes) once aborted the kernel."""
    r = attack(tree, """
        import os
        links = {}
        for name in os.listdir('/proc/self/fd'):
            try:
                links[int(name)] = os.readlink(f'/proc/self/fd/{name}')
            except OSError:
                pass
        sockets = [fd for fd, link in links.items() if link.startswith('socket:')]
        touched = []
        for fd in range(3, 1024):
            if fd in sockets:  # the copy's own channel to its client
                continue
            try:
                os.write(fd, b'\\x01' * 8)
                touched.append(fd)
            except OSError:
                pass
        print('sockets', len(sockets))
        print('touched', [links.get(fd) for fd in touched])
        raise PermissionError('done')
    """)
    out = r.text()
    assert "sockets 1\n" in out, out
    touched = out.split("touched ", 1)[1].split("\n", 1)[0]
    # only what the copy opened itself may be written: /dev/null and its output capture
    # (the capture: sealed memfds the client sent with the request)
    assert all(x in ("'/dev/null'", "'/memfd:jda-stdout (deleted)'", "'/memfd:jda-stderr (deleted)'")
               for x in touched.strip("[]").split(", ") if x), out
    assert process_state(lab["kernel_pid"])["running"]


def test_server_token_and_rest_api(tree, lab, unchanged):
    runtime = str(lab["runtime"])
    assert any(n.startswith("jpserver-") for n in os.listdir(runtime))
    r = attack(tree, f"""
        import os
        path = [os.path.join({runtime!r}, n) for n in os.listdir({runtime!r}) if n.endswith('.json')][0]
        open(path).read()
    """)
    denied(r, "PermissionError", "Permission denied")
    cf = lab["km"].connection_file
    r = attack(tree, f"open({cf!r}).read()")
    denied(r, "PermissionError", "Permission denied")
    # with the token known anyway: overwrite the notebook, start a terminal
    r = attack(tree, f"""
        import urllib.request, json
        req = urllib.request.Request('{lab['base']}/api/contents/analysis.ipynb?token={TOKEN}',
            method='PUT', data=json.dumps({{'type': 'file', 'format': 'text', 'content': 'x'}}).encode())
        urllib.request.urlopen(req, timeout=5)
    """)
    denied(r, "PermissionError", "Operation not permitted")
    r = attack(tree, f"""
        import urllib.request
        urllib.request.urlopen(urllib.request.Request('{lab['base']}/api/terminals?token={TOKEN}',
                                                      method='POST', data=b''), timeout=5)
    """)
    denied(r, "PermissionError", "Operation not permitted")


# --------------------------------------------------------------- the kernel process

def test_limits_priority_and_affinity_of_the_kernel(tree, lab, unchanged):
    pid = lab["kernel_pid"]
    for code in (f"import resource; resource.prlimit({pid}, resource.RLIMIT_NOFILE, (3, 3))",
                 f"import resource; resource.prlimit({pid}, resource.RLIMIT_CPU, (1, 1))",
                 f"import os; os.setpriority(os.PRIO_PROCESS, {pid}, 19)",
                 "import os; os.setpriority(os.PRIO_USER, 0, 19)",
                 "import os; os.setpriority(os.PRIO_PGRP, 0, 19)",
                 f"import os; os.sched_setaffinity({pid}, {{0}})",
                 f"import os; os.sched_setscheduler({pid}, os.SCHED_IDLE, os.sched_param(0))",
                 f"import os; os.kill({pid}, 9)",
                 f"open('/proc/{pid}/mem', 'rb').read(1)",
                 f"import ctypes; ctypes.CDLL(None).ptrace(16, {pid}, 0, 0) and "
                 f"(_ for _ in ()).throw(PermissionError(ctypes.get_errno(), 'ptrace'))"):
        denied(attack(tree, code), "PermissionError", "Operation not permitted",
               "Permission denied", "ProcessLookupError")


def test_raising_own_hard_limits(tree, unchanged):
    r = attack(tree, "import resource; s, h = resource.getrlimit(resource.RLIMIT_CPU)\n"
                     "resource.setrlimit(resource.RLIMIT_CPU, (h + 100, h + 100))")
    denied(r, "ValueError", "PermissionError", "not allowed")


# --------------------------------------------------------------- the user's handles and memory

def test_users_open_files(tree, unchanged):
    for code in ("fh.read()", "wf.write('forged\\n'); wf.flush()",
                 "import os; os.ftruncate(wf.fileno(), 0)",
                 "import os; os.lseek(fh.fileno(), 0, 2)",
                 "import os; os.write(mfile.fileno(), b'X')"):
        r = attack(tree, code)
        denied(r, "Bad file descriptor", "closed in a kernel copy")
        assert "closed in a kernel copy" in r.text()


def test_users_shared_mappings(tree, lab, unchanged):
    r = attack(tree, "mm[:4] = b'PWND'; mm.flush(); nm[:4] = 66; nm.flush(); "
                     "(bytes(mm[:4]), nm[:4].tolist())")
    # the write lands in the copy's private memory only
    assert r.status in ("ok", "error")
    assert (lab["nb"] / "shared.bin").read_bytes() == b"S" * 4096
    assert (lab["nb"] / "memmap.bin").read_bytes() == b"\x07" * 4096


def test_users_sqlite_connection_and_history(tree, unchanged):
    denied(attack(tree, "con.execute('delete from t'); con.commit()"),
           "disk I/O error", "unable to open", "readonly", "Error")
    denied(attack(tree, "h = get_ipython().history_manager.db\n"
                        "h.execute('delete from history'); h.commit()"),
           "Error", "readonly")


# --------------------------------------------------------------- metadata outside scratch

def test_file_metadata_outside_scratch(tree, lab, unchanged):
    nbf = str(lab["nb"] / "analysis.ipynb")
    for code in (f"import os; os.chmod({nbf!r}, 0)",
                 "import os; os.chmod('analysis.ipynb', 0)",  # through the scratch link
                 f"import os; os.chown({nbf!r}, 65534, 65534)",
                 f"import os; os.utime({nbf!r}, (0, 0))",
                 f"import os; os.setxattr({nbf!r}, 'user.x', b'1')",
                 f"import os; os.removexattr({nbf!r}, 'user.x')",
                 f"import os; fd = os.open({nbf!r}, os.O_RDONLY); os.fchmod(fd, 0)"):
        denied(attack(tree, code), "PermissionError", "Operation not permitted")


# --------------------------------------------------------------- processes and totals

DAEMONS = """
import os, subprocess, time
pids = [subprocess.Popen(['sleep', '600'], start_new_session=True).pid]
r, w = os.pipe()
if os.fork() == 0:          # double fork: the grandchild is a daemon
    os.setsid()
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    os.write(w, str(pid).encode()); os._exit(0)
pids.append(int(os.read(r, 32)))
children = []
for _ in range(100):        # a bounded fork bomb
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children.append(pid)
pids += children
print(pids)
"""


def _all_gone(pids, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_processes_end_with_the_copy(tree, unchanged):
    copy = tree.root.fork()
    r = copy.exec(DAEMONS)
    assert r.ok, r.text()
    pids = json.loads(r.text().strip().splitlines()[-1])
    assert len(pids) == 102 and all(psutil.pid_exists(p) for p in pids)
    copy.close()
    assert _all_gone(pids)


def test_processes_end_when_the_search_is_cancelled(lab, unchanged):
    t = SnapshotTree.from_blocking_client(lab["kc"], notebook_dir=str(lab["nb"]))
    r = t.root.fork().fork().exec(DAEMONS)
    pids = json.loads(r.text().strip().splitlines()[-1])
    t.close()  # what cancel does
    assert _all_gone(pids)
    assert not os.path.exists(t.protections.cgroup or "/nonexistent")


def test_processes_end_after_the_client_is_killed(lab, tmp_path, unchanged):
    """A server killed with SIGTERM (no cleanup at all): the next server's sweep
    ends what its copies started and removes their scratch."""
    info = json.dumps(lab["km"].get_connection_info(), default=lambda b: b.decode())
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        from jupyter_client import BlockingKernelClient
        from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
        kc = BlockingKernelClient(); kc.load_connection_info(json.loads({info!r}))
        kc.session.key = kc.session.key if isinstance(kc.session.key, bytes) else kc.session.key.encode()
        kc.start_channels()
        t = SnapshotTree.from_blocking_client(kc, notebook_dir={str(lab['nb'])!r})
        r = t.root.fork().exec({DAEMONS!r})
        print(json.dumps({{'out': r.text(), 'scratch': t.scratch, 'cgroup': t.protections.cgroup}}),
              flush=True)
        import time; time.sleep(600)
    """))
    client = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              cwd=os.getcwd())
    line = json.loads(client.stdout.readline())
    pids = json.loads(line["out"].strip().splitlines()[-1])
    client.send_signal(signal.SIGTERM)
    client.wait(timeout=30)
    time.sleep(0.5)
    removed = procs.sweep()
    assert _all_gone(pids)
    assert line["scratch"] in removed and not os.path.exists(line["scratch"])
    if line["cgroup"]:  # gone: by the sweep, or by the kernel's own root when it saw the client go
        assert not os.path.exists(line["cgroup"])


def test_output_and_disk_are_bounded(lab, unchanged):
    limits = Limits(max_capture_bytes=1 << 20, max_file_bytes=4 << 20, max_scratch_bytes=6 << 20)
    with SnapshotTree.from_blocking_client(lab["kc"], notebook_dir=str(lab["nb"]),
                                           limits=limits) as t:
        c = t.root.fork()
        r = c.exec("import os\nn = 0\nfor _ in range(1024):\n    try: os.write(1, b'x' * (1 << 20))\n"
                   "    except OSError: break\n    n += 1\nn")
        assert r.truncated and len(r.text()) < 2 << 20
        assert r.value.value <= 1, "C-level output past the bound was written (kept) before it was cut"
        r = c.exec("open('big.bin', 'wb').write(b'0' * (8 << 20))")
        denied(r, "File too large")
        r = c.exec("for i in range(2):\n    open(f'part{i}.bin', 'wb').write(b'0' * (4 << 20 - 1))")
        denied(r, "ScratchQuotaExceeded")
        assert r.limit == "disk"


# --------------------------------------------------------------- secrets

def _memory_hits(pid: int, needles: list[bytes]) -> int:
    """Occurrences of ``needles`` in a live process's readable memory, read from outside."""
    hits = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            rng, perms = line.split()[:2]
            if not perms.startswith("r") or "[v" in line:
                continue
            lo, hi = (int(x, 16) for x in rng.split("-"))
            try:
                mem.seek(lo)
                chunk = mem.read(hi - lo)
            except OSError:
                continue
            hits += sum(chunk.count(n) for n in needles)
    return hits


def test_secrets_are_not_in_the_copy(tree, lab, unchanged):
    """No secret in the copy's environment, its memory (read from outside, every
    region), its kernel session; and nothing of its own ``/proc`` to read them from."""
    key = lab["km"].session.key
    copy = tree.root.fork()
    try:
        r = copy.exec("""
import os
found = {'environ': os.environ.get('OPENAI_API_KEY'), 'token': os.environ.get('JUPYTER_TOKEN')}
s = get_ipython().kernel.session
found['session'] = [bool(s.key), s.auth is not None]
for path in ('/proc/self/environ', '/proc/self/maps', '/proc/self/mem'):
    try:
        open(path, 'rb').read(1)
        found[path] = 'read'
    except PermissionError:
        found[path] = 'denied'
print(found)
""")
        assert r.ok, r.text()
        hits = _memory_hits(copy.pid, [SECRET.encode(), key])
    finally:
        copy.close()
    text = r.text()
    assert "'environ': None" in text and "'token': None" in text, text
    assert "'session': [False, False]" in text, text
    assert text.count("'denied'") == 3, text
    assert hits == 0


# --------------------------------------------------------------- policy and reporting

def test_every_layer_is_reported_on(tree):
    p = tree.protections
    assert p.missing() == [], p.summary()
    assert {layer["name"] for layer in p.layers() if layer["on"]} == set(p.MECHANISMS)
    assert decide(p, "require").status == "confined"


def test_policy_without_seccomp(lab, unchanged):
    with SnapshotTree.from_blocking_client(lab["kc"], notebook_dir=str(lab["nb"]),
                                           limits=Limits(seccomp=False)) as t:
        p = t.protections
        assert p.missing() == ["seccomp"] and p.reasons["seccomp"] == "disabled by configuration"
        strict = decide(p, "require")
        assert not strict.execute and strict.status == "not_executed"
        assert "seccomp" in strict.message and "confinement = 'warn'" in strict.message
        lenient = decide(p, "warn")
        assert lenient.execute and lenient.status == "partial" and lenient.missing == ["seccomp"]
        assert "seccomp" in lenient.line()


def test_missing_libseccomp_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyseccomp", None)
    with pytest.raises(syscall_filter.SeccompUnavailable, match="pip install pyseccomp"):
        syscall_filter.load_binding()


def test_denied_calls_fail_with_eperm_not_a_kill(tree):
    c = tree.root.fork()
    r = c.exec("import socket\ntry:\n    socket.socket()\nexcept PermissionError as e:\n"
               "    print('denied', e.errno)\n1 + 1")
    assert r.ok and "denied 1" in r.text() and r.value.value == 2
    assert c.exec("2 + 2").value.value == 4  # the copy lives on
    c.close()


def test_scratch_is_still_writable_and_notebook_files_readable(tree, unchanged):
    r = attack(tree, "open('out.csv', 'w').write('x'); import pandas as pd\n"
                     "len(pd.read_csv('data.csv')), open('out.csv').read()")
    assert r.ok, r.text()
    assert r.value.value == [2, "x"]
    assert shutil.which("sleep")


# --------------------------------------------------------------- devices, IPC, /proc, scratch

def test_devices_outside_the_allow_list(tree, unchanged):
    """Finding 5: a working userfaultfd from /dev/userfaultfd, a loop device attached, a
    VM created through /dev/kvm. Only null, zero, full, random and urandom open."""
    present = [d for d in ("/dev/userfaultfd", "/dev/loop-control", "/dev/kvm", "/dev/mem",
                           "/dev/kmsg", "/dev/tty", "/dev/console", "/dev/loop0", "/dev/vda",
                           "/dev/sda", "/dev/fuse", "/dev/net/tun") if os.path.exists(d)]
    assert present, "no device to attack on this machine"
    for dev in present:
        denied(attack(tree, f"import os; os.open({dev!r}, os.O_RDONLY)"), "PermissionError")
        denied(attack(tree, f"import os; os.open({dev!r}, os.O_RDWR)"), "PermissionError")
    if os.path.exists("/dev/loop-control"):  # LOOP_CTL_GET_FREE
        denied(attack(tree, "import fcntl; fcntl.ioctl(open('/dev/loop-control', 'rb'), 0x4C82)"),
               "PermissionError")
    if os.path.exists("/dev/kvm"):  # KVM_CREATE_VM
        denied(attack(tree, "import fcntl; fcntl.ioctl(open('/dev/kvm', 'rb'), 0xAE01, 0)"),
               "PermissionError")
    r = attack(tree, "import os\n[len(os.read(os.open(d, os.O_RDONLY), 4)) for d in "
                     "('/dev/zero', '/dev/urandom', '/dev/random')] + "
                     "[os.write(os.open('/dev/null', os.O_WRONLY), b'x')]")
    assert r.ok and r.value.value == [4, 4, 4, 1], r.text()
    denied(attack(tree, "open('/dev/shm/jda-attack', 'w').write('x')"), "PermissionError")


def _ipc_objects() -> dict:
    def table(name):
        try:
            with open(f"/proc/sysvipc/{name}") as f:
                return len(f.readlines())
        except OSError:
            return 0
    queues = sorted(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else []
    return {"shm": table("shm"), "msg": table("msg"), "sem": table("sem"), "mq": queues}


IPC_ATTACK = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL('librt.so.1', use_errno=True)
results = {}
def call(name, fn, *args):
    ret = fn(*args)
    results[name] = 'created' if ret != -1 else errno.errorcode[ctypes.get_errno()]
call('shmget', libc.shmget, 0, 600 << 20, 0o1600)
call('msgget', libc.msgget, 0, 0o1600)
call('semget', libc.semget, 0, 1, 0o1600)
call('mq_open', rt.mq_open, b'/jda-attack', os.O_CREAT | os.O_RDWR, 0o600, None)
try:
    os.memfd_create('jda-attack'); results['memfd'] = 'created'
except OSError as e:
    results['memfd'] = errno.errorcode[e.errno]
print(results)
raise PermissionError(repr(results))
"""


def test_memfds_and_ipc_objects_are_denied(tree, unchanged):
    """Finding 6: 1.2 GB of memfd pages outside RLIMIT_AS; SysV shared memory and
    queues, and a POSIX queue, that outlived the copy, the kernel and the turn."""
    before = _ipc_objects()
    r = attack(tree, IPC_ATTACK)
    denied(r, "PermissionError")
    assert r.stream().count("'EPERM'") == 5, r.text()
    assert _ipc_objects() == before


def test_other_processes_proc_files(tree, lab, unchanged):
    """Finding 9: the server token in ``/proc/<server>/cmdline``; any process's
    command line and environment, started before the copy or after it."""
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                               f"--token={TOKEN}"])
    try:
        copy = tree.root.fork()
        after = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                                  f"--token={TOKEN}"])
        try:
            for pid in (before.pid, after.pid, lab["server"].pid, lab["kernel_pid"], 1):
                for name in ("cmdline", "environ", "status"):
                    r = copy.exec(f"open('/proc/{pid}/{name}', 'rb').read()")
                    denied(r, "PermissionError")
            r = copy.exec("import os; sorted(os.listdir('/proc'))[:1], len(open('/proc/meminfo').read()) > 0")
            assert r.ok, r.text()
        finally:
            after.kill()
            after.wait()
            copy.close()
    finally:
        before.kill()
        before.wait()


def test_every_jupyter_runtime_dir_is_unreadable(lab, tmp_path, unchanged):
    """Finding 9: another Jupyter server's ``jpserver-*.json`` (its own runtime dir)."""
    other = tmp_path / "other-runtime"
    other.mkdir()
    (other / "jpserver-4242.json").write_text(json.dumps({"token": TOKEN}))
    _unreadable_while_running(lab, [other / "jpserver-4242.json"],
                              {"args": SLEEP, "env": {**os.environ, "JUPYTER_RUNTIME_DIR": str(other)}})


SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def _unreadable_while_running(lab, files, *processes: dict) -> None:
    """Each of ``files`` is unreadable from copies made while ``processes``
    (``subprocess.Popen`` arguments: Jupyter processes as far as they show) run."""
    running = [subprocess.Popen(**kw) for kw in processes]
    try:
        time.sleep(0.2)
        with SnapshotTree.from_blocking_client(lab["kc"], notebook_dir=str(lab["nb"])) as t:
            for path in files:
                denied(attack(t, f"print(open({str(path)!r}).read())"), "PermissionError")
    finally:
        for p in running:
            p.kill()
            p.wait()


def test_the_environment_is_an_allow_list(tree, unchanged):
    """Finding 9: DB_PWD, GITHUB_PAT, API_PASS and SLACK_WEBHOOK_URL stayed in the copy."""
    r = attack(tree, "import os\nsorted(k for k in os.environ if k in "
                     f"{sorted(UNNAMED_SECRETS)!r}), 'PATH' in os.environ")
    assert r.ok and r.value.value == [[], True], r.text()


DEEP = """
import os
os.mkdir('deep'); os.chdir('deep')
for i in range(3000):
    os.mkdir('d'); os.chdir('d')
open('leaf.txt', 'w').write('x')
os.chdir(%r)
'made'
"""


def test_deeply_nested_scratch_folders(lab, tmp_path, unchanged):
    """Finding 7: 3,000 nested folders failed the turn with a RecursionError, were
    never removed, and made every later sweep raise (removing nothing)."""
    t = SnapshotTree.from_blocking_client(lab["kc"], notebook_dir=str(lab["nb"]))
    try:
        r = attack(t, DEEP % t.scratch)
        assert r.ok and r.value.value == "made", r.text()
        assert t.root.fork().exec("1 + 1").ok  # the scratch quota check still runs
    finally:
        t.close()
    assert not os.path.exists(t.scratch)
    # the sweep: a dead owner's deep scratch beside another one; both go
    dead = [str(tmp_path / f"{procs.SCRATCH_PREFIX}k999999-c999999-{n}") for n in ("aaaa", "bbbb")]
    for path in dead:
        os.mkdir(path)
        fd = os.open(path, os.O_RDONLY)
        for _ in range(3000):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.symlink(str(lab["nb"] / "data.csv"), "link", dir_fd=fd)  # never followed
        os.close(fd)
    try:
        removed = procs.sweep(str(tmp_path))
    finally:  # pytest's own cleanup of tmp_path recurses: never leave it a deep tree
        for path in dead:
            procs.remove_tree(path)
    assert sorted(removed) == sorted(dead) and not any(os.path.exists(p) for p in dead)
    assert (lab["nb"] / "data.csv").exists()


# --------------------------------------------------------------- more of findings 5, 6, 9

def test_userfaultfd_from_its_device(tree, unchanged):
    """The syscall is filtered, but the device handed out the same object by ioctl
    (on a read-only descriptor: an ioctl needs no write access)."""
    if not os.path.exists("/dev/userfaultfd"):
        pytest.skip("no /dev/userfaultfd here (test_every_other_device_node covers the rule)")
    r = attack(tree, """
        import fcntl, os, struct
        fd = os.open('/dev/userfaultfd', os.O_RDONLY | os.O_CLOEXEC)
        uffd = fcntl.ioctl(fd, 0xAA00, os.O_CLOEXEC)        # USERFAULTFD_IOC_NEW
        api = bytearray(struct.pack('QQQ', 0xAA, 0, 0))
        fcntl.ioctl(uffd, 0xC018AA3F, api)                  # UFFDIO_API: it works
        print('userfaultfd', uffd, struct.unpack('QQQ', api))
    """)
    denied(r, "PermissionError")


def test_every_other_device_node(tree, unchanged):
    """Every character or block device in /dev but the five allowed ones refuses
    even a read-only open (ttys, disks, fuse, kmsg, hwrng, vsock, ...); the
    allowed ones behave as usual."""
    allowed = {"null", "zero", "full", "random", "urandom"}
    nodes = []
    for name in sorted(os.listdir("/dev")):
        with contextlib.suppress(OSError):
            mode = os.lstat(os.path.join("/dev", name)).st_mode  # not the links (stdin, fd)
            if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) and name not in allowed:
                nodes.append(os.path.join("/dev", name))
    assert nodes, "no device node to test here"
    r = attack(tree, f"""
        import os
        opened = []
        for path in {nodes!r}:
            for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR):
                try:
                    os.close(os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC))
                    opened.append((path, flags))
                except OSError:
                    pass
        print('opened', opened)
        if not opened:
            raise PermissionError('no device opened')
    """)
    denied(r, "no device opened")
    r = attack(tree, """
        import os
        with open('/dev/null', 'wb') as f:
            f.write(b'x')
        assert open('/dev/zero', 'rb').read(4) == bytes(4) and len(os.urandom(8)) == 8
        try:
            open('/dev/full', 'wb', buffering=0).write(b'x')
        except OSError as e:
            print('full', e.errno)
    """)
    assert r.ok and "full 28" in r.text(), r.text()


def test_posix_shared_memory(tree, unchanged):
    """/dev/shm: a copy neither creates POSIX shared memory (memory outside its
    limits, left after it) nor reads another process's."""
    theirs = f"/dev/shm/jda-escape-{os.getpid()}"
    with open(theirs, "w") as f:
        f.write("another process's shared state")
    try:
        r = attack(tree, """
            from multiprocessing import shared_memory
            shared_memory.SharedMemory(name='jda-copy', create=True, size=1 << 20)
        """)
        denied(r, "PermissionError")
        assert not os.path.exists("/dev/shm/jda-copy")
        denied(attack(tree, f"print(open({theirs!r}).read())"), "PermissionError")
    finally:
        os.unlink(theirs)
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/dev/shm/jda-copy")


SYSV = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def check(ret, what):
    if ret in (-1, None, 2**64 - 1):
        e = ctypes.get_errno()
        raise OSError(e, f'{what}: {os.strerror(e)}')
    return ret
"""


def test_the_users_sysv_segment(tree, unchanged):
    """A segment of the user's (made here, outside any copy) can be neither
    attached nor removed from a copy."""
    libc = ctypes.CDLL(None, use_errno=True)
    shm = libc.shmget(0, ctypes.c_size_t(4096), 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
    assert shm >= 0
    try:
        denied(attack(tree, SYSV + f"check(libc.shmat({shm}, None, 0), 'shmat')\n"
                                   "print('attached')"), "Operation not permitted")
        denied(attack(tree, SYSV + f"check(libc.shmctl({shm}, 0, None), 'shmctl')\n"
                                   "print('removed')"), "Operation not permitted")
        with open("/proc/sysvipc/shm") as f:
            assert str(shm) in [line.split()[1] for line in f.readlines()[1:]]
    finally:
        libc.shmctl(shm, 0, None)  # IPC_RMID


def test_posix_message_queue_is_not_created(tree, unchanged):
    """A denied ``mq_open`` once still created its queue; checked by opening it
    from here (``/dev/mqueue`` is not mounted everywhere)."""
    name = f"/jda-escape-{os.getpid()}".encode()
    r = attack(tree, f"""
        import ctypes, os
        rt = ctypes.CDLL('librt.so.1', use_errno=True)
        q = rt.mq_open({name!r}, os.O_CREAT | os.O_RDWR, 0o600, None)
        if q == -1:
            raise OSError(ctypes.get_errno(), 'mq_open: ' + os.strerror(ctypes.get_errno()))
        rt.mq_send(q, b'the copy data', 13, 0)
    """)
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    q = rt.mq_open(name, os.O_RDONLY, 0, None)
    if q != -1:
        rt.mq_close(q)
        rt.mq_unlink(name)
    assert q == -1 and ctypes.get_errno() == 2, "the copy's queue outlived it"
    denied(r, "Operation not permitted")


def test_no_removed_variable_left_in_memory(tree, lab, unchanged):
    """Removed variables are gone from the copy's memory too (read from outside):
    secret-looking values everywhere, every other removed value from the
    environment block at the top of the stack, where a copy could read it
    with ctypes."""
    from jupyter_data_agent.kernel.copy.harden import secret_env_names

    secret = set(secret_env_names(UNNAMED_SECRETS))
    assert secret and set(UNNAMED_SECRETS) - secret  # both kinds are tried
    copy = tree.root.fork()
    try:
        assert copy.exec("1").ok
        hits = {name: _memory_hits(copy.pid, [value.encode()]) if name in secret
                else _environment_block(copy.pid).count(value.encode())
                for name, value in UNNAMED_SECRETS.items() if len(value) >= 8}
    finally:
        copy.close()
    # Not asserted: a non-secret value in freed heap memory (os.environ's old string,
    # reused or not by chance); wiping every equal string would corrupt the user's own.
    assert not any(hits.values()), hits


def _environment_block(pid: int) -> bytes:
    """The ``NAME=value`` block set up at exec (``/proc/<pid>/stat`` env_start..env_end), read from outside."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[47]), int(fields[48])
    with open(f"/proc/{pid}/mem", "rb", 0) as mem:
        mem.seek(start)
        return mem.read(end - start)


def test_runtime_dir_named_by_a_connection_file(lab, tmp_path, unchanged):
    """A kernel started with ``-f <dir>/kernel-x.json``: that folder is unreadable."""
    third = tmp_path / "third-runtime"
    third.mkdir()
    (third / "kernel-abc.json").write_text(json.dumps({"key": "third-kernel-key-88"}))
    _unreadable_while_running(lab, [third / "kernel-abc.json"],
                              {"args": SLEEP + ["-f", str(third / "kernel-abc.json")]})


def test_runtime_dirs_under_xdg_data_home_and_relative_options(lab, tmp_path, unchanged):
    """jupyter_core puts the runtime dir under ``$XDG_DATA_HOME/jupyter``; a server
    also takes ``--ServerApp.runtime_dir DIR`` relative to its working directory."""
    xdg = tmp_path / "xdg"
    (xdg / "jupyter" / "runtime").mkdir(parents=True)
    (xdg / "jupyter" / "runtime" / "jpserver-5151.json").write_text('{"token": "xdg-token-99"}')
    rel = tmp_path / "cwd" / "rt"
    rel.mkdir(parents=True)
    (rel / "jpserver-6161.json").write_text('{"token": "rel-token-99"}')
    _unreadable_while_running(
        lab, [xdg / "jupyter" / "runtime" / "jpserver-5151.json", rel / "jpserver-6161.json"],
        {"args": SLEEP, "env": {**os.environ, "XDG_DATA_HOME": str(xdg)}},
        {"args": SLEEP + ["--ServerApp.runtime_dir", "rt"], "cwd": tmp_path / "cwd"})


def test_credential_files_are_unreadable(tmp_path):
    """Keys a copy needs no more than the network it does not have: ~/.aws, ~/.ssh,
    ~/.netrc... and the Jupyter config folder (``c.DataAgent.api_key``)."""
    home = tmp_path / "home"
    for name in (".aws/credentials", ".ssh/id_ed25519", ".netrc", ".jupyter/jupyter_data_agent_config.py"):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text("secret-material-0c4f\n")
    (home / "notes.txt").write_text("fine\n")
    km, kc = start_kernel(env={"HOME": str(home), "JUPYTER_CONFIG_DIR": ""}, cwd=str(tmp_path))
    try:
        with SnapshotTree.from_blocking_client(kc, notebook_dir=str(tmp_path)) as t:
            for name in (".aws/credentials", ".ssh/id_ed25519", ".netrc",
                         ".jupyter/jupyter_data_agent_config.py"):
                denied(attack(t, f"open({str(home / name)!r}).read()"), "PermissionError")
            r = attack(t, f"open({str(home / 'notes.txt')!r}).read()")
            assert r.ok and r.value.value == "fine\n", r.text()
    finally:
        stop_kernel(km, kc)
