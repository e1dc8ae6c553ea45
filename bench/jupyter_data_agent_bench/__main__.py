"""``python -m jupyter_data_agent_bench``: the same as ``jupyter-data-agent-bench``."""

import sys

from .cli import main

sys.exit(main())
