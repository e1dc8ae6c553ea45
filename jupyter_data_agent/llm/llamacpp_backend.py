"""A GGUF model through llama.cpp (``llama-cpp-python``): the fast local default.

``Settings.model`` is empty (the embedded SmolLM2 GGUF) or a ``.gguf`` file.
The weights are memory-mapped and load in a fraction of a second; decoding a
quantized model on the CPU is several times faster than through transformers.

Decisions worth knowing:

* One ``Llama`` (one model, one context) per (file, context size, threads) in
  the process, shared by every backend instance, with one lock: calls are
  serialized, which is also what the cores want.
* **A busy machine** (:mod:`.cores`): the OpenMP threads spin briefly, then
  sleep, at a barrier (``c.DataAgent.wait_policy``), and with ``threads = 0`` each request runs on
  the cores other processes left free (``llama_set_n_threads``).
* **Prefix reuse.** The context keeps the tokens it last evaluated (its KV
  cache). Each request finds the longest common prefix with them, drops the
  rest of the cache and evaluates only the new suffix (at least one token, so
  the logits are fresh). ReAct and mcts steps extend the previous prompt, and
  the ``n`` samples of one call share their prompt, so these are evaluated
  once. :attr:`Completion.cached_tokens` reports how many prompt tokens were
  reused.
* Sampling follows OpenAI semantics: temperature and top_p, no top-k, min-p
  or repetition penalty. Temperature 0 is greedy and deterministic, so ``n``
  greedy samples are one decode, copied. Each sample gets its own seed (from
  ``SamplingParams.seed`` when given, so runs are reproducible).
* Log-probabilities are those of the model's own distribution (the raw
  logits, before temperature/top-p), like the transformers backend and
  OpenAI, so they are comparable across temperatures for the PUCT prior.
* Chat prompts go through the GGUF's own chat template
  (``tokenizer.chat_template``); raw text prompts are completed as is.
* Stop sequences are matched on the decoded text while decoding (generation
  ends as soon as one appears) and cut with :func:`cut_at_stop`; token
  log-probabilities are trimmed to the tokens that produced the kept text.
* :meth:`stream` decodes in the consumer's thread, one token per step:
  when the consumer stops iterating (or closes the generator), decoding stops
  before the next token.
"""

from __future__ import annotations

import codecs
import logging
import random
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import Settings
from .base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    Prompt,
    PromptWork,
    SamplingParams,
    cut_at_stop,
)
from .cores import IMPORTED, METER, choose_threads, import_llama_cpp, usable_cores
from .embedded import resolve_gguf
from .local import ModelCache, chat_dicts, fit_context, greedy_copies, transcript, until_stop

log = logging.getLogger(__name__)

INSTALL_LLAMACPP = (
    "The llamacpp backend needs llama-cpp-python: pip install 'jupyter_data_agent[llamacpp]' "
    "(it compiles llama.cpp from source, about 15 minutes on 2 cores), or set "
    "c.DataAgent.backend = 'transformers' (pip install 'jupyter_data_agent[transformers]')."
)


def resolve_threads(settings: Settings) -> int:
    """Most threads the model runs on: ``settings.threads``, else every usable core."""
    return settings.threads if settings.threads and settings.threads > 0 else usable_cores()


def context_size(settings: Settings) -> int:
    """Tokens the context holds: the prompt budget plus the new tokens, or ``extra['n_ctx']``."""
    configured = settings.extra.get("n_ctx")
    if configured:
        return int(configured)
    return max(4096, settings.max_prompt_tokens + settings.max_new_tokens + 64)


@dataclass
class LoadedLlama:
    llm: Any
    path: Path
    threads: int  # the most it runs on; ``active_threads`` the last request's
    n_ctx: int
    load_seconds: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    follow_free_cores: bool = False
    active_threads: int = 0
    chat_formatter: Any = None
    # Totals over the model's life (benchmarks, capabilities).
    evaluated_tokens: int = 0
    reused_tokens: int = 0
    # Prompt batches read and their time: the speed a turn's "preparing the prompt cache" estimates with.
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0

    @property
    def prefill_speed(self) -> float | None:
        """Prompt tokens read per second so far (None before a batch was timed)."""
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds > 0 else None


_CACHE: ModelCache[LoadedLlama] = ModelCache()


def load_llama(settings: Settings) -> LoadedLlama:
    """The loaded model for these settings, from the process-wide cache when possible."""
    path, _, _ = resolve_gguf(settings)
    threads = resolve_threads(settings)
    n_ctx = context_size(settings)
    key = (str(path.resolve()), n_ctx, threads, not settings.threads)
    return _CACHE.get(key, lambda: _load(path, n_ctx, threads, settings))


def share_cores(loaded: LoadedLlama) -> int:
    """Before a request (holding the lock): threads for the cores other processes left free."""
    if loaded.follow_free_cores:
        want = choose_threads(loaded.threads, METER.read())
        if want != loaded.active_threads:
            loaded.llm._ctx.set_n_threads(want, want)
            loaded.active_threads = want
    return loaded.active_threads


def clear_model_cache() -> None:
    """Forget (and free) loaded models: tests, or to release memory after changing the model."""
    for loaded in _CACHE.clear():
        with loaded.lock:
            try:
                loaded.llm.close()
            except Exception:  # freeing one model must not keep the others loaded
                log.warning("closing a llama.cpp model failed", exc_info=True)


def _load(path: Path, n_ctx: int, threads: int, settings: Settings) -> LoadedLlama:
    try:
        llama_cpp = import_llama_cpp(settings.wait_policy)
    except ImportError as exc:
        raise BackendError(f"{INSTALL_LLAMACPP} ({exc})") from exc
    except ValueError as exc:
        raise BackendError(f"c.DataAgent.{exc}") from exc
    start = time.perf_counter()
    try:
        llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_batch=int(settings.extra.get("n_batch", 512)),
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=int(settings.extra.get("n_gpu_layers", 0)),
            logits_all=False,
            verbose=bool(settings.extra.get("verbose", False)),
        )
    except (ValueError, RuntimeError, OSError) as exc:
        raise BackendError(f"Could not load GGUF file {str(path)!r} with llama.cpp: {exc}") from exc
    loaded = LoadedLlama(llm, path, threads, llm.n_ctx(), time.perf_counter() - start,
                         follow_free_cores=not settings.threads, active_threads=threads)
    template = (getattr(llm, "metadata", None) or {}).get("tokenizer.chat_template")
    if template:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        def token_text(token_id: int) -> str:
            if token_id < 0:
                return ""
            return llm.detokenize([token_id], special=True).decode("utf-8", errors="ignore")

        loaded.chat_formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=token_text(llm.token_eos()),
            bos_token=token_text(llm.token_bos()),
            add_generation_prompt=True,
        )
    return loaded


def start_token(llm: Any) -> int:
    """The token an empty prompt is read as: the start of a text (BOS, else the end-of-text
    separator). llama.cpp samples from the last evaluated token's logits: with no token at all
    it fails an assertion (``n_tokens > 0``), which an empty inline or warm prompt reached."""
    bos = llm.token_bos()
    return bos if bos >= 0 else llm.token_eos()


@dataclass
class _Sample:
    """One decode in progress: tokens, their log-probs and the text so far."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # text length after each token
    text: str = ""
    finish: str = "length"
    reused: int = 0  # prompt tokens kept from the KV cache


class LlamaCppBackend(Backend):
    name = "llamacpp"

    def __init__(self, settings: Settings, *, load: bool = False) -> None:
        self.settings = settings
        self.path, self._display, self.embedded = resolve_gguf(settings)  # fail early on a missing file
        self._loaded: LoadedLlama | None = None
        if load:
            self.load()

    @property
    def needs_loading(self) -> bool:
        return self._loaded is None

    def load(self) -> LoadedLlama:
        """Load (or fetch from the cache) now; otherwise the first call does it."""
        if self._loaded is None:
            self._loaded = load_llama(self.settings)
        return self._loaded

    @property
    def model(self) -> str:
        return self._display

    @property
    def weights_bytes(self) -> int | None:
        try:
            return self.path.stat().st_size
        except OSError:
            return None

    def prompt_work(self, prompt: Prompt) -> PromptWork | None:
        """The prompt's tokens and how many of them the KV cache holds (read, not locked:
        an estimate, asked by a turn that holds the model's slot)."""
        if self._loaded is None:
            return None
        llm = self._loaded.llm
        ids, _ = self.prompt_ids(prompt, 1)
        cached = llm.input_ids[: min(int(llm.n_tokens), len(ids) - 1)]
        keep = 0
        for a, b in zip(cached.tolist(), ids):
            if a != b:
                break
            keep += 1
        return PromptWork(len(ids), keep, self._loaded.prefill_speed)

    @property
    def capabilities(self) -> Capabilities:
        extra: dict[str, Any] = {"embedded": self.embedded, "runtime": "llama.cpp"}
        if self._loaded is not None:
            extra.update(
                threads=self._loaded.threads,
                active_threads=self._loaded.active_threads,
                wait_policy=IMPORTED.get("policy", ""),
                n_ctx=self._loaded.n_ctx,
                load_seconds=round(self._loaded.load_seconds, 3),
                evaluated_tokens=self._loaded.evaluated_tokens,
                reused_tokens=self._loaded.reused_tokens,
            )
        return Capabilities(chat=True, completion=True, logprobs=True, streaming=True, extra=extra)

    @property
    def threads(self) -> int:
        return self.load().threads

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        return len(self.load().llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    # -- prompt ----------------------------------------------------------------
    def prompt_text(self, prompt: Prompt) -> str:
        """The text fed to the model: the chat template applied to chat prompts."""
        if not prompt.is_chat:
            return prompt.text or ""
        formatter = self.load().chat_formatter
        return transcript(prompt) if formatter is None else formatter(messages=chat_dicts(prompt)).prompt

    def prompt_ids(self, prompt: Prompt, max_new: int) -> tuple[list[int], int]:
        """Prompt tokens (left-truncated to fit the context) and the new-token budget."""
        loaded = self.load()
        text = self.prompt_text(prompt)
        ids = loaded.llm.tokenize(text.encode("utf-8"), add_bos=True, special=prompt.is_chat)
        if prompt.is_chat and len(ids) >= 2 and ids[0] == ids[1] == loaded.llm.token_bos():
            ids = ids[1:]  # the template wrote BOS and the tokenizer added one
        if not ids:  # an empty text, and a model that adds no BOS (SmolLM2): nothing to sample from
            ids = [start_token(loaded.llm)]
        return fit_context(ids, max_new, loaded.n_ctx)

    # -- the KV cache ------------------------------------------------------------
    @staticmethod
    def _reuse_prefix(loaded: LoadedLlama, ids: list[int]) -> int:
        """Keep the cached tokens ``ids`` starts with; return how many (the rest is evaluated)."""
        import numpy as np

        llm = loaded.llm
        cached = llm.input_ids[: llm.n_tokens]
        m = min(len(cached), len(ids) - 1)  # evaluate at least one token: fresh logits
        keep = 0
        if m > 0:
            diff = np.nonzero(cached[:m] != np.asarray(ids[:m], dtype=cached.dtype))[0]
            keep = int(diff[0]) if diff.size else m
        if keep > 0 and llm._ctx.kv_cache_seq_rm(-1, keep, -1):
            llm.n_tokens = keep
        else:  # nothing shared, or a model whose cache cannot be cut (recurrent)
            keep = 0
            llm.reset()
        return keep

    # -- generation -------------------------------------------------------------
    def _decode(
        self,
        loaded: LoadedLlama,
        ids: list[int],
        params: SamplingParams,
        max_new: int,
        seed: int | None,
        sample: _Sample,
        step: int | None = None,
    ) -> Iterator[str]:
        """Decode into ``sample``, yielding the text delta of each token; the caller holds the lock.

        Yields ``""`` after each batch of prompt tokens, so a stream can be closed mid-prompt.

        Ends at an end-of-generation token, ``max_new`` tokens or a stop sequence in the text.
        """
        import llama_cpp
        import numpy as np

        llm = loaded.llm
        reused = sample.reused = self._reuse_prefix(loaded, ids)
        loaded.reused_tokens += reused
        llm.set_seed(seed if seed is not None else random.getrandbits(31))
        greedy = params.temperature <= 0
        # The prompt's new part in batches, each a point where the consumer may stop (cancel).
        batch = max(1, min(int(llm.n_batch), step or int(llm.n_batch)))
        for start in range(reused, len(ids) - 1, batch):
            chunk = ids[start:min(start + batch, len(ids) - 1)]
            began = time.perf_counter()
            llm.eval(chunk)
            if len(chunk) >= 16:  # a tail of a few tokens says little about the speed
                loaded.prefill_tokens += len(chunk)
                loaded.prefill_seconds += time.perf_counter() - began
            yield ""
        tokens = llm.generate(
            ids[max(reused, len(ids) - 1):],
            reset=False,
            temp=0.0 if greedy else float(params.temperature),
            top_p=float(params.top_p) if 0 < params.top_p < 1 else 1.0,
            top_k=0,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
        )
        vocab = llm._model.vocab
        n_vocab = llm.n_vocab()
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stop = tuple(s for s in params.stop if s)
        longest_stop = max((len(s) for s in stop), default=0)
        try:
            for token in tokens:
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    sample.finish = "stop"
                    break
                if params.logprobs:
                    logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
                    top = float(logits.max())
                    logz = top + float(np.log(np.exp(logits - top, dtype=np.float64).sum()))
                    sample.logprobs.append(float(logits[token]) - logz)
                sample.ids.append(token)
                delta = utf8.decode(llm.detokenize([token]))
                sample.text += delta
                sample.ends.append(len(sample.text))
                yield delta
                if stop and cut_at_stop(sample.text[-(len(delta) + longest_stop) :], stop)[1]:
                    sample.finish = "stop"
                    break
                if len(sample.ids) >= max_new:
                    break
            tail = utf8.decode(b"", final=True)
            if tail:
                sample.text += tail
                if sample.ends:
                    sample.ends[-1] = len(sample.text)
                yield tail
        finally:
            tokens.close()
            loaded.evaluated_tokens += max(0, llm.n_tokens - reused)

    @staticmethod
    def _completion(sample: _Sample, ids: list[int], params: SamplingParams) -> Completion:
        text, hit = cut_at_stop(sample.text, params.stop)
        length, finish = len(sample.ids), sample.finish
        if hit:
            finish = "stop"
            # Fewest tokens whose text covers what we keep.
            length = next((i + 1 for i, end in enumerate(sample.ends) if end >= len(text)), length) if text else 0
        return Completion(
            text=text,
            token_logprobs=[float(x) for x in sample.logprobs[:length]] if params.logprobs else None,
            finish_reason=finish,
            prompt_tokens=len(ids),
            completion_tokens=length,
            cached_tokens=sample.reused,
        )

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        loaded = self.load()
        n = max(1, params.n)
        greedy = params.temperature <= 0
        with loaded.lock:
            share_cores(loaded)
            ids, max_new = self.prompt_ids(prompt, params.max_tokens)
            completions = []
            try:
                for i in range(1 if greedy else n):
                    seed = None if params.seed is None else params.seed + i
                    sample = _Sample()
                    for _ in self._decode(loaded, ids, params, max_new, seed, sample):
                        pass
                    completions.append(self._completion(sample, ids, params))
            except (RuntimeError, ValueError, AssertionError) as exc:  # llama-cpp-python asserts its state
                raise BackendError(f"Generation with {self.model!r} failed: {exc or type(exc).__name__}") from exc
        if greedy:  # the copies reuse the whole decode: their prompt is the first one's
            return greedy_copies(completions, n, cached_tokens=completions[0].prompt_tokens)
        return completions

    def stream(self, prompt: Prompt, params: SamplingParams, *,
               prefill_step: int | None = None) -> Generator[str, None, Completion]:
        """Deltas as decoded; returns the finished completion (log-probs, reused tokens).

        ``prefill_step``: prompt tokens read between two ``""`` yields (default: a batch);
        a warm reads in smaller steps, so it gives the model up sooner when a turn asks."""
        loaded = self.load()
        single = replace(params, n=1)
        sample = _Sample()
        with loaded.lock:
            share_cores(loaded)
            ids, max_new = self.prompt_ids(prompt, single.max_tokens)
            decode = self._decode(loaded, ids, single, max_new, single.seed, sample, prefill_step)
            try:  # "" after a prompt batch: the consumer may stop there
                yield from until_stop(decode, single.stop, keep_empty=True)
            except (RuntimeError, ValueError, AssertionError) as exc:  # llama-cpp-python asserts its state
                raise BackendError(f"Generation with {self.model!r} failed: {exc or type(exc).__name__}") from exc
            finally:
                decode.close()  # stops decoding at once when the consumer leaves
        return self._completion(sample, ids, single)

    def close(self) -> None:
        # The model is shared through the process-wide cache; clear_model_cache() frees it.
        self._loaded = None
