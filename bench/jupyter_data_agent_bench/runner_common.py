"""Pieces shared by the benchmark runners (DABench, ARCADE suite, report).

- :class:`Workspace`: a fresh ipykernel whose working directory is a private
  temp dir holding copies of the data files, plus the fork snapshot tree of it
  (the replay sandbox where fork is unavailable). Candidates run in copies of
  this kernel exactly as they would for a user.
- :class:`Meter`: wraps the configured backend (:class:`CountingBackend`) and
  counts model calls and tokens, whatever the strategy reports (and even when
  it raises), plus the turn's events and wall time, as log record fields.
- :class:`RunFolder`: a resumable result folder (``run.json``, a JSONL log of
  finished items, ``summary.md``/``summary.json``); a progress bar; settings
  from the usual config plus the CLI flags every runner shares. (Cell values
  for matching come from :mod:`jupyter_data_agent.search.equivalence`.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jupyter_data_agent.config import BACKENDS
from jupyter_data_agent.llm.base import Backend, Completion, Prompt, SamplingParams, WrappedBackend
from jupyter_data_agent.turn.copies import Copies
from jupyter_data_agent.turn.spec import CopyPolicy

# --------------------------------------------------------------------------
# settings and backend

_MODEL_FLAGS = ("backend", "model", "base_url", "api_mode", "max_new_tokens", "max_prompt_tokens")


def add_common_arguments(parser) -> None:
    """``--cell-timeout``, ``--no-progress`` and the overrides of the configured backend."""
    parser.add_argument("--cell-timeout", type=float, default=60.0,
                        help="Wall-clock and CPU limit per executed cell (default 60 s).")
    parser.add_argument("--no-progress", action="store_true", help="No progress bar.")
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
    """``resolve_settings()`` with the CLI overrides applied (``--base-url`` implies openai;
    ``--torch-threads`` is the transformers backend's ``threads`` setting)."""
    from jupyter_data_agent.config import resolve_settings

    over: dict[str, Any] = {k: getattr(args, k) for k in _MODEL_FLAGS if getattr(args, k, None)}
    if "base_url" in over:
        over.setdefault("backend", "openai")
    if getattr(args, "no_exemplars", False):
        over["exemplars"] = False
    settings = resolve_settings().with_overrides(**over)
    if getattr(args, "torch_threads", None) and settings.backend == "transformers":
        settings = settings.with_overrides(threads=max(1, args.torch_threads))
    return settings


def bench_settings(settings, cell_timeout: float, **limits: Any):
    """``settings`` whose kernel copies stop a cell after ``cell_timeout`` (wall clock and CPU)."""
    return settings.with_overrides(snapshot_limits={
        **settings.snapshot_limits, "timeout_s": cell_timeout, "cpu_s": cell_timeout, **limits})


def load_backend(settings) -> Backend:
    """The backend for ``settings``, with its weights loaded now (not in task 1's time)."""
    from jupyter_data_agent.llm.factory import create_backend

    backend = create_backend(settings)
    load = getattr(backend, "load", None)
    if callable(load):
        load()
    return backend


def run_meta(kind: str, settings, model: str, **fields: Any) -> dict:
    """``run.json``: the benchmark, the model and its settings, then the runner's own fields."""
    return {"kind": kind, "backend": getattr(settings, "backend", None), "model": model,
            **{k: getattr(settings, k, None) for k in ("max_new_tokens", "max_prompt_tokens",
                                                       "exemplars", "api_mode")},
            **fields}


@dataclass
class CallCounts:
    model_calls: int = 0
    samples: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generate_s: float = 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "generate_s": round(self.generate_s, 3)}


class CountingBackend(WrappedBackend):
    """Delegates to ``inner`` and counts calls and tokens (one instance per task).

    Tokens follow :meth:`SearchStats.count_call`: a call's prompt counts once,
    every sample's completion counts. Streaming calls count as one call with
    the prompt and completion measured by the backend's tokenizer.
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.counts = CallCounts()
        self._lock = threading.Lock()

    def _count(self, t0: float, samples: int, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.counts.model_calls += 1
            self.counts.samples += samples
            self.counts.prompt_tokens += prompt_tokens
            self.counts.completion_tokens += completion_tokens
            self.counts.generate_s += time.monotonic() - t0

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        t0 = time.monotonic()
        out = self.inner.generate(prompt, params)
        self._count(t0, len(out), out[0].prompt_tokens if out else 0,
                    sum(c.completion_tokens for c in out))
        return out

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        t0 = time.monotonic()
        parts = []
        for delta in self.inner.stream(prompt, params):
            parts.append(delta)
            yield delta
        self._count(t0, 1, 0, self.inner.count_tokens("".join(parts)))


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


class Meter:
    """One task's turn: the backend it calls (counted), its event sink, its clock."""

    def __init__(self, backend: Backend) -> None:
        self.started = time.monotonic()
        self.backend = CountingBackend(backend)
        self.events = EventLog()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def fields(self) -> dict:
        """The task's log record fields: events, calls and tokens, wall time."""
        counts = self.backend.counts
        return {"events": self.events.items, "calls": counts.to_json(),
                "model_calls": counts.model_calls, "prompt_tokens": counts.prompt_tokens,
                "completion_tokens": counts.completion_tokens, "wall_time_s": self.elapsed(),
                "finished": time.time()}


# --------------------------------------------------------------------------
# kernels


WARM_IMPORTS = "__import__('pandas'); __import__('numpy')"


class Workspace:
    """A fresh kernel started in a private directory holding ``files``, and its copies.

    ``copies`` come from ``turn.open_copies`` under the turn's copy policy, as
    for a user: a fork tree of the kernel, else a replay kernel, else none
    (the confinement policy's call). ``setup`` runs in the kernel first (and
    in a replay kernel): by default pandas/numpy are imported so every copy
    has them in memory, and no user name is bound. Use as a context manager.
    """

    def __init__(self, files: Sequence[str | os.PathLike] = (), *, policy: CopyPolicy,
                 prefix: str = "jda-bench-", setup: str = WARM_IMPORTS) -> None:
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.policy, self.setup = policy, setup
        self.km = self.kc = None
        self.copies: Copies | None = None
        for f in files:
            shutil.copy2(f, os.path.join(self.dir, os.path.basename(os.fspath(f))))

    def start(self) -> "Workspace":
        from jupyter_data_agent.kernel.host.handle import BlockingClientHandle, wait
        from jupyter_data_agent.kernel.host.launch import start_kernel
        from jupyter_data_agent.turn import open_copies

        try:
            self.km, kc = start_kernel({"PYTHONWARNINGS": "ignore"}, self.dir, timeout=120)
            self.kc = kc
            reply = kc.execute(self.setup, silent=True, store_history=False, reply=True, timeout=120)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"workspace setup failed: {reply['content']}")
            handle = BlockingClientHandle(kc, notebook_dir=self.dir)
            self.copies = wait(open_copies(
                self.policy, fork=lambda limits: handle.fork(limits, self.policy.max_live),
                replay=[self.setup], notebook_dir=self.dir))
        except BaseException:
            self.close()
            raise
        return self

    @property
    def fallback(self) -> str | None:
        """Why candidates do not run in a fork of this kernel (None: they do)."""
        tree = self.copies.tree if self.copies is not None else None
        if tree is not None and tree.kind == "fork":
            return None
        return self.copies.fallback if self.copies is not None else "not started"

    def close(self) -> None:
        if self.copies is not None:
            with contextlib.suppress(Exception):
                self.copies.close()
            self.copies = None
        if self.km is not None:
            from jupyter_data_agent.kernel.host.launch import stop_kernel

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
    keys = {"model_calls": 3, "prompt_tokens": 1, "completion_tokens": 1, "wall_time_s": 2}
    total = {k: sum(float(r.get(k) or 0) for r in records) for k in keys}
    return {**{k: int(v) for k, v in total.items() if k != "wall_time_s"},
            "wall_time_s": round(total["wall_time_s"], 2),
            "per_task": {k: round(total[k] / n, d) if n else 0.0 for k, d in keys.items()}}


def cost_line(cost: dict, unit: str = "task") -> str:
    """The summary's ``- cost:`` line: totals, then per task (or turn)."""
    pt = cost["per_task"]
    return (f"- cost: {cost['model_calls']} model calls, {cost['prompt_tokens']} prompt + "
            f"{cost['completion_tokens']} completion tokens, {fmt_s(cost['wall_time_s'])} "
            f"(per {unit}: {pt['model_calls']} calls, {pt['completion_tokens']} completion tokens, "
            f"{pt['wall_time_s']} s)")


def fmt_s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


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
        for line in self.path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by a crash: redo it
                if line.strip():
                    out.append(json.loads(line))
        return out

    def rewrite(self, records: Iterable[dict]) -> None:
        """Replace the whole file (atomically) with ``records``."""
        lines = [json.dumps(r, default=_json_default, ensure_ascii=False) + "\n" for r in records]
        with self._lock:
            _write_atomic(self.path, "".join(lines))

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
        with contextlib.suppress(Exception):
            return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return repr(o)


def slim(obj: Any, max_chars: int = 20_000) -> Any:
    """A copy of a JSON-able log object without bulky payloads: images become
    ``"<image/png: N chars>"`` and very long strings are cut."""
    if isinstance(obj, dict):
        return {k: f"<{k}: {len(v)} chars>"
                if isinstance(k, str) and k.startswith("image/") and isinstance(v, str)
                else slim(v, max_chars) for k, v in obj.items()}
    if isinstance(obj, list):
        return [slim(v, max_chars) for v in obj]
    if isinstance(obj, str) and len(obj) > max_chars:
        return obj[:max_chars] + f"...[{len(obj) - max_chars} more chars]"
    return obj


def _write_atomic(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: str | os.PathLike, data: Any) -> None:
    _write_atomic(path, json.dumps(data, indent=2, default=_json_default, ensure_ascii=False) + "\n")


def parse_csv_list(values: Iterable[str] | str | None) -> list[str]:
    """``["1,2", "3"]`` or ``"1 2,3"`` -> ``["1", "2", "3"]``."""
    if isinstance(values, str):
        values = [values]
    return [p for v in values or () for p in v.replace(",", " ").split() if p]


def only(items: Iterable[Any], wanted: Iterable[str] | None, key: Callable[[Any], str],
         what: str) -> list:
    """``items`` whose ``key`` is ``wanted`` (all when none is), in their order; a ValueError
    names the unknown ones (numbers in numeric order)."""
    items, wanted = list(items), set(wanted or ())
    if not wanted:
        return items
    missing = wanted - {key(x) for x in items}
    if missing:
        names = sorted(missing, key=lambda s: (0, int(s), s) if s.isdigit() else (1, 0, s))
        raise ValueError(f"unknown {what}(s): {', '.join(names)}")
    return [x for x in items if key(x) in wanted]


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


# --------------------------------------------------------------------------
# result folders

_SAME_RUN_KEYS = ("strategy", "budget", "samples", "model", "max_new_tokens", "temperature",
                  "exemplars", "options", "repair")


class RunFolder:
    """A resumable result folder: ``run.json`` (settings), ``log_name`` (one JSON line per
    finished item, found again by its ``key`` field) and ``summary.md``/``summary.json``."""

    def __init__(self, out: str | os.PathLike, log_name: str, key: str) -> None:
        self.out, self.key = Path(out), key
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = JsonlLog(self.out / log_name)
        self.records = {str(r[key]): r for r in self.log.read() if key in r}
        try:
            self.previous = json.loads((self.out / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.previous = {}

    def start(self, meta: dict, total: int, todo: int, unit: str,
              print_fn: Callable[[str], None] | None) -> None:
        """Write ``run.json``; say what is resumed, and warn when the settings changed
        (resuming with other settings mixes two configurations in one folder)."""
        old = self.previous
        changed = [k for k in _SAME_RUN_KEYS if k in old and old.get(k) != meta.get(k)]
        if print_fn and changed:
            print_fn(f"warning: {self.out} was started with other settings "
                     f"({', '.join(f'{k}: {old.get(k)!r} -> {meta.get(k)!r}' for k in changed)}); "
                     f"finished {unit}s keep their old results. Use a new --out to compare.")
        write_json(self.out / "run.json", meta)
        if print_fn and todo < total:
            print_fn(f"resuming: {total - todo} of {total} {unit}s already done in {self.out}")

    def add(self, record: dict) -> None:
        self.log.append(record)
        self.records[str(record[self.key])] = record

    def finish(self, data: dict, md: str, print_fn: Callable[[str], None] | None) -> dict:
        """Write ``summary.md`` and ``summary.json`` (keys starting with ``_`` left out)."""
        (self.out / "summary.md").write_text(md, encoding="utf-8")
        write_json(self.out / "summary.json", {k: v for k, v in data.items() if not k.startswith("_")})
        if print_fn:
            print_fn(md)
        return data


@contextlib.contextmanager
def progress_bar(total: int, desc: str, unit: str, enabled: bool = True):
    """Yields ``tick(**postfix)``, advancing a tqdm bar (a no-op when disabled or empty)."""
    if not (enabled and total):
        yield lambda **postfix: None
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True) as bar:
        def tick(**postfix: Any) -> None:
            bar.update(1)
            if postfix:
                bar.set_postfix(refresh=False, **postfix)

        yield tick
