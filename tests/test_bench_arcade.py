"""ARCADE-style suite: notebook format, built-in notebooks, pass@k on a tiny notebook."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from jupyter_data_agent.config import Settings
from jupyter_data_agent.llm.base import Backend, Capabilities, Completion, Prompt, SamplingParams
from jupyter_data_agent_bench import arcade

# The full DABench set is not vendored (tests/data/dabench holds 3 tasks, not the tables the
# built-in notebooks read): where DABENCH_DATA names it, their file names are checked against it.
DATA = Path(os.environ["DABENCH_DATA"]) if os.environ.get("DABENCH_DATA") else None


class ScriptedSamples(Backend):
    """Returns a fixed list of samples per turn, picked by a key in the prompt's problem."""

    name = "scripted"

    def __init__(self, samples: dict[str, list[str]]) -> None:
        self.samples = samples
        self.calls = 0
        self.prompts: list[str] = []

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(chat=True, completion=False, logprobs=False)

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        self.calls += 1
        text = prompt.messages[-1].content
        self.prompts.append(text)
        problem = text.rsplit("Problem:", 1)[1]
        codes = next(v for k, v in self.samples.items() if k in problem)
        assert params.n == len(codes)
        return [Completion(f"```python\n# Step 1: go\n{c}\n```", prompt_tokens=50,
                           completion_tokens=10) for c in codes]


def _tiny_notebook(folder: Path) -> Path:
    cells = [
        new_markdown_cell("# Tiny"),
        new_code_cell("import pandas as pd\ndf = pd.read_csv('tiny.csv')"),
    ]
    for turn, (intent, ref) in enumerate(
            [("total of column a", "df['a'].sum()"),
             ("and now its average", "df['a'].mean()"),
             ("the total once more", "df['a'].sum()")], 1):
        c = new_code_cell(ref)
        c.metadata["jupyter_data_agent"] = {"turn": turn, "intent": intent, "reference": True}
        cells.append(c)
    nb = new_notebook(cells=cells)
    nb.metadata["jupyter_data_agent"] = {"title": "Tiny", "files": ["tiny.csv"]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.ipynb"
    nbformat.write(nb, str(path))
    return path


def test_score_samples_pass_at_k_and_the_products_pick():
    s = arcade.score_samples([9, 9, 12, 5], [True] * 4, 9, 4, (1, 2, 4, 8), pick=0)
    assert s["c"] == 2 and s["sc_correct"] and s["sc_pick"] == 0
    assert s["pass_at_k"] == pytest.approx({"1": 0.5, "2": 5 / 6, "4": 1.0})
    # a missing sample (no code) still counts in n; a wrong pick is scored wrong
    s = arcade.score_samples([1, 1, 9], [False, False, True], 9, 4, (1,), pick=0)
    assert s["c"] == 1 and s["pass_at_k"]["1"] == pytest.approx(0.25) and not s["sc_correct"]
    assert not arcade.score_samples([1], [True], 9, 1, (1,), pick=None)["sc_correct"]


def test_builtin_notebooks_are_well_formed():
    nbs = arcade.load_suite()
    assert len(nbs) >= 6
    assert len({f for nb in nbs for f in nb.files}) >= 6
    for nb in nbs:
        assert arcade.validate(nb) == [], nb.name
        assert len(nb.turns) >= 5, nb.name
        raw = nbformat.read(nb.path, as_version=4)
        nbformat.validate(raw)
        # no data inside: no outputs, files only referenced by name
        assert all(not c.get("outputs") for c in raw.cells if c.cell_type == "code"), nb.name
        if DATA is not None:
            for f in nb.files:
                assert arcade.resolve_file(f, DATA).is_file()


def test_tiny_notebook_pass_at_k_with_fuzzy_matching(tmp_path):
    (tmp_path / "data" / "tables").mkdir(parents=True)
    (tmp_path / "data" / "tables" / "tiny.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    _tiny_notebook(tmp_path / "nbs")
    backend = ScriptedSamples({
        # 9 right twice (as int and as a one-element list: fuzzy match), 12 and 5 wrong
        "total of column a": ["df['a'].sum()", "[int(df['a'].sum())]", "df['b'].sum()",
                              "df['a'].max()"],
        # 3.0 right once; one sample raises
        "now its average": ["df['a'].mean()", "df['b'].mean()", "df['a'].median() + 1",
                            "undefined_name"],
        # two cells that show nothing, one that answers (9)
        "total once more": ["total = df['a'].sum()", "x = 1", "df['a'].sum()", "y = 2"],
    })
    settings = Settings(backend="openai", max_new_tokens=64, exemplars=False)
    out = tmp_path / "out"
    nbs = arcade.load_suite(tmp_path / "nbs")
    data = arcade.run_suite(notebooks=nbs, data_dir=tmp_path / "data", out=out, backend=backend,
                            settings=settings, strategy="vote", samples=4, ks=(1, 2, 4),
                            progress=False, print_fn=None)
    recs = {r["turn"]: r for r in map(json.loads, (out / "turns.jsonl").read_text().splitlines())}
    assert recs[1]["c"] == 2 and recs[1]["n"] == 4
    assert recs[1]["pass_at_k"] == pytest.approx({"1": 0.5, "2": 5 / 6, "4": 1.0})
    assert recs[1]["sc_correct"] is True
    assert recs[2]["c"] == 1 and recs[2]["pass_at_k"]["1"] == pytest.approx(0.25)
    assert recs[2]["samples"][3]["error"].startswith("NameError")
    # The turn's pick is the product's vote: the silent majority of turn 3 does not win.
    assert recs[3]["sc_correct"] is True and recs[3]["sc_pick"] == 2
    s = data["summary"]
    assert s["pass_at_k"]["1"] == pytest.approx((0.5 + 0.25 + 0.25) / 3) and s["turns"] == 3
    # the follow-up prompt carries the earlier turn and its reference solution, and the schema
    assert "total of column a" in backend.prompts[1] and "df['a'].sum()" in backend.prompts[1]
    assert "# Columns in df with example values:" in backend.prompts[0]
    assert (out / "summary.md").is_file() and backend.calls == 3

    again = ScriptedSamples({})
    arcade.run_suite(notebooks=nbs, data_dir=tmp_path / "data", out=out, backend=again,
                     settings=settings, samples=4, ks=(1,), progress=False, print_fn=None)
    assert again.calls == 0
