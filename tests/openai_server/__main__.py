"""``python -m tests.openai_server``: see :mod:`.cli`."""

from .cli import main

main()
