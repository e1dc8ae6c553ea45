"""ARCADE prompt builder (golden layout, truncation, chat) and output parser."""

from __future__ import annotations

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from jupyter_data_agent.context.model import METADATA_KEY, Cell, NotebookContext, Turn
from jupyter_data_agent.context.notebook import from_history, from_notebook
from jupyter_data_agent.prompts import (
    EXEMPLARS,
    STEP_PREFIX,
    UnparsableOutput,
    build_chat_prompt,
    build_prompt,
    join_cells,
    linearize,
    parse_chat,
    parse_completion,
    stop_sequences,
)
from jupyter_data_agent.prompts.arcade import (
    EXPLAIN_INSTRUCTION,
    EXPLAIN_PREAMBLE,
    EXPLAIN_SYSTEM_PROMPT,
    NotebookBlocks,
    uncomment_lines,
)
from tests.golden_turns import ACCEPTED, golden_turn, pointer


def count(s: str) -> int:
    return len(s.split())


SCHEMA = """\
# Schema of Dataframes:
# Columns in flights with example values:
# airline (AA), dep_delay (12.0), month (7)
# Columns in airlines with example values:
# code (AA), name (American Airlines)"""

INTENT = "Which airline has the longest average delay in July?"


def _notebook():
    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("# Flight delays\nWe look at **delays** per airline."),
        new_code_cell("import pandas as pd", execution_count=1),
        new_code_cell(
            "flights = pd.read_csv('flights.csv')\nairlines = pd.read_csv('airlines.csv')\n",
            execution_count=2,
        ),
        # Prior turn 1: asked through the magic, solution in the next cell.
        new_code_cell("%%agent\nHow many flights are there?", execution_count=3),
        new_code_cell(
            "# Step 1: Count the rows.\nflights.shape[0]",
            execution_count=4,
            outputs=[new_output("execute_result", data={"text/plain": "5000"}, execution_count=4)],
        ),
        new_markdown_cell("## Delays"),
        new_code_cell("flights.groupby('airline')['dep_delay'].mean()", execution_count=5),
        new_code_cell(""),  # the empty cell the answer goes to: left out
    ]
    # Prior turn 2: asked in the sidebar, stored as the front end stores it
    # (notebook metadata, and a pointer on its cell).
    cell = nb.cells[6]
    turn = golden_turn(ACCEPTED, code=cell.source, cell_ids=[cell.id])
    assert turn["intent"] == "What is the mean departure delay per airline?" and turn["status"] == "accepted"
    nb.metadata[METADATA_KEY] = {"version": 1, "turns": [turn]}
    cell.metadata.update(pointer(turn))
    return nb


GOLDEN = """\
# In[ ]:


# # Flight delays
# We look at **delays** per airline.


# In[ ]:


import pandas as pd


# In[ ]:


flights = pd.read_csv('flights.csv')
airlines = pd.read_csv('airlines.csv')


# In[ ]:


# Problem: How many flights are there?


# In[ ]:


# Step 1: Count the rows.
flights.shape[0]


# In[ ]:


# ## Delays


# In[ ]:


# Problem: What is the mean departure delay per airline?


# In[ ]:


flights.groupby('airline')['dep_delay'].mean()


# In[ ]:


# Schema of Dataframes:
# Columns in flights with example values:
# airline (AA), dep_delay (12.0), month (7)
# Columns in airlines with example values:
# code (AA), name (American Airlines)


# In[ ]:


# Problem: Which airline has the longest average delay in July?


# In[ ]:


# Solution: Let's solve this problem step-by-step.
# Step 1:"""

# The part that is never dropped.
TAIL = GOLDEN[GOLDEN.index("# Schema of Dataframes:") :]


def test_golden_prompt():
    ctx = from_notebook(_notebook())
    built = build_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count)
    assert built.prompt.text == GOLDEN
    assert not built.prompt.is_chat
    assert built.tokens == count(GOLDEN)
    assert (built.dropped_cells, built.truncated, built.over_budget) == (0, False, False)
    assert built.prefix == STEP_PREFIX and GOLDEN.endswith(built.prefix)


def test_golden_prompt_with_outputs():
    ctx = from_notebook(_notebook())
    text = build_prompt(ctx, INTENT, schema=SCHEMA, outputs="all").prompt.text
    assert "# Step 1: Count the rows.\nflights.shape[0]\n# Output: 5000\n\n\n# In[ ]:" in text
    # No active cell and no error: "active" shows no output at all.
    assert build_prompt(ctx, INTENT, schema=SCHEMA).prompt.text == GOLDEN


# --------------------------------------------------------------------------
# the active cell's outputs and error (Fix / Explain)

# An IPython 8 traceback as the front end sends it (ANSI colours included).
KEYERROR_TRACEBACK = [
    "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
    "\x1b[0;31mKeyError\x1b[0m                                  Traceback (most recent call last)",
    "Cell \x1b[0;32mIn[3], line 1\x1b[0m\n"
    "\x1b[0;32m----> 1\x1b[0m \x1b[43mflights\x1b[49m[\x1b[38;5;124m'colum'\x1b[39m]"
    "\x1b[38;5;241m.\x1b[39mmean()\n",
    "File \x1b[0;32m~/venv/lib/python3.11/site-packages/pandas/core/frame.py:3761\x1b[0m, in "
    "\x1b[0;36mDataFrame.__getitem__\x1b[0;34m(self, key)\x1b[0m\n"
    "\x1b[1;32m   3759\x1b[0m \x1b[38;5;28;01mif\x1b[39;00m self.columns.nlevels > 1:\n"
    "\x1b[0;32m-> 3761\x1b[0m indexer \x1b[38;5;241m=\x1b[39m self.columns.get_loc(key)\n",
    "File ~/venv/lib/python3.11/site-packages/pandas/core/indexes/base.py:3654, in Index.get_loc(self, key)\n"
    "   3653 except KeyError as err:\n"
    "-> 3654     raise KeyError(key) from err\n"
    "   3655 except TypeError:\n",
    "\x1b[0;31mKeyError\x1b[0m: 'colum'",
]
FIX = "Fix the error in this cell"


def _error_notebook():
    """The golden notebook with an active cell that raised ``KeyError: 'colum'``."""
    nb = _notebook()
    nb.cells[-1] = new_code_cell(
        "flights['colum'].mean()",
        execution_count=6,
        outputs=[
            new_output("stream", name="stdout", text="computing...\n"),
            new_output("error", ename="KeyError", evalue="'colum'", traceback=KEYERROR_TRACEBACK),
        ],
    )
    return nb


def _text(built) -> str:
    p = built.prompt
    return p.text if p.text is not None else "\n".join(m.content for m in p.messages)


@pytest.mark.parametrize("builder", [build_prompt, build_chat_prompt])
def test_active_cell_error_is_in_the_prompt(builder):
    nb = _error_notebook()
    ctx = from_notebook(nb, active_index=len(nb.cells) - 1)
    built = builder(ctx, FIX, schema=SCHEMA, count_tokens=count)
    text = _text(built)
    block = (
        "flights['colum'].mean()\n"
        "# Output: computing...\n"
        "# Error: KeyError: 'colum'\n"
        "# Traceback (last lines):\n"
    )
    assert block in text
    assert "# -> 3654     raise KeyError(key) from err" in text  # where it failed
    assert "\x1b" not in text and "3655 except TypeError" not in text  # colours, context lines
    assert "# Output: 5000" not in text  # only the active cell's outputs


@pytest.mark.parametrize("builder", [build_prompt, build_chat_prompt])
def test_active_cell_error_survives_truncation(builder):
    nb = _error_notebook()
    ctx = from_notebook(nb, active_index=len(nb.cells) - 1)

    def tokens(built):
        return built.tokens

    full = builder(ctx, FIX, schema=SCHEMA, count_tokens=count)
    some = builder(ctx, FIX, schema=SCHEMA, count_tokens=count, budget=tokens(full) - 1)
    tiny = builder(ctx, FIX, schema=SCHEMA, count_tokens=count, budget=5)
    for built in (some, tiny):
        text = _text(built)
        assert built.truncated and "# Error: KeyError: 'colum'" in text
        assert "flights['colum'].mean()" in text and SCHEMA in text and FIX in text
    assert some.dropped_cells == 1 and not some.over_budget
    # Everything but the active cell went, before the error could.
    assert tiny.dropped_cells == 6 and tiny.over_budget
    assert "import pandas" not in _text(tiny)


@pytest.mark.parametrize("builder", [build_prompt, build_chat_prompt])
def test_outputs_none_leaves_the_error_out(builder):
    nb = _error_notebook()
    ctx = from_notebook(nb, active_index=len(nb.cells) - 1)
    built = builder(ctx, FIX, schema=SCHEMA, count_tokens=count, outputs="none")
    text = _text(built)
    assert "flights['colum'].mean()" in text
    assert "KeyError" not in text and "# Output:" not in text
    every = builder(ctx, FIX, schema=SCHEMA, count_tokens=count, outputs="all")
    text = _text(every)
    assert "# Output: 5000" in text and "# Error: KeyError: 'colum'" in text
    with pytest.raises(ValueError):
        builder(ctx, FIX, outputs=True)  # type: ignore[arg-type]


def test_notebook_blocks_pin_the_active_cell_for_other_builders():
    """Builders that truncate on their own (the ReAct task) drop through
    ``NotebookBlocks.blocks(drop)`` and keep the error the same way."""
    nb = _error_notebook()
    ctx = from_notebook(nb, active_index=len(nb.cells) - 1)
    notebook = NotebookBlocks.of(ctx)
    assert notebook.blocks() == linearize(ctx)
    assert notebook.droppable == 6
    (only,) = notebook.blocks(notebook.droppable)
    assert only.startswith("flights['colum'].mean()\n# Output: computing...\n# Error: KeyError: 'colum'")
    assert "# Problem: What is the mean" in "".join(notebook.blocks(5))  # the problem goes with its cell


def test_without_active_cell_the_last_error_is_pinned():
    """The magic has no cursor: the last cell that raised is the one shown,
    and truncation drops the cells around it first."""
    try:
        {}["colum"]
    except KeyError as exc:
        error = exc
    In = ["", "import pandas as pd", "flights = pd.read_csv('f.csv')", "flights['colum']", "x = 1", "y = 2"]
    ctx = from_history(In, {}, errors={3: error})
    assert ctx.active_cell() is not None and ctx.active_cell().source == "flights['colum']"
    assert ctx.active_cell().error.text == "KeyError: 'colum'"
    full = build_prompt(ctx, FIX, count_tokens=count)
    assert "flights['colum']\n# Error: KeyError: 'colum'\n# Traceback (last lines):" in full.prompt.text
    tiny = build_prompt(ctx, FIX, count_tokens=count, budget=5)
    assert tiny.dropped_cells == 4 and "# Error: KeyError: 'colum'" in tiny.prompt.text
    assert "x = 1" not in tiny.prompt.text
    assert ctx.cells[-1].outputs == []
    assert "KeyError" not in build_prompt(ctx, FIX, outputs="none").prompt.text


def test_explain_prompt_pieces():
    """Explain reuses the builders with its own system prompt, instruction
    and completion preamble, and reads a comment-block answer back."""
    nb = _error_notebook()
    ctx = from_notebook(nb, active_index=len(nb.cells) - 1)
    chat = build_chat_prompt(ctx, "Explain this cell", system=EXPLAIN_SYSTEM_PROMPT,
                             instruction=EXPLAIN_INSTRUCTION)
    assert chat.prompt.messages[0].content == EXPLAIN_SYSTEM_PROMPT
    assert chat.prompt.messages[-1].content.endswith(EXPLAIN_INSTRUCTION)
    assert "exactly one ```python" not in _text(chat)
    comp = build_prompt(ctx, "Explain this cell", preamble=EXPLAIN_PREAMBLE, prefix="#")
    assert comp.prompt.text.endswith(f"# Problem: Explain this cell\n\n\n# In[ ]:\n\n\n{EXPLAIN_PREAMBLE}\n#")
    assert comp.prefix == "#"
    assert uncomment_lines("# The column is `colum`.\n#\n# - a typo\nflights['x']") == (
        "The column is `colum`.\n\n- a typo"
    )


def test_budget_that_fits_changes_nothing():
    ctx = from_notebook(_notebook())
    built = build_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, budget=count(GOLDEN))
    assert built.prompt.text == GOLDEN and not built.truncated


def test_truncation_drops_oldest_whole_cells():
    ctx = from_notebook(_notebook())
    built = build_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, budget=count(GOLDEN) - 1)
    # Only the first (markdown) cell had to go.
    first_cell = "# In[ ]:\n\n\n# # Flight delays\n# We look at **delays** per airline.\n\n\n"
    assert built.prompt.text == GOLDEN[len(first_cell) :]
    assert (built.dropped_cells, built.truncated, built.over_budget) == (1, True, False)
    assert built.tokens <= count(GOLDEN) - 1


def test_truncation_drops_a_prior_turn_with_its_problem_cell():
    ctx = from_notebook(_notebook())
    keep_from = GOLDEN.index("# In[ ]:\n\n\n# ## Delays")
    budget = count(GOLDEN[keep_from:])
    built = build_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, budget=budget)
    assert built.prompt.text == GOLDEN[keep_from:]
    assert built.dropped_cells == 4  # markdown, import, read_csv, solution of turn 1
    assert "How many flights" not in built.prompt.text


def test_tiny_budget_keeps_schema_and_intent_and_flags():
    ctx = from_notebook(_notebook())
    built = build_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, budget=5)
    assert built.prompt.text == "# In[ ]:\n\n\n" + TAIL
    assert built.dropped_cells == 6
    assert built.truncated and built.over_budget
    assert built.tokens == count(built.prompt.text) > 5


def test_turn_with_two_cells_keeps_problem_before_surviving_cell():
    turn = Turn(intent="Clean and plot", turn_id="t1", status="accepted")
    ctx = NotebookContext(
        cells=[
            Cell("code", "a = 1"),
            Cell("code", "df = df.dropna()", turn_id="t1"),
            Cell("code", "df.plot()", turn_id="t1"),
            Cell("code", "bad()", turn_id="t2"),
        ],
        turns=[turn, Turn(intent="rejected one", turn_id="t2", status="rejected")],
    )
    full = build_prompt(ctx, "next", count_tokens=count).prompt.text
    assert full.count("# Problem: Clean and plot") == 1
    assert "bad()" not in full and "rejected one" not in full  # rejected turns are left out
    built = build_prompt(ctx, "next", count_tokens=count, budget=count(full) - 9)
    assert built.dropped_cells == 2
    assert built.prompt.text == join_cells(
        ["# Problem: Clean and plot", "df.plot()", "# Problem: next",
         "# Solution: Let's solve this problem step-by-step.\n# Step 1:"]
    )


def test_active_index_limits_cells():
    ctx = NotebookContext(cells=[Cell("code", "a = 1"), Cell("code", "b = 2")], active_index=0)
    text = build_prompt(ctx, "x?").prompt.text
    assert "a = 1" in text and "b = 2" not in text


def test_exemplars_come_first_and_are_dropped_before_cells():
    ctx = from_notebook(_notebook())
    built = build_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, exemplars=True)
    text = built.prompt.text
    assert text.endswith(GOLDEN[len("# In[ ]:\n\n\n") :])
    assert text.index(EXEMPLARS[0].intent) < text.index("# # Flight delays")
    assert text.count("# Solution: Let's solve this problem step-by-step.") == len(EXEMPLARS) + 1
    assert "# Problem: How many rows are there?\n\n\n# In[ ]:\n\n\n# Solution: Let's solve" in text

    tight = build_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, exemplars=True, budget=count(GOLDEN))
    assert tight.prompt.text == GOLDEN
    assert (tight.dropped_exemplars, tight.dropped_cells) == (len(EXEMPLARS), 0)
    assert tight.truncated


def test_exemplars_are_runnable_step_by_step_code():
    for ex in EXEMPLARS:
        parsed = parse_completion(ex.solution, prefix="")
        assert [s.number for s in parsed.steps] == list(range(1, len(parsed.steps) + 1))
        assert all(s.explanation and s.code for s in parsed.steps)
        assert ex.schema.startswith("# Schema of Dataframes:\n# Columns in ")
        compile(ex.solution, "<exemplar>", "exec")
    trivial = [ex for ex in EXEMPLARS if ex.intent == "How many rows are there?"]
    assert trivial and len(parse_completion(trivial[0].solution, prefix="").steps) == 1


def test_empty_intent_is_an_error():
    with pytest.raises(ValueError):
        build_prompt(NotebookContext(), "  ")


def test_chat_prompt_structure():
    ctx = from_notebook(_notebook())
    built = build_chat_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count)
    msgs = built.prompt.messages
    assert built.prompt.is_chat and built.prefix == ""
    assert [m.role for m in msgs] == ["system", "user"]
    assert "exactly ONE ```python" in msgs[0].content
    user = msgs[1].content
    notebook_part = GOLDEN[: GOLDEN.index("\n\n\n# In[ ]:\n\n\n# Schema of Dataframes:")]
    assert f"```python\n{notebook_part}\n```" in user
    assert f"```python\n{SCHEMA}\n```" in user
    assert f"Problem: {INTENT}" in user
    assert user.index(notebook_part) < user.index(SCHEMA) < user.index(INTENT)
    assert "# Solution:" not in user and "# Step N: <explanation>" in user
    assert built.tokens == sum(count(m.content) for m in msgs)

    with_ex = build_chat_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, exemplars=True)
    roles = [m.role for m in with_ex.prompt.messages]
    assert roles == ["system"] + ["user", "assistant"] * len(EXEMPLARS) + ["user"]
    assert with_ex.prompt.messages[2].content.startswith("```python\n# Step 1:")

    tiny = build_chat_prompt(ctx, INTENT, schema=SCHEMA, count_tokens=count, budget=10, exemplars=True)
    assert [m.role for m in tiny.prompt.messages] == ["system", "user"]
    assert tiny.dropped_cells == 6 and tiny.dropped_exemplars == len(EXEMPLARS) and tiny.over_budget
    assert SCHEMA in tiny.prompt.messages[-1].content and INTENT in tiny.prompt.messages[-1].content
    assert "My notebook so far" not in tiny.prompt.messages[-1].content


# --------------------------------------------------------------------------
# parser


def test_stop_sequences():
    stops = stop_sequences()
    assert "# In[ ]:" in stops and "\n# Problem:" in stops and len(stops) <= 4


def test_completion_cut_at_stop_marker_and_prefix_reattached():
    sample = (
        " Keep July flights.\n"
        "july = flights[flights['month'] == 7]\n"
        "\n"
        "# Step 2: Average delay per airline, largest first.\n"
        "july.groupby('airline')['dep_delay'].mean().idxmax()\n"
        "\n\n# In[ ]:\n\n\n# Problem: something else\nprint('no')\n"
    )
    parsed = parse_completion(sample, prefix="# Step 1:")
    assert parsed.code == (
        "# Step 1: Keep July flights.\n"
        "july = flights[flights['month'] == 7]\n"
        "\n"
        "# Step 2: Average delay per airline, largest first.\n"
        "july.groupby('airline')['dep_delay'].mean().idxmax()"
    )
    assert [(s.number, s.explanation) for s in parsed.steps] == [
        (1, "Keep July flights."),
        (2, "Average delay per airline, largest first."),
    ]
    assert parsed.steps[0].code == "july = flights[flights['month'] == 7]"
    assert parsed.steps[1].code == "july.groupby('airline')['dep_delay'].mean().idxmax()"
    assert parsed.explanation.splitlines()[0] == "Step 1: Keep July flights."

    # A new problem without a cell header also ends the cell; an echoed prefix is not doubled.
    parsed = parse_completion("# Step 1: rows\nflights.shape[0]\n# Problem: next one\nx = 1")
    assert parsed.code == "# Step 1: rows\nflights.shape[0]"


def test_step_marker_variants_and_wrapped_explanations():
    code = (
        "#Step 1 - load\n"
        "a = 1\n"
        "# Step 2. Sum things up\n"
        "# over all rows\n"
        "b = a + 1\n"
        "# step 3) show\n"
        "b"
    )
    parsed = parse_completion(code, prefix="")
    assert [(s.number, s.explanation, s.code) for s in parsed.steps] == [
        (1, "load", "a = 1"),
        (2, "Sum things up over all rows", "b = a + 1"),
        (3, "show", "b"),
    ]


def test_code_before_first_step_is_step_zero_and_no_steps():
    parsed = parse_completion("import numpy as np\n# Step 1: mean\nnp.mean([1, 2])", prefix="")
    assert [(s.number, s.explanation, s.code) for s in parsed.steps] == [
        (0, "", "import numpy as np"),
        (1, "mean", "np.mean([1, 2])"),
    ]
    plain = parse_chat("```python\ndf.shape[0]\n```")
    assert plain.code == "df.shape[0]"
    assert [(s.number, s.explanation, s.code) for s in plain.steps] == [(0, "", "df.shape[0]")]


def test_chat_fenced_block():
    reply = (
        "Sure! Here is the cell:\n\n"
        "```text\nnot this\n```\n"
        "```python\n"
        "# Solution: Let's solve this problem step-by-step.\n"
        "# Step 1: Keep July.\n"
        "july = flights[flights.month == 7]\n"
        "# Step 2: Largest mean delay.\n"
        "july.groupby('airline').dep_delay.mean().idxmax()\n"
        "```\n\nThis returns the airline code.\n"
        "```python\nignored = True\n```"
    )
    parsed = parse_chat(reply)
    assert parsed.code.startswith("# Step 1: Keep July.\n")
    assert parsed.code.endswith(".idxmax()")
    assert [s.number for s in parsed.steps] == [1, 2]
    assert "ignored" not in parsed.code

    untagged = parse_chat("```\n# Step 1: x\nx = 1\n```")
    assert untagged.code == "# Step 1: x\nx = 1"
    unclosed = parse_chat("```python\n# Step 1: x\nx = 1\n# Step 2: y\ny = 2")
    assert [s.number for s in unclosed.steps] == [1, 2]
    header = parse_chat("```python\n# In[ ]:\n\n\nz = 3\n\n\n# In[ ]:\n\n\nw = 4\n```")
    assert header.code == "z = 3"


def test_chat_without_fence_falls_back_to_code():
    parsed = parse_chat("Here is the code:\n# Step 1: count\nlen(df)\n")
    assert parsed.code == "# Step 1: count\nlen(df)"
    assert parsed.steps[0].explanation == "count"


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, I can't help with that request.",
        "Sure",
        "```python\n# Step 1: nothing to do\n```\nSorry, no idea.",
        "",
    ],
)
def test_garbage_chat_is_unparsable(text):
    with pytest.raises(UnparsableOutput):
        parse_chat(text)


def test_garbage_completion_is_unparsable():
    with pytest.raises(UnparsableOutput):
        parse_completion(" Just think about it.\n\n# In[ ]:\n\n\ncode_in_next_cell()")
    with pytest.raises(UnparsableOutput):
        parse_completion("<|endoftext|>")
