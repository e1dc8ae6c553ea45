"""Inline completion: latency to the first ghost text and acceptance on the ARCADE suite.

``jupyter-data-agent-bench inline --data DIR [--only 01_titanic] [--lines N]``

For every reference solution line of the ARCADE notebooks (this package's ``notebooks/``),
the cell is "typed" up to the line's first few characters (:func:`typed_prefix`)
and completed exactly as the server completes it: the same prompt builder
(:func:`jupyter_data_agent.server.complete.inline_prompt`: the cells above,
ARCADE-linearized, plus the schema block), the same streaming and cleaning
(:func:`~jupyter_data_agent.server.complete.generate_inline`), on the
configured backend (by default the embedded SmolLM2-135M GGUF on llama.cpp).
Not measured: the HTTP hop and the kernel round trip for the schema (cached
per kernel in the server; here the schema comes from running the notebook's
cells in this process with ``inspect_namespace``, the magic's path).

A line counts as *accepted* when the typed characters plus the ghost text's
first line reproduce the reference line exactly or up to whitespace.
Latency is from the call to the first shown character (the prompt evaluated,
the first token decoded and cleaned), warm (one completion is made first
to load the model), with the llama.cpp prefix cache as typing leaves it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyter_data_agent.config import resolve_settings
from jupyter_data_agent.context.notebook import from_notebook

from .arcade import ArcadeNotebook, load_suite, resolve_file

#: Characters of a line typed before asking (at most half the line).
TYPED_CHARS = 6


@dataclass
class LineResult:
    notebook: str
    turn: int
    line: str
    typed: str
    ghost: str
    accepted: bool
    exact: bool
    first_ms: float | None
    total_ms: float
    # The next keystroke (one more character typed): the prompt differs only at its end.
    next_first_ms: float | None = None


@dataclass
class CellStart:
    """A cell's first request (the cells above changed), as typing left the cache (``cold``) and
    after ``POST warm``'s evaluation when the cell got focus (``warmed``), the same request."""

    notebook: str
    turn: int
    cold_first_ms: float | None
    warmed_first_ms: float | None
    warm_ms: float  # the warm request itself (off the user's clock: it runs on cell focus)
    warm_prompt_tokens: int


def _pct(xs: list[float], q: float) -> float | None:
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else None


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 1) if xs else None


@dataclass
class InlineBench:
    model: str
    backend: str
    threads: int
    lines: list[LineResult] = field(default_factory=list)
    starts: list[CellStart] = field(default_factory=list)

    def start_summary(self) -> dict:
        cold = sorted(s.cold_first_ms for s in self.starts if s.cold_first_ms is not None)
        warmed = sorted(s.warmed_first_ms for s in self.starts if s.warmed_first_ms is not None)
        warms = sorted(s.warm_ms for s in self.starts)
        return {"cells": len(self.starts),
                "cold_first_ms_median": _median(cold), "cold_first_ms_p90": _pct(cold, 0.9),
                "warmed_first_ms_median": _median(warmed), "warmed_first_ms_p90": _pct(warmed, 0.9),
                "warm_request_ms_median": _median(warms), "warm_request_ms_p90": _pct(warms, 0.9)}

    def summary(self) -> dict:
        firsts = sorted(r.first_ms for r in self.lines if r.first_ms is not None)
        nexts = sorted(r.next_first_ms for r in self.lines if r.next_first_ms is not None)
        totals = sorted(r.total_ms for r in self.lines)
        n = len(self.lines)
        pct = _pct
        return {
            "model": self.model, "backend": self.backend, "threads": self.threads, "requests": n,
            "with_ghost_text": len(firsts),
            "first_ms_median": round(statistics.median(firsts), 1) if firsts else None,
            "first_ms_p90": pct(firsts, 0.9),
            "next_keystroke_first_ms_median": round(statistics.median(nexts), 1) if nexts else None,
            "next_keystroke_first_ms_p90": pct(nexts, 0.9),
            "total_ms_median": round(statistics.median(totals), 1) if totals else None,
            "total_ms_p90": pct(totals, 0.9),
            "accepted": sum(r.accepted for r in self.lines),
            "exact": sum(r.exact for r in self.lines),
            "acceptance": round(sum(r.accepted for r in self.lines) / n, 3) if n else None,
            **({"cell_start": self.start_summary()} if self.starts else {}),
        }


def typed_prefix(line: str) -> str:
    """What the user has typed of ``line`` when completion is asked: its indentation and first characters."""
    indent = len(line) - len(line.lstrip())
    body = line[indent:]
    return line[: indent + min(TYPED_CHARS, max(1, len(body) // 2))]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def lines_to_complete(source: str) -> list[tuple[str, str]]:
    """(cell text before the line + typed part, the reference line) for each code line worth completing."""
    lines = source.splitlines()
    out = []
    for i, line in enumerate(lines):
        body = line.strip()
        if len(body) < 4 or body.startswith("#"):
            continue
        before = "\n".join(lines[:i])
        out.append(((before + "\n" if before else "") + typed_prefix(line), line))
    return out


def _cells_json(cells) -> list[dict]:
    return [{"cell_type": c.cell_type, "source": c.source, "metadata": {},
             **({"outputs": [], "execution_count": None} if c.cell_type == "code" else {})} for c in cells]


def _schema(ns: dict) -> str:
    from jupyter_data_agent.kernel.inkernel.schema import inspect_namespace, schema_block

    frames = inspect_namespace(ns)
    return schema_block(frames) if frames else ""


@contextlib.contextmanager
def _in_dir(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run(notebooks: list[ArcadeNotebook], data: str, max_lines: int, settings=None,
        log=print, warm_variant: bool = False) -> InlineBench:
    """``warm_variant``: each cell's first request is also made after ``POST warm``'s evaluation
    (:func:`~jupyter_data_agent.server.warm.warm`), from the same cache state (the previous
    request made again), side by side with the cold one."""
    from jupyter_data_agent.llm.factory import create_backend
    from jupyter_data_agent.server.complete import generate_inline, inline_prompt
    from jupyter_data_agent.server.warm import warm, warm_prompt

    settings = settings or resolve_settings()
    backend = create_backend(settings)
    from jupyter_data_agent.llm.cores import usable_cores

    threads = settings.threads or (usable_cores() if settings.backend == "llamacpp" else 0)
    bench = InlineBench(model=backend.model, backend=settings.backend, threads=threads)
    cancel = threading.Event()

    def complete(context, prefix: str, schema: str):
        prompt = inline_prompt(settings, backend, context, prefix, "", schema)
        return generate_inline(backend, prompt, lambda _d: None, cancel)

    warmed = False
    last: tuple | None = None  # the previous request: made again, it puts the cache back
    for nb in notebooks:
        tables = {resolve_file(f, data).parent for f in nb.files}
        workdir = next(iter(tables)) if tables else Path(data)
        ns: dict = {}
        for index, cell in enumerate(nb.cells):
            if cell.is_turn and len(bench.lines) < max_lines:
                context = from_notebook({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                         "cells": _cells_json(nb.cells[:index])})
                with _in_dir(workdir):
                    schema = _schema(ns)
                if not warmed:
                    complete(context, "df", schema)  # load the model: the figures are warm
                    warmed = True
                for i, (prefix, reference) in enumerate(lines_to_complete(cell.source)):
                    if len(bench.lines) >= max_lines:
                        break
                    before = last
                    result = complete(context, prefix, schema)
                    if i == 0 and warm_variant and before is not None:
                        complete(*before)
                        started = time.perf_counter()
                        evaluated = warm(backend, warm_prompt(settings, backend, "inline", context, schema))
                        warm_ms = (time.perf_counter() - started) * 1000
                        again = complete(context, prefix, schema)
                        bench.starts.append(CellStart(nb.name, cell.turn or 0, result.first_token_ms,
                                                      again.first_token_ms, warm_ms, evaluated.prompt_tokens))
                        log(f"{nb.name}#{cell.turn} cell start: {result.first_token_ms or 0:.0f} ms cold, "
                            f"{again.first_token_ms or 0:.0f} ms after a {warm_ms:.0f} ms warm")
                    typed = prefix.rsplit("\n", 1)[-1]
                    more = reference[len(typed): len(typed) + 1]
                    after = complete(context, prefix + more, schema) if more else None
                    last = (context, prefix + more, schema) if more else (context, prefix, schema)
                    ghost_line = result.text.split("\n", 1)[0]
                    exact = typed + ghost_line == reference
                    accepted = exact or _squash(typed + ghost_line) == _squash(reference)
                    bench.lines.append(LineResult(nb.name, cell.turn or 0, reference, typed, result.text,
                                                  accepted, exact, result.first_token_ms, result.total_ms,
                                                  after.first_token_ms if after else None))
                    log(f"{nb.name}#{cell.turn} {'OK ' if accepted else '-- '} "
                        f"{(result.first_token_ms or 0):6.0f} ms  {typed!r} + {ghost_line!r}")
            if cell.cell_type == "code":
                with _in_dir(workdir), contextlib.redirect_stdout(None):
                    try:
                        exec(compile(cell.source, f"<{nb.name}>", "exec"), ns)  # the suite's own cells
                    except Exception as exc:  # noqa: BLE001 -- a notebook cell may raise anything; said, and the run goes on
                        log(f"{nb.name}: a cell failed ({type(exc).__name__}: {exc}); its state is left as is")
        if len(bench.lines) >= max_lines:
            break
    return bench


def markdown(summary: dict, command: str) -> str:
    start = summary.get("cell_start")
    warmed = "" if not start else (
        f"\nA cell's first request (the cells above changed), {start['cells']} cells: "
        f"{start['cold_first_ms_median']} / {start['cold_first_ms_p90']} ms median / p90 as typing left the "
        f"cache, {start['warmed_first_ms_median']} / {start['warmed_first_ms_p90']} ms after the warm on cell "
        f"focus (the warm itself: {start['warm_request_ms_median']} / {start['warm_request_ms_p90']} ms).\n")
    return (
        f"`{command}`\n\n"
        f"| model | threads | requests | first ghost text, median / p90 | next keystroke, median / p90 "
        f"| whole completion, median / p90 | lines reproduced (exact) |\n|---|---|---|---|---|---|---|\n"
        f"| {summary['model']} ({summary['backend']}) | {summary['threads']} | {summary['requests']} "
        f"| {summary['first_ms_median']} / {summary['first_ms_p90']} ms "
        f"| {summary['next_keystroke_first_ms_median']} / {summary['next_keystroke_first_ms_p90']} ms "
        f"| {summary['total_ms_median']} / {summary['total_ms_p90']} ms "
        f"| {summary['accepted']} / {summary['requests']} = {100 * (summary['acceptance'] or 0):.1f} % "
        f"({summary['exact']}) |\n" + warmed
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="Folder with the data files (DABench folder: files under tables/).")
    p.add_argument("--notebooks", default=None, help="Folder of ARCADE-format notebooks (default: the built-in suite).")
    p.add_argument("--only", nargs="+", default=None, help="Only these notebooks (file stems).")
    p.add_argument("--lines", type=int, default=1000, help="Stop after this many completions (default 1000).")
    p.add_argument("--json", default="", help="Also write every line's result to this JSON file.")
    p.add_argument("--warm", action="store_true",
                   help="Also make each cell's first request after POST warm's evaluation (cell focus).")


def main(args: argparse.Namespace) -> int:
    from .runner_common import parse_csv_list

    notebooks = load_suite(args.notebooks, parse_csv_list(args.only) or None)
    if not notebooks:
        print("no notebooks found", file=sys.stderr)
        return 1
    started = time.perf_counter()
    bench = run(notebooks, args.data, args.lines, log=lambda m: print(m, file=sys.stderr, flush=True),
                warm_variant=getattr(args, "warm", False))
    summary = bench.summary()
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    summary["notebooks"] = sorted({r.notebook for r in bench.lines})
    print(json.dumps(summary, indent=2))
    command = getattr(args, "command_line", None) or " ".join(["python -m jupyter_data_agent_bench.inline",
                                                                *sys.argv[1:]])
    print(markdown(summary, command))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "lines": [asdict(r) for r in bench.lines],
                       "cell_starts": [asdict(s) for s in bench.starts]}, f, indent=2)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m jupyter_data_agent_bench.inline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    raise SystemExit(main(parser.parse_args()))
