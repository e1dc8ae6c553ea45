"""One model per Jupyter server: the service kernels send their generation requests to.

The extension starts a :class:`ModelService` at server start: a Unix socket
in a private (0700) directory and a random token, both put in the server's
environment so the kernels it launches inherit them
(:mod:`jupyter_data_agent.llm.remote_backend` is the client). Requests are
served on threads; generation uses the server's own settings (a kernel may
only change :data:`ALLOWED_OVERRIDES`) and the backends of
:func:`jupyter_data_agent.llm.factory.create_backend`.

A local model (transformers, vLLM, llama.cpp: anything but an endpoint)
generates one request at a time, since it shares the machine's cores; an
endpoint serves up to ``endpoint_concurrency`` side by side. Either way
requests wait in arrival order, at most ``max_waiting`` of them (beyond: a
clear "model busy" error), and a waiting request is told how many turns are
ahead of it (a warm holding the model is none: it gives way within its next
step). A kernel that hangs up (an interrupted ``%%agent``) leaves the line
at once: its endpoint call is abandoned, not waited for. At most one
local model is resident: asking for another closes the previous one.

The socket's folder is named for this server's pid (``procs.owner_tag``), so
one a killed server left is removed by the next service that starts.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import secrets
import shutil
import socketserver
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict

from ..config import Settings
from ..llm import remote_backend as rb
from ..llm.base import Backend, BackendError, Prompt, Streamed, WrappedBackend

log = logging.getLogger(__name__)

_MAX_LINE = 64 * 1024 * 1024  # a request line (prompts are long, not that long)
_NOTICE_S = 1.0  # how often a waiting request hears its queue position


class ModelBusy(BackendError):
    pass


class _Slot:
    """``capacity`` generations at a time, first come first served, bounded waiting line."""

    def __init__(self, max_waiting: int, capacity: int = 1) -> None:
        self.max_waiting = max_waiting
        self.capacity = max(1, capacity)
        self.cond = threading.Condition()
        self.active = 0
        self.background = 0  # of ``active``: warms, which give way to whoever waits
        self.waiting: deque[object] = deque()

    @property
    def busy(self) -> bool:
        return self.active >= self.capacity

    def try_background(self) -> bool:
        """Take the model for background work only if nobody would wait: never queues."""
        with self.cond:
            if self.busy or self.waiting:
                return False
            self.active += 1
            self.background += 1
            return True

    def end_background(self) -> None:
        with self.cond:  # both at once: a waiting turn never sees the warm's place as a turn's
            self.background = max(0, self.background - 1)
            self.active = max(0, self.active - 1)
            self.cond.notify_all()

    @property
    def turns_holding(self) -> int:
        """Turns (not warms) that hold the model now: what a waiting turn counts as ahead of it."""
        return max(0, self.active - self.background)

    @property
    def contended(self) -> bool:
        """Someone waits for the model (background work stops at its next chance)."""
        return bool(self.waiting)

    def acquire(self, notify: Callable[[int], None], check: Callable[[], None] | None = None) -> None:
        """Wait for the model; ``notify`` hears the turns ahead, ``check`` may raise to leave the line."""
        ticket = object()
        with self.cond:
            if not self.busy and not self.waiting:
                self.active += 1
                return
            if len(self.waiting) >= self.max_waiting:
                raise ModelBusy(
                    f"The model is busy: {len(self.waiting) + 1} turns are running or waiting "
                    f"(at most {self.max_waiting} may wait). Try again in a moment."
                )
            self.waiting.append(ticket)
            try:
                last = None
                while self.busy or self.waiting[0] is not ticket:
                    # A warm in progress is no turn ahead: it stops for this one.
                    ahead = self.waiting.index(ticket) + min(1, self.turns_holding)
                    if ahead != last:
                        last = ahead
                        self.cond.release()
                        try:
                            notify(ahead)  # may raise: the client went away
                        finally:
                            self.cond.acquire()
                    if check is not None:
                        check()
                    self.cond.wait(_NOTICE_S)
                self.active += 1
            finally:
                self.waiting.remove(ticket)
                self.cond.notify_all()

    def release(self) -> None:
        with self.cond:
            self.active = max(0, self.active - 1)
            self.cond.notify_all()


class QueuedBackend(WrappedBackend):
    """The server's own turns (the sidebar) in the service's line, with the magic's.

    One generation at a time per model whoever asks; ``notify`` hears how many
    turns are ahead (0: only a warm, which gives way within its next step), ``cancel``
    set while waiting leaves the line, and ``started`` hears the prompt once the
    model is this turn's, before it reads the prompt (the turn says how long that takes).
    """

    def __init__(self, inner: Backend, slot: _Slot, notify: Callable[[int], None],
                 cancel: threading.Event | None = None,
                 started: Callable[[Prompt], None] | None = None) -> None:
        super().__init__(inner)
        self.name = "queued"
        self._slot = slot
        self._notify = notify
        self._cancel = cancel
        self._started = started

    def _check(self) -> None:
        if self._cancel is not None and self._cancel.is_set():
            from ..search.base import Cancelled

            raise Cancelled("the turn was cancelled while it waited for the model")

    def _begin(self, prompt: Prompt) -> None:
        if self._started is not None:
            try:
                self._started(prompt)
            except Exception:  # progress only: the generation goes on
                log.debug("jupyter_data_agent: the started hook failed", exc_info=True)

    def generate(self, prompt, params):
        self._slot.acquire(self._notify, self._check)
        try:
            self._begin(prompt)
            return self.inner.generate(prompt, params)
        finally:
            self._slot.release()

    def stream(self, prompt, params):
        self._slot.acquire(self._notify, self._check)
        try:
            self._begin(prompt)
            return (yield from self.inner.stream(prompt, params))
        finally:
            self._slot.release()


def _is_local(settings: Settings) -> bool:
    return settings.backend != "openai"


class ModelService:
    """Serves the protocol of :mod:`jupyter_data_agent.llm.remote_backend`."""

    def __init__(self, settings: Settings, *, max_waiting: int = 8, endpoint_concurrency: int = 8,
                 create: Callable[[Settings], Backend] | None = None,
                 log_: logging.Logger | None = None) -> None:
        self.settings = settings
        self.max_waiting = max_waiting
        self.endpoint_concurrency = endpoint_concurrency  # at least 1: the trait's bound
        self._create = create
        self.log = log_ or log
        self.token = secrets.token_urlsafe(32)
        self.directory: str | None = None
        self.socket_path: str | None = None
        self.requests = 0  # generation requests served (generate + stream)
        self._lock = threading.Lock()
        self._slots: dict[str, _Slot] = {}
        self._resident: tuple[str, Backend] | None = None  # the one local model
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._thread: threading.Thread | None = None
        self._env_set = False
        #: The ``turn`` op: ``%%agent`` turns run by the server (``server.magic_turns.MagicTurns``).
        self.turns: Callable[[dict, Callable[[dict], None], object], None] | None = None

    # -- lifecycle -------------------------------------------------------------
    def start(self, export_env: bool = True) -> str:
        from ..kernel.copy import procs

        procs.sweep()  # the folders of services whose server was killed
        tag = procs.owner_tag(os.getpid(), os.getpid())
        self.directory = tempfile.mkdtemp(prefix=f"{procs.MODEL_PREFIX}{tag}-")
        os.chmod(self.directory, 0o700)
        self.socket_path = os.path.join(self.directory, "model.sock")
        service = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                service._handle(self.rfile, self.wfile, self.connection)

        class Server(socketserver.ThreadingUnixStreamServer):
            request_queue_size = 128  # a burst of kernels connecting never sees EAGAIN

        server = Server(self.socket_path, Handler)
        server.daemon_threads = True
        os.chmod(self.socket_path, 0o600)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="jupyter-data-agent-model-service", daemon=True)
        self._thread.start()
        rb.LOCAL_SERVICE_TOKENS.add(self.token)
        if export_env:
            os.environ[rb.ENV_SOCKET] = self.socket_path
            os.environ[rb.ENV_TOKEN] = self.token
            self._env_set = True
        return self.socket_path

    def stop(self) -> None:
        if self._env_set:
            if os.environ.get(rb.ENV_TOKEN) == self.token:
                os.environ.pop(rb.ENV_TOKEN, None)
                os.environ.pop(rb.ENV_SOCKET, None)
            self._env_set = False
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
        rb.LOCAL_SERVICE_TOKENS.discard(self.token)
        with self._lock:
            self._resident = None

    # -- backends ----------------------------------------------------------------
    def settings_for(self, overrides) -> Settings:
        if overrides is None:
            overrides = {}
        if not isinstance(overrides, dict):
            raise ValueError("settings_overrides must be an object")
        bad = set(overrides) - set(rb.ALLOWED_OVERRIDES)
        if bad:
            raise ValueError(f"settings the model service does not let a kernel change: "
                             f"{', '.join(sorted(bad))}")
        changes = {k: str(v) for k, v in overrides.items() if v}
        return self.settings.with_overrides(**changes) if changes else self.settings

    def _slot_key(self, settings: Settings) -> str:
        from ..llm.factory import backend_key

        return "local" if _is_local(settings) else backend_key(settings)

    def _slot(self, settings: Settings) -> _Slot:
        key = self._slot_key(settings)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                capacity = 1 if _is_local(settings) else self.endpoint_concurrency
                slot = self._slots[key] = _Slot(self.max_waiting, capacity)
            return slot

    def busy(self, settings: Settings) -> bool:
        """Whether a request for ``settings``' model would wait now (background work skips then)."""
        slot = self._slot(settings)
        with slot.cond:
            return slot.busy or bool(slot.waiting)

    @contextlib.contextmanager
    def background(self, settings: Settings) -> Iterator[Callable[[], bool] | None]:
        """The model for background work (a warm), only if it is free now: yields the test
        "someone is waiting, stop" (None: the model is busy, skip the work). Never waits, never
        makes anyone wait longer than one batch of the work."""
        if not _is_local(settings):
            yield lambda: False
            return
        slot = self._slot(settings)
        if not slot.try_background():
            yield None
            return
        try:
            yield lambda: slot.contended
        finally:
            slot.end_background()

    def queued(self, settings: Settings, backend: Backend, notify: Callable[[int], None],
               cancel: threading.Event | None = None,
               started: Callable[[Prompt], None] | None = None) -> Backend:
        """``backend`` (the server's, for ``settings``) taking its turn in the service's line.

        Only a local model has one line: an endpoint serves turns side by side, and
        a cancelled turn stuck in its call must not hold up the next one.
        """
        if not _is_local(settings):
            return backend
        return QueuedBackend(backend, self._slot(settings), notify, cancel, started)

    def _backend(self, settings: Settings) -> Backend:
        """The backend for ``settings``; called holding its slot (local: evicts the other model)."""
        from ..llm import factory

        create = self._create or factory.create_backend
        if not _is_local(settings):
            return create(settings)
        key = factory.backend_key(settings)
        with self._lock:
            resident = self._resident
        if resident is not None and resident[0] != key:
            old_key, old = resident
            with factory._LOCK:
                if factory._INSTANCES.get(old_key) is old:
                    del factory._INSTANCES[old_key]
            with self._lock:
                self._resident = None
            self.log.info("jupyter_data_agent: closing the resident model %s", old.model)
            try:
                old.close()
            except Exception:
                self.log.warning("jupyter_data_agent: closing the previous model failed",
                                 exc_info=True)
        backend = create(settings)
        with self._lock:
            self._resident = (key, backend)
        return backend

    def _resident_backend(self, settings: Settings) -> Backend | None:
        from ..llm import factory

        if not _is_local(settings):
            return (self._create or factory.create_backend)(settings)
        with self._lock:
            resident = self._resident
        if resident is not None and resident[0] == factory.backend_key(settings):
            return resident[1]
        return None

    # -- requests -----------------------------------------------------------------
    def _handle(self, rfile, wfile, conn=None) -> None:
        def send(obj: dict) -> None:
            wfile.write(json.dumps(obj, default=str).encode() + b"\n")
            wfile.flush()

        try:
            line = rfile.readline(_MAX_LINE)
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError
            except ValueError:
                send({"error": "model service: a request is one JSON object on one line."})
                return
            token = req.get("token")
            if not isinstance(token, str) or not hmac.compare_digest(token.encode(),
                                                                      self.token.encode()):
                send({"error": "model service: wrong or missing token; request refused."})
                return
            if req.get("op") == "turn":  # %%agent's whole turn, run by the server (server.magic_turns)
                if self.turns is None:
                    send({"error": "model service: this server does not run turns for kernels."})
                else:
                    self.turns(req, send, rfile)
                return
            try:
                self._serve(req, send, conn)
            except _HungUp:
                return
            except BackendError as exc:
                send({"error": str(exc)})
            except (ValueError, TypeError, KeyError) as exc:
                send({"error": f"model service: bad request: {exc}"})
            except Exception as exc:  # the message reaches the user's cell
                self.log.warning("jupyter_data_agent: model service request failed", exc_info=True)
                send({"error": f"model service: {type(exc).__name__}: {exc}"})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the kernel went away

    def _serve(self, req: dict, send: Callable[[dict], None], conn=None) -> None:
        from ..llm.remote_backend import decode_params, decode_prompt

        op = req.get("op")
        settings = self.settings_for(req.get("settings_overrides"))
        if op in ("info", "count_tokens"):
            backend = self._resident_backend(settings)
            if backend is not None:
                send({"done": self._quick(op, backend, req)})
                return
        elif op not in ("generate", "stream"):
            raise ValueError(f"unknown op {op!r}")
        prompt = decode_prompt(req.get("prompt") or {}) if op in ("generate", "stream") else None
        params = decode_params(req.get("params") or {}) if op in ("generate", "stream") else None
        slot = self._slot(settings)
        slot.acquire(lambda ahead: send({"queue": ahead}))
        try:
            backend = self._backend(settings)
            if op in ("info", "count_tokens"):
                send({"done": self._quick(op, backend, req)})
                return
            assert prompt is not None and params is not None
            with self._lock:
                self.requests += 1
            if op == "generate":
                if _is_local(settings) or conn is None:  # its one line holds until the model is free
                    completions = backend.generate(prompt, params)
                else:
                    completions = _unless_hung_up(conn, lambda: backend.generate(prompt, params))
                send({"done": [asdict(c) for c in completions]})
            else:
                streamed = Streamed(backend.stream(prompt, params))
                for delta in streamed:
                    send({"delta": delta})  # "" too: a kernel gone mid-prompt ends the stream here
                send({"done": asdict(streamed.completion) if streamed.completion else True})
        finally:
            slot.release()

    @staticmethod
    def _quick(op: str, backend: Backend, req: dict):
        if op == "count_tokens":
            return backend.count_tokens(str(req.get("text", "")))
        caps = backend.capabilities
        return {"name": backend.name, "model": backend.model,
                "capabilities": {"chat": caps.chat, "completion": caps.completion,
                                 "logprobs": caps.logprobs, "streaming": caps.streaming,
                                 "extra": dict(caps.extra)}}


class _HungUp(Exception):
    """The kernel closed its connection while its request was served."""


def _unless_hung_up(conn, call: Callable[[], object], poll_s: float = 0.2):
    """``call()`` in a thread of its own, abandoned (and ``_HungUp`` raised) as soon as
    the kernel hangs up: an endpoint call cannot be interrupted, and an interrupted
    ``%%agent`` must not hold a place in the line until the endpoint answers."""
    import select

    box: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the handler thread
            box["error"] = exc
        done.set()

    threading.Thread(target=run, name="jupyter-data-agent-endpoint-call", daemon=True).start()
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLHUP | getattr(select, "POLLRDHUP", 0))
    while not done.wait(poll_s):
        if poller.poll(0):  # the client sends nothing after its request: readable means gone
            raise _HungUp()
    if "error" in box:
        raise box["error"]
    return box["value"]
