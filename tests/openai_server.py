"""The tests' OpenAI-protocol server is the benchmarks' (``jupyter-data-agent-bench loop``
serves its policy through it): one implementation, in the bench distribution (``bench/``).
``python -m tests.openai_server`` and ``from tests.openai_server import ...`` stay, and work
from a checkout where the bench is not installed (``pip install -e ./bench``)."""

import sys
from pathlib import Path

try:
    import jupyter_data_agent_bench  # noqa: F401
except ModuleNotFoundError:  # the checkout's bench/, as tests/conftest.py does for the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from jupyter_data_agent_bench.openai_server import OpenAITestServer, RecordedRequest, main, tokenize

__all__ = ["OpenAITestServer", "RecordedRequest", "main", "tokenize"]

if __name__ == "__main__":
    main()
