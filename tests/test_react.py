"""ReAct over real kernel copies, driven by a scripted generator; JUPITER prompt parsing."""

from __future__ import annotations

import pytest

from jupyter_data_agent.context.model import Cell, NotebookContext, Output
from jupyter_data_agent.kernel.results import ExecResult, OutputItem
from jupyter_data_agent.prompts.answers import same_text_answer, well_formed
from jupyter_data_agent.prompts.react import (
    OMITTED_OBSERVATION,
    SYSTEM,
    build_task,
    fit_messages,
    format_observation,
    parse_reply,
    parse_step,
)
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.generate import jupiter_task
from jupyter_data_agent.search.options import PromptPolicy, ReactOptions, TaskInfo
from jupyter_data_agent.search.react import ReactStrategy
from jupyter_data_agent.search.trajectories import read_jsonl
from tests.scripted_backend import ScriptedBackend, action, exact_reward, final, start_tree, stop_tree

pytestmark = pytest.mark.timeout(240)


# ------------------------------------------------------------------ parsing

def test_parse_action_and_final_answer_forms():
    p = parse_step("Thought: load it\nAction:\n```python\nx = 1\nprint(x)\n```\n")
    assert (p.kind, p.thought, p.code) == ("action", "load it", "x = 1\nprint(x)")
    p = parse_step("Thought: done\nFinal Answer: @mean[3.5]")
    assert (p.kind, p.answer) == ("answer", "@mean[3.5]")
    p = parse_step("Thought: done.\nFormatted answer: @a[1], @b[2]")  # JUPITER's label
    assert (p.kind, p.answer) == ("answer", "@a[1], @b[2]")
    p = parse_step("**Thought:** look\n**Action:** df.describe()")  # unfenced, markdown bold
    assert (p.kind, p.thought, p.code) == ("action", "look", "df.describe()")


def test_parse_drops_ungrounded_answer_and_invented_observation():
    p = parse_step("Thought: t\nAction:\n```python\ny = 2\n```\nObservation: 2\n"
                   "Thought: so\nFinal Answer: @y[2]")
    assert p.kind == "action" and p.code == "y = 2" and p.answer is None
    p = parse_step("I am not sure what to do.")
    assert p.kind == "invalid"
    # completion mode: the reply continues after the prompt's "Thought:"
    p = parse_reply(" compute\nAction:\n```python\nz = 3\n```", chat=False)
    assert (p.thought, p.code) == ("compute", "z = 3")


def test_answers_and_observations():
    assert same_text_answer("@x[1.0]", " @x[1] ") and not same_text_answer("@x[1]", "@x[2]")
    assert not same_text_answer("@x[1]", "@x[1] @y[2]")
    assert same_text_answer("Paris.", "paris") and same_text_answer("3.50", "3.5")
    assert well_formed("@a[1] @b[2]", "@a[v], @b[w] where ...")
    assert not well_formed("@a[1]", "@a[v], @b[w]") and not well_formed("", "")
    err = ExecResult(status="error", ename="KeyError", evalue="'z'",
                     outputs=[OutputItem("stream", name="stdout", text="partial\n"),
                              OutputItem("error", ename="KeyError", evalue="'z'")])
    assert format_observation(err) == "partial\nError: KeyError: 'z'"
    long = ExecResult(status="ok", outputs=[OutputItem("stream", name="stdout", text="a" * 5000)])
    obs = format_observation(long, max_chars=300)
    assert len(obs) < 400 and "characters cut" in obs
    assert format_observation(ExecResult(status="ok")) == "(no output)"


def _count(text):  # two characters per token
    return (len(text) + 1) // 2


def test_task_message_carries_jupiter_fields():
    req = TurnRequest(intent="Mean of x?", context=NotebookContext(), options=ReactOptions(),
                      task=TaskInfo(constraints="Round to 2 decimals.", format="@mean[v]",
                                    files=("data.csv",)))
    msg = jupiter_task(req, ScriptedBackend(lambda call: [])).message()
    assert "Task: Mean of x?" in msg and "Constraints: Round to 2 decimals." in msg
    assert "Output format: @mean[v]" in msg and "Available local files: data.csv" in msg


def test_notebook_is_cut_by_whole_cells_to_the_token_budget():
    cells = [Cell("code", f"step_{i} = {i}  # " + "x" * 60) for i in range(10)]
    ctx = NotebookContext(cells=cells)
    whole = build_task("Sum?", ctx, count_tokens=_count, budget=None, schema="df: 3 rows")
    assert all(f"step_{i} =" in whole.notebook for i in range(10))
    budget = _count(SYSTEM) + _count(whole.message()) - 100  # about three cells too many
    cut = build_task("Sum?", ctx, count_tokens=_count, budget=budget, schema="df: 3 rows")
    assert _count(SYSTEM) + _count(cut.message()) <= budget
    kept = [i for i in range(10) if f"step_{i} = {i}  # " + "x" * 60 in cut.notebook]
    assert kept == list(range(10 - len(kept), 10)) and 4 <= len(kept) < 10  # newest, whole
    assert "df: 3 rows" in cut.message() and "Task: Sum?" in cut.message()
    tiny = build_task("Sum?", ctx, count_tokens=_count, budget=10, schema="df: 3 rows")
    assert tiny.notebook == "" and "df: 3 rows" in tiny.message()
    # the cell to fix (here: the last one that raised) is pinned, with its error
    cells[3].outputs = [Output("error", "NameError: name 'q' is not defined")]
    fix = build_task("Fix it", ctx, count_tokens=_count, budget=10)
    assert "step_3 = 3" in fix.notebook and "# Error: NameError" in fix.notebook
    assert "step_9" not in fix.notebook


def test_long_histories_lose_old_outputs_first_then_old_steps():
    head = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "t" * 40}]
    steps = []
    for i in range(4):
        steps += [{"role": "assistant", "content": f"a{i}" * 20},
                  {"role": "user", "content": f"Observation:\n{'o' * 400}"}]
    assert fit_messages(head + steps, _count, 10_000) == head + steps
    fitted = fit_messages(head + steps, _count, 700)  # 948 tokens -> two old outputs cut: 582
    assert fitted[:2] == head and len(fitted) == 10 and fitted[-1] == steps[-1]
    assert [m["content"] == OMITTED_OBSERVATION for m in fitted[3::2]] == [True, True, False, False]
    tight = fit_messages(head + steps, _count, 350)  # all old outputs cut: 399; then 2 steps go
    assert tight[:2] == head
    assert tight[2:] == [steps[4], {"role": "user", "content": OMITTED_OBSERVATION}, *steps[6:]]


def test_registered():
    assert isinstance(get_strategy("react"), ReactStrategy)


# ------------------------------------------------------------------ real copies

@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("react")
    km, kc, t = start_tree(cwd, timeout_s=5.0, max_live=8, setup="base = 6")
    yield t
    stop_tree(km, kc, t)


def _request(**options):
    return TurnRequest(intent="What is base times seven?", context=NotebookContext(),
                       options=ReactOptions(**options), task=TaskInfo(format="@answer[value]"),
                       prompt=PromptPolicy(max_prompt_tokens=6000))


def test_multi_turn_with_observations_fed_back(tree):
    def rule(call):
        if call.depth == 0:
            return [action("multiply", "x = base * 7")]
        if call.depth == 1:
            assert call.last_observation == "(no output)"
            return [action("look at x", "print(x)")]
        if call.depth == 2:
            return ["I think it is done"]  # invalid: the model is told the format
        if call.depth == 3:
            assert "neither an Action" in call.last_observation
            assert call.observations[-2] == "42"  # the printed value came back
            return [final("x is the answer", "@answer[42]")]
        raise AssertionError("too many turns")

    backend = ScriptedBackend(rule)
    before = set(tree.pids())
    result = get_strategy("react").run(_request(), RunContext(backend=backend, executor=tree.root))
    assert result.answer == "@answer[42]" and result.strategy == "react"
    c = result.chosen
    assert c.code == "# Step 1: multiply\nx = base * 7\n\n# Step 2: look at x\nprint(x)"
    assert [(s.number, s.explanation) for s in c.steps] == [(1, "multiply"), (2, "look at x")]
    assert [(t.thought, t.status, t.output) for t in c.trace] == [
        ("multiply", "ok", "(no output)"), ("look at x", "ok", "42"),
        ("I think it is done", "invalid", c.trace[2].output), ("x is the answer", "answer", "")]
    assert c.result.stream() == "42\n"
    assert result.stats.iterations == 4 and result.stats.model_calls == 4
    assert result.stats.executions == 2
    assert backend.calls[0].params.temperature == 0.2
    assert [m["role"] for m in c.meta["messages"]][:2] == ["system", "user"]
    assert set(tree.pids()) == before  # the lineage is closed, the root stays


def test_state_accumulates_in_one_lineage_and_errors_are_observed(tree, tmp_path):
    def rule(call):
        return [[action("set", "a = 1"), action("bad", "a += undefined"),
                 action("inc", "a += 1\na"), final("done", "@answer[2]")][call.depth]]

    backend = ScriptedBackend(rule)
    traj = tmp_path / "react.jsonl"
    result = ReactStrategy(reward_fn=exact_reward("@answer[2]")).run(
        _request(trajectory_path=str(traj)), RunContext(backend=backend, executor=tree.root))
    recs = read_jsonl(traj)
    assert [(r.depth, r.visits, r.value_sum, r.status) for r in recs] == [
        (1, 1, 1.0, "ok"), (2, 1, 1.0, "error"), (3, 1, 1.0, "ok"), (4, 1, 1.0, "answer")]
    assert recs[-1].terminal and recs[-1].final_answer == "@answer[2]"
    assert backend.calls[2].last_observation == "Error: NameError: name 'undefined' is not defined"
    assert backend.calls[3].last_observation == "2"
    assert result.answer == "@answer[2]"
    assert "undefined" not in result.chosen.code  # the failed step stays in the trace only
    assert [t.status for t in result.chosen.trace] == ["ok", "error", "ok", "answer"]


LIE = ("import sys\n"
       "fs = sys.modules['_jda_kernel.copy.copy_server']\n"
       "honest = fs._hello_reply\n"
       "fs._hello_reply = lambda rid, state, kind='hello': {**honest(rid, state, kind), 'pid': 1}")


def test_a_copy_that_lies_about_its_fork_fails_its_step_not_the_turn(tree):
    """Issue 34: a candidate that made its copy lie about the pid of the next fork failed the
    whole react turn; now that step fails (the copy is ended) and the agent goes on."""
    def rule(call):
        return [[action("lie", LIE), action("next", "x = base * 7"), action("again", "x = base * 7\nprint(x)"),
                 final("done", "@answer[42]")][call.depth]]

    backend = ScriptedBackend(rule)
    before = set(tree.pids())
    result = ReactStrategy().run(_request(), RunContext(backend=backend, executor=tree.root))
    assert result.answer == "@answer[42]"
    assert [t.status for t in result.chosen.trace] == ["ok", "died", "ok", "answer"]
    assert "refused: the new copy says it is process 1" in backend.calls[2].last_observation
    assert backend.calls[3].last_observation == "42"
    assert set(tree.pids()) == before


def test_turn_cap_at_the_options_maximum(tree):
    def rule(call):
        if call.depth == 24:  # the last turn reads every earlier step's variable
            return [action("sum", "print(sum(globals()[f'v{i}'] for i in range(24)))")]
        return [action(f"step {call.depth}", f"v{call.depth} = {call.depth}")]

    backend = ScriptedBackend(rule)
    before = set(tree.pids())
    result = ReactStrategy().run(_request(max_turns=25),
                                 RunContext(backend=backend, executor=tree.root))
    assert result.answer is None and result.chosen.meta["reason"] == "turn_limit"
    assert len(backend.calls) == 25 and result.stats.executions == 25
    assert len(result.chosen.steps) == 25
    # past the live-copy window (max_live 8) the newest copy is reused: the state still adds up
    assert result.chosen.trace[-1].output == str(sum(range(24)))
    assert set(tree.pids()) == before
