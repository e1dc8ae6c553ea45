"""The benchmarks wait for a server's kernel through a stall: ``loop.ready_client``.

``python -m jupyter_data_agent_bench.try_code`` crashed in 2 of 3 runs under load
with "Kernel died before replying to kernel_info": jupyter_client's
``wait_for_ready`` on a client made from a connection file judges the kernel by
its heartbeat, and a kernel that stalls for more than a second (a loaded
machine, a kernel still importing) is called dead though it answers a moment
later. A real kernel is stalled here with SIGSTOP for 3 s. Whether a kernel died is
asked of the server instead (``JupyterServer.kernel_died``): a killed kernel is said
dead at once, not after the whole wait.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
from jupyter_client import BlockingKernelClient
from kernel_helpers import start_kernel, stop_kernel

from jupyter_data_agent_bench.loop import ready_client

STALL_S = 3.0


@pytest.fixture
def kernel():
    km, kc = start_kernel()
    try:
        yield km
    finally:
        with contextlib.suppress(ProcessLookupError):  # a test may have killed it
            os.kill(km.provisioner.process.pid, signal.SIGCONT)
        stop_kernel(km, kc)


def _stall(km) -> threading.Timer:
    """SIGSTOP the kernel now; SIGCONT after ``STALL_S`` (returned: join it)."""
    pid = km.provisioner.process.pid
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(STALL_S, os.kill, (pid, signal.SIGCONT))
    resume.start()
    return resume


def test_jupyter_clients_own_wait_calls_a_stalled_kernel_dead(kernel):
    """The control: what the bench did, on the same stall."""
    client = BlockingKernelClient(connection_file=kernel.connection_file)
    client.load_connection_file()
    client.start_channels()
    try:
        deadline = time.monotonic() + 30
        while not client.is_alive() and time.monotonic() < deadline:  # its heartbeat is seen once
            time.sleep(0.1)
        resume = _stall(kernel)
        with pytest.raises(RuntimeError, match="died"):
            client.wait_for_ready(timeout=60)
        resume.join()
    finally:
        client.stop_channels()


def test_ready_client_waits_through_a_stall(kernel):
    resume = _stall(kernel)
    t0 = time.monotonic()
    client = ready_client(kernel.connection_file, timeout=60)
    try:
        waited = time.monotonic() - t0
        assert waited >= STALL_S - 0.5, waited  # it answered only once resumed
        reply = client.execute_interactive("1 + 1", store_history=False, timeout=60)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        resume.join()


def test_ready_client_gives_up_in_words_on_a_kernel_that_never_answers(kernel):
    os.kill(kernel.provisioner.process.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="respond"):
        ready_client(kernel.connection_file, timeout=2)
    assert time.monotonic() - t0 < 15


def test_ready_client_says_at_once_that_a_killed_kernel_died(kernel):
    """A real death is not waited out: ``died`` (the server's account, here the kernel manager's)
    is asked between the waits."""
    kernel.provisioner.process.kill()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="died before it answered kernel_info: killed"):
        ready_client(kernel.connection_file, timeout=120,
                     died=lambda: None if kernel.provisioner.process.poll() is None else "killed")
    assert time.monotonic() - t0 < 30
