"""Framing between snapshot clients and snapshot processes.

A frame is a 4-byte big-endian length followed by UTF-8 JSON. Requests carry
``id`` and ``op``; replies carry the same ``id``, ``ok`` and either a typed
payload or ``error``. A ``fork`` request carries one file descriptor (the new
child's end of a fresh socketpair) as SCM_RIGHTS, so every snapshot gets its
own direct channel to the client without touching the filesystem (which is
read-only for snapshots). JSON only: nothing a snapshot sends is unpickled.
Standard library only (this module is also injected into kernels).

The client never believes what a snapshot says about itself: frames are
bounded in bytes before they are read (``max_bytes``), and who sent one is
the kernel's word, not the frame's (``SO_PASSCRED``: each chunk carries the
sender's real pid, which a process without CAP_SYS_ADMIN cannot forge).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import struct

PROTOCOL_VERSION = 1
MAX_FRAME = 256 << 20
_HEADER = struct.Struct(">I")


class ProtocolError(ConnectionError):
    """The peer sent something that is not a frame, or hung up mid-frame."""


class PeerClosed(ProtocolError):
    """EOF on the channel: the snapshot process is gone."""


def send_frame(sock: socket.socket, obj: dict, fds: tuple[int, ...] | list[int] = ()) -> None:
    body = json.dumps(obj, separators=(",", ":"), default=str).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    data = _HEADER.pack(len(body)) + body
    if fds:
        # The descriptors ride on the first byte; the rest follows normally.
        n = socket.send_fds(sock, [data], list(fds))
        if n < len(data):
            sock.sendall(data[n:])
    else:
        sock.sendall(data)


_UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid


def pass_credentials(sock: socket.socket) -> None:
    """Have the kernel attach each sender's real pid to what ``sock`` receives
    (Linux; elsewhere no sender is known, and the client refuses the copy)."""
    if hasattr(socket, "SO_PASSCRED"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)


def _recv_chunk(sock: socket.socket, n: int, senders: set[int] | None) -> bytes:
    if senders is None:
        return sock.recv(n)
    if not hasattr(socket, "SCM_CREDENTIALS"):
        data = sock.recv(n)
        senders.add(0)  # unknown: never a valid pid
        return data
    data, ancdata, _flags, _addr = sock.recvmsg(n, socket.CMSG_SPACE(_UCRED.size))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            senders.add(_UCRED.unpack(payload[:_UCRED.size])[0])
    if data and not ancdata:
        senders.add(0)  # no credentials: SO_PASSCRED was not on; never a valid pid
    return data


def _recv_exact(sock: socket.socket, n: int, senders: set[int] | None = None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = _recv_chunk(sock, min(n - len(buf), 1 << 20), senders)
        if not chunk:
            raise PeerClosed("peer closed the channel mid-frame")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, want_fds: int = 0, max_bytes: int = MAX_FRAME,
               senders: set[int] | None = None) -> tuple[dict, list[int]]:
    """Read one frame of at most ``max_bytes``; with ``want_fds`` also collect
    passed descriptors; with ``senders`` add the pid of every process that
    wrote a part of it (``pass_credentials`` must be on)."""
    fds: list[int] = []
    header = b""
    while len(header) < _HEADER.size:
        if want_fds:
            chunk, new_fds, _flags, _addr = socket.recv_fds(
                sock, _HEADER.size - len(header), want_fds)
            fds.extend(new_fds)
        else:
            chunk = _recv_chunk(sock, _HEADER.size - len(header), senders)
        if not chunk:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if header:
                raise ProtocolError("peer closed the channel mid-header")
            raise PeerClosed("peer closed the channel")
        header += chunk
    (length,) = _HEADER.unpack(header)
    if length > min(max_bytes, MAX_FRAME):
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise ProtocolError(f"a frame of {length} bytes exceeds the bound of "
                            f"{min(max_bytes, MAX_FRAME)}")
    body = _recv_exact(sock, length, senders)
    try:
        obj = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"undecodable frame: {type(e).__name__}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("frame is not a JSON object")
    return obj, fds


def token_ok(expected: str, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode())
