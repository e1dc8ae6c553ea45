"""Thread and wait-policy choice for the local model on a busy machine (llm/cores.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jupyter_data_agent.llm.cores import (
    BOUNDED_SPINS,
    CoreMeter,
    CpuReading,
    choose_threads,
    usable_cores,
    wait_policy_env,
)


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
    assert wait_policy_env("bounded") == {"GOMP_SPINCOUNT": str(BOUNDED_SPINS)}
    assert wait_policy_env("passive") == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert wait_policy_env("default") == {}
    with pytest.raises(ValueError, match="wait_policy must be one of bounded, passive, active, default"):
        wait_policy_env("sleepy")


def test_default_wait_policy_is_the_bounded_spin():
    """Measured (docs/benchmarks.md, contention): fast idle and on a busy machine."""
    from jupyter_data_agent.config import resolve_settings

    assert resolve_settings().wait_policy == "bounded"


IMPORT = """
import os, sys
from jupyter_data_agent.llm.cores import IMPORTED, import_llama_cpp
import_llama_cpp(sys.argv[1])
print(os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"), IMPORTED["policy"], IMPORTED["effective"])
"""


@pytest.mark.parametrize(("policy", "env", "seen", "reported"), [
    ("bounded", None, ["GOMP_SPINCOUNT = '10000'"], f"GOMP_SPINCOUNT={BOUNDED_SPINS}"),
    ("passive", None, ["OMP_WAIT_POLICY = 'PASSIVE'"], "OMP_WAIT_POLICY=PASSIVE"),
    ("active", None, ["OMP_WAIT_POLICY = 'ACTIVE'"], "OMP_WAIT_POLICY=ACTIVE"),
    # The user's environment wins, and then none of ours is set.
    ("passive", {"OMP_WAIT_POLICY": "ACTIVE"}, ["OMP_WAIT_POLICY = 'ACTIVE'"], "OMP_WAIT_POLICY=ACTIVE"),
    ("bounded", {"GOMP_SPINCOUNT": "500"}, ["GOMP_SPINCOUNT = '500'"],
     "GOMP_SPINCOUNT=500"),
])
def test_wait_policy_reaches_openmp_and_not_the_environment(policy, env, seen, reported):
    """libgomp prints what it read (OMP_DISPLAY_ENV=VERBOSE); kernels started later must not
    inherit ours, so the environment is back as it was after the import."""
    pytest.importorskip("llama_cpp")
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    environ["OMP_DISPLAY_ENV"] = "VERBOSE"
    environ.update(env or {})
    out = subprocess.run([sys.executable, "-c", IMPORT, policy], capture_output=True, text=True,
                         env=environ, check=True, timeout=120)
    if "OMP_WAIT_POLICY" not in out.stderr:
        pytest.skip("this llama.cpp build does not use libgomp")
    for line in seen:
        assert line in out.stderr
    env = env or {}
    assert out.stdout.split() == [env.get("OMP_WAIT_POLICY", "None"), env.get("GOMP_SPINCOUNT", "None"),
                                  reported, "True"]
