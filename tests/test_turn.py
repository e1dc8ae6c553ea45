"""The one turn pipeline: resolve, open_copies and run_turn, as every entry point calls them."""

from __future__ import annotations

import asyncio
import time

import pytest
from traitlets.config import Config

from jupyter_data_agent.config import Settings
from jupyter_data_agent.context.model import Cell, NotebookContext
from jupyter_data_agent.llm.base import Backend, Capabilities, Completion
from jupyter_data_agent.search.options import STRATEGIES, MCTSOptions, VoteOptions
from jupyter_data_agent.turn import CopyPolicy, TurnAsk, open_copies, replay_cells, resolve
from jupyter_data_agent.turn.resolve import load_settings

SETTINGS = Settings(backend="openai", temperature=0.1, sample_temperature=0.9, max_new_tokens=77)


def test_every_default_comes_from_the_settings_once():
    spec = resolve(SETTINGS, TurnAsk(intent="q"))
    assert spec.strategy == "direct" and spec.sampling.temperature_for(1) == 0.1
    assert spec.sampling.max_new_tokens == 77 and spec.prompt.outputs == "active"
    vote = resolve(SETTINGS, TurnAsk(intent="q", samples=3))
    assert vote.options == VoteOptions(samples=3) and vote.sampling.temperature_for(3) == 0.9
    fixed = resolve(SETTINGS, TurnAsk(intent="q", strategy="vote", temperature=0.0))
    assert fixed.sampling.temperature_for(5) == 0.0 and fixed.options.samples == 5
    mcts = resolve(SETTINGS, TurnAsk(intent="q", strategy="mcts", samples=2, budget=9))
    assert mcts.options == MCTSOptions(k=2, iterations=9)
    react = resolve(SETTINGS, TurnAsk(intent="q", strategy="react", budget=4))
    assert react.options.max_turns == 4


def test_configured_strategy_defaults_and_overrides():
    settings = Settings(backend="openai", strategy_defaults={"mcts": {"k": 4, "iterations": 8}})
    spec = resolve(settings, TurnAsk(intent="q", strategy="mcts", budget=3))
    assert (spec.options.k, spec.options.iterations) == (4, 3)


@pytest.mark.parametrize("ask, words", [
    (TurnAsk(intent="q", strategy="mcts", options={"itrations": 3}), ["itrations", "mcts"]),
    (TurnAsk(intent="q", strategy="vote", options={"samples": 0}), ["samples", "greater"]),
    (TurnAsk(intent="q", strategy="fast"), ["'fast'", ", ".join(STRATEGIES)]),
])
def test_a_typo_is_an_error_that_names_it(ask, words):
    with pytest.raises(ValueError) as error:
        resolve(SETTINGS, ask)
    assert all(w in str(error.value) for w in words), str(error.value)


@pytest.mark.parametrize("trait, value, word", [
    ("strategy_defaults", {"mcts": {"itrations": 3}}, "itrations"),
    ("strategy_defaults", {"fastest": {}}, "fastest"),
    ("snapshot_limits", {"timeot_s": 3}, "timeot_s"),
])
def test_a_typo_in_a_dict_trait_fails_at_start(tmp_path, trait, value, word):
    config = Config({"DataAgent": {trait: value}})
    with pytest.raises(ValueError, match=word):
        load_settings(config, env={}, dirs=[str(tmp_path)])


def test_explain_runs_no_code_and_no_exec_says_why():
    assert resolve(SETTINGS, TurnAsk(intent="q", strategy="explain")).copies.mode == "none"
    spec = resolve(SETTINGS, TurnAsk(intent="q", execute=False, no_exec_reason="--no-exec"))
    copies = asyncio.run(open_copies(spec.copies, fork=lambda limits: pytest.fail("must not fork")))
    assert copies.tree is None and not copies.confinement.execute
    assert "--no-exec" in copies.confinement.message


def test_replay_cells_are_the_executed_code_in_order():
    context = NotebookContext(cells=[
        Cell("code", "b = a + 1", execution_count=3), Cell("markdown", "# title"),
        Cell("code", "a = 1", execution_count=1), Cell("code", "never_run()"),
        Cell("code", "%%agent\nplot it", execution_count=2)])
    assert replay_cells(context) == ["a = 1", "b = a + 1"]


def test_fork_refused_falls_back_to_a_replay_kernel(tmp_path):
    """Where fork is refused, candidates run in a kernel that re-ran the notebook."""

    async def refuse(limits):
        raise OSError("fork is not allowed here")

    copies = asyncio.run(open_copies(CopyPolicy(confinement="warn", max_live=2), fork=refuse,
                                     replay=["x = 41"], notebook_dir=str(tmp_path)))
    try:
        assert copies.tree is not None and copies.tree.kind == "replay"
        assert "fork is not allowed here" in copies.fallback
        child = copies.executor.fork()
        assert child.exec("x + 1").value.value == 42
        child.close()
    finally:
        copies.close()


def test_without_a_kernel_nothing_runs_and_the_reason_is_given():
    copies = asyncio.run(open_copies(CopyPolicy(), fork=None, unavailable="the notebook has no running kernel"))
    assert copies.tree is None and copies.executor is None
    assert "no running kernel" in copies.confinement.message


def test_the_settings_schema_offers_every_chat_strategy():
    """The JupyterLab setting for the default strategy lists the same names as the server."""
    import json
    from pathlib import Path

    schema = json.loads((Path(__file__).parents[1] / "schema" / "plugin.json").read_text())
    offered = [o["const"] for o in schema["properties"]["defaultStrategy"]["oneOf"]]
    assert offered == [s for s in STRATEGIES if s != "explain"]


# ------------------------------------------------------------------ the model's share of the time

REPLY = "```python\n# Step 1: Add the numbers\n1 + 1\n```"


def test_run_turn_times_the_model_within_the_wall_time():
    from jupyter_data_agent.turn import run_turn
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend(lambda call: [REPLY], on_call=lambda call: time.sleep(0.3))
    result = run_turn(resolve(SETTINGS, TurnAsk(intent="q", execute=False)), NotebookContext(), backend)
    stats = result.stats
    assert stats.model_calls == 1 and result.chosen is not None
    assert 0.3 <= stats.model_time_s <= stats.wall_time_s + 0.0005  # model time is kept in ms


class _Streaming(Backend):
    """Streams two deltas, a pause before each, and returns the finished completion."""

    name = "streaming"
    model = "streaming"
    capabilities = Capabilities(chat=True, completion=False, logprobs=False, streaming=True)

    def generate(self, prompt, params):
        raise AssertionError("a streaming backend is streamed")

    def stream(self, prompt, params):
        for part in (REPLY[:20], REPLY[20:]):
            time.sleep(0.2)
            yield part
        return Completion(text=REPLY, prompt_tokens=123, completion_tokens=9)


def test_run_turn_times_a_stream_and_keeps_its_completion():
    from jupyter_data_agent.turn import run_turn

    result = run_turn(resolve(SETTINGS, TurnAsk(intent="q", execute=False)), NotebookContext(), _Streaming())
    stats = result.stats
    # The stream's own usage came through the timing wrapper.
    assert (stats.prompt_tokens, stats.completion_tokens) == (123, 9)
    assert 0.4 <= stats.model_time_s <= stats.wall_time_s + 0.0005  # model time is kept in ms


# ------------------------------------------------------------------ a question answered in words

PROSE = "The `delay` column is in minutes; negative values are early departures."


@pytest.mark.parametrize("strategy", ["direct", "vote"])
def test_a_prose_reply_is_the_turns_answer(strategy):
    """N6: a chat model's answer in words is the turn's answer, not "held no Python code"."""
    from jupyter_data_agent.turn import run_turn
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend(lambda call: [PROSE] * call.n)
    ask = TurnAsk(intent="what unit is the delay in?", strategy=strategy, execute=False)
    result = run_turn(resolve(SETTINGS, ask), NotebookContext(), backend, prose_answers=True)
    assert result.answer == PROSE
    assert result.chosen is None and result.candidates == []
    assert result.strategy == strategy and result.stats.model_calls == 1


def test_a_prose_answers_time_includes_the_model_time():
    """m6: an answer in words showed "0.0 s (model 1.1 s)": the strategy raised before it set
    its wall time, so the turn's time must be measured around it."""
    from jupyter_data_agent.turn import run_turn
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend(lambda call: [PROSE], on_call=lambda call: time.sleep(0.3))
    ask = TurnAsk(intent="what unit is the delay in?", execute=False)
    result = run_turn(resolve(SETTINGS, ask), NotebookContext(), backend, prose_answers=True)
    stats = result.stats
    assert result.answer == PROSE and stats.model_calls == 1
    assert 0.3 <= stats.model_time_s <= stats.wall_time_s + 0.0005  # model time is kept in ms


def test_an_empty_reply_is_still_refused():
    from jupyter_data_agent.prompts import ProseAnswer, UnparsableOutput
    from jupyter_data_agent.turn import run_turn
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend(lambda call: ["   "])
    with pytest.raises(UnparsableOutput, match="held no Python code") as raised:
        run_turn(resolve(SETTINGS, TurnAsk(intent="q", execute=False)), NotebookContext(), backend,
                 prose_answers=True)
    assert not isinstance(raised.value, ProseAnswer)


def test_outside_the_sidebar_prose_is_still_no_code():
    """Benchmarks and the magic keep counting a reply in words as holding no code (the same
    UnparsableOutput as before prose answers existed: their records name it)."""
    from jupyter_data_agent.prompts import ProseAnswer, UnparsableOutput
    from jupyter_data_agent.turn import run_turn
    from tests.scripted_backend import ScriptedBackend

    with pytest.raises(UnparsableOutput, match="held no Python code") as raised:
        run_turn(resolve(SETTINGS, TurnAsk(intent="q", execute=False)), NotebookContext(),
                 ScriptedBackend(lambda call: [PROSE]))
    assert type(raised.value) is UnparsableOutput and not isinstance(raised.value, ProseAnswer)
    assert raised.value.stats is not None  # what the turn spent still travels with it
