"""InfiAgent-DABench runner: every task in its own fresh kernel, scored closed-form.

``jupyter-data-agent bench dabench --data DIR --strategy S --out results/NAME``

Per task:

1. A private temp dir gets a copy of the task's CSV and a fresh ipykernel is
   started there (:class:`~.runner_common.Workspace`); nothing is pre-loaded,
   so the agent reads the file by name, as a user would. Strategies execute
   their cells in fork copies of that kernel.
2. The prompt follows JUPITER's ReAct task input: ``Question:``,
   ``Constraints:``, ``Format:``, ``Available Local Files:``. For ``direct``
   and ``vote`` (one-cell strategies) that text is the intent, plus one line
   asking to print the answer in the required format. For multi-turn
   strategies (``react``, ``mcts``) the intent is the question and the rest
   travels as ``TaskInfo`` (``constraints``, ``format``, ``files``). The
   turn is resolved and run by ``turn.resolve``/``turn.run_turn``, exactly
   as the product runs it.
3. The response that is scored: the strategy's final answer text
   (``SearchResult.answer``; the part after the last ``Formatted answer:`` /
   ``Final Answer:`` when present) if it holds any ``@name[value]`` tag;
   otherwise the chosen candidate's executed output (stdout + displayed
   text). Code is never scored: a tag written in the code is a template
   (``@x[{x}]``), not a value. A task whose strategy raised, or that left
   no answer and no output, is *unanswered* and counts as wrong.
4. Scoring uses :mod:`.dabench_score` (the benchmark authors' rules).

Outputs in ``--out``: ``run.json`` (settings), ``tasks.jsonl`` (one line per
task: prompt, candidates and steps with their outputs, events, answer,
score, tokens, model calls, wall time), ``summary.md`` / ``summary.json``.
Re-running with the same ``--out`` skips tasks already in ``tasks.jsonl``.
With several budgets (``--budget 1,4,16``) each budget runs into
``OUT/budget-N/`` and ``OUT`` gets ``sweep.md``/``sweep.json`` and
``accuracy_vs_budget.png``.

Budget: the number of samples for ``vote``, the search budget otherwise
(iterations for ``mcts``, steps for ``react``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..llm.base import Backend
from ..search.options import STRATEGIES
from .dabench_score import (
    QuestionScore,
    Summary,
    extract_answers,
    score_question,
    summarize,
    summary_markdown,
)
from .runner_common import (
    CountingBackend,
    EventLog,
    JsonlLog,
    Workspace,
    add_model_arguments,
    cost_totals,
    fmt_s,
    load_backend,
    parse_csv_list,
    parse_options,
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
    pool = list(questions)
    if ids:
        wanted = {str(i) for i in ids}
        pool = [q for q in pool if str(q["id"]) in wanted]
        missing = wanted - {str(q["id"]) for q in pool}
        if missing:
            raise ValueError(f"unknown task id(s): {', '.join(sorted(missing, key=_id_key))}")
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
    picked: list[dict] = []
    while len(picked) < limit and any(groups[lv] for lv in order):
        for lv in order:
            if groups[lv] and len(picked) < limit:
                picked.append(groups[lv].pop(0))
    chosen = {id(q) for q in picked}
    return [q for q in pool if id(q) in chosen]


def _id_key(x: Any):
    s = str(x)
    return (0, int(s), s) if s.isdigit() else (1, 0, s)


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
    from ..search.options import TaskInfo
    from ..turn import TurnAsk

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
    parts = []
    for o in (result_json or {}).get("outputs") or []:
        kind = o.get("output_type")
        if kind == "stream" and o.get("name", "stdout") == "stdout":
            parts.append(str(o.get("text") or ""))
        elif kind in ("execute_result", "display_data"):
            text = (o.get("data") or {}).get("text/plain")
            if text:
                parts.append("".join(text) if isinstance(text, list) else str(text))
                parts.append("\n")
    text = "".join(parts)
    return text if len(text) <= limit else text[:limit] + f"\n...[{len(text) - limit} more chars]"


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


def rescore_record(rec: dict) -> dict:
    """Re-derive response and score of a logged task from its logged result
    (after a change to answer extraction or scoring); no model, no kernel."""
    result = rec.get("result")
    chosen = None
    if result and result.get("chosen") is not None:
        chosen = (result.get("candidates") or [])[result["chosen"]].get("result")
    response, source = response_for(rec.get("answer"), chosen) if result else (None, None)
    labels = [tuple(x) for x in rec.get("labels") or []]
    score = score_question(rec["id"], response, labels) if labels else None
    rec.update(response=response, response_source=source,
               extracted=extract_answers(response) if response else {},
               correct=bool(score.correct) if score else None,
               share=score.share if score else None,
               subs=[asdict(x) for x in score.subs] if score else [])
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
) -> dict:
    """Run one task in a fresh kernel; returns its log record (never raises)."""
    from ..context.model import NotebookContext
    from ..turn import resolve, run_turn

    started = time.monotonic()
    counting = CountingBackend(backend)
    events = EventLog()
    ask = task_ask(task, strategy_name, budget=budget, temperature=temperature, options=options)
    record: dict[str, Any] = {
        "id": task["id"],
        "level": task.get("level"),
        "concepts": task.get("concepts") or [],
        "file_name": task.get("file_name"),
        "strategy": strategy_name,
        "budget": budget,
        "intent": ask.intent,
        "options": dict(options or {}),
    }
    result = None
    error = None
    cancel = threading.Event()
    timer = threading.Timer(task_timeout, cancel.set) if task_timeout else None
    csv = tables_dir / str(task.get("file_name") or "")
    try:
        limits = {**settings.snapshot_limits, "timeout_s": cell_timeout, "cpu_s": cell_timeout}
        spec = resolve(settings.with_overrides(snapshot_limits=limits), ask)
        if not csv.is_file():
            raise FileNotFoundError(f"table {csv} not found")
        with Workspace([csv], prefix=f"dabench-{task['id']}-", policy=spec.copies) as ws:
            record["kernel_start_s"] = round(time.monotonic() - started, 3)
            record["protections"] = ws.protections.summary() if ws.protections else None
            if ws.fallback:
                record["fallback"] = ws.fallback
            if timer:
                timer.start()
            result = run_turn(spec, NotebookContext(), counting, copies=ws.copies, events=events,
                              cancel=cancel)
    except BaseException as e:  # noqa: BLE001 - a task failure is a data point
        if isinstance(e, KeyboardInterrupt):
            raise
        error = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=8)
    finally:
        if timer:
            timer.cancel()
    response, source = scored_response(result)
    score = score_question(task["id"], response, labels) if labels else None
    record.update(
        prompt=getattr(result, "prompt", "") if result is not None else "",
        result=slim(result.to_json()) if result is not None else None,
        events=events.items,
        answer=getattr(result, "answer", None) if result is not None else None,
        response=response,
        response_source=source,
        extracted=extract_answers(response) if response else {},
        labels=[list(x) for x in labels],
        correct=bool(score.correct) if score else None,
        share=score.share if score else None,
        subs=[asdict(s) for s in score.subs] if score else [],
        error=error,
        stats=asdict(result.stats) if result is not None else None,
        calls=counting.counts.to_json(),
        model_calls=counting.counts.model_calls,
        prompt_tokens=counting.counts.prompt_tokens,
        completion_tokens=counting.counts.completion_tokens,
        wall_time_s=round(time.monotonic() - started, 3),
        search_time_s=round(result.stats.wall_time_s, 3) if result is not None else None,
        finished=time.time(),
    )
    return record


def _score_records(tasks: Sequence[dict], labels: dict, records: dict) -> list[QuestionScore]:
    scores = []
    for t in tasks:
        lab = labels.get(t["id"])
        if not lab:
            continue
        rec = records.get(str(t["id"]))
        scores.append(score_question(t["id"], rec.get("response") if rec else None, lab))
    return scores


def summarize_run(tasks: Sequence[dict], labels: dict, records: dict, meta: dict) -> dict:
    """Summary dict (metrics, breakdowns, cost) for the selected tasks."""
    scores = _score_records(tasks, labels, records)
    task_meta = {t["id"]: {"level": t.get("level"), "concepts": t.get("concepts")} for t in tasks}
    summary = summarize(scores, task_meta)
    done = [records[str(t["id"])] for t in tasks if str(t["id"]) in records]
    cost = {
        "tasks": len(tasks),
        "finished": len(done),
        "errors": sum(1 for r in done if r.get("error")),
        "answered_by": {
            "answer": sum(1 for r in done if r.get("response_source") == "answer"),
            "output": sum(1 for r in done if r.get("response_source") == "output"),
        },
        **cost_totals(done),
    }
    return {"kind": "dabench", "run": meta, "summary": asdict(summary), "cost": cost,
            "_summary_obj": summary}


def summary_to_markdown(data: dict) -> str:
    run, cost = data["run"], data["cost"]
    summary: Summary = data["_summary_obj"]
    pt = cost["per_task"]
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
        f"- cost: {cost['model_calls']} model calls, {cost['prompt_tokens']} prompt + "
        f"{cost['completion_tokens']} completion tokens, {fmt_s(cost['wall_time_s'])} "
        f"(per task: {pt['model_calls']} calls, {pt['completion_tokens']} completion tokens, "
        f"{pt['wall_time_s']} s)",
        "",
        f"Correct: **{summary.n_correct}/{summary.n_questions}** questions, "
        f"{summary.n_sub_correct}/{summary.n_subquestions} sub-questions.",
        "",
        summary_markdown(summary).rstrip("\n"),
        "",
    ]
    return "\n".join(lines)


def write_summary(out: Path, data: dict) -> str:
    md = summary_to_markdown(data)
    (out / "summary.md").write_text(md, encoding="utf-8")
    write_json(out / "summary.json", {k: v for k, v in data.items() if not k.startswith("_")})
    return md


_SAME_RUN_KEYS = ("strategy", "budget", "model", "max_new_tokens", "temperature", "exemplars",
                  "options")


def _warn_if_changed(path: Path, meta: dict, print_fn) -> None:
    """Resuming with other settings mixes two configurations in one folder: say so."""
    if not path.is_file() or print_fn is None:
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    changed = [k for k in _SAME_RUN_KEYS if k in old and old.get(k) != meta.get(k)]
    if changed:
        print_fn(f"warning: {path.parent} was started with other settings "
                 f"({', '.join(f'{k}: {old.get(k)!r} -> {meta.get(k)!r}' for k in changed)}); "
                 f"finished tasks keep their old results. Use a new --out to compare.")


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
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tables = Path(data_dir) / "tables"
    log = JsonlLog(out / "tasks.jsonl")
    records = {str(r["id"]): r for r in log.read() if "id" in r}
    todo = [t for t in tasks if str(t["id"]) not in records]
    if not isinstance(backend, Backend) and callable(backend):
        backend = backend() if todo else None
    previous = {}
    if (out / "run.json").is_file():
        try:
            previous = json.loads((out / "run.json").read_text(encoding="utf-8"))
        except ValueError:
            previous = {}
    model = backend.model if backend is not None else previous.get("model", "?")
    meta = {
        "kind": "dabench",
        "data": str(data_dir),
        "strategy": strategy,
        "budget": budget,
        "backend": getattr(settings, "backend", None),
        "model": model,
        "max_new_tokens": getattr(settings, "max_new_tokens", None),
        "max_prompt_tokens": getattr(settings, "max_prompt_tokens", None),
        "temperature": temperature,
        "exemplars": getattr(settings, "exemplars", None),
        "api_mode": getattr(settings, "api_mode", None),
        "options": options or {},
        "workers": workers,
        "task_timeout_s": task_timeout,
        "cell_timeout_s": cell_timeout,
        "selection": selection,
        "task_ids": [t["id"] for t in tasks],
    }
    _warn_if_changed(out / "run.json", meta, print_fn)
    write_json(out / "run.json", meta)
    if rescore and records:
        for rec in records.values():
            rescore_record(rec)
        log.rewrite(list(records.values()))
        if print_fn:
            print_fn(f"rescored {len(records)} finished tasks from their logs")
    if print_fn and len(todo) < len(tasks):
        print_fn(f"resuming: {len(tasks) - len(todo)} of {len(tasks)} tasks already done in {out}")

    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=f"dabench {strategy}" + (f" b={budget}" if budget else ""),
                   unit="task", dynamic_ncols=True)
    right = 0

    def one(task: dict) -> dict:
        return run_task(task, labels.get(task["id"], []), strategy_name=strategy, backend=backend,
                        settings=settings, tables_dir=tables, budget=budget,
                        temperature=temperature, options=options, task_timeout=task_timeout,
                        cell_timeout=cell_timeout)

    def done(rec: dict) -> None:
        nonlocal right
        log.append(rec)
        records[str(rec["id"])] = rec
        right += bool(rec.get("correct"))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(correct=f"{right}/{bar.n}", refresh=False)

    try:
        if workers <= 1:
            for task in todo:
                done(one(task))
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(one, t) for t in todo]
                for f in as_completed(futures):
                    done(f.result())
    finally:
        if bar is not None:
            bar.close()
    data = summarize_run(tasks, labels, records, meta)
    md = write_summary(out, data)
    if print_fn:
        print_fn(md)
    return data


# --------------------------------------------------------------------------
# budget sweeps


def plot_budget(points: Sequence[tuple[int, dict]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

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
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel("budget")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
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
    p.add_argument("--cell-timeout", type=float, default=60.0,
                   help="Wall-clock and CPU limit per executed cell (default 60 s).")
    p.add_argument("--rescore", action="store_true",
                   help="Re-derive responses and scores of finished tasks from tasks.jsonl "
                        "(after a scoring change), then run what is left.")
    p.add_argument("--no-progress", action="store_true", help="No progress bar.")
    add_model_arguments(p)


def main(args: argparse.Namespace) -> int:
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
    from ..turn import resolve

    # An unknown strategy option fails here, naming it, before any model loads.
    resolve(settings, task_ask(tasks[0], args.strategy, budget=budgets[0], options=options))
    loaded = []

    def backend():  # loaded once, and only if some task is left to run
        if not loaded:
            loaded.append(load_backend(settings, args.torch_threads))
        return loaded[0]

    out = Path(args.out)
    points = []
    for b in budgets:
        run_out = out / f"budget-{b}" if len(budgets) > 1 else out
        data = run_benchmark(
            data_dir=args.data, out=run_out, strategy=args.strategy, backend=backend,
            settings=settings, tasks=tasks, labels=labels, budget=b,
            temperature=args.temperature, options=options, workers=args.workers,
            task_timeout=args.task_timeout, cell_timeout=args.cell_timeout,
            selection=selection, rescore=args.rescore, progress=not args.no_progress,
        )
        points.append((b, data))
    if len(budgets) > 1:
        model = points[0][1]["run"]["model"]
        md = sweep_markdown(points, args.strategy, model)
        (out / "sweep.md").write_text(md, encoding="utf-8")
        write_json(out / "sweep.json", {
            "kind": "dabench-sweep",
            "strategy": args.strategy,
            "model": model,
            "points": [{"budget": b, "summary": d["summary"], "cost": d["cost"]} for b, d in points],
        })
        plot_budget(points, out / "accuracy_vs_budget.png", f"DABench {args.strategy} · {model}")
        print(md)
        print(f"plot: {out / 'accuracy_vs_budget.png'}")
    return 0
