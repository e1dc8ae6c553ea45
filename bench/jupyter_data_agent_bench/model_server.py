"""The OpenAI-protocol server ``bench loop`` serves its simulated policy through.

It is the runtime tests' (``tests/openai_server``): one implementation, owned by the tests,
so that no test of the runtime needs this distribution. The bench is installed from a
checkout, after the runtime (``bench/pyproject.toml``: one repository, one version), and
the checkout's ``tests`` is reached from here: an editable runtime already has the checkout
on ``sys.path``, otherwise this file's checkout is added. Only ``loop`` imports this, when
it runs: every other command works from the bench's wheel alone.
"""

import sys
from pathlib import Path

try:
    from tests.openai_server import OpenAITestServer, RecordedRequest
except ModuleNotFoundError:  # a runtime installed without the checkout on its path
    sys.path.append(str(Path(__file__).resolve().parents[2]))
    from tests.openai_server import OpenAITestServer, RecordedRequest

__all__ = ["OpenAITestServer", "RecordedRequest"]
