"""How the mcts tree is walked: selection by PUCT, and the eviction order that follows it.

Both read one score per child (``MCTSSearch.puct``): selection descends to the
best-scored open child until an unexpanded node; the eviction priority of a
copy is minus its path's regret under the same score, so the copies selection
is least likely to reach are killed first when the tree is at its cap.
"""

from __future__ import annotations

from collections.abc import Callable

from .tree_nodes import Node

Score = Callable[[Node, Node], float]


def select(root: Node, score: Score) -> Node | None:
    """The unexpanded node to expand next, or ``None`` when every path below ``root`` is done."""
    node = root
    while node.children or node.exhausted:
        if node.exhausted:
            return None
        options = [c for c in node.children if not c.terminal and not c.exhausted]
        if not options:  # cannot happen while exhaustion is kept up to date
            node.exhausted = True
            return None
        # Rounded: Q is a float average, and noise must not break ties that the
        # prior (the model's own preference) should break.
        parent = node
        node = max(options, key=lambda c: (round(score(c, parent), 9), c.prior, -options.index(c)))
    return node


def set_priorities(root: Node, score: Score) -> None:
    """Eviction order: the tree kills idle leaves with the lowest priority first.

    A node's priority is minus its path's regret — the sum, over the levels of
    its path, of how far its PUCT score trails the best sibling's — so the
    path selection follows now has priority 0 and is kept longest, and the
    further a node is from being selected, the sooner its process goes.
    """
    stack = [(root, 0.0)]
    while stack:
        node, regret = stack.pop()
        options = [c for c in node.children if not c.terminal and not c.exhausted]
        if not options:
            continue
        scores = [round(score(c, node), 9) for c in options]
        best = max(scores)
        for c, sc in zip(options, scores):
            r = regret + (best - sc)
            snap = c.snapshot
            if snap is not None and hasattr(snap, "priority"):
                snap.priority = -r + 1e-3 * c.prior
            stack.append((c, r))
