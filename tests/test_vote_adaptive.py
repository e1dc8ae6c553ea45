"""The adaptive vote: its exact stop rule, and a real vote over real copies that stops early.

The rule is checked against brute force (every way the remaining draws could
fall) and against the Beta posterior computed by numerical integration; the
run checks what is drawn, what is reported unspent, and the candidates' checks.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.options import PromptPolicy, VoteOptions
from jupyter_data_agent.search.vote import lead_posterior, next_draw, should_stop
from tests.scripted_backend import ScriptedBackend, start_tree, stop_tree


def overtakable(classes: list[int], remaining: int) -> bool:
    """Brute force: can some way of spending the remaining draws tie or pass the leader?"""
    lead = classes[0]
    others = classes[1:] + [0]  # a new class may also appear
    for spend in itertools.product(range(len(others)), repeat=remaining):
        counts = list(others)
        for j in spend:
            counts[j] += 1
        if max(counts) >= lead:
            return True
    return False


@pytest.mark.parametrize("classes,remaining", [
    ([3], 2), ([3], 3), ([2, 1], 0), ([2, 1], 1), ([4, 1, 1], 2), ([4, 1, 1], 3), ([2, 2], 1), ([5, 2], 2),
    ([1], 0), ([3, 3], 0)])
def test_cannot_be_overtaken_is_exact(classes, remaining):
    assert should_stop(classes, remaining, 1.0) == (not overtakable(classes, remaining))


@pytest.mark.parametrize("a,b", [(0, 0), (1, 0), (3, 0), (4, 0), (4, 2), (7, 3), (5, 5)])
def test_the_posterior_is_the_beta_integral(a, b):
    theta = np.linspace(0, 1, 400_001)
    density = theta ** a * (1 - theta) ** b
    numeric = density[theta > 0.5].sum() / density.sum()
    assert lead_posterior(a, b) == pytest.approx(numeric, abs=1e-5)


def test_the_posterior_rule_and_the_draw_sizes():
    assert lead_posterior(4, 0) == 31 / 32 and lead_posterior(3, 0) == 15 / 16
    assert should_stop([4], 4, 0.95) and not should_stop([3], 5, 0.95)
    assert not should_stop([4], 4, 1.0)  # 1.0: only "cannot be overtaken"
    assert not should_stop([], 3, 0.95) and should_stop([], 0, 0.95)
    # The first round draws the fewest samples that could stop: 4 of 8 (all agree: 31/32 >= 0.95).
    assert next_draw([], 8, 0.95) == 4
    assert next_draw([], 8, 1.0) == 5  # 5 agreeing with 3 left cannot be overtaken
    assert next_draw([3, 1], 4, 0.95) == 2  # 5 vs 1 with 2 left cannot be overtaken
    assert next_draw([2, 2], 1, 0.95) == 1


VOTE_ON = "```python\n# Step 1: Double it\nbase * 2\n```"
OTHER = "```python\n# Step 1: Add one\nbase + 1\n```"
THIRD = "```python\n# Step 1: Square it\nbase * base\n```"
DROPS = "```python\n# Step 1: Keep the big ones\ntable = table[table['x'] > 100]\nlen(table)\n```"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    km, kc, t = start_tree(tmp_path_factory.mktemp("adaptive"), timeout_s=20, setup=(
        "import pandas as pd\nbase = 21\ntable = pd.DataFrame({'x': [1, 2, 3]})"))
    yield t
    stop_tree(km, kc, t)


def run_vote(tree, replies_per_call, **options):
    backend = ScriptedBackend(lambda call: replies_per_call[min(call.index, len(replies_per_call) - 1)])
    request = TurnRequest(intent="How many is twice the base?", context=NotebookContext(),
                          options=VoteOptions(**{"adaptive": True, **options}),
                          prompt=PromptPolicy(max_prompt_tokens=4000))
    result = get_strategy("vote").run(request, RunContext(backend=backend, executor=tree.root, events=lambda e: None))
    return result, backend


def test_a_unanimous_vote_stops_at_half_the_samples(tree):
    result, backend = run_vote(tree, [[VOTE_ON]], samples=8)
    assert [c.n for c in backend.calls] == [4]
    assert result.stats.unspent == 4 and len(result.candidates) == 4
    assert result.stats.classes == [4]
    assert result.chosen.result.ok
    checks = {c.name: c for c in result.chosen.checks}
    assert all(checks[p].passed for p in ("rows", "nan", "dtype", "empty", "index", "range"))
    assert checks["type"].passed and checks["agree"].passed and checks["agree"].detail == "4 of 4 answers agree"


def test_a_split_vote_draws_until_it_is_decided(tree):
    # Round 1: 4 samples split 2 / 2; each later round draws what could decide it.
    result, backend = run_vote(tree, [[VOTE_ON, OTHER], [VOTE_ON], [VOTE_ON], [VOTE_ON]], samples=8)
    drawn = sum(c.n for c in backend.calls)
    assert backend.calls[0].n == 4
    assert drawn + result.stats.unspent == 8
    lead, second = result.stats.classes[:2]
    assert lead - second > result.stats.unspent or lead_posterior(lead, second) >= 0.95
    assert "base * 2" in result.chosen.code


def test_threshold_one_spends_until_no_overtake(tree):
    result, backend = run_vote(tree, [[VOTE_ON]], samples=8, stop_posterior=1.0)
    assert [c.n for c in backend.calls] == [5] and result.stats.unspent == 3


def test_a_candidate_that_empties_a_table_fails_its_check(tree):
    result, _ = run_vote(tree, [[DROPS, VOTE_ON], [THIRD]], samples=3)  # drawn 2, then 1
    by_code = {c.code.split("\n")[1]: c for c in result.candidates}
    dropped = {c.name: c for c in by_code["table = table[table['x'] > 100]"].checks}
    assert not dropped["empty"].passed and "0 rows" in dropped["empty"].detail
    assert all(c.passed for c in by_code["base * 2"].checks if c.name != "agree")
    assert not dropped["agree"].passed  # 1 of 3
    assert by_code["base * 2"].to_json()["checks"][0] == {"name": "rows", "passed": True, "detail": ""}


def test_not_adaptive_draws_every_sample_at_once(tree):
    result, backend = run_vote(tree, [[VOTE_ON]], samples=8, adaptive=False)
    assert [c.n for c in backend.calls] == [8] and result.stats.unspent == 0


def test_without_probes_only_the_answer_checks(tree):
    result, _ = run_vote(tree, [[VOTE_ON]], samples=2, probes=False)
    assert [c.name for c in result.chosen.checks] == ["type", "plausible", "agree"]


RAISES = "```python\n# Step 1: Divide it\nbase / 0\n```"


def test_a_decided_round_does_not_pay_for_repairs(tree):
    # 3 of 4 agree and one raised: with 2 samples left nothing can overtake 3, so no fix is asked for.
    result, backend = run_vote(tree, [[VOTE_ON, VOTE_ON, VOTE_ON, RAISES], [VOTE_ON]], samples=6)
    assert [c.n for c in backend.calls] == [4] and result.stats.unspent == 2
    assert not any(c.repaired for c in result.candidates) and result.stats.classes == [3]
    # Undecided (3 agree, 4 left): the raised sample is repaired before drawing more, its fix votes.
    result, backend = run_vote(tree, [[VOTE_ON, VOTE_ON, VOTE_ON, RAISES], [VOTE_ON]], samples=8)
    assert [c.n for c in backend.calls] == [4, 1] and result.stats.unspent == 4
    fixed = [c for c in result.candidates if c.repaired]
    assert len(fixed) == 1 and result.candidates.index(fixed[0]) == 4 and result.stats.classes == [4]
    # Not adaptive: every raised sample is repaired at once, as before.
    result, backend = run_vote(tree, [[VOTE_ON, VOTE_ON, VOTE_ON, RAISES], [VOTE_ON]], samples=4, adaptive=False)
    assert [c.n for c in backend.calls] == [4, 1] and sum(c.repaired for c in result.candidates) == 1
