"""The strategy lab: every strategy against a simulated policy of known per-step accuracy.

``jupyter-data-agent-bench lab --data DIR --p 0.3,0.5,0.7 --strategies
direct,vote:8,react,mcts:heuristic --budget-calls 16`` runs each strategy
through the product's pipeline (``bench.dabench.run_task``: a fresh kernel,
``turn.resolve``, ``turn.run_turn``) with :class:`~.policy.SimulatedPolicy`
as the model, on the tasks that have a reference solution
(``bench.references``), and reports accuracy by question for each ``p``.

Equal budgets are in completions (model samples): ``vote:k`` draws
``min(k, N)``; ``react`` may take up to ``N`` turns; ``mcts`` (Search) gets
``N // k`` iterations of ``k`` samples, i.e. about ``N`` completions: a third
drawn as the vote draws them, the rest in branches (``search.branching``;
``mcts:evidence:tree`` is the tree alone); ``direct`` always draws one; ``analysis:k`` plans
(one completion), then draws ``k`` candidates per step (a vote per step; 1 by
default) for at most ``ANALYSIS_STEPS`` steps, plus its repairs: its real
count is reported, since it depends on the plan's length. ``mcts:heuristic``
is value-guided by the execution heuristic, ``mcts:NAME`` by the trained value
model given as ``--value-model NAME=DIR`` (``mcts:value`` for a bare
``--value-model DIR``). Tasks are split by id into train and test halves (a
hash, so the split does not depend on which tasks have references); the lab
reports the ``--split`` asked for (test by default). Output: ``runs.jsonl``,
``summary.md`` and ``accuracy.png`` (accuracy vs p, a line per strategy).
Resumable like the other runners.

``--answers FILE`` keeps every candidate of Search's turns (its features and
whether it is right) and reports the shipped evidence model's AUC among them:
what ``meta.answer_auc`` of the shipped model records, and so how far
Search's pick may weigh its estimate.

``--collect FILE`` runs the ``mcts`` strategies as JUPITER collects value
training data: each answer gets the task's reward (+1 right, -1 wrong,
``bench.dabench_score.dabench_reward``), PUCT explores (c_puct 1.25), and
every node of every tree is appended to ``FILE`` (``search.trajectories``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from .dabench import load_tasks, run_task
from .dabench_score import dabench_reward
from .policy import PolicyConfig, SimulatedPolicy, table_columns
from .references import load_references
from .runner_common import RunFolder, parse_csv_list, progress_bar, pyplot

MCTS_K = 3  # MCTSOptions.k's default: samples per expansion
ANALYSIS_STEPS = 8  # the references have 3-8 steps


def split_of(task_id: Any, test_share: float = 0.5) -> str:
    """``train`` or ``test``, stable per id."""
    h = int(hashlib.sha256(str(task_id).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < test_share else "train"


def value_models(specs: list[str]) -> dict[str, str]:
    """``--value-model NAME=DIR`` (or a bare ``DIR``, named ``value``) as {name: dir}."""
    out = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")
        if not Path(path).is_dir():
            raise ValueError(f"--value-model {spec!r}: {path} is not a directory")
        out[name or "value"] = path
    return out


def strategy_run(spec: str, budget: int, models: dict[str, str] | None = None) -> tuple[str, int | None, dict]:
    """``vote:8`` -> ("vote", 8 samples); ``mcts:heuristic`` -> ("mcts", N // k, value); ..."""
    name, _, arg = spec.partition(":")
    arg = (models or {}).get(arg, arg)
    if name == "direct":
        return "direct", None, {}
    if name == "vote":  # vote:8, or vote:8:adaptive[=P] (drawing stops once the answer is decided;
        # P: the posterior that decides it)
        k, _, mode = arg.partition(":")
        mode, _, posterior = mode.partition("=")
        vote_opts: dict = {"adaptive": mode == "adaptive"}  # whatever the default
        if posterior:
            vote_opts["stop_posterior"] = float(posterior)
        return "vote", min(int(k or budget), budget), vote_opts
    if name == "react":
        return "react", budget, {}
    if name == "mcts":  # mcts:VALUE[:FLAG...]: max (select by the best value below, not Q),
        # mean, unsure=C (explore where the estimate is unsure), nomerge, k=K, tree (no vote share),
        # share=F (the vote's share of the budget), commit=P (the lead that makes a branch)
        value, *flags = arg.split(":")
        value = (models or {}).get(value, value)
        opts: dict = {"value": value or "heuristic", "k": MCTS_K}
        for flag in flags:
            key, _, val = flag.partition("=")
            if key in ("max", "mean"):
                opts["backup"] = key
            elif key == "unsure":
                opts["unsure"] = float(val or 0.5)
            elif key == "nomerge":
                opts["merge"] = False
            elif key == "k":
                opts["k"] = int(val)
            elif key == "tree":  # JUPITER's tree alone, without the vote's share (search.branching)
                opts["vote_share"] = 0.0
            elif key in ("share", "commit"):
                opts["vote_share" if key == "share" else "commit"] = float(val)
            else:
                raise ValueError(f"unknown mcts flag {flag!r} in {spec!r}: max, mean, unsure=C, nomerge, k=K, "
                                 "tree, share=F, commit=P")
        return "mcts", max(1, budget // opts["k"]), opts
    if name == "analysis":
        return "analysis", ANALYSIS_STEPS, {"samples": int(arg or 1)}
    raise ValueError(f"unknown strategy {spec!r}: direct, vote[:k[:adaptive[=P]]], react, "
                     "mcts[:heuristic|evidence|NAME|DIR[:max|:mean|:unsure=C|:nomerge|:k=K]], analysis[:k]")


def accuracy(rows: list[dict], strategy: str, p: float, budget: int | None = None,
             seed: int | None = None) -> tuple[float, int] | None:
    """(% correct, tasks) of ``strategy`` at ``p`` (and ``budget``, ``seed``); None without runs there."""
    got = [r for r in rows if r["strategy"] == strategy and r["p"] == p
           and (budget is None or r.get("budget") == budget) and (seed is None or r.get("seed", 0) == seed)]
    return (100 * sum(r["correct"] for r in got) / len(got), len(got)) if got else None


def seed_spread(rows: list[dict], strategy: str, p: float, budget: int,
                seeds: list[int]) -> tuple[float, float, float, int] | None:
    """(mean, min, max of the per-seed accuracies, tasks per seed) of one cell of the table."""
    per = [a for seed in seeds if (a := accuracy(rows, strategy, p, budget, seed))]
    if not per:
        return None
    values = [a[0] for a in per]
    return sum(values) / len(values), min(values), max(values), per[0][1]


def summary_markdown(rows: list[dict], ps: list[float], strategies: list[str], split: str,
                     budgets: list[int] | None = None, seeds: list[int] | None = None) -> str:
    budgets = budgets or sorted({r.get("budget", 0) for r in rows})
    seeds = seeds or sorted({r.get("seed", 0) for r in rows})
    spread = len(seeds) > 1
    lines = [f"Accuracy by question on the {split} split (tasks with a reference), by per-step accuracy p",
             "of the simulated policy" + (f"; mean over seeds {', '.join(map(str, seeds))} (min–max)"
                                          if spread else "") + "; completions and wall time are per task.", "",
             "| strategy | budget | " + " | ".join(f"p = {p:g}" for p in ps) + " | completions | wall time |",
             "|---" * (len(ps) + 4) + "|"]
    for s in strategies:
        for b in budgets:
            cells = []
            for p in ps:
                c = seed_spread(rows, s, p, b, seeds)
                cells.append("–" if c is None else f"{c[0]:.1f} %" + (f" ({c[1]:.1f}–{c[2]:.1f})" if spread
                                                                     else f" ({c[3]})"))
            mine = [r for r in rows if r["strategy"] == s and r.get("budget", b) == b]
            if not mine:
                continue
            samples = sum(r["samples"] for r in mine) / len(mine)
            wall = sum(r["wall_time_s"] for r in mine) / len(mine)
            lines.append(f"| {s} | {b} | " + " | ".join(cells) + f" | {samples:.1f} | {wall:.1f} s |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], ps: list[float], strategies: list[str], split: str, path: Path,
         budgets: list[int] | None = None) -> None:
    """Accuracy vs p, one line per strategy; with several budgets, accuracy vs budget, one panel per p."""
    plt = pyplot()
    budgets = budgets or sorted({r.get("budget", 0) for r in rows})
    if len(budgets) > 1:
        fig, axes = plt.subplots(1, len(ps), figsize=(3.6 * len(ps), 3.6), sharey=True, squeeze=False)
        for ax, p in zip(axes[0], ps):
            for s in strategies:
                points = [(b, a[0]) for b in budgets if (a := accuracy(rows, s, p, b))]
                ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=s)
            ax.set_title(f"p = {p:g}", fontsize=9)
            ax.set_xlabel("budget (completions)")
            ax.set_xticks(budgets)
            ax.set_ylim(0, 100)
            ax.grid(True, alpha=0.3)
        axes[0][0].set_ylabel("accuracy by question (%)")
        axes[0][-1].legend(fontsize=7)
        fig.suptitle(f"strategy lab, {split} split: accuracy vs budget (mean over seeds)", fontsize=9)
    else:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for s in strategies:
            points = [(p, a[0]) for p in ps if (a := accuracy(rows, s, p))]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=s)
        ax.set_xlabel("per-step accuracy p of the simulated policy")
        ax.set_ylabel("accuracy by question (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"strategy lab, {split} split, equal completion budget", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def append_answers(path: str, rec: dict, labels, extra: dict) -> None:
    """Each candidate of a Search turn that voted: its features, whether its output is right."""
    from .dabench import printed_text
    from .dabench_score import score_question

    with open(path, "a", encoding="utf-8") as f:
        result = rec.get("result") or {}
        for i, c in enumerate(result.get("candidates") or []):
            feats = (c.get("meta") or {}).get("features")
            if feats and feats.get("answered"):  # it ran and voted (a cell that raised does not)
                printed = printed_text(c.get("result"))
                right = score_question(rec["id"], printed, labels).correct
                f.write(json.dumps({"id": rec["id"], **extra, "features": feats, "right": bool(right),
                                    "answer": printed, "support": c.get("support"),
                                    "picked": i == result.get("chosen")}) + "\n")


def answers_auc(path: str) -> str:
    """The shipped models' AUC among Search's answers (``--answers``), per log-prob gap: the answer
    model Search's pick weighs them with, and the node model the tree uses."""
    from jupyter_data_agent.search.features import ANSWER_MODEL, DEFAULT_MODEL, EvidenceModel
    from jupyter_data_agent.train.features import auc

    rows = [r for line in open(path, encoding="utf-8") if line.strip()
            and (r := json.loads(line))["features"].get("answered")]
    out = ["", "AUC among Search's answers (every candidate that voted):", ""]
    for name, where in (("answer model", ANSWER_MODEL), ("node model", DEFAULT_MODEL)):
        model = EvidenceModel.load(where)
        for gap in sorted({r["gap"] for r in rows}):
            mine = [r for r in rows if r["gap"] == gap]
            a = auc(model.probability([r["features"] for r in mine]).tolist(), [int(r["right"]) for r in mine])
            out.append(f"- {name}, gap {gap:g}: {'–' if a is None else f'{a:.3f}'} ({len(mine)} answers, "
                       f"{sum(r['right'] for r in mine)} right)")
    return "\n".join(out) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="the DABench folder")
    p.add_argument("--references", default=None, help="reference solutions JSONL (bench.references)")
    p.add_argument("--p", default="0.3,0.5,0.7", help="per-step accuracies of the simulated policy")
    p.add_argument("--strategies", default="direct,vote:8,react,mcts:heuristic")
    p.add_argument("--budget-calls", default="16",
                   help="completions per task, every strategy (a list, e.g. 24,48: each budget)")
    p.add_argument("--split", choices=("test", "train", "all"), default="test")
    p.add_argument("--limit", type=int, default=None, help="at most this many tasks")
    p.add_argument("--min-steps", type=int, default=0, help="only tasks whose reference has this many steps")
    p.add_argument("--seed", type=int, default=0, help="the policy's seed")
    p.add_argument("--seeds", default=None, help="several seeds, e.g. 0,1,2 (the table shows their spread)")
    p.add_argument("--logprob-gap", type=float, default=PolicyConfig.logprob_right - PolicyConfig.logprob_wrong,
                   help="how far a right step's mean log-prob lies above a wrong one's (0: log-probs "
                        "carry no information)")
    p.add_argument("--logprob-noise", type=float, default=PolicyConfig.logprob_noise,
                   help="standard deviation of a step's mean log-prob")
    p.add_argument("--value-model", action="append", default=[], metavar="[NAME=]DIR",
                   help="a trained value model for mcts:NAME (repeatable)")
    p.add_argument("--collect", default=None, metavar="FILE",
                   help="collect value training data: mcts with the task's reward, every node to FILE")
    p.add_argument("--answers", default=None, metavar="FILE",
                   help="Search's answers: every candidate that ran, its features and whether it is right, "
                        "appended to FILE; the summary adds the evidence model's AUC among them")
    p.add_argument("--out", required=True, help="result folder (resumable)")
    p.add_argument("--no-progress", action="store_true")


def main(args: argparse.Namespace) -> int:
    from jupyter_data_agent.config import Settings

    data = Path(args.data)
    tasks, labels = load_tasks(data)
    refs = load_references(args.references)
    chosen = [t for t in tasks if int(t["id"]) in refs and labels.get(t["id"])
              and len(refs[int(t["id"])].steps) >= args.min_steps
              and (args.split == "all" or split_of(t["id"]) == args.split)][: args.limit]
    ps = [float(x) for x in parse_csv_list(args.p)]
    strategies = parse_csv_list(args.strategies)
    budgets = [int(b) for b in parse_csv_list(str(args.budget_calls))]
    seeds = [int(x) for x in parse_csv_list(args.seeds)] if args.seeds else [args.seed]
    models = value_models(args.value_model)
    runs = {(s, b): strategy_run(s, b, models) for s in strategies for b in budgets}
    if args.collect and any(run[0] != "mcts" for run in runs.values()):
        raise SystemExit("--collect runs mcts strategies only")
    folder = RunFolder(args.out, "runs.jsonl", "key")

    def key(p: float, s: str, b: int, seed: int, task_id: Any) -> str:
        return f"{p}|{s}|{task_id}|b{b}|s{seed}"

    todo = [(seed, b, p, s, t) for seed in seeds for b in budgets for p in ps for s in strategies for t in chosen
            if key(p, s, b, seed, t["id"]) not in folder.records]
    meta = {"kind": "lab", "p": ps, "strategies": strategies, "budget_calls": budgets,
            "split": args.split, "seeds": seeds, "logprob_gap": args.logprob_gap,
            "logprob_noise": args.logprob_noise, "min_steps": args.min_steps, "tasks": [t["id"] for t in chosen],
            "value_models": args.value_model, "collect": args.collect}
    folder.start(meta, len(seeds) * len(budgets) * len(ps) * len(strategies) * len(chosen), len(todo), "run",
                 print)
    settings = Settings(backend="openai", exemplars=False)  # the policy is the model; no endpoint is used
    with progress_bar(len(todo), "lab", "run", not args.no_progress) as tick:
        for seed, b, p, s, task in todo:
            name, budget, options = runs[(s, b)]
            policy = SimulatedPolicy(refs[int(task["id"])], PolicyConfig(
                p=p, seed=seed, logprob_wrong=PolicyConfig.logprob_right - args.logprob_gap,
                logprob_noise=args.logprob_noise),
                table_columns(data / "tables" / task["file_name"]))
            strategy, opts = None, dict(options)
            if args.collect:
                from jupyter_data_agent.search.mcts import MCTSStrategy

                strategy = MCTSStrategy(reward_fn=dabench_reward(labels[task["id"]], task["id"]))
                opts["trajectory_path"] = str(Path(args.collect).absolute())
            start = time.perf_counter()
            rec = run_task(task, labels[task["id"]], strategy_name=name, backend=policy, settings=settings,
                           tables_dir=data / "tables", budget=budget, options=opts, strategy=strategy)
            folder.add({"key": key(p, s, b, seed, task["id"]), "p": p, "strategy": s, "id": task["id"],
                        "budget": b, "seed": seed,
                        "correct": bool(rec.get("correct")), "error": rec.get("error"),
                        "samples": int((rec.get("calls") or {}).get("samples") or 0),
                        "model_calls": rec.get("model_calls"), "response": rec.get("response"),
                        "wall_time_s": round(time.perf_counter() - start, 2)})
            if args.answers and name == "mcts":
                append_answers(args.answers, rec, labels[task["id"]], {"p": p, "seed": seed, "budget": b,
                                                                       "gap": args.logprob_gap})
            tick(p=p, strategy=s)
    rows = [r for r in folder.records.values() if r["strategy"] in strategies and r["p"] in ps
            and r.get("budget") in budgets and r.get("seed") in seeds and r["id"] in {t["id"] for t in chosen}]
    md = summary_markdown(rows, ps, strategies, args.split, budgets, seeds)
    if args.answers and Path(args.answers).is_file():
        md += answers_auc(args.answers)
    if rows:
        plot(rows, ps, strategies, args.split, Path(args.out) / "accuracy.png", budgets)
    folder.finish({"rows": len(rows), "markdown": md}, md, print)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
