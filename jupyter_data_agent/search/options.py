"""Typed knobs of one turn: per-strategy options and the prompt and sampling policies.

One definition per concept: the strategy names, their labels for the
sidebar and their defaults all live here, and an unknown field is an error
that names it (``extra="forbid"``). ``turn.resolve`` fills these from the
settings and the entry point's request; strategies only read them.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Annotated, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..config import declared_field
from ..prompts.arcade import OutputsMode


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PromptPolicy(_Model):
    """What goes into the prompt, and how it is sent."""

    max_prompt_tokens: int = declared_field("max_prompt_tokens")
    api_mode: Literal["auto", "chat", "completion"] = declared_field("api_mode")
    exemplars: bool = declared_field("exemplars")
    # Cell outputs in the prompt: "active" puts the active cell's outputs and
    # error in (Fix and Explain need them); "all" every cell's; "none" no output.
    outputs: OutputsMode = "active"
    output_chars: int = Field(200, ge=0)
    # Plots of the active cell shown to a vision model (at most this many; 0: none), each
    # resized to at most ``image_bytes``; text-only models get their summary either way.
    images: int = declared_field("max_images", 0)
    image_bytes: int = declared_field("max_image_bytes")


class SamplingPolicy(_Model):
    """Temperatures and lengths; ``temperature_for(n)`` is the one rule."""

    temperature: float = declared_field("temperature")  # one candidate
    sample_temperature: float = declared_field("sample_temperature")  # several candidates
    max_new_tokens: int = declared_field("max_new_tokens")
    seed: int | None = None

    def temperature_for(self, n: int) -> float:
        return self.sample_temperature if n > 1 else self.temperature


class TaskInfo(_Model):
    """A benchmark-style task's extra text (DABench constraints and answer format)."""

    constraints: str = ""
    format: str = ""
    files: tuple[str, ...] = ()
    task_id: str | None = None


class DirectOptions(_Model):
    """One candidate, written step by step; one repair if it raises."""

    label: ClassVar[str] = "Direct"
    summary: ClassVar[str] = "One candidate, step by step (fastest)."
    strategy: Literal["direct"] = "direct"
    repair: bool = True


class ExplainOptions(_Model):
    """A prose answer about the notebook (Explain this cell); no code is run."""

    label: ClassVar[str] = "Explain"
    summary: ClassVar[str] = "An answer in words about the active cell; no cell is inserted."
    strategy: Literal["explain"] = "explain"


class VoteOptions(_Model):
    """Several candidates, each run in a copy; the largest group of equal answers wins."""

    label: ClassVar[str] = "Vote"
    summary: ClassVar[str] = "Several candidates, run and voted on by their outputs."
    strategy: Literal["vote"] = "vote"
    samples: int = Field(5, ge=1)  # at most c.DataAgent.max_samples (turn.resolve)
    repair: bool = True
    probes: bool = declared_field("probes")  # evidence from each candidate's copy (kernel.probes)
    # Draw in rounds, and stop once the leading answer cannot be overtaken by the draws left, or its
    # posterior share passes this (1.0: only when it cannot be overtaken); see ``vote.should_stop``.
    adaptive: bool = declared_field("vote_adaptive")
    stop_posterior: float = declared_field("vote_stop_posterior")

class ReactOptions(_Model):
    """One thought-action-observation trajectory, each cell run before the next."""

    label: ClassVar[str] = "Agent"
    summary: ClassVar[str] = "Thinks, runs a cell, reads the output, and goes on (ReAct)."
    strategy: Literal["react"] = "react"
    max_turns: int = Field(10, ge=1)  # at most c.DataAgent.max_budget (turn.resolve)
    observation_chars: int = Field(2000, ge=100)
    max_copies: int | None = Field(None, ge=1)
    trajectory_path: str | None = None


class MCTSOptions(_Model):
    """JUPITER's value-guided tree search over executed steps."""

    label: ClassVar[str] = "Search"
    summary: ClassVar[str] = "Several whole candidates as the vote draws them, then more where they disagree."
    strategy: Literal["mcts"] = "mcts"
    # Search contains the vote (search.branching): this share of the budget (iterations x k
    # completions) is drawn as whole cells, as the vote draws them; the rest completes the steps
    # where they part. 0: JUPITER's tree alone (also when collecting trajectories).
    vote_share: float = Field(1 / 3, ge=0.0, le=1.0)
    # How sure the samples must be of a step (the posterior that it leads its runner-up) before the
    # branching keeps it and completes the steps after it (0.95: tuned on the lab's train split).
    commit: float = Field(0.95, gt=0.5, le=1.0)
    k: int = Field(3, ge=1)  # at most c.DataAgent.max_samples (turn.resolve)
    max_depth: int = Field(10, ge=1)
    iterations: int = Field(40, ge=1)  # at most c.DataAgent.max_budget (turn.resolve)
    max_errors: int = Field(3, ge=1)
    c_puct: float | None = None  # None: 0 at inference, 1.25 when collecting or without a value
    select: Literal["vote", "value"] = "vote"
    # The strategy lab's choices (docs/benchmarks.md, issue 27): select by the best value below a
    # step, not the mean; at inference, explore where the estimate is unsure; merge identical samples.
    backup: Literal["mean", "max"] = "max"
    unsure: float = Field(0.5, ge=0.0)
    merge: bool = True  # identical sibling samples become one node that counts them (mcts docstring)
    early_stop: bool = True
    early_stop_votes: int = Field(3, ge=1)
    early_stop_fraction: float = Field(2 / 3, gt=0.0, le=1.0)
    time_budget_s: float | None = Field(None, gt=0)
    token_budget: int | None = Field(None, gt=0)
    failure_value: float = -1.0
    observation_chars: int = Field(2000, ge=100)
    workers: int | None = Field(None, ge=1)
    trajectory_path: str | None = None
    value: str | None = None  # a value-model directory, "heuristic", "evidence" or "zero"
    probes: bool = declared_field("probes")  # evidence from each step's copy (kernel.probes)


class AnalysisOptions(_Model):
    """A plan of steps, each a cell run in a copy chained on the previous step's, reviewed as one change."""

    label: ClassVar[str] = "Analysis"
    summary: ClassVar[str] = ("A whole analysis: a plan, then one verified cell per step, "
                              "reviewed as one change.")
    strategy: Literal["analysis"] = "analysis"
    max_steps: int = Field(6, ge=1)  # at most c.DataAgent.max_budget (turn.resolve)
    samples: int = Field(1, ge=1)  # candidates per step: 1 direct, more a vote per step
    max_repairs: int = Field(2, ge=0)  # fixes per step that raised
    max_replans: int = Field(1, ge=0)  # times the rest of the plan may be planned again
    observation_chars: int = Field(1500, ge=100)


StrategyOptions = Annotated[
    Union[DirectOptions, ExplainOptions, VoteOptions, ReactOptions, MCTSOptions, AnalysisOptions],
    Field(discriminator="strategy"),
]

#: Every strategy by name, in the order the sidebar offers them.
OPTIONS_BY_STRATEGY: dict[str, type[_Model]] = {
    cls.model_fields["strategy"].default: cls
    for cls in (DirectOptions, VoteOptions, ReactOptions, MCTSOptions, AnalysisOptions, ExplainOptions)
}
STRATEGIES: tuple[str, ...] = tuple(OPTIONS_BY_STRATEGY)

#: The entry points' two generic knobs, per strategy: which option each one sets.
KNOBS: dict[str, dict[str, str]] = {
    "vote": {"samples": "samples"},
    "react": {"budget": "max_turns"},
    "mcts": {"samples": "k", "budget": "iterations"},
    "analysis": {"samples": "samples", "budget": "max_steps"},
}

_ADAPTER: TypeAdapter = TypeAdapter(StrategyOptions)


def strategy_options(data: dict) -> (DirectOptions | ExplainOptions | VoteOptions | ReactOptions | MCTSOptions
                                     | AnalysisOptions):
    """Validate ``{"strategy": name, ...}``; errors name the unknown strategy or field."""
    name = data.get("strategy")
    if name not in OPTIONS_BY_STRATEGY:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")
    return _ADAPTER.validate_python(data)


def short_errors(error: ValidationError, *, skip: Container = (), prefix: str = "",
                 empty: str = "body") -> str:
    """Field and reason of each problem, without the input (it may be large or secret).

    ``skip``: location parts left out (a union's tag); ``prefix``: put before each
    field (``--`` for the magic's flags); ``empty``: the name of a top-level problem.
    """
    items = error.errors(include_url=False, include_input=False)
    parts = []
    for item in items[:8]:
        loc = ".".join(str(p) for p in item.get("loc", ()) if p not in skip)
        parts.append(f"{prefix + loc if loc else empty}: {item.get('msg', 'invalid')}")
    if len(items) > 8:
        parts.append(f"... and {len(items) - 8} more")
    return "; ".join(parts)
