"""Counts in words for the lines a user reads ("1 node", "2 nodes", "no answers"), not "1 nodes"."""

from __future__ import annotations


def counted(n: int, word: str, plural: str | None = None, *, none: str | None = None) -> str:
    """``n`` ``word``s in plain English: "1 node", "3 nodes"; ``none`` for 0 ("no answers")."""
    if n == 0 and none is not None:
        return none
    return f"{n} {word if n == 1 else (plural or word + 's')}"
