"""One model per Jupyter server: the model service, its client, and kernels using it.

The protocol is tested against a small real backend in this process; the end
to end test runs a real jupyter_server with the extension (its model: the
OpenAI-protocol test server), starts a real kernel through the server's
kernel manager and runs ``%%agent`` in it.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator

import pytest

from jupyter_data_agent.config import Settings
from jupyter_data_agent.llm import factory
from jupyter_data_agent.llm.base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    Prompt,
    SamplingParams,
    Streamed,
)
from jupyter_data_agent.llm.remote_backend import ENV_SOCKET, ENV_TOKEN, RemoteBackend
from jupyter_data_agent.server.model_service import ModelService
from tests.kernel_helpers import run_cell, start_kernel, stop_kernel
from tests.openai_server import OpenAITestServer


class EchoBackend(Backend):
    """Answers with the prompt's last words; ``gate`` holds a generation until set."""

    name = "echo"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.closed = False
        self.calls = 0

    @property
    def model(self) -> str:
        return self.settings.model or "echo-model"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(chat=True, completion=True, logprobs=True)

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        self.calls += 1
        self.started.set()
        assert self.gate.wait(30)
        text = prompt.text if prompt.text is not None else prompt.messages[-1].content
        return [Completion(text=f"{self.model}:{text}:{i}", token_logprobs=[-0.5],
                           finish_reason="stop", prompt_tokens=3, completion_tokens=1)
                for i in range(params.n)]

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        yield from ("one ", "two ", "three")
        return Completion(text="one two three", token_logprobs=[-0.1, -0.2, -0.3], finish_reason="stop",
                          prompt_tokens=1, completion_tokens=3, cached_tokens=1)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def service():
    built: dict[str, EchoBackend] = {}

    def create(settings: Settings) -> Backend:
        key = settings.model
        if key not in built or built[key].closed:
            built[key] = EchoBackend(settings)
        return built[key]

    svc = ModelService(Settings(backend="transformers"), max_waiting=1, create=create)
    svc.start(export_env=False)
    svc.built = built  # type: ignore[attr-defined]
    yield svc
    svc.stop()


def client(svc: ModelService, **kw) -> RemoteBackend:
    return RemoteBackend(svc.socket_path, svc.token, **kw)


def test_private_socket_and_wrong_token_refused(service):
    assert stat.S_IMODE(os.stat(service.directory).st_mode) == 0o700
    with pytest.raises(BackendError, match="wrong or missing token"):
        RemoteBackend(service.socket_path, "not-the-token").generate(Prompt(text="x"),
                                                                      SamplingParams())
    # raw: no token at all
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(service.socket_path)
        s.sendall(b'{"op": "info"}\n')
        assert "refused" in json.loads(s.makefile().readline())["error"]
    assert service.requests == 0


def test_generate_stream_count_and_info(service):
    remote = client(service)
    out = remote.generate(Prompt.chat([{"role": "user", "content": "hi"}]),
                          SamplingParams(n=2, stop=("\n",)))
    assert [c.text for c in out] == ["echo-model:hi:0", "echo-model:hi:1"]
    assert out[0].token_logprobs == [-0.5] and out[0].completion_tokens == 1
    streamed = Streamed(remote.stream(Prompt(text="x"), SamplingParams()))
    assert "".join(streamed) == "one two three"
    # The runtime's own completion (usage, reused tokens, log-probs) crosses the socket.
    assert streamed.completion is not None
    assert streamed.completion.token_logprobs == [-0.1, -0.2, -0.3]
    assert (streamed.completion.cached_tokens, streamed.completion.completion_tokens) == (1, 3)
    assert remote.count_tokens("a b c") == 3
    assert remote.model == "echo-model" and remote.capabilities.logprobs
    assert service.requests == 2
    assert "token" not in repr(remote).lower() or service.token not in repr(remote)


def test_overrides_are_limited_and_evict_the_previous_model(service):
    remote = client(service)
    remote.generate(Prompt(text="a"), SamplingParams())
    first = service.built["echo-model"] if "echo-model" in service.built else service.built[""]
    other = client(service, overrides={"model": "other"})
    assert other.generate(Prompt(text="b"), SamplingParams())[0].text == "other:b:0"
    assert first.closed  # one local model resident at a time
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(service.socket_path)
        s.sendall(json.dumps({"token": service.token, "op": "info",
                              "settings_overrides": {"base_url": "http://evil"}}).encode() + b"\n")
        assert "does not let a kernel change" in json.loads(s.makefile().readline())["error"]


def test_queue_position_is_reported_and_bounded(service):
    remote = client(service)
    remote.generate(Prompt(text="warm"), SamplingParams())
    backend = next(iter(service.built.values()))
    backend.gate.clear()
    backend.started.clear()
    results: dict[str, object] = {}
    waits: list[int] = []

    def first():
        results["first"] = remote.generate(Prompt(text="1"), SamplingParams())[0].text

    def second():
        results["second"] = client(service, on_wait=waits.append).generate(
            Prompt(text="2"), SamplingParams())[0].text

    t1 = threading.Thread(target=first)
    t1.start()
    assert backend.started.wait(10)
    t2 = threading.Thread(target=second)
    t2.start()
    deadline = time.monotonic() + 10
    while not waits and time.monotonic() < deadline:
        time.sleep(0.02)
    assert waits == [1]
    # max_waiting=1: a third request is refused at once
    with pytest.raises(BackendError, match="model is busy"):
        remote.generate(Prompt(text="3"), SamplingParams())
    backend.gate.set()
    t1.join(10)
    t2.join(10)
    assert results == {"first": "echo-model:1:0", "second": "echo-model:2:0"}


def test_the_servers_own_turns_wait_in_the_same_line(service):
    """A sidebar turn (in the server process) and a kernel's request share one line:
    the sidebar hears its position, and a cancel while it waits leaves the line."""
    from jupyter_data_agent.search.base import Cancelled

    remote = client(service)
    remote.generate(Prompt(text="warm"), SamplingParams())
    backend = next(iter(service.built.values()))
    backend.gate.clear()
    backend.started.clear()
    kernel_turn = threading.Thread(target=lambda: remote.generate(Prompt(text="k"), SamplingParams()))
    kernel_turn.start()
    assert backend.started.wait(10)

    heard: list[int] = []
    sidebar = service.queued(service.settings, backend, heard.append)
    assert sidebar.model == backend.model and sidebar.count_tokens("a b") == 2
    out: dict[str, str] = {}
    t = threading.Thread(target=lambda: out.update(text=sidebar.generate(Prompt(text="s"), SamplingParams())[0].text))
    t.start()
    deadline = time.monotonic() + 10
    while not heard and time.monotonic() < deadline:
        time.sleep(0.02)
    assert heard == [1] and t.is_alive()  # the kernel's request goes first

    cancel = threading.Event()
    cancelled = service.queued(service.settings, backend, lambda _: None, cancel)
    errors: list[BaseException] = []

    def waiting_then_cancelled() -> None:
        try:
            cancelled.generate(Prompt(text="c"), SamplingParams())
        except BaseException as exc:  # what the turn would see
            errors.append(exc)

    max_waiting = service.max_waiting
    service._slot(service.settings).max_waiting = 2  # room for one more in the line
    t3 = threading.Thread(target=waiting_then_cancelled)
    t3.start()
    time.sleep(0.2)
    cancel.set()
    t3.join(5)
    service._slot(service.settings).max_waiting = max_waiting
    assert not t3.is_alive() and isinstance(errors[0], Cancelled)

    backend.gate.set()
    kernel_turn.join(10)
    t.join(10)
    assert out == {"text": "echo-model:s:0"}


def test_a_warm_is_no_turn_ahead_and_a_turn_hears_when_the_model_is_its(service):
    """Issue 40: a warm holding the model (``background``) is no turn ahead of a question: the
    question hears 0 ahead, the warm's "give way" turns true, and once the warm ends the turn's
    ``started`` hears its prompt before the model reads it (where the sidebar says how long)."""
    from jupyter_data_agent.server.model_progress import waiting_text

    backend = EchoBackend(service.settings)
    slot = service._slot(service.settings)
    heard: list[int] = []
    began: list[tuple[str | None, int, int]] = []
    turn = service.queued(service.settings, backend, heard.append,
                          started=lambda p: began.append((p.text, slot.active, backend.calls)))
    out: dict[str, str] = {}
    t = threading.Thread(target=lambda: out.update(text=turn.generate(Prompt(text="q"), SamplingParams())[0].text))
    with service.background(service.settings) as give_way:
        assert give_way is not None and not give_way()
        t.start()
        deadline = time.monotonic() + 10
        while not heard and time.monotonic() < deadline:
            time.sleep(0.02)
        assert heard == [0] and give_way() and not began and slot.turns_holding == 0
    t.join(10)
    assert out == {"text": "echo-model:q:0"} and began == [("q", 1, 0)] and heard == [0]
    assert slot.active == slot.background == 0
    assert "ahead" not in waiting_text(0) and waiting_text(2) == "waiting for the model: 2 turns ahead"


def test_service_gone_is_a_clear_error(service, monkeypatch):
    remote = client(service)
    service.stop()
    with pytest.raises(BackendError, match="model service is gone"):
        remote.generate(Prompt(text="x"), SamplingParams())


def test_create_backend_chooses_the_service(service, monkeypatch):
    settings = Settings(backend="openai", base_url="http://127.0.0.1:9/v1", model="m")
    monkeypatch.setenv(ENV_SOCKET, service.socket_path)
    monkeypatch.setenv(ENV_TOKEN, service.token)
    try:
        # the service runs in this process: a server never asks itself
        from jupyter_data_agent.llm import remote_backend

        assert not isinstance(factory.create_backend(settings), RemoteBackend)
        remote_backend.LOCAL_SERVICE_TOKENS.discard(service.token)
        backend = factory.create_backend(settings)
        assert isinstance(backend, RemoteBackend)
        assert factory.create_backend(settings) is backend
        monkeypatch.setenv(ENV_SOCKET, "")  # opt out
        assert not isinstance(factory.create_backend(settings), RemoteBackend)
    finally:
        factory.close_backends()


# ---------------------------------------------------------------------------- end to end

KEY = "sk-model-service-secret-1234"
STEP_REPLY = "```python\n# Step 1: Count the rows.\nlen(df)\n```"


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=STEP_REPLY)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    from tests.conftest import agent_server_config

    return agent_server_config(model_server, monkeypatch, key=KEY, clear=(ENV_SOCKET, ENV_TOKEN))


def test_agent_in_a_server_kernel_is_a_turn_of_the_server(jp_serverapp, jp_asyncio_loop, jp_fetch,
                                                           model_server):
    """%%agent in a notebook's kernel: the server runs the turn with copies of that kernel (forked
    through the cell's own connection while the cell runs), the cell shows the same outcome, and
    ``GET turns`` lists the turn with source ``magic``; the kernel loads no model and no backend."""
    from tests.conftest import agent_extension

    service = agent_extension(jp_serverapp).service
    assert service is not None and os.environ[ENV_SOCKET] == service.socket_path

    async def start():
        session = await jp_serverapp.session_manager.create_session(
            path="work/rows.ipynb", name="rows.ipynb", type="notebook", kernel_name="python3")
        kid = session["kernel"]["id"]
        return kid, jp_serverapp.kernel_manager.get_kernel(kid)

    def in_kernel(code: str, timeout: float = 60):  # the server's loop runs meanwhile
        return run_cell(kc, code, timeout=timeout,
                        pump=lambda: jp_asyncio_loop.run_until_complete(asyncio.sleep(0.05)))

    kid, km = jp_asyncio_loop.run_until_complete(start())
    kc = km.blocking_client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        model_server.clear()
        setup = in_kernel("import os, pandas as pd\n"
                          "df = pd.DataFrame({'a': [1, 2, 3]})\n"
                          "%load_ext jupyter_data_agent")
        assert setup.status == "ok", setup
        env = in_kernel(f"print(bool(os.environ.get('{ENV_TOKEN}')), os.environ.get('OPENAI_API_KEY'))")
        assert env.stdout.split() == ["True", "None"], env  # the kernel holds no API key
        turn = in_kernel("%%agent\nHow many rows does df have?", timeout=120)
        assert turn.status == "ok" and turn.error is None, turn
        assert turn.next_input() == "# Step 1: Count the rows.\nlen(df)", turn
        shown = turn.display_text() + turn.stderr
        assert "jupyter-data-agent (direct)" in shown and "1 model call(s)" in shown, shown
        assert "Output preview (ran in a kernel copy" in shown and "3" in shown, shown  # ran in a copy
        assert len(model_server.requests) >= 1
        listed = jp_asyncio_loop.run_until_complete(jp_fetch(
            "jupyter-data-agent", "turns", params={"notebook_path": "work/rows.ipynb"}))
        turns = json.loads(listed.body)["turns"]
        assert [(t["source"], t["status"], t["intent"]) for t in turns] == [
            ("magic", "done", "How many rows does df have?")], turns
        job = json.loads(jp_asyncio_loop.run_until_complete(jp_fetch(
            "jupyter-data-agent", "jobs", turns[0]["job_id"])).body)
        done = job["events"][-1]
        assert done["type"] == "done" and done["data"]["result"]["chosen"] == 0, done
        assert done["data"]["confinement"]["transport"] == "local", done  # copies of the kernel itself
        # No model runtime and no backend in the kernel: the server's model answered.
        mods = in_kernel("import sys\nprint(sorted(m for m in ('torch', "
                         "'transformers', 'llama_cpp', 'openai', 'vllm') if m in sys.modules))")
        assert mods.stdout.strip() == "[]", mods
        backend = in_kernel("from jupyter_data_agent.llm.factory import _INSTANCES\nprint(len(_INSTANCES))")
        assert backend.stdout.strip() == "0", backend
        assert KEY not in shown
    finally:
        kc.stop_channels()
        jp_asyncio_loop.run_until_complete(jp_serverapp.kernel_manager.shutdown_kernel(kid))
    socket_path = service.socket_path
    jp_asyncio_loop.run_until_complete(ext_stop(jp_serverapp))
    assert not os.path.exists(socket_path) and ENV_SOCKET not in os.environ


def test_an_interrupted_agent_cell_cancels_its_turn_and_its_copies(jp_serverapp, jp_asyncio_loop, jp_fetch,
                                                                    model_server):
    """Interrupting %%agent while its candidate runs 120 s in a copy: the cell says so at once, the
    server cancels the turn (listed as cancelled) and no copy of the kernel is left running."""
    import psutil

    async def start():
        session = await jp_serverapp.session_manager.create_session(
            path="slow.ipynb", name="slow.ipynb", type="notebook", kernel_name="python3")
        return session["kernel"]["id"]

    kid = jp_asyncio_loop.run_until_complete(start())
    km = jp_serverapp.kernel_manager.get_kernel(kid)
    kc = km.blocking_client()
    kc.start_channels()
    pump = lambda: jp_asyncio_loop.run_until_complete(asyncio.sleep(0.05))  # noqa: E731
    try:
        kc.wait_for_ready(timeout=60)
        assert run_cell(kc, "%load_ext jupyter_data_agent", pump=pump).status == "ok"
        model_server.reply = "```python\nimport time\ntime.sleep(120)\n```"
        kernel = psutil.Process(km.provisioner.process.pid)
        started = time.monotonic()

        def interrupt_when_a_copy_runs() -> None:
            while time.monotonic() - started < 60 and len(kernel.children(recursive=True)) < 2:
                time.sleep(0.2)
            time.sleep(1.0)
            jp_asyncio_loop.call_soon_threadsafe(lambda: asyncio.ensure_future(km.interrupt_kernel()))

        timer = threading.Thread(target=interrupt_when_a_copy_runs, daemon=True)
        timer.start()
        turn = run_cell(kc, "%%agent\nWait for a long time.", timeout=90, pump=pump)
        took = time.monotonic() - started
        assert took < 60, took
        assert "interrupted; no cell was inserted" in turn.stderr and turn.next_input() is None, turn
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and kernel.children(recursive=True):
            pump()
        assert kernel.children(recursive=True) == [], kernel.children(recursive=True)
        listed = jp_asyncio_loop.run_until_complete(jp_fetch(
            "jupyter-data-agent", "turns", params={"notebook_path": "slow.ipynb"}))
        assert [(t["source"], t["status"]) for t in json.loads(listed.body)["turns"]] == [("magic", "cancelled")]
    finally:
        model_server.reply = STEP_REPLY
        kc.stop_channels()
        jp_asyncio_loop.run_until_complete(jp_serverapp.kernel_manager.shutdown_kernel(kid))


async def ext_stop(serverapp) -> None:
    await serverapp.extension_manager.stop_all_extensions()


# ---------------------------------------------------------------------------- fork after torch

def test_copy_runs_torch_after_the_kernel_used_it(tmp_path):
    pytest.importorskip("torch")
    env = {ENV_SOCKET: "", "JUPYTER_CONFIG_DIR": str(tmp_path)}
    km, kc = start_kernel(env)
    try:
        warm = run_cell(kc, "import torch\ntorch.set_num_threads(2)\n"
                            "x = torch.randn(500, 500)\n(x @ x).sum().item()\n"
                            "%load_ext jupyter_data_agent")
        assert warm.status == "ok", warm
        code = (
            "from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree\n"
            "from jupyter_data_agent.kernel.results import Limits\n"
            "tree = SnapshotTree.from_current_kernel(limits=Limits(timeout_s=60), "
            "notebook_dir=os.getcwd())\n"
            "try:\n"
            "    r = tree.root.exec('y = torch.randn(500, 500)\\nprint(float((y @ y).sum()) != 0.0, "
            "torch.get_num_threads())')\n"
            "    print(r.status, r.text())\n"
            "finally:\n"
            "    tree.close()\n"
        )
        out = run_cell(kc, "import os\n" + code, timeout=90)
        assert out.status == "ok", out
        assert "True 1" in out.stdout, out
    finally:
        stop_kernel(km, kc)


def test_stop_is_idempotent():
    svc = ModelService(Settings(backend="openai", base_url="http://x/v1"))
    svc.start(export_env=False)
    svc.stop()
    svc.stop()
    asyncio.run(asyncio.sleep(0))


def test_kernel_copies_lose_the_service_address_and_token():
    from jupyter_data_agent.kernel.copy.harden import secret_env_names

    env = {ENV_SOCKET: "/tmp/jda-model-x/model.sock", ENV_TOKEN: "t" * 40, "PATH": "/bin"}
    assert sorted(secret_env_names(env)) == sorted([ENV_SOCKET, ENV_TOKEN])


# -- an endpoint shared by many kernels (issue 22, findings 10 and 11) -----------------

@pytest.fixture
def slow_endpoint():
    with OpenAITestServer(reply="```python\nx = 1\n```", delay=1.0) as srv:
        svc = ModelService(Settings(backend="openai", base_url=srv.base_url, api_key="sk-test",
                                    model="test-model", max_retries=0, api_mode="chat"),
                           max_waiting=32, endpoint_concurrency=8)
        svc.start(export_env=False)
        yield srv, svc
        svc.stop()


def _timed_calls(svc: ModelService, n: int) -> tuple[float, list]:
    results: list = []

    def call() -> None:
        try:
            results.append(client(svc).generate(Prompt(text="hi"), SamplingParams(max_tokens=8))[0].text)
        except Exception as exc:  # collected, asserted on below
            results.append(exc)

    threads = [threading.Thread(target=call) for _ in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return time.monotonic() - t0, results


def test_an_endpoint_serves_kernels_side_by_side(slow_endpoint):
    """10 `%%agent` calls to an 8 s endpoint took 74 s: one at a time across all kernels."""
    srv, svc = slow_endpoint
    elapsed, results = _timed_calls(svc, 6)
    assert all(isinstance(r, str) for r in results), results
    assert elapsed < 0.5 * 6 * srv.delay, f"6 calls of {srv.delay} s took {elapsed:.1f} s"


def test_a_kernel_that_hangs_up_leaves_the_line_at_once(slow_endpoint):
    """An interrupted call kept the line until the endpoint answered (57 s)."""
    srv, svc = slow_endpoint
    svc.endpoint_concurrency = 1
    svc._slots.clear()
    srv.delay = 3.0
    from dataclasses import asdict

    from jupyter_data_agent.llm.remote_backend import encode_prompt

    gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gone.connect(svc.socket_path)
    gone.sendall(json.dumps({"token": svc.token, "op": "generate",
                             "prompt": encode_prompt(Prompt(text="interrupted")),
                             "params": asdict(SamplingParams(max_tokens=8))}).encode() + b"\n")
    deadline = time.monotonic() + 10
    while not srv.generation_requests and time.monotonic() < deadline:
        time.sleep(0.02)
    gone.close()  # the user interrupted the cell
    elapsed, results = _timed_calls(svc, 1)
    assert isinstance(results[0], str), results
    assert elapsed < 1.6 * srv.delay, f"the next call waited {elapsed:.1f} s behind a gone one"


def test_a_burst_of_kernels_connects(slow_endpoint):
    """A burst of connections hit EAGAIN ("model service is gone")."""
    srv, svc = slow_endpoint
    srv.delay = 0.2
    svc.max_waiting = 32
    _, results = _timed_calls(svc, 20)
    assert all(isinstance(r, str) for r in results), [r for r in results if not isinstance(r, str)]


def test_folders_of_killed_servers_are_removed(monkeypatch):
    """``/tmp/jda-model-*`` of killed servers were never removed."""
    import pathlib
    import subprocess
    import sys
    import tempfile

    from jupyter_data_agent.kernel.copy import procs

    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="jms-", dir="/tmp"))  # short: a socket lives here
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()
    dead = tmp_path / f"{procs.MODEL_PREFIX}k{dead_pid}-c{dead_pid}-0a1b2c3d-x"
    alive = tmp_path / f"{procs.MODEL_PREFIX}k{os.getpid()}-c{os.getpid()}-4e5f6a7b-y"
    for folder in (dead, alive):
        folder.mkdir()
        (folder / "model.sock").write_text("")
    svc = ModelService(Settings(backend="openai", base_url="http://127.0.0.1:9/v1", model="m"))
    svc.start(export_env=False)
    try:
        assert not dead.exists() and alive.exists()
        assert os.path.basename(svc.directory).startswith(f"{procs.MODEL_PREFIX}k{os.getpid()}-")
    finally:
        svc.stop()
        procs.remove_tree(str(tmp_path))
