"""DABench runner: selection, answer extraction, and a 3-task run in real kernels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_data_agent.config import Settings
from jupyter_data_agent.llm.base import Backend, Capabilities, Completion, Prompt, SamplingParams
from jupyter_data_agent.search.base import Candidate, SearchResult
from jupyter_data_agent.turn import resolve
from jupyter_data_agent_bench import dabench

DATA = Path(__file__).parent / "data" / "dabench"  # 3 real dev tasks, vendored (see its README)
RIGHT, WRONG, SILENT = 683, 18, 24  # real dev ids (easy, small tables): the fixture's three


class ScriptedChat(Backend):
    """Answers by task: the reply whose key occurs in the last user message."""

    name = "scripted"

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.calls = 0

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(chat=True, completion=False, logprobs=False)

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        self.calls += 1
        text = prompt.messages[-1].content if prompt.messages else prompt.text or ""
        reply = next((r for key, r in self.replies.items() if key in text), "no idea")
        return [Completion(reply, prompt_tokens=100, completion_tokens=20) for _ in range(params.n)]


# --------------------------------------------------------------------------- pure


def _q(i, level):
    return {"id": i, "level": level, "question": f"q{i}", "file_name": "t.csv", "concepts": []}


def test_stratified_selection_is_balanced_and_seeded():
    qs = [_q(i, lv) for i, lv in enumerate(["easy"] * 10 + ["medium"] * 10 + ["hard"] * 10)]
    picked = dabench.select_tasks(qs, limit=7, stratify=True, seed=1)
    levels = [q["level"] for q in picked]
    assert len(picked) == 7 and levels.count("easy") == 3 and levels.count("medium") == 2
    assert [q["id"] for q in picked] == sorted(q["id"] for q in picked)  # file order
    assert picked == dabench.select_tasks(qs, limit=7, stratify=True, seed=1)
    assert dabench.select_tasks(qs, limit=3) == qs[:3]
    assert [q["id"] for q in dabench.select_tasks(qs, ids=["2", "25"])] == [2, 25]
    assert {q["level"] for q in dabench.select_tasks(qs, levels=["hard"])} == {"hard"}
    with pytest.raises(ValueError):
        dabench.select_tasks(qs, ids=["999"])


def test_scored_response_prefers_final_answer_then_output():
    from jupyter_data_agent.kernel.results import ExecResult, OutputItem

    out = ExecResult("ok", outputs=[OutputItem("stream", name="stdout", text="@x[2]\n")])
    cand = Candidate(code="print(1)", result=out)
    text, src = dabench.scored_response(
        SearchResult(chosen=cand, answer="Thought: done\nFormatted answer: @x[3], @y[a]"))
    assert src == "answer" and dabench.extract_answers(text) == {"x": "3", "y": "a"}
    assert dabench.scored_response(SearchResult(chosen=cand, answer="I think it is 3")) == (
        "@x[2]\n", "output")
    assert dabench.scored_response(SearchResult(chosen=Candidate(code="x"))) == (None, None)
    assert dabench.scored_response(None) == (None, None)
    # a cell that only raised (or only warned) gave no answer
    err = ExecResult("error", ename="NameError", evalue="x", outputs=[
        OutputItem("stream", name="stderr", text="warning\n"),
        OutputItem("error", ename="NameError", evalue="name 'x' is not defined")])
    assert dabench.scored_response(SearchResult(chosen=Candidate(code="x", result=err))) == (
        None, None)


def test_rescore_rederives_response_from_the_log():
    rec = {"id": 1, "answer": None, "labels": [["x", "2"]], "response": "stale", "correct": False,
           "result": {"chosen": 0, "candidates": [{"result": {"outputs": [
               {"output_type": "stream", "name": "stdout", "text": "@x[2.0000000001]\n"},
               {"output_type": "error", "ename": "E", "evalue": "v"}]}}]}}
    dabench.rescore_record(rec)
    assert rec["response"] == "@x[2.0000000001]\n" and rec["correct"] and rec["share"] == 1.0


def test_task_text_follows_jupiter_input_format():
    t = {"question": "Q?", "constraints": "C.", "format": "@a[x]", "file_name": "f.csv"}
    assert dabench.task_text(t) == ("Question: Q?\nConstraints: C.\nFormat: @a[x]\n"
                                    "Available Local Files: f.csv")
    t["id"] = 7
    spec = resolve(Settings(backend="openai"), dabench.task_ask(t, "react", budget=None))
    assert spec.intent == "Q?" and spec.task.files == ("f.csv",) and spec.task.task_id == "7"
    assert spec.task.constraints == "C." and spec.task.format == "@a[x]"
    spec = resolve(Settings(backend="openai"), dabench.task_ask(t, "vote", budget=3))
    assert spec.intent.startswith("Question: Q?") and spec.options.samples == 3
    spec = resolve(Settings(backend="openai"), dabench.task_ask(t, "mcts", budget=3))
    assert spec.options.iterations == 3


# --------------------------------------------------------------------------- real kernels


@pytest.mark.skipif(not (DATA / "questions.jsonl").is_file(), reason="DABench data not present")
def test_three_tasks_one_right_one_wrong_one_unanswered_then_resume(tmp_path):
    questions, labels = dabench.load_tasks(DATA)
    tasks = dabench.select_tasks(questions, ids=[RIGHT, WRONG, SILENT])
    by_id = {t["id"]: t for t in tasks}

    def code(pairs):
        text = ", ".join(f"@{n}[{v}]" for n, v in pairs)
        return f"```python\n# Step 1: answer\nprint({text!r})\n```"

    replies = {
        by_id[RIGHT]["question"]: code(labels[RIGHT]),
        by_id[WRONG]["question"]: code([(n, "-12345") for n, _ in labels[WRONG]]),
        by_id[SILENT]["question"]: "Sorry, I cannot help with that.",
    }
    settings = Settings(backend="openai", max_new_tokens=64, exemplars=False)
    out = tmp_path / "run"
    backend = ScriptedChat(replies)
    data = dabench.run_benchmark(data_dir=DATA, out=out, strategy="direct", backend=backend,
                                 settings=settings, tasks=tasks, labels=labels,
                                 progress=False, print_fn=None, task_timeout=120)
    s = data["summary"]
    assert (s["n_questions"], s["n_correct"], s["n_answered"]) == (3, 1, 2)
    assert s["accuracy_by_question"] == pytest.approx(1 / 3)
    assert backend.calls == 3 and data["cost"]["model_calls"] == 3

    recs = {r["id"]: r for r in map(json.loads, (out / "tasks.jsonl").read_text().splitlines())}
    assert recs[RIGHT]["correct"] and recs[RIGHT]["response_source"] == "output"
    assert not recs[WRONG]["correct"] and recs[WRONG]["extracted"]
    assert recs[SILENT]["response"] is None and "UnparsableOutput" in recs[SILENT]["error"]
    assert recs[RIGHT]["prompt"] and recs[RIGHT]["result"]["candidates"][0]["code"]
    assert "Available Local Files: " + by_id[RIGHT]["file_name"] in recs[RIGHT]["intent"]
    assert recs[RIGHT]["model_calls"] == 1 and recs[RIGHT]["wall_time_s"] > 0
    assert (out / "summary.md").read_text().count("level: easy") == 1
    assert json.loads((out / "summary.json").read_text())["summary"]["n_correct"] == 1

    again = ScriptedChat(replies)
    data2 = dabench.run_benchmark(data_dir=DATA, out=out, strategy="direct", backend=again,
                                  settings=settings, tasks=tasks, labels=labels,
                                  progress=False, print_fn=None)
    assert again.calls == 0
    assert data2["summary"]["n_correct"] == 1
    assert len((out / "tasks.jsonl").read_text().splitlines()) == 3


def test_budget_sweep_table_and_plot(tmp_path):
    def point(acc):
        return {"summary": {"n_questions": 4, "n_correct": int(4 * acc), "accuracy_by_question": acc,
                            "proportional_accuracy_by_subquestion": acc,
                            "accuracy_by_subquestion": acc},
                "cost": {"per_task": {"model_calls": 2.0, "completion_tokens": 50.0,
                                      "wall_time_s": 1.5}}}

    points = [(1, point(0.25)), (4, point(0.5)), (16, point(0.75))]
    md = dabench.sweep_markdown(points, "mcts", "tiny")
    assert "| 16 | 4 | 3 | 75.00 |" in md
    dabench.plot_budget(points, tmp_path / "p.png", "t")
    assert (tmp_path / "p.png").stat().st_size > 1000


class ThreeSamples(ScriptedChat):
    """Every call: two cells that print nothing, then the one that prints the answer."""

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        self.calls += 1
        texts = [*self.replies["silent"] * 2, self.replies["answer"]][: params.n]
        return [Completion(t, prompt_tokens=100, completion_tokens=20) for t in texts]


@pytest.mark.skipif(not (DATA / "questions.jsonl").is_file(), reason="DABench data not present")
def test_vote_scores_the_products_pick_not_a_silent_majority(tmp_path):
    """The runner goes through turn.run_turn: the pick scored is the one the product makes."""
    questions, labels = dabench.load_tasks(DATA)
    task = dabench.select_tasks(questions, ids=[RIGHT])[0]
    text = ", ".join(f"@{n}[{v}]" for n, v in labels[RIGHT])
    backend = ThreeSamples({"silent": ["```python\n# Step 1: Compute.\nx = 1\n```"],
                            "answer": f"```python\n# Step 1: Answer.\nprint({text!r})\n```"})
    rec = dabench.run_task(task, labels[RIGHT], strategy_name="vote", backend=backend,
                           settings=Settings(backend="openai", exemplars=False),
                           tables_dir=DATA / "tables", budget=3)
    assert rec["error"] is None, rec.get("traceback")
    assert rec["correct"] and rec["response_source"] == "output"
    assert len(rec["result"]["candidates"]) == 3


@pytest.mark.skipif(not (DATA / "questions.jsonl").is_file(), reason="DABench data not present")
@pytest.mark.parametrize("strategy", ["direct", "mcts"])
def test_a_failed_turn_still_reports_what_it_spent(strategy):
    """No reply holds code: the task is an error, and its stats still count the model calls."""
    questions, labels = dabench.load_tasks(DATA)
    task = dabench.select_tasks(questions, ids=[RIGHT])[0]
    backend = ScriptedChat({})  # "no idea" to everything
    rec = dabench.run_task(task, labels[RIGHT], strategy_name=strategy, backend=backend,
                           settings=Settings(backend="openai", exemplars=False),
                           tables_dir=DATA / "tables", budget=1)
    assert rec["error"].startswith("UnparsableOutput") and not rec["correct"]
    assert rec["stats"]["model_calls"] == backend.calls >= 1
    assert rec["stats"]["completion_tokens"] > 0
