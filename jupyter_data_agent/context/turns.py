"""Turn history persisted inside the notebook file itself: the reader.

Turns live in notebook metadata so that they travel with the ``.ipynb`` (no
side database), survive a server restart, and feed the next prompt (the
training data are the decisions the front end posts to the server's store,
not these). The solution cells also carry a small pointer in their own
cell metadata so that a cell moved, copied or re-ordered by the user still
knows which intent it answers.

The front end is the only writer (``src/metadata.ts``, ``src/notebook.ts``);
this module only reads what it stores. ``tests/data/turns.golden.ipynb`` holds
that format, and both sides' tests read it. Layout (JSON-safe, versioned)::

    nb.metadata["jupyter_data_agent"] = {"version": 1, "turns": [<turn dict>, ...]}
    cell.metadata["jupyter_data_agent"] = {"turn_id": ..., "intent": ..., "status": ...}

A turn dict has the fields of :class:`Turn`; ``confinement`` (the sidebar's
badge) and ``answer`` are optional (the front end stores no ``answer``: an
Explain reply lives in the sidebar's session only). The keys :class:`Turn`
does not model (the front end's ``strategy``, ``explanations``,
``edits_cell``, ``failure``, ``previews``, or a newer version's) are kept in
``Turn.extra``.

Functions accept an ``nbformat.NotebookNode`` or a plain dict in nbformat v4
shape (what the front end posts), and never change it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import fields
from typing import Any, get_args

from .model import METADATA_KEY, Turn, TurnStatus

STATUSES: tuple[str, ...] = get_args(TurnStatus)
# The keys Turn models; any other key of a stored turn goes to ``Turn.extra``.
_TURN_KEYS = frozenset(f.name for f in fields(Turn)) - {"extra"}


def new_turn_id() -> str:
    """The id the server gives a turn it starts (the front end stores it)."""
    return uuid.uuid4().hex[:12]


# --------------------------------------------------------------------------
# typed reading


def _json_dict(value: Any) -> dict[str, Any] | None:
    """A deep, JSON-safe copy of a mapping (None if it is not one or not JSON)."""
    if not isinstance(value, Mapping):
        return None
    try:
        copy = json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError):
        return None
    return copy if isinstance(copy, dict) else None


def _str_list(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None]
    return []


def turn_from_dict(data: MutableMapping[str, Any] | dict) -> Turn:
    """Tolerant: notebooks are edited by hand and by other tools, so bad or
    missing fields degrade to defaults instead of failing the whole read."""
    status = data.get("status", "pending")
    created = data.get("created")
    try:
        created = float(created) if created is not None else None
    except (TypeError, ValueError):
        created = None
    answer = data.get("answer")
    return Turn(
        intent=str(data.get("intent") or ""),
        code=str(data.get("code") or ""),
        status=status if status in STATUSES else "pending",
        turn_id=str(data.get("turn_id") or ""),
        cell_ids=_str_list(data.get("cell_ids")),
        candidates=_str_list(data.get("candidates")),
        created=created,
        answer=answer if isinstance(answer, str) else None,
        confinement=_json_dict(data.get("confinement")),
        extra=_json_dict({k: v for k, v in data.items() if k not in _TURN_KEYS}) or {},
    )


# --------------------------------------------------------------------------
# notebook-level storage


def read_turns(nb: MutableMapping[str, Any]) -> list[Turn]:
    """All turns stored in the notebook, in recorded order ([] if none)."""
    store = (nb.get("metadata") or {}).get(METADATA_KEY)
    if not isinstance(store, MutableMapping):
        return []
    # A newer version is read best-effort: the fields we know keep their meaning.
    raw = store.get("turns")
    if not isinstance(raw, list):
        return []
    return [turn_from_dict(t) for t in raw if isinstance(t, MutableMapping)]


def get_turn(nb: MutableMapping[str, Any], turn_id: str) -> Turn | None:
    return next((t for t in read_turns(nb) if t.turn_id == turn_id), None)


# --------------------------------------------------------------------------
# cell-level pointer


def cell_turn_info(cell: MutableMapping[str, Any]) -> dict[str, str] | None:
    """The ``{"turn_id", "intent", "status"}`` pointer of a cell, if it has one."""
    info = (cell.get("metadata") or {}).get(METADATA_KEY)
    if not isinstance(info, MutableMapping) or not info.get("turn_id"):
        return None
    status = info.get("status", "pending")
    return {
        "turn_id": str(info["turn_id"]),
        "intent": str(info.get("intent") or ""),
        "status": status if status in STATUSES else "pending",
    }


__all__ = [
    "cell_turn_info",
    "get_turn",
    "new_turn_id",
    "read_turns",
    "turn_from_dict",
]
