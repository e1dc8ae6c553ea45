"""Generation speed: the transformers backend against plain ``model.generate``, side by side.

    python -m jupyter_data_agent_bench.generation_speed [--layers 30] [--new-tokens 128]
        [--samples 8] [--temperature 0.8] [--prompt-tokens 128] [--repeats 3]
        [--device auto] [--threads N] [--cases greedy,stream,samples] [--stop S ...] [--json F]

A randomly initialized model of a real architecture (SmolLM2-135M's: Llama,
hidden 576, 30 layers, 9 heads, 3 KV heads, MLP 1536, vocabulary 49152, tied
embeddings) is built from a config written here, with a byte-level BPE
tokenizer of the same vocabulary size built in code: nothing is downloaded
(``HF_HUB_OFFLINE=1``). Both are saved to a temporary directory and loaded
through the product's :class:`~jupyter_data_agent.llm.transformers_backend.TransformersBackend`
on ``--device`` (``auto``: ``cuda`` when available, else ``cpu``; the
backend's dtype: bf16/fp16 on a GPU, float32 on the CPU). The model has no
end-of-sequence token, so every run decodes exactly ``--new-tokens``.

Then, on the backend's own loaded model (same weights, device and dtype),
each case is timed with the backend and with plain ``model.generate``, in
alternating order, ``--repeats`` times after a warm-up, median of each:

* ``greedy``: one greedy stream, ``backend.generate`` vs ``model.generate``
  (``do_sample=False``, ``min_new_tokens = max_new_tokens``); ``same_output``:
  the two texts are equal;
* ``stream``: the same greedy stream through ``backend.stream`` (the
  sidebar's path) vs the same plain ``model.generate``;
* ``samples``: ``--samples`` sampled streams with per-token log-probs,
  ``backend.generate(n=8, logprobs=True)`` vs ``model.generate(do_sample=True,
  num_return_sequences=8, output_logits=True)`` plus the log-softmax of the
  chosen tokens (the same definition of log-prob as the backend's: the
  model's own distribution, before temperature).

Both sides include encoding the prompt and decoding the text. ``--stop``:
stop strings for both sides (``generate(stop_strings=...)`` on the plain
side); pick ones that never occur, so both still decode every token. Speed is
generated tokens (all streams) per second; ``ratio`` is backend speed /
plain speed (1.0: the library's speed) and ``slowdown`` its inverse; the
target is ``slowdown <= 1.2``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TARGET_SLOWDOWN = 1.2
CASES = ("greedy", "stream", "samples")
#: SmolLM2-135M (HuggingFaceTB/SmolLM2-135M config.json), written out: no download
SMOLLM2_135M = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)
PROMPT_LINE = "df = pd.read_csv('flights.csv')\ndf.groupby('airline')['delay'].mean().sort_values()\n"


@dataclass
class CaseResult:
    case: str
    streams: int
    new_tokens: int  # per stream
    backend_s: float  # median wall time of one call
    generate_s: float
    backend_tok_s: float
    generate_tok_s: float
    ratio: float  # backend speed / plain generate speed
    slowdown: float  # plain speed / backend speed; target <= TARGET_SLOWDOWN
    within_target: bool
    backend_runs_s: list[float] = field(default_factory=list)
    generate_runs_s: list[float] = field(default_factory=list)
    same_output: bool | None = None  # greedy, stream: the backend's text is plain generate's


def build_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer with exactly ``vocab_size`` tokens, built without training.

    3 special tokens, the 256 byte symbols and then two-symbol tokens (with their merges) up to
    the size, those of printable ASCII first: any id decodes, and from about 9,500 tokens on
    ASCII text encodes to two characters a token.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    symbols = sorted(pre_tokenizers.ByteLevel.alphabet(), key=_byte_order())
    if vocab_size < len(specials) + len(symbols):
        raise ValueError(f"vocab_size must be at least {len(specials) + len(symbols)}")
    vocab = {t: i for i, t in enumerate(specials + symbols)}
    merges: list[tuple[str, str]] = []
    for k, b in enumerate(symbols):  # every pair among the first k symbols before any with the next
        for a, c in [(a, b) for a in symbols[:k]] + [(b, a) for a in symbols[: k + 1]]:
            if len(vocab) >= vocab_size:
                break
            vocab[a + c] = len(vocab)
            merges.append((a, c))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    # No end-of-sequence token: every run decodes exactly max_new_tokens, on both sides.
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>")


def _byte_order() -> Callable[[str], tuple[bool, int]]:
    """Sort key of byte-level symbols: printable ASCII and newline first, then by byte."""
    # GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to 256 + k.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    to_byte = {chr(b): b for b in printable}
    k = 0
    for b in range(256):
        if b not in printable:
            to_byte[chr(256 + k)] = b
            k += 1
    first = set(range(32, 127)) | {10}
    return lambda s: (to_byte[s] not in first, to_byte[s])


def build_model(path: Path, layers: int, dims: dict[str, Any] | None = None, seed: int = 0) -> Path:
    """A randomly initialized Llama of SmolLM2-135M's architecture (``layers`` deep) saved to ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = {**SMOLLM2_135M, **(dims or {}), "num_hidden_layers": layers}
    tokenizer = build_tokenizer(spec["vocab_size"])
    config = LlamaConfig(**spec, bos_token_id=None, eos_token_id=None, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    _sync(device)
    start = time.perf_counter()
    value = fn()
    _sync(device)
    return time.perf_counter() - start, value


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    if device == "cpu":
        return f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    return device


def run(
    *,
    layers: int = 30,
    new_tokens: int = 128,
    samples: int = 8,
    temperature: float = 0.8,
    prompt_tokens: int = 128,
    repeats: int = 3,
    device: str = "auto",
    threads: int = 0,
    cases: tuple[str, ...] = CASES,
    stop: tuple[str, ...] = (),
    dims: dict[str, Any] | None = None,
    workdir: str | os.PathLike | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Build, load through the backend, time each case; the report as a JSON-able dict.

    Clears the backend's process-wide model cache at the end (to free the device's memory).
    """
    import torch
    import transformers

    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.llm.base import Prompt, SamplingParams
    from jupyter_data_agent.llm.transformers_backend import TransformersBackend, clear_model_cache, resolve_device

    unknown = set(cases) - set(CASES)
    if unknown:
        raise ValueError(f"unknown cases {sorted(unknown)}: choose among {', '.join(CASES)}")
    device = resolve_device(device)
    with tempfile.TemporaryDirectory(prefix="jda-generation-speed-", dir=workdir) as tmp:
        start = time.perf_counter()
        path = build_model(Path(tmp) / "model", layers, dims)
        build_s = time.perf_counter() - start
        settings = Settings(backend="transformers", model=str(path), device=device, threads=threads)
        backend = TransformersBackend(settings)
        try:
            loaded = backend.load()
            model, tok = loaded.model, loaded.tokenizer
            on_device = {str(p.device) for p in model.parameters()}
            text = _prompt_text(tok, prompt_tokens)
            prompt = Prompt(text=text)
            report: dict[str, Any] = {
                "device": device,
                "device_name": device_name(device),
                "dtype": str(loaded.dtype).removeprefix("torch."),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "model": {
                    "architecture": "Llama (SmolLM2-135M's dimensions), random init",
                    **{**SMOLLM2_135M, **(dims or {}), "num_hidden_layers": layers},
                    "parameters": sum(p.numel() for p in model.parameters()),
                },
                "prompt_tokens": backend.count_tokens(text),
                "new_tokens": new_tokens,
                "samples": samples,
                "temperature": temperature,
                "stop": list(stop),
                "repeats": repeats,
                "build_s": round(build_s, 2),
                "load_s": round(loaded.load_seconds, 2),
                "parameter_devices": sorted(on_device),
                "target_slowdown": TARGET_SLOWDOWN,
                "cases": [],
            }
            log(
                f"{report['device_name']}, {report['dtype']}, {report['model']['parameters'] / 1e6:.1f} M "
                f"parameters, prompt {report['prompt_tokens']} tokens, {new_tokens} new tokens"
            )

            def plain(n: int, sample: bool) -> Callable[[], Any]:
                def call() -> Any:
                    ids = tok(text, return_tensors="pt")["input_ids"].to(model.device)
                    kwargs: dict[str, Any] = dict(
                        attention_mask=torch.ones_like(ids),
                        max_new_tokens=new_tokens,
                        min_new_tokens=new_tokens,
                        pad_token_id=tok.pad_token_id,
                        do_sample=sample,
                    )
                    if stop:
                        kwargs.update(stop_strings=list(stop), tokenizer=tok)
                    if sample:
                        kwargs.update(
                            temperature=temperature,
                            top_p=1.0,
                            top_k=0,
                            num_return_sequences=n,
                            output_logits=True,
                            return_dict_in_generate=True,
                        )
                    with torch.inference_mode():
                        out = model.generate(ids, **kwargs)
                        sequences = out.sequences if sample else out
                        gen = sequences[:, ids.shape[1] :]
                        logprobs = None
                        if sample:
                            logits = torch.stack(out.logits, dim=1).float()
                            logprobs = torch.log_softmax(logits, -1).gather(-1, gen[..., None]).squeeze(-1)
                            logprobs = logprobs.cpu().tolist()
                    rows = gen.cpu().tolist()
                    return rows, tok.batch_decode(rows, skip_special_tokens=True), logprobs

                return call

            greedy_params = SamplingParams(max_tokens=new_tokens, temperature=0.0, stop=stop)
            sample_params = SamplingParams(
                n=samples, max_tokens=new_tokens, temperature=temperature, logprobs=True, seed=0, stop=stop
            )
            table = {
                "greedy": (1, lambda: backend.generate(prompt, greedy_params), plain(1, False)),
                "stream": (1, lambda: "".join(backend.stream(prompt, greedy_params)), plain(1, False)),
                "samples": (samples, lambda: backend.generate(prompt, sample_params), plain(samples, True)),
            }
            for case in cases:
                streams, ours, theirs = table[case]
                result, mine, reference = _measure(case, streams, new_tokens, ours, theirs, repeats, device)
                if case == "stream":
                    result.same_output = mine == reference[1][0]
                else:
                    bad = [
                        c
                        for c in mine
                        if c.completion_tokens != new_tokens or (case == "samples") != bool(c.token_logprobs)
                    ]
                    if bad or len(mine) != streams:
                        raise RuntimeError(
                            f"{case}: the backend returned {len(mine)} completions, {len(bad)} short or with "
                            "log-probs wrong (a stop string occurred?)"
                        )
                    if case == "greedy":
                        result.same_output = mine[0].text == reference[1][0]
                report["cases"].append(asdict(result))
                log(_row(result))
            return report
        finally:
            clear_model_cache()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()


def _prompt_text(tok, prompt_tokens: int) -> str:
    text = PROMPT_LINE
    while len(tok(text, add_special_tokens=False)["input_ids"]) < prompt_tokens:
        text += PROMPT_LINE
    ids = tok(text, add_special_tokens=False)["input_ids"][:prompt_tokens]
    return tok.decode(ids)


def _measure(
    case: str,
    streams: int,
    new_tokens: int,
    ours: Callable[[], Any],
    theirs: Callable[[], Any],
    repeats: int,
    device: str,
) -> tuple[CaseResult, Any, Any]:
    """The timings, and the last output of each side."""
    ours()  # warm-up: allocator, kernels, caches
    theirs()
    mine: list[float] = []
    plain: list[float] = []
    last: dict[int, Any] = {}
    for i in range(max(1, repeats)):  # alternating order: drift on a shared machine hits both
        order = ((ours, mine), (theirs, plain)) if i % 2 == 0 else ((theirs, plain), (ours, mine))
        for fn, times in order:
            elapsed, last[id(times)] = _timed(fn, device)
            times.append(elapsed)
    backend_s, generate_s = statistics.median(mine), statistics.median(plain)
    tokens = streams * new_tokens
    backend_tok_s, generate_tok_s = tokens / backend_s, tokens / generate_s
    slowdown = generate_tok_s / backend_tok_s
    result = CaseResult(
        case=case,
        streams=streams,
        new_tokens=new_tokens,
        backend_s=round(backend_s, 4),
        generate_s=round(generate_s, 4),
        backend_tok_s=round(backend_tok_s, 2),
        generate_tok_s=round(generate_tok_s, 2),
        ratio=round(backend_tok_s / generate_tok_s, 3),
        slowdown=round(slowdown, 3),
        within_target=slowdown <= TARGET_SLOWDOWN,
        backend_runs_s=[round(t, 4) for t in mine],
        generate_runs_s=[round(t, 4) for t in plain],
    )
    return result, last[id(mine)], last[id(plain)]


def _row(r: CaseResult) -> str:
    same = "" if r.same_output is None else f" | {'same' if r.same_output else 'DIFFERENT'}"
    return (
        f"| {r.case} | {r.streams} x {r.new_tokens} | {r.backend_tok_s:.1f} | {r.generate_tok_s:.1f} "
        f"| {r.ratio:.2f} | {r.slowdown:.2f} {'OK' if r.within_target else 'OVER'}{same} |"
    )


def table(report: dict[str, Any]) -> str:
    """The report as a Markdown table."""
    lines = [
        f"{report['device_name']} ({report['device']}, {report['dtype']}); torch {report['torch']}, "
        f"transformers {report['transformers']}; {report['model']['num_hidden_layers']} layers, "
        f"{report['model']['parameters'] / 1e6:.1f} M parameters; prompt {report['prompt_tokens']} tokens; "
        f"load {report['load_s']} s, parameters on {', '.join(report['parameter_devices'])}",
        "",
        "| case | streams x tokens | backend tok/s | plain generate tok/s | ratio | slowdown "
        f"(target <= {report['target_slowdown']}) | same text |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in report["cases"]:
        row = _row(CaseResult(**case))
        lines.append(row if case["same_output"] is not None else row[:-1] + "| – |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_data_agent_bench.generation_speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--layers", type=int, default=30, help="decoder layers (SmolLM2-135M: 30)")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens per stream (default 128)")
    parser.add_argument("--samples", type=int, default=8, help="streams of the samples case (default 8)")
    parser.add_argument("--temperature", type=float, default=0.8, help="of the samples case (default 0.8)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length (default 128)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each side; the median counts")
    parser.add_argument("--device", default="auto", help="auto (cuda when available, else cpu), cpu, cuda:1...")
    parser.add_argument("--threads", type=int, default=0, help="CPU: torch threads (default: torch's own)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated among {', '.join(CASES)}")
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        help="a stop string for both sides (repeatable; one that never occurs measures the criterion's cost)",
    )
    parser.add_argument("--json", default="", help="also write the report to this JSON file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report = run(
        layers=args.layers,
        new_tokens=args.new_tokens,
        samples=args.samples,
        temperature=args.temperature,
        prompt_tokens=args.prompt_tokens,
        repeats=args.repeats,
        device=args.device,
        threads=args.threads,
        stop=tuple(args.stop),
        cases=tuple(c.strip() for c in args.cases.split(",") if c.strip()),
        log=lambda line: print(line, file=sys.stderr),
    )
    print(table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if all(c["within_target"] for c in report["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
