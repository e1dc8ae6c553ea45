"""Tool results as an agent reads them: JSON text within a character budget, plots as images.

A copy's result is already bounded where it is received (``kernel.tree.received``),
but those bounds are sized for the browser (megabytes); an agent's context
is smaller. Every cut says what was cut and by how much. Free of any MCP SDK:
each host wraps the JSON and the plots in its SDK's content types.
"""

from __future__ import annotations

import json
from typing import Any

from ..kernel.results import ExecResult, strip_ansi

#: Characters of one stream, one display text, or the value preview an agent gets.
TEXT_CHARS = 20_000
#: Characters of a traceback (its last lines: where it failed).
TRACEBACK_CHARS = 4_000
#: The canonical answer form is sent only when its JSON is at most this long.
FORM_CHARS = 20_000
#: Plots sent as images per result, and base64 characters per image.
MAX_IMAGES = 4
IMAGE_CHARS = 2_000_000
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def cut(text: str, limit: int = TEXT_CHARS, *, tail: bool = False) -> str:
    """``text`` within ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    note = f"\n[... {len(text) - limit:,} of {len(text):,} characters cut ...]\n"
    return note + text[-limit:] if tail else text[:limit] + note


def exec_json(result: ExecResult) -> dict[str, Any]:
    """What an agent needs of one run: streams, error, value preview and answer form, displays."""
    displays = []
    for item in result.outputs:
        if item.output_type in ("execute_result", "display_data"):
            text = item.data.get("text/plain")
            if isinstance(text, str):
                displays.append(cut(strip_ansi(text)))
            elif any(m in item.data for m in IMAGE_TYPES):
                displays.append("[image: sent as image content]")
    error = None
    if result.status != "ok":
        error = {"ename": result.ename or result.status, "evalue": cut(result.evalue or "", 2_000),
                 "traceback": cut(strip_ansi("\n".join(result.traceback)), TRACEBACK_CHARS, tail=True),
                 "limit": result.limit}
    value = None
    if result.value is not None:
        preview, cut_note = plain(result.value.value)
        form = agent_form(result.value.form)
        form_text = json.dumps(form, default=str) if form is not None else ""
        value = {"type": result.value.type, "shape": result.value.shape, "preview": preview,
                 "preview_truncated": bool(result.value.truncated) or bool(cut_note), "preview_note": cut_note,
                 "answer_form": form if form is not None and len(form_text) <= FORM_CHARS else None,
                 "answer_form_note": "" if len(form_text) <= FORM_CHARS else
                 f"the canonical form is {len(form_text):,} characters; compare with compare_answers"}
    return {"status": result.status, "stdout": cut(strip_ansi(result.stream("stdout"))),
            "stderr": cut(strip_ansi(result.stream("stderr"))), "error": error, "value": value,
            "displays": displays[:20], "duration_s": round(result.duration_s, 4),
            "truncated": result.truncated}


def plain(value: Any, limit: int = TEXT_CHARS) -> tuple[Any, str]:
    """``value`` itself when its JSON is at most ``limit`` characters (an agent reads ``[3, 2]``, not
    ``"[3, 2]"``), else its JSON cut to ``limit`` as a string; and a note saying which."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    if len(text) <= limit:
        return json.loads(text), ""
    return cut(text, limit), f"the value's JSON is {len(text):,} characters: this preview is that text, cut"


#: Keys of an answer form's columns that only machines compare (BLAKE2b digests, rounded-value digests,
#: the number sketch with its mask digest): ``compare_answers`` reads the server's copy, not the agent's.
DIGEST_KEYS = frozenset({"digest", "q", "sketch"})


def agent_form(form: Any) -> Any:
    """The canonical answer form without its digests: what an agent can read of it."""
    if isinstance(form, dict):
        return {k: agent_form(v) for k, v in form.items() if k not in DIGEST_KEYS}
    if isinstance(form, list):
        return [agent_form(v) for v in form]
    return form


def plots(result: ExecResult | None) -> list[tuple[str, str]]:
    """The run's plots as (MIME type, base64 data): the first ``MAX_IMAGES``, each bounded."""
    found: list[tuple[str, str]] = []
    for item in result.outputs if result is not None else []:
        for mime in IMAGE_TYPES:
            data = item.data.get(mime)
            if isinstance(data, str) and len(data) <= IMAGE_CHARS and len(found) < MAX_IMAGES:
                found.append((mime, data.replace("\n", "")))
    return found
