"""How many cores a local model may use now, and how its threads wait.

Measured on a 2-core machine (``bench.runtime --contention``, docs/benchmarks.md):
llama.cpp with as many threads as physical cores and OpenMP's default
(spinning) wait decodes at a few percent of its idle speed as soon as another
process computes, because a thread that spins waits for a core the other
process holds. Two changes keep most of the idle speed:

* **A bounded spin.** llama.cpp's OpenMP threads meet at a barrier after
  every operation, hundreds of times per token. Spinning there is what makes
  an idle machine fast (``OMP_WAIT_POLICY=PASSIVE``, sleeping at each
  barrier, decoded at 40 % of the spinning speed); spinning long is what
  makes a busy one slow (a spinning thread holds a core while its partner
  waits for one). ``wait_policy = 'bounded'`` spins ``BOUNDED_SPINS`` times
  (``GOMP_SPINCOUNT``), far longer than a barrier takes on a free core and far
  shorter than libgomp's default, then sleeps. libgomp reads its environment
  once, when it is loaded (importing ``llama_cpp`` loads it), so
  :func:`import_llama_cpp` sets it for that import only and puts the
  environment back: kernels the server launches later must not inherit it.
* **Threads follow the free cores.** Before each request, :class:`CoreMeter`
  reads how much CPU *other* processes used since the last reading (the whole
  machine's busy time minus this process's own; niced processes, such as kernel
  copies, yield to the model and do not count), and :func:`choose_threads`
  gives the model the cores left over, at least one, at most the cores this
  process may run on (``sched_getaffinity``: a container or ``taskset``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

#: Spins before a waiting thread sleeps, for ``wait_policy = 'bounded'`` (libgomp's default
#: is 300,000 without OMP_WAIT_POLICY: long enough to hold a core another process wants).
BOUNDED_SPINS = 10_000
#: ``c.DataAgent.wait_policy`` values -> the libgomp environment read when it loads ({}: the library's own).
WAIT_POLICIES: dict[str, dict[str, str]] = {
    "bounded": {"GOMP_SPINCOUNT": str(BOUNDED_SPINS)},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "default": {},
}
_OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_MIN_WINDOW_S = 0.05  # a reading over a shorter window is noise: sample this long instead
_MAX_WINDOW_S = 2.0  # an older reading says little about now: sample afresh


def usable_cores() -> int:
    """Cores this process may run on (affinity, else the machine's), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class CpuReading:
    """Over ``window_s`` seconds: cores' worth of CPU used by other processes."""

    others_busy: float
    window_s: float


def choose_threads(usable: int, reading: CpuReading | None) -> int:
    """Threads for the next request: the usable cores other processes left free, in [1, usable].

    A core more than half used by others counts as taken: a thread waiting for
    it stalls every other thread of the model at the next barrier.
    """
    if reading is None:
        return usable
    free = usable - reading.others_busy
    return max(1, min(usable, int(free + 0.5)))


class CoreMeter:
    """Other processes' CPU use since the previous reading (``psutil``; None without it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, float, float] | None = None  # (wall, machine busy, own cpu)

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            import psutil

            machine = psutil.cpu_times()
        except (ImportError, OSError, RuntimeError):
            return None
        # Not ``nice`` time: niced processes (kernel copies run at nice 10) yield to the model.
        busy = machine.user + machine.system + getattr(machine, "irq", 0.0) \
            + getattr(machine, "softirq", 0.0) + getattr(machine, "steal", 0.0)
        own = os.times()
        return time.monotonic(), busy, own.user + own.system

    def read(self) -> CpuReading | None:
        """A reading since the last call, or over a fresh 50 ms window when that one is
        too short or too old to tell."""
        with self._lock:
            last, now = self._last, self._sample()
            if now is None:
                return None
            if last is None or not _MIN_WINDOW_S <= now[0] - last[0] <= _MAX_WINDOW_S:
                last = now
                time.sleep(_MIN_WINDOW_S)
                now = self._sample()
                if now is None:
                    return None
            self._last = now
        window = now[0] - last[0]
        others = (now[1] - last[1]) - (now[2] - last[2])
        return CpuReading(max(0.0, others / window), window)


METER = CoreMeter()


def wait_policy_env(policy: str) -> dict[str, str]:
    """The libgomp environment for ``c.DataAgent.wait_policy`` (clear error on a typo)."""
    try:
        return dict(WAIT_POLICIES[policy])
    except KeyError:
        raise ValueError(f"wait_policy must be one of {', '.join(WAIT_POLICIES)}, not {policy!r}") from None


def openmp_loaded() -> bool:
    """Whether libgomp is already in this process (then it keeps the wait policy it read)."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        return any("libgomp" in line for line in maps)
    return False


_IMPORT_LOCK = threading.Lock()
#: What the first import of llama_cpp in this process got: the policy asked for, and
#: whether it took effect (False: libgomp was loaded before, e.g. by torch).
IMPORTED: dict[str, Any] = {}


def import_llama_cpp(policy: str) -> Any:
    """``import llama_cpp`` with OpenMP's wait policy set for the load, the environment restored.

    The user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` wins: then ours is not set at all.
    """
    wanted = wait_policy_env(policy)
    with _IMPORT_LOCK:
        import sys

        if "llama_cpp" in sys.modules:
            return sys.modules["llama_cpp"]
        users = {k: os.environ[k] for k in _OMP_VARS if k in os.environ}
        effective = not openmp_loaded()
        ours = {} if users else wanted
        os.environ.update(ours)
        try:
            import llama_cpp
        finally:
            for key in ours:
                os.environ.pop(key, None)
        chosen = users or ours
        IMPORTED.update(policy=", ".join(f"{k}={v}" for k, v in chosen.items()) or "library default",
                        effective=effective)
        return llama_cpp
