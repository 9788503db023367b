"""Framing of the TaskExecutor-to-TaskExecutor data connection (see proto/dataplane.proto).

A frame is ``[u32 length][u8 type][payload]`` (length counts type + payload). Control
payloads are protobuf messages; a BUFFER payload is ``[u16 n][BufferHeader][body]``. Plain
TCP, not gRPC: Python gRPC moves 32 KiB messages at 15-20% of a raw socket's speed.

A connection opens with a handshake (CHALLENGE from the producer, HELLO from the consumer):
the consumer proves it holds the cluster token by an HMAC of the producer's fresh nonce, so
the token never crosses the wire and a recorded handshake cannot be replayed.

Example:
    >>> nonce = bytes(32)
    >>> verify_hello("t0k", nonce, hello_mac("t0k", nonce))
    True
    >>> verify_hello("t0k", nonce, hello_mac("guess", nonce))
    False
    >>> verify_hello(None, nonce, b"")  # a cluster without a token accepts anyone
    True
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from weir.core.errors import WeirError
from weir.proto import dataplane_pb2

PARTITION_REQUEST = 1
ADD_CREDIT = 2
BUFFER = 3
ERROR = 4
CANCEL_PARTITION = 5
CLOSE = 6
NEW_BUFFER_SIZE = 7
CHALLENGE = 8
HELLO = 9

_HEADER = struct.Struct("!IB")
_U16 = struct.Struct("!H")
HEADER_SIZE = _HEADER.size
#: Largest frame a producer reads: consumers send only small control messages.
MAX_CONTROL_FRAME = 64 * 1024
#: Credited buffers of one message a producer sends in one frame (fewer syscalls).
MAX_BUFFERS_PER_FRAME = 16
#: What a data frame may carry beyond its buffers (type, header length, header).
DATA_FRAME_OVERHEAD = 64 * 1024


#: How long a consumer waits for the producer's TLS handshake and challenge.
HANDSHAKE_TIMEOUT_S = 10.0
#: How long a producer keeps a connection that has not authenticated, from its accept to
#: the consumer's answer, TLS handshake included: a genuine consumer answers in
#: milliseconds, and until then the connection costs a descriptor and a thread.
UNAUTHENTICATED_TIMEOUT_S = 5.0
#: Longest a producer holds a request for a partition it does not have yet (the consumer's
#: ``wait_ms`` is capped to it): a hostile ``wait_ms`` cannot pin anything for long.
MAX_HOLD_MS = 30_000
#: Requests one connection may have held at once; more are answered at once.
MAX_HELD_PER_CONNECTION = 1024
#: Authenticated data connections a producer keeps from one host, and in all (each costs
#: two threads); a connection is counted, and refused over these, once it authenticated.
MAX_CONNECTIONS_PER_PEER = 64
MAX_CONNECTIONS = 1024
#: Connections still in their handshake (not authenticated yet) from one host, and in all.
#: When full, the oldest of them (of the host that holds the most) is closed to make room:
#: a genuine consumer authenticates within milliseconds of connecting, so sockets that a
#: peer without the token opens and leaves idle can delay it but never lock it out.
MAX_PENDING_PER_PEER = 32
MAX_PENDING = 256
#: A producer closes a connection that served nothing (no subpartition, no held request)
#: for this long; its consumer reconnects when it needs to.
IDLE_TIMEOUT_S = 300.0


class ConnectionLimits(NamedTuple):
    """What a producer's data server admits at once (see :func:`connection_limits`)."""

    pending: int
    pending_per_peer: int
    connections: int
    per_peer: int


def connection_limits(descriptors: int) -> ConnectionLimits:
    """The connection caps of a process that may have ``descriptors`` files open: every
    connection holds one, and a data server that ran out of them could accept nothing.

    The data server takes at most half (the rest is for state files, RocksDB, gRPC, the
    TaskExecutor's own outgoing data connections and logs), an eighth of that for
    connections still in their handshake; the constants above cap each.

    Example:
        >>> connection_limits(1 << 20)
        ConnectionLimits(pending=256, pending_per_peer=32, connections=1024, per_peer=64)
        >>> connection_limits(256)
        ConnectionLimits(pending=16, pending_per_peer=4, connections=112, per_peer=64)
    """
    share = max(0, descriptors) // 2
    pending = max(4, min(MAX_PENDING, share // 8))
    return ConnectionLimits(
        pending=pending,
        pending_per_peer=max(1, min(MAX_PENDING_PER_PEER, pending // 4)),
        connections=max(1, min(MAX_CONNECTIONS, share - pending)),
        per_peer=max(1, min(MAX_CONNECTIONS_PER_PEER, share - pending)))


def hello_mac(token: str | None, nonce: bytes) -> bytes:
    """The consumer's answer to ``nonce``: HMAC-SHA256 keyed by the token (empty without)."""
    if not token:
        return b""
    return hmac.new(token.encode(), nonce, hashlib.sha256).digest()


def verify_hello(token: str | None, nonce: bytes, mac: bytes) -> bool:
    """Whether ``mac`` answers ``nonce`` for ``token`` (constant time); True without token."""
    if not token:
        return True
    return hmac.compare_digest(hello_mac(token, nonce), mac)


def configure_socket(sock: socket.socket) -> None:
    """No Nagle delay, and TCP keepalive: a peer whose host vanished without closing the
    connection is noticed within about 25 s, so a consumer never waits on it forever."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def max_data_frame(segment_size: int) -> int:
    """Largest frame a consumer reads: ``MAX_BUFFERS_PER_FRAME`` buffers, none larger than
    the segment size (batches larger than a segment span several buffers)."""
    return MAX_BUFFERS_PER_FRAME * segment_size + DATA_FRAME_OVERHEAD


class CorruptFrameError(WeirError, ConnectionError):
    """The stream is not a sequence of frames: the peer is broken or hostile. Also a
    ConnectionError: the connection is unusable, and is closed like a broken one."""


class FrameTooLargeError(CorruptFrameError):
    """A frame header announced more than the reader's limit: the connection is closed
    before anything is allocated for it."""


def frame(kind: int, payload: bytes = b"") -> bytes:
    return _HEADER.pack(len(payload) + 1, kind) + payload


def buffer_frame(header: dataplane_pb2.BufferHeader,
                 body: bytes | memoryview) -> list[bytes | memoryview]:
    """The pieces of a BUFFER frame (sent with one sendmsg, without joining the body)."""
    encoded = header.SerializeToString()
    prefix = _HEADER.pack(1 + _U16.size + len(encoded) + len(body), BUFFER)
    return [prefix + _U16.pack(len(encoded)) + encoded, body]


def parse_buffer(payload: bytes | bytearray | memoryview
                 ) -> tuple[dataplane_pb2.BufferHeader, memoryview]:
    (n,) = _U16.unpack_from(payload, 0)
    view = memoryview(payload)
    # FromString parses any buffer without a copy; the protobuf stubs only name bytes.
    header = dataplane_pb2.BufferHeader.FromString(
        view[_U16.size:_U16.size + n])  # type: ignore[arg-type]
    return header, view[_U16.size + n:]


class DataSocket(Protocol):
    """What the data plane calls on a connection: a plain socket or a ``tls.TlsSocket``."""

    def recv_into(self, buffer: memoryview, /) -> int: ...

    def sendall(self, data: bytes | memoryview, /) -> None: ...

    def sendmsg(self, pieces: Sequence[bytes | memoryview], /) -> int: ...


def send_all(sock: DataSocket, pieces: Sequence[bytes | memoryview]) -> None:
    """Send the pieces in order, without concatenating them."""
    total = sum(len(p) for p in pieces)
    sent = sock.sendmsg(pieces)
    if sent == total:
        return
    data = b"".join(bytes(p) for p in pieces)
    sock.sendall(memoryview(data)[sent:])


class FrameReader:
    """Reads frames from a socket through one reusable buffer: a single ``recv_into`` serves
    every frame that arrived, with no copy until a frame's owner takes its payload."""

    def __init__(self, sock: DataSocket, size: int, max_frame: int) -> None:
        self._sock = sock
        self._max_frame = max_frame
        self._buffer = bytearray(size)
        self._view = memoryview(self._buffer)
        self._start = 0
        self._end = 0

    def read(self) -> list[tuple[int, memoryview]] | None:
        """The complete frames after one receive, as (type, payload) views that stay valid
        until the next call; None on a clean end of stream."""
        self._make_room()
        received = self._sock.recv_into(self._view[self._end:])
        if received == 0:
            if self._end > self._start:
                msg = "connection closed in the middle of a frame"
                raise ConnectionError(msg)
            return None
        self._end += received
        frames = []
        view, position, end = self._view, self._start, self._end
        unpack = _HEADER.unpack_from
        while end - position >= HEADER_SIZE:
            length, kind = unpack(view, position)
            if length > self._max_frame:
                msg = (f"a frame announced {length:,} bytes, more than the "
                       f"{self._max_frame:,} this connection accepts")
                raise FrameTooLargeError(msg)
            if length < 1:
                msg = "corrupt data frame (length 0)"
                raise CorruptFrameError(msg)
            frame_end = position + 4 + length
            if frame_end > end:
                break
            frames.append((kind, view[position + HEADER_SIZE:frame_end]))
            position = frame_end
        self._start = position
        self._wanted = 0 if end - position < HEADER_SIZE else \
            4 + _HEADER.unpack_from(view, position)[0]
        return frames

    _wanted = 0

    def _make_room(self) -> None:
        """Move a partial frame to the front (or into a larger buffer if it needs one)."""
        pending = self._end - self._start
        capacity = len(self._buffer)
        if self._start == 0 and self._end < capacity and self._wanted <= capacity:
            return
        if self._wanted > capacity:
            bigger = bytearray(max(self._wanted, 2 * capacity))
            bigger[:pending] = self._buffer[self._start:self._end]
            self._buffer = bigger
            self._view = memoryview(bigger)
        elif pending:
            self._view[:pending] = bytes(self._view[self._start:self._end])
        self._start, self._end = 0, pending
