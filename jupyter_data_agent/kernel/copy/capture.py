"""Outputs of one cell in a kernel copy, bounded before they are kept.

``Sink`` collects what the shell publishes (streams, display data, the
result, the error) like a notebook would, within ``Limits``; the fd-level
capture takes C-level and subprocess output through sealed memfds the client
makes for each exec (``sealed_capture``). Imported inside the kernel and its
forks (``_jda_kernel``): standard library only.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import stat
import sys
import tempfile

from ..results import Limits, OutputItem, cut_note, truncate_text
from . import procs as _procs
from .libc import get_libc

#: ``Sink.value`` before the cell produced a result.
NOVALUE = object()


class Sink:
    """Outputs of one exec, bounded like a notebook would want them."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.items: list[OutputItem] = []
        self.display_ids: dict[int, str] = {}  # id(item) -> display_id
        self.figures_described: set[int] = set()  # id(figure) of figures shown with their summary
        self.value = NOVALUE
        self.error: tuple[str, str, list[str]] | None = None
        self.truncated = False
        self._clear_pending = False
        self._stream_used = {"stdout": 0, "stderr": 0}
        self._stream_dropped = {"stdout": 0, "stderr": 0}
        self._dropped_outputs = 0
        self._total = 0  # characters kept, against limits.max_total_bytes

    def _maybe_clear(self) -> None:
        if self._clear_pending:
            self._clear_pending = False
            self.clear(False)

    def clear(self, wait: bool = False) -> None:
        if wait:
            self._clear_pending = True
            return
        self.items = []
        self.display_ids = {}

    def stream(self, name: str, text: str) -> None:
        if not text:
            return
        if name not in self._stream_used:
            name = "stdout"
        self._maybe_clear()
        room = self.limits.max_output_chars - self._stream_used[name]
        if room <= 0:
            self._stream_dropped[name] += len(text)
            return
        if len(text) > room:
            self._stream_dropped[name] += len(text) - room
            text = text[:room]
        self._stream_used[name] += len(text)
        last = self.items[-1] if self.items else None
        if last is not None and last.output_type == "stream" and last.name == name:
            last.text = (last.text or "") + text
        else:
            self.items.append(OutputItem(output_type="stream", name=name, text=text))

    def _bundle(self, data: dict, metadata: dict) -> tuple[dict, dict, bool]:
        out: dict = {}
        trunc = False
        for mime, value in (data or {}).items():
            if isinstance(value, bytes):
                value = base64.b64encode(value).decode("ascii")
            if isinstance(value, str):
                if mime.startswith("image/") and mime != "image/svg+xml":
                    if len(value) > self.limits.max_image_bytes:
                        trunc = True
                        out.setdefault("text/plain", f"[{mime} omitted: {len(value)} bytes "
                                                     f"> {self.limits.max_image_bytes}]")
                        continue
                    out[mime] = value
                else:
                    out[mime], t = truncate_text(value, self.limits.max_output_chars)
                    trunc |= t
            else:
                try:
                    size = len(json.dumps(value, default=str))
                except Exception:  # noqa: BLE001 - str() of the user's object may raise anything
                    value, size = str(value), 0
                if size > self.limits.max_output_chars:
                    trunc = True
                    continue
                out[mime] = value
        try:
            md = json.loads(json.dumps(metadata or {}, default=str))
        except Exception:  # noqa: BLE001 - str() of the user's object may raise anything
            md = {}
        return out, md, trunc

    def display(self, data: dict, metadata: dict, output_type: str = "display_data",
                display_id: str | None = None, update: bool = False) -> None:
        self._maybe_clear()
        bundle, md, trunc = self._bundle(data, metadata)
        if update and display_id is not None:
            for item in self.items:
                if self.display_ids.get(id(item)) == display_id:
                    item.data, item.metadata, item.truncated = bundle, md, trunc
            return
        size = sum(len(v) if isinstance(v, str) else 64 for v in bundle.values())
        if (len(self.items) >= self.limits.max_outputs
                or self._total + size > self.limits.max_total_bytes):
            self._dropped_outputs += 1
            return
        self._total += size
        item = OutputItem(output_type=output_type, data=bundle, metadata=md, truncated=trunc)
        self.truncated |= trunc
        self.items.append(item)
        if display_id is not None:
            self.display_ids[id(item)] = display_id

    def error_from(self, ename: str, evalue: str, stb: list[str]) -> None:
        budget = self.limits.max_output_chars
        tb = []
        for line in stb:
            line, _ = truncate_text(str(line), budget)
            budget -= len(line)
            tb.append(line)
            if budget <= 0:
                tb.append("... [traceback truncated]")
                break
        evalue, _ = truncate_text(evalue, 2000)
        self.error = (ename, evalue, tb)
        self.items.append(OutputItem(output_type="error", ename=ename, evalue=evalue, traceback=tb))

    def finish(self) -> list[OutputItem]:
        for name, n in self._stream_dropped.items():
            if n:
                self.truncated = True
                marker = "\n" + cut_note(n)
                streams = [i for i in self.items if i.output_type == "stream" and i.name == name]
                if streams:
                    streams[-1].text = (streams[-1].text or "") + marker
                    streams[-1].truncated = True
        if self._dropped_outputs:
            self.truncated = True
            self.items.append(OutputItem(
                output_type="stream", name="stderr", truncated=True,
                text=f"... [{self._dropped_outputs} more outputs omitted]\n"))
        return self.items


def sealed_capture(limit: int) -> list[int]:
    """Two memfds (stdout, stderr) ``limit`` bytes long, sealed against growing:
    output past the limit fails to write instead of being buffered, so the
    bound holds before anything is kept. What was written is the file offset.

    Copies cannot create memfds (the syscall filter denies them: memory no
    rlimit counts), so the client makes these for each exec and passes them
    with the request. Raises OSError where memfds do not exist.
    """
    fds: list[int] = []
    try:
        for name in ("jda-stdout", "jda-stderr"):
            fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            fds.append(fd)
            os.ftruncate(fd, limit)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK
                        | fcntl.F_SEAL_SEAL)
    except (AttributeError, OSError) as e:
        for fd in fds:
            os.close(fd)
        raise OSError(f"no sealed capture: {e}") from None
    return fds


def fresh_fd_capture(limit: int, given: list[int] | None = None) -> tuple[int, int]:
    """fd 1/2 for this exec (C-level and subprocess output): the sealed memfds
    the client ``given`` with the request, else new ones, else (a replay
    kernel without memfds) unlinked files bounded by RLIMIT_FSIZE only."""
    if given is None or len(given) != 2:
        try:
            given = sealed_capture(limit)
        except OSError:
            given = [os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
                     for _ in range(2)]
    for fd, target in zip(given, (1, 2)):
        os.dup2(fd, target)
    return given[0], given[1]


def drain_fd_capture(sink: Sink, fds: tuple[int, int], devnull: int, limit: int) -> None:
    """Move what fd 1/2 got during the exec (at most ``limit`` bytes each) into
    ``sink`` and point them back at ``devnull``."""
    for f in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # closed or replaced
            if f is not None:
                f.flush()
    with contextlib.suppress(OSError, AttributeError):  # no libc to load
        get_libc().fflush(None)  # C stdio buffers of extensions
    for name, fd, target in (("stdout", fds[0], 1), ("stderr", fds[1], 2)):
        try:
            os.dup2(devnull, target)
            size = min(os.lseek(fd, 0, os.SEEK_CUR), limit)
            if size:
                data = os.pread(fd, size, 0).decode("utf-8", "replace")
                sink.stream(name, data)
                if size >= limit:
                    sink.truncated = True
                    sink.stream(name, f"\n... [output stopped at {limit} bytes]\n")
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)


def scratch_over_cap(scratch: str | None, cap: int) -> int | None:
    """Bytes in ``scratch`` when over ``cap`` (files, not links)."""
    if not scratch:
        return None
    total = 0

    def add(dir_fd, entry) -> None:
        nonlocal total
        st = entry.stat(follow_symlinks=False)
        total += 0 if stat.S_ISLNK(st.st_mode) else st.st_blocks * 512

    # iterative and relative: a candidate may nest folders past the recursion limit and PATH_MAX
    complete = _procs.walk_tree(scratch, add, max_entries=200_000)
    if not complete:  # too many entries to count: over any sensible cap
        return max(total, cap + 1)
    return total if total > cap else None

