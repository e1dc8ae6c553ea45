"""The one majority pick: answers grouped by :func:`.equivalence.same_answer`, the winner first.

Votes, mcts, the analysis's re-runs, MCP's tries and the benchmarks pick with
:func:`majority`; classes where one answer is the other with extra information
(:func:`.equivalence.extends`: row labels, the key twice, a column beside one
value column) are one class; a table missing a column of another is not.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .equivalence import agree_on_names, answer_key, as_form, extends, keys_agree, same_answer


def majority(answers: Sequence[Any], same: Callable[[Any, Any], bool] | None = None, *,
             scores: Sequence[float | None] | None = None,
             steps: Sequence[int] | None = None, covering: bool = True) -> list[list[int]]:
    """Self-consistency: indices of equal answers grouped, the winner first.

    ``None`` answers (errors, silent cells) never vote. Groups are ordered by
    size, then by their best score, then by first appearance; each group's
    first index is its representative: the member equal to most others, ties
    to the higher score, then fewer steps, then the earlier answer. ``same``
    replaces :func:`same_answer` (e.g. for answers in words). With forms,
    two classes where one :func:`extends` the other (an extra column beside
    one value column, row labels kept, the key as index and column) are one class: right answers
    in such forms no longer split the vote (measured in the equivalence lab,
    docs/benchmarks.md "Covering classes"); ``covering=False`` keeps them apart.
    """
    voters = [i for i, a in enumerate(answers) if a is not None]
    if same is None:
        values = {i: as_form(answers[i]) for i in voters}
        keys = {i: answer_key(values[i]) for i in voters}
        relation: Callable[[Any, Any], bool] = same_answer
    else:
        keys = {i: str(i) for i in voters}
        values = {i: answers[i] for i in voters}
        relation = same
    # one representative per distinct key; keys with equal representatives merge
    firsts: dict[str, int] = {}
    for i in voters:
        firsts.setdefault(keys[i], i)
    parent = {k: k for k in firsts}

    def root(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    distinct = list(firsts)
    for a_i, ka in enumerate(distinct):
        for kb in distinct[a_i + 1:]:
            if root(ka) != root(kb) and relation(values[firsts[ka]], values[firsts[kb]]):
                parent[root(kb)] = root(ka)
    if covering and same is None:
        for component in _covering_cliques([root(k) for k in distinct], lambda k: values[firsts[k]]):
            for k in component[1:]:
                parent[root(k)] = root(component[0])
    classes: dict[str, list[int]] = {}
    for i in voters:
        classes.setdefault(root(keys[i]), []).append(i)

    def score(i: int) -> float:
        s = scores[i] if scores is not None else None
        return s if s is not None else -math.inf

    def rep_order(group: list[int]) -> list[int]:
        count = Counter(keys[i] for i in group)
        # members with one key agree alike: compare one member per key
        agree = {k: count[k] - 1 + sum(count[o] for o in count if o != k and
                                       relation(values[firsts[k]], values[firsts[o]]))
                 for k in count}
        return sorted(group, key=lambda i: (-agree[keys[i]], -score(i), steps[i] if steps is not None else 0, i))

    groups = [rep_order(g) for g in classes.values()]
    return sorted(groups, key=lambda g: (-len(g), -max(score(i) for i in g), min(g)))


def _covering_cliques(keys: list[str], value: Callable[[str], Any]) -> list[list[str]]:
    """Classes (by their root key) linked where one extends the other, as groups to merge: a linked group
    merges only if every two of its classes are linked or agree on every meaningful name they share (and
    share one) and on their keys where both have some (rows labelled differently are not variants), so an
    answer that two different answers both cover (the values with the keys dropped)
    never bridges them, while the same answer with an extra column and with its row labels do join."""
    roots = list(dict.fromkeys(keys))
    linked = {(a, b) for i, a in enumerate(roots) for b in roots[i + 1:]
              if extends(value(a), value(b)) or extends(value(b), value(a))}
    linked |= {(b, a) for a, b in linked}
    seen: set[str] = set()
    out = []
    for start in roots:
        if start in seen:
            continue
        group, todo = [], [start]
        seen.add(start)
        while todo:
            k = todo.pop()
            group.append(k)
            for other in roots:
                if other not in seen and (k, other) in linked:
                    seen.add(other)
                    todo.append(other)
        if len(group) > 1 and all((a, b) in linked or (agree_on_names(value(a), value(b)) and
                                                       keys_agree(value(a), value(b)))
                                  for i, a in enumerate(group) for b in group[i + 1:]):
            out.append(group)
    return out
