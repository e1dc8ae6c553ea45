"""Plots reach the model: image parts for vision models, text summaries for the others.

Kernels are real ipykernel processes (Agg and the inline backend), the model
endpoint the OpenAI-protocol test server reached through the real SDK.
"""

from __future__ import annotations

import base64
import io
import sys

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from jupyter_data_agent.config import Settings
from jupyter_data_agent.context.notebook import from_notebook
from jupyter_data_agent.kernel import plots
from jupyter_data_agent.kernel.forktree.snapshot import SnapshotTree
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.results import Limits
from jupyter_data_agent.llm import images
from jupyter_data_agent.llm.openai_backend import OpenAIBackend
from jupyter_data_agent.turn import resolve, run_turn
from jupyter_data_agent.turn.spec import TurnAsk
from tests.openai_server import OpenAITestServer

pytestmark = pytest.mark.timeout(300)

INLINE = "module://matplotlib_inline.backend_inline"
PLOT = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 2, 3, 4], [10.0, 12.5, 9.0, 15.0], label="AA")
ax.bar(["q1", "q2"], [3, 5], label="volume")
ax.set_title("Delays by quarter")
ax.set_xlabel("quarter")
ax.set_ylabel("delay (min)")
ax.legend(title="carrier")
"""


def png(width: int, height: int) -> str:
    """A real PNG of ``width`` x ``height`` pixels (noise: it does not compress away), base64."""
    from PIL import Image

    img = Image.frombytes("RGB", (width, height), bytes((i * 7919) % 251 for i in range(width * height * 3)))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


SMALL = png(24, 12)


def plot_notebook(*pngs: str, text: str = "<Figure size 640x480 with 1 Axes>"):
    nb = new_notebook()
    nb.cells = [
        new_code_cell("import pandas as pd\ndf = pd.DataFrame({'q': [1, 2], 'delay': [3.0, 5.0]})",
                      execution_count=1),
        new_code_cell("df.plot(x='q', y='delay', title='Delay')", execution_count=2, outputs=[
            new_output("display_data", data={"image/png": p, "text/plain": text}) for p in pngs]),
    ]
    return nb


# ------------------------------------------------------------------ summaries in kernels


@pytest.fixture(scope="module", params=["Agg", INLINE])
def kernel(request, tmp_path_factory):
    km, kc = start_kernel(env={"MPLBACKEND": request.param}, cwd=tmp_path_factory.mktemp("nb"))
    reply = kc.execute_interactive("import matplotlib.pyplot as plt", timeout=120)
    assert reply["content"]["status"] == "ok"
    yield kc
    stop_kernel(km, kc)


def test_a_candidate_plot_is_summarized_in_the_kernel_copy(kernel, tmp_path):
    tree = SnapshotTree.from_blocking_client(kernel, notebook_dir=str(tmp_path), limits=Limits(timeout_s=60))
    try:
        copy = tree.root.fork()
        result = copy.exec(PLOT)
        copy.close()
    finally:
        tree.close()
    assert result.ok, result.text()
    figures = [o for o in result.outputs if "image/png" in o.data]
    assert len(figures) == 1 and len(figures[0].data["image/png"]) > 1000  # the image is kept
    summary = figures[0].data["text/plain"]
    assert summary.startswith("[plot: figure with 1 axes]")
    assert "'Delays by quarter'" in summary
    assert "x 'quarter'" in summary and "y 'delay (min)'" in summary
    assert "line 'AA': 4 points" in summary and "y 9 – 15" in summary
    assert "bars 'volume': 2 bars, heights 3 – 5" in summary
    assert "legend 'carrier': 'AA', 'volume'" in summary
    # the prompt text of the candidate's output is the summary
    assert "Delays by quarter" in result.text()


def test_the_active_cells_plot_is_described_from_the_live_kernel(kernel):
    from jupyter_data_agent.config import Settings
    from jupyter_data_agent.kernel import rpc
    from jupyter_data_agent.kernel.host.handle import BlockingClientHandle
    from jupyter_data_agent.turn import TurnAsk, prepare, resolve

    reply = kernel.execute_interactive(PLOT, timeout=120)
    assert reply["content"]["status"] == "ok"
    nb = plot_notebook(SMALL)
    nb.cells[1].source = PLOT
    context = from_notebook(nb, active_index=1)
    assert context.active_cell().cell.outputs[0].text == plots.PLOT_MARKER
    state = "(sorted(globals()), get_ipython().execution_count, len(plt.get_fignums()))"
    before = rpc.call(kernel, state, timeout=30)

    spec = resolve(Settings(backend="openai"), TurnAsk(intent="what does the plot show?", execute=False,
                                       no_exec_reason="not needed here"))
    inputs = prepare(spec, context, BlockingClientHandle(kernel, notebook_dir=None, timeout=30))
    assert inputs.inspection.plots and inputs.copies.tree is None
    text = inputs.context.active_cell().cell.outputs[0].text
    assert text.startswith("[plot: figure with 1 axes]") and "'Delays by quarter'" in text
    assert "line 'AA': 4 points" in text
    # the context given is not changed: the description is in the new one
    assert context.active_cell().cell.outputs[0].text == plots.PLOT_MARKER
    # no name bound, no execution counted, no figure opened or closed in the user's kernel
    assert rpc.call(kernel, state, timeout=30) == before
    kernel.execute_interactive("plt.close('all')", timeout=60)  # Agg keeps figures open: later copies would show it


def test_summaries_follow_the_cells_names_else_the_open_figures():
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    first, axs = plt.subplots(1, 2)
    axs[0].set_title("first")
    second = plt.figure()
    second.gca().set_title("second")
    try:
        # the figure an array of Axes belongs to, once
        assert plots.summaries({"axs": axs, "n": 3}, ["n", "axs"]) == [plots.describe_figure(first)]
        # no name holds a figure: the open ones, and the current figure stays current
        assert [s.split("\n")[1] for s in plots.summaries({}, ["df"])] == [
            "axes 1 'first': x (no label) from 0 to 1; y (no label) from 0 to 1",
            "axes 1 'second': x (no label) from 0 to 1; y (no label) from 0 to 1"]
        assert plt.gcf() is second
    finally:
        plt.close("all")


def test_an_image_without_a_figure_keeps_the_marker():
    context = from_notebook(plot_notebook(SMALL), active_index=1)
    out = context.active_cell().cell.outputs[0]
    assert out.text == "[plot: image output]" and out.image == ("image/png", SMALL)
    summary = "[plot: figure with 1 axes]\naxes 1 'Delay': x 'q' from 1 to 2"
    kept = from_notebook(plot_notebook(SMALL, text=summary), active_index=1).active_cell().cell.outputs[0]
    assert kept.text == summary  # a copy's summary stays the output's text
    nb = plot_notebook(SMALL)
    nb.cells.append(new_code_cell("df.describe()", execution_count=3))
    later = from_notebook(nb, active_index=2)
    plot = later.cells[1].outputs[0]
    assert plot.text == "[plot: image output]" and plot.image is None  # only the active cell's image is kept
    assert later.active_cell().images == []


def test_a_plot_summary_is_not_cut_to_the_output_budget_of_the_prompt():
    from jupyter_data_agent.prompts.arcade import build_chat_prompt, cut_outputs

    summary = "[plot: figure with 1 axes]\naxes 1 'Delay': x 'q' from 1 to 2\n" + "\n".join(
        f"  line 'series {i}': 40 points, x 0 – 39, y {i} – {i + 10}" for i in range(8))
    assert len(summary) > 400
    nb = plot_notebook(SMALL, text=summary)
    nb.cells[1].outputs.insert(0, new_output("stream", name="stdout", text="x" * 600))
    context = from_notebook(nb, active_index=1)
    text = build_chat_prompt(context, "What does it show?", output_chars=200).prompt.messages[-1].content
    assert "\n".join(f"# {line}".rstrip() for line in summary.splitlines()) in text  # whole
    assert "x" * 150 in text and "x" * 300 not in text  # the printed text is cut to output_chars
    assert cut_outputs(context.active_cell().cell, 200) == 1  # the gauge counts the cut


# ------------------------------------------------------------------ images: which models, how big


@pytest.mark.parametrize("model, expected", [
    ("gpt-4o-mini", True), ("gpt-4.1", True), ("openai/gpt-5", True), ("o3", True),
    ("claude-3-5-sonnet", True), ("Qwen2.5-VL-7B-Instruct", True), ("llava:13b", True),
    ("meta-llama/Llama-3.2-11B-Vision-Instruct", True),
    ("test-model", False), ("o1-mini", False), ("gpt-3.5-turbo", False), ("Qwen2.5-Coder-7B", False),
    ("SmolLM2-135M-Instruct", False), ("", False),
])
def test_auto_vision_knows_model_names(model, expected):
    assert images.vision_enabled("auto", model) is expected


def test_explicit_vision_config_wins():
    assert images.vision_enabled(True, "test-model") is True
    assert images.vision_enabled(False, "gpt-4o") is False


def test_a_large_plot_is_resized_under_the_byte_cap():
    big = png(2400, 1600)
    part = images.prepare_image("image/png", big, max_bytes=200_000)
    assert part is not None
    raw = base64.b64decode(part.data)
    assert len(raw) <= 200_000
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as img:
        assert max(img.size) <= images.MAX_SIDE
    small = images.prepare_image("image/png", SMALL, max_bytes=200_000)
    assert small is not None and small.data == SMALL  # small enough: sent as is


def test_without_pillow_an_image_over_the_cap_is_left_out(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL raises ImportError
    assert images.prepare_image("image/png", SMALL, max_bytes=10) is None
    part = images.prepare_image("image/png", SMALL, max_bytes=100_000)
    assert part is not None and part.data == SMALL
    assert images.prepare_image("image/png", "not base64!", max_bytes=100_000) is None


def test_count_bound_keeps_the_last_images():
    a, b, c = png(10, 10), png(12, 10), png(14, 10)
    kept = images.prepare_images([("image/png", a), ("image/png", b), ("image/png", c)],
                                 max_images=2, max_bytes=100_000)
    assert [p.data for p in kept] == [b, c]
    assert images.prepare_images([("image/png", a)], max_images=0, max_bytes=100_000) == ()


# ------------------------------------------------------------------ the OpenAI backend's request


def ask(srv: OpenAITestServer, nb, *, strategy: str = "explain", model: str = "test-model", **settings):
    s = Settings(backend="openai", model=model, base_url=srv.base_url, request_timeout=10.0, max_retries=0,
                 **settings)
    backend = OpenAIBackend(s)
    try:
        spec = resolve(s, TurnAsk(intent="What does the plot show?", strategy=strategy, execute=False))
        run_turn(spec, from_notebook(nb, active_index=1), backend)
    finally:
        backend.close()
    chats = [r for r in srv.generation_requests if r.is_chat]
    assert chats, "no chat request reached the server"
    return chats[-1]


@pytest.fixture
def server():
    with OpenAITestServer(reply="The delay grows from q1 to q2.", models=("test-model", "gpt-4o-mini")) as srv:
        yield srv


def test_vision_on_sends_the_plot_as_an_image_part(server):
    request = ask(server, plot_notebook(SMALL), vision=True)
    assert request.images == [f"data:image/png;base64,{SMALL}"]
    user = request.messages[-1]
    assert isinstance(user["content"], list)
    assert user["content"][0]["type"] == "text" and "attached as images" in user["content"][0]["text"]
    assert "[plot: image output]" in user["content"][0]["text"]


def test_direct_turns_send_images_too(server):
    server.reply = "```python\n# Step 1: mean delay\ndf.delay.mean()\n```"
    request = ask(server, plot_notebook(SMALL), strategy="direct", vision=True)
    assert len(request.images) == 1


def test_vision_auto_follows_the_model_name(server):
    assert ask(server, plot_notebook(SMALL), model="gpt-4o-mini").images  # default vision="auto"
    assert ask(server, plot_notebook(SMALL), model="test-model").images == []


@pytest.mark.parametrize("settings", [{"vision": False}, {"vision": True, "send_images": False},
                                      {"vision": True, "max_images": 0}])
def test_text_only_or_images_off_sends_only_text(server, settings):
    request = ask(server, plot_notebook(SMALL), **settings)
    assert request.images == []
    assert all(isinstance(m["content"], str) for m in request.messages)
    assert "[plot: image output]" in request.prompt  # the model still knows a plot is there


def test_images_are_bounded_in_count_and_bytes(server):
    pngs = [png(10 + i, 10) for i in range(4)]
    request = ask(server, plot_notebook(*pngs), vision=True, max_images=2)
    assert request.images == [f"data:image/png;base64,{p}" for p in pngs[-2:]]
    big = png(1800, 1200)
    request = ask(server, plot_notebook(big), vision=True, max_image_bytes=150_000)
    (url,) = request.images
    assert len(base64.b64decode(url.split(",", 1)[1])) <= 150_000 and url != f"data:image/png;base64,{big}"


def test_completion_prompts_and_other_backends_ignore_images(server):
    # a completion-mode endpoint gets the text transcript: no image, no failure
    server.reply = "# The delay grows."
    request_count = len(server.generation_requests)
    s = Settings(backend="openai", model="test-model", base_url=server.base_url, api_mode="completion",
                 vision=True, request_timeout=10.0, max_retries=0)
    backend = OpenAIBackend(s)
    try:
        spec = resolve(s, TurnAsk(intent="What does the plot show?", strategy="explain", execute=False))
        run_turn(spec, from_notebook(plot_notebook(SMALL), active_index=1), backend)
    finally:
        backend.close()
    sent = server.generation_requests[request_count:]
    assert sent and not any(r.is_chat for r in sent)
    assert "[plot: image output]" in sent[-1].prompt and "base64" not in sent[-1].prompt


# ------------------------------------------------------------------ executed candidates' plots


@pytest.mark.parametrize("vision", [True, False])
def test_a_react_steps_plot_goes_to_the_model_with_the_next_observation(kernel, tmp_path, vision):
    from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
    from jupyter_data_agent.search.options import PromptPolicy, ReactOptions

    def reply(req):
        if not any(m["role"] == "assistant" for m in req.messages):  # the first step
            return f"Thought: plot the delays\nAction:\n```python\n{PLOT}\n```"
        return "Thought: the plot shows it\nFinal Answer: delays peak in q2"

    tree = SnapshotTree.from_blocking_client(kernel, notebook_dir=str(tmp_path), limits=Limits(timeout_s=60))
    with OpenAITestServer(reply=reply) as srv:
        backend = OpenAIBackend(Settings(backend="openai", model="test-model", base_url=srv.base_url,
                                         vision=vision, request_timeout=10.0, max_retries=0))
        try:
            request = TurnRequest(intent="How do delays change over the quarters?",
                                  context=from_notebook(plot_notebook()), options=ReactOptions(max_turns=3),
                                  prompt=PromptPolicy(max_prompt_tokens=6000, images=2))
            result = get_strategy("react").run(request, RunContext(backend=backend, executor=tree.root))
        finally:
            backend.close()
            tree.close()
        first, second = srv.generation_requests[:2]
    assert result.answer == "delays peak in q2"
    assert first.images == []
    observation = second.messages[-1]
    if vision:
        (url,) = second.images
        assert url.startswith("data:image/png;base64,") and len(url) > 1000
        assert observation["content"][0]["type"] == "text"
        text = observation["content"][0]["text"]
    else:
        assert second.images == [] and isinstance(observation["content"], str)
        text = observation["content"]
    # either way the observation says what the plot shows
    assert text.startswith("Observation:") and "'Delays by quarter'" in text and "line 'AA': 4 points" in text
