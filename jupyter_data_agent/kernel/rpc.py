"""Evaluate one expression in a kernel without leaving a trace.

A silent ``execute_request`` with empty code carries the expression in
``user_expressions``: no execution count, nothing in ``In``/``Out``/``_``, no
output, no stdin, queued behind a running cell. The value comes back as its
``repr`` and is decoded with ``ast.literal_eval`` (so the expression must
evaluate to a literal: a str, number, list, dict...). ``call`` takes a
``BlockingKernelClient``, ``acall`` an ``AsyncKernelClient``; replies to other
requests on the client's shell channel are skipped, so give it a client
nobody else reads from.
"""

from __future__ import annotations

import ast
import queue
import time
from typing import Any


class KernelRPCError(RuntimeError):
    """The kernel could not evaluate the expression."""


class KernelTimeout(KernelRPCError, TimeoutError):
    """The kernel did not answer in time (busy running a cell, or dead)."""


class KernelExpressionError(KernelRPCError):
    """The expression raised in the kernel: ``"ename: evalue"``."""


def _send(kc, expression: str) -> str:
    """Send the silent request; its id. It names its channel: a gateway's websocket routes on it
    (and logs a request without one whole, the injected bootstrap included)."""
    msg = kc.session.msg("execute_request", dict(code="", silent=True, store_history=False,
                                                 user_expressions={"r": expression}, allow_stdin=False,
                                                 stop_on_error=False))
    msg["channel"] = "shell"
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _timeout(timeout: float | None) -> KernelTimeout:
    return KernelTimeout(f"the kernel did not answer within {timeout or 0:g} s "
                         f"(is it busy running a cell, or dead?)")


def _decode(reply: dict) -> Any:
    content = reply.get("content", {})
    return decode_expression(content.get("user_expressions", {}).get("r") if content.get("status") == "ok"
                             else content)


def decode_expression(ue: dict | None) -> Any:
    """One ``user_expressions`` entry (as IPython's ``InteractiveShell.user_expressions`` writes it)
    as its value; ``KernelRPCError`` when it carries none or the expression raised."""
    if not ue:
        raise KernelRPCError("the kernel's reply carried no result (not an IPython kernel?)")
    if ue.get("status") != "ok":
        raise KernelExpressionError(f"{ue.get('ename', 'Error')}: {ue.get('evalue', '')}")
    try:
        return ast.literal_eval(ue["data"]["text/plain"])
    except (KeyError, ValueError, SyntaxError, TypeError) as e:
        raise KernelRPCError(f"could not decode the kernel's answer: {e}") from e


def call(kc, expression: str, *, timeout: float | None) -> Any:
    """The value of ``expression`` in the kernel of a blocking client (``timeout``
    None: wait as long as it takes)."""
    msg_id = _send(kc, expression)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            reply = kc.get_shell_msg(timeout=_left(deadline))
        except queue.Empty:
            raise _timeout(timeout) from None
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return _decode(reply)


async def acall(kc, expression: str, *, timeout: float | None) -> Any:
    """The value of ``expression`` in the kernel of an async client. A wait that gives up
    early (a gateway's client stops waiting after 1 s by default) is waited again."""
    msg_id = _send(kc, expression)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = _left(deadline)
        if left == 0.0:
            raise _timeout(timeout)
        try:
            reply = await kc.get_shell_msg(timeout=left if left is not None else 3600.0)
        except queue.Empty:
            continue
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return _decode(reply)
