"""What an entry point asks for, and the fully resolved turn.

``TurnAsk`` is the little an entry point knows (the sidebar's chooser, the
magic's flags, a benchmark's command line); ``TurnSpec`` is everything the
pipeline needs, with no default left open. ``turn.resolve`` turns one into
the other. Both refuse unknown fields, naming them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import declared_field
from ..kernel.results import Limits
from ..search.options import PromptPolicy, SamplingPolicy, StrategyOptions, TaskInfo


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_limits(values: dict[str, Any], where: str = "snapshot_limits") -> dict[str, Any]:
    """``values`` if every key is a field of ``kernel.results.Limits``; else a ValueError naming it."""
    known = {f.name for f in dataclasses.fields(Limits)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{where}: unknown limit(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(sorted(known))}")
    return dict(values)


class CopyPolicy(_Model):
    """Where candidates run: a fork of the kernel, else a replay kernel, else nowhere."""

    mode: Literal["auto", "fork", "replay", "none"] = "auto"
    confinement: Literal["require", "warn"] = "require"
    limits: dict[str, Any] = Field(default_factory=dict)
    max_live: int = Field(16, ge=1)
    # A replay copy is a whole kernel (start + the notebook's runtime): far fewer of them.
    max_replay_kernels: int = Field(4, ge=1)
    # Why copies are off for this turn (mode "none"), in the user's words.
    reason: str = ""

    @field_validator("limits")
    @classmethod
    def _known_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_limits(value)

    def kernel_limits(self) -> Limits:
        return Limits.from_json(self.limits)


class TurnAsk(_Model):
    """An entry point's request; ``None`` means "the configured default"."""

    intent: str
    strategy: str | None = None
    # Upper bounds: the settings' max_samples / max_budget, checked by turn.resolve.
    samples: int | None = Field(None, ge=1)
    budget: int | None = Field(None, ge=1)
    temperature: float | None = declared_field("temperature", None)
    seed: int | None = None
    exemplars: bool | None = None
    # False: candidates are not run (``--no-exec``, ``use_live_state: false``).
    execute: bool = True
    no_exec_reason: str = ""
    # Strategy-specific options by name (a benchmark's ``--option k=v``).
    options: dict[str, Any] = Field(default_factory=dict)
    task: TaskInfo = Field(default_factory=TaskInfo)


class TurnSpec(_Model):
    """One turn, fully resolved: the strategy's options and every policy."""

    intent: str
    options: StrategyOptions
    prompt: PromptPolicy
    sampling: SamplingPolicy
    task: TaskInfo = Field(default_factory=TaskInfo)
    copies: CopyPolicy = Field(default_factory=CopyPolicy)

    @property
    def strategy(self) -> str:
        return self.options.strategy
