"""A Jupyter AI chat message read as a turn (``mcp.chat_turn``): its strategy word, its notebook,
and untrusted text kept as text. The persona and the turn itself: tests/test_with_jupyter_ai_persona.py."""

from __future__ import annotations

import pytest

from jupyter_data_agent.mcp.chat_turn import STRATEGY_WORDS, Unusable, parse, quoted


@pytest.mark.parametrize("body, strategy", [
    ("@DataAgent /vote which month sold most?", "vote"),
    ("@DataAgent /search which month sold most?", "mcts"),
    ("@DataAgent /analysis which month sold most?", "analysis"),
    ("@dataagent: /quick which month sold most?", "direct"),
    ("/react which month sold most?", "react"),
    ("which month sold most?", None),
])
def test_a_leading_word_picks_the_strategy_and_the_rest_is_the_question(body, strategy):
    ask = parse(body)
    assert (ask.strategy, ask.intent) == (strategy, "which month sold most?")


def test_explain_is_not_a_chat_word_and_an_unknown_word_is_refused_with_the_words():
    assert "/explain" not in STRATEGY_WORDS  # the chat runs code (search.registry)
    with pytest.raises(Unusable, match=r"Unknown command /explain: start with one of .*/vote"):
        parse("@DataAgent /explain df")
    with pytest.raises(Unusable, match="Ask a question"):
        parse("@DataAgent /vote   ")


def test_the_notebook_comes_from_an_attachment_then_file_mentions_then_paths_in_the_text():
    ask = parse("@DataAgent mean delay in @file:work/flights.ipynb vs old/2019.ipynb",
                attached=["notes.txt", "attached.ipynb"])
    assert ask.paths == ["attached.ipynb", "work/flights.ipynb", "old/2019.ipynb"]
    assert ask.intent == "mean delay in vs old/2019.ipynb"


def test_untrusted_text_cannot_leave_its_code_span():
    span = quoted("x `` y")
    assert span == "``` x `` y ```"
