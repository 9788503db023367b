"""Consumer side of the data plane: one connection per producing TaskExecutor, shared by every
remote input channel that reads from it, with credit-based flow control.

Each channel owns ``buffers-per-channel`` exclusive buffers and may borrow floating
buffers from its gate's pool (``floating-buffers-per-gate``) when the producer reports a
backlog. A channel announces one credit per free buffer; the producer sends a data buffer
only against a credit, so a channel never holds more than its buffers and the connection's
reader thread never blocks: a slow channel cannot stall the others on the connection.

A record batch spans as many buffers as it needs. The reader thread copies each piece
straight into its batch's message as it arrives. While no complete batch waits for the
task, those buffers are free at once, as Flink's deserializer frees the buffers of a
spanning record. Once a complete batch waits, new pieces keep their buffers until the task
takes them. A channel therefore holds at most its buffers, one complete batch and one
batch in assembly. Credit goes back in bulk: once per receive on the reader thread, and on
the task thread once half the channel's buffers are free or its queue runs empty.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import threading
from collections import deque
from collections.abc import Callable
from typing import cast

import pyarrow as pa
from google.protobuf.message import DecodeError

from weir.core.addresses import split_host_port
from weir.core.errors import PartitionNotFoundError, RemoteTransportError
from weir.core.ids import PartitionId
from weir.core.records import Elements
from weir.core.timers import TimerThread
from weir.proto import dataplane_pb2
from weir.shuffle.api import Event, OvertakenData
from weir.shuffle.pipelined import protocol, tls
from weir.shuffle.pipelined.partition import Buffer

log = logging.getLogger(__name__)

_Kind = dataplane_pb2.BufferHeader
_receiver_ids = itertools.count(1)
#: Bytes the reader thread takes from the socket at once (many frames per syscall).
READ_BUFFER_BYTES = 1 << 20


class _Piece:
    """A schema, or a network buffer's piece of a record-batch message, waiting for the task
    thread. The reader thread copies each piece straight into the message it belongs to;
    the piece that completes a message carries it."""

    __slots__ = ("buffers", "kind", "message", "schema", "size")

    def __init__(self, kind: int, size: int, message: pa.Buffer | None,
                 buffers: int = 1, schema: pa.Schema | None = None) -> None:
        self.kind = kind
        self.size = size
        self.message = message
        self.buffers = buffers  # network buffers (credits) this piece holds
        #: SCHEMA: the schema; a completed message: the schema it is encoded with.
        self.schema = schema

    def batch(self) -> Elements:
        """The record batch of a completed message (zero-copy, any thread)."""
        assert self.message is not None and self.schema is not None
        return Elements.from_wire(pa.ipc.read_record_batch(self.message, self.schema))


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
    """A TCP connection to one producing TaskExecutor, multiplexed by receiver id.

    Connecting answers the producer's challenge with ``token`` (see ``protocol``); raises
    ConnectionError (an OSError) when the producer turns the connection away before that.
    """

    def __init__(self, address: str, on_closed: Callable[[ClientConnection], None],
                 max_frame: int, token: str | None = None,
                 on_idle: Callable[[RemoteInputChannel], None] | None = None,
                 tls_context: ssl.SSLContext | None = None) -> None:
        host, port = split_host_port(address)
        self.address = address
        self._max_frame = max_frame
        raw = socket.create_connection((host, port), timeout=5)
        protocol.configure_socket(raw)
        self._sock: socket.socket | tls.TlsSocket = raw
        if tls_context is not None:
            try:
                self._sock = tls.connect(raw, tls_context, host, protocol.HANDSHAKE_TIMEOUT_S)
            except BaseException:
                raw.close()
                raise
        self._send_lock = threading.Lock()
        self._channels: dict[int, RemoteInputChannel] = {}
        self._lock = threading.Lock()
        self._on_closed = on_closed
        self._on_idle = on_idle
        self.closed = False
        self._frames = protocol.FrameReader(self._sock, READ_BUFFER_BYTES, self._max_frame)
        try:
            self._handshake(token)
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"data-client-{address}")
        self._reader.start()

    def _handshake(self, token: str | None) -> None:
        self._sock.settimeout(protocol.HANDSHAKE_TIMEOUT_S)
        frames: list[tuple[int, memoryview]] = []
        while not frames:
            received = self._frames.read()
            if received is None:
                msg = f"the producer at {self.address} closed the connection"
                raise ConnectionError(msg)
            frames = received
        kind, payload = frames[0]
        if kind == protocol.ERROR:
            error = dataplane_pb2.ErrorResponse.FromString(bytes(payload))
            msg = f"the producer at {self.address} refused the connection: {error.message}"
            raise ConnectionError(msg)
        if kind != protocol.CHALLENGE or len(frames) > 1:
            msg = f"the producer at {self.address} did not start with a handshake"
            raise ConnectionError(msg)
        nonce = dataplane_pb2.Challenge.FromString(bytes(payload)).nonce
        self.send(protocol.HELLO, dataplane_pb2.Hello(mac=protocol.hello_mac(token, nonce)))

    def send(self, kind: int, message: object) -> None:
        data = protocol.frame(kind, message.SerializeToString())  # type: ignore[attr-defined]
        with self._send_lock:
            self._sock.sendall(data)

    def request(self, channel: RemoteInputChannel, initial_credit: int, wait_s: float) -> None:
        with self._lock:
            self._channels[channel.receiver_id] = channel
        self.send(protocol.PARTITION_REQUEST, dataplane_pb2.PartitionRequest(
            partition_id=channel.partition_id, subpartition=channel.subpartition,
            receiver_id=channel.receiver_id, initial_credit=initial_credit,
            consumer=channel.consumer, wait_ms=max(1, round(wait_s * 1000))))

    def forget(self, receiver_id: int, cancel: bool) -> None:
        with self._lock:
            known = self._channels.pop(receiver_id, None) is not None
        if known and cancel and not self.closed:
            with contextlib.suppress(OSError):
                self.send(protocol.CANCEL_PARTITION,
                          dataplane_pb2.CancelPartition(receiver_id=receiver_id))

    def _read_loop(self) -> None:
        error: BaseException | None = None
        idle = False
        reader = self._frames
        try:
            while True:
                frames = reader.read()
                if frames is None:
                    error = ConnectionError(f"the producer at {self.address} closed the "
                                            "connection")
                    return
                # Everything one receive brought is handed over per channel in one go: one
                # lock, one credit decision and one wake-up of the task per channel.
                arrivals: dict[int, list[tuple[dataplane_pb2.BufferHeader, memoryview]]] = {}
                for kind, payload in frames:
                    if kind == protocol.BUFFER:
                        header, body = protocol.parse_buffer(payload)
                        arrivals.setdefault(header.receiver_id, []).append((header, body))
                    elif kind == protocol.ERROR:
                        self._deliver(arrivals)
                        arrivals = {}
                        response = dataplane_pb2.ErrorResponse.FromString(bytes(payload))
                        if response.receiver_id == 0:   # about the connection itself
                            idle = response.kind == dataplane_pb2.ErrorResponse.CONNECTION_IDLE
                            error = ConnectionError(f"the producer at {self.address} "
                                                    f"closed the connection: "
                                                    f"{response.message}")
                            return
                        with self._lock:
                            channel = self._channels.pop(response.receiver_id, None)
                        if channel is not None:
                            channel.on_error(response)
                self._deliver(arrivals)
        except (OSError, ConnectionError, ValueError, DecodeError) as err:
            error = err
        finally:
            self._close(error, idle)

    def _deliver(self, arrivals: dict[int, list[tuple[dataplane_pb2.BufferHeader,
                                                      memoryview]]]) -> None:
        if not arrivals:
            return
        with self._lock:
            targets = [(self._channels.get(rid), buffers) for rid, buffers in arrivals.items()]
        for channel, buffers in targets:
            if channel is not None:
                channel.on_buffers(buffers)

    def _close(self, error: BaseException | None, idle: bool = False) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        self._on_closed(self)
        if idle and self._on_idle is not None:
            # The producer served nothing on this connection when it closed it: requests
            # sent since then never reached it, and go again on a new connection.
            for channel in channels:
                self._on_idle(channel)
            return
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
    """The shared connections of one TaskExecutor, by producer address. Thread-safe.

    ``segment_size``: the configured buffer size; a frame larger than one such buffer
    (plus its header) closes the connection instead of being allocated."""

    def __init__(self, segment_size: int, token: str | None = None,
                 tls_context: ssl.SSLContext | None = None) -> None:
        self._max_frame = protocol.max_data_frame(segment_size)
        self._token = token
        self._tls_context = tls_context
        self._connections: dict[str, ClientConnection] = {}
        self._lock = threading.Lock()
        self._timers = TimerThread("data-client-timers")
        self._closed = False

    def connection(self, address: str) -> ClientConnection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is not None and not connection.closed:
                return connection
            connection = ClientConnection(address, self._closed_connection, self._max_frame,
                                          self._token, self._request_again,
                                          self._tls_context)
            self._connections[address] = connection
            return connection

    def _request_again(self, channel: RemoteInputChannel) -> None:
        self.schedule(0.0, channel.request)

    def _closed_connection(self, connection: ClientConnection) -> None:
        with self._lock:
            if self._connections.get(connection.address) is connection:
                del self._connections[connection.address]

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` after ``delay`` seconds on the timer thread (request retries)."""
        if not self._closed:
            self._timers.schedule(delay, fn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
            self._connections.clear()
        self._timers.close()
        for connection in connections:
            connection.close()


class RemoteInputChannel:
    """Reads one remote subpartition. ``take`` runs on the task thread; ``on_buffers`` on the
    connection's reader thread."""

    finished = False

    def __init__(self, manager: ConnectionManager, address: str, partition_id: PartitionId,
                 subpartition: int, consumer: str, exclusive: int, pool: FloatingBufferPool,
                 initial_backoff: float, max_backoff: float, wakeup: Callable[[], None],
                 producer: str = "") -> None:
        self.receiver_id = next(_receiver_ids)
        #: The resource id of the producing TaskExecutor, whose advertised data address
        #: ``address`` is (named when it cannot be reached).
        self.producer = producer
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
        # The message being assembled by the reader thread (only it touches these).
        self._message: pa.Buffer | None = None
        self._message_view: memoryview | None = None
        self._filled = 0
        self._ready = 0  # complete messages in the queue
        self.largest_buffer = 0
        self.floating = 0
        self._unannounced = 0
        self._backlog = 0
        #: The schema of the messages arriving now (reader thread).
        self._wire_schema: pa.Schema | None = None
        #: Overtaken data still arriving after a priority event (reader thread).
        self._capture: OvertakenData | None = None
        self._capture_left = 0
        #: Credit granted over the channel's buffers (for overtaken in-flight data), paid
        #: back from the next buffers freed.
        self._overdraft = 0
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
            self._message = self._message_view = None
            connection.request(self, self._exclusive, wait_s=self._backoff)
        except OSError as err:
            cause = err.strerror or str(err) or type(err).__name__
            if err.errno is None and not isinstance(err, TimeoutError):
                # Connected, then turned away by the producer (its handshake): not a
                # question of its address.
                self._retry(f"the producer's TaskExecutor refused the connection: {cause}",
                            waited=False)
                return
            self._retry(f"TaskExecutor {self.producer or '(unknown)'} advertises the data "
                        f"address {self._address} (taskmanager.host), which cannot be "
                        f"reached from here: {cause}; set taskmanager.host to an address "
                        "other hosts can reach", waited=False)

    def _retry(self, why: str, waited: bool) -> None:
        """Request again after the back-off, doubling it; ``waited``: the producer already
        held the request that long (it does so for partitions it does not have yet)."""
        if self._backoff > self._max_backoff:
            self.fail(PartitionNotFoundError(
                f"partition {self.partition_id} is not available at {self._address} after "
                f"retrying with back-off ({why})", self.partition_id))
            return
        delay, self._backoff = self._backoff, self._backoff * 2
        self._manager.schedule(0.0 if waited else delay, self.request)

    def on_error(self, response: dataplane_pb2.ErrorResponse) -> None:
        if response.kind == dataplane_pb2.ErrorResponse.PARTITION_NOT_FOUND:
            self._retry(response.message, waited=True)
        else:
            self.fail(RemoteTransportError(response.message))

    # -- receiving (reader thread) ----------------------------------------------------------

    def on_buffers(self, arrivals: list[tuple[dataplane_pb2.BufferHeader,
                                              memoryview]]) -> None:
        """Buffers that arrived for this channel, in order (reader thread). Their views into
        the receive buffer are copied here, each data piece into its message."""
        items: list[Buffer | _Piece] = []
        backlog = None
        grant = 0
        for header, body in arrivals:
            self._sequence += 1
            if header.sequence_number != self._sequence:
                self.fail(RemoteTransportError(
                    f"buffer {header.sequence_number} of partition {self.partition_id} "
                    f"arrived when {self._sequence} was expected"))
                return
            kind = header.kind
            if kind == _Kind.DATA:
                piece = self._assemble(header, body)
                if piece.message is not None:
                    piece.schema = self._wire_schema
                items.append(piece)
                backlog = header.backlog
            elif kind == _Kind.SCHEMA:
                # Applies to the messages after it: each completed message keeps its own.
                self._wire_schema = pa.ipc.read_schema(pa.py_buffer(bytes(body)))
                items.append(_Piece(kind, len(body), None, schema=self._wire_schema))
            elif kind == _Kind.END_OF_PARTITION:
                items.append(Buffer(None, 0, end_of_partition=True))
            else:
                items.append(Buffer(None, 0, event=Event(header.event_type, bytes(body)),
                                    priority=header.priority,
                                    in_flight=header.overtaken_messages))
                grant += header.overtaken_buffers
        credit = surplus = freed = 0
        with self._lock:
            queue = self._queue
            if grant:
                # The overtaken batches the producer still has need buffers now, not once
                # the task has processed what is queued: grant them over the budget.
                self._overdraft += grant
                credit += grant
            for item in items:
                if isinstance(item, Buffer) and item.priority:
                    # Ahead of what arrived before it, which it overtook here: those
                    # messages, and the ones the producer had sent only partly, belong
                    # before it. They are captured now and as they arrive, so an unaligned
                    # checkpoint need not wait until the task has processed them.
                    position = _priority_position(queue)
                    queued = _messages(queue, position, len(queue))
                    in_flight = item.in_flight
                    if queued or in_flight:
                        item.overtaken = OvertakenData(len(queued) + in_flight,
                                                       [p.batch() for p in queued])
                        if in_flight:
                            self._capture, self._capture_left = item.overtaken, in_flight
                    queue.insert(position, item)
                    continue
                if isinstance(item, _Piece) and item.kind == _Kind.DATA:
                    self.bytes_in += item.size
                    self.buffers_in += item.buffers
                    if item.message is not None and self._capture is not None:
                        self._capture.add(item.batch())
                        self._capture_left -= 1
                        if not self._capture_left:
                            self._capture = None
                    if item.message is None and not self._ready:
                        # The piece is already copied into its message and no complete
                        # message waits for the task: its buffers are free at once, as
                        # Flink's deserializer frees the buffers of a spanning record.
                        returned = self._free_locked(item.buffers)
                        freed += returned
                        surplus += item.buffers - returned
                        continue
                    if item.message is not None:
                        self._ready += 1
                queue.append(item)
            if backlog is not None:
                self._backlog = backlog
                # Borrow floating buffers to cover the producer's backlog (Flink's rule).
                while self.floating < self._backlog and self._pool.try_acquire(self):
                    self.floating += 1
                    credit += 1
        if freed or surplus:
            self._recycle(freed, surplus)
        if credit:
            self._announce(credit)
        if queue:
            self._wakeup()

    def _free_locked(self, buffers: int) -> int:
        """Buffers became free: borrowed ones the backlog no longer needs go back to the
        pool (the caller releases them); returns how many of them become credit."""
        surplus = min(buffers, max(0, self.floating - self._backlog))
        self.floating -= surplus
        return buffers - surplus

    def _assemble(self, header: dataplane_pb2.BufferHeader, body: memoryview) -> _Piece:
        """Copy a data piece into its message (allocated, Arrow-aligned, by its first piece)."""
        message, view = self._message, self._message_view
        if message is None or view is None:  # both or neither
            message = self._message = pa.allocate_buffer(max(header.message_size, len(body)))
            view = self._message_view = memoryview(message).cast("B")
            self._filled = 0
        end = self._filled + len(body)
        if end > message.size:
            msg = (f"a piece of a record batch of partition {self.partition_id} overruns its "
                   f"message ({end} > {message.size} bytes)")
            raise ConnectionError(msg)
        view[self._filled:end] = body
        self._filled = end
        buffers = max(1, header.buffers)
        self.largest_buffer = max(self.largest_buffer,
                                  min(len(body), header.buffer_size or len(body)))
        if not header.message_end:
            return _Piece(_Kind.DATA, len(body), None, buffers)
        if end != message.size:
            message = message.slice(0, end)
        self._message = None
        self._message_view = None
        return _Piece(_Kind.DATA, len(body), message, buffers)

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
            return sum(b.size for b in self._queue if isinstance(b, _Piece))

    def fail(self, error: BaseException) -> None:
        if not self.closed and self.failure is None:
            self.failure = error
            self._wakeup()

    # -- consuming (task thread) ------------------------------------------------------------

    def take(self, max_size: int | None = None) -> Buffer | None:
        """The next batch, event or end of partition; None while nothing complete is there.
        With ``max_size``: the next batch only, if it is there and at most that large (None,
        taking nothing but the pieces before it, otherwise). Every piece taken frees its
        buffer; the credits are announced together."""
        credit = surplus = 0
        try:
            while True:
                with self._lock:
                    item = self._queue[0] if self._queue else None
                    if item is None:
                        if self.failure is not None and max_size is None:
                            raise self.failure
                        return None
                    if max_size is not None and (isinstance(item, Buffer) or (
                            item.message is not None and item.message.size > max_size)):
                        return None
                    self._queue.popleft()
                    if isinstance(item, _Piece) and item.kind == _Kind.DATA:
                        if item.message is not None:
                            self._ready -= 1
                        returned = self._free_locked(item.buffers)
                        credit += returned
                        surplus += item.buffers - returned
                if isinstance(item, Buffer):
                    if item.end_of_partition:
                        self.finished = True
                        self._release_connection(cancel=False)
                    return item
                if item.kind == _Kind.SCHEMA or item.message is None:
                    continue
                return Buffer([item.batch()], item.message.size)
        finally:
            # Also with nothing freed now: credit held back earlier is due once the queue
            # runs empty (the last item may be an event, which frees nothing).
            if credit or surplus or self._unannounced:
                self._recycle(credit, surplus)

    def _recycle(self, credit: int, surplus: int) -> None:
        """Buffers are free again: borrowed ones the backlog no longer needs go back to the
        pool, the others become credit for the producer. Credit is announced once half the
        channel's buffers are free, and always when the queue runs empty, so the producer is
        never left without credit while this channel waits — also when the credit held
        back was earned while more floating buffers made "half" larger."""
        for _ in range(surplus):
            self._pool.release()
        with self._lock:
            # Buffers granted over the budget for overtaken data are not given back.
            paid = min(credit, self._overdraft)
            self._overdraft -= paid
            self._unannounced += credit - paid
            if not self._unannounced:
                return
            if self._queue and \
                    self._unannounced < max(1, (self._exclusive + self.floating) // 2):
                return
            credit, self._unannounced = self._unannounced, 0
        self._announce(credit)

    def prioritize(self, event: Event) -> bool:
        """Move ``event``, queued here behind data, to the front (task thread); False if it
        is not here (still at the producer, or taken)."""
        with self._lock:
            queue = self._queue
            index = next((i for i, item in enumerate(queue) if isinstance(item, Buffer)
                          and not item.priority and item.event == event), None)
            if index is None:
                return False
            buffer = cast(Buffer, queue[index])  # what the search above found
            del queue[index]
            position = _priority_position(queue)
            buffer.priority = True
            passed = _messages(queue, position, index)
            if passed:
                buffer.overtaken = OvertakenData(len(passed), [p.batch() for p in passed])
            queue.insert(position, buffer)
        return True

    def has_priority_event(self) -> bool:
        with self._lock:
            return bool(self._queue) and getattr(self._queue[0], "priority", False)

    def queued(self) -> int:
        """Data buffers (pieces) waiting to be taken."""
        with self._lock:
            return sum(b.buffers for b in self._queue
                       if isinstance(b, _Piece) and b.kind == _Kind.DATA)

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


def _priority_position(queue: deque[Buffer | _Piece]) -> int:
    """Where a priority event goes: after the priority events already queued."""
    position = 0
    while position < len(queue) and getattr(queue[position], "priority", False):
        position += 1
    return position


def _messages(queue: deque[Buffer | _Piece], start: int, end: int) -> list[_Piece]:
    """The complete record-batch messages among ``queue[start:end]`` (each becomes one
    batch for the task; the pieces of a spanning batch count once, at its last piece)."""
    return [item for item in itertools.islice(queue, start, end)
            if isinstance(item, _Piece) and item.kind == _Kind.DATA
            and item.message is not None]
