"""Confinement of snapshot processes: Landlock, rlimits, parent-death signal.

Applied once in the root snapshot right after it is forked from the kernel;
Landlock domains and rlimits are inherited by every later fork, so the whole
tree is confined. Each mechanism degrades separately and is reported in
``Protections`` rather than failing the search.

Files: the filesystem becomes read-only except the per-search ``scratch``
directory, which is the working directory. So that notebook code can still
read its data with relative paths, the scratch directory is populated with
one symlink per entry of the notebook directory: reads follow the link (read
is allowed everywhere), writes to an existing name follow it too and are
denied (the user's file is untouched), and new files land in scratch.
Limits of that choice: scratch is shared by all copies of one search (copies
isolate memory state, not scratch files); entries added to the notebook
directory after the search started are not linked; writing a new file inside
a linked subdirectory is denied; /dev/shm is read-only, so multiprocessing
semaphores fail. Network: TCP connect/bind are denied (ABI >= 4); UDP and
Unix sockets are not covered by Landlock.

Landlock is called through raw syscalls (ctypes) because the ``landlock``
package only models filesystem rules; the package, when importable, is used
for ABI detection. Standard library only otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import resource
import signal
import stat
import tempfile

from ..results import Limits, Protections
from .libc import check, get_libc

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

_SYS_CREATE_RULESET = 444  # same number on every architecture (added in 5.13)
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

# filesystem access rights and the ABI that introduced them
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_MAX_SCRATCH_LINKS = 20_000
TMP_SUBDIR = ".jda-tmp"


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def set_pdeathsig(sig: int = signal.SIGKILL) -> bool:
    """Die with the parent: a killed kernel or snapshot takes its subtree with it."""
    try:
        check(get_libc().prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0), "prctl(PDEATHSIG)")
        return True
    except (OSError, AttributeError):
        return False


def landlock_abi() -> int:
    """Landlock ABI version of the running kernel, 0 if unavailable."""
    if not hasattr(os, "fork") or os.uname().sysname != "Linux":
        return 0
    try:
        import landlock  # the PyPI package; only for detection

        return int(landlock.landlock_abi_version())
    except (ImportError, OSError, AttributeError):  # not installed, or no Landlock: ask the kernel
        pass
    try:
        libc = get_libc()
        ret = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
        return max(int(ret), 0)
    except (OSError, AttributeError, ctypes.ArgumentError):
        return 0


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


#: The only devices a copy may open: every other one (userfaultfd, kvm, loop-control,
#: disks, ttys) is unreadable and unwritable, and so no ioctl reaches it.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def read_rules(hidden: list[str], read: int, *, list_all: bool = True) -> list[tuple[str, int]]:
    """Read access to the whole filesystem except ``hidden`` paths.

    Landlock only grants, so "all but X" is the entries of each ancestor of X
    other than the one leading to X. Listing directories stays allowed
    everywhere (names are not secrets; the files' contents are) unless
    ``list_all`` is False: then hidden folders cannot be listed either, nor
    (Landlock grants a folder's whole subtree) their ancestors. Entries
    created later under a walked directory (a new process's ``/proc/<pid>``)
    get no rule, so they are unreadable too.
    """
    hidden_set = {os.path.realpath(h) for h in hidden if h and os.path.lexists(h)} - {"/"}
    if not hidden_set:
        return [("/", read)]
    leads = {os.path.dirname(h) for h in hidden_set}  # every proper ancestor of a hidden path
    for h in list(leads):
        while h not in ("/", ""):
            h = os.path.dirname(h)
            leads.add(h)

    def inside_hidden(path: str) -> bool:
        while path not in ("/", ""):
            if path in hidden_set:
                return True
            path = os.path.dirname(path)
        return False

    rules: list[tuple[str, int]] = [("/", FS_READ_DIR)] if list_all else []
    stack = ["/"]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            path = entry.path
            if entry.is_symlink():
                # a rule follows the link: one leading to or into a hidden path
                # would open it (its real location is walked anyway)
                path = os.path.realpath(path)
                if path not in leads and not inside_hidden(path):
                    rules.append((path, read))
                continue
            if path in hidden_set:
                continue
            if path in leads and entry.is_dir(follow_symlinks=False):
                stack.append(path)
            else:
                rules.append((path, read))
    return rules


def process_dirs() -> list[str]:
    """Every process's ``/proc/<pid>``: others' command lines and environments hold
    tokens (a server started with ``--IdentityProvider.token=...``)."""
    try:
        return [f"/proc/{n}" for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def apply_landlock(writable: list[str], deny_network: bool = True, abi: int | None = None,
                   hidden: list[str] = (), *, list_all: bool = True) -> tuple[bool, bool, bool, list[str]]:
    """Restrict this (single-threaded) process and its future children.

    ``hidden`` paths cannot be read at all (Jupyter's runtime directory: the
    server's token, the kernels' connection files); ``list_all``: see
    ``read_rules``. Returns (fs, net,
    signal_scope, notes). Must run after fork: Landlock binds the calling
    thread only, and a fresh fork has just one.
    """
    notes: list[str] = []
    abi = landlock_abi() if abi is None else abi
    if abi < 1:
        return False, False, False, ["Landlock unavailable on this kernel"]
    handled_fs = _fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled_fs)
    size = 8
    net = deny_network and abi >= 4
    if net:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # no rule: all TCP denied
        size = 16
    elif deny_network:
        notes.append(f"network not denied (Landlock ABI {abi} < 4)")
    scope = abi >= 6
    if scope:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    libc = get_libc()
    ruleset = check(libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr),
                                  ctypes.c_size_t(size), ctypes.c_uint32(0)),
                     "landlock_create_ruleset")
    try:
        read = FS_READ_FILE | FS_READ_DIR | FS_EXECUTE
        dev_file = (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV) & handled_fs
        rules = read_rules([*hidden, "/dev"], read, list_all=list_all)
        for dev in DEVICES:
            if os.path.exists(dev):
                rules.append((dev, dev_file))
        for path in writable:
            rules.append((path, handled_fs))
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # vanished since it was listed
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= FILE_RIGHTS
                rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
                check(libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                                    ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                    ctypes.c_uint32(0)), f"landlock_add_rule({path})")
            finally:
                os.close(fd)
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        check(libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset),
                            ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return True, net, scope, notes


def isolate_signals(abi: int | None = None) -> bool:
    """Nest this process in a new signal-scoped Landlock domain.

    Called in each forked snapshot: all snapshots share the root's domain, so
    without a nested one a candidate cell could kill its parent or siblings
    (``os.kill(os.getppid(), 9)``). Signals from outside (the client, the
    parent's PDEATHSIG) still reach it. Costs one of Landlock's 16 layers.
    """
    abi = landlock_abi() if abi is None else abi
    if abi < 6:
        return False
    libc = get_libc()
    attr = _RulesetAttr(scoped=SCOPE_SIGNAL)
    try:
        fd = check(libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr),
                                 ctypes.c_size_t(24), ctypes.c_uint32(0)), "create_ruleset")
        try:
            check(libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(fd),
                                ctypes.c_uint32(0)), "landlock_restrict_self")
        finally:
            os.close(fd)
        return True
    except OSError:
        return False  # e.g. E2BIG: 16 layers reached; the outer domain still applies


def _vm_size() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def cpu_used() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def lower_priority(nice: int) -> bool:
    """Run this process at niceness ``nice`` or lower priority (never raises it back).

    Always, not only while the model decodes: the scheduler weighs niceness only
    when cores are contended, so an idle machine runs a copy at full speed anyway.
    """
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        want = max(current, min(19, int(nice)))
        if want != current:
            os.setpriority(os.PRIO_PROCESS, 0, want)
        return True
    except (OSError, ValueError):
        return False


def set_rlimits(limits: Limits) -> tuple[bool, bool, list[str]]:
    """Bound address space (relative to the state at fork), total CPU time and
    the size of any file written (scratch's per-file disk cap, and the
    sealed capture of C-level output)."""
    notes: list[str] = []
    cpu_ok = as_ok = False
    try:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails: EFBIG
        fsize = int(limits.max_file_bytes)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if hard != resource.RLIM_INFINITY:
            fsize = min(fsize, hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    except (OSError, ValueError) as e:
        notes.append(f"RLIMIT_FSIZE not set: {e}")
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        want = _vm_size() + int(limits.memory_extra_bytes)
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        resource.setrlimit(resource.RLIMIT_AS, (want, want))
        as_ok = True
    except (OSError, ValueError) as e:
        notes.append(f"RLIMIT_AS not set: {e}")
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        want = math.ceil(cpu_used()) + int(limits.cpu_total_s)
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (want, want))
        cpu_ok = True
    except (OSError, ValueError) as e:
        notes.append(f"RLIMIT_CPU not set: {e}")
    return cpu_ok, as_ok, notes


def arm_cpu(seconds: float) -> None:
    """Soft CPU limit for one exec: SIGXCPU after ``seconds`` more CPU time."""
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = math.ceil(cpu_used()) + max(1, math.ceil(seconds))
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (OSError, ValueError):
        pass


def disarm_cpu() -> None:
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    except (OSError, ValueError):
        pass


def prepare_scratch(scratch: str, notebook_dir: str | None) -> list[str]:
    """Make ``scratch`` and link the notebook directory's entries into it."""
    notes: list[str] = []
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(scratch, TMP_SUBDIR), mode=0o700, exist_ok=True)
    if not notebook_dir or not os.path.isdir(notebook_dir):
        return notes
    real_scratch = os.path.realpath(scratch)
    try:
        entries = list(os.scandir(notebook_dir))
    except OSError as e:
        return [f"notebook dir not listed: {e}"]
    if len(entries) > _MAX_SCRATCH_LINKS:
        notes.append(f"only {_MAX_SCRATCH_LINKS} of {len(entries)} notebook-dir entries linked")
        entries = entries[:_MAX_SCRATCH_LINKS]
    for entry in entries:
        if os.path.realpath(entry.path) == real_scratch:
            continue
        link = os.path.join(scratch, entry.name)
        try:
            os.symlink(os.path.abspath(entry.path), link)
        except FileExistsError:
            pass
        except OSError as e:
            if e.errno != errno.EEXIST and not notes:
                notes.append(f"could not link notebook files: {e}")
    return notes


def other_scratch(scratch: str) -> list[str]:
    """The other copy trees' scratch folders beside ``scratch`` (another try's, another user's):
    unreadable to a copy, as are those made after it (their folder is walked for rules)."""
    from .procs import SCRATCH_PREFIX

    mine = os.path.realpath(scratch)
    try:
        with os.scandir(os.path.dirname(mine)) as entries:
            return [e.path for e in entries if e.name.startswith(SCRATCH_PREFIX) and e.path != mine]
    except OSError:
        return []


#: Credentials under the home directory: useless in a copy (it has no network), so
#: kept out of its reach rather than scrubbed from what it prints.
CREDENTIALS = (".aws", ".azure", ".config/gcloud", ".ssh", ".gnupg", ".kube", ".docker",
               ".netrc", ".pgpass", ".git-credentials", ".pypirc", ".config/gh", ".databrickscfg",
               ".snowflake", ".huggingface/token", ".cache/huggingface/token")


def credential_paths() -> list[str]:
    """What a copy must not read besides the runtime dirs: the user's Jupyter config
    folder (``c.DataAgent.api_key`` may be set there) and the usual credential files."""
    paths = []
    try:
        from jupyter_core.paths import jupyter_config_dir

        paths.append(jupyter_config_dir())
    except Exception:  # noqa: BLE001, S110 - jupyter_core missing, or failing, in the kernel's environment
        pass
    home = os.path.expanduser("~")
    paths += [os.path.join(home, name) for name in CREDENTIALS]
    return [p for p in paths if os.path.lexists(p)]


def runtime_paths(processes: list[str] | None = None) -> list[str]:
    """What a copy must not read: every Jupyter runtime directory (server tokens,
    cookie secrets, connection files) this process can find — its own, the
    default one, and those of the Jupyter processes running now (their
    ``JUPYTER_RUNTIME_DIR``/``JUPYTER_DATA_DIR``, their connection and
    ``jpserver-*.json`` files) — and this kernel's connection file.
    ``processes``: the ``/proc/<pid>`` folders to search (default: all)."""
    from . import harden

    paths = []
    try:
        from jupyter_core.paths import jupyter_data_dir, jupyter_runtime_dir

        paths += [jupyter_runtime_dir(), os.path.join(jupyter_data_dir(), "runtime")]
    except Exception:  # noqa: BLE001, S110 - jupyter_core missing, or failing, in the kernel's environment
        pass  # (the running Jupyter processes' folders are still found below)
    cf = harden.connection_file()
    if cf:
        paths.append(cf)
    for proc in process_dirs() if processes is None else processes:
        paths += _runtime_dirs_of(proc)
    return sorted({p for p in paths if p and os.path.exists(p)})


_RUNTIME_DIR_OPTIONS = ("--runtime-dir", "--ServerApp.runtime_dir", "--NotebookApp.runtime_dir",
                        "--JupyterApp.runtime_dir")


def _runtime_dirs_of(proc: str) -> list[str]:
    """The runtime directories a running process uses, as far as its environment
    and command line say (unreadable ones: another user's, not ours to see).

    Where ``jupyter_core`` puts them: ``JUPYTER_RUNTIME_DIR``, else
    ``<data dir>/runtime`` with the data dir ``JUPYTER_DATA_DIR``, else
    ``$XDG_DATA_HOME/jupyter``, else ``~/.local/share/jupyter``; and any
    connection or server file, or runtime dir, named on its command line
    (relative ones resolved against its working directory).
    """
    found = []
    try:
        with open(os.path.join(proc, "environ"), "rb") as f:
            env = {k.decode("utf-8", "replace"): os.fsdecode(v) for k, _, v in
                   (item.partition(b"=") for item in f.read().split(b"\0") if item)}
        with open(os.path.join(proc, "cmdline"), "rb") as f:
            args = [os.fsdecode(a) for a in f.read().split(b"\0")]
    except OSError:
        return found
    if env.get("JUPYTER_RUNTIME_DIR"):
        found.append(env["JUPYTER_RUNTIME_DIR"])
    if env.get("JUPYTER_DATA_DIR"):
        found.append(os.path.join(env["JUPYTER_DATA_DIR"], "runtime"))
    if env.get("XDG_DATA_HOME"):
        found.append(os.path.join(env["XDG_DATA_HOME"], "jupyter", "runtime"))
    if env.get("HOME"):
        found.append(os.path.join(env["HOME"], ".local", "share", "jupyter", "runtime"))
    named = []
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        for path in (value,) if eq else (arg,):  # "-f FILE", "--f=FILE"
            base = os.path.basename(path)
            if base.endswith(".json") and base.startswith(("jpserver-", "kernel-", "nbserver-")):
                named.append(os.path.dirname(path) or ".")
        if key in _RUNTIME_DIR_OPTIONS:  # "--runtime-dir=DIR", "--runtime-dir DIR"
            named.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    if any(not os.path.isabs(p) for p in named):
        try:
            cwd = os.readlink(os.path.join(proc, "cwd"))
        except OSError:
            cwd = None
        named = [os.path.join(cwd, p) if cwd else p for p in named if p]
    return [os.path.normpath(p) for p in found + named if os.path.isabs(p)]


def confine(scratch: str, notebook_dir: str | None, limits: Limits, *, keep_fds: set[int],
            tag: str = "", secrets: list[bytes] = ()) -> Protections:
    """Apply every layer available here, in order; report which took effect.

    A layer that is unavailable (no Landlock, no libseccomp, no writable
    cgroup) is reported off with the reason and the policy decides; a layer
    that fails half-way raises, and the copy is not used.
    """
    from . import harden, procs, syscall_filter

    p = Protections(scratch=scratch, timeout=limits.timeout_s is not None and limits.timeout_s > 0)
    p.notes = prepare_scratch(scratch, notebook_dir)
    os.chdir(scratch)
    os.environ["TMPDIR"] = os.path.join(scratch, TMP_SUBDIR)
    tempfile.tempdir = None  # recomputed from TMPDIR on next use
    lower_priority(limits.nice)
    if not limits.confine:
        for name in p.MECHANISMS:
            p.off(name, "every layer disabled by configuration")
        return p
    # processes: a cgroup of its own (before Landlock makes cgroupfs read-only)
    try:
        p.cgroup, notes = procs.join_new_cgroup(tag or procs.owner_tag(os.getppid(), os.getppid()))
        p.notes += notes
    except OSError as e:
        p.notes.append(f"no cgroup: {e.strerror or e}; processes end through the subreaper")
    procs.set_subreaper()
    p.processes = "cgroup" if p.cgroup else "subreaper"
    p.rlimit_cpu, p.rlimit_as, notes = set_rlimits(limits)
    p.rlimit_fsize = not any(n.startswith("RLIMIT_FSIZE") for n in notes)
    p.notes += notes
    if notes:
        p.off("limits", "; ".join(notes))
    harden.close_inherited_fds(keep_fds)
    p.descriptors = True
    harden.privatize_shared_mappings()
    p.shared_mappings = True
    processes = process_dirs()  # listed once: hidden, and searched for runtime dirs
    hidden = runtime_paths(processes) + credential_paths() + processes + other_scratch(scratch)
    harden.scrub_secrets(list(secrets))
    p.secrets = True
    p.landlock_abi = abi = landlock_abi()
    if not limits.landlock:
        p.off("landlock_fs", "disabled by configuration")
        p.off("landlock_net", "disabled by configuration")
    else:
        try:
            fs, net, scope, notes = apply_landlock([scratch], limits.deny_network, abi, hidden)
        except OSError as e:
            fs = net = scope = False
            notes = [f"Landlock failed: {e}"]
        p.landlock_fs, p.landlock_net, p.signal_scope = fs, net, scope
        if not fs:
            p.off("landlock_fs", "; ".join(notes) or "Landlock unavailable")
        if not net:
            p.off("landlock_net", "; ".join(notes) or "Landlock unavailable")
    harden.drop_capabilities()
    p.capabilities = True
    if not limits.seccomp:
        p.off("seccomp", "disabled by configuration")
    else:
        try:
            syscall_filter.install()
            p.seccomp = True
        except syscall_filter.SeccompUnavailable as e:
            p.off("seccomp", str(e))
    return p
