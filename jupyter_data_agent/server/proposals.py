"""Cells and edits that outside agents propose, until the user decides in the browser.

An outside agent (over MCP or ACP) never writes the notebook or runs code in
the live kernel: it files a proposal, which the server has already run in a
kernel copy, and the browser shows it with Accept and Reject. The store is
per user (another user's proposal is a 404, like a job), bounded in count,
and in memory: proposals are short-lived suggestions, not records (a
decision on one that feeds training goes through ``POST decisions``).

It also counts, per (user, notebook, agent), the tries in copies and the
proposals, so the sidebar can say "Claude Code: 4 tries in copies, 1 proposal".
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Literal

ProposalKind = Literal["cell", "edit"]
ProposalStatus = Literal["pending", "accepted", "rejected", "edited"]
Decision = Literal["accepted", "rejected", "edited"]

#: Proposals kept per user (decided ones are dropped first, oldest first).
MAX_PROPOSALS_PER_USER = 200
#: Notebooks and agents counted per user (the least recently active dropped first).
MAX_ACTIVITY_PER_USER = 500


class ProposalNotFound(KeyError):
    """No such proposal for this user (it never existed, expired, or is another user's)."""


@dataclass
class Proposal:
    """One proposed cell (``kind`` "cell", below ``after_cell_id``) or edit (of ``cell_id``)."""

    id: str
    owner: str
    notebook_path: str
    kind: ProposalKind
    code: str
    explanation: str
    agent: str
    after_cell_id: str | None = None
    cell_id: str | None = None
    status: ProposalStatus = "pending"
    final_source: str | None = None
    result: dict | None = None  # ExecResult.to_json(form=False) of the run in a copy
    note: str = ""
    created: float = field(default_factory=time.time)
    decided: float | None = None

    def to_json(self) -> dict:
        """The wire form (``models.ProposalModel``): everything but the owner."""
        data = asdict(self)
        del data["owner"]
        return data


@dataclass
class AgentActivity:
    """What one outside agent did on one notebook of one user."""

    agent: str
    tries: int = 0
    proposals: int = 0
    last: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        return {"agent": self.agent, "tries": self.tries, "proposals": self.proposals}


class ProposalStore:
    """Every user's proposals and agent activity; event-loop only (no locking)."""

    def __init__(self, max_per_user: int = MAX_PROPOSALS_PER_USER) -> None:
        self.max_per_user = max_per_user  # at least 1: the trait's bound
        self._by_owner: dict[str, dict[str, Proposal]] = {}  # insertion order = oldest first
        self._activity: dict[str, dict[tuple[str, str], AgentActivity]] = {}

    def add(self, owner: str, *, notebook_path: str, kind: ProposalKind, code: str, explanation: str,
            agent: str, after_cell_id: str | None = None, cell_id: str | None = None,
            result: dict | None = None, note: str = "") -> Proposal:
        proposal = Proposal(id=uuid.uuid4().hex, owner=owner, notebook_path=notebook_path, kind=kind,
                            code=code, explanation=explanation, agent=agent, after_cell_id=after_cell_id,
                            cell_id=cell_id, result=result, note=note)
        mine = self._by_owner.setdefault(owner, {})
        mine[proposal.id] = proposal
        self._trim(mine)
        self._count(owner, notebook_path, agent).proposals += 1
        return proposal

    def get(self, owner: str, proposal_id: str) -> Proposal:
        proposal = self._by_owner.get(owner, {}).get(proposal_id)
        if proposal is None:
            raise ProposalNotFound(proposal_id)
        return proposal

    def of(self, owner: str, notebook_path: str | None = None) -> list[Proposal]:
        """This user's proposals, oldest first (of one notebook when ``notebook_path`` is given)."""
        return [p for p in self._by_owner.get(owner, {}).values()
                if notebook_path is None or p.notebook_path == notebook_path]

    def decide(self, owner: str, proposal_id: str, decision: Decision, final_source: str) -> Proposal:
        """Record the user's Accept, Reject, or an edit after an Accept (the last word wins)."""
        proposal = self.get(owner, proposal_id)
        proposal.status = decision
        proposal.final_source = None if decision == "rejected" else final_source
        proposal.decided = time.time()
        return proposal

    def record_try(self, owner: str, notebook_path: str, agent: str) -> None:
        self._count(owner, notebook_path, agent).tries += 1

    def activity(self, owner: str, notebook_path: str) -> list[AgentActivity]:
        """Each agent's tries and proposals on this notebook, the first active first."""
        return [a for (path, _), a in self._activity.get(owner, {}).items() if path == notebook_path]

    def _count(self, owner: str, notebook_path: str, agent: str) -> AgentActivity:
        mine = self._activity.setdefault(owner, {})
        entry = mine.get((notebook_path, agent))
        if entry is None:
            entry = mine[(notebook_path, agent)] = AgentActivity(agent=agent)
            while len(mine) > MAX_ACTIVITY_PER_USER:
                del mine[min(mine, key=lambda k: mine[k].last)]
        entry.last = time.time()
        return entry

    def _trim(self, mine: dict[str, Proposal]) -> None:
        while len(mine) > self.max_per_user:
            victim = next((p for p in mine.values() if p.status != "pending"), None)
            del mine[victim.id if victim is not None else next(iter(mine))]
