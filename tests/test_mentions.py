"""``@variable`` mentions and the context report (the sidebar's context gauge).

End to end: a real Jupyter server and kernel holding a 30-column frame
``wide`` and a small ``df``, the real OpenAI SDK against the local
OpenAI-protocol server, whose recorded request is the prompt the model saw.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from tornado.httpclient import HTTPClientError

from jupyter_data_agent.context.model import Cell, NotebookContext, Output
from jupyter_data_agent.context.report import FrameCut
from jupyter_data_agent.kernel.inkernel.schema import inspect_namespace, mentions, schema_block, schema_cuts
from jupyter_data_agent.prompts.arcade import build_prompt
from tests.conftest import agent_server_config
from tests.kernel_helpers import run_cell, stop_kernel
from tests.kernel_helpers import start_kernel as start_plain_kernel
from tests.test_server import NS, on_server_loop, post_turn, replies, start_kernel, stream_events

FRAMES_CELL = (
    "import pandas as pd\n"
    "wide = pd.DataFrame({f'c{i}': [i, i + 1, i + 2] for i in range(30)})\n"
    "df = pd.DataFrame({'a': [1, 2, 3], 'city': ['Oslo', 'Lima', 'Pune']})"
)
WIDE_COLUMNS = [f"c{i}" for i in range(30)]


def frames_ns() -> dict:
    wide = pd.DataFrame({f"c{i}": [i, i + 1, i + 2] for i in range(30)})
    df = pd.DataFrame({"a": [1, 2, 3], "city": ["Oslo", "Lima", "Pune"]})
    return {"wide": wide, "df": df, "price": df["a"].rename("price")}


# -- parsing and the schema block, in process ----------------------------------------


def test_mentions_are_identifiers_after_an_at_sign_once_each_in_order():
    assert mentions("compare @wide with @df, then @wide again") == ["wide", "df"]
    # An e-mail address, a decorator-like word inside text and a bare "@" are not mentions.
    assert mentions("mail me at a@b.com or @ noon; x@y") == []
    assert mentions("@_private and @2x") == ["_private"]
    assert mentions("") == []


def test_a_mentioned_frame_is_first_in_full_and_the_others_are_summarized():
    frames = inspect_namespace(frames_ns(), full=mentions("mean of every column of @wide"))
    block = schema_block(frames).splitlines()
    assert block[0] == "# Schema of Dataframes:"
    assert block[1] == "# Columns in wide with example values:"
    # Every column, each with three distinct example values.
    assert all(f"{c} (" in block[2] for c in WIDE_COLUMNS)
    assert "c29 (29, 30, 31)" in block[2]
    assert block[3].startswith("# wide: 3 rows x 30 columns; dtypes: c0=int64")
    assert block[4] == "# Other DataFrames (summary):"
    assert block[5] == "# df: 3 rows x 2 columns; columns: a, city"
    assert block[6] == "# Series price: 3 rows, dtype int64"
    cuts = schema_cuts(frames)
    assert cuts.mentioned == ["wide"]
    assert cuts.frames_cut == []


def test_without_a_mention_a_wide_frame_is_cut_and_the_cut_is_reported():
    frames = inspect_namespace(frames_ns())
    block = schema_block(frames)
    assert "# First 20 columns in wide with example values:" in block
    assert "c19 (19)" in block and "c20" not in block
    assert schema_cuts(frames).frames_cut == [FrameCut("wide", 20, 30, False)]


def test_a_summarized_wide_frame_is_reported_as_cut():
    ns = frames_ns()
    frames = inspect_namespace(ns, full=["df"])
    cuts = schema_cuts(frames)
    assert cuts.mentioned == ["df"]
    assert cuts.frames_cut == [FrameCut("wide", 6, 30, True)]
    assert "# wide: 3 rows x 30 columns; columns: c0, c1, c2, c3, c4, c5, ... (24 more)" in schema_block(frames)


def test_a_mention_that_is_not_a_frame_changes_nothing():
    ns = frames_ns()
    assert schema_block(inspect_namespace(ns, full=["nothing"])) == schema_block(inspect_namespace(ns))


def test_a_mentioned_frame_is_inspected_even_beyond_max_frames():
    ns = {f"f{i}": pd.DataFrame({"x": [i]}) for i in range(5)}
    names = [f.name for f in inspect_namespace(ns, max_frames=2, full=["f0"])]
    assert names == ["f0", "f4"]


def test_the_prompt_reports_cut_outputs_and_dropped_cells():
    long_output = "\n".join(f"row {i}" for i in range(200))
    cells = [Cell(cell_type="code", source=f"x{i} = {i} * 1000  # some code to fill the budget")
             for i in range(40)]
    cells.append(Cell(cell_type="code", source="print(df)",
                      outputs=[Output(output_type="stream", text=long_output)]))
    context = NotebookContext(cells=cells, active_index=40)
    built = build_prompt(context, "what is in df?", budget=400)
    assert built.dropped_cells > 0
    assert built.outputs_cut == 1
    assert built.tokens <= 400
    untruncated = build_prompt(context, "what is in df?", output_chars=100_000)
    assert untruncated.outputs_cut == 0 and untruncated.dropped_cells == 0


def test_run_turn_puts_the_report_in_the_stats_for_every_strategy():
    """Direct builds the report with its prompt; a strategy with prompts of its own gets its first one's fill."""
    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.turn import TurnAsk, resolve, run_turn
    from tests.scripted_backend import ScriptedBackend

    frames = inspect_namespace(frames_ns())
    schema, cuts = schema_block(frames), schema_cuts(frames)
    settings = Settings(backend="openai", max_prompt_tokens=2000)
    context = NotebookContext(cells=[Cell(cell_type="code", source="x = 1")], active_index=0)
    direct = run_turn(resolve(settings, TurnAsk(intent="mean of wide?", execute=False)), context,
                      ScriptedBackend(lambda call: ["```python\n# Step 1: Mean.\nwide.mean()\n```"]),
                      schema=schema, schema_cuts=cuts)
    report = direct.stats.context
    assert report is not None and report.window == 2000
    assert 0 < report.prompt_tokens <= 2000
    assert report.frames_cut == [FrameCut("wide", 20, 30, False)]
    assert report.cells_dropped == 0 and not report.over_budget
    assert report.line() == f"context {report.prompt_tokens:,}/2,000 tokens; cut: wide 20/30 columns"

    # A strategy that fits its own messages (react, mcts) leaves no report: the first prompt's fill.
    from jupyter_data_agent.search import SearchResult

    class OwnPrompt:
        name = "own"

        def run(self, request, ctx):
            return SearchResult(chosen=None, prompt="word " * 300, strategy=self.name)

    own = run_turn(resolve(settings, TurnAsk(intent="mean of wide?", execute=False)), context,
                   ScriptedBackend(lambda call: []), schema=schema, schema_cuts=cuts, strategy=OwnPrompt())
    report = own.stats.context
    assert report is not None and report.window == 2000
    assert report.prompt_tokens == ScriptedBackend(lambda call: []).count_tokens("word " * 300)
    assert report.frames_cut == [FrameCut("wide", 20, 30, False)]


# -- end to end: a real server and kernel -------------------------------------------


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


@pytest.fixture
def jp_server_config(model_server, monkeypatch):
    model_server.clear()
    model_server.reply = replies
    return agent_server_config(model_server, monkeypatch, max_prompt_tokens=6000)


def schema_lines(prompt: str) -> list[str]:
    start = prompt.rindex("# Schema of Dataframes:")  # the exemplars have their own before it
    return prompt[start:].splitlines()


def context_of(events: list[dict]) -> dict:
    done = events[-1]
    assert done["type"] == "done", done
    return done["data"]["result"]["stats"]["context"]


@on_server_loop
async def test_mentioning_wide_puts_its_full_schema_first(jp_fetch, jp_ws_fetch, jp_serverapp, model_server):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp, FRAMES_CELL)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id,
                                   intent="Which column of @wide has the largest mean?")
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
        prompt = model_server.generation_requests[-1].prompt
        assert "Which column of @wide has the largest mean?" in prompt  # the text stays readable
        lines = schema_lines(prompt)
        assert lines[1] == "# Columns in wide with example values:"
        assert all(f"{c} (" in lines[2] for c in WIDE_COLUMNS)
        assert lines[4] == "# Other DataFrames (summary):"
        assert lines[5] == "# df: 3 rows x 2 columns; columns: a, city"
        report = context_of(events)
        assert report["mentioned"] == ["wide"]
        assert report["frames_cut"] == []
        assert report["window"] == 6000
        assert 0 < report["prompt_tokens"] <= 6000
        assert report["cells_dropped"] == 0
    finally:
        kc.stop_channels()


@on_server_loop
async def test_without_the_mention_wide_is_cut_and_the_report_says_so(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                       model_server):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp, FRAMES_CELL)
    try:
        accepted = await post_turn(jp_fetch, kernel_id=kernel_id,
                                   intent="Which column of wide has the largest mean?")
        events = await stream_events(jp_ws_fetch, accepted["job_id"])
        prompt = model_server.generation_requests[-1].prompt
        lines = schema_lines(prompt)
        assert "# First 20 columns in wide with example values:" in lines
        assert "c20 (" not in prompt
        assert "# Columns in df with example values:" in lines  # no mention: no summaries
        report = context_of(events)
        assert report["mentioned"] == []
        assert report["frames_cut"] == [{"name": "wide", "shown_columns": 20, "total_columns": 30,
                                         "summarized": False}]
    finally:
        kc.stop_channels()


@on_server_loop
async def test_the_variables_endpoint_lists_the_kernels_frames(jp_fetch, jp_serverapp):
    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp, FRAMES_CELL + "\ns = df['a']")
    try:
        r = await jp_fetch(NS, "variables", params={"kernel_id": kernel_id})
        reply = json.loads(r.body)
        assert reply["available"] is True and reply["kernel_id"] == kernel_id
        by_name = {v["name"]: v for v in reply["variables"]}
        assert set(by_name) == {"wide", "df", "s"}
        assert by_name["wide"] == {"name": "wide", "kind": "DataFrame", "shape": [3, 30],
                                   "columns": WIDE_COLUMNS[:8], "total_columns": 30}
        assert by_name["df"]["columns"] == ["a", "city"]
        assert by_name["s"]["kind"] == "Series" and by_name["s"]["shape"] == [3]
        # The inspection is silent: the user's execution count did not move.
        count = (await kc.execute("1", reply=True, timeout=60))["content"]["execution_count"]
        assert count == 2
    finally:
        kc.stop_channels()


@on_server_loop
async def test_the_variables_endpoint_refuses_bad_input(jp_fetch):
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch(NS, "variables")
    assert missing.value.code == 400
    with pytest.raises(HTTPClientError) as unknown:
        await jp_fetch(NS, "variables", params={"kernel_id": "no-such-kernel"})
    assert unknown.value.code == 404


# -- the %%agent magic honours @mentions too --------------------------------------------


@pytest.fixture(scope="module")
def magic_kernel(model_server, tmp_path_factory):
    env = {
        "JUPYTER_DATA_AGENT_BACKEND": "openai",
        "OPENAI_BASE_URL": model_server.base_url,
        "OPENAI_API_KEY": "sk-test-mentions",
        "JUPYTER_DATA_AGENT_MODEL": "test-model",
        "JUPYTER_CONFIG_DIR": str(tmp_path_factory.mktemp("jupyter-config")),
    }
    km, kc = start_plain_kernel(env)
    setup = run_cell(kc, FRAMES_CELL + "\n%load_ext jupyter_data_agent")
    assert setup.status == "ok", setup
    yield kc
    stop_kernel(km, kc)


def test_the_magic_gives_a_mentioned_frame_in_full_first(magic_kernel, model_server):
    model_server.clear()
    run = run_cell(magic_kernel, "%%agent --no-exec\nWhich column of @wide has the largest mean?")
    assert run.status == "ok", run
    lines = schema_lines(model_server.generation_requests[-1].prompt)
    assert lines[1] == "# Columns in wide with example values:"
    assert all(f"{c} (" in lines[2] for c in WIDE_COLUMNS)
    assert lines[4] == "# Other DataFrames (summary):"
    # The summary under the cell says how full the prompt was and what was given in full.
    assert "; in full: @wide" in run.display_text()


@on_server_loop
async def test_a_busy_kernel_is_not_waited_for(jp_fetch, jp_serverapp):
    """A long cell is running: the popup is told why, in about REPLY_TIMEOUT_S, instead of hanging."""
    import time

    from jupyter_data_agent.server.variables import REPLY_TIMEOUT_S

    kernel_id, km, kc = await start_kernel(jp_fetch, jp_serverapp, FRAMES_CELL)
    try:
        kc.execute("import time; time.sleep(30)")
        started = time.monotonic()
        r = await jp_fetch(NS, "variables", params={"kernel_id": kernel_id})
        reply = json.loads(r.body)
        assert time.monotonic() - started < REPLY_TIMEOUT_S + 5
        assert reply["available"] is False and reply["variables"] == []
        assert "busy" in reply["reason"]
    finally:
        await km.interrupt_kernel()
        kc.stop_channels()
