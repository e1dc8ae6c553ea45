"""The seccomp filter of every kernel copy (libseccomp through ``pyseccomp``).

Landlock covers files, TCP and signals; this filter closes what it does not:
new sockets of every family (a copy once reached the real kernel's shell port
over MPTCP), TCP Fast Open, ptrace and cross-process memory calls, changes to
other processes' limits, priority and affinity, file metadata (chmod, chown,
times, xattrs), namespaces, mounts and the other calls Docker's default
profile refuses, memfds (memory no rlimit counts) and SysV/POSIX IPC objects
(they outlive every process of a turn). Denied calls fail with EPERM (a Python ``PermissionError``
in the candidate's output), never a silent kill. Installed last, after fork,
in the root copy; every later fork inherits it.

Kernel-side module: standard library plus ``pyseccomp`` (a single pure-Python
file that the client injects beside these modules when the kernel's
environment lacks it).
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import sys

AF_UNIX = 1
MSG_FASTOPEN = 0x20000000
PRIO_PROCESS = 0
IOPRIO_WHO_PROCESS = 1
CLONE_NAMESPACES = (0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
                    0x02000000, 0x00000080)  # NEWNS UTS IPC USER PID NET CGROUP TIME

# Denied whatever their arguments.
DENY = (
    "socket",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "process_mrelease",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "utimensat", "futimesat",
    "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
    "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr",
    "mount_setattr",
    "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "acct", "clock_adjtime", "clock_settime", "settimeofday", "stime", "adjtimex",
    "swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "iopl", "ioperm", "quotactl", "quotactl_fd", "lookup_dcookie",
    "name_to_handle_at", "open_by_handle_at", "nfsservctl", "uselib", "ustat", "sysfs",
    "_sysctl", "vm86", "vm86old", "mbind", "set_mempolicy", "set_mempolicy_home_node",
    "migrate_pages", "move_pages", "syslog", "vhangup",
    # memory outside RLIMIT_AS, and IPC objects that outlive the copy, the kernel and
    # the turn (and reach other processes' segments and queues)
    "memfd_create", "memfd_secret",
    "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl",
    "semget", "semop", "semtimedop", "semctl", "ipc",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
)
# Calls that act on a process named by pid: allowed only on the caller (pid 0).
SELF_ONLY = ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")
# Calls added to Linux after libseccomp 2.5 knew them: same number on every
# architecture that has them (the unified syscall table).
NUMBERS = {"memfd_secret": 447, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "open_tree_attr": 467,
           "mount_setattr": 442, "quotactl_fd": 443, "process_mrelease": 448,
           "set_mempolicy_home_node": 450}


class SeccompUnavailable(RuntimeError):
    """libseccomp (or a binding for it) is missing: the layer stays off."""


def load_binding():
    """``pyseccomp``: installed, or injected beside this module by the client."""
    injected = sys.modules.get(f"{__package__}.pyseccomp") if __package__ else None
    if injected is not None:
        return injected
    try:
        return importlib.import_module("pyseccomp")
    except ImportError:
        raise SeccompUnavailable("the pyseccomp package is not installed in the kernel's "
                                 "environment (pip install pyseccomp)") from None
    except (OSError, RuntimeError) as e:  # it loads libseccomp.so.2 at import
        raise SeccompUnavailable(f"libseccomp is not available ({e}); install the system "
                                 "package libseccomp2") from None


def _number(sc, name: str) -> int | None:
    try:
        nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
    except (ValueError, TypeError, AttributeError, OSError, ctypes.ArgumentError):  # unknown here
        nr = -1
    if nr is not None and nr >= 0:
        return int(nr)
    return NUMBERS.get(name)  # None: this architecture has no such call


def build(sc):
    """The filter, not loaded: default allow, EPERM for what is listed above."""
    eperm = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_NNP, 1)

    def rule(action, name, *args):
        nr = _number(sc, name)
        if nr is not None:
            f.add_rule(action, nr, *args)

    for name in DENY:
        rule(eperm, name)
    rule(eperm, "socketpair", sc.Arg(0, sc.NE, AF_UNIX))
    rule(eperm, "sendto", sc.Arg(3, sc.MASKED_EQ, MSG_FASTOPEN, MSG_FASTOPEN))
    rule(eperm, "sendmsg", sc.Arg(2, sc.MASKED_EQ, MSG_FASTOPEN, MSG_FASTOPEN))
    rule(eperm, "sendmmsg", sc.Arg(3, sc.MASKED_EQ, MSG_FASTOPEN, MSG_FASTOPEN))
    # prlimit64(pid, resource, new, old): reading anyone's limits is fine,
    # setting them only on ourselves (glibc's setrlimit passes pid 0).
    rule(eperm, "prlimit64", sc.Arg(0, sc.NE, 0), sc.Arg(2, sc.NE, 0))
    rule(eperm, "setpriority", sc.Arg(0, sc.NE, PRIO_PROCESS))
    rule(eperm, "setpriority", sc.Arg(1, sc.NE, 0))
    rule(eperm, "ioprio_set", sc.Arg(0, sc.NE, IOPRIO_WHO_PROCESS))
    rule(eperm, "ioprio_set", sc.Arg(1, sc.NE, 0))
    for name in SELF_ONLY:
        rule(eperm, name, sc.Arg(0, sc.NE, 0))
    rule(eperm, "personality", sc.Arg(0, sc.NE, 0xFFFFFFFF))  # querying is allowed
    for flag in CLONE_NAMESPACES:
        rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory the filter cannot read: ENOSYS makes
    # glibc fall back to clone, whose flags are checked above (as Docker does).
    rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return f


def install() -> None:
    """Load the filter into this (single-threaded) process and its future forks."""
    sc = load_binding()
    build(sc).load()
