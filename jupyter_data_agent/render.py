"""Candidate output and model text as data: MIME bundles a page cannot run.

Everything a candidate produced — its streams, its display outputs, its value,
and the model's own words (step explanations, final answers) — is untrusted.
JupyterLab runs ``<script>`` in *trusted* HTML and renders raw HTML inside
trusted Markdown, and outputs a kernel displays are trusted. So nothing here
passes a candidate's HTML, SVG, Markdown or JavaScript through: text is
escaped, images are PNG/JPEG whose bytes were decoded and checked, and tables
are rebuilt from the value handle by us, every cell escaped. Each bundle also
carries a ``text/plain`` form. The magic uses these today; the server and the
sidebar can reuse them.
"""

from __future__ import annotations

import base64
import binascii
import html
from typing import Any, Iterable

# Image types we re-emit, with the leading bytes their decoded data must have.
_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
_MAX_IMAGE_CHARS = 8_000_000  # base64 characters of one image
_MAX_TEXT = 20_000  # characters of one text output in a preview
_MAX_ROWS = 20
_TABLE_TYPES = ("DataFrame", "Series")
# The one MIME type shown (escaped) as text; besides checked images, every other
# type a candidate displays is left out and named in a note.
_TEXT = "text/plain"
_MAX_NAMED = 8  # MIME types named in that note


def escape(value: Any) -> str:
    """``str(value)`` safe inside HTML text and quoted attributes."""
    return html.escape(str(value), quote=True)


def _text(value: Any) -> str:
    """nbformat text: a string or a list of lines; capped for a preview."""
    text = "".join(map(str, value)) if isinstance(value, list) else str(value or "")
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "\n… (cut here)"


def safe_image(mime: str, data: Any) -> str | None:
    """Canonical base64 of a PNG/JPEG whose bytes decode and start right, else None.

    Re-encoding means the ``src`` we write holds only the base64 alphabet,
    whatever the candidate put in its bundle.
    """
    signature = _SIGNATURES.get(mime)
    if signature is None or not isinstance(data, str) or len(data) > _MAX_IMAGE_CHARS:
        return None
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(signature):
        return None
    return base64.b64encode(raw).decode("ascii")


def table_html(handle) -> str:
    """A DataFrame or Series value handle as our own HTML table, every cell escaped;
    "" for any other value."""
    if handle is None or not str(handle.type).endswith(_TABLE_TYPES):
        return ""
    value = handle.value
    if not isinstance(value, dict) or not isinstance(value.get("values"), list):
        return ""
    index = value.get("index") if isinstance(value.get("index"), list) else []
    index_name = escape(value.get("index_name") or "")
    if "columns" in value:
        columns = value.get("columns") if isinstance(value.get("columns"), list) else []
        header = "".join(f"<th>{escape(c)}</th>" for c in columns)
        rows = value["values"]
    else:
        header = f"<th>{escape(value.get('name', ''))}</th>"
        rows = [[v] for v in value["values"]]
    body = []
    for i, row in enumerate(rows[:_MAX_ROWS]):
        label = escape(index[i]) if i < len(index) else ""
        cells = "".join(f"<td>{escape(v)}</td>" for v in (row if isinstance(row, list) else [row]))
        body.append(f"<tr><th>{label}</th>{cells}</tr>")
    more = len(rows) > _MAX_ROWS or handle.truncated
    # The size only where the table does not show it all, and in words: a bare "6" under
    # a table read as a stray value.
    note = f"<div>{escape(_size(handle.shape))} (first rows and columns shown)</div>" if more else ""
    return (f"<table><thead><tr><th>{index_name}</th>{header}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{note}")


def _size(shape: Any) -> str:
    """ "120 rows × 3 columns", "6 rows": a table's shape in words."""
    dims = [int(n) for n in shape or [] if isinstance(n, int)]
    words = [f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in zip(dims, ("row", "column"))]
    return " × ".join(words)


def preview_bundle(result) -> dict[str, str]:
    """The executed output of a candidate (an ``ExecResult``) as a bundle of data only;
    {} when it did not run."""
    if result is None:
        return {}
    title = "Output preview (ran in a kernel copy; your kernel is unchanged)"
    if not result.ok:
        detail = result.error_line()
        return {"text/html": "<div class='jp-DataAgent-preview jp-DataAgent-previewError'>"
                             "<b>Output preview (kernel copy): error</b>"
                             f"<pre>{escape(detail)}</pre></div>",
                "text/plain": f"Output preview (kernel copy): error\n{detail}"}
    parts: list[str] = []
    plain: list[str] = []
    left_out: list[str] = []
    table = table_html(result.value)
    for out in result.outputs:
        data = out.data if isinstance(out.data, dict) else {}
        if out.output_type == "stream":
            text = _text(out.text)
            parts.append(f"<pre>{escape(text)}</pre>")
            plain.append(text)
            continue
        if out.output_type == "error":
            text = _text(f"{out.ename}: {out.evalue}")
            parts.append(f"<pre>{escape(text)}</pre>")
            plain.append(text)
            continue
        text = _text(data.get(_TEXT, ""))
        image = next(((m, b) for m in _SIGNATURES if (b := safe_image(m, data.get(m)))), None)
        if out.output_type == "execute_result" and table:
            parts.append(table)  # the value itself, rebuilt: its own HTML is not needed
            plain.append(text)
            table = ""
            continue
        if image:
            parts.append(f"<img src='data:{image[0]};base64,{image[1]}'/>")
            plain.append(f"[{image[0]}]")
        elif text:
            parts.append(f"<pre>{escape(text)}</pre>")
            plain.append(text)
        shown = (_TEXT, image[0]) if image else (_TEXT,)
        left_out += [str(m)[:80] for m in data if m not in shown and str(m)[:80] not in left_out]
    if left_out:
        note = ("(not shown here: the candidate's " + ", ".join(left_out[:_MAX_NAMED])
                + " output; a candidate's HTML, SVG or script never runs in your page)")
        parts.append(f"<i>{escape(note)}</i>")
        plain.append(note)
    body = "".join(parts) or "<i>(no output)</i>"
    return {"text/html": f"<div class='jp-DataAgent-preview'><b>{escape(title)}</b>{body}</div>",
            "text/plain": title + "\n" + ("\n".join(plain) or "(no output)")}


def text_bundle(title: str, lines: Iterable[str]) -> dict[str, str]:
    """Our heading over model-written lines, escaped: never rendered as Markdown,
    which would pass raw HTML and ``javascript:`` links through to the page."""
    items = [str(line) for line in lines]
    rows = "".join(f"<div>{escape(line)}</div>" for line in items)
    return {"text/html": f"<div class='jp-DataAgent-text'><b>{escape(title)}</b>{rows}</div>",
            "text/plain": "\n".join([title, *items])}
