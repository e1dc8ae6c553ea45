"""The one interface every model backend implements.

Search strategies and entry points only see these types, so a backend can be
swapped (OpenAI-compatible endpoint, local transformers model, vLLM) without
touching the callers.
"""

from __future__ import annotations

import abc
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast


class BackendError(RuntimeError):
    """A model call failed in a way the user can act on.

    The message is shown to the user as is: it must say what to do and must
    never contain a secret (API key).
    """


ChatRole = Literal["system", "user", "assistant"]


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` when no tokenizer is at hand: about four characters each."""
    return max(1, len(text) // 4) if text else 0


@dataclass(frozen=True)
class ImagePart:
    """An image a vision model is shown with a message (a plot output), base64 encoded.

    Backends without image input ignore it; the text of the message says a plot is there.
    """

    mime: str  # image/png or image/jpeg
    data: str  # base64, no data: prefix

    @property
    def url(self) -> str:
        return f"data:{self.mime};base64,{self.data}"


@dataclass(frozen=True)
class ChatMessage:
    role: ChatRole
    content: str
    # Images shown with the message (OpenAI content parts); text-only backends ignore them.
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True)
class Prompt:
    """Either a raw completion prompt (``text``) or a chat (``messages``)."""

    text: str | None = None
    messages: tuple[ChatMessage, ...] | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.messages is None):
            raise ValueError("a Prompt has exactly one of text or messages")

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @classmethod
    def chat(cls, messages: Sequence[ChatMessage | dict]) -> "Prompt":
        return cls(
            messages=tuple(
                m if isinstance(m, ChatMessage)
                else ChatMessage(m["role"], m["content"], tuple(m.get("images") or ()))
                for m in messages
            )
        )


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    seed: int | None = None


@dataclass
class Completion:
    text: str
    # One log-probability per generated token, where the backend reports them.
    token_logprobs: list[float] | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Prompt tokens reused from the model's KV cache instead of evaluated (prefix reuse);
    # 0 where the backend does not report it.
    cached_tokens: int = 0

    @property
    def mean_logprob(self) -> float | None:
        if not self.token_logprobs:
            return None
        return sum(self.token_logprobs) / len(self.token_logprobs)


@dataclass(frozen=True)
class Capabilities:
    chat: bool
    completion: bool
    logprobs: bool
    streaming: bool = True
    extra: dict = field(default_factory=dict)
    # The model reads image parts of chat messages (a vision model behind the OpenAI API).
    image_input: bool = False


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop sequence.

    Applied after every backend call because servers ignore or limit ``stop``
    (OpenAI takes 4) and local stop criteria fire only after the token that
    completes the sequence. Returns the text and whether a stop was hit.
    """
    cut = -1
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1 and (cut == -1 or i < cut):
                cut = i
    return (text, False) if cut == -1 else (text[:cut], True)


class StopStream:
    """Streaming counterpart of :func:`cut_at_stop`.

    Holds back the tail that could be the beginning of a stop sequence, so a
    stop sequence is never shown to the user even when it arrives split
    across deltas.
    """

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = tuple(s for s in stop if s)
        self.done = False
        self._buf = ""

    def feed(self, delta: str) -> str:
        if self.done:
            return ""
        self._buf += delta
        head, hit = cut_at_stop(self._buf, self.stop)
        if hit:
            self.done = True
            self._buf = ""
            return head
        keep = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self._buf)), keep, -1):
                if self._buf.endswith(s[:k]):
                    keep = k
                    break
        out = self._buf[: len(self._buf) - keep]
        self._buf = self._buf[len(out) :]
        return out

    def flush(self) -> str:
        out, self._buf = ("" if self.done else self._buf), ""
        return out


class Streamed:
    """A backend's stream to iterate; afterwards ``completion`` is the one it returned, if any."""

    def __init__(self, stream: Iterator[str]) -> None:
        self._stream = cast(Generator[str, None, object], stream)  # a generator's value, if it has one
        self.completion: Completion | None = None

    def __iter__(self) -> Iterator[str]:  # closing this generator closes the backend's stream
        result = yield from self._stream
        if isinstance(result, Completion):
            self.completion = result


@dataclass(frozen=True)
class PromptWork:
    """What a local model reads before its first token, for the progress a turn shows."""

    tokens: int  # the prompt's tokens
    cached: int  # of them, already in the model's cache
    tokens_per_s: float | None = None  # the prompt speed measured so far; None before any

    @property
    def new(self) -> int:
        return max(0, self.tokens - self.cached)

    @property
    def seconds(self) -> float | None:
        """The time to read the new tokens at the measured speed (None: not measured yet)."""
        return self.new / self.tokens_per_s if self.tokens_per_s else None


class Backend(abc.ABC):
    """A loaded model. Instances are reused across turns (loading is slow)."""

    name: str = "base"

    @property
    @abc.abstractmethod
    def model(self) -> str:
        """Human-readable model identifier (never a secret)."""

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    @abc.abstractmethod
    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        """Return ``params.n`` completions for one prompt."""

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        """Yield text deltas of one completion; backends override to truly stream.

        A stream may *return* the finished :class:`Completion` (the generator's
        value, read through :class:`Streamed`) with its usage, cached tokens and
        log-probabilities; a stream that returns nothing leaves the caller to count.
        """
        single = SamplingParams(**{**params.__dict__, "n": 1})
        yield self.generate(prompt, single)[0].text

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` for this model; a rough estimate unless overridden."""
        return estimate_tokens(text)

    def close(self) -> None:  # noqa: B027 -- optional hook; most backends hold nothing
        """Release processes or memory held by the backend."""

    @property
    def needs_loading(self) -> bool:
        """A local model not loaded yet: ``load`` it where the user is told (slow)."""
        return False

    def load(self) -> object:
        """Load the model now (local backends); others have nothing to load."""
        return None

    @property
    def weights_bytes(self) -> int | None:
        """Size of the weights a ``load`` reads (a local model's file), None where unknown."""
        return None

    def prompt_work(self, prompt: Prompt) -> PromptWork | None:
        """How much of ``prompt`` the loaded model must still read (local models with a
        prompt cache); None where the backend cannot tell (endpoints, not loaded)."""
        return None


def use_chat(api_mode: str, capabilities: Capabilities, *, auto: bool | None = None) -> bool:
    """Chat messages or a completion prompt: the one rule.

    The configured mode wins where the backend can do it; a backend that does
    only one does that one. In ``auto``: ``auto`` when given (ghost text asks
    local models to continue the code), else chat wherever the backend has it.
    """
    if api_mode == "chat" or not capabilities.completion:
        return True
    if api_mode == "completion" or not capabilities.chat:
        return False
    return capabilities.chat if auto is None else auto


def streams(backend: Backend) -> bool:
    """Whether the backend really streams (the base class's ``stream`` is one ``generate``;
    a wrapper says for what it wraps with ``real_stream``)."""
    real = getattr(backend, "real_stream", type(backend).stream is not Backend.stream)
    return bool(backend.capabilities.streaming and real)


class WrappedBackend(Backend):
    """Another backend, with something around its calls (a queue, a clock, a meter).

    Model, capabilities, tokenizer and any extra the inner backend has are its
    own; ``close`` leaves it open: it outlives the wrapper (one turn, one task).
    Subclasses override ``generate`` / ``stream`` and call the inner one's.
    """

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "backend")
        self.real_stream = streams(inner)

    def __getattr__(self, name: str):
        if name == "inner":  # not set yet: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def weights_bytes(self) -> int | None:
        return self.inner.weights_bytes

    def prompt_work(self, prompt: Prompt) -> PromptWork | None:
        return self.inner.prompt_work(prompt)

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        return self.inner.generate(prompt, params)

    def stream(self, prompt: Prompt, params: SamplingParams) -> Generator[str, None, Completion | None]:
        return (yield from inner_stream(self.inner, prompt, params))

    def close(self) -> None:
        """The inner backend is its owner's to close."""


def inner_stream(backend: Backend, prompt: Prompt, params: SamplingParams) -> Generator[str, None, Completion | None]:
    """``backend.stream`` as the generator it is: its return value is the finished Completion, if any."""
    return cast(Generator[str, None, "Completion | None"], backend.stream(prompt, params))
