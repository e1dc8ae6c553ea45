"""A Jupyter Kernel Gateway that stands in for another host, and a Jupyter server that uses it.

``kernel_gateway()`` starts Jupyter Kernel Gateway (loopback, a free port, a token of its
own) inside a mount namespace of its own (``unshare -m``) with a tmpfs over a private temp
folder of its own and over the Jupyter runtime dir: its kernels' connection files and every
Unix socket they make there are invisible to this machine's processes, as on another host. The PID and network
namespaces stay shared (loopback is how the server reaches the gateway), so a process id the
kernel reports still names its process here: a real remote host would not give even that.

``gateway_server()`` starts a real ``jupyter server`` subprocess with this extension,
``--gateway-url`` pointing at that gateway (so ``POST /api/kernels`` starts the kernel
there), and a model from the tests' OpenAI-protocol server. It reuses the benchmarks'
server client (``jupyter_data_agent_bench.loop.JupyterServer``: ``call``, ``stop``).

``KernelChannel`` is a minimal front end on ``/api/kernels/<id>/channels`` (the path
JupyterLab takes): execute a cell, open a comm, read what comes back.

The gateway's kernels run this interpreter with this checkout on their path (a kernel spec
written into the namespace's own temp folder): the kernel side of the extension is installed where
the kernel runs, as it would have to be on another host.

Two gateways (``kind``): Jupyter Kernel Gateway 3 (``"kernel_gateway"``) runs from
``$JDA_KERNEL_GATEWAY_PYTHON`` (an interpreter with ``jupyter_kernel_gateway``), else from
this interpreter when it has the package. Jupyter Enterprise Gateway 3 (``"enterprise_gateway"``)
pins ``jupyter_server<2``, so it runs from a venv of its own: ``$JDA_ENTERPRISE_GATEWAY_PYTHON``,
else this checkout's ``.venv-eg`` (``.ci/run`` makes it). Its kernels are launched locally
(its ``LocalProcessProxy``) from the same kernel spec; started as root it needs
``EG_UNAUTHORIZED_USERS`` without root (its default refuses every kernel of user root with a
403). ``gateway_unavailable(kind)`` says why a gateway cannot run here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_runtime_dir

from jupyter_data_agent_bench.loop import JupyterServer

REPO = Path(__file__).resolve().parents[1]
GATEWAY_PYTHON_ENV = "JDA_KERNEL_GATEWAY_PYTHON"
ENTERPRISE_GATEWAY_PYTHON_ENV = "JDA_ENTERPRISE_GATEWAY_PYTHON"
KINDS = ("kernel_gateway", "enterprise_gateway")
#: The package each gateway runs as (``python -m ...``).
_MODULE = {"kernel_gateway": "kernel_gateway", "enterprise_gateway": "enterprise_gateway"}
_NAME = {"kernel_gateway": "Jupyter Kernel Gateway", "enterprise_gateway": "Jupyter Enterprise Gateway"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gateway_python(kind: str = "kernel_gateway") -> str | None:
    """An interpreter that runs ``python -m kernel_gateway`` (or ``enterprise_gateway``), or None."""
    if kind == "enterprise_gateway":
        configured = os.environ.get(ENTERPRISE_GATEWAY_PYTHON_ENV)
        if configured:
            return configured if os.access(configured, os.X_OK) else None
        own = REPO / ".venv-eg" / "bin" / "python"  # what .ci/run makes
        return str(own) if os.access(own, os.X_OK) else None
    configured = os.environ.get(GATEWAY_PYTHON_ENV)
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return sys.executable if importlib.util.find_spec("kernel_gateway") is not None else None


def gateway_unavailable(kind: str = "kernel_gateway") -> str | None:
    """Why the gateway tests of ``kind`` cannot run here (None: they can)."""
    if not sys.platform.startswith("linux"):
        return "the gateway harness needs Linux mount namespaces"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare(1) and mount(8) (util-linux) are not installed"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs jda-probe /mnt"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a mount namespace with a tmpfs here: {probe.stderr.strip() or probe.returncode}"
    python = gateway_python(kind)
    if python is None:
        if kind == "enterprise_gateway":
            return (f"Jupyter Enterprise Gateway is not installed: it pins jupyter_server<2, so give it a venv "
                    f"of its own (python3 -m venv .venv-eg && .venv-eg/bin/pip install jupyter_enterprise_gateway, "
                    f"as .ci/run does), or set {ENTERPRISE_GATEWAY_PYTHON_ENV} to an interpreter that has it")
        return (f"Jupyter Kernel Gateway is not installed: pip install jupyter_kernel_gateway, or set "
                f"{GATEWAY_PYTHON_ENV} to an interpreter that has it")
    found = subprocess.run([python, "-c", f"import {_MODULE[kind]}"], capture_output=True, text=True)
    if found.returncode != 0:
        return f"{python} cannot import {_MODULE[kind]}: {found.stderr.strip()[-300:]}"
    return None


def _wait_http(url: str, proc: subprocess.Popen, log_path: Path, timeout: float,
               headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode}):\n{tail(log_path)}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s:\n{tail(log_path)}")


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _stop(proc: subprocess.Popen | None, timeout: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# ------------------------------------------------------------------ the gateway

@dataclass
class Gateway:
    url: str
    token: str
    log_path: Path
    proc: subprocess.Popen
    hidden: tuple[str, ...]  # what its mount namespace hides under a tmpfs
    kind: str = "kernel_gateway"


def _gateway_command(kind: str, python: str, port: int, token: str) -> list[str]:
    if kind == "enterprise_gateway":
        return [python, "-m", "enterprise_gateway", "--EnterpriseGatewayApp.ip=127.0.0.1",
                f"--EnterpriseGatewayApp.port={port}", "--EnterpriseGatewayApp.port_retries=0",
                f"--EnterpriseGatewayApp.auth_token={token}", "--EnterpriseGatewayApp.default_kernel_name=python3",
                "--EnterpriseGatewayApp.list_kernels=True", "--EnterpriseGatewayApp.ws_ping_interval=0"]
    return [python, "-m", "kernel_gateway", "--KernelGatewayApp.ip=127.0.0.1", f"--KernelGatewayApp.port={port}",
            "--KernelGatewayApp.port_retries=0", f"--KernelGatewayApp.auth_token={token}",
            "--KernelGatewayApp.default_kernel_name=python3", "--JupyterWebsocketPersonality.list_kernels=True",
            # No websocket pings (a proxy may drop them too): silence on a kernel's channel is silence.
            "--KernelGatewayApp.ws_ping_interval=0"]


@contextlib.contextmanager
def kernel_gateway(workdir: Path, *, auth: bool = True, kind: str = "kernel_gateway",
                   timeout: float = 60.0) -> Iterator[Gateway]:
    """A gateway (``kind``: Kernel Gateway or Enterprise Gateway) in its own mount namespace;
    stopped (kernels and all) on exit.

    ``auth``: the gateway asks for a token (``Gateway.token``); else it takes any request.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    python = gateway_python(kind)
    if python is None:
        raise RuntimeError(f"{_NAME[kind]} is not installed (gateway_unavailable({kind!r}))")
    port, token = _free_port(), secrets.token_hex(16) if auth else ""
    runtime = jupyter_runtime_dir()  # the default one, which this machine's server shares
    os.makedirs(runtime, exist_ok=True)
    kernel: dict[str, Any] = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({_NAME[kind]})", "language": "python",
        "env": {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}}
    if kind == "enterprise_gateway":  # its kernels on this host, as the gateway's user
        kernel["metadata"] = {"process_proxy": {
            "class_name": "enterprise_gateway.services.processproxies.processproxy.LocalProcessProxy"}}
    # In the namespace: a tmpfs over the runtime dir and over a private folder of its own, its
    # temp folder (TMPDIR: the copies' sockets go there), then the kernel spec and the
    # gateway's root in it: none of it visible from outside. Not a tmpfs over /tmp: a checkout
    # or a venv living under /tmp would vanish inside the namespace.
    private = workdir / f"gateway-private-{port}"
    private.mkdir(parents=True, exist_ok=True)
    hidden = shlex.quote(str(private))
    script = "\n".join([
        "set -e",
        f"mount -t tmpfs jda-gateway-runtime {shlex.quote(runtime)}",
        f"mount -t tmpfs jda-gateway-tmp {hidden}",
        f"mkdir -p {hidden}/gw/kernels/python3 {hidden}/gw/root",
        f'printf "%s" "$JDA_GATEWAY_KERNEL_JSON" > {hidden}/gw/kernels/python3/kernel.json',
        f"cd {hidden}/gw/root",
        "exec " + shlex.join(_gateway_command(kind, python, port, token)),
    ])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER_DATA_AGENT_", "OPENAI_", "JUPYTER_RUNTIME_DIR", "JUPYTER_PATH",
                                "EG_", "KG_", "KERNEL_", "VIRTUAL_ENV"))}
    kernel["env"]["TMPDIR"] = str(private)  # the gateway passes its kernels the spec's environment
    env.update(JUPYTER_PATH=str(private / "gw"), JDA_GATEWAY_KERNEL_JSON=json.dumps(kernel), TMPDIR=str(private))
    if kind == "enterprise_gateway":
        # Enterprise Gateway refuses to start a kernel for a user in EG_UNAUTHORIZED_USERS, which is
        # "root" by default; its kernels' user (KERNEL_USERNAME) defaults to the gateway's own.
        env["EG_UNAUTHORIZED_USERS"] = "nobody-else"
    log_path = workdir / f"{kind}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd="/",
                                start_new_session=True)
    gateway = Gateway(f"http://127.0.0.1:{port}", token, log_path, proc, (runtime, str(private)), kind)
    try:
        _wait_http(f"{gateway.url}/api/kernelspecs", proc, log_path, timeout,
                   {"Authorization": f"token {token}"})
        yield gateway
    finally:
        _stop(proc)


# ------------------------------------------------------------------ the Jupyter server

@dataclass
class GatewayServer(JupyterServer):
    """The benchmarks' ``jupyter server`` client, started with ``--gateway-url``."""

    gateway: Gateway | None = None
    model: str = "test-model"
    api_key: str = "sk-gateway-test"
    extra_args: list[str] = field(default_factory=list)

    def start(self, timeout: float = 120.0) -> "GatewayServer":
        assert self.gateway is not None
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER_DATA_AGENT_", "OPENAI_", "JUPYTER_GATEWAY_"))}
        env.update(JUPYTER_DATA_DIR=str(self.data_dir), JUPYTER_RUNTIME_DIR=str(self.data_dir / "runtime"),
                   KERNEL_LAUNCH_TIMEOUT="20",
                   JUPYTER_DATA_AGENT_CONFINEMENT="warn",
                   # this checkout's extension, wherever the package is installed from
                   PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
        cmd = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
               f"--port={self.port}", "--port-retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.jpserver_extensions={'jupyter_data_agent': True}",
               f"--gateway-url={self.gateway.url}", f"--GatewayClient.auth_token={self.gateway.token}",
               # jupyter_server's gateway client reads its kernel websocket with KERNEL_LAUNCH_TIMEOUT
               # (request_timeout - 2 s) as the socket's timeout: 23 s here, and the gateways send no
               # pings (``_gateway_command``), so the 30-s candidates and tries are silent for longer.
               "--GatewayClient.request_timeout=25", "--DataAgent.backend=openai",
               f"--DataAgent.base_url={self.model_url}", f"--DataAgent.api_key={self.api_key}",
               f"--DataAgent.model={self.model}", "--DataAgent.max_retries=0", *self.extra_args]
        self.log = open(self.log_path, "ab")  # open while the server runs
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root,
                                     start_new_session=True)
        _wait_http(f"{self.url}/api/status", self.proc, self.log_path, timeout,
                   {"Authorization": f"token {self.token}"})
        return self

    def log_text(self) -> str:
        return tail(self.log_path, 1_000_000)

    def turn(self, body: dict, timeout: float = 120.0) -> tuple[dict, list[dict], str]:
        """(accepted, events, final status) of ``POST turns``, polling its job."""
        accepted = self.call("POST", "jupyter-data-agent/turns", body)
        events: list[dict] = []
        after, status = 0, "running"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self.call("GET", f"jupyter-data-agent/jobs/{accepted['job_id']}?after={after}")
            events += reply["events"]
            after = events[-1]["seq"] if events else after
            status = reply["status"]
            if status != "running":
                return accepted, events, status
            time.sleep(0.3)
        raise TimeoutError(f"the turn did not end within {timeout:.0f} s; events so far: {events}")


@contextlib.contextmanager
def gateway_server(workdir: Path, gateway: Gateway, model_url: str, **kwargs: Any) -> Iterator[GatewayServer]:
    root = workdir / "root"
    root.mkdir(exist_ok=True)
    (workdir / "data").mkdir(exist_ok=True)
    server = GatewayServer(root=root, data_dir=workdir / "data", model_url=model_url,
                           log_path=workdir / "server.log", gateway=gateway, **kwargs)
    try:
        yield server.start()
    finally:
        server.stop()


# ------------------------------------------------------------------ a front end's kernel channel

def _binary_message(frame: bytes) -> dict:
    """A message with buffers in the kernel websocket's legacy framing (no subprotocol): a count
    of offsets, the offsets (big-endian uint32), the JSON message, then its buffers."""
    import struct

    (n,) = struct.unpack("!I", frame[:4])
    offsets = [*struct.unpack(f"!{n}I", frame[4:4 + 4 * n]), len(frame)]
    msg = json.loads(frame[offsets[0]:offsets[1]])
    msg["buffers"] = [frame[a:b] for a, b in zip(offsets[1:], offsets[2:])]
    return msg


class KernelChannel:
    """``/api/kernels/<id>/channels`` of the Jupyter server, as JupyterLab uses it (JSON frames)."""

    def __init__(self, server: JupyterServer | None, kernel_id: str, timeout: float = 60.0, *,
                 url: str | None = None, token: str | None = None) -> None:
        """The channel of ``server``'s kernel, or the one at ``url`` (behind a proxy) with ``token``."""
        import websocket  # websocket-client: jupyter_server's own dependency (its gateway client)

        if url is None:
            assert server is not None
            url, token = f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels", server.token
        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(f"{url}?session_id={self.session}",
                                              header=[f"Authorization: token {token}"], timeout=timeout)
        self.seen: list[dict] = []  # every message read, in order

    def close(self) -> None:
        self.ws.close()

    def send(self, channel: str, msg_type: str, content: dict) -> str:
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "username": "test", "session": self.session,
                       "date": "2024-01-01T00:00:00Z", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "channel": channel, "buffers": []}))
        return msg_id

    def recv(self, timeout: float) -> dict | None:
        import websocket

        self.ws.settimeout(timeout)
        try:
            frame = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            return None
        if isinstance(frame, str) and not frame.startswith("{"):
            # A message with buffers: the gateway sends it binary; jupyter_server's gateway
            # proxy decodes it as UTF-8 and passes it on as a text frame.
            frame = frame.encode()
        msg = json.loads(frame) if isinstance(frame, str) else _binary_message(frame)
        self.seen.append(msg)
        return msg

    def until(self, predicate, timeout: float = 60.0) -> list[dict]:
        """Messages read until one matches ``predicate`` (included); TimeoutError otherwise."""
        got: list[dict] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.recv(max(0.05, deadline - time.monotonic()))
            if msg is None:
                continue
            got.append(msg)
            if predicate(msg):
                return got
        raise TimeoutError(f"no matching message within {timeout:.0f} s; got {[m.get('msg_type') for m in got]}")

    def execute(self, code: str, timeout: float = 60.0, **content: Any) -> dict:
        """The execute_reply of ``code`` (and waits for the kernel to be idle again)."""
        msg_id = self.send("shell", "execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True, **content})
        mine = [m for m in self.until(lambda m: m.get("parent_header", {}).get("msg_id") == msg_id
                                      and m.get("msg_type") == "status"
                                      and m["content"].get("execution_state") == "idle", timeout)
                if m.get("parent_header", {}).get("msg_id") == msg_id]
        replies = [m for m in mine if m.get("msg_type") == "execute_reply"]
        if not replies:  # the reply may come after idle on another channel's frame
            replies = [m for m in self.until(lambda m: m.get("parent_header", {}).get("msg_id") == msg_id
                                             and m.get("msg_type") == "execute_reply", timeout)
                       if m.get("msg_type") == "execute_reply"]
        return replies[-1]
