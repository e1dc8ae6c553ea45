"""Model runtime: the embedded GGUF through llama.cpp and through transformers, side by side.

    python -m jupyter_data_agent_bench.runtime [--runtimes llamacpp,transformers]
        [--new-tokens 128] [--prefill-tokens 2000] [--steps 5] [--threads N] [--json F]
        [--mcts] [--data DIR] [--task 683] [--rss]

For each available runtime, on the same prompts (the product's ARCADE prompt
with its few-shot exemplars), greedy decoding:

* load: building the backend and loading the weights (cold, caches cleared);
* time to first token: ``stream()`` on a new prompt, and warm on a ~2k-token
  prompt whose first ~90 % (the exemplars and notebook) was the previous
  request's prompt;
* decode tok/s: streamed tokens after the first over the time they took;
* prefill tok/s: a ~2k-token prompt, nothing cached, one new token;
* a ReAct-like trajectory: each step's prompt is the previous prompt plus the
  previous completion and an observation; prompt tokens evaluated vs reused
  from the KV cache (transformers re-evaluates every prompt), and wall time.

Both runtimes get the same threads: llama.cpp ``n_threads`` and torch's
``set_num_threads`` are set to the physical cores (or ``--threads``). The
table ends with the ratio llama.cpp / transformers (for times,
transformers / llama.cpp: higher is better for llama.cpp).

``--mcts``: a 2-iteration mcts turn end to end with each runtime, through the
product's pipeline (``bench.dabench.run_task``: a fresh kernel in a private
directory with the task's table, ``turn.resolve`` and ``turn.run_turn``) on
one DABench task (``--data``, default ``tests/data/dabench``; ``--task``,
default 683), 64 new tokens per call: wall time, model calls, prompt tokens
evaluated vs reused from the KV cache.

``--contention``: the embedded model on a busy machine (:mod:`.contention`):
decode and prefill idle, beside a numpy matmul loop, beside a second model
and beside 4 kernel copies computing, old default vs new, side by side.
``--runtimes none`` skips the rows above.

``--second-turn`` and ``--agent-turn`` (:mod:`.first_token`): through a real
Jupyter server with the embedded model, the second sidebar turn's time to
first token with and without ``POST warm``, and kernel start + one
``%%agent`` turn, idle and beside a numpy matmul loop.

``--rss``: memory with 3 notebooks. A model service (what the server
extension runs, :class:`~..server.model_service.ModelService`, with the
configured settings: the embedded GGUF through llama.cpp by default) in a
process of its own, 3 real kernels with its address, each running
``%load_ext jupyter_data_agent`` and a ``%%agent --no-exec`` question; then
the RSS of the service and of each kernel, and of one kernel that loaded the
model itself (``JUPYTER_DATA_AGENT_MODEL_SOCKET=`` empty).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyter_data_agent.config import Settings, llamacpp_available
from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.llm.base import Backend, Prompt, SamplingParams
from jupyter_data_agent.prompts.arcade import build_prompt

INTENT = "What is the mean temperature per city, sorted from the warmest?"
FILLER_CELL = (
    "# In[{i}]:\n"
    "sales_{i} = df[df['region'] == 'r{i}'].groupby('month')['amount'].agg(['sum', 'mean', 'count'])\n"
    "sales_{i}['share'] = sales_{i}['sum'] / sales_{i}['sum'].sum()\n"
    "sales_{i}.sort_values('share', ascending=False).head({k})\n"
)
OBSERVATION = "\n# Observation: step {step} ran; df has 1000 rows and 2 columns (city, temp).\n# Step {next}:"


@dataclass
class RuntimeResult:
    runtime: str
    available: bool = True
    error: str = ""
    threads: int = 0
    load_s: float = 0.0
    ttft_s: float = 0.0
    ttft_warm_2k_s: float = 0.0
    decode_tok_s: float = 0.0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    prefill_tok_s: float = 0.0
    trajectory_steps: int = 0
    trajectory_evaluated: int = 0
    trajectory_reused: int = 0
    trajectory_generated: int = 0
    trajectory_wall_s: float = 0.0
    mcts_wall_s: float = 0.0
    mcts_iterations: int = 0
    mcts_model_calls: int = 0
    mcts_evaluated: int = 0
    mcts_reused: int = 0
    mcts_generated: int = 0
    mcts_error: str = ""
    notes: list[str] = field(default_factory=list)


def physical_threads(requested: int | None) -> int:
    from jupyter_data_agent.llm.cores import usable_cores

    return requested if requested and requested > 0 else usable_cores()


def base_prompt() -> str:
    """The product's completion prompt for a fresh notebook: exemplars, then the problem."""
    built = build_prompt(NotebookContext(), INTENT, exemplars=True)
    return built.prompt.text or ""


def long_prompt(count_tokens, base: str, target: int) -> str:
    """``base``'s exemplars and problem behind notebook cells, about ``target`` tokens."""
    cells: list[str] = []
    i = 0
    while count_tokens("\n".join(cells) + "\n" + base) < target:
        i += 1
        cells.append(FILLER_CELL.format(i=i, k=i % 9 + 1))
    return "\n".join(cells) + "\n" + base


def build_backend(runtime: str, threads: int) -> Backend:
    settings = Settings(backend=runtime, threads=threads, device="cpu", max_new_tokens=512)
    if runtime == "llamacpp":
        from jupyter_data_agent.llm.llamacpp_backend import LlamaCppBackend, clear_model_cache

        clear_model_cache()
        return LlamaCppBackend(settings, load=True)
    from jupyter_data_agent.llm import transformers_backend as tb

    tb.clear_model_cache()
    return tb.TransformersBackend(settings, load=True)


def reset_cache(backend: Backend) -> None:
    """Forget llama.cpp's KV cache so the next prompt is evaluated from scratch."""
    load = getattr(backend, "load", None)
    llm = getattr(load(), "llm", None) if callable(load) else None
    if llm is not None:
        llm.reset()


def timed_stream(backend: Backend, prompt: Prompt, params: SamplingParams) -> tuple[float, float, int]:
    """(time to first token, total time, generated tokens) of one streamed completion.

    llama.cpp yields "" after each batch of prompt tokens (a point to cancel at):
    those are not tokens, and the first token comes after the whole prompt.
    """
    start = time.perf_counter()
    first = 0.0
    text = ""
    for delta in backend.stream(prompt, params):
        if delta and not first:
            first = time.perf_counter() - start
        text += delta
    total = time.perf_counter() - start
    return first or total, total, backend.count_tokens(text)


def measure(runtime: str, args: argparse.Namespace, base: str, prompts: dict) -> RuntimeResult:
    result = RuntimeResult(runtime)
    threads = physical_threads(args.threads)
    result.threads = threads
    try:
        start = time.perf_counter()
        backend = build_backend(runtime, threads)
        result.load_s = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 -- not installed, weights missing: reported, not fatal
        result.available, result.error = False, f"{type(exc).__name__}: {exc}"
        return result
    count = backend.count_tokens
    if "long" not in prompts:
        prompts["long"] = long_prompt(count, base, args.prefill_tokens)
    greedy = SamplingParams(max_tokens=args.new_tokens, temperature=0.0)

    # Time to first token and decode speed on the product prompt, nothing cached.
    reset_cache(backend)
    first, total, tokens = timed_stream(backend, Prompt(text=base), greedy)
    result.ttft_s = first
    result.decode_tokens = tokens
    result.decode_tok_s = (tokens - 1) / (total - first) if tokens > 1 and total > first else 0.0

    # Prefill: the ~2k-token prompt from scratch, one new token.
    reset_cache(backend)
    long_text = prompts["long"]
    start = time.perf_counter()
    out = backend.generate(Prompt(text=long_text), SamplingParams(max_tokens=1))[0]
    elapsed = time.perf_counter() - start
    result.prefill_tokens = out.prompt_tokens
    result.prefill_tok_s = out.prompt_tokens / elapsed

    # Warm time to first token: the same notebook and exemplars, a new question at the end.
    warm = long_text.replace(INTENT, "Which city has the most rows? Show the top 3 with their counts.")
    first, _, _ = timed_stream(backend, Prompt(text=warm), SamplingParams(max_tokens=8))
    result.ttft_warm_2k_s = first

    # ReAct-like trajectory: each prompt extends the previous one.
    reset_cache(backend)
    text = base
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        c = backend.generate(Prompt(text=text), SamplingParams(max_tokens=args.new_tokens, stop=("# Step",)))[0]
        result.trajectory_evaluated += c.prompt_tokens - c.cached_tokens
        result.trajectory_reused += c.cached_tokens
        result.trajectory_generated += c.completion_tokens
        text += c.text + OBSERVATION.format(step=step, next=step + 1)
    result.trajectory_wall_s = time.perf_counter() - start
    result.trajectory_steps = args.steps
    if args.mcts:
        measure_mcts(runtime, backend, threads, args, result)
    backend.close()
    return result


DEFAULT_DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "dabench"


def measure_mcts(runtime: str, backend: Backend, threads: int, args: argparse.Namespace,
                 result: RuntimeResult) -> None:
    """A 2-iteration mcts turn on one DABench task, end to end, as ``bench.dabench`` runs it."""
    from .dabench import load_tasks, run_task

    try:
        tasks, labels = load_tasks(args.data)
        task = next(t for t in tasks if str(t["id"]) == str(args.task))
    except (OSError, StopIteration) as exc:
        result.mcts_error = f"task {args.task} not found in {args.data}: {exc}"
        return
    settings = Settings(backend=runtime, threads=threads, device="cpu", max_new_tokens=64)
    reset_cache(backend)
    start = time.perf_counter()
    rec = run_task(task, labels.get(task["id"], []), strategy_name="mcts", backend=backend,
                   settings=settings, tables_dir=Path(args.data) / "tables", budget=2)
    result.mcts_wall_s = time.perf_counter() - start
    stats = rec.get("stats") or {}
    if rec.get("error"):
        result.mcts_error = rec["error"]
    result.mcts_iterations = int(stats.get("iterations") or 0)
    result.mcts_model_calls = int(rec.get("model_calls") or stats.get("model_calls") or 0)
    prompt = int(stats.get("prompt_tokens") or 0)
    result.mcts_reused = int(stats.get("reused_tokens") or 0)
    # prompt_tokens counts a call's prompt once, reused_tokens every sample's reuse:
    # kept apart (mcts_evaluated + mcts_reused is SearchStats.prompt_tokens).
    result.mcts_evaluated = prompt - result.mcts_reused
    result.mcts_generated = int(stats.get("completion_tokens") or 0)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}×" if a and b else "–"


def table(results: list[RuntimeResult]) -> str:
    ok = [r for r in results if r.available]
    names = [r.runtime for r in ok]
    header = "| | " + " | ".join(names) + (" | llama.cpp vs transformers |" if len(ok) == 2 else " |")
    lines = [header, "|---" * (len(ok) + 1 + (len(ok) == 2)) + "|"]
    by = {r.runtime: r for r in ok}

    def row(label: str, fmt, value, higher_better: bool) -> None:
        cells = [fmt(value(r)) for r in ok]
        if len(ok) == 2 and "llamacpp" in by and "transformers" in by:
            a, b = value(by["llamacpp"]), value(by["transformers"])
            cells.append(_ratio(a, b) if higher_better else _ratio(b, a))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("threads", str, lambda r: r.threads, True)
    row("load (cold)", lambda v: f"{v:.2f} s", lambda r: r.load_s, False)
    row("time to first token (new prompt)", lambda v: f"{v:.2f} s", lambda r: r.ttft_s, False)
    row(f"time to first token, ~{ok[0].prefill_tokens if ok else 0}-token prompt, prefix cached",
        lambda v: f"{v:.2f} s", lambda r: r.ttft_warm_2k_s, False)
    row("decode", lambda v: f"{v:.1f} tok/s", lambda r: r.decode_tok_s, True)
    row(f"prefill ({ok[0].prefill_tokens if ok else 0} tokens, nothing cached)", lambda v: f"{v:.0f} tok/s",
        lambda r: r.prefill_tok_s, True)
    steps = ok[0].trajectory_steps if ok else 0
    lines.append(f"| **{steps}-step ReAct trajectory** |" + " |" * (len(ok) + (len(ok) == 2)))
    row("prompt tokens evaluated", str, lambda r: r.trajectory_evaluated, False)
    row("prompt tokens reused (KV cache)", str, lambda r: r.trajectory_reused, True)
    row("tokens generated", str, lambda r: r.trajectory_generated, True)
    row("wall time", lambda v: f"{v:.1f} s", lambda r: r.trajectory_wall_s, False)
    if any(r.mcts_wall_s for r in ok):
        lines.append("| **2-iteration mcts turn (DABench task, end to end)** |"
                     + " |" * (len(ok) + (len(ok) == 2)))
        row("iterations", str, lambda r: r.mcts_iterations, True)
        row("model calls", str, lambda r: r.mcts_model_calls, True)
        row("prompt tokens (SearchStats.prompt_tokens, once per call)", str,
            lambda r: r.mcts_evaluated + r.mcts_reused, True)
        row("prompt tokens reused (SearchStats.reused_tokens, every sample)", str,
            lambda r: r.mcts_reused, True)
        row("tokens generated", str, lambda r: r.mcts_generated, True)
        row("wall time (kernel start to answer)", lambda v: f"{v:.1f} s", lambda r: r.mcts_wall_s, False)
        row("wall time per generated token", lambda v: f"{v * 1000:.0f} ms",
            lambda r: r.mcts_wall_s / r.mcts_generated if r.mcts_generated else 0.0, False)
        row("a new user's first mcts turn (load + turn)", lambda v: f"{v:.1f} s",
            lambda r: r.load_s + r.mcts_wall_s, False)
    for r in results:
        if r.mcts_error:
            lines.append(f"\n{r.runtime} mcts: {r.mcts_error}")
        if not r.available:
            lines.append(f"\n{r.runtime}: not measured ({r.error})")
    return "\n".join(lines)


SERVICE_SCRIPT = """
import sys, time
from jupyter_data_agent.config import resolve_settings
from jupyter_data_agent.server.model_service import ModelService
svc = ModelService(resolve_settings())
svc.start(export_env=False)
print(svc.socket_path, svc.token, flush=True)
sys.stdin.read()
svc.stop()
"""
RSS_QUESTION = "%%agent --no-exec\nWhat is the mean of column a?"
RSS_SETUP = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\n%load_ext jupyter_data_agent"


def _mib(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def _kernel_pid(kc) -> int:
    msg_id = kc.execute("import os; print(os.getpid())")
    pid = ""
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            pid += msg["content"]["text"]
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return int(pid.strip())


def _ask(kc, code: str, timeout: float = 300.0) -> str:
    """Run ``code``; '' when it ran, else the error."""
    reply = kc.execute(code, reply=True, timeout=timeout)
    content = reply["content"]
    return "" if content["status"] == "ok" else f"{content.get('ename')}: {content.get('evalue')}"


def measure_rss(threads: int) -> list[tuple[str, float, str]]:
    """(process, RSS MiB, note) with 3 notebooks on one model service, and one kernel without it."""
    from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
    from jupyter_data_agent.llm.remote_backend import ENV_SOCKET, ENV_TOKEN

    env = {**os.environ, "JUPYTER_DATA_AGENT_THREADS": str(threads)}
    service = subprocess.Popen([sys.executable, "-c", SERVICE_SCRIPT], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=env)
    rows: list[tuple[str, float, str]] = []
    kernels = []
    try:
        socket_path, token = service.stdout.readline().split()
        rows.append(("model service (idle, before any request)", _mib(service.pid), ""))
        kenv = {ENV_SOCKET: socket_path, ENV_TOKEN: token, "JUPYTER_DATA_AGENT_THREADS": str(threads)}
        for _ in range(3):
            kernels.append(start_kernel(kenv))
        notes = []
        for _, kc in kernels:
            err = _ask(kc, RSS_SETUP) or _ask(kc, RSS_QUESTION)
            notes.append(err)
        total = _mib(service.pid)
        rows.append(("model service (after 3 `%%agent` turns)", total, "one copy of the weights"))
        for i, (_, kc) in enumerate(kernels):
            pid = _kernel_pid(kc)
            rss = _mib(pid)
            total += rss
            rows.append((f"kernel {i + 1} (remote model)", rss, notes[i]))
        rows.append(("**total, 3 notebooks + service**", total, ""))
    finally:
        for km, kc in kernels:
            stop_kernel(km, kc)
        if service.stdin:
            service.stdin.close()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
    # For comparison: a kernel that loads the model itself.
    km, kc = start_kernel({ENV_SOCKET: "", ENV_TOKEN: "", "JUPYTER_DATA_AGENT_THREADS": str(threads)})
    try:
        err = _ask(kc, RSS_SETUP) or _ask(kc, RSS_QUESTION)
        rss = _mib(_kernel_pid(kc))
        rows.append(("kernel with the model in-process (no service)", rss, err))
        rows.append(("3 such kernels (estimate: 3 ×)", 3 * rss, ""))
    finally:
        stop_kernel(km, kc)
    return rows


def rss_table(rows: list[tuple[str, float, str]]) -> str:
    lines = ["| process | RSS | note |", "|---|---|---|"]
    lines += [f"| {name} | {mib:.0f} MiB | {note} |" for name, mib, note in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_data_agent_bench.runtime", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", default="llamacpp,transformers",
                        help="comma-separated: llamacpp, transformers (default: both)")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens per completion (default 128)")
    parser.add_argument("--prefill-tokens", type=int, default=2000, help="size of the long prompt (default 2000)")
    parser.add_argument("--steps", type=int, default=5, help="steps of the ReAct trajectory (default 5)")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for both runtimes (default: physical cores)")
    parser.add_argument("--json", default="", help="also write the results to this JSON file")
    parser.add_argument("--mcts", action="store_true",
                        help="also run a 2-iteration mcts turn end to end on a DABench task")
    parser.add_argument("--data", default=str(DEFAULT_DATA),
                        help="DABench folder for --mcts (default: tests/data/dabench)")
    parser.add_argument("--task", default="683", help="DABench task id for --mcts (default 683)")
    parser.add_argument("--contention", action="store_true",
                        help="also measure the embedded model beside other work (see .contention)")
    parser.add_argument("--contention-configs", default="old,new",
                        help="configurations for --contention (contention.CONFIGS): old, passive, new, "
                             "1-thread, 2-passive, 2-bounded, free-spin, free-spin1k, free-spin100k")
    parser.add_argument("--contention-tokens", type=int, default=48, help="decoded tokens per measurement")
    parser.add_argument("--contention-prefill", type=int, default=600, help="prefill prompt tokens")
    parser.add_argument("--contention-rounds", type=int, default=1,
                        help="measure each cell this many times, interleaved, and keep the fastest")
    parser.add_argument("--contention-scenarios",
                        default=",".join(("idle", "matmul", "kernel-matmul", "second model", "copies")),
                        help="comma-separated subset of: idle, matmul, kernel-matmul (the loop in a real "
                             "kernel, in a session of its own), second model, copies")
    parser.add_argument("--second-turn", action="store_true",
                        help="also time the second sidebar turn's first token through a real server (.first_token)")
    parser.add_argument("--second-turn-rounds", type=int, default=3, help="rounds of each variant (default 3)")
    parser.add_argument("--agent-turn", action="store_true",
                        help="also time kernel start + one %%%%agent turn, idle and beside a matmul loop")
    parser.add_argument("--rss", action="store_true",
                        help="also measure RSS with 3 notebooks on one model service")
    args = parser.parse_args(argv)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip() and r.strip() != "none"]
    unknown = set(runtimes) - {"llamacpp", "transformers"}
    if unknown:
        parser.error(f"unknown runtime(s): {', '.join(sorted(unknown))}")
    if "llamacpp" in runtimes and not llamacpp_available():
        print("llama-cpp-python is not installed: pip install 'jupyter_data_agent[llamacpp]'", file=sys.stderr)
    base = base_prompt()
    prompts: dict[str, str] = {}
    results = []
    for runtime in runtimes:
        print(f"measuring {runtime}…", file=sys.stderr, flush=True)
        results.append(measure(runtime, args, base, prompts))
    if results:
        print(f"Embedded SmolLM2-135M-Instruct Q4_1 GGUF, greedy, {args.new_tokens} new tokens per completion, "
              f"threads = {physical_threads(args.threads)} for both runtimes.\n")
        print(table(results))
    contended: list = []
    if args.contention:
        from . import contention

        configs = [c.strip() for c in args.contention_configs.split(",") if c.strip()]
        bad = set(configs) - set(contention.CONFIGS)
        if bad:
            parser.error(f"unknown --contention-configs: {', '.join(sorted(bad))}")
        names = {"copies": "4 copies computing", "kernel-matmul": "matmul in a kernel"}
        scenarios = tuple(names.get(x.strip(), x.strip()) for x in args.contention_scenarios.split(",") if x.strip())
        if set(scenarios) - set(contention.SCENARIOS):
            parser.error(f"unknown --contention-scenarios: {args.contention_scenarios}")
        contended = contention.measure(configs, args.contention_tokens, args.contention_prefill, scenarios,
                                       args.contention_rounds)
        print(f"\nThe embedded model beside other work ({os.cpu_count()} cores; {args.contention_tokens} "
              f"tokens decoded, a {contended[0].prefill_tokens if contended else 0}-token prefill; "
              f"autogroup scheduling {contention.autogroup()}; "
              "% of the run's best idle figure, any configuration):\n")
        print(contention.table(contended))
    seconds: list = []
    agents: list = []
    if args.second_turn or args.agent_turn:
        from . import first_token

        def log(m: str) -> None:
            print(m, file=sys.stderr, flush=True)

        if args.second_turn:
            seconds = first_token.measure_second_turn(args.second_turn_rounds, log=log)
            print("\nSecond sidebar turn in the same notebook (real server, embedded model, direct; "
                  f"load avg at the end {os.getloadavg()[0]:.1f}):\n")
            print(first_token.second_turn_table(seconds))
        if args.agent_turn:
            for situation in ("idle", "matmul"):
                agents.append(first_token.agent_turn(situation))
                log(json.dumps(asdict(agents[-1])))
            print("\nKernel start + one embedded `%%agent` turn (a fresh server each):\n")
            print(first_token.agent_turn_table(agents))
    rss: list[tuple[str, float, str]] = []
    if args.rss:
        print("measuring RSS with 3 notebooks…", file=sys.stderr, flush=True)
        rss = measure_rss(physical_threads(args.threads))
        print("\nRSS with 3 notebooks (one model service, the configured backend):\n")
        print(rss_table(rss))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runtimes": [asdict(r) for r in results],
                       "contention": [asdict(r) for r in contended],
                       "second_turn": [asdict(r) for r in seconds],
                       "agent_turn": [asdict(r) for r in agents],
                       "rss_mib": [{"process": n, "rss_mib": round(m, 1), "note": x} for n, m, x in rss]},
                      f, indent=2)
    return 0 if any(r.available for r in results) or contended or seconds or agents else 1


if __name__ == "__main__":
    sys.exit(main())
