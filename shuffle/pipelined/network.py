"""The data plane between TaskExecutors: a server that streams subpartitions to remote
consumers, and the client side that feeds a remote input channel.

Flow control comes from bounded queues at both ends and TCP's own window: a consumer whose
channel queue is full stops reading its socket, the producer's send blocks, its
subpartition fills, and the producing task stops taking input.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable

import pyarrow as pa

from proto import dataplane_pb2
from shuffle.pipelined import protocol
from shuffle.pipelined.partition import Buffer, PartitionManager, ProducerFailedError
from weir.errors import PartitionNotFoundError, RemoteTransportError
from weir.records import Elements

log = logging.getLogger(__name__)

_POLL_S = 0.2


def elements_to_ipc(elements: Elements) -> bytes:
    batch = elements.arrow()
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def ipc_to_elements(payload: bytearray) -> list[Elements]:
    reader = pa.ipc.open_stream(pa.py_buffer(payload))
    return [Elements.from_arrow(b) for b in reader]


class DataServer:
    """Accepts data connections and streams the requested subpartition on each."""

    def __init__(self, host: str, port: int, partitions: PartitionManager) -> None:
        self._partitions = partitions
        self._sock = socket.create_server((host, port), backlog=128, reuse_port=False)
        self._sock.settimeout(_POLL_S)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._closed = threading.Event()
        self._threads: set[threading.Thread] = set()
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept_loop, name="data-server",
                                          daemon=True)

    def start(self) -> None:
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._serve, args=(conn,),
                                      name="data-server-conn", daemon=True)
            with self._lock:
                self._threads.add(thread)
                self._connections.add(conn)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            frame = protocol.recv_frame(conn)
            if frame is None or frame[0] != protocol.PARTITION_REQUEST:
                return
            request = dataplane_pb2.PartitionRequest.FromString(bytes(frame[1]))
            try:
                sub = self._partitions.subpartition(request.partition_id, request.subpartition)
            except PartitionNotFoundError as err:
                error = dataplane_pb2.ErrorResponse(
                    kind=dataplane_pb2.ErrorResponse.PARTITION_NOT_FOUND, message=str(err))
                protocol.send_frame(conn, protocol.ERROR, error.SerializeToString())
                return
            self._stream(conn, sub, request.partition_id)
        except (OSError, ConnectionError) as err:
            log.debug("data connection ended: %s", err)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._threads.discard(threading.current_thread())
                self._connections.discard(conn)

    def _stream(self, conn: socket.socket, sub: object, partition_id: str) -> None:
        from shuffle.pipelined.partition import Subpartition

        assert isinstance(sub, Subpartition)
        sub.subscribe(None)
        while not self._closed.is_set():
            try:
                buffer = sub.poll(timeout=_POLL_S)
            except ProducerFailedError as err:
                error = dataplane_pb2.ErrorResponse(
                    kind=dataplane_pb2.ErrorResponse.PRODUCER_FAILED, message=str(err))
                protocol.send_frame(conn, protocol.ERROR, error.SerializeToString())
                return
            if buffer is None:
                if sub.released:
                    return
                continue
            if buffer.end_of_partition:
                protocol.send_frame(conn, protocol.END_OF_PARTITION)
                self._partitions.release_consumed(partition_id)
                # Wait for the consumer to close, so the last frames are not cut off.
                conn.settimeout(10)
                with contextlib.suppress(OSError):
                    conn.recv(1)
                return
            for elements in buffer.elements or ():
                protocol.send_frame(conn, protocol.BUFFER, elements_to_ipc(elements))

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            connections = list(self._connections)
            threads = list(self._threads)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(timeout=5)
        for thread in threads:
            thread.join(timeout=5)


class RemoteChannelReader:
    """Fetches one remote subpartition into a bounded queue, on its own thread.

    Retries a request the producer cannot serve yet with exponential back-off; past
    ``max_backoff`` the channel fails with PartitionNotFoundError. A connection that ends
    before end-of-partition fails the channel with RemoteTransportError.
    """

    def __init__(self, address: str, partition_id: str, subpartition: int, consumer: str,
                 capacity: int, initial_backoff: float, max_backoff: float,
                 on_data: Callable[[], None]) -> None:
        self.address = address
        self.partition_id = partition_id
        self.subpartition = subpartition
        self._consumer = consumer
        self._capacity = capacity
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._on_data = on_data
        self.queue: deque[Buffer] = deque()
        self._space = threading.Condition()
        self.failure: BaseException | None = None
        self._closed = threading.Event()
        self._sock: socket.socket | None = None
        self.bytes_in = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"channel-{partition_id[:8]}-{subpartition}")

    def start(self) -> None:
        self._thread.start()

    def take(self) -> Buffer | None:
        if not self.queue:
            return None
        buffer = self.queue.popleft()
        with self._space:
            self._space.notify_all()
        return buffer

    def _put(self, buffer: Buffer) -> None:
        with self._space:
            while len(self.queue) >= self._capacity and not self._closed.is_set():
                self._space.wait(_POLL_S)
        self.queue.append(buffer)
        self._on_data()

    def _fail(self, error: BaseException) -> None:
        if not self._closed.is_set():
            self.failure = error
            self._on_data()

    def _run(self) -> None:
        backoff = self._initial_backoff
        while not self._closed.is_set():
            try:
                outcome = self._fetch()
            except (OSError, ConnectionError) as err:
                if self._closed.is_set():
                    return
                error = RemoteTransportError(
                    f"lost the data connection to {self.address} while reading partition "
                    f"{self.partition_id}: {err}")
                error.__cause__ = err
                self._fail(error)
                return
            if outcome != "not-found":
                return
            if backoff > self._max_backoff:
                self._fail(PartitionNotFoundError(
                    f"partition {self.partition_id} was not found at {self.address} after "
                    f"retrying for the configured back-off (producer not running)"))
                return
            if self._closed.wait(backoff):
                return
            backoff *= 2

    def _fetch(self) -> str:
        host, _, port = self.address.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            return "not-found"  # the producer's TaskExecutor may still be starting
        self._sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        try:
            request = dataplane_pb2.PartitionRequest(
                partition_id=self.partition_id, subpartition=self.subpartition,
                consumer=self._consumer)
            protocol.send_frame(sock, protocol.PARTITION_REQUEST, request.SerializeToString())
            while not self._closed.is_set():
                frame = protocol.recv_frame(sock)
                if frame is None:
                    msg = f"producer at {self.address} closed the connection before the end"
                    raise ConnectionError(msg)
                kind, payload = frame
                if kind == protocol.BUFFER:
                    self.bytes_in += len(payload)
                    self._put(Buffer(ipc_to_elements(payload), len(payload)))
                elif kind == protocol.END_OF_PARTITION:
                    self._put(Buffer(None, 0, end_of_partition=True))
                    return "done"
                elif kind == protocol.ERROR:
                    error = dataplane_pb2.ErrorResponse.FromString(bytes(payload))
                    if error.kind == dataplane_pb2.ErrorResponse.PARTITION_NOT_FOUND:
                        return "not-found"
                    self._fail(RemoteTransportError(error.message))
                    return "failed"
            return "closed"
        finally:
            self._sock = None
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self._closed.set()
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._space:
            self._space.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.queue.clear()

