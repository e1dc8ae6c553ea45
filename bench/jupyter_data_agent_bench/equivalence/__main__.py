"""``python -m jupyter_data_agent_bench.equivalence``: see :func:`.runner.main`."""

import sys

from .runner import main

sys.exit(main())
