"""InfiAgent-DABench runner: every task in its own fresh kernel, scored closed-form.

``jupyter-data-agent-bench dabench --data DIR --strategy S --out results/NAME``

Per task (in full: docs/benchmarks.md, "How a task runs"):

1. A fresh ipykernel in a private temp dir holding a copy of the task's CSV
   (:class:`~.runner_common.Workspace`); nothing is pre-loaded, so the agent
   reads the file by name, as a user would. Candidates run in fork copies of it.
2. The turn (:func:`task_ask`: JUPITER's ReAct task input) is resolved and run
   by ``turn.resolve``/``turn.run_turn``, exactly as the product runs it.
3. The scored response (:func:`response_for`): the final answer when it holds
   an ``@name[value]`` tag, else the chosen cell's printed output; code is
   never scored. A task that raised or showed nothing counts as wrong.
4. Scoring uses :mod:`.dabench_score` (the benchmark authors' rules).

Outputs in ``--out`` (``run.json``, ``tasks.jsonl``, ``summary.md``/``.json``;
with several budgets ``budget-N/`` folders plus ``sweep.md``/``sweep.json`` and
``accuracy_vs_budget.png``) and resuming: docs/benchmarks.md. Budget: the
number of samples for ``vote``, the search budget otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jupyter_data_agent.kernel.results import OutputItem, strip_ansi, truncate_text
from jupyter_data_agent.llm.base import Backend
from jupyter_data_agent.search.options import STRATEGIES

from .dabench_score import Summary, extract_answers, score_question, summarize, summary_markdown
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
    parse_options,
    progress_bar,
    pyplot,
    run_meta,
    settings_from_args,
    slim,
    write_json,
)

LEVELS = ("easy", "medium", "hard")
ONE_CELL_STRATEGIES = ("direct", "vote")
ANSWER_INSTRUCTION = (
    "Read the file from the current directory, compute the answer, and print it "
    "exactly in the required format, e.g. print(f\"@name[{value}]\")."
)
_FINAL_RE = re.compile(r"(?:formatted\s+answer|final\s+answer)\s*:", re.I)


# --------------------------------------------------------------------------
# data


def load_tasks(data_dir: str | os.PathLike) -> tuple[list[dict], dict[Any, list[tuple[str, str]]]]:
    """Questions (file order) and labels by id from a DABench folder."""
    data = Path(data_dir)
    qpath, lpath = data / "questions.jsonl", data / "labels.jsonl"
    if not qpath.is_file():
        raise FileNotFoundError(f"{qpath} not found: --data must be the DABench folder "
                                f"(questions.jsonl, labels.jsonl, tables/)")
    questions = [json.loads(line) for line in qpath.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
    labels: dict[Any, list[tuple[str, str]]] = {}
    if lpath.is_file():
        for line in lpath.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                labels[row["id"]] = [(str(n), str(v)) for n, v in row["common_answers"]]
    return questions, labels


def select_tasks(
    questions: Sequence[dict],
    *,
    ids: Sequence[Any] | None = None,
    levels: Sequence[str] | None = None,
    limit: int | None = None,
    stratify: bool = False,
    seed: int = 0,
) -> list[dict]:
    """Filter by ids and levels, then take ``limit`` tasks.

    Without ``stratify`` the first ``limit`` in file order. With it, a
    balanced subset: each level's tasks are shuffled with ``seed`` and taken
    round-robin (easy, medium, hard, easy, ...), so 50 tasks are 17/17/16;
    the result is returned in file order.
    """
    pool = only(questions, [str(i) for i in ids or ()], lambda q: str(q["id"]), "task id")
    if levels:
        keep = {lv.lower() for lv in levels}
        pool = [q for q in pool if str(q.get("level", "")).lower() in keep]
    if limit is None or limit >= len(pool):
        return pool
    if not stratify:
        return pool[: max(0, limit)]
    rng = random.Random(seed)
    groups: dict[str, list[dict]] = {}
    for q in pool:
        groups.setdefault(str(q.get("level") or "unknown"), []).append(q)
    order = sorted(groups, key=lambda lv: (LEVELS.index(lv) if lv in LEVELS else len(LEVELS), lv))
    for lv in order:
        rng.shuffle(groups[lv])
    # round-robin: every level's i-th task before any level's (i+1)-th
    ranked = sorted((i, k, id(q)) for k, lv in enumerate(order) for i, q in enumerate(groups[lv]))
    chosen = {key for _, _, key in ranked[:limit]}
    return [q for q in pool if id(q) in chosen]


# --------------------------------------------------------------------------
# prompt and answer


def task_text(task: dict) -> str:
    """JUPITER's ReAct task input: question, constraints, format, local files."""
    return (
        f"Question: {task.get('question', '').strip()}\n"
        f"Constraints: {(task.get('constraints') or 'none').strip()}\n"
        f"Format: {(task.get('format') or 'none').strip()}\n"
        f"Available Local Files: {task.get('file_name') or 'none'}"
    )


def task_ask(task: dict, strategy: str, *, budget: int | None,
             temperature: float | None = None, options: dict | None = None):
    """What a user would ask for this task (empty notebook, no schema).

    One-cell strategies get the whole task text as the intent; multi-step
    ones the question, with constraints, format and files as ``TaskInfo``.
    ``budget`` is the number of samples for ``vote``, the search budget else.
    """
    from jupyter_data_agent.search.options import TaskInfo
    from jupyter_data_agent.turn import TurnAsk

    one_cell = strategy in ONE_CELL_STRATEGIES
    text = task_text(task)
    return TurnAsk(
        intent=f"{text}\n{ANSWER_INSTRUCTION}" if one_cell else task.get("question", ""),
        strategy=strategy,
        samples=budget if strategy == "vote" else None,
        budget=budget if strategy != "vote" else None,
        temperature=temperature,
        options=dict(options or {}),
        task=TaskInfo(constraints=task.get("constraints") or "", format=task.get("format") or "",
                      files=(task["file_name"],) if task.get("file_name") else (),
                      task_id=str(task["id"])),
    )


def final_answer_text(answer: str) -> str:
    """The part of a final turn after its last ``Formatted answer:`` /
    ``Final Answer:`` marker, when that part holds an answer tag."""
    marks = list(_FINAL_RE.finditer(answer or ""))
    if marks:
        tail = answer[marks[-1].end():]
        if extract_answers(tail):
            return tail.strip()
    return answer


def printed_text(result_json: dict | None, limit: int = 4000) -> str:
    """What a cell showed as its result: stdout and displayed text, in order.

    Error messages and stderr (warnings) are left out: a cell that only
    raised has given no answer.
    """
    outputs = [OutputItem.from_json(o) for o in (result_json or {}).get("outputs") or []]
    text = "".join(strip_ansi(o.plain_text()) + ("" if o.output_type == "stream" else "\n")
                   for o in outputs if o.output_type != "error" and o.name != "stderr")
    return truncate_text(text, limit)[0]


def response_for(answer: str | None, chosen_result_json: dict | None) -> tuple[str | None, str | None]:
    """(response text to score, where it came from: "answer" | "output" | None).

    The final answer when it holds a tag; else the chosen cell's printed text;
    else an untagged final answer; else nothing (unanswered).
    """
    if answer and extract_answers(answer):
        return final_answer_text(answer), "answer"
    out = printed_text(chosen_result_json)
    if out.strip():
        return out, "output"
    if answer and answer.strip():
        return answer, "answer"
    return None, None


def scored_response(result) -> tuple[str | None, str | None]:
    """:func:`response_for` applied to a :class:`SearchResult` (None: unanswered)."""
    if result is None:
        return None, None
    chosen = getattr(result, "chosen", None)
    res = chosen.result.to_json() if chosen is not None and chosen.result is not None else None
    return response_for(getattr(result, "answer", None), res)


def score_fields(task_id: Any, response: str | None, source: str | None, labels) -> dict:
    """A task record's scored fields: the response, its tags, and the verdict against ``labels``."""
    score = score_question(task_id, response, labels) if labels else None
    return dict(response=response, response_source=source,
                extracted=extract_answers(response) if response else {},
                correct=bool(score.correct) if score else None,
                share=score.share if score else None,
                subs=[asdict(x) for x in score.subs] if score else [])


def rescore_record(rec: dict) -> dict:
    """Re-derive response and score of a logged task from its logged result
    (after a change to answer extraction or scoring); no model, no kernel."""
    result = rec.get("result")
    chosen = None
    if result and result.get("chosen") is not None:
        chosen = (result.get("candidates") or [])[result["chosen"]].get("result")
    response, source = response_for(rec.get("answer"), chosen) if result else (None, None)
    rec.update(score_fields(rec["id"], response, source, [tuple(x) for x in rec.get("labels") or []]))
    return rec


# --------------------------------------------------------------------------
# running


def run_task(
    task: dict,
    labels: Sequence[tuple[str, str]],
    *,
    strategy_name: str,
    backend,
    settings,
    tables_dir: Path,
    budget: int | None = None,
    temperature: float | None = None,
    options: dict | None = None,
    task_timeout: float | None = None,
    cell_timeout: float = 60.0,
    strategy=None,
) -> dict:
    """Run one task in a fresh kernel; returns its log record (never raises).

    ``strategy`` replaces the named one (``turn.run_turn``): trajectory
    collection passes an ``MCTSStrategy`` with the task's reward.
    """
    from jupyter_data_agent.context.model import NotebookContext
    from jupyter_data_agent.turn import resolve, run_turn

    meter = Meter(backend)
    ask = task_ask(task, strategy_name, budget=budget, temperature=temperature, options=options)
    record: dict[str, Any] = {
        "id": task["id"], "level": task.get("level"), "concepts": task.get("concepts") or [],
        "file_name": task.get("file_name"), "strategy": strategy_name, "budget": budget,
        "intent": ask.intent, "options": dict(options or {}),
    }
    result = None
    error = None
    failed_stats = None  # a strategy that raised after spending model calls says what it spent
    cancel = threading.Event()
    timer = threading.Timer(task_timeout, cancel.set) if task_timeout else None
    csv = tables_dir / str(task.get("file_name") or "")
    try:
        spec = resolve(bench_settings(settings, cell_timeout), ask)
        if not csv.is_file():
            raise FileNotFoundError(f"table {csv} not found")
        with Workspace([csv], prefix=f"dabench-{task['id']}-", policy=spec.copies) as ws:
            record["kernel_start_s"] = meter.elapsed()
            protections = ws.copies.protections if ws.copies is not None else None
            record["protections"] = protections.summary() if protections else None
            if ws.fallback:
                record["fallback"] = ws.fallback
            if timer:
                timer.start()
            result = run_turn(spec, NotebookContext(), meter.backend, copies=ws.copies,
                              events=meter.events, cancel=cancel, strategy=strategy)
    except BaseException as e:  # a task failure is a data point
        if isinstance(e, KeyboardInterrupt):
            raise
        error = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=8)
        failed_stats = getattr(e, "stats", None)
    finally:
        if timer:
            timer.cancel()
    done = result is not None
    record.update(
        prompt=getattr(result, "prompt", "") if done else "",
        result=slim(result.to_json()) if done else None,
        answer=getattr(result, "answer", None) if done else None,
        **score_fields(task["id"], *scored_response(result), labels),
        labels=[list(x) for x in labels],
        error=error,
        stats=asdict(result.stats) if done else (asdict(failed_stats) if failed_stats else None),
        search_time_s=round(result.stats.wall_time_s, 3) if done else None,
        **meter.fields(),
    )
    return record


def summarize_run(tasks: Sequence[dict], labels: dict, records: dict, meta: dict) -> dict:
    """Summary dict (metrics, breakdowns, cost) for the selected tasks."""
    scores = [score_question(t["id"], records.get(str(t["id"]), {}).get("response"), labels[t["id"]])
              for t in tasks if labels.get(t["id"])]
    task_meta = {t["id"]: {"level": t.get("level"), "concepts": t.get("concepts")} for t in tasks}
    summary = summarize(scores, task_meta)
    done = [records[str(t["id"])] for t in tasks if str(t["id"]) in records]
    cost = {
        "tasks": len(tasks),
        "finished": len(done),
        "errors": sum(1 for r in done if r.get("error")),
        "answered_by": {src: sum(1 for r in done if r.get("response_source") == src)
                        for src in ("answer", "output")},
        **cost_totals(done),
    }
    return {"kind": "dabench", "run": meta, "summary": asdict(summary), "cost": cost,
            "_summary_obj": summary}


def summary_to_markdown(data: dict) -> str:
    run, cost = data["run"], data["cost"]
    summary: Summary = data["_summary_obj"]
    lines = [
        f"# DABench: {run.get('strategy')} · {run.get('model')}",
        "",
        f"- data: `{run.get('data')}`; tasks: {cost['tasks']} "
        f"(finished {cost['finished']}, errors {cost['errors']}); selection: {run.get('selection')}",
        f"- strategy: {run.get('strategy')}, budget: {run.get('budget')}, "
        f"max_new_tokens: {run.get('max_new_tokens')}, temperature: {run.get('temperature')}, "
        f"exemplars: {run.get('exemplars')}, options: {json.dumps(run.get('options') or {})}",
        f"- scored response from: final answer {cost['answered_by']['answer']}, "
        f"executed output {cost['answered_by']['output']}",
        cost_line(cost),
        "",
        f"Correct: **{summary.n_correct}/{summary.n_questions}** questions, "
        f"{summary.n_sub_correct}/{summary.n_subquestions} sub-questions.",
        "",
        summary_markdown(summary).rstrip("\n"),
        "",
    ]
    return "\n".join(lines)


def run_benchmark(
    *,
    data_dir: str | os.PathLike,
    out: str | os.PathLike,
    strategy: str,
    backend,
    settings,
    tasks: Sequence[dict],
    labels: dict,
    budget: int | None = None,
    temperature: float | None = None,
    options: dict | None = None,
    workers: int = 1,
    task_timeout: float | None = 900.0,
    cell_timeout: float = 60.0,
    selection: str = "",
    rescore: bool = False,
    progress: bool = True,
    print_fn: Callable[[str], None] | None = print,
) -> dict:
    """Run (or resume) one configuration into ``out``; returns the summary dict.

    ``backend`` is a :class:`Backend` or a zero-argument callable making one;
    the callable is only called when some task is left to run (a resumed or
    rescored run loads no model).
    """
    folder = RunFolder(out, "tasks.jsonl", "id")
    records = folder.records
    todo = [t for t in tasks if str(t["id"]) not in records]
    if not isinstance(backend, Backend) and callable(backend):
        backend = backend() if todo else None
    model = backend.model if backend is not None else folder.previous.get("model", "?")
    meta = run_meta("dabench", settings, model, data=str(data_dir), strategy=strategy,
                    budget=budget, temperature=temperature, options=options or {},
                    workers=workers, task_timeout_s=task_timeout, cell_timeout_s=cell_timeout,
                    selection=selection, task_ids=[t["id"] for t in tasks])
    folder.start(meta, len(tasks), len(todo), "task", print_fn)
    if rescore and records:
        for rec in records.values():
            rescore_record(rec)
        folder.log.rewrite(list(records.values()))
        if print_fn:
            print_fn(f"rescored {len(records)} finished tasks from their logs")

    def one(task: dict) -> dict:
        return run_task(task, labels.get(task["id"], []), strategy_name=strategy, backend=backend,
                        settings=settings, tables_dir=Path(data_dir) / "tables", budget=budget,
                        temperature=temperature, options=options, task_timeout=task_timeout,
                        cell_timeout=cell_timeout)

    finished, right = 0, 0
    desc = f"dabench {strategy}" + (f" b={budget}" if budget else "")
    with progress_bar(len(todo), desc, "task", progress) as tick:
        def done(rec: dict) -> None:
            nonlocal finished, right
            folder.add(rec)
            finished, right = finished + 1, right + bool(rec.get("correct"))
            tick(correct=f"{right}/{finished}")

        if workers <= 1:
            for task in todo:
                done(one(task))
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for f in as_completed([pool.submit(one, t) for t in todo]):
                    done(f.result())
    data = summarize_run(tasks, labels, records, meta)
    return folder.finish(data, summary_to_markdown(data), print_fn)


# --------------------------------------------------------------------------
# budget sweeps


def plot_budget(points: Sequence[tuple[int, dict]], path: Path, title: str) -> None:
    plt = pyplot()
    xs = [b for b, _ in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (
        ("accuracy_by_question", "accuracy by question"),
        ("proportional_accuracy_by_subquestion", "proportional by sub-question"),
        ("accuracy_by_subquestion", "accuracy by sub-question"),
    ):
        ax.plot(xs, [100 * d["summary"][key] for _, d in points], marker="o", label=label)
    if len(xs) > 1 and min(xs) > 0 and max(xs) / min(xs) >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set(xlabel="budget", ylabel="accuracy (%)", title=title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sweep_markdown(points: Sequence[tuple[int, dict]], strategy: str, model: str) -> str:
    lines = [
        f"# DABench budget sweep: {strategy} · {model}",
        "",
        "| Budget | Questions | Correct | Acc. by question (%) | Prop. acc. by sub-question (%) "
        "| Acc. by sub-question (%) | Model calls / task | Completion tokens / task | Time / task (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b, d in points:
        s, pt = d["summary"], d["cost"]["per_task"]
        lines.append(
            f"| {b} | {s['n_questions']} | {s['n_correct']} | {100 * s['accuracy_by_question']:.2f} "
            f"| {100 * s['proportional_accuracy_by_subquestion']:.2f} "
            f"| {100 * s['accuracy_by_subquestion']:.2f} | {pt['model_calls']} "
            f"| {pt['completion_tokens']} | {pt['wall_time_s']} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="DABench folder (questions.jsonl, labels.jsonl, tables/).")
    p.add_argument("--strategy", default="direct", choices=STRATEGIES, help="Default: direct.")
    p.add_argument("--out", required=True, help="Result folder, e.g. results/smollm-direct (resumable).")
    p.add_argument("--limit", type=int, default=None, help="Run at most N tasks.")
    p.add_argument("--stratify", action="store_true",
                   help="With --limit: a balanced subset by level (seeded shuffle, round-robin).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the stratified pick (default 0).")
    p.add_argument("--ids", nargs="+", default=None, help="Only these task ids (space/comma separated).")
    p.add_argument("--levels", nargs="+", default=None, help="Only these levels (easy medium hard).")
    p.add_argument("--budget", default=None,
                   help="Search budget; several comma separated (1,4,16) run one after the other.")
    p.add_argument("--workers", type=int, default=1, help="Tasks run concurrently (default 1).")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="Strategy option (search/options.py; JSON values), e.g. max_turns=4.")
    p.add_argument("--task-timeout", type=float, default=900.0,
                   help="Cancel a task's search after this many seconds (default 900).")
    p.add_argument("--rescore", action="store_true",
                   help="Re-derive responses and scores of finished tasks from tasks.jsonl "
                        "(after a scoring change), then run what is left.")
    add_common_arguments(p)


def main(args: argparse.Namespace) -> int:
    from jupyter_data_agent.turn import resolve

    questions, labels = load_tasks(args.data)
    tasks = select_tasks(questions, ids=parse_csv_list(args.ids), levels=parse_csv_list(args.levels),
                         limit=args.limit, stratify=args.stratify, seed=args.seed)
    if not tasks:
        print("no tasks selected")
        return 1
    budgets: list[int | None] = [int(b) for b in parse_csv_list(args.budget)] or [None]
    options = parse_options(args.option)
    selection = (f"limit={args.limit} stratify={args.stratify} seed={args.seed} "
                 f"levels={args.levels or 'all'} ids={'given' if args.ids else 'all'}")
    settings = settings_from_args(args)
    # An unknown strategy option fails here, naming it, before any model loads.
    resolve(settings, task_ask(tasks[0], args.strategy, budget=budgets[0], options=options))
    loaded: list[Backend] = []

    def backend():  # loaded once, and only if some task is left to run
        if not loaded:
            loaded.append(load_backend(settings))
        return loaded[0]

    out = Path(args.out)
    points = [(b, run_benchmark(
        data_dir=args.data, out=out / f"budget-{b}" if len(budgets) > 1 else out,
        strategy=args.strategy, backend=backend, settings=settings, tasks=tasks, labels=labels,
        budget=b, temperature=args.temperature, options=options, workers=args.workers,
        task_timeout=args.task_timeout, cell_timeout=args.cell_timeout, selection=selection,
        rescore=args.rescore, progress=not args.no_progress)) for b in budgets]
    if len(budgets) > 1:
        model = points[0][1]["run"]["model"]
        md = sweep_markdown(points, args.strategy, model)
        (out / "sweep.md").write_text(md, encoding="utf-8")
        write_json(out / "sweep.json", {
            "kind": "dabench-sweep", "strategy": args.strategy, "model": model,
            "points": [{"budget": b, "summary": d["summary"], "cost": d["cost"]} for b, d in points],
        })
        plot_budget(points, out / "accuracy_vs_budget.png", f"DABench {args.strategy} · {model}")
        print(md)
        print(f"plot: {out / 'accuracy_vs_budget.png'}")
    return 0
