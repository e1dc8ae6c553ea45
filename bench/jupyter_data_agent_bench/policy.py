"""A simulated policy: a model of controlled quality on tasks with a reference solution.

Measurement only (the strategy lab): a real :class:`~..llm.base.Backend`, so
every strategy runs on it unchanged through the product's pipeline. At each
step it proposes the reference's next step with probability ``p``, otherwise
one of a small pool of plausible wrong steps made by mutating the reference
step (wrong column, wrong aggregation or sort order, off by one, NaN handling
dropped, wrong rounding, a runtime error). The pool is fixed per step, so
wrong answers repeat and cluster as real models' do. Log-probabilities are
informative but noisy: a right step's mean log-prob is drawn around
``logprob_right``, a wrong one's around ``logprob_wrong``, both with
``logprob_noise``.

It answers in every format the product uses: the ARCADE step-by-step cell
(direct, vote and Search's vote share: the whole solution, each step right
with probability ``p``; Search's continuations keep the steps they were
given, ``generate.continuation_plan``, and draw the rest),
JUPITER's ReAct turns (react, mcts: the step after the ones whose
observations were not errors; once every step ran, ``Final Answer:`` with
what the last step printed) and the analysis's plan and steps (the plan is
the reference's steps; each step, or its fix, is drawn like a ReAct step).
Deterministic under ``seed``.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from jupyter_data_agent.llm.base import Backend, Capabilities, Completion, Prompt, SamplingParams
from jupyter_data_agent.prompts import UnparsableOutput
from jupyter_data_agent.prompts.analysis import PLAN_SYSTEM, STEP_SYSTEM
from jupyter_data_agent.prompts.parse import Step, parse_chat
from jupyter_data_agent.prompts.react import SYSTEM as REACT_SYSTEM
from jupyter_data_agent.search.generate import CONTINUE_WORDS

from .references import Reference, RefStep


@dataclass(frozen=True)
class PolicyConfig:
    p: float  # probability that a proposed step is the reference's
    seed: int = 0
    pool: int = 3  # wrong variants per step
    logprob_right: float = -0.25
    logprob_wrong: float = -0.55
    logprob_noise: float = 0.2


_AGGREGATIONS = [("mean", "median"), ("sum", "mean"), ("std", "var"), ("max", "min"), ("count", "nunique"),
                 ("median", "mean"), ("idxmax", "idxmin"), ("nlargest", "nsmallest")]
_COMPARISONS = [(">=", ">"), ("<=", "<"), (" > ", " >= "), (" < ", " <= ")]


def _wrong_column(code: str, rng: random.Random, columns: list[str]) -> str | None:
    used = [c for c in columns if f"'{c}'" in code or f'"{c}"' in code]
    others = [c for c in columns if c not in used]
    if not used or not others:
        return None
    old, new = rng.choice(used), rng.choice(others)
    return code.replace(f"'{old}'", f"'{new}'").replace(f'"{old}"', f'"{new}"')


def _wrong_aggregation(code: str, rng: random.Random, _columns) -> str | None:
    options = [(a, b) for a, b in _AGGREGATIONS if f".{a}(" in code]
    if not options:
        return None
    a, b = rng.choice(options)
    return code.replace(f".{a}(", f".{b}(", 1)


def _wrong_order(code: str, rng: random.Random, _columns) -> str | None:
    for a, b in (("ascending=False", "ascending=True"), ("ascending=True", "ascending=False")):
        if a in code:
            return code.replace(a, b, 1)
    if ".sort_values(" in code:
        return code.replace(".sort_values(", ".sort_values(ascending=False, by=", 1) \
            if ".sort_values(by=" not in code and ".sort_values('" in code else None
    return None


def _off_by_one(code: str, rng: random.Random, _columns) -> str | None:
    options = [(a, b) for a, b in _COMPARISONS if a in code]
    if options:
        a, b = rng.choice(options)
        return code.replace(a, b, 1)
    numbers = [m for m in re.finditer(r"(?<![\w.])(\d+)(?![\w.])", code) if m.group(1) not in ("0", "1", "2")]
    if not numbers:
        return None
    m = rng.choice(numbers)
    return code[: m.start()] + str(int(m.group(1)) + 1) + code[m.end():]


def _no_nan_handling(code: str, rng: random.Random, _columns) -> str | None:
    if ".dropna()" in code:
        return code.replace(".dropna()", "", 1)
    m = re.search(r"\.fillna\([^()]*\)", code)
    return code[: m.start()] + code[m.end():] if m else None


def _wrong_rounding(code: str, rng: random.Random, _columns) -> str | None:
    m = re.search(r":\.(\d)f", code)
    if m:
        digits = int(m.group(1))
        return code[: m.start()] + f":.{digits + 1 if digits < 2 else digits - 1}f" + code[m.end():]
    m = re.search(r"round\(([^()]*(?:\([^()]*\))?[^()]*),\s*(\d)\)", code)
    if m:
        return code[: m.start(2)] + str(int(m.group(2)) + 1) + code[m.end(2):]
    return None


def _runtime_error(code: str, rng: random.Random, columns: list[str]) -> str:
    used = [c for c in columns if f"'{c}'" in code]
    if used:  # a misspelled column: KeyError, as a model's typo gives
        old = rng.choice(used)
        return code.replace(f"'{old}'", f"'{old.lower() if old != old.lower() else old.upper()}_'", 1)
    lines = code.splitlines() or [""]
    return "\n".join(lines[:-1] + [lines[-1] + "  # done", "result_value.describe()"])


OPERATORS = (_wrong_column, _wrong_aggregation, _wrong_order, _off_by_one, _no_nan_handling, _wrong_rounding)


def wrong_steps(step: RefStep, columns: list[str], pool: int, rng: random.Random) -> list[RefStep]:
    """Up to ``pool`` distinct plausible wrong versions of ``step`` (a runtime error at least)."""
    out: list[str] = []
    operators = list(OPERATORS)
    rng.shuffle(operators)
    for op in operators:
        code = op(step.code, rng, columns)
        if code and code != step.code and code not in out:
            out.append(code)
        if len(out) >= pool - 1:
            break
    out.append(_runtime_error(step.code, rng, columns))
    return [RefStep(step.thought, c) for c in out[:pool]]


class SimulatedPolicy(Backend):
    """Plays a model of per-step accuracy ``p`` on one task (see the module docstring)."""

    name = "simulated"

    def __init__(self, reference: Reference, config: PolicyConfig, columns: list[str] | None = None) -> None:
        self.reference = reference
        self.config = config
        rng = random.Random(f"{config.seed}/{reference.id}/pools")
        self.pools = [wrong_steps(s, columns or [], config.pool, rng) for s in reference.steps]
        self.calls = 0

    @property
    def model(self) -> str:
        return f"simulated(p={self.config.p})"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(chat=True, completion=False, logprobs=True)

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4) if text else 0

    # -- one step -------------------------------------------------------------
    def _step(self, k: int, rng: random.Random) -> tuple[RefStep, bool]:
        if rng.random() < self.config.p:
            return self.reference.steps[k], True
        return rng.choice(self.pools[k]), False

    def _completion(self, text: str, right: bool, rng: random.Random) -> Completion:
        c = self.config
        mean = rng.gauss(c.logprob_right if right else c.logprob_wrong, c.logprob_noise)
        n = self.count_tokens(text)
        return Completion(text=text, token_logprobs=[min(0.0, mean)] * n, finish_reason="stop",
                          prompt_tokens=0, completion_tokens=n)

    def _cell(self, rng: random.Random, kept: list[Step] | None = None) -> Completion:
        """The ARCADE format: the whole solution in one cell, each step drawn; a continuation
        (Search's branches) keeps the steps it was given and draws the rest."""
        parts, right = [], True
        kept = [s for s in kept or [] if s.number > 0][: len(self.reference.steps)]
        for s in kept:
            right = right and s.code.strip() == self.reference.steps[s.number - 1].code.strip() \
                if s.number <= len(self.reference.steps) else False
            parts.append(f"# Step {s.number}: {s.explanation}\n{s.code}")
        for k in range(len(kept), len(self.reference.steps)):
            step, ok = self._step(k, rng)
            right = right and ok
            parts.append(f"# Step {k + 1}: {step.thought}\n{step.code}")
        return self._completion("```python\n" + "\n".join(parts) + "\n```", right, rng)

    def _react(self, messages: list[dict], rng: random.Random) -> Completion:
        """The next ReAct step after the steps whose observations were not errors."""
        done, last_ok = 0, ""
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or "Final Answer:" in m["content"]:
                continue
            obs = messages[i + 1]["content"] if i + 1 < len(messages) else ""
            if re.search(r"^Error: ", obs, re.M) is None and "Your reply had neither" not in obs:
                done += 1
                last_ok = obs.removeprefix("Observation:").strip()
        steps = len(self.reference.steps)
        tries = sum(1 for m in messages if m["role"] == "assistant")
        if done >= steps or tries >= 2 * steps + 2:
            return self._completion(f"Thought: The last step printed the answer.\nFinal Answer: {last_ok}",
                                    True, rng)
        step, ok = self._step(done, rng)
        return self._completion(f"Thought: {step.thought}\nAction:\n```python\n{step.code}\n```", ok, rng)

    def _analysis(self, messages: list[dict], rng: random.Random) -> Completion:
        """The analysis's plan (the reference's steps), a revised plan (the same steps from the one
        that broke), or step k / its fix, drawn like a ReAct step."""
        steps = self.reference.steps
        if messages[0]["content"].startswith(PLAN_SYSTEM[:60]):
            return self._completion("\n".join(f"{i}. {s.thought}" for i, s in enumerate(steps, 1)), True, rng)
        last = messages[-1]["content"]
        m = re.search(r"(?:Write|Fix) step (\d+)|Step (\d+) cannot be fixed", last)
        k = min(len(steps), int((m.group(1) or m.group(2)) if m else 1))
        if "cannot be fixed as planned" in last:
            return self._completion("Revised plan:\n" + "\n".join(
                f"{i}. {s.thought}" for i, s in enumerate(steps[k - 1:], 1)), True, rng)
        step, ok = self._step(k - 1, rng)
        return self._completion(f"{step.thought}\n```python\n{step.code}\n```", ok, rng)

    # -- Backend ----------------------------------------------------------------
    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        self.calls += 1
        messages = [{"role": m.role, "content": m.content} for m in prompt.messages or ()] \
            or [{"role": "user", "content": prompt.text or ""}]
        react = any(m["role"] == "system" and m["content"] == REACT_SYSTEM for m in messages)
        analysis = messages[0]["role"] == "system" and (messages[0]["content"] == STEP_SYSTEM
                                                        or messages[0]["content"].startswith(PLAN_SYSTEM[:60]))
        digest = hashlib.sha256(repr((messages, params.seed, self.calls)).encode()).hexdigest()[:16]
        kept = continued_steps(messages[-1]["content"]) if not react and not analysis else None
        out = []
        for i in range(max(1, params.n)):
            rng = random.Random(f"{self.config.seed}/{self.reference.id}/{digest}/{i}")
            out.append(self._react(messages, rng) if react else self._analysis(messages, rng) if analysis
                       else self._cell(rng, kept))
        return out


def continued_steps(text: str) -> list[Step] | None:
    """The steps a continuation prompt (``generate.continuation_plan``, chat) asks to keep."""
    at = text.rfind(CONTINUE_WORDS.split("{")[0])
    if at < 0:
        return None
    try:
        return parse_chat(text[at:]).steps
    except UnparsableOutput:
        return None


def table_columns(path) -> list[str]:
    """The CSV's header, for the wrong-column mutation."""
    import csv

    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        return [c for c in next(csv.reader(f), []) if c]


__all__ = ["OPERATORS", "PolicyConfig", "SimulatedPolicy", "table_columns", "wrong_steps"]
