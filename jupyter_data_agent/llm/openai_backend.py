"""Backend for any OpenAI-compatible endpoint through the official ``openai`` SDK.

Covers OpenAI itself, Azure-style proxies, ``vllm serve``, Ollama and the
llama.cpp server. Decisions worth knowing:

* API choice: ``api_mode="auto"`` sends chat prompts to
  ``chat.completions`` and text prompts to ``completions``. ``"chat"`` wraps a
  text prompt as one user message (for chat-only servers, e.g. OpenAI's
  current models); ``"completion"`` renders chat messages as a plain
  ``Role: content`` transcript ending in ``Assistant:``.
* Model: when ``Settings.model`` is empty the endpoint is asked
  (``models.list()``, lazily, once) and its first model is used. That is what
  a single-model local server (``vllm serve``, llama.cpp) wants; with OpenAI
  proper, set the model.
* Retries: our own loop (the SDK's is disabled) on 408/429/5xx and connection
  failures, exponential backoff from ``retry_backoff`` seconds (constructor
  argument or ``Settings.extra["retry_backoff"]``, default 0.5) capped at
  ``max_retry_delay``, honouring a short ``Retry-After``. Timeouts are not
  retried: the user already waited ``request_timeout``.
* ``n``: asked for in one call; servers that return fewer choices (llama.cpp,
  Ollama) are asked again for the rest.
* ``stop``: at most 4 are sent (OpenAI's limit); all are applied to the text
  afterwards, so servers that ignore ``stop`` still behave.
* Errors become :class:`BackendError` with what to do; the API key (and
  anything that looks like one, encoded or not: ``llm/scrub.py``) is scrubbed
  from every message. A reply that is not JSON (a proxy's HTML error page
  with status 200, a wrong base URL) is one of them, naming the endpoint.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import httpx
import openai

from ..config import Settings
from .base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    Prompt,
    SamplingParams,
    StopStream,
    cut_at_stop,
    use_chat,
)
from .images import vision_enabled
from .local import chat_dicts, transcript
from .scrub import Scrubber, redact_url

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_STOP_SEQUENCES = 4
_TAGS = re.compile(r"<[^>]*>|\s+")

@functools.cache  # tried once per model name and process
def _tiktoken_encoder(model: str):
    """tiktoken's encoder for ``model``; None when tiktoken is not installed, does not know the
    model, or cannot fetch the encoding file (offline)."""
    try:
        import tiktoken

        return tiktoken.encoding_for_model(model)
    except (ImportError, KeyError, ValueError):  # not installed, or a model tiktoken does not know
        return None


def estimate_tokens(text: str) -> int:
    """~3.5 characters per token: slightly high for prose, right for code, safe for budgets."""
    return math.ceil(len(text) / 3.5) if text else 0


class OpenAIBackend(Backend):
    name = "openai"

    def __init__(
        self,
        settings: Settings,
        *,
        retry_backoff: float | None = None,
        max_retry_delay: float = 8.0,
    ) -> None:
        self.settings = settings
        self.base_url = (settings.base_url or DEFAULT_BASE_URL).rstrip("/")
        api_key = settings.api_key
        if not api_key:
            if not settings.base_url:
                raise BackendError(
                    "No API key for the OpenAI API: set OPENAI_API_KEY or c.DataAgent.api_key, "
                    "or point OPENAI_BASE_URL / c.DataAgent.base_url at an OpenAI-compatible server "
                    "(vllm serve, Ollama, llama.cpp)."
                )
            # Local servers usually need no key, but the SDK insists on one.
            api_key = "EMPTY"
        self._scrubber = Scrubber([settings.api_key])
        if retry_backoff is None:
            retry_backoff = float(settings.extra.get("retry_backoff", 0.5))
        self.retry_backoff = retry_backoff
        self.max_retry_delay = max_retry_delay
        self.max_retries = max(0, int(settings.max_retries))
        self.timeout = float(settings.request_timeout)
        self._max_tokens_param = str(settings.extra.get("max_tokens_param", "max_tokens"))
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
        )
        self._model = settings.model
        self._model_lock = threading.Lock()

    # -- Backend API ---------------------------------------------------------
    @property
    def model(self) -> str:
        if not self._model:
            with self._model_lock:
                if not self._model:
                    self._model = self._first_served_model()
        return self._model

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            chat=True,
            completion=self.settings.api_mode != "chat",
            logprobs=True,
            streaming=True,
            extra={"base_url": redact_url(self.base_url)},
            image_input=vision_enabled(self.settings.vision, self._model or self.settings.model),
        )

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        chat = self._use_chat(prompt)
        results: list[Completion] = []
        # Ask for what is still missing; bounded so a server returning 0 choices cannot loop us.
        for _ in range(max(1, params.n)):
            missing = params.n - len(results)
            if missing <= 0:
                break
            kwargs = self._request_kwargs(prompt, params, chat, missing)
            create = self._client.chat.completions.create if chat else self._client.completions.create
            response = self._call(create, chat=chat, **kwargs)
            results.extend(self._completions(response, chat, params))
        if not results:
            raise BackendError(f"{self._where()} returned no choices for model {self.model!r}.")
        return results[: params.n]

    def stream(self, prompt: Prompt, params: SamplingParams) -> Generator[str, None, Completion | None]:
        """Deltas as they arrive; returns the completion with the server's usage when it sent one."""
        chat = self._use_chat(prompt)
        kwargs = self._request_kwargs(prompt, params, chat, 1)
        create = self._client.chat.completions.create if chat else self._client.completions.create
        response = self._call(create, chat=chat, stream=True, stream_options={"include_usage": True}, **kwargs)
        stopper = StopStream(params.stop)
        parts: list[str] = []
        logprobs: list[float] | None = [] if params.logprobs else None
        usage = finish = None
        try:
            self._check_stream(response)
            for chunk in response:
                usage = getattr(chunk, "usage", None) or usage  # the last event, when asked for
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                finish = choice.finish_reason or finish
                if logprobs is not None:
                    logprobs += _logprobs(choice, chat) or []
                out = stopper.feed((choice.delta.content if chat else choice.text) or "")
                if out:
                    parts.append(out)
                    yield out
                if stopper.done:
                    return None  # the rest (and its usage) is not read
            tail = stopper.flush()
            if tail:
                parts.append(tail)
                yield tail
        except openai.OpenAIError as exc:
            raise self._error(exc, chat) from None
        except json.JSONDecodeError as exc:  # an event whose data is not JSON
            raise self._not_json(exc.doc) from None
        finally:
            response.close()
        if usage is None:
            return None
        return Completion(text="".join(parts), token_logprobs=logprobs, finish_reason=finish,
                          prompt_tokens=int(usage.prompt_tokens or 0),
                          completion_tokens=int(usage.completion_tokens or 0), cached_tokens=_cached(usage))

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        enc = _tiktoken_encoder(self.settings.model) if self.settings.model else None
        if enc is not None:
            return len(enc.encode(text, disallowed_special=()))
        return estimate_tokens(text)

    def close(self) -> None:
        self._client.close()

    # -- request building ----------------------------------------------------
    def _use_chat(self, prompt: Prompt) -> bool:
        """The one rule (``use_chat``); in ``auto`` the prompt's own form decides."""
        return use_chat(self.settings.api_mode, self.capabilities, auto=prompt.is_chat)

    def _request_kwargs(self, prompt: Prompt, params: SamplingParams, chat: bool, n: int) -> dict:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            self._max_tokens_param: params.max_tokens,
        }
        if params.stop:
            kwargs["stop"] = list(params.stop[:MAX_STOP_SEQUENCES])
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if chat:
            kwargs["messages"] = (self._messages(prompt) if prompt.is_chat
                                  else [{"role": "user", "content": prompt.text}])
            if params.logprobs:
                kwargs["logprobs"] = True
        else:
            kwargs["prompt"] = prompt.text if not prompt.is_chat else transcript(prompt)
            if params.logprobs:
                kwargs["logprobs"] = 1
        return kwargs

    def _messages(self, prompt: Prompt) -> list[dict[str, Any]]:
        """Chat messages; a message's images become ``image_url`` content parts when the
        model reads images (otherwise only their text, which says a plot is there, is sent)."""
        messages: list[dict[str, Any]] = [dict(m) for m in chat_dicts(prompt)]
        if not self.capabilities.image_input:
            return messages
        for message, source in zip(messages, prompt.messages or ()):
            if source.images:
                message["content"] = [{"type": "text", "text": source.content}] + [
                    {"type": "image_url", "image_url": {"url": image.url}} for image in source.images
                ]
        return messages

    def _completions(self, response, chat: bool, params: SamplingParams) -> list[Completion]:
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        total_completion = int(getattr(usage, "completion_tokens", 0) or 0)
        choices = sorted(response.choices or [], key=lambda c: c.index or 0)
        out = []
        for choice in choices:
            text = (choice.message.content if chat else choice.text) or ""
            logprobs = _logprobs(choice, chat) if params.logprobs else None
            text, hit = cut_at_stop(text, params.stop)
            finish = "stop" if hit else choice.finish_reason
            if logprobs is not None and not hit:
                completion_tokens = len(logprobs)
            elif len(choices) == 1 and not hit and total_completion:
                completion_tokens = total_completion
            else:
                completion_tokens = self.count_tokens(text)
            out.append(
                Completion(
                    text=text,
                    token_logprobs=logprobs,
                    finish_reason=finish,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    cached_tokens=_cached(usage) if not out else 0,  # the prompt is shared by the choices
                )
            )
        return out

    # -- calls, retries, errors ----------------------------------------------
    def _call(self, fn: Callable, *, chat: bool | None, **kwargs):
        attempt = 0
        while True:
            try:
                response = fn(**kwargs)
            except json.JSONDecodeError as exc:  # declared JSON, but not JSON
                raise self._not_json(exc.doc) from None
            except openai.APITimeoutError as exc:
                raise self._error(exc, chat) from None
            except (openai.APIConnectionError, openai.APIStatusError) as exc:
                if not self._retryable(exc) or attempt >= self.max_retries:
                    raise self._error(exc, chat, retries=attempt) from None
                time.sleep(self._backoff(attempt, exc))
                attempt += 1
            except openai.OpenAIError as exc:
                raise self._error(exc, chat) from None
            else:
                if isinstance(response, str):  # the SDK hands back any non-JSON body as text
                    raise self._not_json(response)
                return response

    @staticmethod
    def _retryable(exc: Exception) -> bool:
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code in (408, 429) or exc.status_code >= 500
        return isinstance(exc, openai.APIConnectionError)

    def _backoff(self, attempt: int, exc: Exception) -> float:
        delay = min(self.retry_backoff * (2**attempt), self.max_retry_delay)
        response = getattr(exc, "response", None)
        if response is not None:
            header = response.headers.get("retry-after-ms")
            scale = 1000.0
            if header is None:
                header, scale = response.headers.get("retry-after"), 1.0
            try:
                hinted = float(header) / scale if header is not None else None
            except ValueError:
                hinted = None
            if hinted is not None and 0 <= hinted <= self.max_retry_delay:
                return hinted
        return delay * random.uniform(0.75, 1.0)

    def _where(self) -> str:
        return redact_url(self.base_url)

    def _not_json(self, body: str) -> BackendError:
        """A reply that is not the API's JSON: say where it came from and what it began with."""
        excerpt = " ".join(_TAGS.sub(" ", body or "").split())[:200]
        return BackendError(self._scrubber.text(
            f"{self._where()} answered with something that is not JSON (a proxy or login page, "
            f"or a URL that is not the API root?): {excerpt or '(empty body)'}. Check "
            "OPENAI_BASE_URL / c.DataAgent.base_url: it must be the root of an OpenAI-compatible "
            "API, usually ending in /v1."
        ))

    def _check_stream(self, response: Any) -> None:
        """A streaming request answered with anything but server-sent events is an error.

        The SDK finds no event in an HTML page and would yield nothing.
        """
        http = getattr(response, "response", None)
        content_type = http.headers.get("content-type", "") if http is not None else ""
        if http is None or "event-stream" in content_type:
            return
        body = http.read().decode("utf-8", errors="replace")
        try:
            json.loads(body)
        except ValueError:
            raise self._not_json(body) from None
        raise BackendError(self._scrubber.text(
            f"{self._where()} answered a streaming request without streaming "
            f"(Content-Type {content_type or 'missing'}): the endpoint may not support it."
        ))

    def _server_message(self, exc: Exception) -> str:
        body = getattr(exc, "body", None)
        message = None
        if isinstance(body, dict):
            err = body.get("error", body)
            message = err.get("message") if isinstance(err, dict) else str(err)
        if not message:
            message = getattr(exc, "message", None) or str(exc)
        return self._scrubber.text(str(message))[:500].rstrip(". ")

    def _error(self, exc: Exception, chat: bool | None = None, retries: int = 0) -> BackendError:
        where = self._where()
        model = self._model or "(endpoint default)"
        detail = self._server_message(exc)
        if isinstance(exc, openai.APITimeoutError):
            msg = (
                f"No answer from {where} within {self.timeout:g} s. Raise "
                "c.DataAgent.request_timeout, ask for fewer tokens/samples, or check the server's load."
            )
        elif isinstance(exc, openai.APIConnectionError):
            msg = (
                f"Cannot reach the model endpoint {where}"
                + (f" (after {retries} retries)" if retries else "")
                + ": is the server running? Check OPENAI_BASE_URL / c.DataAgent.base_url."
            )
        elif isinstance(exc, openai.AuthenticationError):
            msg = (
                f"{where} rejected the API key (401). Check OPENAI_API_KEY / c.DataAgent.api_key."
            )
        elif isinstance(exc, openai.PermissionDeniedError):
            msg = (
                f"The API key has no access to model {model!r} at {where} (403): {detail}. "
                "Check the key's project/permissions or choose another model."
            )
        elif isinstance(exc, openai.NotFoundError):
            msg = (
                f"Model {model!r} was not found at {where} (404): {detail}. Check "
                "JUPYTER_DATA_AGENT_MODEL / c.DataAgent.model"
            )
            if chat is False:
                msg += (
                    ", or, if the endpoint has no completions API, set c.DataAgent.api_mode = 'chat'"
                )
            msg += "."
        elif isinstance(exc, openai.RateLimitError):
            msg = (
                f"{where} is rate limiting requests (429) and still was after {retries} retries: "
                f"{detail}. Wait a moment, ask for fewer samples, or raise c.DataAgent.max_retries."
            )
        elif isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
            msg = (
                f"{where} failed with HTTP {exc.status_code} after {retries} retries: {detail}. "
                "The server may be overloaded or crashed; try again or check its logs."
            )
        elif isinstance(exc, openai.APIStatusError):
            msg = (
                f"{where} refused the request (HTTP {exc.status_code}): {detail}. Check the model "
                "settings (c.DataAgent.*) against what the endpoint supports."
            )
        else:
            msg = f"Model call to {where} failed: {detail}"
        return BackendError(self._scrubber.text(msg))

    def _first_served_model(self) -> str:
        try:
            # Raw, so a non-JSON page is ours to report (the SDK's parser trips over it).
            response = self._call(self._client.get, chat=None, path="/models",
                                  cast_to=httpx.Response)
            try:
                listing = response.json()
            except ValueError:
                raise self._not_json(response.text) from None
            data = listing.get("data") if isinstance(listing, dict) else None
            ids = [m["id"] for m in data or () if isinstance(m, dict) and m.get("id")]
        except BackendError as exc:
            raise BackendError(
                f"No model configured and listing the models at {self._where()} failed: {exc} "
                "Set JUPYTER_DATA_AGENT_MODEL or c.DataAgent.model."
            ) from None
        if not ids:
            raise BackendError(
                f"No model configured and {self._where()} lists none: set "
                "JUPYTER_DATA_AGENT_MODEL or c.DataAgent.model."
            )
        return ids[0]


def _logprobs(choice, chat: bool) -> list[float] | None:
    """The token log-probabilities of a choice (or a streamed chunk's choice), if the server sent them."""
    if choice.logprobs is None:
        return None
    if chat:
        return [t.logprob for t in (choice.logprobs.content or [])]
    return [lp for lp in (choice.logprobs.token_logprobs or []) if lp is not None]


def _cached(usage) -> int:
    """Prompt tokens the server took from its prefix cache (OpenAI, vLLM: ``prompt_tokens_details``)."""
    details = getattr(usage, "prompt_tokens_details", None)
    return int(getattr(details, "cached_tokens", 0) or 0)
