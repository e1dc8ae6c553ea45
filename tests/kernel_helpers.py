"""Real ipykernel processes for tests, with helpers to run cells and read replies."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel

__all__ = ["CellRun", "run_cell", "start_kernel", "stop_kernel"]


@dataclass
class CellRun:
    """What executing one cell in a real kernel produced."""

    status: str
    stdout: str = ""
    stderr: str = ""
    outputs: list[dict] = field(default_factory=list)
    payload: list[dict] = field(default_factory=list)
    error: dict | None = None

    def next_input(self) -> str | None:
        for item in self.payload:
            if item.get("source") == "set_next_input":
                return item.get("text")
        return None

    def display_text(self) -> str:
        parts = []
        for out in self.outputs:
            data = out.get("data", {})
            parts.append(str(data.get("text/markdown") or data.get("text/html") or data.get("text/plain") or ""))
        return "\n".join(parts)


def run_cell(kc, code: str, timeout: float = 120.0, *, pump: Callable[[], None] | None = None) -> CellRun:
    """Run ``code`` and collect what it produced. ``pump``: called while no message has come, for a
    cell that needs an event loop of this thread to run meanwhile (a Jupyter server's, in a test)."""
    msg_id = kc.execute(code)
    run = CellRun(status="unknown")
    deadline = time.monotonic() + timeout
    while True:
        if pump is None:
            msg = kc.get_iopub_msg(timeout=timeout)
        else:
            try:
                msg = kc.get_iopub_msg(timeout=0.01)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise
                pump()
                continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            if content["name"] == "stdout":
                run.stdout += content["text"]
            else:
                run.stderr += content["text"]
        elif kind in ("display_data", "execute_result", "update_display_data"):
            run.outputs.append(content)
        elif kind == "error":
            run.error = content
        elif kind == "status" and content["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=timeout)
    run.status = reply["content"]["status"]
    run.payload = reply["content"].get("payload", [])
    return run
