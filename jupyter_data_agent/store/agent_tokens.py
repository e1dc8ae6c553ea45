"""Scoped tokens for outside agents: made by the user, named, listed, revoked.

A token is shown once, when it is made (``jupyter-data-agent token create``
or the sidebar), and kept here only as its SHA-256 hash, in a 0600 file in
the user's Jupyter data dir (which kernel copies cannot read). The server
reads the file again whenever it changed, so a token made or revoked from a
terminal counts at once. What such a token may open is decided by
``server.agent_auth``: the agent's routes, never the user's whole server.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from . import PRIVATE_FILE_MODE, agent_data_dir, private_dir

FILE_NAME = "agent_tokens.json"
#: Every agent token starts so: the server tells it from its own token at a glance.
PREFIX = "jda_"
_TOKEN = re.compile(r"^jda_([0-9a-f]{12})_[A-Za-z0-9_-]{32,}$")
MAX_NAME = 80


@dataclass(frozen=True)
class AgentToken:
    """One token as kept (never the token itself)."""

    id: str
    name: str  # the agent it was made for, as the sidebar shows it ("Claude Code")
    user: str  # who made it: the agent acts for this user
    created: str  # ISO 8601, UTC
    digest: str  # SHA-256 of the token, hex


def default_tokens_path() -> Path:
    """``<jupyter data dir>/jupyter_data_agent/agent_tokens.json``."""
    return agent_data_dir() / FILE_NAME


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AgentTokenStore:
    """The tokens of one user's server; safe to use from the server and a terminal at once."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_tokens_path()
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._tokens: dict[str, AgentToken] = {}

    # -- reading -----------------------------------------------------------------------
    def tokens(self) -> list[AgentToken]:
        with self._lock:
            self._reload()
            return sorted(self._tokens.values(), key=lambda t: t.created)

    def verify(self, token: str) -> AgentToken | None:
        """The token's record if ``token`` is one of them (compared in constant time)."""
        match = _TOKEN.match(token or "")
        if match is None:
            return None
        with self._lock:
            self._reload()
            record = self._tokens.get(match.group(1))
        if record is None or not hmac.compare_digest(record.digest, _digest(token)):
            return None
        return record

    # -- writing -----------------------------------------------------------------------
    def create(self, name: str, user: str) -> tuple[AgentToken, str]:
        """A new token for the agent ``name``: its record, and the token (shown once)."""
        name = " ".join(str(name).split())[:MAX_NAME]
        if not name:
            raise ValueError("Give the agent a name (--name \"Claude Code\"): the sidebar shows it.")
        token_id = secrets.token_hex(6)
        token = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        record = AgentToken(id=token_id, name=name, user=user, digest=_digest(token),
                            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        with self._lock:
            self._reload()
            self._tokens[token_id] = record
            self._save()
        return record, token

    def revoke(self, which: str) -> list[AgentToken]:
        """Revoke the tokens with this id or name; returns them (none: a ValueError in words)."""
        with self._lock:
            self._reload()
            gone = [t for t in self._tokens.values() if which in (t.id, t.name)]
            if not gone:
                known = ", ".join(f"{t.name} ({t.id})" for t in self._tokens.values()) or "none"
                raise ValueError(f"No agent token named or numbered {which!r}; the tokens are: {known}.")
            for t in gone:
                del self._tokens[t.id]
            self._save()
        return gone

    # -- the file ----------------------------------------------------------------------
    def _reload(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._tokens, self._stamp = {}, None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            data = json.loads(self.path.read_text())
            tokens = {t["id"]: AgentToken(**{k: str(t[k]) for k in AgentToken.__dataclass_fields__})
                      for t in data.get("tokens", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"The agent token file {self.path} cannot be read ({exc}); remove it and "
                             "make the tokens again.") from None
        self._tokens, self._stamp = tokens, stamp

    def _save(self) -> None:
        folder = private_dir(self.path.parent, tighten=True)
        body = json.dumps({"version": 1, "tokens": [asdict(t) for t in self._tokens.values()]}, indent=1)
        fd, tmp = tempfile.mkstemp(prefix=".agent_tokens-", dir=folder)
        try:
            os.fchmod(fd, PRIVATE_FILE_MODE)
            with os.fdopen(fd, "w") as f:
                f.write(body)
            os.replace(tmp, self.path)  # readers see the old file or the new one, never half
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        st = self.path.stat()
        self._stamp = (st.st_mtime_ns, st.st_size)
