"""``jupyter-data-agent``: command-line entry point.

Subcommands:

- ``bench dabench``  InfiAgent-DABench runner (see :mod:`.bench.dabench`)
- ``bench arcade``   ARCADE-style notebook suite (see :mod:`.bench.arcade`)
- ``bench report``   compare result folders side by side (see :mod:`.bench.report`)
- ``bench lab``      strategies against a simulated policy (see :mod:`.bench.lab`)
- ``bench inline``   inline completion latency and acceptance (see :mod:`.bench.inline`)
- ``bench loop``     accept/reject -> store -> train -> served, measured (see :mod:`.bench.loop`)
- ``decisions``      export or summarize recorded accept/reject decisions (:mod:`.train.decisions`)
- ``train-value``    value-model training, when :mod:`.train.cli` is installed

Heavy modules (torch, the kernels, matplotlib) are imported only by the
subcommand that needs them, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

TRAIN_MODULE = "jupyter_data_agent.train.cli"


def _train_module_available() -> bool:
    try:
        return importlib.util.find_spec(TRAIN_MODULE) is not None
    except (ImportError, ValueError):
        return False


def build_parser(with_train: bool = True) -> argparse.ArgumentParser:
    from .bench import arcade, dabench, inline, lab, loop, report
    from .train import decisions

    parser = argparse.ArgumentParser(
        prog="jupyter-data-agent",
        description="AI pair programmer for data science: benchmarks and tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    bench = sub.add_parser("bench", help="Run benchmarks (DABench, ARCADE suite) and compare runs.",
                           description="Evaluation harness.")
    bsub = bench.add_subparsers(dest="bench_command", metavar="BENCH")
    bsub.required = True

    for name, module, help in (
        ("dabench", dabench, "InfiAgent-DABench: closed-form @name[value] answers, one kernel per task."),
        ("arcade", arcade, "ARCADE-style notebooks: fuzzy output matching, pass@k, self-consistency."),
        ("report", report, "Compare result folders: Markdown table and PNG plot."),
        ("lab", lab, "Every strategy against a simulated policy of known per-step accuracy."),
        ("loop", loop, "Simulated user -> server API -> decisions store -> train-value -> served; AUC."),
        ("inline", inline, "Inline completion: latency to first ghost text, share of ARCADE lines reproduced."),
    ):
        p = bsub.add_parser(name, help=help, description=(module.__doc__ or "").split("\n\n")[0])
        module.add_arguments(p)
        p.set_defaults(func=module.main)

    decisions.add_parser(sub)

    if with_train and _train_module_available():
        try:
            train = importlib.import_module(TRAIN_MODULE)
        except Exception as e:  # noqa: BLE001 -- a broken optional module is named in its help, not fatal
            tp = sub.add_parser("train-value", help=f"(unavailable: {type(e).__name__}: {e})")
            tp.set_defaults(func=lambda args, _e=e: _unavailable(_e))
        else:
            before = set(sub.choices)
            train.add_parser(sub)
            # its parser may or may not set a handler: dispatch to its run() otherwise
            for name in set(sub.choices) - before:
                tp = sub.choices[name]
                if tp.get_default("func") is None:
                    tp.set_defaults(func=train.run)
    return parser


def _unavailable(error: Exception) -> int:
    print(f"train-value is unavailable: {type(error).__name__}: {error}", file=sys.stderr)
    return 2


def _needs_train(argv: Sequence[str]) -> bool:
    """Import the training CLI only for its own command or for top-level help."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first in (None, "train-value")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(with_train=_needs_train(argv))
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        print("interrupted; finished tasks are saved and a rerun resumes.", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError) as e:
        print(f"jupyter-data-agent: error: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
