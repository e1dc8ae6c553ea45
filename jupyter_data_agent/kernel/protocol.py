"""Framing between snapshot clients and snapshot processes.

A frame is a 4-byte big-endian length followed by UTF-8 JSON. Requests carry
``id`` and ``op``; replies carry the same ``id``, ``ok`` and either a typed
payload or ``error``. A ``fork`` request carries one file descriptor (the new
child's end of a fresh socketpair) as SCM_RIGHTS, so every snapshot gets its
own direct channel to the client without touching the filesystem (which is
read-only for snapshots). JSON only: nothing a snapshot sends is unpickled.
Standard library only (this module is also injected into kernels).
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


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise PeerClosed("peer closed the channel mid-frame")
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket, want_fds: int = 0) -> tuple[dict, list[int]]:
    """Read one frame; with ``want_fds`` also collect passed descriptors."""
    fds: list[int] = []
    header = b""
    while len(header) < _HEADER.size:
        if want_fds:
            chunk, new_fds, _flags, _addr = socket.recv_fds(
                sock, _HEADER.size - len(header), want_fds)
            fds.extend(new_fds)
        else:
            chunk = sock.recv(_HEADER.size - len(header))
        if not chunk:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if header:
                raise ProtocolError("peer closed the channel mid-header")
            raise PeerClosed("peer closed the channel")
        header += chunk
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME}")
    body = _recv_exact(sock, length)
    try:
        obj = json.loads(body.decode("utf-8"))
    except ValueError as e:
        raise ProtocolError(f"undecodable frame: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("frame is not a JSON object")
    return obj, fds


def token_ok(expected: str, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode())
