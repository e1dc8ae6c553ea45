"""Attacks on the unconfined side: what a copy says about itself is not believed.

A copy runs the model's code, so the server (or the kernel, for ``%%agent``)
must not take a pid, a cgroup, a reply's size or id, or a secret's encoding
from it. Each test runs the attack from inside a real copy of a real kernel
(the fixtures of ``test_escape``: the user's kernel, folder and server are
checked unchanged after each attack) and fails on a client that trusts it.
"""

from __future__ import annotations

import base64
import codecs
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from jupyter_data_agent.kernel.forktree.copy_process import trusted_cgroup
from jupyter_data_agent.kernel.forktree.snapshot import SnapshotError
from jupyter_data_agent.kernel.protocol import ProtocolError
from jupyter_data_agent.llm.scrub import Scrubber
from tests.conftest import agent_server_config
from tests.kernel_helpers import run_cell, start_kernel, stop_kernel
from tests.openai_server import OpenAITestServer
from tests.test_escape import lab, tree, unchanged  # noqa: F401 -- fixtures
from tests.test_server import on_server_loop

pytestmark = pytest.mark.timeout(300)

# Candidate code: this copy's own channel (its only socket) and a frame written on it.
OWN_CHANNEL = '''
import json, os, socket, struct
fd = next(int(n) for n in os.listdir('/proc/self/fd')
          if os.readlink(f'/proc/self/fd/{n}').startswith('socket:'))
chan = socket.socket(fileno=os.dup(fd))
def forge(obj=None, length=None, body=b''):
    if obj is not None:
        body = json.dumps(obj).encode()
    chan.sendall(struct.pack('>I', len(body) if length is None else length) + body)
'''


def _victim() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ended(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _lie_about_pid(pid: int) -> str:
    """The next copy forked from this one says it is ``pid``."""
    return textwrap.dedent(f"""
        import sys
        fs = sys.modules['_jda_kernel.copy.copy_server']
        honest = fs._hello_reply
        fs._hello_reply = lambda rid, state, kind='hello': {{**honest(rid, state, kind), 'pid': {pid}}}
    """)


@pytest.mark.parametrize("whom", ["another process", "the kernel", "the Jupyter server"])
def test_a_copy_cannot_name_the_process_the_server_kills(tree, lab, unchanged, whom):  # noqa: F811
    """Finding 1: the pid in a forked copy's ``ready`` frame was the one that
    closing, evicting and interrupting signalled (SIGSTOP, SIGINT, SIGKILL)."""
    other = _victim() if whom == "another process" else None
    pid = {"another process": other.pid if other else 0, "the kernel": lab["kernel_pid"],
           "the Jupyter server": lab["server"].pid}[whom]
    try:
        copy = tree.root.fork()
        assert copy.exec(_lie_about_pid(pid)).ok
        with pytest.raises(SnapshotError, match="broke the protocol|refused"):
            child = copy.fork()
            child.interrupt()  # what a trusting client does with it next
            child.close()
        assert copy.state == "dead" and "broke the protocol" in (copy.death or "")
        copy.close()
        time.sleep(0.3)
        assert _alive(pid), f"{whom} was killed through a pid a copy named"
        assert lab["server"].poll() is None
    finally:
        if other is not None:
            other.kill()
            other.wait()


RUN_PATH_PATCH = textwrap.dedent("""
    from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
    ip = get_ipython()
    def said_ok(*args, **kwargs):
        return ExecutionResult(None)
    ip.run_cell = said_ok
    type(ip).run_cell = said_ok
    async def ran_nothing(self, *args, **kwargs):
        return False
    InteractiveShell.run_code = ran_nothing
    ip.showtraceback = lambda *a, **k: None
    ip._showtraceback = lambda *a, **k: None
    ExecutionResult.success = property(lambda self: True)
""")


def test_a_cell_cannot_make_the_next_one_report_ok(tree, unchanged):  # noqa: F811
    """Issue 34: an analysis step replaced the shell's run path in its copy, and the next
    step raised and still showed as verified."""
    copy = tree.root.fork()
    try:
        assert copy.exec(RUN_PATH_PATCH).ok
        child = copy.fork()
        for node in (copy, child):
            r = node.exec("raise ValueError('boom')")
            assert r.status == "error" and r.ename == "ValueError" and "boom" in r.evalue
            ok = node.exec("21 * 2")
            assert ok.ok and ok.value.value == 42
    finally:
        copy.close()


def test_copies_pids_are_the_kernels_word(tree):  # noqa: F811
    """Every copy's pid is its real one, a child of its parent's."""
    copy = tree.root.fork()
    child = copy.fork()
    try:
        r = child.exec("import os; os.getpid(), os.getppid()")
        assert r.value.value == [child.pid, copy.pid]
        assert psutil.Process(copy.pid).ppid() == tree.root.pid
        assert r.pid == child.pid
    finally:
        copy.close()


def test_a_reply_larger_than_the_bounds_is_refused_unread(tree, unchanged):  # noqa: F811
    """Finding 3: a copy writes its own 200 MB reply; the client reads 4 bytes of it."""
    server = psutil.Process()
    before = server.memory_info().rss
    copy = tree.root.fork()
    r = copy.exec(OWN_CHANNEL + "forge(length=200 << 20)\n"
                  "chan.sendall(b'{\"id\": 1, \"ok\": true, \"data\": {\"status\": \"ok\"}, \"x\": \"'"
                  " + b'x' * (200 << 20))")
    grown = server.memory_info().rss - before
    assert r.status == "died" and "broke the protocol" in r.text(), r.text()
    assert "exceeds the bound" in r.text()
    assert len(r.text()) < 10_000
    assert copy.state == "dead" and _ended(r.pid)
    assert grown < 64 << 20, f"the client grew by {grown >> 20} MiB"
    copy.close()


def test_output_past_the_bounds_is_cut_where_it_is_received(tree, unchanged):  # noqa: F811
    """A copy lifts its own output bounds: a 12 MB stream in a frame under the byte
    bound is cut to the tree's limits by the client."""
    limits = tree.limits
    copy = tree.root.fork()
    try:
        r = copy.exec(OWN_CHANNEL + textwrap.dedent("""
            forge({'id': 1, 'ok': True, 'type': 'ExecResult', 'data': {
                'status': 'ok', 'pid': 1,
                'outputs': [{'output_type': 'stream', 'name': 'stdout', 'text': 'y' * (12 << 20)}]
                           + [{'output_type': 'display_data', 'data': {'text/plain': 'z'}}] * 5000}})
        """))
        cap = limits.max_output_chars + limits.max_capture_bytes + 200
        assert r.ok and r.truncated
        assert len(r.outputs[0].text) < cap + 100
        assert len(r.outputs) <= limits.max_outputs + 2
        assert r.pid == copy.pid  # not the 1 it claimed
    finally:
        copy.close()


def test_a_reply_to_another_request_ends_the_copy(tree, unchanged):  # noqa: F811
    """Replies are matched to their request; one that is not ends the copy."""
    copy = tree.root.fork()
    r = copy.exec(OWN_CHANNEL + "forge({'id': 999, 'ok': True, 'type': 'pong'})\n"
                  "forge(body=b'not json')\n")
    assert r.status == "died" and "broke the protocol" in r.text(), r.text()
    assert copy.state == "dead"
    copy.close()


def test_a_cgroup_the_root_copy_is_not_in_is_refused(tree):  # noqa: F811
    """``close`` kills every process of the tree's cgroup: it must be the root's own."""
    root = tree.root
    own = tree.protections.cgroup
    assert own and trusted_cgroup(own, root.pid, tree.kernel_pid) == own
    for claim in ("/sys/fs/cgroup", os.path.dirname(own), own + "/../jda-k1-c1-00000000"):
        with pytest.raises(ProtocolError, match="not its own"):
            trusted_cgroup(claim, root.pid, tree.kernel_pid)


def test_results_are_scrubbed_where_they_are_received(tree, lab):  # noqa: F811
    """Secrets a copy finds are masked in every encoding before any prompt or event
    sees them, in the thread that ran the cell."""
    secret = "jda-config-only-key-" + "3f9a1c7e5b2d4068"
    (lab["nb"] / "leak.txt").write_text(secret)
    copy = tree.root.fork()
    tree.redact = Scrubber([secret]).json
    try:
        r = copy.exec(textwrap.dedent(f"""
            import base64, codecs
            s = open({str(lab["nb"] / "leak.txt")!r}).read()
            print(s, codecs.encode(s, 'rot13'), s[::-1], s.encode().hex(),
                  base64.b64encode(s.encode()).decode())
            s
        """))
    finally:
        tree.redact = None
        copy.close()
        (lab["nb"] / "leak.txt").unlink()
    shown = repr(r.to_json())
    for form in (secret, codecs.encode(secret, "rot13"), secret[::-1], secret.encode().hex(),
                 base64.b64encode(secret.encode()).decode()):
        assert form not in shown
    assert r.ok and r.stream().count("***") == 5


# ------------------------------------------------------------------ the magic's path

KEY = "sk-config-only-" + "9b2e4d6f8a1c3e5f7a9b"
LEAK = (
    "```python\n# Step 1: Read the key from the config file, else from a copy of it.\n"
    "import base64, codecs, glob, os, re\n"
    "try:\n"
    "    text = open(glob.glob(CONFIG_DIR + '/*.py')[0]).read()\n"
    "except PermissionError as e:\n"
    "    print('config:', e)\n"
    "    text = open(COPY).read()\n"
    "k = re.search(r'sk-[\\w-]+', text).group(0)\n"
    "print(k, codecs.encode(k, 'rot13'), k[::-1], base64.b64encode(k.encode()).decode())\n"
    "k\n```"
)


@pytest.fixture(scope="module")
def config_only_kernel(tmp_path_factory):
    config = tmp_path_factory.mktemp("jupyter-config")
    copy = tmp_path_factory.mktemp("data") / "settings-backup.txt"  # the key, left in a data file
    copy.write_text(f"api_key = {KEY!r}\n")
    leak = LEAK.replace("CONFIG_DIR", repr(str(config))).replace("COPY", repr(str(copy)))
    with OpenAITestServer(reply=lambda request: leak) as srv:
        (config / "jupyter_data_agent_config.py").write_text(
            f"c.DataAgent.backend = 'openai'\nc.DataAgent.base_url = {srv.base_url!r}\n"
            f"c.DataAgent.model = 'test-model'\nc.DataAgent.api_key = {KEY!r}\n")
        env = {"JUPYTER_CONFIG_DIR": str(config), "OPENAI_API_KEY": "",
               "JUPYTER_DATA_AGENT_BACKEND": ""}
        km, kc = start_kernel(env)
        assert run_cell(kc, "%load_ext jupyter_data_agent").status == "ok"
        yield kc, srv
        stop_kernel(km, kc)


def test_the_magic_scrubs_a_key_set_only_in_its_config_file(config_only_kernel):
    """Finding 9: the key of ``jupyter_data_agent_config.py`` was printed by ``%%agent``.
    The config folder is out of a copy's reach now; a copy of the key found
    elsewhere is scrubbed as the server scrubs."""
    kc, srv = config_only_kernel
    run = run_cell(kc, "%%agent --strategy vote --samples 2\nWhat is the key?")
    assert run.status == "ok", run
    shown = run.stdout + run.stderr + repr(run.outputs) + repr(run.payload)
    assert "***" in shown, shown
    assert "config: [Errno 13] Permission denied" in shown, shown
    for form in (KEY, codecs.encode(KEY, "rot13"), KEY[::-1], base64.b64encode(KEY.encode()).decode()):
        assert form not in shown
        # and the model never saw it: the key was sent as the bearer token, and only there
        assert not any(form in repr(r.body) for r in srv.requests)
    assert srv.requests and srv.requests[-1].header("authorization") == f"Bearer {KEY}"


# ------------------------------------------------------------------ the server's path


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=lambda request: "")


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    model_server.clear()
    return agent_server_config(model_server, monkeypatch)


@on_server_loop
async def test_the_server_scrubs_copies_results_off_its_event_loop(
        jp_fetch, jp_ws_fetch, jp_serverapp, jp_root_dir, model_server, monkeypatch):
    """Finding 9: the server token's ROT13 form reached the model in a repair prompt;
    finding 3: 157 MB were scrubbed on the event loop. A copy prints the token (found
    on disk) in four encodings and a large output, then fails and is repaired."""
    import json
    import threading

    from tests.test_server import post_turn, start_kernel, stream_events

    token = jp_serverapp.identity_provider.token
    assert len(token) >= 16
    (jp_root_dir / "found.txt").write_text(token)
    leak = ("```python\n# Step 1: Print what was found, then fail.\nimport base64, codecs\n"
            f"t = open({str(jp_root_dir / 'found.txt')!r}).read()\n"
            "print(codecs.encode(t, 'rot13'), t[::-1], t.encode().hex(), "
            "base64.b64encode(t.encode()).decode())\n"
            "print('z' * 90000)\nraise ValueError(codecs.encode(t, 'rot13'))\n```")
    fixed = "```python\n# Step 1: Sum a.\ndf['a'].sum()\n```"
    model_server.reply = lambda request: fixed if "ValueError" in request.prompt else leak
    jobs = jp_serverapp.web_app.settings["jupyter_data_agent"].jobs
    loop_thread = threading.current_thread().name
    scrubbed_on: list[tuple[str, int]] = []
    real_json = jobs.scrub.json

    def recording(payload):
        out = real_json(payload)
        scrubbed_on.append((threading.current_thread().name, len(repr(out))))
        return out

    monkeypatch.setattr(jobs.scrub, "json", recording)
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id, strategy="direct")
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
    finally:
        kc.stop_channels()
    prompts = [r.prompt for r in model_server.generation_requests]
    assert events[-1]["type"] == "done", events[-1]
    assert len(prompts) >= 2 and "ValueError" in prompts[-1], "the repair prompt shows the error"
    shown = json.dumps(events) + "".join(prompts)
    for form in (token, codecs.encode(token, "rot13"), token[::-1], token.encode().hex(),
                 base64.b64encode(token.encode()).decode()):
        assert form not in shown
    assert "***" in prompts[-1]
    big = [name for name, size in scrubbed_on if size > 80_000]
    assert big and loop_thread not in big, scrubbed_on


def test_an_unreachable_root_is_ended_only_if_it_is_the_kernels_child(tmp_path):
    """A kernel on another host (a gateway) reports the pids of its own machine: when its
    snapshot socket cannot be reached, no process is signalled here unless it really is a
    child of the kernel's pid (an unrelated process with that number is left alone)."""
    import json as _json

    from jupyter_data_agent.kernel.forktree.snapshot import ForkUnavailable, SnapshotTree
    from jupyter_data_agent.kernel.protocol import PROTOCOL_VERSION
    from jupyter_data_agent.kernel.results import Limits

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        def reply(kernel_pid: int) -> str:
            return _json.dumps({"version": PROTOCOL_VERSION, "path": str(tmp_path / "no-such.sock"),
                                "pid": bystander.pid, "kernel_pid": kernel_pid, "token": "t",
                                "scratch": str(tmp_path)})

        for other in (1, bystander.pid + 100_000):  # not its parent: named, not signalled
            with pytest.raises(ForkUnavailable, match="remote kernel"):
                SnapshotTree._connect(reply(other), None, None, Limits(), 4, 1 << 30)
            with pytest.raises(subprocess.TimeoutExpired):  # still running a second later
                bystander.wait(timeout=1)
        # Its real parent (this process, standing in for a local kernel): ended.
        with pytest.raises(ForkUnavailable):
            SnapshotTree._connect(reply(os.getpid()), None, None, Limits(), 4, 1 << 30)
        assert bystander.wait(timeout=10) == -9
    finally:
        bystander.kill()
        bystander.wait()
