"""ARCADE-style evaluation: multi-turn notebooks, fuzzy output matching, pass@k.

``jupyter-data-agent bench arcade --data DIR --samples N --out results/NAME``

Notebook format (``.ipynb``, nbformat 4; see ``jupyter_data_agent/bench/notebooks``):

- ``metadata.jupyter_data_agent`` = ``{"suite": ..., "title": ..., "files":
  ["titanic.csv", ...]}``: the data files the notebook reads by bare name.
  They are *not* stored with the notebook: at run time each is looked up
  under ``--data/tables/`` (then ``--data/``) and copied into the kernel's
  working directory.
- A *turn* is a code cell whose ``metadata.jupyter_data_agent`` is
  ``{"turn": n, "intent": "...", "reference": true}``; its source is the
  reference solution, which must end with an expression (or print) giving
  the turn's output.
- Every other cell (markdown, setup code that loads the data) is context.

Harness, per notebook: one fresh kernel (started in a temp dir holding the
files) is forked into a *state* copy. Context cells run in it in order. At a
turn, the prompt is built as the product would build it — the earlier cells,
earlier turns as ``# Problem: <intent>`` + their reference solution, the
schema of the DataFrames alive in the state, the new intent (ARCADE layout,
:mod:`jupyter_data_agent.prompts`) — and the strategy (``vote`` with N
samples, or ``direct``) generates candidates, each executed in its own fork
of the state; the reference then runs in the state itself (its output is the
gold output, and the state moves on to the next turn exactly as the user's
notebook would).

Scoring: a sample is right when it ran without error and its output (the
cell's last value, else its printed text) matches the reference output under
:func:`~jupyter_data_agent.search.equivalence.covers`. Per turn:
pass@k with the unbiased estimator over the N requested samples (a sample
without code counts as wrong), and self-consistency (the largest cluster of
equivalent outputs votes; errors never vote). Reported: means over turns,
overall and per notebook.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..search.values import exec_output
from .metrics import pass_at_k
from .runner_common import (
    CountingBackend,
    EventLog,
    JsonlLog,
    Workspace,
    add_model_arguments,
    cost_totals,
    fmt_s,
    load_backend,
    output_text,
    parse_csv_list,
    settings_from_args,
    write_json,
)

META_KEY = "jupyter_data_agent"
NOTEBOOK_DIR = Path(__file__).with_name("notebooks")
DEFAULT_KS = (1, 5, 10, 20, 30)


# --------------------------------------------------------------------------
# notebooks


@dataclass
class NbCell:
    cell_type: str
    source: str
    turn: int | None = None
    intent: str = ""

    @property
    def is_turn(self) -> bool:
        return self.turn is not None


@dataclass
class ArcadeNotebook:
    name: str
    path: str
    title: str
    files: list[str]
    cells: list[NbCell] = field(default_factory=list)

    @property
    def turns(self) -> list[NbCell]:
        return [c for c in self.cells if c.is_turn]


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else str(s)


def load_notebook(path: str | os.PathLike) -> ArcadeNotebook:
    import nbformat

    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    meta = dict(nb.metadata.get(META_KEY) or {})
    cells: list[NbCell] = []
    for raw in nb.cells:
        cmeta = dict((raw.get("metadata") or {}).get(META_KEY) or {})
        if raw.get("cell_type") == "code" and cmeta.get("reference"):
            cells.append(NbCell("code", _src(raw), int(cmeta.get("turn") or len(cells) + 1),
                                str(cmeta.get("intent") or "").strip()))
        elif raw.get("cell_type") in ("code", "markdown"):
            cells.append(NbCell(raw["cell_type"], _src(raw)))
    return ArcadeNotebook(name=path.stem, path=str(path), title=str(meta.get("title") or path.stem),
                          files=[str(f) for f in meta.get("files") or []], cells=cells)


def load_suite(directory: str | os.PathLike | None = None,
               names: Sequence[str] | None = None) -> list[ArcadeNotebook]:
    d = Path(directory) if directory else NOTEBOOK_DIR
    paths = sorted(d.glob("*.ipynb"))
    nbs = [load_notebook(p) for p in paths]
    if names:
        wanted = set(names)
        nbs = [nb for nb in nbs if nb.name in wanted]
        missing = wanted - {nb.name for nb in nbs}
        if missing:
            raise ValueError(f"unknown notebook(s): {', '.join(sorted(missing))}")
    return nbs


def validate(nb: ArcadeNotebook) -> list[str]:
    """Structural problems (no execution): turns without intent or code, no files..."""
    problems = []
    if not nb.files:
        problems.append("metadata lists no data files")
    if not nb.turns:
        problems.append("no turn cells")
    seen = set()
    for c in nb.turns:
        if not c.intent:
            problems.append(f"turn {c.turn} has no intent")
        if not c.source.strip():
            problems.append(f"turn {c.turn} has no reference code")
        if c.turn in seen:
            problems.append(f"turn number {c.turn} repeats")
        seen.add(c.turn)
    return problems


def resolve_file(name: str, data_dir: str | os.PathLike) -> Path:
    data = Path(data_dir)
    for cand in (data / "tables" / name, data / name):
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"data file {name!r} not found under {data}/tables or {data}")


# --------------------------------------------------------------------------
# kernel helpers


def probe_schema(state) -> str:
    """The ``# Schema of Dataframes:`` block of a state, inspected in a throwaway fork."""
    from ..kernel.schema import FrameSchema, inspection_request_code, schema_block

    child = state.fork()
    try:
        r = child.exec("print(" + inspection_request_code() + ")")
    finally:
        child.close()
    if not r.ok:
        return ""
    try:
        frames = [FrameSchema.from_dict(d) for d in json.loads(r.stream("stdout"))]
    except (ValueError, TypeError, KeyError):
        return ""
    return schema_block(frames)


def _turn_id(nb: ArcadeNotebook, turn: int) -> str:
    return f"{nb.name}-turn-{turn}"


def _context(cells: list, turns: list):
    from ..context.model import NotebookContext

    return NotebookContext(cells=list(cells), turns=list(turns))


# --------------------------------------------------------------------------
# scoring


def score_samples(outputs: Sequence[Any], oks: Sequence[bool], reference: Any, n: int,
                  ks: Sequence[int], pick: int | None) -> dict:
    """Correctness per sample, pass@k (n requested samples), and whether the
    product's own pick (``SearchResult.chosen``, index ``pick``) is right."""
    from ..search.equivalence import covers

    correct = [bool(ok) and o is not None and covers(o, reference)
               for o, ok in zip(outputs, oks)]
    c = sum(correct)
    n = max(n, len(outputs))
    pass_k = {str(k): pass_at_k(n, c, k) for k in ks if 1 <= k <= n}
    return {
        "n": n,
        "c": c,
        "correct": correct,
        "pass_at_k": pass_k,
        "sc_pick": pick,
        "sc_correct": pick is not None and correct[pick],
    }


def _short(value: Any, limit: int = 600) -> str:
    try:
        text = repr(value)
    except Exception:
        text = "<unrepresentable>"
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------
# running


@contextlib.contextmanager
def _workspace(paths: Sequence[Path], prefix: str, settings, cell_timeout: float):
    """The suite's kernel and its copies, under the product's copy policy."""
    from ..turn import TurnAsk, resolve

    limits = {**settings.snapshot_limits, "timeout_s": cell_timeout, "cpu_s": cell_timeout,
              "max_value_items": 1000}
    policy = resolve(settings.with_overrides(snapshot_limits=limits), TurnAsk(intent="-")).copies
    with Workspace(paths, prefix=prefix, policy=policy) as ws:
        if ws.root is None:
            raise RuntimeError("ARCADE runs its notebooks in kernel copies, and none may run "
                               f"here: {ws.copies.confinement.message}")
        yield ws


def run_turn(nb: ArcadeNotebook, cell: NbCell, copies, cells: list, turns: list, *,
             strategy_name: str, backend, settings, samples: int, ks: Sequence[int],
             temperature: float | None, repair: bool) -> tuple[dict, Any]:
    """Generate and score one turn through the product's pipeline; ``copies.root``
    is the notebook's state, advanced by the reference. Returns (record, reference ExecResult)."""
    state = copies.root
    from ..turn import TurnAsk, resolve, run_turn

    started = time.monotonic()
    counting = CountingBackend(backend)
    events = EventLog()
    schema = probe_schema(state)
    n = samples if strategy_name != "direct" else 1
    result, error = None, None
    try:
        spec = resolve(settings, TurnAsk(intent=cell.intent, strategy=strategy_name,
                                         samples=n if strategy_name == "vote" else None,
                                         temperature=temperature, options={"repair": repair}))
        result = run_turn(spec, _context(cells, turns), counting, schema=schema, copies=copies,
                          events=events)
    except Exception as e:  # noqa: BLE001 - e.g. no sample held code: all wrong
        error = f"{type(e).__name__}: {e}"
    gen_s = time.monotonic() - started
    ref = state.exec(cell.source)
    reference = exec_output(ref)
    cands = [c for c in (result.candidates if result else []) if not c.repaired][:n]
    chosen = result.chosen if result else None
    pick = next((i for i, c in enumerate(cands) if c is chosen), None)
    outputs = [exec_output(c.result) for c in cands]
    oks = [bool(c.result is not None and c.result.ok) for c in cands]
    scores = score_samples(outputs, oks, reference, n, ks, pick)
    record = {
        "notebook": nb.name,
        "turn": cell.turn,
        "key": f"{nb.name}#{cell.turn}",
        "intent": cell.intent,
        "strategy": strategy_name,
        "prompt": result.prompt if result else "",
        "schema": schema,
        "reference": {"code": cell.source, "ok": ref.ok, "output": _short(reference),
                      "error": None if ref.ok else f"{ref.ename}: {ref.evalue}"},
        "samples": [
            {"code": c.code, "ok": ok, "output": _short(o), "text": output_text(c.result, 1000),
             "error": None if ok or c.result is None else f"{c.result.ename}: {c.result.evalue}",
             "correct": corr}
            for c, o, ok, corr in zip(cands, outputs, oks, scores["correct"])
        ],
        "n": scores["n"],
        "n_generated": len(cands),
        "c": scores["c"],
        "pass_at_k": scores["pass_at_k"],
        "sc_correct": scores["sc_correct"],
        "sc_pick": scores["sc_pick"],
        "error": error,
        "events": events.items,
        "calls": counting.counts.to_json(),
        "model_calls": counting.counts.model_calls,
        "prompt_tokens": counting.counts.prompt_tokens,
        "completion_tokens": counting.counts.completion_tokens,
        "generation_s": round(gen_s, 3),
        "wall_time_s": round(time.monotonic() - started, 3),
        "finished": time.time(),
    }
    return record, ref


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarize_turns(records: Sequence[dict], meta: dict, ks: Sequence[int]) -> dict:
    def block(rs: Sequence[dict]) -> dict:
        kk = sorted({int(k) for r in rs for k in r.get("pass_at_k", {})})
        return {
            "turns": len(rs),
            "pass_at_k": {str(k): _mean([r["pass_at_k"][str(k)] for r in rs
                                         if str(k) in r["pass_at_k"]]) for k in kk},
            "self_consistency": _mean([1.0 if r["sc_correct"] else 0.0 for r in rs]),
            "sc_correct": sum(1 for r in rs if r["sc_correct"]),
            "any_correct": sum(1 for r in rs if r["c"] > 0),
            "samples": sum(r["n"] for r in rs),
            "correct_samples": sum(r["c"] for r in rs),
            "errors": sum(1 for r in rs if r.get("error")),
        }

    by_nb: dict[str, list[dict]] = {}
    for r in records:
        by_nb.setdefault(r["notebook"], []).append(r)
    cost = {"turns": len(records), **cost_totals(records)}
    return {"kind": "arcade", "run": meta, "summary": block(records),
            "by_notebook": {k: block(v) for k, v in sorted(by_nb.items())}, "cost": cost}


def summary_to_markdown(data: dict) -> str:
    run, s, cost = data["run"], data["summary"], data["cost"]
    ks = list(s["pass_at_k"])
    head = "| Notebook | Turns | " + " | ".join(f"pass@{k} (%)" for k in ks) + \
        " | Self-consistency (%) | Turns solved by any sample |"
    sep = "|---|---:|" + "---:|" * len(ks) + "---:|---:|"

    def row(label: str, b: dict) -> str:
        cells = " | ".join(f"{100 * b['pass_at_k'].get(k, 0.0):.2f}" for k in ks)
        return (f"| {label} | {b['turns']} | {cells} | {100 * b['self_consistency']:.2f} "
                f"({b['sc_correct']}/{b['turns']}) | {b['any_correct']} |")

    pt = cost["per_task"]
    lines = [
        f"# ARCADE-style suite: {run.get('strategy')} · {run.get('model')}",
        "",
        f"- notebooks: `{run.get('notebooks')}`; data: `{run.get('data')}`",
        f"- strategy: {run.get('strategy')}, samples n={run.get('samples')}, "
        f"temperature: {run.get('temperature')}, max_new_tokens: {run.get('max_new_tokens')}, "
        f"exemplars: {run.get('exemplars')}",
        f"- cost: {cost['model_calls']} model calls, {cost['prompt_tokens']} prompt + "
        f"{cost['completion_tokens']} completion tokens, {fmt_s(cost['wall_time_s'])} "
        f"(per turn: {pt['completion_tokens']} completion tokens, {pt['wall_time_s']} s)",
        f"- samples: {s['correct_samples']}/{s['samples']} correct",
        "",
        head,
        sep,
        row("**All**", s),
    ]
    lines += [row(k, v) for k, v in data["by_notebook"].items()]
    return "\n".join(lines) + "\n"


def run_suite(
    *,
    notebooks: Sequence[ArcadeNotebook],
    data_dir: str | os.PathLike,
    out: str | os.PathLike,
    backend,
    settings,
    strategy: str = "vote",
    samples: int = 4,
    ks: Sequence[int] = DEFAULT_KS,
    temperature: float | None = None,
    repair: bool = False,
    cell_timeout: float = 60.0,
    progress: bool = True,
    print_fn: Callable[[str], None] | None = print,
    notebooks_label: str = "",
) -> dict:
    """Run (or resume) the suite into ``out``; returns the summary dict."""
    from dataclasses import replace

    from ..context.model import Cell, Turn

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "kind": "arcade",
        "data": str(data_dir),
        "notebooks": notebooks_label or ", ".join(nb.name for nb in notebooks),
        "strategy": strategy,
        "samples": samples if strategy != "direct" else 1,
        "budget": samples if strategy != "direct" else 1,
        "ks": list(ks),
        "backend": getattr(settings, "backend", None),
        "model": getattr(backend, "model", "?"),
        "max_new_tokens": getattr(settings, "max_new_tokens", None),
        "temperature": temperature,
        "exemplars": getattr(settings, "exemplars", None),
        "repair": repair,
    }
    write_json(out / "run.json", meta)
    log = JsonlLog(out / "turns.jsonl")
    records = {r["key"]: r for r in log.read() if "key" in r}
    total = sum(len(nb.turns) for nb in notebooks)
    todo = total - sum(1 for nb in notebooks for c in nb.turns
                       if f"{nb.name}#{c.turn}" in records)
    if print_fn and todo < total:
        print_fn(f"resuming: {total - todo} of {total} turns already done in {out}")
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=todo, desc=f"arcade {strategy} n={samples}", unit="turn",
                   dynamic_ncols=True)
    files = sorted({f for nb in notebooks for f in nb.files})
    paths = [resolve_file(f, data_dir) for f in files]
    try:
        with _workspace(paths, "arcade-", settings, cell_timeout) as ws:
            for nb in notebooks:
                if all(f"{nb.name}#{c.turn}" in records for c in nb.turns):
                    continue
                state = ws.root.fork()
                cells, turns = [], []
                try:
                    for cell in nb.cells:
                        if not cell.is_turn:
                            if cell.cell_type == "code":
                                state.exec(cell.source)
                            cells.append(Cell(cell.cell_type, cell.source))
                            continue
                        key = f"{nb.name}#{cell.turn}"
                        if key in records:
                            state.exec(cell.source)
                        else:
                            rec, _ = run_turn(nb, cell, replace(ws.copies, root=state), cells, turns,
                                              strategy_name=strategy, backend=backend,
                                              settings=settings, samples=samples, ks=ks,
                                              temperature=temperature, repair=repair)
                            log.append(rec)
                            records[key] = rec
                            if bar is not None:
                                bar.update(1)
                        tid = _turn_id(nb, cell.turn)
                        cells.append(Cell("code", cell.source, turn_id=tid))
                        turns.append(Turn(intent=cell.intent, code=cell.source, status="accepted",
                                          turn_id=tid))
                finally:
                    state.close()
    finally:
        if bar is not None:
            bar.close()
    wanted = [records[f"{nb.name}#{c.turn}"] for nb in notebooks for c in nb.turns
              if f"{nb.name}#{c.turn}" in records]
    data = summarize_turns(wanted, meta, ks)
    md = summary_to_markdown(data)
    (out / "summary.md").write_text(md, encoding="utf-8")
    write_json(out / "summary.json", data)
    if print_fn:
        print_fn(md)
    return data


def verify_references(notebooks: Sequence[ArcadeNotebook], data_dir: str | os.PathLike, *,
                      cell_timeout: float = 60.0) -> list[dict]:
    """Run every notebook's context and reference cells; one row per turn with
    whether the reference ran and produced an output."""
    from ..config import resolve_settings

    rows = []
    files = sorted({f for nb in notebooks for f in nb.files})
    paths = [resolve_file(f, data_dir) for f in files]
    with _workspace(paths, "arcade-verify-", resolve_settings(), cell_timeout) as ws:
        for nb in notebooks:
            state = ws.root.fork()
            try:
                for cell in nb.cells:
                    if cell.cell_type != "code":
                        continue
                    r = state.exec(cell.source)
                    if not cell.is_turn:
                        if not r.ok:
                            rows.append({"notebook": nb.name, "turn": None, "ok": False,
                                         "has_output": False,
                                         "error": f"setup: {r.ename}: {r.evalue}"})
                        continue
                    value = exec_output(r)
                    rows.append({
                        "notebook": nb.name, "turn": cell.turn, "ok": r.ok,
                        "has_output": value is not None,
                        "type": r.value.type if r.value is not None else ("stdout" if value else None),
                        "error": None if r.ok else f"{r.ename}: {r.evalue}",
                        "output": _short(value, 200),
                        "seconds": round(r.duration_s, 3),
                    })
            finally:
                state.close()
    return rows


# --------------------------------------------------------------------------
# CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True,
                   help="Folder with the data files (DABench folder: files under tables/).")
    p.add_argument("--out", default=None, help="Result folder, e.g. results/arcade-vote (resumable).")
    p.add_argument("--notebooks", default=None,
                   help=f"Folder of ARCADE-format notebooks (default: the built-in suite, {NOTEBOOK_DIR}).")
    p.add_argument("--only", nargs="+", default=None, help="Only these notebooks (file stems).")
    p.add_argument("--strategy", choices=("vote", "direct"), default="vote",
                   help="vote: N samples (pass@k, self-consistency); direct: one sample.")
    p.add_argument("--samples", "-n", type=int, default=4, help="Samples per turn (default 4).")
    p.add_argument("--k", default=None, help="pass@k values, comma separated (default 1,5,10,20,30 up to n).")
    p.add_argument("--repair", action="store_true", help="Let the strategy repair failing samples "
                   "(repaired cells are not scored).")
    p.add_argument("--cell-timeout", type=float, default=60.0, help="Limit per executed cell (s).")
    p.add_argument("--verify", action="store_true",
                   help="Only run the reference solutions and check each gives an output (no model).")
    p.add_argument("--no-progress", action="store_true", help="No progress bar.")
    add_model_arguments(p)


def main(args: argparse.Namespace) -> int:
    notebooks = load_suite(args.notebooks, parse_csv_list(args.only) or None)
    if not notebooks:
        print("no notebooks found")
        return 1
    bad = {nb.name: validate(nb) for nb in notebooks}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        for name, problems in bad.items():
            print(f"{name}: {'; '.join(problems)}")
        return 1
    if args.verify:
        rows = verify_references(notebooks, args.data, cell_timeout=args.cell_timeout)
        print("| Notebook | Turn | Ran | Output | Type | Seconds |")
        print("|---|---:|---|---|---|---:|")
        for r in rows:
            print(f"| {r['notebook']} | {r['turn']} | {'yes' if r['ok'] else 'NO: ' + str(r['error'])} "
                  f"| {'yes' if r['has_output'] else 'NO'} | {r.get('type')} | {r.get('seconds', '')} |")
        failed = [r for r in rows if not (r["ok"] and r["has_output"])]
        print(f"\n{len(rows) - len(failed)}/{len(rows)} references ran and produced an output.")
        if args.out:
            write_json(Path(args.out) / "verify.json", rows)
        return 1 if failed else 0
    if not args.out:
        print("--out is required (unless --verify)")
        return 2
    n = args.samples if args.strategy != "direct" else 1
    ks = [int(k) for k in parse_csv_list(args.k)] or [k for k in DEFAULT_KS if k <= n]
    settings = settings_from_args(args)
    backend = load_backend(settings, args.torch_threads)
    run_suite(notebooks=notebooks, data_dir=args.data, out=args.out, backend=backend,
              settings=settings, strategy=args.strategy, samples=n, ks=ks,
              temperature=args.temperature, repair=args.repair, cell_timeout=args.cell_timeout,
              progress=not args.no_progress,
              notebooks_label=str(args.notebooks or "built-in suite"))
    return 0
