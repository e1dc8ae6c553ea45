"""Pieces shared by the benchmark runners (DABench, ARCADE suite, report).

- :class:`Workspace`: a fresh ipykernel whose working directory is a private
  temp dir holding copies of the data files, plus the fork snapshot tree of it
  (the replay sandbox where fork is unavailable). Candidates run in copies of
  this kernel exactly as they would for a user.
- :class:`CountingBackend`: wraps the configured backend and counts model
  calls and tokens, whatever the strategy reports (and even when it raises).
- JSONL logs (append under a lock, read back for resuming), settings from the
  usual config plus CLI overrides. (Cell values for matching come from
  :mod:`jupyter_data_agent.search.values`.)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import BACKENDS
from ..kernel.results import ExecResult
from ..llm.base import Backend, Capabilities, Completion, Prompt, SamplingParams
from ..turn.copies import Copies
from ..turn.spec import CopyPolicy

# --------------------------------------------------------------------------
# settings and backend


def add_model_arguments(parser) -> None:
    """``--backend/--model/--max-new-tokens/...``: overrides of the configured backend."""
    g = parser.add_argument_group("model (defaults: the configured backend, see `%agent config`)")
    g.add_argument("--backend", choices=BACKENDS, default=None,
                   help="Model backend (default: from config / JUPYTER_DATA_AGENT_BACKEND).")
    g.add_argument("--model", default=None, help="Model id, local directory or GGUF file.")
    g.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (openai backend).")
    g.add_argument("--api-mode", choices=("auto", "chat", "completion"), default=None,
                   help="Prompt style (default: from config).")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="Tokens generated per model call (default: from config, 512).")
    g.add_argument("--max-prompt-tokens", type=int, default=None,
                   help="Prompt token budget (context is left-truncated).")
    g.add_argument("--temperature", type=float, default=None,
                   help="Sampling temperature (default: the strategy's own).")
    g.add_argument("--no-exemplars", action="store_true", help="Leave few-shot exemplars out.")
    g.add_argument("--torch-threads", type=int, default=None,
                   help="torch intra-op threads for a local model (1 is much faster on a "
                        "loaded machine: OpenMP threads spin against each other).")


def settings_from_args(args):
    """``resolve_settings()`` with the CLI overrides applied."""
    from ..config import resolve_settings

    settings = resolve_settings()
    over: dict[str, Any] = {}
    if getattr(args, "backend", None):
        over["backend"] = args.backend
    if getattr(args, "model", None):
        over["model"] = args.model
    if getattr(args, "base_url", None):
        over["base_url"] = args.base_url
        if not getattr(args, "backend", None):
            over["backend"] = "openai"
    if getattr(args, "api_mode", None):
        over["api_mode"] = args.api_mode
    if getattr(args, "max_new_tokens", None):
        over["max_new_tokens"] = args.max_new_tokens
    if getattr(args, "max_prompt_tokens", None):
        over["max_prompt_tokens"] = args.max_prompt_tokens
    if getattr(args, "no_exemplars", False):
        over["exemplars"] = False
    return settings.with_overrides(**over)


def set_torch_threads(n: int | None) -> None:
    """``torch.set_num_threads(n)`` when torch is installed (no-op for ``None``)."""
    if not n:
        return
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(max(1, int(n)))


def load_backend(settings, torch_threads: int | None = None) -> Backend:
    """The backend for ``settings``, with its weights loaded now (not in task 1's time)."""
    from ..llm.factory import create_backend

    if getattr(settings, "backend", None) == "transformers":
        set_torch_threads(torch_threads)

    backend = create_backend(settings)
    load = getattr(backend, "load", None)
    if callable(load):
        load()
    return backend


@dataclass
class CallCounts:
    model_calls: int = 0
    samples: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generate_s: float = 0.0

    def to_json(self) -> dict:
        return {
            "model_calls": self.model_calls,
            "samples": self.samples,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "generate_s": round(self.generate_s, 3),
        }


class CountingBackend(Backend):
    """Delegates to ``inner`` and counts calls and tokens (one instance per task).

    Tokens follow :meth:`SearchStats.count_call`: a call's prompt counts once,
    every sample's completion counts. Streaming calls count as one call with
    the prompt and completion measured by the backend's tokenizer.
    """

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "backend")
        self.counts = CallCounts()
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        t0 = time.monotonic()
        out = self.inner.generate(prompt, params)
        with self._lock:
            self.counts.model_calls += 1
            self.counts.samples += len(out)
            if out:
                self.counts.prompt_tokens += out[0].prompt_tokens
            self.counts.completion_tokens += sum(c.completion_tokens for c in out)
            self.counts.generate_s += time.monotonic() - t0
        return out

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        t0 = time.monotonic()
        parts = []
        for delta in self.inner.stream(prompt, params):
            parts.append(delta)
            yield delta
        with self._lock:
            self.counts.model_calls += 1
            self.counts.samples += 1
            self.counts.completion_tokens += self.inner.count_tokens("".join(parts))
            self.counts.generate_s += time.monotonic() - t0

    def close(self) -> None:  # the shared backend outlives one task
        pass

    def __getattr__(self, name: str):  # backend-specific extras (value heads...)
        return getattr(self.inner, name)


# --------------------------------------------------------------------------
# kernels


WARM_IMPORTS = "__import__('pandas'); __import__('numpy')"


class Workspace:
    """A fresh kernel started in a private directory holding ``files``, and its copies.

    ``copies`` come from ``turn.open_copies`` under the turn's copy policy, as
    for a user: a fork tree of the kernel, else a replay kernel, else none
    (the confinement policy's call). pandas/numpy are imported up front so
    every copy has them in memory; no user name is bound. Use as a context
    manager.
    """

    def __init__(self, files: Sequence[str | os.PathLike] = (), *, policy: CopyPolicy,
                 prefix: str = "jda-bench-", warm: bool = True, start_timeout: float = 120.0) -> None:
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.policy = policy
        self.warm = warm
        self.start_timeout = start_timeout
        self.km = self.kc = None
        self.copies: Copies | None = None
        for f in files:
            shutil.copy2(f, os.path.join(self.dir, os.path.basename(os.fspath(f))))

    def start(self) -> "Workspace":
        from ..kernel.launch import start_kernel
        from ..kernel.snapshot import SnapshotTree
        from ..turn import open_copies

        try:
            self.km, kc = start_kernel({"PYTHONWARNINGS": "ignore"}, self.dir,
                                       timeout=self.start_timeout)
            self.kc = kc
            if self.warm:
                kc.execute(WARM_IMPORTS, silent=True, store_history=False, reply=True,
                           timeout=self.start_timeout)
            self.copies = open_copies(
                self.policy,
                fork=lambda limits: SnapshotTree.from_blocking_client(
                    kc, notebook_dir=self.dir, limits=limits, max_live=self.policy.max_live),
                replay=[WARM_IMPORTS] if self.warm else [], notebook_dir=self.dir)
        except BaseException:
            self.close()
            raise
        return self

    @property
    def root(self):
        return self.copies.executor if self.copies is not None else None

    @property
    def protections(self):
        return self.copies.protections if self.copies is not None else None

    @property
    def fallback(self) -> str | None:
        """Why candidates do not run in a fork of this kernel (None: they do)."""
        tree = self.copies.tree if self.copies is not None else None
        if tree is not None and tree.kind == "fork":
            return None
        return self.copies.fallback if self.copies is not None else "not started"

    def close(self) -> None:
        if self.copies is not None:
            try:
                self.copies.close()
            except Exception:
                pass
            self.copies = None
        if self.km is not None:
            from ..kernel.launch import stop_kernel

            stop_kernel(self.km, self.kc)
            self.km = self.kc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Workspace":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------
# outputs


def cost_totals(records: Sequence[dict]) -> dict:
    """Model calls, tokens and wall time of finished records: totals and per record."""
    n = len(records)

    def total(key: str) -> float:
        return sum(float(r.get(key) or 0) for r in records)

    def per(key: str, digits: int) -> float:
        return round(total(key) / n, digits) if n else 0.0

    return {
        "model_calls": int(total("model_calls")),
        "prompt_tokens": int(total("prompt_tokens")),
        "completion_tokens": int(total("completion_tokens")),
        "wall_time_s": round(total("wall_time_s"), 2),
        "per_task": {
            "model_calls": per("model_calls", 3),
            "prompt_tokens": per("prompt_tokens", 1),
            "completion_tokens": per("completion_tokens", 1),
            "wall_time_s": per("wall_time_s", 2),
        },
    }


def output_text(result: ExecResult | None, limit: int = 4000) -> str:
    """Printed and displayed text of a cell (for logs and DABench responses)."""
    if result is None:
        return ""
    text = result.text()
    if len(text) > limit:
        text = text[:limit] + f"\n...[{len(text) - limit} more chars]"
    return text


# --------------------------------------------------------------------------
# logs


class JsonlLog:
    """An append-only JSON-lines file; one line per finished item."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by a crash: redo that item
                    continue
        return out

    def rewrite(self, records: Iterable[dict]) -> None:
        """Replace the whole file (atomically) with ``records``."""
        lines = [json.dumps(r, default=_json_default, ensure_ascii=False) for r in records]
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            os.replace(tmp, self.path)

    def append(self, record: dict) -> None:
        line = json.dumps(record, default=_json_default, ensure_ascii=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_json"):
        return o.to_json()
    if hasattr(o, "item"):
        try:
            return o.item()
        except Exception:
            pass
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return repr(o)


def slim(obj: Any, max_chars: int = 20_000) -> Any:
    """A copy of a JSON-able log object without bulky payloads: images become
    ``"<image/png: N chars>"`` and very long strings are cut."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and k.startswith("image/") and isinstance(v, str):
                out[k] = f"<{k}: {len(v)} chars>"
            else:
                out[k] = slim(v, max_chars)
        return out
    if isinstance(obj, list):
        return [slim(v, max_chars) for v in obj]
    if isinstance(obj, str) and len(obj) > max_chars:
        return obj[:max_chars] + f"...[{len(obj) - max_chars} more chars]"
    return obj


def write_json(path: str | os.PathLike, data: Any) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def parse_csv_list(values: Iterable[str] | str | None) -> list[str]:
    """``["1,2", "3"]`` or ``"1 2,3"`` -> ``["1", "2", "3"]``."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        out.extend(p for p in v.replace(",", " ").split() if p)
    return out


def parse_options(pairs: Iterable[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are JSON when they parse (``4``, ``true``), else text."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--option expects KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


@dataclass
class EventLog:
    """Collects strategy events for the per-task log (bounded)."""

    limit: int = 200
    items: list[dict] = field(default_factory=list)
    dropped: int = 0

    def __call__(self, event) -> None:
        if len(self.items) >= self.limit:
            self.dropped += 1
            return
        item = {"kind": event.kind, "message": event.message}
        data = getattr(event, "data", None)
        if data:
            try:
                json.dumps(data)
                item["data"] = data
            except (TypeError, ValueError):
                item["data"] = repr(data)[:500]
        self.items.append(item)


def fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"
