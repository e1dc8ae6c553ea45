"""The C library, for the system calls Python does not wrap (prctl, Landlock, capabilities).

One loaded handle with ``errno`` kept, shared by the confinement modules
(``confine``, ``harden``, ``procs``) and the copy's output capture. Imported
inside the kernel and its forks (``_jda_kernel``): standard library only.
"""

from __future__ import annotations

import ctypes
import os

_libc: ctypes.CDLL | None = None


def get_libc() -> ctypes.CDLL:
    """This process's C library (loaded once), with ``syscall`` and ``prctl`` typed."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                                ctypes.c_ulong]
    return _libc


def check(ret: int, what: str) -> int:
    """``ret`` of a libc call, or the ``OSError`` its ``errno`` names when it failed."""
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret
