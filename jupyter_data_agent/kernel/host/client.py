"""Kernel clients the product opens on a user's kernel, local or behind a kernel gateway."""

from __future__ import annotations

import functools
import threading
import uuid
from typing import Any

from jupyter_core.utils import ensure_async


def own_client(km: Any) -> Any:
    """A kernel client with a session id of its own.

    ``km.client()`` clones the manager's session, id included, and the id is
    the ZMQ identity of the shell socket: a second client with the same id
    takes the kernel's replies away from the first (another turn, another
    extension) and, once closed, leaves them undeliverable. A gateway's
    kernel gets a client that sends the gateway its credentials
    (``_gateway_client``).
    """
    session = km.session.clone()
    session.session = str(uuid.uuid4())
    if on_another_host(km):
        return _gateway_client()(**{**km.get_connection_info(session=True), "session": session,
                                    "connection_file": km.connection_file, "parent": km,
                                    "kernel_id": km.kernel_id})
    return km.client(session=session)


@functools.cache
def _gateway_client() -> type:
    """jupyter_server's ``GatewayKernelClient`` that opens its websocket with the gateway's headers.

    jupyter_server 2.x opens it without them, so a gateway that asks for a
    token (as Enterprise Gateway deployments do) refuses the server's own
    clients (401) while the browser's path, which does send them, works.
    """
    import websocket
    from jupyter_server.gateway.gateway_client import GatewayClient
    from jupyter_server.gateway.managers import GatewayKernelClient
    from jupyter_server.utils import url_escape, url_path_join

    class AuthenticatedGatewayKernelClient(GatewayKernelClient):
        async def start_channels(self, shell=True, iopub=True, stdin=True, hb=True, control=True):
            gateway = GatewayClient.instance()
            headers = gateway.load_connection_args().get("headers") or {}
            ws_url = url_path_join(gateway.ws_url or "", gateway.kernels_endpoint, url_escape(self.kernel_id),
                                   "channels")
            self.channel_socket = websocket.create_connection(
                ws_url, timeout=gateway.KERNEL_LAUNCH_TIMEOUT, enable_multithread=True,
                header=headers, sslopt={"ca_certs": gateway.ca_certs, "certfile": gateway.client_cert,
                                        "keyfile": gateway.client_key})
            # the base class's base: the channels' queues; then the router, as upstream does
            await ensure_async(super(GatewayKernelClient, self).start_channels(
                shell=shell, iopub=iopub, stdin=stdin, hb=hb, control=control))
            self.response_router = threading.Thread(target=self._route_responses, daemon=True)
            self.response_router.start()

    return AuthenticatedGatewayKernelClient


def on_another_host(km: Any) -> bool:
    """Whether ``km`` is a kernel a Jupyter (Enterprise) Kernel Gateway runs (``--gateway-url``)."""
    try:
        from jupyter_server.gateway.managers import GatewayKernelManager
    except ImportError:  # pragma: no cover - jupyter_server without the gateway
        return False
    return isinstance(km, GatewayKernelManager)


async def open_client(km: Any, *, iopub: bool = False, control: bool = False) -> Any:
    """``own_client(km)`` with its shell channel started, ready for silent requests.

    Replies come on the shell channel; IOPub would only pile up unread unless
    asked for (``iopub``: the relay's replies, ``kernel.channel``; ``control``:
    its kernel subshell). A
    gateway's client (a coroutine to start) routes every channel through one
    websocket and stops routing at the first IOPub message it has no queue
    for, so there IOPub is started too. Raises what the client raised (a
    gateway's websocket handshake, say).
    """
    kc = own_client(km)
    await ensure_async(kc.start_channels(shell=True, iopub=iopub or on_another_host(km), stdin=False,
                                         hb=False, control=control))
    no_read_timeout(kc)
    return kc


def no_read_timeout(kc: Any) -> None:
    """A gateway's client (jupyter_server's ``GatewayKernelClient``) reads every channel from one
    websocket in a thread of its own, with KERNEL_LAUNCH_TIMEOUT (40 s by default) as the socket's
    timeout: a copy computing that long without output (and no ping from the gateway in between),
    or a kernel idle that long under a warm root's watch, ended the reading for good ("Response
    router had finished"), and with it the copies or the watch. Waits have deadlines of their own
    here; a websocket that closes still ends the reading. Other clients: unchanged."""
    sock = getattr(kc, "channel_socket", None)
    if sock is not None and callable(getattr(sock, "settimeout", None)):
        sock.settimeout(None)


def still_reading(kc: Any) -> bool:
    """Whether ``kc`` still hears its kernel: a gateway's client whose routing thread ended (its
    websocket closed) gets no message again, and waits on its queues for ever instead of failing."""
    router = getattr(kc, "response_router", None)
    return router is None or not callable(getattr(router, "is_alive", None)) or router.is_alive()


async def kernel_alive(km: Any) -> bool:
    """Whether ``km``'s kernel runs (a manager that cannot say is taken for a dead one)."""
    try:
        if getattr(km, "execution_state", None) == "dead":
            return False
        return bool(await ensure_async(km.is_alive()))
    except Exception:  # noqa: BLE001 -- a kernel manager that cannot say is not one to wait for
        return False


def first_line(exc: BaseException) -> str:
    """An error's message without what follows its first line (websocket-client appends the headers)."""
    return str(exc).split(" -+-+- ")[0].splitlines()[0] if str(exc) else ""
