"""Starting and stopping a private kernel (replay copies, benchmarks, tests).

``jupyter_client.manager.start_new_kernel`` does the work. The ``python3``
spec resolves to this environment's (jupyter_core prefers the env's path),
whose ``python`` jupyter_client runs as ``sys.executable``: such a kernel runs
our interpreter and venv; a named spec of another environment runs there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from jupyter_client.manager import start_new_kernel

#: Applied unless the environment already says otherwise: no GUI backend, and
#: no BLAS thread pool per kernel (copies share the machine with the model).
KERNEL_ENV = {"MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}


log = logging.getLogger(__name__)


class KernelStartError(RuntimeError):
    """The kernel could not be started or did not become ready."""


def start_kernel(env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None, *,
                 kernel_name: str = "python3", timeout: float = 120.0):
    """``(km, kc)``: a ready kernel in ``cwd`` and a started ``BlockingKernelClient``.

    ``env``: variables on top of this process's environment and ``KERNEL_ENV``.
    """
    full_env = {**KERNEL_ENV, **os.environ, **(env or {})}
    try:
        return start_new_kernel(startup_timeout=timeout, kernel_name=kernel_name,
                                cwd=None if cwd is None else os.fspath(cwd), env=full_env)
    except (RuntimeError, KeyError, OSError) as e:  # NoSuchKernel is a KeyError
        raise KernelStartError(f"could not start a {kernel_name!r} kernel"
                               f"{f' in {cwd}' if cwd else ''}: {e}") from e


def stop_kernel(km, kc) -> None:
    """Close the client's channels and kill the kernel (never raises)."""
    try:
        kc.stop_channels()
    except Exception:  # a cleanup: whatever jupyter_client or zmq raise is only logged
        log.debug("stopping a kernel client's channels failed", exc_info=True)
    try:
        km.shutdown_kernel(now=True)
    except Exception:  # a cleanup: whatever jupyter_client or zmq raise is only logged
        log.warning("shutting down a private kernel failed", exc_info=True)
