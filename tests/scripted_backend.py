"""A scripted generator for driving real searches over real kernel copies.

``ScriptedBackend`` is a real :class:`Backend`: it receives the prompt the
strategy built, reads the trajectory so far out of it (the thoughts of the
steps taken, the last observation) and answers with predetermined
thought + code texts and log-probabilities. A rule is either a function of
the :class:`Call` or a dict keyed by the tuple of thoughts on the path.
Also here: a real ipykernel + snapshot tree for tests, and a value table.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.results import Limits
from jupyter_data_agent.llm.base import Backend, Capabilities, Completion, Prompt, SamplingParams

_THOUGHT_RE = re.compile(r"^Thought:\s*(.*)$", re.M)


@dataclass
class Reply:
    text: str
    logprob: float | None = -0.5  # mean token log-probability (None: the backend has none)
    tokens: int = 10


def action(thought: str, code: str, logprob: float | None = -0.5) -> Reply:
    return Reply(f"Thought: {thought}\nAction:\n```python\n{code}\n```", logprob)


def final(thought: str, answer: str, logprob: float | None = -0.5) -> Reply:
    return Reply(f"Thought: {thought}\nFinal Answer: {answer}", logprob)


@dataclass
class Call:
    """One generate() call as the script sees it."""

    messages: list[dict]
    n: int
    index: int
    params: SamplingParams
    thoughts: tuple[str, ...] = ()
    observations: list[str] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return len(self.thoughts)

    @property
    def last_observation(self) -> str | None:
        return self.observations[-1] if self.observations else None


Rule = Callable[[Call], Sequence[Reply | str]]


class ScriptedBackend(Backend):
    name = "scripted"

    def __init__(self, rule: Rule | Mapping[tuple[str, ...], Sequence[Reply | str]],
                 default: Sequence[Reply | str] | None = None, *, on_call=None) -> None:
        if isinstance(rule, Mapping):
            table = dict(rule)

            def rule(call: Call, _t=table):
                if call.thoughts in _t:
                    return _t[call.thoughts]
                if default is None:
                    raise KeyError(f"no script for path {call.thoughts}")
                return default

        self.rule = rule
        self.on_call = on_call
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(chat=True, completion=False, logprobs=True, streaming=False)

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        messages = [{"role": m.role, "content": m.content} for m in prompt.messages or ()]
        thoughts, observations = [], []
        for m in messages[2:]:
            if m["role"] == "assistant":
                t = _THOUGHT_RE.search(m["content"])
                thoughts.append(t.group(1).strip() if t else "")
            elif m["content"].startswith("Observation:"):
                observations.append(m["content"][len("Observation:"):].strip())
        with self._lock:
            call = Call(messages, params.n, len(self.calls), params, tuple(thoughts), observations)
            self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        replies = [Reply(r) if isinstance(r, str) else r for r in self.rule(call)]
        out = []
        for i in range(params.n):
            r = replies[i % len(replies)]
            out.append(Completion(text=r.text,
                                  token_logprobs=None if r.logprob is None else [r.logprob] * r.tokens,
                                  finish_reason="stop", prompt_tokens=100, completion_tokens=r.tokens))
        return out


@dataclass
class TableValue:
    """A value estimator for tests: the value of a state is looked up by its last thought."""

    table: dict[str, float]
    default: float = 0.0
    name: str = "table"

    def estimate(self, states, stats=None) -> list[float]:
        return [self.table.get(s.steps[-1].thought if s.steps else "", self.default) for s in states]


def start_tree(cwd, *, timeout_s: float = 2.0, max_live: int = 16, setup: str = ""):
    """A real python3 kernel in ``cwd`` and a snapshot tree of it: (km, kc, tree)."""
    km, kc = start_kernel(cwd=cwd)
    if setup:
        reply = kc.execute_interactive(setup, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
    tree = SnapshotTree.from_blocking_client(kc, notebook_dir=str(cwd), max_live=max_live,
                                             limits=Limits(timeout_s=timeout_s))
    return km, kc, tree


def stop_tree(km, kc, tree) -> None:
    tree.close()
    stop_kernel(km, kc)


def exact_reward(expected: str):
    """Trajectory collection's reward for a scripted search: +1 for exactly ``expected``, else -1
    (the benchmarks' DABench scorer is theirs, tested with the bench)."""
    return lambda answer: 1.0 if answer == expected else -1.0
