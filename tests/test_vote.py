"""Self-consistency voting over executed candidates; the typed request (no model, no kernel)."""

import numpy as np
import pandas as pd
import pytest

from jupyter_data_agent.context.model import NotebookContext
from jupyter_data_agent.kernel.results import ExecResult, OutputItem, describe_value
from jupyter_data_agent.search.base import Candidate, RunContext, TurnRequest
from jupyter_data_agent.search.generate import sampling
from jupyter_data_agent.search.options import MCTSOptions, SamplingPolicy
from jupyter_data_agent.search.values import exec_output, handle_value
from jupyter_data_agent.search.vote import VoteStrategy, vote
from tests.scripted_backend import ScriptedBackend


def ran(value=None, *, status="ok", printed=""):
    outputs = [OutputItem("stream", name="stdout", text=printed)] if printed else []
    return ExecResult(status=status, outputs=outputs,
                      value=describe_value(value) if value is not None else None)


def test_handles_rebuild_frames_series_and_arrays():
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    assert handle_value(describe_value(df)).equals(df)
    s = df.set_index("b")["a"]
    rebuilt = handle_value(describe_value(s))
    assert list(rebuilt.index) == ["x", "y"] and rebuilt.name == "a"
    assert np.array_equal(handle_value(describe_value(np.arange(3))), np.arange(3))
    assert handle_value(describe_value(7)) == 7


def test_printed_text_is_the_value_without_an_expression():
    assert exec_output(ran(printed="3\n")) == "3"
    assert exec_output(ran()) is None
    assert exec_output(ran(7, status="error")) is None
    assert exec_output(None) is None


def test_largest_cluster_wins_and_errors_do_not_vote():
    series = pd.Series([3, 1], index=["Lima", "Oslo"])
    candidates = [
        Candidate("a", result=ran(pd.Series([9], index=["Pune"]))),
        Candidate("b", result=ran(series)),
        Candidate("c", result=ran(status="error")),
        Candidate("d", result=ran(series.to_frame("n"))),
        Candidate("e", result=ran(status="error")),
    ]
    chosen = vote(candidates)
    assert chosen.code == "b"
    assert [c.support for c in candidates] == [1, 2, 1, 2, 1]


def test_no_error_free_candidate_means_no_vote():
    assert vote([Candidate("a", result=ran(status="error")), Candidate("b")]) is None


def test_silent_cells_do_not_outvote_the_answer():
    candidates = [Candidate("a", result=ran()), Candidate("b", result=ran()),
                  Candidate("c", result=ran(42))]
    assert vote(candidates).code == "c"
    assert candidates[2].support == 1


def test_a_strategy_refuses_another_strategys_options():
    request = TurnRequest(intent="x?", context=NotebookContext(), options=MCTSOptions())
    with pytest.raises(ValueError, match="VoteOptions expected.*'mcts'"):
        VoteStrategy().run(request, RunContext(backend=ScriptedBackend(lambda call: ["x"])))


def test_sampling_follows_the_policy():
    request = TurnRequest(intent="x?", context=NotebookContext(),
                          sampling=SamplingPolicy(temperature=0.1, sample_temperature=0.9,
                                                  max_new_tokens=77, seed=5))
    one, many = sampling(request, 1, stop=("#",), seed_offset=2), sampling(request, 4)
    assert (one.temperature, one.max_tokens, one.stop, one.seed) == (0.1, 77, ("#",), 7)
    assert (many.n, many.temperature, many.seed) == (4, 0.9, 5)
    assert sampling(request, 1, temperature=0.7).temperature == 0.7
