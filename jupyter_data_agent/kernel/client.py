"""Kernel clients the product opens on a user's kernel."""

from __future__ import annotations

import uuid
from typing import Any


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
