"""The tests' OpenAI-protocol server lives in the package (``bench loop`` serves its policy
through it); ``python -m tests.openai_server`` and ``from tests.openai_server import ...`` stay."""

from jupyter_data_agent.bench.openai_server import OpenAITestServer, RecordedRequest, main, tokenize

__all__ = ["OpenAITestServer", "RecordedRequest", "main", "tokenize"]

if __name__ == "__main__":
    main()
