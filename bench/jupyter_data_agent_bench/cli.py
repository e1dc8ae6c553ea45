"""``jupyter-data-agent-bench``: the benchmarks' command line.

Subcommands:

- ``dabench``  InfiAgent-DABench runner (see :mod:`.dabench`)
- ``arcade``   ARCADE-style notebook suite (see :mod:`.arcade`)
- ``report``   compare result folders side by side (see :mod:`.report`)
- ``lab``      strategies against a simulated policy (see :mod:`.lab`)
- ``loop``     accept/reject -> store -> train -> served, measured (see :mod:`.loop`)
- ``inline``   inline completion latency and acceptance (see :mod:`.inline`)

The other benchmarks run as modules: ``python -m jupyter_data_agent_bench.kernel_copy``,
``.search_overhead``, ``.equivalence``, ``.references``, ``.runtime``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jupyter_data_agent.cli import dispatch

PROG = "jupyter-data-agent-bench"

#: (name, module under this package, one-line help)
COMMANDS = (
    ("dabench", "dabench", "InfiAgent-DABench: closed-form @name[value] answers, one kernel per task."),
    ("arcade", "arcade", "ARCADE-style notebooks: fuzzy output matching, pass@k, self-consistency."),
    ("report", "report", "Compare result folders: Markdown table and PNG plot."),
    ("lab", "lab", "Every strategy against a simulated policy of known per-step accuracy."),
    ("loop", "loop", "Simulated user -> server API -> decisions store -> train-value -> served; AUC."),
    ("inline", "inline", "Inline completion: latency to first ghost text, share of ARCADE lines reproduced."),
)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Benchmarks of jupyter-data-agent: DABench, the ARCADE-style suite, the strategy lab, "
                    "the learning loop, inline completion; and a report comparing runs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name, help in COMMANDS:
        module = importlib.import_module(f"{__package__}.{module_name}")
        p = sub.add_parser(name, help=help, description=(module.__doc__ or "").split("\n\n")[0])
        module.add_arguments(p)
        p.set_defaults(func=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_line = " ".join([PROG, *argv])
    return dispatch(args, PROG, "interrupted; finished tasks are saved and a rerun resumes.")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
