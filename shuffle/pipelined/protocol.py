"""Framing of the TaskExecutor-to-TaskExecutor data connection.

A frame is ``[u32 length][u8 type][payload]`` (length counts type + payload). Control
payloads are protobuf messages from ``proto/dataplane.proto``; a BUFFER payload is an Arrow
IPC stream. Plain TCP, not gRPC: Python gRPC moves small messages at a fraction of a raw
socket's speed (see the shuffle benchmark).
"""

from __future__ import annotations

import socket
import struct

PARTITION_REQUEST = 1
BUFFER = 2
END_OF_PARTITION = 3
ERROR = 4
CLOSE = 5

_HEADER = struct.Struct("!IB")
HEADER_SIZE = _HEADER.size
MAX_FRAME = 1 << 30


def encode_frame(kind: int, payload: bytes = b"") -> bytes:
    return _HEADER.pack(len(payload) + 1, kind) + payload


def send_frame(sock: socket.socket, kind: int, payload: bytes | memoryview = b"") -> None:
    sock.sendall(_HEADER.pack(len(payload) + 1, kind))
    if payload:
        sock.sendall(payload)


def recv_exact(sock: socket.socket, size: int) -> bytearray | None:
    """``size`` bytes, or None if the peer closed the connection first."""
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            return None
        got += n
    return data


def recv_frame(sock: socket.socket) -> tuple[int, bytearray] | None:
    """The next frame as (type, payload), or None on a clean end of stream."""
    header = recv_exact(sock, HEADER_SIZE)
    if header is None:
        return None
    length, kind = _HEADER.unpack(header)
    if not 1 <= length <= MAX_FRAME:
        msg = f"corrupt data frame (length {length})"
        raise ConnectionError(msg)
    payload = recv_exact(sock, length - 1) if length > 1 else bytearray()
    if payload is None:
        msg = "connection closed in the middle of a frame"
        raise ConnectionError(msg)
    return kind, payload
