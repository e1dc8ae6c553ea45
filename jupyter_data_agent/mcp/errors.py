"""Every tool failure reaches the agent with its reason, and no secret.

The SDK turns an exception it did not expect into "Error executing tool
try_code" and nothing else (its text may hold secrets, so it stays on the
server). An agent cannot act on that, and neither can the user it reports to:
here an unexpected exception becomes a ``ToolError`` of one line (its type and
first line) with every known secret masked, while the server log keeps the
whole traceback. Deliberate ``ToolError``s, protocol errors (``MCPError``) and
cancellation pass through unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from pydantic import BaseModel

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

#: Characters of a reason (one line).
REASON_CHARS = 300
#: ``token=...``, ``Authorization: Bearer ...``, ``api_key: ...``: the value after such a name.
_NAMED_SECRET = re.compile(r"(?i)\b(token|api[_-]?key|authorization|password|passwd|secret)(\s*[=:]\s*)"
                           r"(bearer\s+|token\s+)?[^\s,;&'\"]+")


def reason(exc: BaseException, secrets: Iterable[str | None] = ()) -> str:
    """``Type: first line of the message``, bounded, with ``secrets`` and secret-looking values masked."""
    from ..kernel.host.client import first_line
    from ..turn.copies import secrets_scrubber

    text = f"{type(exc).__name__}: {first_line(exc)}" if str(exc).strip() else type(exc).__name__
    text = _NAMED_SECRET.sub(lambda m: m.group(1) + m.group(2) + "***", text)
    text = secrets_scrubber(*secrets).text(text)
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


def reasoned(name: str, secrets: Callable[[tuple, dict], Iterable[str | None]],
             model: type[BaseModel] | None = None) -> Callable[[F], F]:
    """The tool ``name`` with its unexpected exceptions as ``ToolError``s in words (``reason``);
    ``secrets(args, kwargs)``: the call's secrets to mask (the caller's tokens). ``model``: the
    answer's structured content is checked against it here, where a mismatch still gets its
    reason (the SDK checks it again after the tool returns, and would say none)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await fn(*args, **kwargs)
                if model is not None and isinstance(result, CallToolResult) and not result.is_error:
                    model.model_validate(result.structured_content)
                return result
            except (ToolError, MCPError, asyncio.CancelledError):
                raise
            except Exception as exc:
                log.exception("jupyter_data_agent: MCP tool %s failed", name)
                try:
                    known = list(secrets(args, kwargs))
                except Exception:  # noqa: BLE001 -- no caller (a bypassed route): the patterns still mask
                    known = []
                raise ToolError(f"{name} failed on the server: {reason(exc, known)}. The server log has "
                                "the details.") from exc

        return call  # type: ignore[return-value]

    return wrap
