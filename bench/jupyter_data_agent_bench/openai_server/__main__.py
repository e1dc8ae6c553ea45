"""``python -m jupyter_data_agent_bench.openai_server``: see :mod:`.cli`."""

from .cli import main

main()
