"""What a kernel copy must not inherit: descriptors, shared memory, secrets, capabilities.

A fork shares more than memory with the user's kernel. Inherited descriptors
reach the kernel's ZMQ eventfds (writing one aborts the kernel), its capture
pipes, and the user's open files and sqlite connections (shared offsets,
writes, truncation). ``MAP_SHARED`` mappings write straight into the user's
``mmap``/``np.memmap`` and their files. The environment and memory hold API
keys and the kernel's session key, which signs execute requests to the real
kernel. Each step below removes one of these in the root copy, before
Landlock and seccomp; a step that fails raises, and the copy is not used.

Kernel-side module: standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import sys

from . import confine as _confine
from .libc import check, get_libc

PLACEHOLDER_NOTE = ("descriptors inherited from your kernel are closed in a kernel copy "
                    "(open the file again inside the cell)")

# ------------------------------------------------------------------ descriptors


def close_inherited_fds(keep: set[int]) -> int:
    """Replace every inherited descriptor but ``keep`` (and 0-2) by a dead one.

    The numbers stay taken by an ``O_PATH`` descriptor, on which every read,
    write, mmap or ioctl fails with EBADF: a stale Python object of the user's
    (file, socket, sqlite connection) then fails cleanly instead of touching
    the user's file, and a later ``open`` in the copy never lands on a number
    such an object still holds. Returns how many were replaced.
    """
    dead = os.open("/", os.O_PATH | os.O_CLOEXEC)
    replaced = 0
    try:
        for fd in _open_fds():
            if fd <= 2 or fd in keep or fd == dead:
                continue
            os.dup2(dead, fd, inheritable=False)
            replaced += 1
    finally:
        os.close(dead)
    return replaced


def _open_fds() -> list[int]:
    return sorted(int(x) for x in os.listdir("/proc/self/fd"))


def stdio_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


# ------------------------------------------------------------------ shared mappings

_MAPS = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ([0-9a-f]+) (\S+) (\d+)\s*(.*)$")
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20
MAP_FAILED = ctypes.c_void_p(-1).value


def memory_regions() -> list[tuple[int, int, str, int, int, str]]:
    """(start, end, perms, offset, inode, path) for each mapping of this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            m = _MAPS.match(line.rstrip("\n"))
            if m:
                out.append((int(m[1], 16), int(m[2], 16), m[3], int(m[4], 16), int(m[6]),
                            m[7].strip()))
    return out


def _libc():
    libc = get_libc()
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.memmem.restype = ctypes.c_void_p
    libc.memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    return libc


def privatize_shared_mappings() -> int:
    """Re-map every inherited ``MAP_SHARED`` mapping as private, in place.

    A file mapping becomes a private mapping of the same file and offset (its
    current contents, copy-on-write: writes stay in the copy). Anonymous
    shared memory, memfds and deleted files are copied into private anonymous
    memory at the same address. Device mappings (a GPU's) are unmapped: a
    forked copy cannot use them anyway. Returns how many were changed.
    """
    libc = _libc()
    changed = 0
    for start, end, perms, offset, _inode, path in memory_regions():
        if perms[3] != "s":
            continue
        size = end - start
        prot = ((PROT_READ if perms[0] == "r" else 0) | (PROT_WRITE if perms[1] == "w" else 0)
                | (PROT_EXEC if perms[2] == "x" else 0))
        if path.startswith("/dev/") and not path.startswith(("/dev/zero", "/dev/shm/")):
            if libc.munmap(start, size) != 0:
                raise OSError(ctypes.get_errno(), f"cannot unmap device mapping {path}")
            changed += 1
            continue
        fd = None
        if path.startswith("/") and not path.endswith("(deleted)") and perms[0] == "r":
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fd = None
        if fd is not None:
            try:
                got = libc.mmap(start, size, prot, MAP_PRIVATE | MAP_FIXED, fd, offset)
            finally:
                os.close(fd)
            if got in (None, MAP_FAILED) or got != start:
                raise OSError(ctypes.get_errno(), f"cannot make the shared mapping of {path} "
                                                  f"private")
        else:
            data = ctypes.string_at(start, size) if perms[0] == "r" else None
            got = libc.mmap(start, size, prot | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS,
                            -1, 0)
            if got in (None, MAP_FAILED) or got != start:
                raise OSError(ctypes.get_errno(), f"cannot make shared memory {path or 'anon'} "
                                                  f"private")
            if data is not None:
                ctypes.memmove(start, data, size)
            if not prot & PROT_WRITE:
                libc.mprotect(start, size, prot)
        changed += 1
    return changed


# ------------------------------------------------------------------ secrets

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|PWD|CREDENTIAL|COOKIE|AUTH|WEBHOOK|PRIVATE"
                         r"|(^|_)PAT($|_)|(^|_)DSN($|_)", re.I)
_NOT_SECRET = ("PWD", "OLDPWD")  # the working directory
_URL_CREDENTIALS = re.compile(r"://[^/@\s]+@")
#: Always removed, whatever their names: the address and token of the Jupyter
#: server's model service (a copy must not send model requests as the kernel).
SECRET_NAMES = ("JUPYTER_DATA_AGENT_MODEL_SOCKET", "JUPYTER_DATA_AGENT_MODEL_TOKEN")
#: What a copy's environment keeps: what code needs to find its tools, locale,
#: thread counts and caches. Every other variable is removed (an allow-list: a
#: secret under a name nobody thought of, DB_DSN or SLACK_HOOK, is not kept).
KEPT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
            "PWD", "TMPDIR", "TEMP", "TMP", "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED",
            "PYTHONIOENCODING", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS",
            "VIRTUAL_ENV", "MPLBACKEND", "MPLCONFIGDIR", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_MAX_THREADS",
            "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
            "HF_HOME", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "COLUMNS", "LINES", "PAGER",
            "JAVA_HOME", "R_HOME", "GDAL_DATA", "PROJ_LIB", "PROJ_DATA", "SSL_CERT_FILE",
            # where libraries find their data and caches: a copy must load what the kernel loads
            "NLTK_DATA", "TORCH_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE",
            "SCIKIT_LEARN_DATA", "SPACY_DATA", "NUMBA_CACHE_DIR", "NUMBA_NUM_THREADS",
            "POLARS_MAX_THREADS", "RAYON_NUM_THREADS", "KMP_DUPLICATE_LIB_OK",
            "MKL_THREADING_LAYER", "R_LIBS", "R_LIBS_USER", "SPARK_HOME")
KEPT_ENV_PREFIXES = ("LC_", "XDG_", "CONDA_")


def secret_env_names(environ=None) -> list[str]:
    """Variables holding keys, tokens, passwords, or URLs with credentials."""
    environ = os.environ if environ is None else environ
    return [k for k, v in environ.items()
            if k in SECRET_NAMES or (SECRET_NAME.search(k) and k not in _NOT_SECRET)
            or _URL_CREDENTIALS.search(v or "")]


def unkept_env_names(environ=None) -> list[str]:
    """Variables a copy's environment does not keep (``KEPT_ENV``), secrets first."""
    environ = os.environ if environ is None else environ
    secret = secret_env_names(environ)
    return secret + [k for k in environ if k not in secret and k not in KEPT_ENV
                     and not k.startswith(KEPT_ENV_PREFIXES)]


def _kernel_session():
    """The jupyter_client Session of the ipykernel this copy came from, if any."""
    try:
        from IPython import get_ipython

        return getattr(getattr(get_ipython(), "kernel", None), "session", None)
    except ImportError:
        return None


def kernel_session_keys() -> list[bytes]:
    """The HMAC key(s) of the kernel this copy came from: its Session's and
    the one in its connection file."""
    keys: list[bytes] = []
    key = getattr(_kernel_session(), "key", None)
    if key:
        keys.append(bytes(key))
    path = connection_file()
    if path and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                k = json.load(f).get("key")
            if k:
                keys.append(k.encode())
        except (OSError, ValueError):
            pass
    return [k for k in dict.fromkeys(keys) if len(k) >= 8]


def _kernel_app():
    mod = sys.modules.get("ipykernel.kernelapp")
    if mod is None:
        return None
    try:
        return mod.IPKernelApp.instance() if mod.IPKernelApp.initialized() else None
    except Exception:  # noqa: BLE001 - traitlets' singleton in any state (another class's instance...)
        return None


def connection_file() -> str | None:
    app = _kernel_app()
    path = getattr(app, "connection_file", None)
    if path and not os.path.isabs(path):
        try:
            from jupyter_core.paths import jupyter_runtime_dir

            path = os.path.join(jupyter_runtime_dir(), path)
        except Exception:  # noqa: BLE001 - jupyter_core missing, or failing, in the kernel's environment
            return None
    return path or None


def scrub_secrets(extra: list[bytes] = ()) -> tuple[list[str], int]:
    """Remove secrets from the environment, disarm the kernel session, and wipe
    every copy of a secret value from this process's writable memory.

    Returns (the environment variables removed, how many copies were wiped).
    """
    values: list[bytes] = list(extra) + kernel_session_keys()
    secret = set(secret_env_names())
    names = unkept_env_names()
    for name in names:
        value = os.environ.get(name, "")
        # Only secrets are wiped from memory: wiping any other value (a path) would
        # corrupt the user's strings that happen to equal it.
        if name in secret and len(value) >= 8:
            values.append(value.encode("utf-8", "replace"))
        del os.environ[name]  # also unsetenv(): the C environ
    _disarm_sessions()
    return names, wipe_memory(values) + wipe_initial_environment(names)


def wipe_initial_environment(names: list[str]) -> int:
    """Zero the values of ``names`` in the environment block set up at exec.

    ``unsetenv`` only drops the pointers: the ``NAME=value`` strings stay at
    the top of the stack (what ``/proc/<pid>/environ`` shows), where a copy
    can read its own memory. Only that block is touched (its bounds come from
    ``/proc/self/stat``), never a string of the user's, so every removed
    value is wiped, not only secret-looking ones. Returns how many were.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50, 51
    except (OSError, ValueError, IndexError):
        return 0
    if not 0 < start < end or end - start > 1 << 24:
        return 0
    wanted = {os.fsencode(n) for n in names}
    block = ctypes.string_at(start, end - start)
    count = pos = 0
    for entry in block.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and value and name in wanted:
            ctypes.memset(start + pos + len(name) + 1, 0, len(value))
            count += 1
        pos += len(entry) + 1
    return count


def _disarm_sessions() -> None:
    """The kernel's Session keeps the key and a keyed HMAC: drop both."""
    session = _kernel_session()
    if session is None:
        return
    with contextlib.suppress(AttributeError, TypeError):  # not a traitlets Session
        session.__dict__["auth"] = None
        session.__dict__["_key"] = b""
    with contextlib.suppress(AttributeError, TypeError, ValueError):  # a key it does not let go
        session.key = b""


def wipe_memory(values: list[bytes]) -> int:
    """Overwrite each occurrence of ``values`` in anonymous writable memory
    (heap, stack, Python's arenas) with zeros. Returns the count.

    Only pages that hold data are read (``held_runs``): reading a page never
    touched maps the zero page there, and every such entry is copied again by
    each later fork of this copy (a fork of a root grew ~2 ms slower)."""
    needles = [v for v in dict.fromkeys(values) if len(v) >= 8]
    if not needles:
        return 0
    libc = _libc()
    bufs = [ctypes.create_string_buffer(v, len(v)) for v in needles]
    own = {ctypes.addressof(b) for b in bufs}
    count = 0
    pagemap = _open_pagemap()
    try:
        for start, end, perms, _offset, inode, path in memory_regions():
            if perms[:2] != "rw" or perms[3] != "p" or inode != 0:
                continue
            if path.startswith("[") and path not in ("[heap]", "[stack]"):
                continue
            for run_start, run_end in held_runs(pagemap, start, end):
                count += _wipe_range(libc, run_start, run_end, bufs, own)
    finally:
        if pagemap is not None:
            os.close(pagemap)
    for buf in bufs:
        ctypes.memset(buf, 0, len(buf))
    return count


def _wipe_range(libc, start: int, end: int, bufs: list, own: set[int]) -> int:
    count = 0
    for buf in bufs:
        n = len(buf)
        pos = start
        while pos < end:
            hit = libc.memmem(pos, end - pos, ctypes.addressof(buf), n)
            if not hit:
                break
            if hit not in own:
                ctypes.memset(hit, 0, n)
                count += 1
            pos = hit + n
    return count


_PAGE = os.sysconf("SC_PAGE_SIZE")
#: The last byte of a pagemap entry, present (bit 63) or swapped (bit 62) -> 1, else 0.
_HELD = bytes(1 if b & 0xC0 else 0 for b in range(256))
_PAGEMAP_CHUNK = 1 << 16  # entries per read: 512 KiB


def _open_pagemap() -> int | None:
    try:
        return os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def held_runs(pagemap: int | None, start: int, end: int) -> list[tuple[int, int]]:
    """The runs of pages in [start, end) that hold data (present, or swapped out), merged.

    A page of private anonymous memory that is neither was never written: it
    reads as zeros and holds no secret. Without a pagemap, the whole range."""
    if pagemap is None:
        return [(start, end)]
    runs: list[tuple[int, int]] = []
    page = start
    while page < end:
        n = min(_PAGEMAP_CHUNK, (end - page) // _PAGE)
        try:
            data = os.pread(pagemap, n * 8, (page // _PAGE) * 8)
        except OSError:
            return [*runs, (page, end)]
        if len(data) != n * 8:
            return [*runs, (page, end)]
        flags = data[7::8].translate(_HELD)
        i = flags.find(1)
        while i >= 0:
            j = flags.find(0, i)
            j = n if j < 0 else j
            a, b = page + i * _PAGE, page + j * _PAGE
            if runs and runs[-1][1] == a:  # a run across two reads: one run
                a = runs.pop()[0]
            runs.append((a, b))
            i = flags.find(1, j)
        page += n * _PAGE
    return runs


# ------------------------------------------------------------------ capabilities

PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_IS_SET = 1
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty the bounding, ambient, permitted, effective and inheritable sets and
    set no_new_privs: a copy of a root kernel keeps uid 0 but no privilege."""
    libc = get_libc()
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 40
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if capabilities_held():
        for cap in range(last + 1):
            check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    check(libc.capset(ctypes.byref(header), data), "capset")
    check(libc.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if capabilities_held():
        raise OSError("capabilities are still held after dropping them")


def capabilities_held() -> bool:
    """True if a capability remains permitted, effective or ambient (a process
    without privilege cannot empty its bounding set, and with no_new_privs does
    not need to). Asked of the kernel (capget), not ``/proc``: a copy cannot read
    ``/proc/<pid>`` once Landlock is on."""
    libc = get_libc()
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    check(libc.capget(ctypes.byref(header), data), "capget")
    if any(d.permitted or d.effective for d in data):
        return True
    return any(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) == 1
               for cap in range(64))
