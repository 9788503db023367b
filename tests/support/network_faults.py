"""Network faults for tests: a TCP proxy whose address can stop answering the way a host
does that went away behind a live connection."""

from __future__ import annotations

import contextlib
import socket
import threading


class _Link:
    """One proxied connection: the client's socket and the one to the target."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.sockets = (client, upstream)
        self.silent = False

    def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv()
            sock.close()


class SilencingProxy:
    """A TCP proxy to ``target`` that can stop answering the way an address does whose host
    went away behind a live connection: its port refuses new connections, and the
    connections it carries stay open but pass nothing any more, not even their close."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._listener: socket.socket | None = None
        self.port = self._listen(0)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _listen(self, port: int) -> int:
        listener = socket.create_server(("127.0.0.1", port))
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="proxy-accept",
                         daemon=True).start()
        return int(listener.getsockname()[1])

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: the port refuses from now on
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            link = _Link(client, upstream)
            with self._lock:
                self._links.append(link)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(link, source, sink),
                                 name="proxy-pump", daemon=True).start()

    @staticmethod
    def _pump(link: _Link, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not link.silent:
                    sink.sendall(data)
        except OSError:
            pass
        if not link.silent:
            link.close()  # a close passes through like the data

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
            listener.close()

    def stop_answering(self) -> None:
        self._stop_listening()
        with self._lock:
            for link in self._links:
                link.silent = True

    def answer_again(self) -> None:
        """Listen on the same port again; the silenced connections are closed, as a host
        that comes back knows nothing of them."""
        with self._lock:
            stale, self._links = self._links, []
        for link in stale:
            link.close()
        self._listen(self.port)

    def close(self) -> None:
        self._stop_listening()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()
