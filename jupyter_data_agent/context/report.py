"""What of the live context reached the prompt, and what was cut (the sidebar's context gauge).

Truncation used to be silent: cells dropped from the left, outputs cut to a
few hundred characters, wide frames cut to 20 columns. A turn now reports it
in its statistics (``search.base.SearchStats.context``), so the user sees
how full the prompt was and what the model did not see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..kernel.inkernel.schema import FrameCut, SchemaCuts


@dataclass
class ContextReport:
    """How full the prompt was and what truncation removed, for one turn's first prompt."""

    # Tokens of the prompt as the backend counts them, against the prompt budget
    # (``max_prompt_tokens``: the model's context window less the generation length).
    prompt_tokens: int = 0
    window: int = 0
    # Notebook cells and exemplars dropped by left-truncation.
    cells_dropped: int = 0
    exemplars_dropped: int = 0
    # Outputs (or errors, tracebacks) of the cells shown that were cut to ``output_chars``.
    outputs_cut: int = 0
    # Schema, problem and preamble alone were over the budget (they are never dropped).
    over_budget: bool = False
    mentioned: list[str] = field(default_factory=list)
    frames_cut: list[FrameCut] = field(default_factory=list)

    def line(self) -> str:
        """One line for the ``%%agent`` summary: "context 1,365/3,000 tokens; cut: wide 20/30 columns"."""
        cuts = [f"{n} {what}" for n, what in ((self.cells_dropped, "cell(s)"),
                                             (self.exemplars_dropped, "example(s)"),
                                             (self.outputs_cut, "output(s)")) if n]
        cuts += [f"{f.name} {f.shown_columns}/{f.total_columns} columns" for f in self.frames_cut]
        text = f"context {self.prompt_tokens:,}/{self.window:,} tokens"
        if self.mentioned:
            text += "; in full: " + ", ".join(f"@{n}" for n in self.mentioned)
        return text + ("; cut: " + ", ".join(cuts) if cuts else "")


__all__ = ["ContextReport", "FrameCut", "SchemaCuts"]
