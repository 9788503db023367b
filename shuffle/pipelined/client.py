"""Consumer side of the data plane: one connection per producing TaskExecutor, shared by every
remote input channel that reads from it, with credit-based flow control.

Each channel owns ``buffers-per-channel`` exclusive buffers and may borrow floating
buffers from its gate's pool (``floating-buffers-per-gate``) when the producer reports a
backlog. A channel announces one credit per free buffer; the producer sends a data buffer
only against a credit, so a channel never holds more than its buffers and the connection's
reader thread never blocks: a slow channel cannot stall the others on the connection.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable

import pyarrow as pa

from proto import dataplane_pb2
from shuffle.api import Event
from shuffle.pipelined import protocol
from shuffle.pipelined.partition import Buffer
from weir.errors import PartitionNotFoundError, RemoteTransportError
from weir.records import Elements

log = logging.getLogger(__name__)

_Kind = dataplane_pb2.BufferHeader
_receiver_ids = itertools.count(1)
#: Bytes the reader thread takes from the socket at once (many frames per syscall).
READ_BUFFER_BYTES = 1 << 20


class _Piece:
    """A schema, or a piece of a serialized record batch, waiting for the task thread."""

    __slots__ = ("body", "kind", "message_end")

    def __init__(self, kind: int, body: memoryview, message_end: bool) -> None:
        self.kind = kind
        self.body = body
        self.message_end = message_end


class FloatingBufferPool:
    """The floating buffers of one input gate, lent to channels with a backlog."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._waiting: deque[RemoteInputChannel] = deque()
        self._lock = threading.Lock()

    def try_acquire(self, channel: RemoteInputChannel) -> bool:
        with self._lock:
            if self._free > 0:
                self._free -= 1
                return True
            if channel not in self._waiting:
                self._waiting.append(channel)
            return False

    def release(self) -> None:
        """A buffer comes back: the first waiting channel that still needs it gets it, else
        it is free again."""
        while True:
            with self._lock:
                channel = self._waiting.popleft() if self._waiting else None
                if channel is None:
                    self._free += 1
                    return
            if channel.offer_floating():
                return

    def forget(self, channel: RemoteInputChannel) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._waiting.remove(channel)

    @property
    def in_use(self) -> int:
        with self._lock:
            return self.size - self._free


class ClientConnection:
    """A TCP connection to one producing TaskExecutor, multiplexed by receiver id."""

    def __init__(self, address: str, on_closed: Callable[[ClientConnection], None]) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._sock = socket.create_connection((host, int(port)), timeout=5)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send_lock = threading.Lock()
        self._channels: dict[int, RemoteInputChannel] = {}
        self._lock = threading.Lock()
        self._on_closed = on_closed
        self.closed = False
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"data-client-{address}")
        self._reader.start()

    def send(self, kind: int, message: object) -> None:
        data = protocol.frame(kind, message.SerializeToString())  # type: ignore[attr-defined]
        with self._send_lock:
            self._sock.sendall(data)

    def request(self, channel: RemoteInputChannel, initial_credit: int) -> None:
        with self._lock:
            self._channels[channel.receiver_id] = channel
        self.send(protocol.PARTITION_REQUEST, dataplane_pb2.PartitionRequest(
            partition_id=channel.partition_id, subpartition=channel.subpartition,
            receiver_id=channel.receiver_id, initial_credit=initial_credit,
            consumer=channel.consumer))

    def forget(self, receiver_id: int, cancel: bool) -> None:
        with self._lock:
            known = self._channels.pop(receiver_id, None) is not None
        if known and cancel and not self.closed:
            with contextlib.suppress(OSError):
                self.send(protocol.CANCEL_PARTITION,
                          dataplane_pb2.CancelPartition(receiver_id=receiver_id))

    def _read_loop(self) -> None:
        error: BaseException | None = None
        stream = self._sock.makefile("rb", buffering=READ_BUFFER_BYTES)
        try:
            while True:
                frame = protocol.read_frame(stream)
                if frame is None:
                    error = ConnectionError(f"the producer at {self.address} closed the "
                                            "connection")
                    return
                kind, payload = frame
                if kind == protocol.BUFFER:
                    header, body = protocol.parse_buffer(payload)
                    with self._lock:
                        channel = self._channels.get(header.receiver_id)
                    if channel is not None:
                        channel.on_buffer(header, body)
                elif kind == protocol.ERROR:
                    response = dataplane_pb2.ErrorResponse.FromString(bytes(payload))
                    with self._lock:
                        channel = self._channels.pop(response.receiver_id, None)
                    if channel is not None:
                        channel.on_error(response)
        except (OSError, ConnectionError, ValueError) as err:  # ValueError: closed stream
            error = err
        finally:
            with contextlib.suppress(OSError):
                stream.close()
            self._close(error)

    def _close(self, error: BaseException | None) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        self._on_closed(self)
        for channel in channels:
            failure = RemoteTransportError(
                f"lost the data connection to {self.address} while reading partition "
                f"{channel.partition_id}: {error}")
            failure.__cause__ = error
            channel.fail(failure)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send(protocol.CLOSE, dataplane_pb2.CloseRequest())
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=5)


class ConnectionManager:
    """The shared connections of one TaskExecutor, by producer address. Thread-safe."""

    def __init__(self) -> None:
        self._connections: dict[str, ClientConnection] = {}
        self._lock = threading.Lock()
        self._timers: set[threading.Timer] = set()
        self._closed = False

    def connection(self, address: str) -> ClientConnection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is not None and not connection.closed:
                return connection
            connection = ClientConnection(address, self._closed_connection)
            self._connections[address] = connection
            return connection

    def _closed_connection(self, connection: ClientConnection) -> None:
        with self._lock:
            if self._connections.get(connection.address) is connection:
                del self._connections[connection.address]

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` after ``delay`` seconds on a timer thread (request retries)."""
        def run() -> None:
            with self._lock:
                self._timers.discard(timer)
            if not self._closed:
                fn()

        timer = threading.Timer(delay, run)
        timer.daemon = True
        with self._lock:
            if self._closed:
                return
            self._timers.add(timer)
        timer.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
            timers = list(self._timers)
            self._connections.clear()
        for timer in timers:
            timer.cancel()
        for connection in connections:
            connection.close()


class RemoteInputChannel:
    """Reads one remote subpartition. ``take`` runs on the task thread; ``on_buffer`` on the
    connection's reader thread."""

    finished = False

    def __init__(self, manager: ConnectionManager, address: str, partition_id: str,
                 subpartition: int, consumer: str, exclusive: int, pool: FloatingBufferPool,
                 initial_backoff: float, max_backoff: float, wakeup: Callable[[], None]) -> None:
        self.receiver_id = next(_receiver_ids)
        self.partition_id = partition_id
        self.subpartition = subpartition
        self.consumer = consumer
        self._manager = manager
        self._address = address
        self._exclusive = exclusive
        self._pool = pool
        self._backoff = initial_backoff
        self._max_backoff = max_backoff
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._queue: deque[Buffer | _Piece] = deque()
        self._assembly: list[memoryview] = []
        self.largest_buffer = 0
        self.floating = 0
        self._unannounced = 0
        self._announce_batch = max(1, exclusive // 2)
        self._backlog = 0
        self._schema: pa.Schema | None = None
        self._sequence = 0
        self._connection: ClientConnection | None = None
        self.failure: BaseException | None = None
        self.closed = False
        self.bytes_in = 0
        self.buffers_in = 0

    # -- requesting -------------------------------------------------------------------------

    def request(self) -> None:
        if self.closed:
            return
        try:
            connection = self._manager.connection(self._address)
            self._connection = connection
            self._sequence = 0
            connection.request(self, self._exclusive)
        except OSError:
            self._retry("the producer's TaskExecutor does not accept connections")

    def _retry(self, why: str) -> None:
        if self._backoff > self._max_backoff:
            self.fail(PartitionNotFoundError(
                f"partition {self.partition_id} is not available at {self._address} after "
                f"retrying with back-off ({why})"))
            return
        delay, self._backoff = self._backoff, self._backoff * 2
        self._manager.schedule(delay, self.request)

    def on_error(self, response: dataplane_pb2.ErrorResponse) -> None:
        if response.kind == dataplane_pb2.ErrorResponse.PARTITION_NOT_FOUND:
            self._retry(response.message)
        else:
            self.fail(RemoteTransportError(response.message))

    # -- receiving (reader thread) ----------------------------------------------------------

    def on_buffer(self, header: dataplane_pb2.BufferHeader, body: memoryview) -> None:
        self._sequence += 1
        if header.sequence_number != self._sequence:
            self.fail(RemoteTransportError(
                f"buffer {header.sequence_number} of partition {self.partition_id} arrived "
                f"when {self._sequence} was expected"))
            return
        # Schemas and pieces are decoded on the task thread, in order: a schema that arrives
        # early must not apply to a batch still being reassembled.
        item: Buffer | _Piece
        if header.kind in (_Kind.SCHEMA, _Kind.DATA):
            item = _Piece(header.kind, body, header.message_end)
        elif header.kind == _Kind.END_OF_PARTITION:
            item = Buffer(None, 0, end_of_partition=True)
        else:
            item = Buffer(None, 0, event=Event(header.event_type, bytes(body)),
                          priority=header.priority)
        buffer = item
        credit = 0
        with self._lock:
            if isinstance(buffer, Buffer) and buffer.priority:
                position = 0
                while position < len(self._queue) and \
                        getattr(self._queue[position], "priority", False):
                    position += 1
                self._queue.insert(position, buffer)
            else:
                self._queue.append(buffer)
            if header.kind == _Kind.DATA:
                self.bytes_in += len(body)
                self.buffers_in += 1
                self.largest_buffer = max(self.largest_buffer, len(body))
                self._backlog = header.backlog
                # Borrow floating buffers to cover the producer's backlog (Flink's rule).
                while self.floating < self._backlog and self._pool.try_acquire(self):
                    self.floating += 1
                    credit += 1
        if credit:
            self._announce(credit)
        self._wakeup()

    def offer_floating(self) -> bool:
        """The pool offers a buffer this channel once asked for (any thread): taken only
        while the producer's backlog still needs it."""
        with self._lock:
            if self.closed or self.floating >= self._backlog:
                return False
            self.floating += 1
        self._announce(1)
        return True

    def _announce(self, credit: int) -> None:
        connection = self._connection
        if connection is None or connection.closed or self.closed:
            return
        try:
            connection.send(protocol.ADD_CREDIT,
                            dataplane_pb2.AddCredit(receiver_id=self.receiver_id, credit=credit))
        except OSError as err:
            self.fail(RemoteTransportError(f"cannot announce credit to {self._address}: {err}"))

    def announce_buffer_size(self, size: int) -> None:
        """Ask the producer for data buffers of at most ``size`` bytes (debloating)."""
        connection = self._connection
        if connection is None or connection.closed or self.closed:
            return
        with contextlib.suppress(OSError):
            connection.send(protocol.NEW_BUFFER_SIZE, dataplane_pb2.NewBufferSize(
                receiver_id=self.receiver_id, buffer_size=size))

    def queued_bytes(self) -> int:
        with self._lock:
            return sum(len(b.body) for b in self._queue if isinstance(b, _Piece))

    def fail(self, error: BaseException) -> None:
        if not self.closed and self.failure is None:
            self.failure = error
            self._wakeup()

    # -- consuming (task thread) ------------------------------------------------------------

    def take(self) -> Buffer | None:
        """The next batch (reassembled from its pieces), event or end of partition; None
        while nothing complete is there. Every piece taken frees its buffer at once."""
        while True:
            with self._lock:
                item = self._queue.popleft() if self._queue else None
                if item is None:
                    if self.failure is not None:
                        raise self.failure
                    return None
                piece = isinstance(item, _Piece) and item.kind == _Kind.DATA
                surplus = piece and self.floating > 0 and self.floating > self._backlog
                if surplus:
                    self.floating -= 1
            if piece:
                self._recycle(surplus)
            if isinstance(item, Buffer):
                if item.end_of_partition:
                    self.finished = True
                    self._release_connection(cancel=False)
                return item
            if item.kind == _Kind.SCHEMA:
                self._schema = pa.ipc.read_schema(pa.py_buffer(item.body))
                continue
            self._assembly.append(item.body)
            if not item.message_end:
                continue
            parts, self._assembly = self._assembly, []
            message = parts[0] if len(parts) == 1 else b"".join(parts)
            assert self._schema is not None
            batch = pa.ipc.read_record_batch(pa.py_buffer(message), self._schema)
            return Buffer([Elements.from_arrow(batch)], len(message))

    def _recycle(self, surplus: bool) -> None:
        """A buffer is free again: back to the pool if borrowed and not needed, else one
        more credit for the producer. Credits are announced in batches (half the exclusive
        buffers), but always when the queue runs empty, so the producer is never left
        without credit while this channel waits."""
        if surplus:
            self._pool.release()
            return
        with self._lock:
            self._unannounced += 1
            due = self._unannounced >= self._announce_batch or not self._queue
            credit = self._unannounced if due else 0
            if due:
                self._unannounced = 0
        if credit:
            self._announce(credit)

    def queued(self) -> int:
        """Data buffers (pieces) waiting to be taken."""
        with self._lock:
            return sum(1 for b in self._queue if isinstance(b, _Piece) and b.kind == _Kind.DATA)

    def _release_connection(self, cancel: bool) -> None:
        if self._connection is not None:
            self._connection.forget(self.receiver_id, cancel)

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            floating, self.floating = self.floating, 0
            self._queue.clear()
        self._pool.forget(self)
        for _ in range(floating):
            self._pool.release()
        self._release_connection(cancel=not self.finished)
