"""The ``%%agent`` magic's turn, run by the Jupyter server that started this kernel.

One connection to the server's model service (``server.magic_turns`` is the
other end): the turn goes out, its events come back as they happen, and
the server's requests to read or fork this kernel are answered here, by the
kernel that runs the cell, with IPython's own ``user_expressions``.
Closing the connection (an interrupted cell) cancels the turn on the server.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from .context.model import NotebookContext
from .llm.base import BackendError
from .turn import TurnAsk
from .turn.report import TurnReport

_CONTEXT = TypeAdapter(NotebookContext)


def kernel_id() -> str:
    """This kernel's id as its server knows it (the connection file's name), "" outside one."""
    import os

    try:
        from ipykernel.connect import get_connection_file

        name = os.path.basename(get_connection_file())
    except (ImportError, RuntimeError, AttributeError):
        return ""
    return name[len("kernel-"):-len(".json")] if name.startswith("kernel-") and name.endswith(".json") else ""


def run(address: tuple[str, str], *, ask: TurnAsk, context: NotebookContext, notebook_dir: str,
        overrides: dict, evaluate: Callable[[str], dict], on_event: Callable[[dict], None]) -> TurnReport:
    """The turn's report once it ends; ``evaluate``: one expression in this kernel, as a
    ``user_expressions`` entry; ``on_event``: each event as it arrives."""
    path, token = address
    body = {"token": token, "op": "turn", "settings_overrides": overrides, "kernel_id": kernel_id(),
            "notebook_dir": notebook_dir, "ask": ask.model_dump(mode="json"),
            "context": _CONTEXT.dump_python(context, mode="json")}
    report = TurnReport()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except OSError as exc:
            raise BackendError(f"The Jupyter server's model service is gone ({path}: {exc.strerror or exc}). "
                               "Restart the kernel from a running Jupyter server.") from None
        with sock.makefile("rb") as reader:
            sock.sendall(json.dumps(body).encode() + b"\n")
            for line in iter(reader.readline, b""):
                message: dict[str, Any] = json.loads(line)
                if "error" in message:
                    raise BackendError(str(message["error"]))
                if "eval" in message:
                    reply = {"reply": message["id"], "value": evaluate(str(message["eval"]))}
                    sock.sendall(json.dumps(reply, default=str).encode() + b"\n")
                elif "event" in message:
                    report.read([message["event"]])
                    on_event(message["event"])
                    if report.finished:
                        return report
    raise BackendError("The Jupyter server closed the turn's connection (was the server stopped?).")
