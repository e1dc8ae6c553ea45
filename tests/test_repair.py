"""The repair step of ``direct`` and ``vote``, over real kernel copies.

A cell that raised gets one repair (the model sees the error); a cell the
copy's wall-clock timeout stopped does not: a repair would run a close copy
of it again, and a 60 s timeout made a 120 s turn.
"""

from __future__ import annotations

import time

import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.options import DirectOptions, PromptPolicy, VoteOptions
from tests.scripted_backend import ScriptedBackend, start_tree, stop_tree

TIMEOUT_S = 1.5
SLOW = "```python\n# Step 1: Wait for the data\nimport time\ntime.sleep(30)\nbase\n```"
RAISES = "```python\n# Step 1: Read the missing column\nmissing_name * 2\n```"
FIXED = "```python\n# Step 1: Use the right name\nbase * 2\n```"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    km, kc, t = start_tree(tmp_path_factory.mktemp("repair"), timeout_s=TIMEOUT_S, setup="base = 21")
    yield t
    stop_tree(km, kc, t)


def _request(options) -> TurnRequest:
    return TurnRequest(intent="What is twice the base?", context=NotebookContext(), options=options,
                       prompt=PromptPolicy(max_prompt_tokens=4000))


def _run(tree, options, replies: list[list[str]]):
    """Run the strategy; the backend's n-th call gets the samples ``replies[n]``."""
    backend = ScriptedBackend(lambda call: replies[min(call.index, len(replies) - 1)])
    events = []
    started = time.monotonic()
    result = get_strategy(options.strategy).run(
        _request(options), RunContext(backend=backend, executor=tree.root, events=events.append))
    return result, backend, events, time.monotonic() - started


def test_a_timed_out_candidate_is_not_repaired(tree):
    result, backend, events, took = _run(tree, DirectOptions(), [[SLOW], [FIXED]])
    assert len(backend.calls) == 1  # no repair prompt was sent
    assert len(result.candidates) == 1 and result.stats.executions == 1
    chosen = result.chosen
    assert chosen.result.status == "timeout" and not chosen.repaired
    reason = chosen.meta["not_repaired"]
    assert reason.startswith("Not repaired: it was stopped by the timeout limit after ")
    assert "a fix would run it again" in reason
    assert chosen.to_json()["meta"]["not_repaired"] == reason  # it reaches the sidebar
    assert any("not repairing it" in e.message for e in events if e.kind == "progress")
    # One timeout, not two (plus the time to start and end a copy).
    assert took < 2 * TIMEOUT_S + 5


def test_a_candidate_that_raised_is_still_repaired(tree):
    result, backend, _, _ = _run(tree, DirectOptions(), [[RAISES], [FIXED]])
    assert len(backend.calls) == 2
    assert "NameError" in backend.calls[1].messages[-1]["content"]  # the error went back to the model
    assert result.chosen.repaired and result.chosen.result.ok
    assert "not_repaired" not in result.candidates[0].meta


def test_vote_does_not_repair_its_timed_out_samples(tree):
    result, backend, _, _ = _run(tree, VoteOptions(samples=2), [[SLOW, FIXED]])
    assert len(backend.calls) == 1
    slow, fine = result.candidates
    assert slow.result.status == "timeout" and "not_repaired" in slow.meta
    assert fine.result.ok and result.chosen is fine
