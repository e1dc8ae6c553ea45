"""``explain``: one model call, a prose answer about the active cell and its error; nothing runs."""

from __future__ import annotations

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from jupyter_data_agent.context.notebook import from_notebook
from jupyter_data_agent.llm.base import Backend, Capabilities, Completion, Prompt, SamplingParams
from jupyter_data_agent.prompts import UnparsableOutput
from jupyter_data_agent.prompts.arcade import EXPLAIN_PREAMBLE, EXPLAIN_SYSTEM_PROMPT
from jupyter_data_agent.search import RunContext, TurnRequest, get_strategy
from jupyter_data_agent.search.options import ExplainOptions, PromptPolicy, SamplingPolicy

PROSE = (
    "The cell asks for a column named `colum`, but `flights` has no such column, "
    "so pandas raises `KeyError: 'colum'`.\n\n- Did you mean `month`?"
)


class FakeBackend(Backend):
    """Records what it was sent and answers with a fixed text."""

    name = "fake"

    def __init__(self, reply: str, *, chat: bool = True, completion: bool = True) -> None:
        self.reply = reply
        self.caps = Capabilities(chat=chat, completion=completion, logprobs=False)
        self.calls: list[tuple[Prompt, SamplingParams]] = []

    @property
    def model(self) -> str:
        return "fake"

    @property
    def capabilities(self) -> Capabilities:
        return self.caps

    def generate(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        self.calls.append((prompt, params))
        return [Completion(self.reply, prompt_tokens=50, completion_tokens=20)]


class NoCopies:
    """An executor that fails the test if the strategy touches it."""

    def exec(self, code):
        raise AssertionError("explain must not run code")

    def fork(self):
        raise AssertionError("explain must not run code")

    def close(self):
        pass


def _context():
    nb = new_notebook()
    nb.cells = [
        new_code_cell("import pandas as pd\nflights = pd.read_csv('flights.csv')", execution_count=1),
        new_code_cell(
            "flights['colum'].mean()",
            execution_count=2,
            outputs=[new_output("error", ename="KeyError", evalue="'colum'", traceback=[
                "\x1b[0;31mKeyError\x1b[0m    Traceback (most recent call last)",
                "Cell In[2], line 1\n----> 1 flights['colum'].mean()",
                "\x1b[0;31mKeyError\x1b[0m: 'colum'",
            ])],
        ),
    ]
    return from_notebook(nb, active_index=1)


def _request(api_mode="auto", **sampling):
    return TurnRequest(
        intent="Explain this cell",
        context=_context(),
        schema="# Schema of Dataframes:\n# Columns in flights with example values:\n# month (7)",
        options=ExplainOptions(),
        prompt=PromptPolicy(api_mode=api_mode),
        sampling=SamplingPolicy(**sampling),
    )


def _text(prompt: Prompt) -> str:
    return prompt.text if prompt.text is not None else "\n".join(m.content for m in prompt.messages)


def test_explain_chat_sends_the_error_and_returns_prose():
    backend = FakeBackend(PROSE)
    request = _request(temperature=0.0, max_new_tokens=300)
    result = get_strategy("explain").run(request, RunContext(backend=backend, executor=NoCopies()))

    assert len(backend.calls) == 1
    prompt, params = backend.calls[0]
    assert prompt.is_chat and prompt.messages[0].content == EXPLAIN_SYSTEM_PROMPT
    sent = _text(prompt)
    assert "flights['colum'].mean()\n# Error: KeyError: 'colum'" in sent
    assert "----> 1 flights['colum'].mean()" in sent
    assert "exactly one ```python" not in sent and "# Step N" not in sent  # no code-cell rules
    assert "The cell in question is the last cell of the notebook." in sent
    assert (params.n, params.temperature, params.max_tokens, params.stop) == (1, 0.0, 300, ())

    assert result.answer == PROSE
    assert result.chosen is None and result.candidates == []
    assert result.strategy == "explain" and "KeyError: 'colum'" in result.prompt
    stats = result.stats
    assert (stats.model_calls, stats.prompt_tokens, stats.completion_tokens) == (1, 50, 20)
    assert stats.executions == 0


def test_explain_completion_continues_a_comment_block():
    reply = (" The cell asks for `colum`, a column `flights` lacks.\n#\n"
             "# - Did you mean `month`?\n\n\n# In[ ]:")
    backend = FakeBackend(reply, chat=False)
    result = get_strategy("explain").run(_request(), RunContext(backend=backend))

    prompt, params = backend.calls[0]
    assert not prompt.is_chat
    assert "# Error: KeyError: 'colum'" in prompt.text
    assert prompt.text.endswith(f"{EXPLAIN_PREAMBLE}\n#")
    assert params.stop and params.temperature == SamplingPolicy().temperature
    assert result.answer == "The cell asks for `colum`, a column `flights` lacks.\n\n- Did you mean `month`?"


def test_explain_follows_api_mode_and_leaves_outputs_out_when_told():
    backend = FakeBackend(PROSE)
    request = _request(api_mode="completion")
    request.prompt = PromptPolicy(api_mode="completion", outputs="none")
    get_strategy("explain").run(request, RunContext(backend=backend))
    prompt, _ = backend.calls[0]
    assert not prompt.is_chat and "KeyError" not in prompt.text


def test_empty_explanation_is_an_error():
    with pytest.raises(UnparsableOutput):
        get_strategy("explain").run(_request(), RunContext(backend=FakeBackend("  \n")))
