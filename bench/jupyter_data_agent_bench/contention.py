"""The embedded model on a busy machine: ``bench.runtime --contention``.

    python -m jupyter_data_agent_bench.runtime --runtimes llamacpp --contention
        [--contention-tokens 48] [--contention-prefill 600] [--contention-configs old,new]

Decode and prefill speed of the embedded GGUF through the product's
:class:`~jupyter_data_agent.llm.llamacpp_backend.LlamaCppBackend`, each
configuration in a fresh process (the OpenMP wait policy is read once, when
llama.cpp loads), in five situations measured one after another in one run:

* idle: nothing started by the benchmark (the machine's own load is reported);
* beside a numpy matmul loop in another process of the benchmark's own
  session (OpenBLAS uses every core): a script started from the server's
  terminal, the worst case;
* beside the same loop in a real ipykernel started as Jupyter starts a user's
  kernel (``jupyter_client``'s launcher, which puts every kernel in a session
  of its own, with the environment's BLAS threads): a user's kernel
  computing. Where Linux's autogroup scheduling is on
  (``/proc/sys/kernel/sched_autogroup_enabled``, the default of desktop
  distributions), CPU time is shared between sessions before threads, so this
  differs from the row above; the run reports the setting;
* beside a second model decoding without pause in another process, with the
  same configuration (a second Jupyter server with the embedded model);
* during a search's executions: 4 real kernel copies (``SnapshotTree`` forks of
  a real ipykernel, the product's ``Limits``, so at the copies' niceness) each
  running a cell that computes for 5 s, started over as soon as they end
  (all 4 at once, as mcts's parallel expansions run; vote runs its candidates
  one after another, which is lighter).

Configurations: ``old`` is the default before issue 28 (threads = the usable
cores, OpenMP's default spinning wait); ``passive`` its first fix
(``threads = 0``: the cores other processes left free, read before each
request; ``wait_policy = 'passive'``); ``new`` the product's default now
(``threads = 0``, ``wait_policy = 'bounded'``: spin ``BOUNDED_SPINS`` times,
then sleep). ``1-thread``, ``2-passive``, ``2-bounded`` and the ``free-*``
ones (the free-core chooser with other spin bounds) show where a gain
comes from. Every figure is also given as a
percentage of the run's best idle figure (any configuration's): a
configuration that is slow idle does not score by losing little.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

CONFIGS: dict[str, dict] = {
    "old": {"threads": -1, "wait_policy": "default"},  # -1: the usable cores, fixed
    "passive": {"threads": 0, "wait_policy": "passive"},  # issue 28's first default
    "new": {"threads": 0, "wait_policy": "bounded"},  # the product's default
    "1-thread": {"threads": 1, "wait_policy": "default"},
    "2-passive": {"threads": 2, "wait_policy": "passive"},
    "2-bounded": {"threads": 2, "wait_policy": "bounded"},
    # The free-core chooser with libgomp's own spin (300,000), and other bounds (GOMP_SPINCOUNT).
    "free-spin": {"threads": 0, "wait_policy": "default"},
    "free-spin1k": {"threads": 0, "wait_policy": "default", "env": {"GOMP_SPINCOUNT": "1000"}},
    "free-spin100k": {"threads": 0, "wait_policy": "default", "env": {"GOMP_SPINCOUNT": "100000"}},
}
SCENARIOS = ("idle", "matmul", "matmul in a kernel", "second model", "4 copies computing")
MATMUL = "import numpy as np\na = np.random.rand(600, 600)\nwhile True:\n    a @ a\n"
DECODE_CAP_S = 25.0  # a decode this slow is measured on the tokens it made by then
BUSY_CELL = "import time\n_t = time.time()\nwhile time.time() - _t < 5:\n    sum(range(10000))\n"


@dataclass
class Measured:
    config: str
    scenario: str
    decode_tok_s: float = 0.0
    prefill_tok_s: float = 0.0
    prefill_tokens: int = 0
    threads: int = 0  # the last request's (``new`` follows the free cores)
    load1: float = 0.0  # the machine's 1-minute load average when the scenario started
    error: str = ""
    notes: list[str] = field(default_factory=list)


# -- the worker: one configuration, one process -----------------------------------

def _settings(config: str):
    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.llm.cores import usable_cores

    spec = CONFIGS[config]
    threads = usable_cores() if spec["threads"] < 0 else spec["threads"]
    return Settings(backend="llamacpp", threads=threads, wait_policy=spec["wait_policy"], max_new_tokens=512)


def worker(config: str, mode: str, tokens: int, prefill: int) -> None:
    """``measure``: load, say ready, wait for a line, measure, print JSON. ``loop``: decode forever."""
    from jupyter_data_agent.context.model import NotebookContext
    from jupyter_data_agent.llm.base import Prompt, SamplingParams
    from jupyter_data_agent.llm.llamacpp_backend import LlamaCppBackend
    from jupyter_data_agent.prompts.arcade import build_prompt

    from .runtime import INTENT, base_prompt, long_prompt, reset_cache

    backend = LlamaCppBackend(_settings(config), load=True)
    if mode == "loop":
        print("ready", flush=True)
        while True:
            reset_cache(backend)
            backend.generate(Prompt(text=base_prompt()), SamplingParams(max_tokens=64, temperature=0.7))
    # The product's prompt without exemplars behind notebook cells, about ``prefill`` tokens.
    text = long_prompt(backend.count_tokens, build_prompt(NotebookContext(), INTENT).prompt.text or "", prefill)
    backend.generate(Prompt(text="x = 1\n"), SamplingParams(max_tokens=1))  # warm: pages in, a first reading
    print("ready", flush=True)
    sys.stdin.readline()
    reset_cache(backend)
    start = time.perf_counter()
    out = backend.generate(Prompt(text=text), SamplingParams(max_tokens=1))[0]
    elapsed = time.perf_counter() - start
    # Decode: the same prompt, now cached, so the clock measures new tokens only.
    first, n = 0.0, 0
    for delta in backend.stream(Prompt(text=text), SamplingParams(max_tokens=tokens, temperature=0.0)):
        if delta:  # "" after prompt batches: not tokens
            n += 1
            first = first or time.perf_counter()
            if time.perf_counter() - first > DECODE_CAP_S:
                break
    total = time.perf_counter()
    decode = (n - 1) / (total - first) if n > 1 and total > first else 0.0
    extra = backend.capabilities.extra
    print(json.dumps({"decode_tok_s": decode, "prefill_tok_s": out.prompt_tokens / elapsed,
                      "prefill_tokens": out.prompt_tokens,
                      "threads": extra.get("active_threads") or extra.get("threads", 0),
                      "wait_policy": extra.get("wait_policy", "")}), flush=True)


def _spawn(config: str, mode: str, tokens: int = 0, prefill: int = 0) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(CONFIGS[config].get("env", {}))
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_data_agent_bench.contention", "--worker", config, mode,
         str(tokens), str(prefill)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


# -- what runs beside it ------------------------------------------------------------

@contextmanager
def _process(args: list[str], ready: bool = False):
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if ready and proc.stdout is not None:
            proc.stdout.readline()
        time.sleep(1.0)  # let it reach its steady state
        yield
    finally:
        _stop(proc)


@contextmanager
def _copies_computing(config: str, count: int = 4):
    """``count`` real kernel copies each running ``BUSY_CELL``, started over until the block ends."""
    import tempfile

    from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
    from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel

    km, kc = start_kernel(cwd=tempfile.mkdtemp(prefix="jda-contention-"))
    from jupyter_data_agent.kernel.results import Limits

    # The old default ran copies at the kernel's priority; the product's Limits lower it.
    tree = SnapshotTree.from_blocking_client(kc, limits=Limits(nice=0) if config == "old" else Limits())
    stop = threading.Event()

    def run_one() -> None:
        while not stop.is_set():
            copy = tree.root.fork()
            try:
                copy.exec(BUSY_CELL)
            finally:
                copy.close()

    threads = [threading.Thread(target=run_one, daemon=True) for _ in range(count)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.5)  # the forks are up and computing
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
        tree.close()
        stop_kernel(km, kc)


@contextmanager
def _kernel_computing():
    """A user's kernel running the matmul loop: launched by jupyter_client as the server launches one."""
    import tempfile

    from jupyter_client.manager import start_new_kernel

    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    km, kc = start_new_kernel(startup_timeout=120, cwd=tempfile.mkdtemp(prefix="jda-contention-"), env=env)
    try:
        kc.execute(MATMUL)  # runs until the kernel is killed
        time.sleep(2.0)  # numpy imported, the loop at its steady state
        yield
    finally:
        from jupyter_data_agent.kernel.host.launch import stop_kernel

        stop_kernel(km, kc)


def autogroup() -> str:
    """Whether the scheduler shares CPU between sessions first (decides the kernel row's reading)."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return "on" if f.read().strip() == "1" else "off"
    except OSError:
        return "unknown"


def _beside(scenario: str, config: str):
    if scenario == "matmul":
        return _process([sys.executable, "-c", MATMUL])
    if scenario == "matmul in a kernel":
        return _kernel_computing()
    if scenario == "second model":
        return _neighbour(config)
    if scenario == "4 copies computing":
        return _copies_computing(config)
    return _nothing()


@contextmanager
def _nothing():
    yield


@contextmanager
def _neighbour(config: str):
    proc = _spawn(config, "loop")
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(1.0)
        yield
    finally:
        _stop(proc)


def measure_one(config: str, scenario: str, tokens: int, prefill: int) -> Measured:
    result = Measured(config, scenario)
    proc = _spawn(config, "measure", tokens, prefill)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            result.error = "the worker did not start"
            return result
        with _beside(scenario, config):
            result.load1 = os.getloadavg()[0]
            proc.stdin.write("go\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        data = json.loads(line)
        result.decode_tok_s = data["decode_tok_s"]
        result.prefill_tok_s = data["prefill_tok_s"]
        result.prefill_tokens = data["prefill_tokens"]
        result.threads = data["threads"]
        result.notes.append(f"wait policy {data['wait_policy']}")
    except Exception as exc:  # noqa: BLE001 -- one failed cell of the table is reported, not fatal
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        _stop(proc)
    return result


def measure(configs: list[str], tokens: int, prefill: int, scenarios: tuple[str, ...] = SCENARIOS,
            rounds: int = 1) -> list[Measured]:
    """Every configuration in every scenario, scenario by scenario (configurations side by side).

    With ``rounds`` > 1 each cell is measured that many times, the configurations interleaved,
    and the fastest round kept (``notes`` keep every round): on a shared machine a slow
    round is someone else's work, not the configuration's.
    """
    out = []
    for scenario in scenarios:
        runs: dict[str, list[Measured]] = {c: [] for c in configs}
        for _ in range(rounds):
            for config in configs:
                print(f"contention: {config}, {scenario}…", file=sys.stderr, flush=True)
                runs[config].append(measure_one(config, scenario, tokens, prefill))
                print(json.dumps(asdict(runs[config][-1])), file=sys.stderr, flush=True)  # kept if cut short
        for config in configs:
            ok = [r for r in runs[config] if not r.error] or runs[config]
            best = max(ok, key=lambda r: r.decode_tok_s)
            best.prefill_tok_s = max(r.prefill_tok_s for r in ok)
            if rounds > 1:
                best.notes.append("rounds (decode/prefill tok/s): " + ", ".join(
                    f"{r.decode_tok_s:.1f}/{r.prefill_tok_s:.0f}" for r in runs[config]))
            out.append(best)
    return out


def _pct(value: float, ref: float) -> str:
    return f" ({100 * value / ref:.0f} %)" if ref else ""


def best_idle(results: list[Measured]) -> tuple[float, float]:
    """The run's best idle decode and prefill (any configuration): what percentages are of.

    A configuration that is slow idle must not look good for losing little beside other work.
    """
    idle = [r for r in results if r.scenario == "idle" and not r.error]
    return (max((r.decode_tok_s for r in idle), default=0.0), max((r.prefill_tok_s for r in idle), default=0.0))


def table(results: list[Measured]) -> str:
    configs = list(dict.fromkeys(r.config for r in results))
    by = {(r.config, r.scenario): r for r in results}
    ref_decode, ref_prefill = best_idle(results)
    header = "| situation | load avg (1 min) | " + " | ".join(
        f"{c}: decode | {c}: prefill | {c}: threads" for c in configs) + " |"
    lines = [header, "|---|---|" + "---|---|---|" * len(configs)]
    for scenario in dict.fromkeys(r.scenario for r in results):
        cells = []
        loads = []
        for config in configs:
            r = by.get((config, scenario))
            if r is None or r.error:
                cells += [f"– ({r.error if r else 'not run'})", "–", "–"]
                continue
            loads.append(r.load1)
            cells += [f"{r.decode_tok_s:.1f} tok/s{_pct(r.decode_tok_s, ref_decode)}",
                      f"{r.prefill_tok_s:.0f} tok/s{_pct(r.prefill_tok_s, ref_prefill)}",
                      str(r.threads)]
        load = " / ".join(f"{x:.1f}" for x in loads)
        lines.append(f"| {scenario} | {load} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def as_json(results: list[Measured]) -> list[dict]:
    return [asdict(r) for r in results]


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        sys.exit(0)
    print("run it through: python -m jupyter_data_agent_bench.runtime --contention", file=sys.stderr)
    sys.exit(2)
