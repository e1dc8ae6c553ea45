"""The confinement policy: may candidates run in these kernel copies?

One decision for every entry point (server, magic, benchmarks). With
``require`` (the default) a turn whose copies are not confined by every layer
generates code but runs none of it, and says why and how to switch; with
``warn`` it runs them and lists what is missing. The result is shown as a
badge per turn in the sidebar and as one line under ``%%agent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..results import JSONFields, Protections

POLICIES = ("require", "warn")
SWITCH_HINT = ("set c.DataAgent.confinement = 'warn' (or JUPYTER_DATA_AGENT_CONFINEMENT=warn) "
               "to run candidates with the layers that are available")


#: ``Confinement.transport`` in words (``kernel.handle``: what each handle's copies travel over).
TRANSPORT_WORDS = {
    "local": "copies: local",
    "kernel channel": "copies: over the kernel channel",
    "in process": "copies: local, forked by the kernel itself",
    "replay": "copies: a replay kernel on the server's machine",
    "none": "copies: none",
}


@dataclass
class Confinement(JSONFields):
    """The policy applied to one turn's copies (wire form: ``to_json``)."""

    policy: str
    status: str  # "confined" | "partial" | "not_executed"
    execute: bool
    message: str
    layers: list[dict] = field(default_factory=list)  # {name, on, detail}
    missing: list[str] = field(default_factory=list)
    # What the copies travel over (``turn.prepare``): where they run, said on the badge.
    transport: str = ""

    def where(self) -> str:
        """"copies: local" / "copies: over the kernel channel"... ("" before copies were asked for)."""
        return TRANSPORT_WORDS.get(self.transport, "")

    @classmethod
    def from_json(cls, d: dict | None) -> "Confinement | None":  # type: ignore[override]
        return super().from_json(d) if d else None

    def line(self) -> str:
        """One line for the magic's output or a log."""
        label = {"confined": "confined", "partial": "partially confined",
                 "not_executed": "not executed"}[self.status]
        where = f" ({self.where()})" if self.where() else ""
        return f"kernel copies: {label}{where} — {self.message}"


def check_policy(policy: str) -> str:
    policy = (policy or "require").strip().lower()
    if policy not in POLICIES:
        raise ValueError(f"Unknown confinement policy {policy!r}: use 'require' or 'warn'.")
    return policy


def _missing_text(protections: Protections) -> str:
    return "; ".join(f"{m} ({protections.reasons.get(m, 'not available here')})"
                     for m in protections.missing())


def decide(protections: Protections | None, policy: str = "require",
           unavailable: str = "") -> Confinement:
    """Apply ``policy`` to the copies' protections.

    The verdict is sent before any candidate runs (and stored after): its words are in the
    present tense, true at both times.

    ``protections`` is None when no copy could be made (``unavailable`` says
    why, e.g. no kernel or fork refused): nothing can run either way.
    """
    policy = check_policy(policy)
    if protections is None:
        why = unavailable or "no kernel copy could be made"
        return Confinement(policy, "not_executed", False,
                           f"candidates were not run before you see them: {why}.")
    layers = protections.layers()
    missing = protections.missing()
    if not missing:
        return Confinement(policy, "confined", True,
                           "candidates run in fully confined copies of your kernel.",
                           layers, missing)
    if policy == "warn":
        return Confinement(policy, "partial", True,
                           "candidates run in copies missing: " + _missing_text(protections)
                           + ". Candidate code may reach what those layers guard.",
                           layers, missing)
    return Confinement(policy, "not_executed", False,
                       "candidates were generated but not run, because kernel copies cannot be "
                       "fully confined here (missing: " + _missing_text(protections) + "). To run "
                       "them anyway, " + SWITCH_HINT + ".", layers, missing)
