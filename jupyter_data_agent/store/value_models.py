"""Trained value models, versioned: ``<jupyter data dir>/jupyter_data_agent/value_models/vN``.

``jupyter-data-agent train-value`` writes the next version there by default;
the server's Search turns use the newest complete one (a directory with the
head weights and config that ``ValueModel.load`` reads), picked at start and
again on "Reload value model". A directory being written has no config yet
and is never picked. The agent's data folder they live in is its user's alone (0700).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..config import Settings
from . import agent_data_dir, private_dir

CONFIG_FILE = "value_config.json"  # search.value_net.CONFIG_NAME, written last by train.value_net.save_model
_VERSION = re.compile(r"^v(\d+)$")


def value_models_dir() -> Path:
    return agent_data_dir() / "value_models"


def _versions(root: Path) -> list[tuple[int, Path]]:
    try:
        if not root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _VERSION.match(p.name)) and p.is_dir()]
    except PermissionError:  # another user's (a data dir shared by mistake): none of this user's
        return []
    return sorted(found)


def newest_value_model(root: Path | None = None) -> Path | None:
    """The highest complete version, or None (Search then uses the heuristic)."""
    for _, path in reversed(_versions(root or value_models_dir())):
        if (path / CONFIG_FILE).is_file():
            return path
    return None


def next_version_dir(root: Path | None = None) -> Path:
    """Where the next training run writes: one above every existing version.

    In the default place, the agent's data folder is made (or tightened to) 0700 first:
    a value model is trained from the user's decisions, and is theirs alone.
    """
    if root is None:
        private_dir(agent_data_dir(), tighten=True)
    root = root or value_models_dir()
    versions = _versions(root)
    return root / f"v{(versions[-1][0] + 1) if versions else 1}"


def with_newest_value_model(settings: Settings, root: Path | None = None) -> Settings:
    """``settings`` whose Search turns use the newest trained model, unless one is configured."""
    mcts = settings.strategy_defaults.get("mcts", {})
    newest = None if mcts.get("value") else newest_value_model(root)
    if newest is None:
        return settings
    return replace(settings, strategy_defaults={**settings.strategy_defaults,
                                                "mcts": {**mcts, "value": str(newest)}})


def value_model_label(settings: Settings, default: str = "heuristic") -> str:
    """What guides Search turns by default: a model directory, or ``default`` (the search's
    own default: ``search.estimators.default_estimator``)."""
    return str(settings.strategy_defaults.get("mcts", {}).get("value") or default)


__all__ = ["CONFIG_FILE", "newest_value_model", "next_version_dir", "value_model_label", "value_models_dir",
           "with_newest_value_model"]
