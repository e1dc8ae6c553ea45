"""Thread and wait-policy choice for the local model on a busy machine (llm/cores.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jupyter_data_agent.llm.cores import CoreMeter, CpuReading, choose_threads, usable_cores, wait_policy_env


@pytest.mark.parametrize(("usable", "others", "threads"), [
    (2, 0.0, 2),    # idle: every core
    (2, 0.4, 2),    # a little background work: still both
    (2, 0.6, 1),    # a core mostly taken (a kernel computing): leave it
    (2, 1.0, 1),    # a numpy matmul loop on one core
    (2, 2.0, 1),    # everything busy: still one thread, never zero
    (2, 7.5, 1),
    (8, 2.2, 6),
    (8, 0.0, 8),
    (1, 0.0, 1),
])
def test_threads_are_the_cores_others_left_free(usable, others, threads):
    assert choose_threads(usable, CpuReading(others, 1.0)) == threads


def test_no_reading_uses_every_usable_core():
    assert choose_threads(3, None) == 3


def test_usable_cores_follow_the_affinity_mask():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no sched_getaffinity here")
    assert usable_cores() == len(os.sched_getaffinity(0))
    code = "from jupyter_data_agent.llm.cores import usable_cores; print(usable_cores())"
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "1"


def test_meter_counts_other_processes_not_this_one():
    """A busy loop in this process is ours; one in another process is someone else's."""
    meter = CoreMeter()
    meter.read()
    end = time.monotonic() + 0.3
    while time.monotonic() < end:  # our own CPU: must not count
        pass
    mine = meter.read()
    assert mine is not None and 0.2 <= mine.window_s <= 2.0
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
    try:
        time.sleep(0.3)
        meter.read()
        time.sleep(0.6)
        other = meter.read()
    finally:
        spinner.kill()
        spinner.wait()
    assert other is not None
    # Our own loop (at least a share of a core) is not someone else's; the spinner is.
    assert mine.others_busy <= (os.cpu_count() or 1) - 0.2
    assert other.others_busy >= 0.5


def test_wait_policy_names():
    assert wait_policy_env("passive") == "PASSIVE"
    assert wait_policy_env("default") == ""
    with pytest.raises(ValueError, match="wait_policy must be one of passive, active, default"):
        wait_policy_env("sleepy")


IMPORT = """
import os, sys
from jupyter_data_agent.llm.cores import IMPORTED, import_llama_cpp
import_llama_cpp(sys.argv[1])
print(os.environ.get("OMP_WAIT_POLICY"), IMPORTED["policy"], IMPORTED["effective"])
"""


@pytest.mark.parametrize(("policy", "env", "seen", "reported"), [
    ("passive", None, "PASSIVE", "PASSIVE"),
    ("active", None, "ACTIVE", "ACTIVE"),
    ("passive", "ACTIVE", "ACTIVE", "ACTIVE"),  # the user's environment wins
])
def test_wait_policy_reaches_openmp_and_not_the_environment(policy, env, seen, reported):
    """libgomp prints the policy it read (OMP_DISPLAY_ENV); kernels started later must not
    inherit ours, so the environment is back as it was after the import."""
    pytest.importorskip("llama_cpp")
    environ = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    environ["OMP_DISPLAY_ENV"] = "TRUE"
    if env:
        environ["OMP_WAIT_POLICY"] = env
    out = subprocess.run([sys.executable, "-c", IMPORT, policy], capture_output=True, text=True,
                         env=environ, check=True, timeout=120)
    if "OMP_WAIT_POLICY" not in out.stderr:
        pytest.skip("this llama.cpp build does not use libgomp")
    assert f"OMP_WAIT_POLICY = '{seen}'" in out.stderr
    assert out.stdout.split() == [env or "None", reported, "True"]
