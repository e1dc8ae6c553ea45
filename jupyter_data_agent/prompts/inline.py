"""Inline (ghost-text) completion prompts: the ARCADE notebook, the schema, the cursor's cell.

A completion-style model continues the linearized notebook, whose last cell
is the text before the cursor; a template in ``c.DataAgent.extra["inline_fim"]``
(e.g. ``"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"``) turns it
into fill-in-the-middle for models trained on it. A chat model gets the same
notebook and schema in one message with the cell shown around a cursor
marker, and is asked for only the missing code.

Short on purpose: the reply ends at a blank line or the next cell marker,
and :class:`InlineText` cleans a reply while it streams (a chat model's
fence, its echo of the line being typed, a repeat of the text after the
cursor), so ghost text is never something the user would have to delete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..context.model import NotebookContext
from ..llm.base import ChatMessage, Prompt, StopStream, estimate_tokens
from .arcade import CELL_HEADER, NotebookBlocks, code_fence, join_cells

#: Generated tokens of one completion (a line or a few: ghost text, not a cell).
MAX_TOKENS = 48
#: Prompt tokens: the cells above are left-truncated to this (latency grows with it).
PROMPT_BUDGET = 1024
#: Characters of the cursor's cell kept before / after the cursor.
PREFIX_CHARS = 2000
SUFFIX_CHARS = 500
CURSOR = "<CURSOR>"
#: Completion models: a blank line ends a thought, a cell marker a cell.
STOP = ("\n\n", f"\n{CELL_HEADER}", "\n# In[")
CHAT_STOP = ("\n\n", "\n```")

INLINE_SYSTEM_PROMPT = (
    "You complete code in the user's Jupyter notebook as they type. Reply with only the code "
    f"that goes at {CURSOR}: no explanation, no repetition of the code before or after "
    "the cursor. A few words or one or two lines; nothing if nothing fits. Use the DataFrames "
    "and columns that exist in the kernel."
)

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class InlinePrompt:
    """What to send and how to read the reply."""

    prompt: Prompt
    stop: tuple[str, ...]
    chat: bool
    tokens: int
    dropped_cells: int
    # The cell's text before / after the cursor, as sent (trimmed).
    prefix: str
    suffix: str


def trim_cursor_text(prefix: str, suffix: str) -> tuple[str, str]:
    """The cell around the cursor cut to what matters: the end of the prefix, the start of the suffix."""
    if len(prefix) > PREFIX_CHARS:
        cut = prefix[-PREFIX_CHARS:]
        newline = cut.find("\n")
        prefix = cut[newline + 1 :] if 0 <= newline < len(cut) - 1 else cut
    if len(suffix) > SUFFIX_CHARS:
        suffix = suffix[:SUFFIX_CHARS]
        newline = suffix.rfind("\n")
        suffix = suffix[:newline] if newline > 0 else suffix
    return prefix, suffix


def build_inline_prompt(
    context: NotebookContext,
    prefix: str,
    suffix: str = "",
    *,
    schema: str = "",
    chat: bool = False,
    fim_template: str = "",
    count_tokens: CountTokens | None = None,
    budget: int = PROMPT_BUDGET,
) -> InlinePrompt:
    """The prompt for the cursor at the end of ``prefix`` in the cell after ``context``'s cells.

    ``context`` holds the cells *above* the cursor's cell (their sources, no
    outputs: keystrokes need a short prompt). The oldest cells are dropped
    until the prompt fits ``budget``; the schema and the cursor's cell never are.
    """
    prefix, suffix = trim_cursor_text(prefix, suffix)
    count = count_tokens or estimate_tokens
    fim = bool(fim_template and suffix.strip())
    notebook = NotebookBlocks.of(context, outputs="none")
    tail = [schema.strip()] if schema.strip() else []

    def render(drop: int) -> Prompt:
        blocks = notebook.blocks(drop)
        if chat:
            return Prompt.chat(_chat_messages(blocks, tail, prefix, suffix))
        text = join_cells(blocks + tail + [prefix]) if blocks or tail else prefix
        if fim:
            return Prompt(text=fim_template.replace("{prefix}", text).replace("{suffix}", suffix))
        return Prompt(text=text)

    def size(p: Prompt) -> int:
        return count(p.text) if p.text is not None else sum(count(m.content) for m in p.messages or ())

    drop, prompt = 0, render(0)
    tokens = size(prompt)
    # Linear from the oldest: cells are few and rough counts cheap; exact counts stop early.
    while tokens > budget and drop < notebook.droppable:
        drop += 1
        prompt = render(drop)
        tokens = size(prompt)
    return InlinePrompt(prompt, CHAT_STOP if chat else STOP, chat, tokens, drop, prefix, suffix)


def _chat_messages(blocks: list[str], tail: list[str], prefix: str, suffix: str) -> list[ChatMessage]:
    parts = []
    if blocks:
        parts.append("My notebook so far (cells are separated by `# In[ ]:`, markdown cells are "
                     "shown as `#` comments):\n\n" + code_fence(join_cells(blocks)))
    if tail:
        parts.append("DataFrames in the kernel right now:\n\n" + code_fence(tail[0]))
    parts.append(f"The cell I am typing, {CURSOR} marks the cursor:\n\n" + code_fence(prefix + CURSOR + suffix))
    parts.append(f"Reply with only the code that goes at {CURSOR}, nothing else.")
    return [ChatMessage("system", INLINE_SYSTEM_PROMPT), ChatMessage("user", "\n\n".join(parts))]


class InlineText:
    """Cleans a streamed reply into ghost text: feed deltas, get what may be shown.

    * a chat reply's opening fence line (```` ```python ````) is dropped;
    * a reply that starts by repeating the line being typed (chat models
      do) loses the repeated part;
    * the text stops before it would repeat the first line after the cursor.

    Text is held back only while it could still turn out to be one of these.
    """

    def __init__(self, prefix: str, suffix: str = "", chat: bool = False,
                 stop: tuple[str, ...] | None = None) -> None:
        self.chat = chat
        # Backends cut at stop sequences too; here they also hold back a split closing fence.
        self._stop = StopStream(stop if stop is not None else (CHAT_STOP if chat else STOP))
        self.line = prefix.rsplit("\n", 1)[-1]
        self.suffix_line = next((ln.strip() for ln in suffix.splitlines() if ln.strip()), "")
        self._head = chat  # still checking the reply's start
        self._buf = ""
        self.text = ""  # shown so far
        self.done = False

    def feed(self, delta: str) -> str:
        if self.done:
            return ""
        self._buf += self._stop.feed(delta)
        if self._stop.done:
            return self.flush()
        if self._head:
            if not self._settle_head():
                return ""
        return self._emit(final=False)

    def flush(self) -> str:
        if self.done:
            return ""
        self._buf += self._stop.flush()
        if self._head:
            self._settle_head(final=True)
        out = self._emit(final=True)
        self.done = True
        return out

    def _settle_head(self, final: bool = False) -> bool:
        buf = self._buf
        if buf.lstrip().startswith("`"):
            if "\n" not in buf and not final:
                return False
            buf = buf.split("\n", 1)[1] if "\n" in buf else ""
        echo = self.line.strip()
        if echo:
            body = buf.lstrip()
            if len(body) < len(echo) and echo.startswith(body) and not final:
                self._buf = buf
                return False
            if body.startswith(echo):
                buf = body[len(echo):]
        self._buf = buf
        self._head = False
        return True

    def _emit(self, final: bool) -> str:
        buf = self._buf
        if self.suffix_line:
            i = buf.find(self.suffix_line)
            if i != -1:
                self.done = True
                out = buf[:i].rstrip() if "\n" in buf[:i] else buf[:i]
                self.text += out
                self._buf = ""
                return out
            if not final:  # keep what could be the start of the suffix's line
                keep = 0
                for k in range(min(len(self.suffix_line) - 1, len(buf)), 0, -1):
                    if buf.endswith(self.suffix_line[:k]):
                        keep = k
                        break
                out, self._buf = buf[: len(buf) - keep], buf[len(buf) - keep :]
                self.text += out
                return out
        self._buf = ""
        self.text += buf
        return buf
