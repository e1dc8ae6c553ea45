"""One secret scrubber for everything that leaves the process: errors, events, logs.

Candidate code runs with the user's data and may print a secret it found, in
plain text or encoded. Each secret is matched as itself, reversed, in ROT13, with
separators between its characters (whitespace, dashes, dots, commas, colons...),
with characters percent- or JSON-escaped, in hex, and in base64 (standard and
urlsafe, at the three byte alignments, padded or not). This cannot be
perfect (a candidate can always invent an encoding); the real defence is that
kernel copies hold no secret. Secrets shorter than ``MIN_ENCODED`` characters
(``EMPTY`` on local servers) are only replaced as whole tokens, so ordinary
words that contain them stay intact.
"""

from __future__ import annotations

import base64
import codecs
import dataclasses
import itertools
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
MIN_SECRET = 4  # shorter strings are not treated as secrets at all
MIN_ENCODED = 8  # shorter secrets: whole-token matches only, no encodings
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*.]{6,}")
_SEPARATORS = r"[\s.,\-_:;|/]*"
_HEX_SEPARATORS = r"[\s.,\-_:;]*"
_WORD = "A-Za-z0-9_"
_SECRET_QUERY = re.compile(r"key|token|secret|pass|auth|sig", re.IGNORECASE)


Form = tuple[str, bool]  # (text, hex digits in either case)


def _forms(c: str) -> list[Form]:
    """Ways ``c`` may be written: literally, JSON-escaped, percent-encoded."""
    forms = {(c, False), (json.dumps(c)[1:-1], False), (f"\\u{ord(c):04x}", True),
             ("".join(f"%{b:02x}" for b in c.encode()), True)}
    if c == "/":
        forms.add(("\\/", False))
    return sorted(forms)


def _regex(form: Form) -> str:
    text, nocase = form
    if not nocase:
        return re.escape(text)
    return "".join(f"[{ch.lower()}{ch.upper()}]" if ch.lower() != ch.upper() else re.escape(ch)
                   for ch in text)


def _spellings(form: Form) -> set[str]:
    text, nocase = form
    if not nocase:
        return {text}
    return {"".join(p) for p in itertools.product(*({ch.lower(), ch.upper()} for ch in text))}


def _sequence(elements: list[list[Form]], separators: str) -> list[str]:
    """Alternatives matching ``elements`` in order with separators between.

    Each alternative starts with a plain literal, so ``re`` scans for the
    possible first characters in C instead of trying every branch at every
    position (large outputs are scrubbed on the event loop).
    """
    rest = "".join(separators + "(?:" + "|".join(_regex(f) for f in forms) + ")"
                   for forms in elements[1:])
    heads = {h for form in elements[0] for h in _spellings(form)}
    return [re.escape(h) + rest for h in sorted(heads)]


def _spelled(text: str, separators: str = _SEPARATORS) -> list[str]:
    return _sequence([_forms(c) for c in text], separators)


def _hex(data: bytes) -> list[str]:
    """``data`` in hex, either case, bytes optionally ``0x``/``\\x`` prefixed and separated."""
    return _sequence([[(prefix + f"{b:02x}", True) for prefix in ("", "0x", "\\x")] for b in data],
                     _HEX_SEPARATORS)


def base64_cores(data: bytes) -> set[str]:
    """The base64 characters that depend only on ``data``, at each byte alignment.

    Inside a longer encoded string the secret starts at byte offset 0, 1 or 2
    of a 3-byte group; the characters it shares with its neighbours differ,
    the ones in between are the same wherever it sits (padding or not).
    """
    cores = set()
    for offset in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * offset + data).decode()
            start = -(-8 * offset // 6)
            end = 8 * (offset + len(data)) // 6
            cores.add(encoded[start:end])
    return cores


def _patterns(secret: str) -> list[str]:
    if len(secret) < MIN_ENCODED:
        # Whole tokens only; the lookbehind sits after the first character so
        # the pattern still starts with a literal.
        first = re.escape(secret[0])
        return [rf"{first}(?<![{_WORD}].){re.escape(secret[1:])}(?![{_WORD}])"]
    data = secret.encode()
    rot13 = codecs.encode(secret, "rot13")
    spelled = dict.fromkeys([secret, secret[::-1], rot13, rot13[::-1]])
    pats = [p for text in spelled for p in _spelled(text)] + _hex(data)
    for core in sorted(base64_cores(data)):
        pats += _sequence([[(ch, False)] for ch in core], r"\s*")
    return pats


class Scrubber:
    """Removes the configured secrets (and key-shaped strings) from outgoing text."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        self.secrets: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        """Scrub these too from now on: a key connected while the server runs (``server.connect``)
        reaches every holder of this scrubber."""
        self.secrets = sorted({s for s in (*self.secrets, *secrets) if s and len(s) >= MIN_SECRET},
                              key=len, reverse=True)
        patterns = [p for s in self.secrets for p in _patterns(s)]
        self._pattern = re.compile("|".join(patterns)) if patterns else None

    def text(self, value: str) -> str:
        if self._pattern is not None:
            value = self._pattern.sub(MASK, value)
        return _KEY_LIKE.sub("sk-" + MASK, value)

    def json(self, payload: Any) -> Any:
        """Every string of a JSON-able payload (keys too) scrubbed; returns plain JSON."""
        return self._walk(json.loads(json.dumps(payload, default=_jsonable)))

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        return value


def _jsonable(obj: Any) -> Any:
    to_json = getattr(obj, "to_json", None)
    if callable(to_json):
        return to_json()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return repr(obj)


def redact_url(url: str) -> str:
    """``url`` with ``user:password@`` shown as ``***@`` and secret-looking query values masked."""
    try:
        parts = urlsplit(url)
        has_credentials = parts.username is not None or parts.password is not None
    except ValueError:
        return url
    if has_credentials:
        parts = parts._replace(netloc=MASK + "@" + parts.netloc.rpartition("@")[2])
    if parts.query:
        query = [(k, MASK if _SECRET_QUERY.search(k) else v)
                 for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        parts = parts._replace(query=urlencode(query, safe="*"))
    return urlunsplit(parts)
