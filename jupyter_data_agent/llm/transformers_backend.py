"""A local causal LM through ``transformers``: the single-machine default.

``Settings.model`` may be empty (the embedded SmolLM2 GGUF), a ``.gguf`` file,
a local model directory, or a Hugging Face id that is already in the local
cache: nothing is downloaded (``local_files_only``) unless
``Settings.extra["allow_download"]`` is true.

Decisions worth knowing:

* Weights are loaded once per process and shared: a module-level cache keyed
  by (model, gguf file, device, dtype) serves every backend instance, so the
  magic and the server do not reload per turn. One lock per loaded model
  serializes ``generate``/``stream`` (a model is not safe to run from two
  threads at once, and two runs would only compete for the same cores).
* Temperature 0 is greedy decoding, which is deterministic: with ``n > 1`` we
  decode once and return ``n`` copies instead of repeating identical work.
* Log-probabilities are those of the model's own distribution at each step
  (after model-configured processors such as a repetition penalty, before
  temperature/top-p), as OpenAI reports them, so they are comparable across
  temperatures for the PUCT prior. They are recorded by a logits processor
  that keeps one row per sequence, not the ``steps x vocab`` tensors of
  ``output_scores``, and only when asked for: without ``logprobs`` a decoding
  step is plain ``model.generate``'s (``python -m
  jupyter_data_agent_bench.generation_speed`` measures the two side by side).
* Weights load straight onto the device (``device_map``), in the target dtype.
* Stop sequences go to a ``StopStringCriteria`` so decoding ends early (built
  once per set of stop strings and model: building one walks the whole
  vocabulary), and the text is also cut afterwards (the criterion fires only
  once the token completing the string is out); token log-probabilities are
  trimmed to the tokens that produced the kept text.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
    TextIteratorStreamer,
)
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper
from transformers.utils import is_accelerate_available

from ..config import Settings
from .base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    Prompt,
    SamplingParams,
    cut_at_stop,
)
from .embedded import resolve_gguf
from .local import ModelCache, chat_dicts, fit_context, greedy_copies, transcript, until_stop

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


@dataclass(frozen=True)
class ModelSource:
    """Where weights come from: ``from_pretrained(location, gguf_file=...)``."""

    location: str
    gguf_file: str | None = None
    display: str = ""
    embedded: bool = False


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    source: ModelSource
    device: str
    dtype: torch.dtype
    load_seconds: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop_ok: dict[str, bool] = field(default_factory=dict)  # stop string -> usable by generate
    # usable stop strings -> their criterion (kept: building one walks the vocabulary)
    stop_criteria: dict[tuple[str, ...], StopStringCriteria] = field(default_factory=dict)


_STOP_CRITERIA_KEPT = 16  # per model; the product uses a handful of stop sets


_CACHE: ModelCache[LoadedModel] = ModelCache()


def resolve_source(settings: Settings) -> ModelSource:
    """Settings.model → a location for ``from_pretrained``; the embedded GGUF when empty."""
    ref = os.path.expanduser(settings.model)
    if not settings.model or Path(ref).suffix.lower() == ".gguf":
        path, display, embedded = resolve_gguf(settings)
        return ModelSource(str(path.parent), path.name, display, embedded)
    gguf_extra = settings.extra.get("gguf_file")
    if gguf_extra:
        return ModelSource(ref, str(gguf_extra), f"{ref} ({gguf_extra})")
    return ModelSource(ref, None, ref)


def resolve_device(device: str) -> str:
    device = (device or "auto").strip().lower()
    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """'auto': float32 on CPU (reduced precision is slow there), bf16/fp16 on accelerators."""
    name = (dtype or "auto").strip().lower()
    if name == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.startswith("mps"):
            return torch.float16
        return torch.float32
    if name not in _DTYPES:
        raise BackendError(f"Unknown dtype {dtype!r}: set c.DataAgent.dtype to auto, float32, float16 or bfloat16.")
    return _DTYPES[name]


def load_model(settings: Settings) -> LoadedModel:
    """The loaded model for these settings, from the process-wide cache when possible."""
    source = resolve_source(settings)
    device = resolve_device(settings.device)
    dtype = resolve_dtype(settings.dtype, device)
    trust = bool(settings.extra.get("trust_remote_code", False))
    allow_download = bool(settings.extra.get("allow_download", False))
    key = (source.location, source.gguf_file, device, str(dtype), trust)
    if settings.threads > 0 and device == "cpu":  # torch's pool is per process: the last setting wins
        torch.set_num_threads(settings.threads)
    return _CACHE.get(key, lambda: _load(source, device, dtype, trust, allow_download))


def clear_model_cache() -> None:
    """Forget loaded models (tests, or to free memory after changing the model)."""
    _CACHE.clear()


def _load(source: ModelSource, device: str, dtype, trust: bool, allow_download: bool) -> LoadedModel:
    kwargs: dict[str, Any] = {"trust_remote_code": trust}
    if not allow_download:
        kwargs["local_files_only"] = True
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
    start = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.location, **kwargs)
        # Straight onto the device, in the target dtype: no full copy in host memory first. The
        # device_map path needs accelerate (the transformers extra has it); without: load, move.
        placement = {"device_map": torch.device(device)} if is_accelerate_available() else {}
        model = AutoModelForCausalLM.from_pretrained(source.location, dtype=dtype, **placement, **kwargs)
        if not placement:
            model.to(device)
    except (OSError, ValueError, EnvironmentError) as exc:
        local = Path(source.location).exists()
        hint = (
            "Check that the directory holds a causal LM (config.json, weights, tokenizer)."
            if local
            else "It is not in the local Hugging Face cache and nothing is downloaded: fetch it "
            f"first (`hf download {source.location}`) or set c.DataAgent.model / "
            "JUPYTER_DATA_AGENT_MODEL to a local directory or .gguf file."
        )
        raise BackendError(f"Could not load model {source.display!r}: {exc} {hint}") from exc
    except RuntimeError as exc:  # e.g. CUDA out of memory, bad device string
        raise BackendError(
            f"Could not load model {source.display!r} on {device}: {exc}. Try c.DataAgent.device = "
            "'cpu' or a smaller model/dtype."
        ) from exc
    model.eval()
    return LoadedModel(model, tokenizer, source, device, dtype, time.perf_counter() - start)


class _LogprobRecorder(LogitsProcessor):
    """Log-prob of each chosen token under the distribution it was sampled from.

    Placed before our temperature/top-p warpers. At step t the last input
    token is the one chosen at step t-1, so only the previous step's
    log-softmax needs keeping.
    """

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None
        self.values: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.previous is not None:
            self.values.append(self.previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor, prompt_len: int) -> torch.Tensor:
        """(batch, generated) log-probs, adding the last step once its token is known."""
        step = prompt_len + len(self.values)
        if self.previous is not None and sequences.shape[1] > step:
            self.values.append(self.previous.gather(1, sequences[:, step : step + 1]).squeeze(1))
            self.previous = None
        if not self.values:
            return torch.zeros((sequences.shape[0], 0))
        return torch.stack(self.values, dim=1).cpu()


class _Cancel(StoppingCriteria):
    """Ends a streaming generation when the consumer stops reading.

    Until then every step gets the same all-false tensor: no new tensor (and on a GPU no
    kernel) per step.
    """

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.running: torch.Tensor | None = None

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        if self.event.is_set():
            return torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if self.running is None or self.running.shape[0] != input_ids.shape[0]:
            self.running = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return self.running


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(self, settings: Settings, *, load: bool = False) -> None:
        self.settings = settings
        self.source = resolve_source(settings)  # fail early on a missing embedded model / file
        self._loaded: LoadedModel | None = None
        if load:
            self.load()

    @property
    def needs_loading(self) -> bool:
        return self._loaded is None

    def load(self) -> LoadedModel:
        """Load (or fetch from the cache) now; otherwise the first call does it."""
        if self._loaded is None:
            self._loaded = load_model(self.settings)
        return self._loaded

    @property
    def model(self) -> str:
        return self.source.display

    @property
    def capabilities(self) -> Capabilities:
        extra: dict[str, Any] = {"embedded": self.source.embedded}
        if self._loaded is not None:
            extra.update(
                device=self._loaded.device,
                dtype=str(self._loaded.dtype).removeprefix("torch."),
                load_seconds=round(self._loaded.load_seconds, 2),
            )
        return Capabilities(chat=True, completion=True, logprobs=True, streaming=True, extra=extra)

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        return len(self.load().tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- prompt ----------------------------------------------------------------
    def prompt_text(self, prompt: Prompt) -> tuple[str, bool]:
        """The text fed to the model and whether the tokenizer should add special tokens."""
        tok = self.load().tokenizer
        if not prompt.is_chat:
            return prompt.text or "", True
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(chat_dicts(prompt), add_generation_prompt=True, tokenize=False), False
        return transcript(prompt), True  # a base model without a template

    def _encode(self, prompt: Prompt, max_new: int) -> tuple[torch.Tensor, int]:
        loaded = self.load()
        text, special = self.prompt_text(prompt)
        ids = loaded.tokenizer(text, add_special_tokens=special, return_tensors="pt")["input_ids"]
        limit = getattr(loaded.model.config, "max_position_embeddings", None)
        if limit:
            row, max_new = fit_context(ids[0], max_new, limit)
            ids = row[None]
        return ids.to(loaded.device), max_new

    def _eos_ids(self) -> set[int]:
        loaded = self.load()
        ids: set[int] = set()
        for value in (loaded.model.generation_config.eos_token_id, loaded.tokenizer.eos_token_id):
            if isinstance(value, int):
                ids.add(value)
            elif value:
                ids.update(int(v) for v in value)
        return ids

    def _pad_id(self) -> int | None:
        tok = self.load().tokenizer
        if tok.pad_token_id is not None:
            return tok.pad_token_id
        eos = sorted(self._eos_ids())
        return eos[0] if eos else None

    def _generate_kwargs(
        self, params: SamplingParams, input_ids, max_new: int, num: int, *, criteria: tuple = ()
    ) -> tuple[dict[str, Any], _LogprobRecorder | None]:
        """``generate``'s arguments, and the log-prob recorder when ``params.logprobs`` asks for one.

        Without log-probs no processor of ours runs at a greedy step; ``criteria``: more
        stopping criteria (the stream's cancellation).
        """
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "max_new_tokens": max_new,
            "do_sample": sample,
            "num_return_sequences": num,
            "pad_token_id": self._pad_id(),
        }
        processors = LogitsProcessorList()
        recorder = _LogprobRecorder() if params.logprobs else None
        if recorder is not None:
            processors.append(recorder)
        if sample:
            # Neutralize the built-in warpers (model defaults such as top_k=50 included) and apply
            # ours after the recorder, so recorded log-probs are the model's, and sampling follows
            # OpenAI semantics (temperature and top_p, no top_k).
            kwargs.update(temperature=1.0, top_p=1.0, top_k=0)
            if params.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(params.temperature))
            if params.top_p < 1.0:
                processors.append(TopPLogitsWarper(params.top_p))
        if processors:
            kwargs["logits_processor"] = processors
        stopping = [*criteria]
        stop = self._stop_criterion(params.stop)
        if stop is not None:
            stopping.append(stop)
        if stopping:
            kwargs["stopping_criteria"] = StoppingCriteriaList(stopping)
        return kwargs, recorder

    def _stop_criterion(self, stop) -> StopStringCriteria | None:
        """The criterion for the usable stop strings, built once per set (call under the model's lock)."""
        usable = tuple(self._usable_stop_strings(stop))
        if not usable:
            return None
        loaded = self.load()
        criterion = loaded.stop_criteria.pop(usable, None)
        if criterion is None:
            criterion = StopStringCriteria(tokenizer=loaded.tokenizer, stop_strings=list(usable))
            while len(loaded.stop_criteria) >= _STOP_CRITERIA_KEPT:
                loaded.stop_criteria.pop(next(iter(loaded.stop_criteria)))  # the least recently used
        loaded.stop_criteria[usable] = criterion  # (re)inserted last: most recently used
        return criterion

    def _usable_stop_strings(self, stop) -> list[str]:
        """Stop strings transformers can match with this vocabulary.

        ``StopStringCriteria`` rejects strings with characters no token
        contains; those still end the text through the post-hoc cut.
        """
        loaded = self.load()
        usable = []
        for s in stop:
            if not s:
                continue
            ok = loaded.stop_ok.get(s)
            if ok is None:
                try:
                    StopStringCriteria(tokenizer=loaded.tokenizer, stop_strings=[s])
                    ok = True
                except ValueError:
                    ok = False
                loaded.stop_ok[s] = ok
            if ok:
                usable.append(s)
        return usable

    @contextlib.contextmanager
    def _seeded(self, seed: int | None):
        if seed is None:
            yield
            return
        devices = [torch.cuda.current_device()] if self.load().device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    # -- generation -------------------------------------------------------------
    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        loaded = self.load()
        n = max(1, params.n)
        greedy = params.temperature <= 0
        num = 1 if greedy else n
        with loaded.lock:
            input_ids, max_new = self._encode(prompt, params.max_tokens)
            prompt_len = input_ids.shape[1]
            kwargs, recorder = self._generate_kwargs(params, input_ids, max_new, num)
            try:
                with torch.inference_mode(), self._seeded(params.seed):
                    out = loaded.model.generate(**kwargs)
            except RuntimeError as exc:
                raise BackendError(
                    f"Generation with {self.model!r} failed: {exc}. Try fewer samples or tokens, "
                    "or c.DataAgent.device = 'cpu'."
                ) from exc
            sequences = out.sequences if hasattr(out, "sequences") else out
            rows = sequences[:, prompt_len:].tolist()  # one copy from the device for all rows
            logprobs = recorder.finish(sequences, prompt_len).tolist() if recorder is not None else [[] for _ in rows]
            completions = [self._completion(ids, lps, params, prompt_len) for ids, lps in zip(rows, logprobs)]
        return greedy_copies(completions, n) if greedy else completions

    def _completion(self, ids: list[int], logprobs: list[float], params: SamplingParams, prompt_len: int) -> Completion:
        tok = self.load().tokenizer
        eos = self._eos_ids()
        length, finish = len(ids), "length"
        for i, t in enumerate(ids):
            if t in eos:
                length, finish = i + 1, "stop"
                break

        def decode(k: int) -> str:
            return tok.decode(ids[:k], skip_special_tokens=True, clean_up_tokenization_spaces=False)

        full = decode(length)
        text, hit = cut_at_stop(full, params.stop)
        if hit:
            finish = "stop"
            # Fewest tokens whose text covers what we keep (decode is prefix-monotone).
            length = bisect.bisect_left(range(length), len(text), key=lambda k: len(decode(k)))
        kept = [float(x) for x in logprobs[:length]]
        return Completion(
            text=text,
            token_logprobs=kept if params.logprobs else None,
            finish_reason=finish,
            prompt_tokens=prompt_len,
            completion_tokens=length,
        )

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        loaded = self.load()
        single = replace(params, n=1)
        cancel = threading.Event()
        # No queue timeout: waiting for the lock behind another generation is normal, and a
        # failure in the worker ends the stream explicitly.
        streamer = TextIteratorStreamer(loaded.tokenizer, skip_prompt=True, skip_special_tokens=True)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                with loaded.lock:
                    if cancel.is_set():  # abandoned while waiting for another generation
                        streamer.end()
                        return
                    input_ids, max_new = self._encode(prompt, single.max_tokens)
                    # No log-probs: a stream returns text only.
                    kwargs, _ = self._generate_kwargs(
                        replace(single, logprobs=False), input_ids, max_new, 1, criteria=(_Cancel(cancel),)
                    )
                    kwargs["streamer"] = streamer
                    with torch.inference_mode(), self._seeded(single.seed):
                        loaded.model.generate(**kwargs)
            except BaseException as exc:  # noqa: BLE001 -- re-raised in the consumer's thread
                failure.append(exc)
                streamer.end()

        thread = threading.Thread(target=run, name="data-agent-stream", daemon=True)
        thread.start()

        def deltas() -> Iterator[str]:
            yield from streamer
            if failure:
                raise BackendError(f"Generation with {self.model!r} failed: {failure[0]}") from failure[0]

        try:
            yield from until_stop(deltas(), single.stop)
        finally:
            cancel.set()
            thread.join(5)  # normally ends at the next step; never hang the consumer on it
