"""Server configuration for the UI tests (Galata's, plus our test model).

The model settings come from the environment (see playwright.config.js):
JUPYTER_DATA_AGENT_BACKEND=openai, OPENAI_BASE_URL pointing at
tests/openai_server/, OPENAI_API_KEY, JUPYTER_DATA_AGENT_MODEL.
"""

import os
import tempfile
from urllib.parse import urlsplit

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821

# Real-time collaboration (jupyter-collaboration) only on the second server the UI tests
# start (JDA_UI_RTC=1, rtc.spec.ts): the other specs run as one user always does (their
# server also has jupyter-collaboration's lab extensions disabled: single-user/).
RTC = os.environ.get("JDA_UI_RTC") == "1"
c.ServerApp.port = int(os.environ.get("JDA_UI_RTC_PORT" if RTC else "JDA_UI_LAB_PORT", "8888"))  # noqa: F821
c.YDocExtension.disable_rtc = not RTC  # noqa: F821
# jupyter-collaboration's own state (the Y updates of each document, file ids, session ids)
# in a folder of this server's, not in the working directory or the user's data directory:
# every run starts from the files alone, and side-by-side runs share nothing.
_state = tempfile.mkdtemp(prefix="galata-collaboration-")
c.SQLiteYStore.db_path = os.path.join(_state, "ystore.db")  # noqa: F821
c.BaseFileIdManager.db_path = os.path.join(_state, "file_id_manager.db")  # noqa: F821
c.YDocExtension.session_store_path = os.path.join(_state, "collaboration_sessions.json")  # noqa: F821
# Quieter logs; the extension's own log lines stay visible.
c.ServerApp.log_level = "INFO"  # noqa: F821
# CI containers run as root.
c.ServerApp.allow_root = True  # noqa: F821
# Kernel copies on a CI machine may lack a confinement layer (no seccomp, an
# old kernel's Landlock): "warn" still runs candidates, so the UI tests see
# real outputs, and the badge says "partially confined" with what is missing.
c.DataAgent.confinement = "warn"  # noqa: F821
# Limits other than the defaults (32, 1000): the sidebar must take them from GET config
# (limits.spec.ts), not from numbers of its own.
c.DataAgent.max_samples = 12  # noqa: F821
c.DataAgent.max_budget = 150  # noqa: F821
# The test model reads images (vision.spec.ts). Image parts go only with a plot output of
# the active cell, which no other spec has, so their requests stay text; JDA_UI_VISION=0
# turns it off.
c.DataAgent.vision = os.environ.get("JDA_UI_VISION", "1") != "0"  # noqa: F821
# "Connect a model" (connect.spec.ts) looks only at the test model server (never at this
# machine's Ollama or vLLM ports) and writes its setting to a folder of this server's, never
# to the user's Jupyter config.
c.ModelConnect.ports = {  # noqa: F821
    "Test model server": urlsplit(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8765/v1")).port or 8765,
}
c.ModelConnect.config_dir = tempfile.mkdtemp(prefix="galata-connect-")  # noqa: F821

# Two models, one priced (usage.spec.ts: each turn's cost is its own model's price; the
# sidebar's model picker). The configured model (JUPYTER_DATA_AGENT_MODEL=test-model) has
# no price, so its inline completion stays on ("auto") and its turns show no cost.
c.DataAgent.models = ["big-model"]  # noqa: F821
c.DataAgent.prices = {"big-model": {"input": 5, "output": 15}}  # noqa: F821
