"""``jupyter-data-agent``: command-line entry point.

Subcommands:

- ``decisions``      export or summarize recorded accept/reject decisions (:mod:`.train.decisions`)
- ``acp``            the Data Agent as an Agent Client Protocol agent on stdio (:mod:`.mcp.acp`)
- ``token``          scoped tokens for outside agents: create, list, revoke (:mod:`.store.agent_tokens`)
- ``train-value``    value-model training, when :mod:`.train.cli` is installed

The benchmarks are a distribution of their own, ``jupyter-data-agent-bench``
(the repository's ``bench/`` folder, ``pip install -e ./bench``), with its own
command of that name; ``jupyter-data-agent bench`` only says so.

Heavy modules (torch) are imported only by the subcommand that needs them, so
``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

TRAIN_MODULE = "jupyter_data_agent.train.cli"

BENCH_MOVED = (
    "the benchmarks are a separate distribution, jupyter-data-agent-bench (the bench/ folder of the "
    "repository): install it with `pip install -e ./bench` from a checkout, then run "
    "`jupyter-data-agent-bench dabench|arcade|report|lab|loop|inline ...`"
)


def _train_module_available() -> bool:
    try:
        return importlib.util.find_spec(TRAIN_MODULE) is not None
    except (ImportError, ValueError):
        return False


def build_parser(with_train: bool = True) -> argparse.ArgumentParser:
    from .train import decisions

    parser = argparse.ArgumentParser(
        prog="jupyter-data-agent",
        description="AI pair programmer for data science: tools (benchmarks: jupyter-data-agent-bench).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    decisions.add_parser(sub)
    acp = sub.add_parser("acp", help="Serve an Agent Client Protocol client on stdin/stdout (jupyter-ai, Zed, "
                                     "JetBrains): each prompt is a turn of the running Jupyter server, its "
                                     "answer a proposal in the notebook.")
    acp.set_defaults(func=_acp)
    _token_parser(sub)

    if with_train and _train_module_available():
        try:
            train = importlib.import_module(TRAIN_MODULE)
        except Exception as e:  # noqa: BLE001 -- a broken optional module must not break the other commands
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


def _acp(args: argparse.Namespace) -> int:
    from .mcp.acp import main as acp_main

    return acp_main()


def _token_parser(sub) -> None:
    token = sub.add_parser("token", help="Scoped tokens for outside agents (Claude Code, Codex, Cursor, ACP "
                                         "clients): they reach the Data Agent's MCP server and proposals, "
                                         "never your kernels, files or decisions.")
    verbs = token.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    create = verbs.add_parser("create", help="Make a token for one agent; it is printed once.")
    create.add_argument("--name", required=True, help='The agent, as the sidebar shows it ("Claude Code").')
    create.add_argument("--user", default=None, help="Whose agent it is under an identity provider that "
                        "names users (default: $JUPYTERHUB_USER, else your login name).")
    create.set_defaults(func=_token_create)
    listing = verbs.add_parser("list", help="The tokens made so far (never the tokens themselves).")
    listing.set_defaults(func=_token_list)
    revoke = verbs.add_parser("revoke", help="Revoke a token by its id or name; the agent is refused at once.")
    revoke.add_argument("which", help="The token's id (from `list`) or its agent's name.")
    revoke.set_defaults(func=_token_revoke)


def _token_create(args: argparse.Namespace) -> int:
    import getpass
    import os

    from .store.agent_tokens import AgentTokenStore

    user = args.user or os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
    record, token = AgentTokenStore().create(args.name, user)
    print(f"Agent token for {record.name} (id {record.id}); it is shown only now:\n\n  {token}\n\n"
          "It reaches the Data Agent's MCP server (and what the ACP agent needs): notebooks as read_notebook "
          "shows them, copies of your kernels, proposals. Revoke it with `jupyter-data-agent token revoke "
          f"{record.id}`.")
    return 0


def _token_list(args: argparse.Namespace) -> int:
    from .store.agent_tokens import AgentTokenStore

    tokens = AgentTokenStore().tokens()
    if not tokens:
        print("No agent tokens; make one with `jupyter-data-agent token create --name \"Claude Code\"`.")
    for t in tokens:
        print(f"{t.id}  {t.created}  {t.name}")
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from .store.agent_tokens import AgentTokenStore

    for t in AgentTokenStore().revoke(args.which):
        print(f"Revoked the token of {t.name} ({t.id}).")
    return 0


def _unavailable(error: Exception) -> int:
    print(f"train-value is unavailable: {type(error).__name__}: {error}", file=sys.stderr)
    return 2


def _command(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _needs_train(argv: Sequence[str]) -> bool:
    """Import the training CLI only for its own command or for top-level help."""
    return _command(argv) in (None, "train-value")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _command(argv) == "bench":
        print(f"jupyter-data-agent: {BENCH_MOVED}", file=sys.stderr)
        return 2
    parser = build_parser(with_train=_needs_train(argv))
    return dispatch(parser.parse_args(argv), "jupyter-data-agent")


def dispatch(args: argparse.Namespace, prog: str, interrupted: str = "interrupted.") -> int:
    """Run the chosen command: a bad path or value is one line of error, Ctrl-C exit code 130."""
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
