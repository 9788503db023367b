"""TLS for data connections, safe with one reading and one writing thread.

A data connection is read by one thread and written by another, but an OpenSSL connection
must not be used by two threads at once. :class:`TlsSocket` runs the TLS socket
non-blocking and takes a lock around each TLS call only, never while waiting for the
network, so the reader waiting for data does not hold the writer back. It offers the
calls the data plane makes on a plain socket (``recv_into``, ``sendall``, ``sendmsg``, ...).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Sequence


def accept(sock: socket.socket, context: ssl.SSLContext, timeout: float) -> TlsSocket:
    """The server side of a new connection, after a TLS handshake of at most ``timeout``
    seconds (raises ssl.SSLError or OSError for a peer without a trusted certificate)."""
    sock.settimeout(timeout)
    tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    _handshake(tls)
    return TlsSocket(tls)


def connect(sock: socket.socket, context: ssl.SSLContext, host: str,
            timeout: float) -> TlsSocket:
    """The client side: the server's certificate must name ``host``."""
    sock.settimeout(timeout)
    tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    _handshake(tls)
    return TlsSocket(tls)


def _handshake(tls: ssl.SSLSocket) -> None:
    # wrap_socket took the plain socket's descriptor: a failed handshake must close it here.
    try:
        tls.do_handshake()
    except BaseException:
        tls.close()
        raise


class TlsSocket:
    """A TLS connection usable by one reader and one writer thread at the same time."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._lock = threading.Lock()
        self._timeout: float | None = None
        self._poll = select.poll

    def fileno(self) -> int:
        return self._sock.fileno()

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def setsockopt(self, *args: int) -> None:
        self._sock.setsockopt(*args)

    def getpeername(self) -> tuple[str, int]:
        # An IP socket's peer: (host, port); the stubs type it Any for every family.
        peer: tuple[str, int] = self._sock.getpeername()
        return peer

    def pending(self) -> int:
        """Decrypted bytes already read from the network (a poll of the socket misses them)."""
        with self._lock:
            return self._sock.pending()

    def recv_into(self, buffer: memoryview | bytearray) -> int:
        deadline = self._deadline()
        while True:
            with self._lock:
                try:
                    return self._sock.recv_into(buffer)
                except ssl.SSLWantReadError:
                    event = select.POLLIN
                except ssl.SSLWantWriteError:
                    event = select.POLLOUT
                except ssl.SSLZeroReturnError:
                    return 0
            self._wait(event, deadline)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        deadline = self._deadline()
        while view:
            with self._lock:
                try:
                    view = view[self._sock.send(view):]
                    continue
                except ssl.SSLWantWriteError:
                    event = select.POLLOUT
                except ssl.SSLWantReadError:
                    event = select.POLLIN
            self._wait(event, deadline)

    def sendmsg(self, pieces: Sequence[bytes | memoryview]) -> int:
        """TLS has no scatter-gather send: the pieces go out joined."""
        data = b"".join(pieces)
        self.sendall(data)
        return len(data)

    def shutdown(self, how: int) -> None:
        # The plain socket's shutdown, not the TLS one: it wakes a reader blocked in poll
        # without touching the TLS state another thread may be using.
        socket.socket.shutdown(self._sock, how)

    def close(self) -> None:
        self._sock.close()

    def _deadline(self) -> float | None:
        return None if self._timeout is None else time.monotonic() + self._timeout

    def _wait(self, event: int, deadline: float | None) -> None:
        poller = self._poll()
        poller.register(self._sock.fileno(), event)
        # Bounded waits: the socket may be closed by another thread meanwhile.
        while True:
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if left <= 0:
                msg = "timed out"
                raise TimeoutError(msg)
            if poller.poll(left * 1000):
                return
            if self._sock.fileno() < 0:
                msg = "the connection was closed"
                raise OSError(msg)
