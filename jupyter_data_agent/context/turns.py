"""Turn history persisted inside the notebook file itself.

Turns live in notebook metadata so that they travel with the ``.ipynb`` (no
side database), survive a server restart, and feed the next prompt and the
training export. The solution cells also carry a small pointer in their own
cell metadata so that a cell moved, copied or re-ordered by the user still
knows which intent it answers.

Layout (JSON-safe, versioned)::

    nb.metadata["jupyter_data_agent"] = {"version": 1, "turns": [<turn dict>, ...]}
    cell.metadata["jupyter_data_agent"] = {"turn_id": ..., "intent": ..., "status": ...}

A turn dict has the fields of :class:`Turn`; ``answer`` (Explain) and
``confinement`` (the sidebar's badge) only when set. Keys written by the
front end or a newer version (``strategy``, ``explanations``...) are kept
as they are: the turns are rewritten on every decision, and a rewrite must
not lose what the sidebar shows after a reload.

Functions accept an ``nbformat.NotebookNode`` or a plain dict in nbformat v4
shape (what the front end posts), and mutate it in place.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import fields
from typing import Any, get_args

from .model import METADATA_KEY, Turn, TurnStatus

TURNS_VERSION = 1
STATUSES: tuple[str, ...] = get_args(TurnStatus)
# The keys Turn models; any other key of a stored turn goes to ``Turn.extra``.
_TURN_KEYS = frozenset(f.name for f in fields(Turn)) - {"extra"}


def new_turn_id() -> str:
    return uuid.uuid4().hex[:12]


# --------------------------------------------------------------------------
# typed (de)serialization


def turn_to_dict(turn: Turn) -> dict[str, Any]:
    """A plain JSON-safe dict. ``answer`` and ``confinement`` appear only when
    set (the front end reads them as optional); ``extra`` keys follow as
    they were read, so a rewrite keeps what other writers stored."""
    data: dict[str, Any] = {
        "turn_id": str(turn.turn_id),
        "intent": str(turn.intent),
        "code": str(turn.code),
        "status": turn.status if turn.status in STATUSES else "pending",
        "cell_ids": [str(c) for c in turn.cell_ids],
        "candidates": [str(c) for c in turn.candidates],
        "created": float(turn.created) if turn.created is not None else None,
    }
    if turn.answer is not None:
        data["answer"] = str(turn.answer)
    confinement = _json_dict(turn.confinement)
    if confinement is not None:
        data["confinement"] = confinement
    for key, value in (_json_dict(turn.extra) or {}).items():
        data.setdefault(key, value)
    return data


def _json_dict(value: Any) -> dict[str, Any] | None:
    """A deep, JSON-safe copy of a mapping (None if it is not one or not JSON):
    the notebook file must stay loadable whatever a caller put there."""
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


def _metadata(obj: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    md = obj.get("metadata")
    if not isinstance(md, MutableMapping):
        md = {}
        obj["metadata"] = md
    return md


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


def write_turns(nb: MutableMapping[str, Any], turns: Iterable[Turn]) -> None:
    """Replace the stored turns; other keys under our metadata key are kept."""
    md = _metadata(nb)
    old = md.get(METADATA_KEY)
    store = dict(old) if isinstance(old, MutableMapping) else {}
    try:
        store["version"] = max(TURNS_VERSION, int(store.get("version")))
    except (TypeError, ValueError):
        store["version"] = TURNS_VERSION
    store["turns"] = [turn_to_dict(t) for t in turns]
    md[METADATA_KEY] = store


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


def tag_cell(cell: MutableMapping[str, Any], turn: Turn) -> None:
    _metadata(cell)[METADATA_KEY] = {
        "turn_id": turn.turn_id,
        "intent": turn.intent,
        "status": turn.status,
    }


def _cells(nb: MutableMapping[str, Any]) -> list[MutableMapping[str, Any]]:
    cells = nb.get("cells")
    return cells if isinstance(cells, list) else []


# --------------------------------------------------------------------------
# recording and decisions


def record_turn(
    nb: MutableMapping[str, Any],
    turn: Turn,
    cell: MutableMapping[str, Any] | int | None = None,
) -> Turn:
    """Insert or update ``turn`` (matched by id) and optionally tag its cell.

    Fills in a fresh ``turn_id`` and ``created`` time when missing so callers
    can record a turn the moment the user asks, before any code exists.
    ``cell`` is a cell object of ``nb`` or its index.
    """
    if not turn.turn_id:
        turn.turn_id = new_turn_id()
    if turn.created is None:
        turn.created = time.time()
    if isinstance(cell, int):
        cell = _cells(nb)[cell]
    if cell is not None:
        cid = cell.get("id")
        if cid and cid not in turn.cell_ids:
            turn.cell_ids.append(str(cid))
        tag_cell(cell, turn)
    turns = read_turns(nb)
    i = next((i for i, t in enumerate(turns) if t.turn_id == turn.turn_id), len(turns))
    turns[i : i + 1] = [turn]  # replaced where it was, else appended
    write_turns(nb, turns)
    return turn


def set_status(
    nb: MutableMapping[str, Any],
    turn_id: str,
    status: TurnStatus,
    *,
    code: str | None = None,
) -> Turn:
    """Record the user's decision, in the turn and in every cell tagged with it."""
    if status not in STATUSES:
        raise ValueError(f"unknown turn status {status!r}; expected one of {STATUSES}")
    turns = read_turns(nb)
    t = next((t for t in turns if t.turn_id == turn_id), None)
    if t is None:
        raise KeyError(f"no turn {turn_id!r} in this notebook")
    t.status = status
    if code is not None:
        t.code = code
    write_turns(nb, turns)
    for cell in _cells(nb):
        info = cell_turn_info(cell)
        if info and info["turn_id"] == turn_id:
            tag_cell(cell, t)
    return t


def mark_accepted(nb: MutableMapping[str, Any], turn_id: str, code: str | None = None) -> Turn:
    return set_status(nb, turn_id, "accepted", code=code)


def mark_rejected(nb: MutableMapping[str, Any], turn_id: str) -> Turn:
    return set_status(nb, turn_id, "rejected")


def mark_edited(nb: MutableMapping[str, Any], turn_id: str, code: str) -> Turn:
    """The user kept the cell but changed it; the edited code is what was
    actually wanted, so it replaces ``code`` (useful training signal)."""
    return set_status(nb, turn_id, "edited", code=code)


__all__ = [
    "TURNS_VERSION",
    "cell_turn_info",
    "get_turn",
    "mark_accepted",
    "mark_edited",
    "mark_rejected",
    "new_turn_id",
    "read_turns",
    "record_turn",
    "set_status",
    "tag_cell",
    "turn_from_dict",
    "turn_to_dict",
    "write_turns",
]
