"""One ``@DataAgent`` message as a turn: its words, its notebook, the turn, the suggestion, the reply.

Free of Jupyter AI's own modules, so each step is testable without it: the persona
(``persona``) passes the message's text, its attached notebooks and a ``say``
callback for progress. ``answer`` runs the turn through the server's one turn
service (source ``jupyter-ai``), files the chosen cell as a proposal, which the
browser shows in the notebook with the same Accept / Reject / undo bar as an
outside agent's, and returns the reply in Markdown. Candidates run in kernel
copies; nothing runs in the live kernel before Accept.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_server.utils import ensure_async

from ..kernel.results import ExecResult
from ..prompts.arcade import code_fence
from ..search.registry import ALIASES, BY_NAME
from ..server.handlers import one_principal
from ..server.models import TurnRequestModel
from ..server.notebooks import NotebookUnreadable, normalize, open_notebooks, saved_notebook
from ..server.proposal_models import MAX_EXPLANATION_CHARS, MAX_PROPOSAL_CODE_CHARS
from ..server.state import AgentState
from ..turn.report import TurnReport, run_summary

#: The words a message may start with to pick a strategy (``/vote``, ``/search``, ``/analysis``, ...):
#: the registry's words for the strategies the sidebar's chat offers.
STRATEGY_WORDS = {f"/{word}": name for word, name in ALIASES.items() if BY_NAME[name].offered_on("chat")}
#: Without a word: the vote, whose agreement the reply reports.
DEFAULT_STRATEGY = "vote"
#: How the sidebar and the notebook's suggestion bar name this surface.
AGENT = "Jupyter AI: DataAgent"
TURN_TIMEOUT_S = 600.0
_MENTION = re.compile(r"(?<!\S)@DataAgent\b[:,]?", re.IGNORECASE)
_FILE = re.compile(r"(?<!\S)@file:(\S+)")
_NOTEBOOK = re.compile(r"(?<![\w/.-])([\w./-]*\w\.ipynb)\b")


class Unusable(Exception):
    """The message cannot become a turn; its words say why and what to do instead."""


@dataclass
class Ask:
    """What one message asks: the question, its strategy (None: the default) and the notebooks it names."""

    intent: str
    strategy: str | None = None
    paths: list[str] = field(default_factory=list)


def parse(body: str, attached: list[str] | None = None) -> Ask:
    """The message without its ``@DataAgent``; a leading ``/word`` picks the strategy; ``@file:x.ipynb``,
    an attached notebook or a ``.ipynb`` path in the text names the notebook."""
    text = _MENTION.sub(" ", body).strip()
    paths = [p for p in attached or [] if p.endswith(".ipynb")]
    paths += [p for p in _FILE.findall(text) if p.endswith(".ipynb")]
    text = _FILE.sub(" ", text).strip()
    paths += [p.strip() for p in _NOTEBOOK.findall(text)]
    strategy = None
    word, _, rest = text.partition(" ")
    if word.startswith("/"):
        if word.lower() not in STRATEGY_WORDS:
            raise Unusable(f"Unknown command {word}: start with one of {', '.join(sorted(STRATEGY_WORDS))}, "
                           "or ask without one (a vote).")
        strategy, text = STRATEGY_WORDS[word.lower()], rest.strip()
    if not text:
        raise Unusable("Ask a question about the notebook's data, e.g. `@DataAgent /vote which month had "
                       "the most sales?`.")
    return Ask(intent=" ".join(text.split()), strategy=strategy, paths=list(dict.fromkeys(paths)))


async def owner(serverapp: Any, state: AgentState, sender: str) -> str:
    """Whose turn and suggestion this is. A chat message names its sender in words the client wrote,
    so the persona acts only where the server has one principal (the stock token or password
    providers); where it tells users apart (JupyterHub, a custom provider) it refuses."""
    from jupyter_server.auth import User

    principal = one_principal(serverapp.identity_provider, state.owner_scope)
    if principal is None:
        raise Unusable("This server tells its users apart, and a chat message's sender is not "
                       "authenticated: ask in the Data Agent sidebar instead.")
    try:
        allowed = await ensure_async(serverapp.authorizer.is_authorized(None, User(username=sender),
                                                                         "execute", "kernels"))
    except Exception:  # noqa: BLE001 -- an authorizer that needs a request: no answer is a no
        allowed = False
    if not allowed:
        raise Unusable("You may not run code in kernels on this server (not even in copies).")
    return principal


async def notebook(serverapp: Any, paths: list[str]) -> tuple[str, str | None, str]:
    """(path, kernel id or None, a note for the reply): the notebook named, else the one open with a
    kernel, else of several the one whose kernel ran last."""
    found = await open_notebooks(serverapp.session_manager)
    kernels = {normalize(n.path): n.kernel_id for n in found}
    if paths:
        path = normalize(paths[0])
        kernel_id = kernels.get(path)
        note = "" if kernel_id else (f"{path} has no running kernel: the turn reads its saved cells only, "
                                     "without its live data.")
        return path, kernel_id, note
    running = [n for n in found if n.kernel_id]
    if not running:
        raise Unusable("No notebook is open with a running kernel: open one in JupyterLab, or name it "
                       "(`@file:analysis.ipynb`).")
    if len(running) == 1:
        return normalize(running[0].path), running[0].kernel_id, ""
    km = serverapp.kernel_manager

    def last_activity(kernel_id: str) -> float:
        try:
            return km.get_kernel(kernel_id).last_activity.timestamp()
        except Exception:  # noqa: BLE001 -- a kernel gone meanwhile ranks last
            return 0.0

    latest = max(running, key=lambda n: last_activity(n.kernel_id or ""))
    return normalize(latest.path), latest.kernel_id, (
        f"{len(running)} notebooks are open: this is {normalize(latest.path)}, whose kernel ran last "
        "(name another with `@file:path.ipynb`).")


async def answer(serverapp: Any, state: AgentState, *, sender: str, ask: Ask,
                 say: Callable[[str], None]) -> str:
    """The reply to ``ask`` after its turn; ``say`` hears each progress line. ``Unusable`` in words."""
    who = await owner(serverapp, state, sender)
    path, kernel_id, note = await notebook(serverapp, ask.paths)
    try:
        nb = await saved_notebook(serverapp.contents_manager, path)
    except FileNotFoundError:
        raise Unusable(f"No notebook {path!r} under the server's root.") from None
    except NotebookUnreadable as exc:
        raise Unusable(f"Could not read {path!r}: {exc}") from None
    cells = nb.get("cells") or []
    request = TurnRequestModel(version=1, notebook_path=path, cells=cells, intent=ask.intent,
                               metadata=nb.get("metadata") or {}, kernel_id=kernel_id,
                               active_index=len(cells) - 1 if cells else None,
                               strategy=ask.strategy or DEFAULT_STRATEGY)  # type: ignore[arg-type]
    turns = state.turns
    try:
        job = turns.start(who, request, "jupyter-ai", agent=AGENT)
    except turns.Rejected as exc:
        raise Unusable(exc.message) from None
    say(f"Working on {path}" + (f" ({note})" if note else ""))
    report = await turns.wait(job, timeout=TURN_TIMEOUT_S, doing=say,
                              timeout_message="The turn took too long for the chat.")
    if report.status != "done":
        raise Unusable(f"The turn did not complete: {report.message or report.status}.")
    return reply(state, who, path, ask, report, note)


def reply(state: AgentState, who: str, path: str, ask: Ask, report: TurnReport, note: str) -> str:
    """The chat's answer, with the chosen code filed as proposals (one per analysis step)."""
    candidate = report.chosen_candidate or {}
    code, words = candidate.get("code") or "", report.answer_text
    parts = [f"_{note}_"] if note else []
    if not code:  # an answer in words: the model's Markdown, with no HTML of its own
        parts.append(html.escape(words, quote=False) if words else "No candidate came out of this turn.")
        return "\n\n".join(parts)
    if words:  # what the chosen run gave: text, never Markdown
        shown = code_fence(words, "") if "\n" in words else quoted(words)
        parts.append(f"**Answer:** {shown}")
    if report.classes and report.chosen is not None:
        parts.append(f"{report.support_of(report.chosen)} of {sum(report.classes)} candidates agree on "
                     "this answer.")
    steps = candidate.get("analysis") or []
    filed = [suggest(state, who, path, s.get("code") or "", s.get("explanation") or s.get("title") or "",
                     s.get("result"), edits=s.get("cell_id")) for s in steps] if steps else [
        suggest(state, who, path, code, candidate.get("explanation") or ask.intent, candidate.get("result"))]
    parts.append(code_fence(code))
    parts.append("Its run in a copy of the kernel:\n\n" + code_fence(run_summary(candidate), ""))
    what = f"{len(filed)} suggested cells" if len(filed) > 1 else "a suggested cell"
    parts.append(f"Placed in **{path}** as {what}: Accept or Reject in the notebook. Nothing ran in your "
                 f"kernel. (proposal {', '.join(filed)})")
    return "\n\n".join(parts)


def suggest(state: AgentState, who: str, path: str, code: str, explanation: str, result: dict | None,
            *, edits: str | None = None) -> str:
    """File one pending suggestion with the run it had in its copy; its id."""
    ran = ExecResult.from_json(result).to_json(form=False) if result else None
    proposal = state.proposals.add(who, notebook_path=path, kind="edit" if edits else "cell",
                                   code=code[:MAX_PROPOSAL_CODE_CHARS],
                                   explanation=explanation[:MAX_EXPLANATION_CHARS], agent=AGENT,
                                   cell_id=edits, result=ran)
    return proposal.id


def quoted(text: str) -> str:
    """One line of untrusted text as inline code (no Markdown, no HTML); a block is
    ``prompts.arcade.code_fence``'s."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    tick = "`" * (longest + 1)
    return f"{tick} {text} {tick}"
