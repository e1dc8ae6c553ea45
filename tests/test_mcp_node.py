"""Long tries through the TypeScript MCP SDK v1, the client of Cursor and many IDE agents.

That SDK ends a request after 60 s (``DEFAULT_REQUEST_TIMEOUT_MSEC``) unless the
caller passes ``resetTimeoutOnProgress`` and the server sends progress: a 70-s
``try_code`` died at exactly 60.0 s before the tools sent any (issue 35, finding 2).
``tests/mcp_node/try_code.mjs`` makes one call with the real SDK (installed by
``.ci/run``: ``npm ci`` in ``tests/mcp_node``) against a real server and kernel.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from tests import test_mcp
from tests.test_mcp import NOTEBOOK, live_value, open_notebook, url
from tests.test_server import on_server_loop

jp_server_config, server = test_mcp.jp_server_config, test_mcp.server  # the MCP tests' fixtures

CLIENT = Path(__file__).with_name("mcp_node")
if shutil.which("node") is None or not (CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
    pytest.skip("the TypeScript MCP SDK is not installed: (cd tests/mcp_node && npm ci)", allow_module_level=True)


async def ts_try(app, port, code: str, *, try_timeout: float, request_timeout_ms: int, reset: bool) -> dict:
    proc = await asyncio.create_subprocess_exec(
        "node", str(CLIENT / "try_code.mjs"), url(app, port), app.identity_provider.token, NOTEBOOK, code,
        str(try_timeout), str(request_timeout_ms), "1" if reset else "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(CLIENT))
    out, err = await asyncio.wait_for(proc.communicate(), timeout=try_timeout + 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])


@pytest.mark.timeout(240)
@on_server_loop
async def test_a_70_s_try_completes_in_the_typescript_sdk_v1_with_reset_on_progress(server, jp_fetch):
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    try:
        out = await ts_try(app, port, "import time\nlong_run = 1\ntime.sleep(70)\n'done'",
                           try_timeout=120, request_timeout_ms=60_000, reset=True)
        assert out["ok"], out
        assert out["elapsed_s"] >= 70, out["elapsed_s"]
        assert "done" in json.dumps(out["result"]["value"]), out["result"]
        # a notification at least every few seconds, each saying what runs and for how long
        assert len(out["progress"]) >= 70 / 5, out["progress"]
        assert any("running the code in a copy" in m for m in out["progress"]), out["progress"]
        assert await live_value(kc, "'long_run' in globals()") == "False"
    finally:
        kc.stop_channels()


@pytest.mark.timeout(180)
@on_server_loop
async def test_progress_is_what_keeps_the_sdks_timeout_from_ending_a_try(server, jp_fetch):
    """The mechanism with a 5-s request timeout and an 8-s try: without
    ``resetTimeoutOnProgress`` the SDK gives up at its timeout; with it the try answers."""
    app, port, root = server
    km, kc = await open_notebook(jp_fetch, app, root)
    code = "import time\ntime.sleep(8)\n'slept'"
    try:
        cut_off = await ts_try(app, port, code, try_timeout=60, request_timeout_ms=5_000, reset=False)
        assert not cut_off["ok"] and "timed out" in cut_off["error"].lower(), cut_off
        assert cut_off["elapsed_s"] < 8, cut_off
        kept = await ts_try(app, port, code, try_timeout=60, request_timeout_ms=5_000, reset=True)
        assert kept["ok"] and kept["elapsed_s"] >= 8, kept
        assert "slept" in json.dumps(kept["result"]["value"]), kept["result"]
    finally:
        kc.stop_channels()
