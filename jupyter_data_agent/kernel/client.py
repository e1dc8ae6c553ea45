"""Kernel clients the product opens on a user's kernel, local or behind a kernel gateway."""

from __future__ import annotations

import uuid
from typing import Any

from jupyter_core.utils import ensure_async


def own_client(km: Any) -> Any:
    """A kernel client with a session id of its own.

    ``km.client()`` clones the manager's session, id included, and the id is
    the ZMQ identity of the shell socket: a second client with the same id
    takes the kernel's replies away from the first (another turn, another
    extension) and, once closed, leaves them undeliverable.
    """
    session = km.session.clone()
    session.session = str(uuid.uuid4())
    return km.client(session=session)


def on_another_host(km: Any) -> bool:
    """Whether ``km`` is a kernel a Jupyter (Enterprise) Kernel Gateway runs (``--gateway-url``)."""
    try:
        from jupyter_server.gateway.managers import GatewayKernelManager
    except ImportError:  # pragma: no cover - jupyter_server without the gateway
        return False
    return isinstance(km, GatewayKernelManager)


async def open_client(km: Any) -> Any:
    """``own_client(km)`` with its shell channel started, ready for silent requests.

    Replies come on the shell channel; IOPub would only pile up unread. A
    gateway's client (a coroutine to start) routes every channel through one
    websocket and stops routing at the first IOPub message it has no queue
    for, so there IOPub is started too. Raises what the client raised (a
    gateway's websocket handshake, say).
    """
    kc = own_client(km)
    await ensure_async(kc.start_channels(shell=True, iopub=on_another_host(km), stdin=False, hb=False,
                                         control=False))
    return kc


def first_line(exc: BaseException) -> str:
    """An error's message without what follows its first line (websocket-client appends the headers)."""
    return str(exc).split(" -+-+- ")[0].splitlines()[0] if str(exc) else ""
