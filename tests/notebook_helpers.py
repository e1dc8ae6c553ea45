"""A saved notebook with a live kernel session, as a user has it open, for tests of any surface
(MCP, ACP, Jupyter AI); free of the MCP SDK, so a venv with another SDK version imports it."""

from __future__ import annotations

import json

import nbformat

NOTEBOOK = "work/flights.ipynb"
SETUP = ("import pandas as pd\n"
         "df = pd.DataFrame({'a': [1, 2, 3], 'b': [4.0, 5.0, 6.0], 'city': ['Oslo', 'Lima', 'Pune']})\n"
         "extra = pd.DataFrame({'x': range(5)})")
#: Our MCP tools, as every host of them lists them (our route, jupyter-server-mcp's)
TOOLS = {"list_notebooks", "read_notebook", "list_variables", "describe_dataframe", "try_code",
         "compare_answers", "propose_cell", "propose_edit", "proposal_status", "ask_data_agent"}


async def open_notebook(jp_fetch, app, root_dir, code: str = SETUP, headers=None):
    """A saved notebook with a session (a running kernel) whose namespace holds ``code``'s state;
    ``headers``: whose session (the server's token by default)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Flights", id="m1"),
                nbformat.v4.new_code_cell(code, id="c1", execution_count=1,
                                          outputs=[nbformat.v4.new_output("stream", name="stdout", text="ok\n")])]
    (root_dir / "work").mkdir(exist_ok=True)
    nbformat.write(nb, str(root_dir / NOTEBOOK))
    r = await jp_fetch("api", "sessions", method="POST", headers=headers, body=json.dumps(
        {"path": NOTEBOOK, "name": "flights.ipynb", "type": "notebook", "kernel": {"name": "python3"}}))
    kernel_id = json.loads(r.body)["kernel"]["id"]
    km = app.kernel_manager.get_kernel(kernel_id)
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=120)
    reply = await kc.execute(code, reply=True, timeout=120)
    assert reply["content"]["status"] == "ok", reply["content"]
    return km, kc


async def live_value(kc, expression: str):
    reply = await kc.execute("", user_expressions={"v": expression}, reply=True, timeout=60)
    value = reply["content"]["user_expressions"]["v"]
    assert value["status"] == "ok", value
    return value["data"]["text/plain"]
