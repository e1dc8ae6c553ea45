"""REST API of outside agents' proposals (``server.proposals``): file, list, read, decide.

``POST proposals`` runs the code in a copy of the notebook's live kernel
first (in the copy of ``try_handle`` when given) and stores what it gave;
the browser lists them per notebook, shows them with Accept and Reject, and
reports the user's decision. Another user's proposal is a 404.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from .agent_auth import AgentUser
from .handlers import AgentAPIHandler
from .notebooks import normalize
from .proposal_models import ProposalDecisionRequest, ProposalReply, ProposalRequest, ProposalsReply
from .proposals import Proposal, ProposalNotFound, ProposalStore
from .tries import TryError, TryManager

_NOTE_NO_KERNEL = "Not run before it was proposed: {why}"


async def file_proposal(tries: TryManager, store: ProposalStore, owner: str, request: ProposalRequest) -> Proposal:
    """Run the proposal's code in a copy (from ``try_handle``'s copy when given), then store it."""
    path = normalize(request.notebook_path)
    result, note = None, ""
    parent = request.try_handle
    if parent:
        try:
            tries.get(owner, parent)
        except TryError:
            note = f"The try handle {parent!r} had expired: the code ran in a fresh copy of the live kernel. "
            parent = None
    try:
        outcome = await tries.try_code(owner, path, request.code, parent=parent, keep=False)
        result = outcome.result.to_json(form=False)
    except TryError as exc:
        note += _NOTE_NO_KERNEL.format(why=str(exc))
    return store.add(owner, notebook_path=path, kind=request.kind, code=request.code,
                     explanation=request.explanation, agent=request.agent,
                     after_cell_id=request.after_cell_id if request.kind == "cell" else None,
                     cell_id=request.cell_id if request.kind == "edit" else None, result=result,
                     note=note.strip())


def reply(proposal: Proposal) -> str:
    return ProposalReply.model_validate({"proposal": proposal.to_json()}).model_dump_json()


class _ProposalAPI(AgentAPIHandler):
    @property
    def proposals(self) -> ProposalStore:
        return self.agent_state.proposals

    @property
    def tries(self) -> TryManager:
        return self.agent_state.tries

    def owned(self, proposal_id: str) -> Proposal:
        try:
            return self.proposals.get(self.job_owner(), proposal_id)
        except ProposalNotFound:
            raise web.HTTPError(404, "No such proposal (it may have expired).") from None


class ProposalsHandler(_ProposalAPI):
    """``POST proposals`` (201) and ``GET proposals?notebook_path=<path>``."""

    agent_access = frozenset({"POST", "GET"})  # an outside agent's token may (server.agent_auth)

    @web.authenticated
    @authorized
    async def post(self) -> None:
        request = self.parse_body(ProposalRequest, "proposal")
        await self.require_execute()  # its code runs in a copy of the notebook's kernel first
        if isinstance(self.current_user, AgentUser):  # the name the user gave the agent's token
            request = request.model_copy(update={"agent": self.current_user.agent})
        proposal = await file_proposal(self.tries, self.proposals, self.job_owner(), request)
        self.set_status(201)
        self.finish(reply(proposal))

    @web.authenticated
    @authorized
    def get(self) -> None:
        path = normalize(self.get_argument("notebook_path", ""))
        if not path:
            raise web.HTTPError(400, "Give the notebook: proposals?notebook_path=<path>.")
        owner = self.job_owner()
        body = {"proposals": [p.to_json() for p in self.proposals.of(owner, path)],
                "activity": [a.to_json() for a in self.proposals.activity(owner, path)]}
        self.finish(ProposalsReply.model_validate(body).model_dump_json())


class ProposalHandler(_ProposalAPI):
    """``GET proposals/<id>``."""

    agent_access = frozenset({"GET"})  # an outside agent's token may (server.agent_auth)

    @web.authenticated
    @authorized
    def get(self, proposal_id: str) -> None:
        self.finish(reply(self.owned(proposal_id)))


class ProposalDecisionHandler(_ProposalAPI):
    """``POST proposals/<id>/decision``: the browser's Accept, Reject, or edit after an Accept."""

    @web.authenticated
    @authorized
    def post(self, proposal_id: str) -> None:
        request = self.parse_body(ProposalDecisionRequest, "decision")
        self.owned(proposal_id)
        proposal = self.proposals.decide(self.job_owner(), proposal_id, request.decision, request.final_source)
        self.finish(reply(proposal))
