"""Every default of a turn, once: settings + an entry point's ask -> a TurnSpec."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..config import Settings, resolve_settings, setting_of
from ..search.options import (
    KNOBS,
    OPTIONS_BY_STRATEGY,
    STRATEGIES,
    PromptPolicy,
    SamplingPolicy,
    short_errors,
    strategy_options,
)
from .spec import CopyPolicy, TurnAsk, TurnSpec, check_limits


def strategy_name(ask: TurnAsk) -> str:
    """The asked strategy; without one, several samples mean a vote."""
    name = ask.strategy or ("vote" if (ask.samples or 1) > 1 else "direct")
    if name not in OPTIONS_BY_STRATEGY:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")
    return name


#: The settings that bound each knob, and where the user changes them.
KNOB_LIMITS = {"samples": "max_samples", "budget": "max_budget"}


def configured(name: str, settings: Settings) -> dict[str, Any]:
    """The options of strategy ``name`` declared from a setting (``config.declared_field``), as set here."""
    return {option: getattr(settings, setting) for option, info in OPTIONS_BY_STRATEGY[name].model_fields.items()
            if (setting := setting_of(info)) is not None}


def _options(name: str, settings: Settings, ask: TurnAsk):
    knobs = {option: getattr(ask, knob) for knob, option in KNOBS.get(name, {}).items()
             if getattr(ask, knob) is not None}
    # The settings, then the strategy's defaults (c.DataAgent.strategy_defaults), then the ask.
    fields: dict[str, Any] = {**configured(name, settings), **settings.strategy_defaults.get(name, {}),
                              **knobs, **ask.options, "strategy": name}
    try:
        options = strategy_options(fields)
    except ValidationError as error:
        raise ValueError(f"Invalid {name} options: "
                         f"{short_errors(error, skip=OPTIONS_BY_STRATEGY, empty='options')}") from None
    # What the user asked for beyond the limit is refused; a default beyond it is lowered to it.
    for knob, option in KNOBS.get(name, {}).items():
        limit = getattr(settings, KNOB_LIMITS[knob])
        value = getattr(options, option)
        if value <= limit:
            continue
        if option in knobs or option in ask.options:
            raise ValueError(f"{knob} is {value}; at most {limit} on this server "
                             f"(c.DataAgent.{KNOB_LIMITS[knob]}).")
        options = options.model_copy(update={option: limit})
    return options


def check_settings(settings: Settings) -> Settings:
    """Fail at start-up, naming the key, on a typo in ``strategy_defaults`` or ``snapshot_limits``."""
    check_limits(settings.snapshot_limits)
    for name in settings.strategy_defaults:
        resolve(settings, TurnAsk(intent="-", strategy=name))
    return settings


def load_settings(config: Any = None, env: dict[str, str] | None = None,
                  dirs: list[str] | None = None) -> Settings:
    """``config.resolve_settings``, checked against the turn's options: what entry points start from."""
    return check_settings(resolve_settings(config, env=env, dirs=dirs))


def catalog(settings: Settings) -> list[dict]:
    """Each strategy for the sidebar: name, label, summary, and what its knobs default to here."""
    out = []
    for name, cls in OPTIONS_BY_STRATEGY.items():
        options = _options(name, settings, TurnAsk(intent="-"))
        knobs = {knob: getattr(options, field) for knob, field in KNOBS.get(name, {}).items()}
        out.append({"name": name, "label": cls.label, "summary": cls.summary,  # type: ignore[attr-defined]
                    "samples": knobs.get("samples"), "budget": knobs.get("budget")})
    return out


def resolve(settings: Settings, ask: TurnAsk) -> TurnSpec:
    """The turn the product runs for ``ask``; the magic, server and benchmarks all call this."""
    name = strategy_name(ask)
    options = _options(name, settings, ask)
    temperature = settings.temperature if ask.temperature is None else ask.temperature
    sample_temperature = settings.sample_temperature if ask.temperature is None else ask.temperature
    execute = ask.execute and name != "explain"
    return TurnSpec(
        intent=ask.intent,
        options=options,
        prompt=PromptPolicy(
            max_prompt_tokens=settings.max_prompt_tokens,
            api_mode=settings.api_mode,
            exemplars=settings.exemplars if ask.exemplars is None else ask.exemplars,
            images=settings.max_images if settings.send_images else 0,
            image_bytes=settings.max_image_bytes,
        ),
        sampling=SamplingPolicy(
            temperature=temperature,
            sample_temperature=sample_temperature,
            max_new_tokens=settings.max_new_tokens,
            seed=ask.seed,
        ),
        task=ask.task,
        copies=CopyPolicy(
            mode="auto" if execute else "none",
            confinement=settings.confinement,
            limits=settings.snapshot_limits,
            reason=ask.no_exec_reason or ("" if execute else "this strategy runs no code"),
        ),
    )
