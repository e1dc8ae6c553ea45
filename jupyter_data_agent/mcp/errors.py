"""Every tool failure reaches the agent with its reason, and no secret; free of any MCP SDK.

An MCP SDK turns an exception it did not expect into "Error executing tool
try_code" and nothing else (its text may hold secrets, so it stays on the
server). An agent cannot act on that, and neither can the user it reports to:
here an unexpected exception becomes the SDK's tool error of one line (its type
and first line) with every known secret masked, while the server log keeps the
whole traceback. A ``ToolFailure`` (a failure the tools meant, in words) becomes
that tool error as it is; the SDK's own errors and cancellation pass through.
Both hosts of the tools use this: our route (mcp SDK 2, ``tools``) and
jupyter-server-mcp's (fastmcp, ``host``), each naming its SDK's error types.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

#: Characters of a reason (one line).
REASON_CHARS = 300
#: ``token=...``, ``Authorization: Bearer ...``, ``api_key: ...``: the value after such a name.
_NAMED_SECRET = re.compile(r"(?i)\b(token|api[_-]?key|authorization|password|passwd|secret)(\s*[=:]\s*)"
                           r"(bearer\s+|token\s+)?[^\s,;&'\"]+")


class ToolFailure(Exception):
    """A tool's failure in words, for the agent as it is (bad input, no such notebook, no rights)."""


def reason(exc: BaseException, secrets: Iterable[str | None] = ()) -> str:
    """``Type: first line of the message``, bounded, with ``secrets`` and secret-looking values masked."""
    from ..kernel.host.client import first_line
    from ..turn.copies import secrets_scrubber

    text = f"{type(exc).__name__}: {first_line(exc)}" if str(exc).strip() else type(exc).__name__
    text = _NAMED_SECRET.sub(lambda m: m.group(1) + m.group(2) + "***", text)
    text = secrets_scrubber(*secrets).text(text)
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


def reasoned(name: str, secrets: Callable[[tuple, dict], Iterable[str | None]], *,
             failure: Callable[[str], Exception], passthrough: tuple[type[BaseException], ...] = (),
             check: Callable[[Any], None] | None = None) -> Callable[[F], F]:
    """The tool ``name`` with its failures as the SDK's tool error ``failure(words)``: a
    ``ToolFailure``'s words as they are, an unexpected exception's ``reason``; ``secrets(args,
    kwargs)``: the call's secrets to mask (the caller's tokens). ``passthrough``: the SDK's own
    errors, raised as they are. ``check``: run on the answer, where a mismatch with the tool's
    output model still gets its reason (an SDK that checks it after the tool returns says none)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await fn(*args, **kwargs)
                if check is not None:
                    check(result)
                return result
            except ToolFailure as exc:
                raise failure(str(exc)) from None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, passthrough):
                    raise
                log.exception("jupyter_data_agent: MCP tool %s failed", name)
                try:
                    known = list(secrets(args, kwargs))
                except Exception:  # noqa: BLE001 -- no caller (a bypassed route): the patterns still mask
                    known = []
                raise failure(f"{name} failed on the server: {reason(exc, known)}. The server log has "
                              "the details.") from exc

        return call  # type: ignore[return-value]

    return wrap
