"""A real JupyterHub on this machine, with two real Unix users, for ``tests/test_hub.py``.

``jupyterhub_deployment()`` starts, all on loopback with ports from the OS:

* JupyterHub (``python -m jupyterhub``, as root: the LocalProcessSpawner switches to each
  user), its database and cookie secret in a private work folder;
* the real ``configurable-http-proxy`` (node; ``npm install -g configurable-http-proxy``),
  started and stopped by the Hub as in any default deployment;
* a ``LocalProcessSpawner`` that runs ``python -m jupyterhub.singleuser`` (this interpreter,
  this checkout on ``PYTHONPATH``) as each user, in their home, with the environment the
  spawner gives (``HOME``, ``USER``, no ``TMPDIR``: the machine's shared ``/tmp``);
* a shared server config (``c.DataAgent.*``: the one model endpoint both users share) in a
  folder on ``JUPYTER_CONFIG_PATH``, as an admin would put it in ``/etc/jupyter``;
* an API-only admin service whose token starts the users' servers and makes each user a
  token of their own (``POST /hub/api/users/<name>/tokens``).

Each run makes two users of its own (``jda-alice-<tag>``, ``jda-bob-<tag>``, so runs side by
side never share one) with ``useradd``, marked in their GECOS field with the run's pid, and
removes them (processes, home and ``/tmp`` entries) afterwards; a marked user whose run is
gone (killed before its cleanup) is removed by the next run. No other user is ever touched.
Their homes are 0755, Debian 12's default, so what keeps one user's agent data from the
other is the extension's own file modes, not a private home.

The users' servers must run this interpreter and read this checkout: where a folder on the
way lets nobody else through (a Python under ``/root/.pyenv``), the harness adds the traverse
bit (``o+x``: enter, never list) for the test, and the last run to finish puts the old mode
back (the old modes are kept in ``/tmp/jda-hub-test-grants.json`` until then).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GECOS = "jupyter-data-agent hub test user"
ETC_PREFIX = "jda-hub-etc-"  # + the run's pid: the shared server config folder
NS = "jupyter-data-agent"


class HubUnavailable(RuntimeError):
    """A prerequisite found missing only once the users exist (they cannot read this checkout)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proxy_command() -> str | None:
    return shutil.which("configurable-http-proxy")


def hub_unavailable() -> str | None:
    """Why the hub tests cannot run here (None: they can)."""
    if not sys.platform.startswith("linux"):
        return "the JupyterHub harness runs local Unix users on Linux"
    if os.geteuid() != 0:
        return "the JupyterHub harness must run as root (it creates two Unix users; the spawner switches to them)"
    if importlib.util.find_spec("jupyterhub") is None:
        return 'JupyterHub is not installed: pip install "jupyterhub>=6,<7" (the [test] extra has it)'
    if proxy_command() is None:
        return "configurable-http-proxy is not on PATH: npm install -g configurable-http-proxy"
    for tool in ("useradd", "userdel"):
        if shutil.which(tool) is None:
            return f"{tool} (passwd) is not installed"
    from jupyter_data_agent.kernel.copy import confine

    if confine.landlock_abi() < 6:  # as tests/test_escape.py: the default policy runs nothing otherwise
        return "the users' kernel copies need Landlock ABI >= 6 to be confined"
    return None


# ------------------------------------------------------------------ users

def user_names() -> tuple[str, str]:
    """Two names of this run's own (runs side by side on one machine never share a user)."""
    tag = secrets.token_hex(3)
    return f"jda-alice-{tag}", f"jda-bob-{tag}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
    return pids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def kill_processes_of(uid: int, timeout: float = 10.0) -> list[str]:
    """SIGKILL every process of a test user (by pid, one by one); what it found ("pid cmdline")."""
    pids = _processes_of(uid)
    found = [f"{pid} {_cmdline(pid)}" for pid in pids]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def remove_files_of(uid: int, folder: Path) -> list[str]:
    """Entries of ``folder`` (e.g. /tmp) owned by ``uid``, removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
    return removed


def _ours(entry: pwd.struct_passwd) -> int | None:
    """The pid of the run that made this test user, or None for any other user."""
    prefix = f"{GECOS} (pid "
    if entry.pw_gecos.startswith(prefix) and entry.pw_gecos.endswith(")"):
        with contextlib.suppress(ValueError):
            return int(entry.pw_gecos[len(prefix):-1])
    return None


def remove_user(entry: pwd.struct_passwd) -> None:
    """A test user with their processes, home and ``/tmp`` entries; never a user this harness did not make."""
    if _ours(entry) is None:
        raise RuntimeError(f"user {entry.pw_name!r} was not made by this harness")
    kill_processes_of(entry.pw_uid)
    remove_files_of(entry.pw_uid, Path(tempfile.gettempdir()))
    subprocess.run(["userdel", "--remove", entry.pw_name], capture_output=True, text=True, check=False)
    if entry.pw_dir.startswith("/home/jda-") and os.path.isdir(entry.pw_dir):
        shutil.rmtree(entry.pw_dir, ignore_errors=True)


def remove_stale_runs() -> list[str]:
    """Test users and config folders of runs that are gone (killed before their cleanup): removed."""
    stale = [e for e in pwd.getpwall() if (pid := _ours(e)) is not None and not _alive(pid)]
    for entry in stale:
        remove_user(entry)
    folders = [p for p in Path(tempfile.gettempdir()).glob(f"{ETC_PREFIX}*")
               if p.name.split("-")[3].isdigit() and not _alive(int(p.name.split("-")[3]))]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return [e.pw_name for e in stale] + [str(p) for p in folders]


def create_users(names: tuple[str, ...]) -> dict[str, pwd.struct_passwd]:
    """New users, marked as this run's, homes 0755."""
    made = {}
    try:
        for name in names:
            proc = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash",
                                   "--comment", f"{GECOS} (pid {os.getpid()})", name],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"useradd {name} failed: {proc.stderr.strip()}")
            entry = pwd.getpwnam(name)
            made[name] = entry
            os.chmod(entry.pw_dir, 0o755)  # Debian 12's default: others may enter and list a home
    except BaseException:
        remove_users(made)
        raise
    return made


def remove_users(users: dict[str, pwd.struct_passwd]) -> None:
    for entry in users.values():
        with contextlib.suppress(RuntimeError):
            remove_user(entry)


# ------------------------------------------------------------------ what the users must read

_GRANTS = Path(tempfile.gettempdir()) / "jda-hub-test-grants.json"  # shared by runs side by side


@contextlib.contextmanager
def _grants_locked() -> Iterator[dict]:
    import fcntl

    with open(f"{_GRANTS}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(_GRANTS.read_text())
        except (OSError, ValueError):
            state = {"modes": {}, "holders": []}
        state["holders"] = [pid for pid in state["holders"] if _alive(pid) and pid != os.getpid()]
        yield state
        if state["holders"] or state["modes"]:
            _GRANTS.write_text(json.dumps(state))
        else:
            _GRANTS.unlink(missing_ok=True)


def grant_traverse(paths: list[Path]) -> None:
    """Add ``o+x`` (enter, not list) to every folder on the way to ``paths`` that lacks it.

    The folders' old modes are kept in a file shared by runs side by side; the last run to
    finish (``restore_modes``) puts them back, as does the next run after one was killed.
    """
    with _grants_locked() as state:
        state["holders"].append(os.getpid())
        for target in paths:
            target = target.resolve()
            for folder in [*reversed(target.parents), target]:
                st = os.stat(folder)
                if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
                    state["modes"].setdefault(str(folder), stat.S_IMODE(st.st_mode))
                    os.chmod(folder, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)


def restore_modes() -> None:
    with _grants_locked() as state:  # this run is no longer a holder
        if not state["holders"]:
            for folder, mode in state["modes"].items():
                with contextlib.suppress(OSError):
                    os.chmod(folder, mode)
            state["modes"] = {}


def user_env(user: pwd.struct_passwd, **extra: str) -> dict[str, str]:
    return {"HOME": user.pw_dir, "USER": user.pw_name, "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8", "PYTHONPATH": str(REPO), **extra}


def run_as(user: pwd.struct_passwd, args: list[str], timeout: float = 60.0, **env: str) -> subprocess.CompletedProcess:
    """``args`` as ``user`` (uid, gid, no other groups), in their home."""
    return subprocess.run(args, user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=user_env(user, **env),
                          cwd=user.pw_dir, capture_output=True, text=True, timeout=timeout, check=False)


def probe_user_python(user: pwd.struct_passwd) -> str | None:
    """None when ``user`` can run this interpreter with this checkout's extension and JupyterHub."""
    proc = run_as(user, [sys.executable, "-c", "import jupyter_data_agent, jupyterhub.singleuser, pandas; "
                                               "print(jupyter_data_agent.__file__)"])
    if proc.returncode != 0:
        return f"{user.pw_name} cannot run {sys.executable} with {REPO}: {proc.stderr.strip()[-500:]}"
    if not proc.stdout.strip().startswith(str(REPO)):
        return f"{user.pw_name} imports jupyter_data_agent from {proc.stdout.strip()}, not {REPO}"
    return None


# ------------------------------------------------------------------ HTTP

@dataclass
class Reply:
    status: int
    body: Any
    text: str


def http(method: str, url: str, token: str | None = None, body: Any = None, timeout: float = 30.0) -> Reply:
    """One request; an HTTP error status is a Reply, not an exception."""
    data = json.dumps(body).encode() if body is not None else (b"" if method in ("POST", "PUT") else None)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"token {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    text = raw.decode(errors="replace")
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = None
    return Reply(status, parsed, text)


def tail(path: Path, chars: int = 6000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


# ------------------------------------------------------------------ the hub

def _terminate_with_parent() -> None:
    """In the Hub's process before exec: SIGTERM when the test process dies (killed before its
    cleanup), so the Hub still stops the users' servers and the proxy."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class Hub:
    workdir: Path
    etc: Path  # the shared server config folder (on the users' JUPYTER_CONFIG_PATH)
    users: dict[str, pwd.struct_passwd]
    port: int = field(default_factory=_free_port)
    admin_token: str = field(default_factory=lambda: secrets.token_hex(24))
    proc: subprocess.Popen | None = None
    tokens: dict[str, str] = field(default_factory=dict)  # user -> their own API token

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "jupyterhub.log"

    def log_text(self) -> str:
        return tail(self.log_path, 200_000)

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Reply:
        """The Hub's REST API (through the proxy), as the admin service unless ``token``."""
        return http(method, f"{self.url}/hub/api/{path}", token or self.admin_token, body)

    def call(self, user: str, method: str, path: str, body: Any = None, *, as_user: str | None = None,
             timeout: float = 30.0) -> Reply:
        """``/user/<user>/<path>`` through the proxy, with the token of ``as_user`` (default: ``user``)."""
        return http(method, f"{self.url}/user/{user}/{path}", self.tokens[as_user or user], body, timeout)

    def ws_url(self, user: str, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}/user/{user}/{path}"

    # -- lifecycle
    def write_config(self, model_url: str, api_key: str, model: str, extra: dict[str, Any]) -> Path:
        self.etc.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.etc, 0o755)
        server = [
            "c = get_config()  # noqa",
            "# The one model endpoint every user's server shares (the admin's config).",
            "c.DataAgent.backend = 'openai'",
            f"c.DataAgent.base_url = {model_url!r}",
            f"c.DataAgent.api_key = {api_key!r}",
            f"c.DataAgent.model = {model!r}",
            "c.DataAgent.max_retries = 0",
            "c.ServerApp.jpserver_extensions = {'jupyter_data_agent': True}",
            *(f"c.{k} = {v!r}" for k, v in extra.items()),
        ]
        (self.etc / "jupyter_server_config.py").write_text("\n".join(server) + "\n")
        os.chmod(self.etc / "jupyter_server_config.py", 0o644)
        proxy_port, hub_port = _free_port(), _free_port()
        hub = f"""
c = get_config()  # noqa
c.JupyterHub.bind_url = {self.url!r}
c.JupyterHub.hub_bind_url = 'http://127.0.0.1:{hub_port}'
c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{proxy_port}'
c.ConfigurableHTTPProxy.auth_token = {secrets.token_hex(24)!r}
c.ConfigurableHTTPProxy.command = [{proxy_command()!r}]
c.JupyterHub.db_url = 'sqlite:///{self.workdir}/jupyterhub.sqlite'
c.JupyterHub.cookie_secret_file = '{self.workdir}/jupyterhub_cookie_secret'
c.JupyterHub.pid_file = '{self.workdir}/jupyterhub.pid'
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True
c.JupyterHub.authenticator_class = 'dummy'
c.Authenticator.allowed_users = {set(self.users)!r}
c.JupyterHub.spawner_class = 'localprocess'
c.Spawner.cmd = [{sys.executable!r}, '-m', 'jupyterhub.singleuser']
c.Spawner.ip = '127.0.0.1'
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment = {{
    'PYTHONPATH': {str(REPO)!r},
    'JUPYTER_CONFIG_PATH': {str(self.etc)!r},
    'HF_HUB_OFFLINE': '1',
}}
c.JupyterHub.services = [{{'name': 'jda-test-admin', 'api_token': {self.admin_token!r}}}]
c.JupyterHub.load_roles = [{{
    'name': 'jda-test-admin',
    'scopes': ['admin:users', 'admin:servers', 'admin:server_state', 'tokens', 'list:users', 'shares',
               'access:servers'],
    'services': ['jda-test-admin'],
}}]
"""
        config = self.workdir / "jupyterhub_config.py"
        config.write_text(hub)
        return config

    def start(self, config: Path, timeout: float = 90.0) -> None:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER_DATA_AGENT_", "OPENAI_", "JUPYTERHUB_", "JUPYTER_"))}
        self.log = open(self.log_path, "ab")  # open while the hub runs
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], env=env,
                                     cwd=self.workdir, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_terminate_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited ({self.proc.returncode}):\n{tail(self.log_path)}")
            with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError):
                if self.api("GET", "").status == 200:
                    return
            time.sleep(0.3)
        raise TimeoutError(f"JupyterHub did not answer within {timeout:.0f} s:\n{tail(self.log_path)}")

    def spawn(self, names: list[str], timeout: float = 120.0) -> None:
        """Start each user's server (all at once) and wait until every one is ready."""
        for name in names:
            reply = self.api("POST", f"users/{name}/server")
            if reply.status not in (201, 202):
                raise RuntimeError(f"spawning {name}: {reply.status} {reply.text}")
        deadline = time.monotonic() + timeout
        waiting = set(names)
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                model = self.api("GET", f"users/{name}").body or {}
                server = (model.get("servers") or {}).get("")
                if server and server.get("ready"):
                    waiting.discard(name)
            time.sleep(0.3)
        if waiting:
            raise TimeoutError(f"servers of {sorted(waiting)} not ready within {timeout:.0f} s:\n"
                               f"{tail(self.log_path)}")

    def make_token(self, name: str) -> str:
        reply = self.api("POST", f"users/{name}/tokens", {"note": "jda hub test", "expires_in": 900})
        if reply.status != 201:
            raise RuntimeError(f"token for {name}: {reply.status} {reply.text}")
        self.tokens[name] = reply.body["token"]
        return self.tokens[name]

    def run_as(self, name: str, python_args: list[str], timeout: float = 60.0, **env: str,
               ) -> subprocess.CompletedProcess:
        """This interpreter, run as user ``name`` in their home (as their own shell would)."""
        return run_as(self.users[name], [sys.executable, *python_args], timeout, **env)

    def websocket_status(self, user: str, path: str, *, as_user: str) -> int:
        """The HTTP status of a websocket handshake on ``/user/<user>/<path>`` (101: opened)."""
        import websocket  # websocket-client: jupyter_server's own dependency

        try:
            ws = websocket.create_connection(self.ws_url(user, path), timeout=30,
                                             header=[f"Authorization: token {self.tokens[as_user]}"])
        except websocket.WebSocketBadStatusException as e:
            return int(e.status_code)
        ws.close()
        return 101

    def server_pid(self, name: str) -> int:
        model = self.api("GET", f"users/{name}").body or {}
        return int(model["servers"][""]["state"]["pid"])

    def stop(self, timeout: float = 40.0) -> list[str]:
        """SIGTERM: the Hub stops the users' servers and the proxy; what is left after 10 s is
        killed (returned as "pid cmdline")."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # the proxy, should the Hub have died first
        # The servers end their kernels; a kernel may still be on its way out (its parent gone).
        uids = [user.pw_uid for user in self.users.values()]
        deadline = time.monotonic() + 10
        while any(_processes_of(uid) for uid in uids) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p for uid in uids for p in kill_processes_of(uid)]
        if getattr(self, "log", None):
            self.log.close()
        return left


@contextlib.contextmanager
def jupyterhub_deployment(workdir: Path, model_url: str, api_key: str, users: tuple[str, ...], *,
                          model: str = "test-model", server_config: dict[str, Any] | None = None,
                          ) -> Iterator[Hub]:
    """Users created, a Hub with both users' servers running; everything removed on exit."""
    removed = remove_stale_runs()
    if removed:
        print(f"removed what killed runs left: {removed}")
    etc = Path(tempfile.mkdtemp(prefix=f"{ETC_PREFIX}{os.getpid()}-"))
    made: dict[str, pwd.struct_passwd] = {}
    hub: Hub | None = None
    try:
        grant_traverse([Path(sys.prefix), REPO, Path(os.path.realpath(sys.executable)).parent,
                        Path(sys.base_prefix)])
        made = create_users(users)
        for user in made.values():
            why = probe_user_python(user)
            if why:
                raise HubUnavailable(why)
        hub = Hub(workdir=workdir, etc=etc, users=made)
        hub.start(hub.write_config(model_url, api_key, model, server_config or {}))
        hub.spawn(list(users))
        for name in users:
            hub.make_token(name)
        yield hub
    finally:
        if hub is not None:
            left = hub.stop()
            if left:
                print(f"killed what the Hub left running: {left}")
        remove_users(made)
        restore_modes()
        shutil.rmtree(etc, ignore_errors=True)


# ------------------------------------------------------------------ a kernel's channel through the hub

def kernel_channel(hub: Hub, user: str, kernel_id: str, timeout: float = 60.0):
    """``/user/<user>/api/kernels/<id>/channels`` with the user's token (JupyterLab's path)."""
    from tests.gateway_helpers import KernelChannel

    return KernelChannel(None, kernel_id, timeout, url=hub.ws_url(user, f"api/kernels/{kernel_id}/channels"),
                         token=hub.tokens[user])
