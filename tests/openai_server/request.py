"""A request as the test server received it, and the server's notion of tokens."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

Reply = str | list[str]
ReplyFn = Callable[["RecordedRequest"], Reply]

_TOKEN_RE = re.compile(r"\s*\S+|\s+$")


def tokenize(text: str) -> list[str]:
    """The server's notion of tokens: words with their leading whitespace."""
    return _TOKEN_RE.findall(text)


def _content_text(content: object) -> str:
    """A chat message's content as text: a string, or its content parts' texts."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if p.get("type") == "text" else "[image]"
                         for p in content if isinstance(p, dict))
    return str(content)


@dataclass
class RecordedRequest:
    """One request as received, kept so tests can assert on prompts and parameters."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict = field(default_factory=dict)

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    @property
    def is_chat(self) -> bool:
        return self.path.rstrip("/").endswith("/chat/completions")

    @property
    def messages(self) -> list[dict]:
        return list(self.body.get("messages") or [])

    @property
    def prompt(self) -> str:
        """The completion prompt, or the chat messages' contents joined by newlines
        (of content parts, the text; an image part as ``[image]``)."""
        if self.is_chat:
            return "\n".join(_content_text(m.get("content", "")) for m in self.messages)
        prompt = self.body.get("prompt", "")
        return prompt[0] if isinstance(prompt, list) and prompt else str(prompt)

    @property
    def images(self) -> list[str]:
        """The ``image_url`` URLs of the chat messages' content parts (data: URLs), in order."""
        return [part["image_url"]["url"] for m in self.messages if isinstance(m.get("content"), list)
                for part in m["content"] if isinstance(part, dict) and part.get("type") == "image_url"]

    @property
    def n(self) -> int:
        return int(self.body.get("n") or 1)

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))
