"""A turn's events as an IDE shows them: ACP thoughts, tool calls, a plan, one reply.

Zed and JetBrains render each ACP update kind in its own way: thoughts fold
away, a ``tool_call`` is a card with its status and output, a ``plan`` is a
checklist, the agent's message is the reply. So the job's events
(``turn.events``) map onto them here: progress lines are thoughts; a candidate
run in a kernel copy is an ``execute`` tool call that completes or fails with
what it printed; an analysis's plan is the ACP plan; and the reply holds only
the chosen candidate's code and its answer, not every candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import acp
from acp import schema

from ..search.registry import ALIASES, BY_NAME, offered, words
from ..turn.report import run_summary

#: The slash commands, as ``available_commands_update`` offers them (word → (strategy, what it does)):
#: the registry's for ACP (``search.registry`` says why Explain is not one).
COMMANDS: dict[str, tuple[str, str]] = {word: (entry.name, entry.for_agents)
                                        for word, entry in zip(words("acp"), offered("acp"), strict=True)}
#: Every word a prompt may start with to pick a strategy (the commands and the registry's other words).
STRATEGY_WORDS = {f"/{word}": name for word, name in ALIASES.items() if BY_NAME[name].offered_on("acp")}


def available_commands() -> schema.AvailableCommandsUpdate:
    """The slash commands an IDE lists when the user types ``/`` (each takes the question as input)."""
    return schema.AvailableCommandsUpdate(session_update="available_commands_update", available_commands=[
        schema.AvailableCommand(name=word, description=text,
                                input=schema.AvailableCommandInput(
                                    root=schema.UnstructuredCommandInput(hint="question about the notebook's data")))
        for word, (_, text) in COMMANDS.items()])


_PLAN_STATUS = {"pending": "pending", "generating": "in_progress", "running": "in_progress",
                "repairing": "in_progress", "ok": "completed", "error": "completed", "skipped": "completed"}


@dataclass
class TurnView:
    """One turn's events turned into ACP session updates (``updates(event)``), and what the reply needs."""

    job_id: str
    #: Tool calls started and not yet ended: candidate index (or None: not known yet) → tool call id.
    open_calls: dict[int | None, str] = field(default_factory=dict)
    runs: int = 0
    plan: list[dict] | None = None

    def updates(self, event: dict) -> list[Any]:
        """The ACP updates one job event makes (none for ``done``/``error``: the turn ends them)."""
        kind, message, data = event.get("type"), str(event.get("message") or ""), event.get("data") or {}
        out: list[Any] = []
        if kind == "progress":
            if data.get("plan") and data["plan"] != self.plan:
                self.plan = data["plan"]
                out.append(acp.update_plan([acp.plan_entry(
                    f"Step {s['number']}: {s['title']}" + (" (failed)" if s["status"] == "error" else ""),
                    status=_PLAN_STATUS.get(s["status"], "pending")) for s in data["plan"]]))  # type: ignore[arg-type]
            if data.get("state") == "running" and "plan" not in data:
                out.append(self._start(data.get("candidate"), message))
            elif message:
                out.append(acp.update_agent_thought_text(message + "\n"))
        elif kind == "log" and message:
            out.append(acp.update_agent_thought_text(message + "\n"))
        elif kind == "candidate":
            out += self._end(int(data.get("index", 0)), data.get("candidate") or {})
        return out

    def _start(self, index: int | None, message: str) -> Any:
        self.runs += 1
        call_id = f"{self.job_id}-run-{self.runs}"
        self.open_calls[index] = call_id
        title = f"Run candidate {index + 1} in a copy" if index is not None else "Run the candidate in a copy"
        return acp.start_tool_call(call_id, title, kind="execute", status="in_progress",
                                   raw_input={"what": message})

    def _end(self, index: int, candidate: dict) -> list[Any]:
        """The tool call of the candidate's run ends (completed or failed) with what it printed."""
        result = candidate.get("result")
        if result is None:
            return []
        call_id = self.open_calls.pop(index, None) or self.open_calls.pop(None, None)
        status: Literal["completed", "failed"] = "completed" if result.get("status") == "ok" else "failed"
        content = [acp.tool_content(acp.text_block(f"```python\n{candidate.get('code', '')}\n```")),
                   acp.tool_content(acp.text_block(run_summary(candidate)))]
        if call_id is None:  # a strategy that ran it without a "running" step (react, search, analysis)
            self.runs += 1
            return [acp.start_tool_call(f"{self.job_id}-run-{self.runs}", f"Ran candidate {index + 1} in a copy",
                                        kind="execute", status=status, content=content)]
        return [acp.update_tool_call(call_id, status=status, content=content)]

