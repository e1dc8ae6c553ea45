"""ARCADE-style evaluation: multi-turn notebooks, fuzzy output matching, pass@k.

``jupyter-data-agent-bench arcade --data DIR --samples N --out results/NAME``

Notebook format (``.ipynb``, nbformat 4; see ``bench/jupyter_data_agent_bench/notebooks``
and docs/benchmarks.md): ``metadata.jupyter_data_agent.files`` lists the data
files the notebook reads by bare name, copied at run time from ``--data/tables/``
(then ``--data/``); a *turn* is a code cell whose ``metadata.jupyter_data_agent``
is ``{"turn": n, "intent": "...", "reference": true}`` and whose source is the
reference solution; every other cell is context.

Harness, per notebook: one fresh kernel is forked into a *state* copy where
the context cells run. At a turn the product's pipeline (``turn.resolve`` ->
``turn.run_turn``) builds the prompt from the earlier cells and turns and the
schema of the state's DataFrames, and the strategy's candidates run in forks
of the state; the reference then runs in the state itself (the gold output,
and the state moves on as the user's notebook would).

Scoring: a sample is right when it ran and its output (last value, else
printed text) matches the reference under
:func:`~jupyter_data_agent.search.equivalence.covers`. Per turn: unbiased
pass@k over the N requested samples (a sample without code counts as wrong)
and whether the product's own pick is right; means over turns, overall and
per notebook.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jupyter_data_agent.context.notebook import short_repr
from jupyter_data_agent.kernel.results import truncate_text
from jupyter_data_agent.search.equivalence import exec_output
from jupyter_data_agent.turn.copies import Copies

from .metrics import pass_at_k
from .runner_common import (
    Meter,
    RunFolder,
    Workspace,
    add_common_arguments,
    bench_settings,
    cost_line,
    cost_totals,
    load_backend,
    only,
    parse_csv_list,
    progress_bar,
    run_meta,
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


def load_notebook(path: str | os.PathLike) -> ArcadeNotebook:
    import nbformat

    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    meta = dict(nb.metadata.get(META_KEY) or {})
    cells: list[NbCell] = []
    for raw in nb.cells:
        cmeta = dict((raw.get("metadata") or {}).get(META_KEY) or {})
        if raw.get("cell_type") == "code" and cmeta.get("reference"):
            cells.append(NbCell("code", raw.source, int(cmeta.get("turn") or len(cells) + 1),
                                str(cmeta.get("intent") or "").strip()))
        elif raw.get("cell_type") in ("code", "markdown"):
            cells.append(NbCell(raw.cell_type, raw.source))
    return ArcadeNotebook(name=path.stem, path=str(path), title=str(meta.get("title") or path.stem),
                          files=[str(f) for f in meta.get("files") or []], cells=cells)


def load_suite(directory: str | os.PathLike | None = None,
               names: Sequence[str] | None = None) -> list[ArcadeNotebook]:
    nbs = [load_notebook(p) for p in sorted(Path(directory or NOTEBOOK_DIR).glob("*.ipynb"))]
    return only(nbs, names, lambda nb: nb.name, "notebook")


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
# kernels


def probe_schema(state) -> str:
    """The ``# Schema of Dataframes:`` block of a state, inspected in a throwaway fork."""
    from jupyter_data_agent.kernel.inkernel.schema import FrameSchema, inspection_request_code, schema_block

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


def notebook_states(notebooks: Sequence[ArcadeNotebook], data_dir: str | os.PathLike, settings,
                    cell_timeout: float, prefix: str) -> Iterator[tuple[ArcadeNotebook, Copies]]:
    """Each notebook with its own *state*: a fork of one fresh kernel holding every
    notebook's files, as the ``root`` of the kernel copies (the product's copy policy)."""
    from jupyter_data_agent.turn import TurnAsk, resolve

    if not notebooks:  # nothing left to run: no kernel
        return
    paths = [resolve_file(f, data_dir) for f in sorted({f for nb in notebooks for f in nb.files})]
    settings = bench_settings(settings, cell_timeout, max_value_items=1000)
    policy = resolve(settings, TurnAsk(intent="-")).copies
    with Workspace(paths, prefix=prefix, policy=policy) as ws:
        if ws.copies is None or ws.copies.executor is None:
            raise RuntimeError("ARCADE runs its notebooks in kernel copies, and none may run "
                               f"here: {ws.copies.confinement.message if ws.copies else ''}")
        for nb in notebooks:
            state = ws.copies.executor.fork()
            try:
                yield nb, replace(ws.copies, root=state)
            finally:
                state.close()


# --------------------------------------------------------------------------
# scoring


def score_samples(outputs: Sequence[Any], oks: Sequence[bool], reference: Any, n: int,
                  ks: Sequence[int], pick: int | None) -> dict:
    """Correctness per sample, pass@k (n requested samples), and whether the
    product's own pick (``SearchResult.chosen``, index ``pick``) is right."""
    from jupyter_data_agent.search.equivalence import covers

    correct = [bool(ok) and o is not None and covers(o, reference)
               for o, ok in zip(outputs, oks)]
    c = sum(correct)
    n = max(n, len(outputs))
    pass_k = {str(k): pass_at_k(n, c, k) for k in ks if 1 <= k <= n}
    return {"n": n, "c": c, "correct": correct, "pass_at_k": pass_k, "sc_pick": pick,
            "sc_correct": pick is not None and correct[pick]}


def _error(r) -> str | None:
    return None if r is None or r.ok else f"{r.ename}: {r.evalue}"


# --------------------------------------------------------------------------
# running


def run_turn(nb: ArcadeNotebook, cell: NbCell, copies: Copies, context, *, strategy_name: str,
             backend, settings, samples: int, ks: Sequence[int], temperature: float | None,
             repair: bool) -> dict:
    """Generate and score one turn through the product's pipeline; ``copies.root``
    is the notebook's state, advanced by the reference. Returns the turn's record."""
    from jupyter_data_agent.turn import TurnAsk, resolve, run_turn

    meter = Meter(backend)
    state = copies.root
    schema = probe_schema(state)
    n = samples if strategy_name != "direct" else 1
    result, error = None, None
    try:
        spec = resolve(settings, TurnAsk(intent=cell.intent, strategy=strategy_name,
                                         samples=n if strategy_name == "vote" else None,
                                         temperature=temperature, options={"repair": repair}))
        result = run_turn(spec, context, meter.backend, schema=schema, copies=copies,
                          events=meter.events)
    except Exception as e:  # noqa: BLE001 - e.g. no sample held code: all wrong
        error = f"{type(e).__name__}: {e}"
    gen_s = meter.elapsed()
    ref = state.exec(cell.source)
    reference = exec_output(ref)
    cands = [c for c in (result.candidates if result else []) if not c.repaired][:n]
    chosen = result.chosen if result else None
    pick = next((i for i, c in enumerate(cands) if c is chosen), None)
    outputs = [exec_output(c.result) for c in cands]
    oks = [bool(c.result is not None and c.result.ok) for c in cands]
    scores = score_samples(outputs, oks, reference, n, ks, pick)
    return {
        "notebook": nb.name,
        "turn": cell.turn,
        "key": f"{nb.name}#{cell.turn}",
        "intent": cell.intent,
        "strategy": strategy_name,
        "prompt": result.prompt if result else "",
        "schema": schema,
        "reference": {"code": cell.source, "ok": ref.ok, "output": short_repr(reference, 600),
                      "error": _error(ref)},
        "samples": [
            {"code": c.code, "ok": ok, "output": short_repr(o, 600),
             "error": None if ok else _error(c.result),
             "text": truncate_text(c.result.text(), 1000)[0] if c.result is not None else "",
             "correct": corr}
            for c, o, ok, corr in zip(cands, outputs, oks, scores["correct"])
        ],
        **{k: scores[k] for k in ("n", "c", "pass_at_k", "sc_correct", "sc_pick")},
        "n_generated": len(cands),
        "error": error,
        "generation_s": gen_s,
        **meter.fields(),
    }


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarize_turns(records: Sequence[dict], meta: dict) -> dict:
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
    run, s = data["run"], data["summary"]
    ks = list(s["pass_at_k"])
    head = "| Notebook | Turns | " + " | ".join(f"pass@{k} (%)" for k in ks) + \
        " | Self-consistency (%) | Turns solved by any sample |"
    sep = "|---|---:|" + "---:|" * len(ks) + "---:|---:|"

    def row(label: str, b: dict) -> str:
        cells = " | ".join(f"{100 * b['pass_at_k'].get(k, 0.0):.2f}" for k in ks)
        return (f"| {label} | {b['turns']} | {cells} | {100 * b['self_consistency']:.2f} "
                f"({b['sc_correct']}/{b['turns']}) | {b['any_correct']} |")

    lines = [
        f"# ARCADE-style suite: {run.get('strategy')} · {run.get('model')}",
        "",
        f"- notebooks: `{run.get('notebooks')}`; data: `{run.get('data')}`",
        f"- strategy: {run.get('strategy')}, samples n={run.get('samples')}, "
        f"temperature: {run.get('temperature')}, max_new_tokens: {run.get('max_new_tokens')}, "
        f"exemplars: {run.get('exemplars')}",
        cost_line(data["cost"], "turn"),
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
    from jupyter_data_agent.context.model import Cell, NotebookContext, Turn

    n = samples if strategy != "direct" else 1
    folder = RunFolder(out, "turns.jsonl", "key")
    records = folder.records
    keys = [f"{nb.name}#{c.turn}" for nb in notebooks for c in nb.turns]
    todo = sum(1 for k in keys if k not in records)
    meta = run_meta("arcade", settings, getattr(backend, "model", "?"), data=str(data_dir),
                    notebooks=notebooks_label or ", ".join(nb.name for nb in notebooks),
                    strategy=strategy, samples=n, budget=n, ks=list(ks), temperature=temperature,
                    repair=repair)
    folder.start(meta, len(keys), todo, "turn", print_fn)
    left = [nb for nb in notebooks if any(f"{nb.name}#{c.turn}" not in records for c in nb.turns)]
    states = notebook_states(left, data_dir, settings, cell_timeout, "arcade-")
    with (progress_bar(todo, f"arcade {strategy} n={samples}", "turn", progress) as tick,
          contextlib.closing(states)):
        for nb, copies in states:
            cells: list[Cell] = []
            turns: list[Turn] = []
            for cell in nb.cells:
                if cell.is_turn and f"{nb.name}#{cell.turn}" not in records:
                    context = NotebookContext(cells=list(cells), turns=list(turns))
                    folder.add(run_turn(nb, cell, copies, context, strategy_name=strategy,
                                        backend=backend, settings=settings, samples=samples, ks=ks,
                                        temperature=temperature, repair=repair))
                    tick()
                elif cell.cell_type == "code":
                    copies.root.exec(cell.source)
                tid = f"{nb.name}-turn-{cell.turn}" if cell.is_turn else None
                cells.append(Cell(cell.cell_type, cell.source, turn_id=tid))
                if cell.is_turn:
                    turns.append(Turn(intent=cell.intent, code=cell.source, status="accepted",
                                      turn_id=tid))
    data = summarize_turns([records[k] for k in keys if k in records], meta)
    return folder.finish(data, summary_to_markdown(data), print_fn)


def verify_references(notebooks: Sequence[ArcadeNotebook], data_dir: str | os.PathLike, *,
                      cell_timeout: float = 60.0) -> list[dict]:
    """Run every notebook's context and reference cells; one row per turn with
    whether the reference ran and produced an output."""
    from jupyter_data_agent.config import resolve_settings

    rows = []
    states = notebook_states(notebooks, data_dir, resolve_settings(), cell_timeout, "arcade-verify-")
    with contextlib.closing(states):
        for nb, copies in states:
            for cell in (c for c in nb.cells if c.cell_type == "code"):
                r = copies.root.exec(cell.source)
                value = exec_output(r)
                if cell.is_turn:
                    rows.append({
                        "notebook": nb.name, "turn": cell.turn, "ok": r.ok,
                        "has_output": value is not None,
                        "type": r.value.type if r.value is not None else ("stdout" if value else None),
                        "error": _error(r), "output": short_repr(value, 200),
                        "seconds": round(r.duration_s, 3),
                    })
                elif not r.ok:
                    rows.append({"notebook": nb.name, "turn": None, "ok": False,
                                 "has_output": False, "error": f"setup: {_error(r)}"})
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
    p.add_argument("--verify", action="store_true",
                   help="Only run the reference solutions and check each gives an output (no model).")
    add_common_arguments(p)


def main(args: argparse.Namespace) -> int:
    notebooks = load_suite(args.notebooks, parse_csv_list(args.only) or None)
    if not notebooks:
        print("no notebooks found")
        return 1
    bad = [f"{nb.name}: {'; '.join(problems)}" for nb in notebooks if (problems := validate(nb))]
    if bad:
        print("\n".join(bad))
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
    backend = load_backend(settings)
    run_suite(notebooks=notebooks, data_dir=args.data, out=args.out, backend=backend,
              settings=settings, strategy=args.strategy, samples=n, ks=ks,
              temperature=args.temperature, repair=args.repair, cell_timeout=args.cell_timeout,
              progress=not args.no_progress,
              notebooks_label=str(args.notebooks or "built-in suite"))
    return 0
