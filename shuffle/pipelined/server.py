"""Producer side of the data plane: serves subpartitions to remote consumers, against credit.

One :class:`ServerConnection` per inbound TCP connection (one per consuming TaskExecutor)
multiplexes every subpartition that TaskExecutor requested. Its reader thread handles
requests and credit; its writer thread sends, round robin, one network buffer at a time
from each *available* view — one with credit and data, or with an event (events need no
credit), as Flink's PartitionRequestQueue does. Data buffers are Arrow IPC record-batch
messages of at most ``taskmanager.memory.segment-size`` bytes; a channel's schema is sent
once, before its first batch and whenever it changes.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections import deque

import pyarrow as pa

from weir.core.errors import PartitionNotFoundError
from weir.proto import dataplane_pb2
from weir.shuffle.pipelined import protocol
from weir.shuffle.pipelined.partition import (
    Buffer,
    PartitionManager,
    ProducerFailedError,
    Subpartition,
)

log = logging.getLogger(__name__)

_POLL_S = 0.2
_Kind = dataplane_pb2.BufferHeader


class _Frame:
    __slots__ = ("body", "buffer_size", "buffers", "event_type", "kind", "message_end",
                 "message_size", "overtaken", "overtaken_buffers", "priority")

    def __init__(self, kind: int, body: bytes | memoryview = b"", priority: bool = False,
                 event_type: str = "", overtaken: int = 0, overtaken_buffers: int = 0) -> None:
        self.kind = kind
        self.body = body
        self.priority = priority
        self.event_type = event_type
        self.overtaken = overtaken
        self.overtaken_buffers = overtaken_buffers
        self.message_end = False
        self.message_size = 0
        self.buffers = 0
        self.buffer_size = 0


class _Message:
    """A serialized record batch, cut into data buffers as credit allows."""

    __slots__ = ("data", "position")

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.position = 0

    def buffers(self, size: int) -> int:
        return -(-(len(self.data) - self.position) // size)


class SubpartitionView:
    """What the writer thread knows of one requested subpartition. Guarded by the
    connection's lock, except ``subpartition``, which has its own."""

    def __init__(self, receiver_id: int, subpartition: Subpartition, partition_id: str,
                 credit: int, segment_size: int) -> None:
        self.receiver_id = receiver_id
        self.subpartition = subpartition
        self.partition_id = partition_id
        self.credit = credit
        #: Largest data buffer: the segment size, or what the consumer's debloating chose.
        self.buffer_size = segment_size
        self._pending: deque[_Frame | _Message] = deque()
        self._schema: pa.Schema | None = None
        self.sequence = 0
        self.finished = False

    def backlog(self) -> int:
        size = self.buffer_size
        return sum(p.buffers(size) for p in self._pending if isinstance(p, _Message)) + \
            self.subpartition.backlog()

    def is_available(self) -> bool:
        """Something can be sent now: an event, or data with a credit for it."""
        if self.finished:
            return False
        if self.subpartition.has_priority_event():
            return True
        if self._pending:
            return self.credit > 0 or isinstance(self._pending[0], _Frame)
        head = self.subpartition.peek()
        if head is None:
            return self.subpartition.failure is not None
        return self.credit > 0 or head.elements is None

    def next_frame(self) -> _Frame | None:
        """The next frame to send, taking a credit per data buffer. Raises
        ProducerFailedError."""
        if self.subpartition.has_priority_event():
            buffer = self.subpartition.poll()
            assert buffer is not None
            # Messages already taken out of the subpartition were sent before the event:
            # the consumer must treat them as overtaken too, with what it has queued.
            pending = [p for p in self._pending if isinstance(p, _Message)]
            frame = self._event_frame(buffer, priority=True, overtaken=len(pending))
            frame.overtaken_buffers = sum(p.buffers(self.buffer_size) for p in pending)
            return frame
        if not self._pending:
            # Take a buffer out of the subpartition only when it can go out now: a buffer
            # waiting for credit must stay there, where a priority event can overtake it.
            head = self.subpartition.peek()
            if head is None:
                if self.subpartition.failure is not None:
                    self.subpartition.poll()  # raises ProducerFailedError
                return None
            if head.elements is not None and self.credit <= 0:
                return None
            buffer = self.subpartition.poll()
            if buffer is None:
                return None
            self._pending.extend(self._items(buffer))
        if not self._pending:
            return None
        head = self._pending[0]
        if isinstance(head, _Frame):
            return self._pending.popleft()
        if self.credit <= 0:
            return None
        # As many whole buffers of the message as there is credit for, in one frame.
        size = self.buffer_size
        count = min(self.credit, head.buffers(size), protocol.MAX_BUFFERS_PER_FRAME)
        start = head.position
        end = min(start + count * size, len(head.data))
        frame = _Frame(_Kind.DATA, head.data[start:end])
        frame.buffers, frame.buffer_size = count, size
        frame.message_size = len(head.data)
        head.position = end
        if end == len(head.data):
            frame.message_end = True
            self._pending.popleft()
        self.credit -= count
        return frame

    def _event_frame(self, buffer: Buffer, priority: bool = False,
                     overtaken: int = 0) -> _Frame:
        if buffer.end_of_partition:
            return _Frame(_Kind.END_OF_PARTITION)
        assert buffer.event is not None
        return _Frame(_Kind.EVENT, buffer.event.payload, priority, buffer.event.type,
                      overtaken)

    def _items(self, buffer: Buffer) -> list[_Frame | _Message]:
        if buffer.elements is None:
            return [self._event_frame(buffer)]
        items: list[_Frame | _Message] = []
        for elements in buffer.elements:
            batch = elements.wire_batch()
            if self._schema is None or not batch.schema.equals(self._schema,
                                                                check_metadata=True):
                self._schema = batch.schema
                items.append(_Frame(_Kind.SCHEMA, batch.schema.serialize()))
            # Serialize once and cut the bytes: a batch spans as many buffers as it needs,
            # and no buffer costs any Arrow work of its own (as Flink's spanning records).
            items.append(_Message(memoryview(batch.serialize())))
        return items


class ServerConnection:
    """One consuming TaskExecutor's connection: a reader and a writer thread."""

    def __init__(self, sock: socket.socket, partitions: PartitionManager,
                 segment_size: int) -> None:
        self._sock = sock
        self._partitions = partitions
        self._segment_size = segment_size
        self._views: dict[int, SubpartitionView] = {}
        self._held: dict[int, threading.Timer] = {}  # requests waiting for their partition
        self._available: deque[SubpartitionView] = deque()
        self._queued: set[int] = set()
        self._cond = threading.Condition()
        self._closed = threading.Event()
        name = f"data-server-{sock.getpeername()[1] if sock else 0}"
        self._reader = threading.Thread(target=self._read_loop, name=f"{name}-in", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"{name}-out",
                                        daemon=True)

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    # -- reader: requests and credit --------------------------------------------------------

    def _read_loop(self) -> None:
        reader = protocol.FrameReader(self._sock, 64 * 1024, protocol.MAX_CONTROL_FRAME)
        try:
            while not self._closed.is_set():
                frames = reader.read()
                if frames is None:
                    return
                for kind, payload in frames:
                    if kind == protocol.CLOSE:
                        return
                    self._on_control(kind, bytes(payload))
        except protocol.FrameTooLargeError as err:
            log.warning("refusing data connection from %s: %s", self._peer(), err)
            self._send_error(0, dataplane_pb2.ErrorResponse.PROTOCOL_ERROR, str(err))
        except (OSError, ConnectionError, ValueError) as err:
            log.debug("data connection ended: %s", err)
        finally:
            self.close()

    def _on_control(self, kind: int, payload: bytes) -> None:
        if kind == protocol.PARTITION_REQUEST:
            self._on_request(dataplane_pb2.PartitionRequest.FromString(payload))
        elif kind == protocol.ADD_CREDIT:
            message = dataplane_pb2.AddCredit.FromString(payload)
            with self._cond:
                view = self._views.get(message.receiver_id)
                if view is not None:
                    view.credit += message.credit
                    self._enqueue_locked(view)
        elif kind == protocol.NEW_BUFFER_SIZE:
            message = dataplane_pb2.NewBufferSize.FromString(payload)
            with self._cond:
                view = self._views.get(message.receiver_id)
                if view is not None and message.buffer_size > 0:
                    view.buffer_size = message.buffer_size
                    view.subpartition.flush_size = message.buffer_size
        elif kind == protocol.CANCEL_PARTITION:
            message = dataplane_pb2.CancelPartition.FromString(payload)
            self._drop(message.receiver_id)

    def _on_request(self, request: dataplane_pb2.PartitionRequest, held: bool = False) -> None:
        try:
            sub = self._partitions.subpartition(request.partition_id, request.subpartition)
        except PartitionNotFoundError as err:
            if not held and request.wait_ms and not self._closed.is_set():
                self._hold(request)
                return
            self._send_error(request.receiver_id,
                             dataplane_pb2.ErrorResponse.PARTITION_NOT_FOUND, str(err))
            return
        view = SubpartitionView(request.receiver_id, sub, request.partition_id,
                                request.initial_credit, self._segment_size)
        with self._cond:
            self._views[request.receiver_id] = view
        sub.subscribe(lambda: self._notify(view))

    def _hold(self, request: dataplane_pb2.PartitionRequest) -> None:
        """Answer a request for a partition not registered yet when it is, or after the
        consumer's ``wait_ms``, whichever comes first (the producer's task may still be
        deploying: answering at once would cost the consumer a whole back-off)."""
        def answer() -> None:
            with self._cond:
                timer = self._held.pop(request.receiver_id, None)
            if timer is None:
                return  # answered already
            timer.cancel()
            self._partitions.forget_waiter(request.partition_id, answer)
            if not self._closed.is_set():
                self._on_request(request, held=True)

        timer = threading.Timer(request.wait_ms / 1000, answer)
        timer.daemon = True
        with self._cond:
            self._held[request.receiver_id] = timer
        if self._partitions.when_registered(request.partition_id, answer):
            timer.start()
        else:
            answer()  # registered in the meantime

    def _notify(self, view: SubpartitionView) -> None:
        """Called by the producing task (or the reader) when a view may have become sendable."""
        with self._cond:
            self._enqueue_locked(view)

    def _enqueue_locked(self, view: SubpartitionView) -> None:
        if view.receiver_id not in self._queued and view.receiver_id in self._views and \
                view.is_available():
            self._queued.add(view.receiver_id)
            self._available.append(view)
            self._cond.notify()

    def _drop(self, receiver_id: int) -> None:
        with self._cond:
            view = self._views.pop(receiver_id, None)
        if view is not None:
            view.subpartition.subscribe(None)

    # -- writer: buffers against credit -----------------------------------------------------

    #: Frames of one channel gathered into one sendmsg (while it has credit for them).
    MAX_FRAMES_PER_SEND = 16

    def _write_loop(self) -> None:
        try:
            while not self._closed.is_set():
                with self._cond:
                    if not self._available:
                        self._cond.wait(_POLL_S)
                        continue
                    view = self._available.popleft()
                    self._queued.discard(view.receiver_id)
                    if view.receiver_id not in self._views:
                        continue
                    frames, failure = self._take_frames(view)
                if frames:
                    pieces: list[bytes] = []
                    for frame, header in frames:
                        pieces.extend(protocol.buffer_frame(header, frame.body))
                    protocol.send_all(self._sock, pieces)
                if failure is not None:
                    self._send_error(view.receiver_id,
                                     dataplane_pb2.ErrorResponse.PRODUCER_FAILED, str(failure))
                    continue
                if frames and frames[-1][0].kind == _Kind.END_OF_PARTITION:
                    view.finished = True
                    self._drop(view.receiver_id)
                    self._partitions.release_consumed(view.partition_id)
                    continue
                self._notify(view)
        except (OSError, ConnectionError) as err:
            log.debug("data connection ended while sending: %s", err)
        finally:
            self.close()

    def _take_frames(self, view: SubpartitionView) -> tuple[
            list[tuple[_Frame, dataplane_pb2.BufferHeader]], BaseException | None]:
        """Up to MAX_FRAMES_PER_SEND frames of ``view`` (called with the lock held)."""
        frames: list[tuple[_Frame, dataplane_pb2.BufferHeader]] = []
        try:
            while len(frames) < self.MAX_FRAMES_PER_SEND:
                frame = view.next_frame()
                if frame is None:
                    break
                view.sequence += 1
                frames.append((frame, dataplane_pb2.BufferHeader(
                    receiver_id=view.receiver_id, sequence_number=view.sequence,
                    backlog=view.backlog(), kind=frame.kind, priority=frame.priority,
                    event_type=frame.event_type, message_end=frame.message_end,
                    message_size=frame.message_size, buffers=frame.buffers,
                    buffer_size=frame.buffer_size, overtaken_messages=frame.overtaken,
                    overtaken_buffers=frame.overtaken_buffers)))
                if frame.kind == _Kind.END_OF_PARTITION:
                    break
        except ProducerFailedError as err:
            self._views.pop(view.receiver_id, None)
            return frames, err
        return frames, None

    def _peer(self) -> str:
        try:
            host, port = self._sock.getpeername()[:2]
        except OSError:
            return "a closed socket"
        return f"{host}:{port}"

    def _send_error(self, receiver_id: int, kind: int, message: str) -> None:
        error = dataplane_pb2.ErrorResponse(receiver_id=receiver_id, kind=kind, message=message)
        with contextlib.suppress(OSError):
            self._sock.sendall(protocol.frame(protocol.ERROR, error.SerializeToString()))

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._cond:
            views = list(self._views.values())
            self._views.clear()
            held, self._held = list(self._held.values()), {}
            self._cond.notify_all()
        for view in views:
            view.subpartition.subscribe(None)
        for timer in held:
            timer.cancel()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def join(self, timeout: float) -> None:
        for thread in (self._reader, self._writer):
            if thread is not threading.current_thread():
                thread.join(timeout)


class DataServer:
    """Accepts data connections from other TaskExecutors."""

    def __init__(self, host: str, port: int, partitions: PartitionManager,
                 segment_size: int) -> None:
        self._partitions = partitions
        self._segment_size = segment_size
        self._sock = socket.create_server((host, port), backlog=128)
        self._sock.settimeout(_POLL_S)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._closed = threading.Event()
        self._connections: list[ServerConnection] = []
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
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = ServerConnection(conn, self._partitions, self._segment_size)
            with self._lock:
                self._connections = [c for c in self._connections if not c._closed.is_set()]
                self._connections.append(connection)
            connection.start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._acceptor.join(timeout=5)
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.close()
        for connection in connections:
            connection.join(timeout=5)
