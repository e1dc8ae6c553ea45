"""``@DataAgent`` in Jupyter AI's chat: a persona (``jupyter_ai.personas``) over the one turn service.

The only module of the package that imports Jupyter AI: its persona manager
loads this class from the entry point in every chat, and nothing else imports
it. A message becomes a turn on the notebook the user has open (or names); the
reply shows the progress while the turn runs, then the chosen candidate, its
run in a copy and the agreement, and the cell waits in the notebook as a
suggestion with Accept / Reject / undo (``chat_turn``). Settings, the model and
its key are the Data Agent's own (the sidebar's), never the chat's.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

from jupyter_ai_persona_manager import BasePersona, CommandOption, PersonaDefaults
from jupyterlab_chat.models import Message, NewMessage

from ..search.registry import BY_NAME
from ..server.state import agent_state
from .chat_turn import STRATEGY_WORDS, Unusable, answer, parse

#: How the reply starts while the turn runs (the progress line follows).
WORKING = "⏳ "
#: Seconds between two rewrites of the reply while the turn runs (each rewrite saves the chat file).
PROGRESS_EVERY_S = 1.0

DESCRIPTION = ("Answers questions about the live data of your open notebook: candidates run in copies of "
               "its kernel, the answer most of them agree on comes back as a cell to accept or reject.")


class DataAgentPersona(BasePersona):
    """The Data Agent in a Jupyter AI chat."""

    @property
    def defaults(self) -> PersonaDefaults:
        return PersonaDefaults(name="DataAgent", description=DESCRIPTION,
                               avatar_path=str(Path(__file__).with_name("persona_avatar.svg")),
                               system_prompt="(the Data Agent builds its own prompts from the notebook)",
                               slash_commands=set())

    async def prepare(self) -> None:
        self.report_slash_commands([CommandOption(name=word, description=BY_NAME[name].summary)
                                    for word, name in STRATEGY_WORDS.items() if word[1:] == BY_NAME[name].word])

    async def process_message(self, message: Message) -> None:
        serverapp = self._serverapp()
        reply = Reply(self)
        try:
            ask = parse(message.body, self._attached(message))
            reply.write(WORKING + "Reading the notebook…")
            text = await answer(serverapp, agent_state(serverapp.web_app.settings), sender=message.sender,
                                ask=ask, say=reply.progress)
        except Unusable as exc:
            text = str(exc)
        finally:
            self.clear_status()
        reply.write(text)

    def _serverapp(self) -> Any:
        extension = getattr(self.parent, "parent", None)
        serverapp = getattr(extension, "serverapp", None)
        if serverapp is None:
            from jupyter_server.serverapp import ServerApp

            serverapp = ServerApp.instance()
        return serverapp

    def _attached(self, message: Message) -> list[str]:
        """The paths of the notebooks (and files) attached to ``message``."""
        if not message.attachments:
            return []
        known = self.chat.get_attachments()
        return [str(getattr(known.get(i), "value", "") or "") for i in message.attachments if i in known]


class Reply:
    """The persona's one message for a turn: written once, then rewritten with each progress line
    (at most every ``PROGRESS_EVERY_S``) and finally with the answer."""

    def __init__(self, persona: DataAgentPersona) -> None:
        self.persona = persona
        self.id: str | None = None
        self.shown = 0.0

    def write(self, body: str) -> None:
        chat = self.persona.chat
        if self.id is None:
            self.id = chat.add_message(NewMessage(body=body, sender=self.persona.id))
        else:
            chat.update_message(Message(id=self.id, body=body, time=time.time(), sender=self.persona.id,
                                        raw_time=False))
        self.shown = time.monotonic()

    def progress(self, line: str) -> None:
        self.persona.set_status("is running candidates in kernel copies…")
        if time.monotonic() - self.shown >= PROGRESS_EVERY_S:
            self.write(WORKING + html.escape(line))
