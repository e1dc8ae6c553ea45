"""Every process a candidate starts ends with its copy.

Two mechanisms, the stronger where the system allows it:

- a cgroup (v2) per snapshot tree, created by the root copy for itself
  before Landlock makes cgroupfs read-only: every copy and everything it
  starts (``Popen``, ``setsid`` daemons, double forks) stays inside, and the
  client ends them all at once with ``cgroup.kill``; ``memory.max`` and
  ``pids.max`` bound the whole tree where those controllers are delegated.
- every copy is a child subreaper: orphans of a candidate's processes are
  re-parented to the copy instead of init, so closing one copy can stop and
  kill its whole process subtree (``kill_subtree``).

Cgroups and scratch folders carry their owners' pids in their names, so one
left behind by a killed server or a crashed kernel is removed by the next
tree that opens (``sweep``). Kernel side and client side: standard library,
psutil only where the client uses it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import tempfile
import time

from .libc import check, get_libc

PR_SET_CHILD_SUBREAPER = 36
CGROUP_PREFIX = "jda-"
SCRATCH_PREFIX = "jda-scratch-"
SOCK_PREFIX = "jda-sock-"
MODEL_PREFIX = "jda-model-"  # the model service's socket folder (server/model_service.py)
_OWNED = re.compile(r"k(\d+)-c(\d+)-")


def set_subreaper() -> None:
    check(get_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0),
                    "prctl(CHILD_SUBREAPER)")


def owner_tag(kernel_pid: int, client_pid: int) -> str:
    """Names of per-tree resources start with this: both owners' pids."""
    return f"k{kernel_pid}-c{client_pid}-{secrets.token_hex(4)}"


# ------------------------------------------------------------------ cgroups

def cgroup2_root() -> str | None:
    """Mount point of the unified (v2) hierarchy, if mounted."""
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4]
    return None


def own_cgroup(pid: int | str = "self") -> str | None:
    """This process's (or ``pid``'s) cgroup directory in the v2 hierarchy."""
    root = cgroup2_root()
    if root is None:
        return None
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    rel = line[3:].strip()
                    return os.path.normpath(os.path.join(root, rel.lstrip("/")))
    return None


def join_new_cgroup(tag: str, memory_max: int | None = None,
                    pids_max: int | None = None) -> tuple[str, list[str]]:
    """Create ``jda-<tag>`` under this process's cgroup and move in.

    Returns (path, notes). Raises OSError when cgroups cannot be written here.
    """
    mine = own_cgroup()
    if mine is None:
        raise OSError("no cgroup v2 hierarchy is mounted")
    path = os.path.join(mine, CGROUP_PREFIX + tag)
    os.mkdir(path, 0o755)
    notes = []
    try:
        for name, value in (("memory.max", memory_max), ("pids.max", pids_max)):
            if value is None:
                continue
            f = os.path.join(path, name)
            if os.path.exists(f):
                with open(f, "w") as fh:
                    fh.write(str(int(value)))
            else:
                notes.append(f"{name.split('.')[0]} controller not delegated to the cgroup")
        with open(os.path.join(path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        raise
    return path, notes


def cgroup_kill(path: str | None, timeout: float = 5.0) -> bool:
    """Kill every process in the cgroup and remove it. True if it is gone."""
    if not path or not os.path.isdir(path):
        return True
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
    except OSError:
        for pid in cgroup_pids(path):  # kernels before 5.14: no cgroup.kill
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)


def cgroup_pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


# ------------------------------------------------------------------ process subtrees

def kill_subtree(pid: int) -> None:
    """Stop ``pid`` and every descendant (so none can fork meanwhile), then kill them.

    Copies are subreapers, so a candidate's daemons are still descendants of
    the copy while it lives.
    """
    import psutil

    try:
        top = psutil.Process(pid)
        top.send_signal(signal.SIGSTOP)
    except psutil.Error:
        return
    seen: dict[int, psutil.Process] = {}
    for _ in range(50):
        try:
            found = [p for p in top.children(recursive=True) if p.pid not in seen]
        except psutil.Error:
            break
        if not found:
            break
        for p in found:
            seen[p.pid] = p
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGSTOP)
    for p in list(seen.values()) + [top]:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)


# ------------------------------------------------------------------ folder trees

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def walk_tree(path: str, on_entry, on_leave=None, max_entries: int = 1_000_000) -> bool:
    """Visit the tree at ``path`` without recursion, never following a link.

    A copy writes scratch, so its depth (thousands of nested folders: past
    Python's recursion limit and PATH_MAX) and its links (to the user's files)
    are the attacker's. The walk holds one descriptor and works relative to
    it; going up it checks that ``..`` is the folder it came from, and stops
    otherwise. ``on_entry(dir_fd, entry)`` sees every non-folder,
    ``on_leave(parent_fd, name)`` every folder once its content was visited.
    Returns False if the walk stopped early (the bound, a moved folder).
    """
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return False
    parents: list[tuple[list[str], str, tuple[int, int]]] = []  # (pending, name, (dev, ino))
    seen = 0

    def scan(dir_fd: int) -> list[str]:
        nonlocal seen
        subdirs = []
        try:
            with os.scandir(dir_fd) as it:
                for entry in it:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                    else:
                        with contextlib.suppress(OSError):
                            on_entry(dir_fd, entry)
        except OSError:
            pass
        return subdirs

    try:
        pending = scan(fd)
        while True:
            if seen > max_entries:
                return False
            if pending:
                name = pending.pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                st = os.fstat(fd)
                parents.append((pending, name, (st.st_dev, st.st_ino)))
                os.close(fd)
                fd = child
                pending = scan(fd)
                continue
            if not parents:
                return True
            pending, name, ident = parents.pop()
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != ident:  # moved meanwhile: never act outside the tree
                return False
            if on_leave is not None:
                with contextlib.suppress(OSError):
                    on_leave(fd, name)
    finally:
        os.close(fd)


def remove_tree(path: str) -> bool:
    """Delete ``path`` and everything below it, however deep; links are removed,
    never followed. True once it is gone."""
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
    walk_tree(path, lambda fd, entry: os.unlink(entry.name, dir_fd=fd),
              lambda fd, name: os.rmdir(name, dir_fd=fd))
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


# ------------------------------------------------------------------ leftovers

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _owners_dead(name: str) -> bool:
    m = _OWNED.search(name)
    return bool(m) and not (_alive(int(m[1])) and _alive(int(m[2])))


def sweep(tmpdir: str | None = None) -> list[str]:
    """Remove cgroups, scratch and socket folders whose kernel or client is gone.

    Returns what was removed.
    """
    removed = []
    mine = own_cgroup()
    try:
        entries = os.listdir(mine) if mine else []
    except OSError:
        entries = []
    for name in entries:  # each on its own: one that cannot be removed never stops the rest
        if name.startswith(CGROUP_PREFIX) and _owners_dead(name):
            path = os.path.join(mine, name)
            try:
                if cgroup_kill(path):  # the default wait: a loaded machine ends many processes slowly
                    removed.append(path)
            except Exception:  # noqa: BLE001 -- reported by its absence from ``removed``
                continue
    tmpdir = tmpdir or tempfile.gettempdir()
    try:
        entries = os.listdir(tmpdir)
    except OSError:
        entries = []
    for name in entries:
        if name.startswith((SCRATCH_PREFIX, SOCK_PREFIX, MODEL_PREFIX)) and _owners_dead(name):
            path = os.path.join(tmpdir, name)
            try:
                if remove_tree(path):
                    removed.append(path)
            except Exception:  # noqa: BLE001 -- reported by its absence from ``removed``
                continue
    return removed
