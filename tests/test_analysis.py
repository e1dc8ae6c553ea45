"""The analysis strategy over real kernel copies, driven by a scripted model.

A plan of steps, each run in a copy forked from the previous step's copy;
repairs, re-plans, Stop keeping the verified prefix, and the review's
re-run of later steps after an edit, from the copy before the edited step.
"""

from __future__ import annotations

import re
import threading

import pytest

from jupyter_data_agent.context.model import Cell, NotebookContext
from jupyter_data_agent.prompts.analysis import PLAN_SYSTEM, parse_plan, parse_step_reply
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.analysis import StepCode
from jupyter_data_agent.search.options import AnalysisOptions
from tests.scripted_backend import ScriptedBackend, start_tree, stop_tree

pytestmark = pytest.mark.timeout(240)

PLAN = "1. Add one to base\n2. Double it\n3. Add the two\n4. Show the total"
CODE = {
    1: "a = base + 1\nruns = globals().get('runs', 0) + 1",
    2: "b = a * 2",
    3: "c = a + b",
    4: "print('total', c, 'runs', runs)",
}
_ASK_RE = re.compile(r"^Write step (\d+):", re.M)


def step_reply(number: int, code: str) -> str:
    return f"Step {number} in words.\n```python\n{code}\n```"


def asked_step(call) -> int | None:
    """The step a call asks for (None: the plan, or a fix/re-plan request)."""
    last = call.messages[-1]["content"]
    m = _ASK_RE.match(last)
    return int(m.group(1)) if m else None


def script(overrides=None, fixes=None, plan=PLAN):
    overrides, fixes = overrides or {}, fixes or {}

    def rule(call):
        if call.messages[0]["content"].startswith(PLAN_SYSTEM[:60]):
            return [plan]
        number = asked_step(call)
        if number is not None:
            return [overrides.get(number, step_reply(number, CODE[number]))]
        last = call.messages[-1]["content"]
        fix = re.search(r"Fix step (\d+)", last)
        if fix:
            n = int(fix.group(1))
            return [fixes.get(n, step_reply(n, CODE[n]))]
        raise AssertionError(f"unexpected call: {last[:200]}")

    return ScriptedBackend(rule)


@pytest.fixture
def tree(tmp_path):
    km, kc, t = start_tree(tmp_path, timeout_s=10.0, max_live=16, setup="base = 6")
    yield kc, t
    stop_tree(km, kc, t)


def run(backend, t, *, finish=None, **opts):
    request = TurnRequest(intent="Build the total from base.", context=NotebookContext(),
                          options=AnalysisOptions(**opts))
    events = []
    ctx = RunContext(backend=backend, executor=t.root, events=events.append,
                     finish=finish or threading.Event())
    return get_strategy("analysis").run(request, ctx), events


def live_names(kc) -> str:
    reply = kc.execute_interactive("print(sorted(k for k in ('a', 'b', 'c', 'runs') if k in globals()))",
                                   timeout=30, output_hook=lambda msg: outputs.append(msg))
    assert reply["content"]["status"] == "ok"
    return "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")


outputs: list = []


def test_plan_and_step_replies_parse():
    plan = parse_plan("Plan:\n1. Load the data\n2) [edit cell c1] Fix the filter\n3. [edit cell zz] Plot",
                      known_cells=["c1"])
    assert [(s.title, s.cell_id) for s in plan] == [("Load the data", None), ("Fix the filter", "c1"),
                                                    ("Plot", None)]
    assert [s.title for s in parse_plan("Just compute the mean")] == ["Just compute the mean"]
    reply = parse_step_reply("Explanation: we sum.\n```python\nx = 1\n```")
    assert (reply.explanation, reply.code, reply.revised) == ("we sum.", "x = 1", ())
    revised = parse_step_reply("Revised plan:\n1. Try another join\n2. Show it")
    assert [s.title for s in revised.revised] == ["Try another join", "Show it"]


def test_four_steps_chain_in_copies_and_the_live_kernel_sees_none(tree):
    kc, t = tree
    result, events = run(script(), t)
    steps = result.chosen.analysis
    assert [s.status for s in steps] == ["ok"] * 4
    assert [s.title for s in steps] == ["Add one to base", "Double it", "Add the two", "Show the total"]
    # step 4 saw the variables of steps 1-3: a = 7, b = 14, c = 21
    assert steps[3].result.stream("stdout").strip() == "total 21 runs 1"
    assert steps[0].explanation == "Step 1 in words."
    # the live kernel has none of them
    outputs.clear()
    assert live_names(kc).strip() == "[]"
    # progress showed the live plan, each step's status
    plans = [e.data["plan"] for e in events if e.kind == "progress" and "plan" in e.data]
    assert plans[0][0]["status"] == "pending" and len(plans[0]) == 4
    assert [p["status"] for p in plans[-1]] == ["ok"] * 4
    assert any(e.data.get("state") == "step" and "running" in e.message for e in events if e.kind == "progress")
    assert result.stats.executions == 4
    assert "nothing ran in your kernel" in result.answer
    result.chain.close()


def test_a_failing_step_is_repaired(tree):
    _, t = tree
    backend = script(overrides={2: step_reply(2, "b = a * undefined_factor")})
    result, events = run(backend, t)
    steps = result.chosen.analysis
    assert [s.status for s in steps] == ["ok"] * 4
    assert (steps[1].repairs, steps[1].code) == (1, "b = a * 2")
    assert steps[3].result.stream("stdout").strip() == "total 21 runs 1"
    assert any("asking for a fix" in e.message for e in events if e.kind == "progress")
    fix_call = next(c for c in backend.calls if "Fix step 2" in c.messages[-1]["content"])
    assert "NameError" in fix_call.messages[-1]["content"]
    result.chain.close()


def test_a_step_that_stays_broken_replans_the_rest(tree):
    _, t = tree
    broken = step_reply(3, "c = a + missing")

    def rule(call):
        last = call.messages[-1]["content"]
        if "cannot be fixed as planned" in last:
            return ["Revised plan:\n1. Triple a instead\n2. Show the total"]
        if asked_step(call) == 3 and "Triple a instead" in call.messages[1]["content"]:
            return [step_reply(3, "c = a + b")]  # the new plan's step 3 works
        return base_rule(call)

    base = script(overrides={3: broken}, fixes={3: broken})
    base_rule = base.rule
    base.rule = rule
    result, _ = run(base, t, max_repairs=1, max_replans=1)
    steps = result.chosen.analysis
    assert [s.title for s in steps] == ["Add one to base", "Double it", "Triple a instead", "Show the total"]
    assert [s.replanned for s in steps] == [False, False, True, True]
    assert steps[2].code == "c = a + b"  # the scripted step 3 after the new plan
    assert result.chosen.meta["replans"] == 1
    result.chain.close()


def test_stop_after_step_two_keeps_steps_one_and_two(tree):
    kc, t = tree
    finish = threading.Event()
    backend = script()
    backend.on_call = lambda call: finish.set() if asked_step(call) == 3 else None
    # step 3 runs long enough for the stop to land while it runs
    backend_rule = backend.rule
    backend.rule = lambda call: ([step_reply(3, "import time; time.sleep(5); c = a + b")]
                                 if asked_step(call) == 3 else backend_rule(call))
    result, events = run(backend, t, finish=finish)
    steps = result.chosen.analysis
    assert [s.number for s in steps] == [1, 2] and all(s.status == "ok" for s in steps)
    assert result.chosen.meta["reason"] == "stopped"
    assert result.answer.startswith("Stopped: 2 verified steps kept of 4 planned.")
    last_plan = [e.data["plan"] for e in events if e.kind == "progress" and "plan" in e.data][-1]
    assert [p["status"] for p in last_plan] == ["ok", "ok", "skipped", "skipped"]
    assert len(result.chain.copies) == 2
    outputs.clear()
    assert live_names(kc).strip() == "[]"
    result.chain.close()


def test_an_edit_of_step_two_reruns_three_and_four_from_step_twos_copy(tree):
    kc, t = tree
    result, _ = run(script(), t)
    chain = result.chain
    first_copy = chain.copies[0]
    new = chain.revise(2, [StepCode("b = a * 10", title="Multiply by ten"), StepCode(CODE[3]), StepCode(CODE[4])])
    assert [s.number for s in new] == [2, 3, 4] and [s.status for s in new] == ["ok"] * 3
    # a = 7, b = 70, c = 77; step 1 did not run again (runs is still 1): it is the same copy
    assert new[2].result.stream("stdout").strip() == "total 77 runs 1"
    assert chain.copies[0] is first_copy and len(chain.copies) == 4
    assert [s.title for s in chain.steps][:2] == ["Add one to base", "Multiply by ten"]
    # dropping step 3: step 4 runs from step 2's copy, where c does not exist
    dropped = chain.revise(3, [StepCode(CODE[4])])
    assert dropped[0].number == 3 and dropped[0].status == "error"
    assert "NameError" in dropped[0].result.error_line()
    with pytest.raises(ValueError, match="from_step"):
        chain.revise(9, [])
    outputs.clear()
    assert live_names(kc).strip() == "[]"
    chain.close()
    with pytest.raises(RuntimeError, match="closed"):
        chain.revise(1, [])


def test_a_vote_per_step_picks_the_majority(tree):
    _, t = tree

    def rule(call):
        number = asked_step(call)
        if number == 2:  # three candidates: two agree on b = 14
            return [step_reply(2, "b = a * 2"), step_reply(2, "b = a + 100"), step_reply(2, "b = 2 * a\nb")]
        return base_rule(call)

    backend = script()
    base_rule = backend.rule
    backend.rule = rule
    result, _ = run(backend, t, samples=3)
    steps = result.chosen.analysis
    assert steps[3].result.stream("stdout").strip() == "total 21 runs 1"
    result.chain.close()


def test_edits_of_known_cells_are_steps_with_a_cell_id(tree):
    _, t = tree
    context = NotebookContext(cells=[Cell("code", "x = base", cell_id="cell-1", execution_count=1)])
    backend = script(plan="1. [edit cell cell-1] Use base twice\n2. Show it")
    backend_rule = backend.rule

    def rule(call):
        number = asked_step(call)
        if number == 1:
            assert "x = base" in call.messages[-1]["content"]  # the cell's current source is shown
            return [step_reply(1, "x = base * 2")]
        if number == 2:
            return [step_reply(2, "print(x)")]
        return backend_rule(call)

    backend.rule = rule
    request = TurnRequest(intent="Use base twice.", context=context, options=AnalysisOptions())
    result = get_strategy("analysis").run(request, RunContext(backend=backend, executor=t.root))
    steps = result.chosen.analysis
    assert [(s.cell_id, s.status) for s in steps] == [("cell-1", "ok"), (None, "ok")]
    assert steps[1].result.stream("stdout").strip() == "12"
    assert "x = base * 2" not in result.chosen.code  # the edit is not a new cell
    result.chain.close()


def test_step_decisions_are_stored_and_become_training_records(tmp_path):
    """Kept / dropped / edited per step: the store holds the step as it ran; training sees the step."""
    import sqlite3

    from jupyter_data_agent.store.decisions import DecisionStore, TurnOutcome
    from jupyter_data_agent.train.decisions import decision_trajectories

    # a store written by the previous schema (no step column) is upgraded in place
    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old)
    conn.executescript("CREATE TABLE decisions (id INTEGER PRIMARY KEY AUTOINCREMENT, recorded_at REAL NOT NULL, "
                       "decision TEXT NOT NULL, turn_id TEXT NOT NULL, job_id TEXT NOT NULL DEFAULT '', "
                       "candidate_index INTEGER NOT NULL DEFAULT 0, intent TEXT NOT NULL DEFAULT '', "
                       "strategy TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', "
                       "notebook_path TEXT NOT NULL DEFAULT '', code TEXT NOT NULL DEFAULT '', "
                       "final_code TEXT NOT NULL DEFAULT '', prompt TEXT NOT NULL DEFAULT '', "
                       "candidate TEXT NOT NULL DEFAULT '{}', answer TEXT, asked_at REAL, "
                       "complete INTEGER NOT NULL DEFAULT 0); PRAGMA user_version = 1;")
    conn.execute("INSERT INTO decisions (recorded_at, decision, turn_id) VALUES (1, 'accepted', 't-old')")
    conn.commit()
    conn.close()
    store = DecisionStore(old)
    steps = [{"number": 1, "title": "Load", "explanation": "We load it.", "code": "df = load()",
              "cell_id": None, "status": "ok", "repairs": 0, "replanned": False,
              "result": {"status": "ok", "outputs": [], "execution_count": None, "ename": None, "evalue": None,
                         "duration_s": 0.1, "value": None, "limit": None}},
             {"number": 2, "title": "Sum", "explanation": "We sum.", "code": "df.a.sum()", "cell_id": None,
              "status": "ok", "repairs": 0, "replanned": False, "result": None}]
    outcome = TurnOutcome(turn_id="t-1", owner="me", intent="Total?", strategy="analysis",
                          candidates=[{"code": "...", "analysis": steps}])
    store.add(outcome.record("accepted", 0, step=1))
    store.add(outcome.record("rejected", 0, step=2))
    records = [r for r in store.records() if r.turn_id == "t-1"]
    assert [(r.step, r.decision, r.code) for r in records] == [(1, "accepted", "df = load()"),
                                                                (2, "rejected", "df.a.sum()")]
    assert next(store.records()).step is None  # the old row reads as a whole-candidate decision
    trained = decision_trajectories(records)
    assert len(trained) == 2
    assert "We load it." in trained[0].messages[-2]["content"] and "df = load()" in trained[0].messages[-2]["content"]
