"""Producer side of the data plane: serves subpartitions to remote consumers, against credit.

One :class:`ServerConnection` per inbound TCP connection (one per consuming TaskExecutor)
multiplexes every subpartition that TaskExecutor requested. It first authenticates the
peer (see ``protocol``); its reader thread then handles requests and credit; its writer
thread sends, round robin, one network buffer at a time
from each *available* view — one with credit and data, or with an event (events need no
credit), as Flink's PartitionRequestQueue does. Data buffers are Arrow IPC record-batch
messages of at most ``taskmanager.memory.segment-size`` bytes; a channel's schema is sent
once, before its first batch and whenever it changes.

Records are encoded for the wire by the producing task (a record that cannot be pickled
fails that task, not the connection other jobs share). What a peer can cost is bounded:
frames by the segment size, held requests by ``MAX_HOLD_MS`` and a count (one timer thread
per server, not one per request), connections per host and in all; idle and
unauthenticated connections are closed.

Connections that have not authenticated yet (TLS handshake included) live in a pool of
their own, small and time-limited, and never count against the limits of authenticated
ones: a peer without the token cannot lock a genuine TaskExecutor out by opening sockets
and leaving them idle (see ``protocol.MAX_PENDING``). Every cap stays below the process's
limit on open files, and running out of descriptors anyway only pauses accepting. Refusals
are logged at WARNING, at most one line per peer address per 10 s
(:class:`RateLimitedWarnings`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import select
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import TypeVar, cast

import pyarrow as pa
from google.protobuf.message import DecodeError, Message

from weir.core.addresses import join_host_port
from weir.core.errors import PartitionNotFoundError, WeirError
from weir.core.ids import PartitionId
from weir.core.timers import DelayedCall, TimerThread
from weir.proto import dataplane_pb2
from weir.shuffle.pipelined import protocol, tls
from weir.shuffle.pipelined.partition import (
    Buffer,
    PartitionManager,
    ProducerFailedError,
    Subpartition,
)

log = logging.getLogger(__name__)

_POLL_S = 0.2
_Kind = dataplane_pb2.BufferHeader
_Error = dataplane_pb2.ErrorResponse
_M = TypeVar("_M", bound=Message)

#: accept() failures that mean the process (or the host) ran out of something that frees
#: up again (descriptors, socket buffers, memory): the server waits, longer each time up
#: to the maximum, and accepts again.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_BACKOFF_S = (0.01, 1.0)
#: accept() failures that are about one connection that went away before it was accepted
#: (Linux reports its pending network errors there): the next one is accepted at once.
_CONNECTION_GONE = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.ENETDOWN,
                              errno.ENOPROTOOPT, errno.EHOSTDOWN, errno.ENONET,
                              errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH,
                              errno.EINTR, errno.EAGAIN})
#: A connection's own thread closes it at the handshake deadline; the server closes what is
#: still pending this much later, e.g. a TLS handshake fed one byte at a time (each read
#: has its own timeout, the handshake as a whole none).
_PENDING_GRACE_S = 1.0
#: A process without a limit on open files is treated as having this many.
_UNLIMITED_DESCRIPTORS = 1 << 20


class RateLimitedWarnings:
    """WARNING lines about peers, at most one per key (a peer's address) per ``interval_s``.

    The lines held back in a key's window are counted, and the next line about that key says
    how many there were; so does :meth:`flush` (called regularly by the data server's accept
    thread) once the window ended, so a flood that stops is still accounted for. At most
    ``max_keys`` keys are tracked at once; further ones share one window, so many source
    addresses cannot grow it. Thread-safe; ``clock`` gives monotonic seconds.

    Example:
        >>> now = [0.0]
        >>> warnings = RateLimitedWarnings(logging.getLogger("doc"), clock=lambda: now[0])
        >>> [warnings.warning("10.0.0.1", "refused %s", n) for n in range(3)]
        [True, False, False]
        >>> now[0] = 10.0
        >>> warnings.warning("10.0.0.1", "refused %s", 3)   # logs '... (2 more ...)'
        True
    """

    OTHERS = "other peers"

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 1024) -> None:
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._max_keys = max_keys
        #: key -> [start of its window, lines held back in it]
        self._windows: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless a line about ``key`` was logged less than the interval
        ago; True if it was logged."""
        with self._lock:
            now = self._clock()
            window = self._windows.get(key)
            if window is None and len(self._windows) >= self._max_keys:
                key = self.OTHERS
                window = self._windows.get(key)
            if window is not None and now - window[0] < self._interval:
                window[1] += 1
                return False
            held, since = (int(window[1]), now - window[0]) if window else (0, 0.0)
            self._windows[key] = [now, 0]
        if held:
            self._log.warning(msg + " (%d more about %s in the last %.0f s were not logged)",
                              *args, held, key, since)
        else:
            self._log.warning(msg, *args)
        return True

    def flush(self) -> None:
        """Forget the windows that ended, logging how many lines each held back."""
        with self._lock:
            now = self._clock()
            ended = [(key, window) for key, window in self._windows.items()
                     if now - window[0] >= self._interval]
            for key, _ in ended:
                del self._windows[key]
        for key, (started, held) in ended:
            if held:
                self._log.warning("%d more warnings about %s in the last %.0f s were not "
                                  "logged", int(held), key, now - started)


def descriptor_limit() -> int:
    """How many files this process may have open: the soft RLIMIT_NOFILE, raised first to
    the hard limit where that is allowed (a default soft limit of 1024 is easily reached by
    a TaskExecutor with many connections, RocksDB files and gRPC channels)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return _UNLIMITED_DESCRIPTORS
    if soft == resource.RLIM_INFINITY:
        return _UNLIMITED_DESCRIPTORS
    target = _UNLIMITED_DESCRIPTORS if hard == resource.RLIM_INFINITY else hard
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as err:
            log.debug("cannot raise the open files limit from %d to %d: %s", soft, target,
                      err)
    return int(soft)


class ProtocolError(WeirError):
    """The peer broke the protocol (or failed to authenticate): refused and disconnected.
    ``kind``: the ErrorResponse kind the peer is told before the connection closes."""

    def __init__(self, kind: int, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Frame:
    __slots__ = ("body", "buffer_size", "buffers", "event_type", "kind", "message_end",
                 "message_size", "overtaken", "overtaken_buffers", "priority")

    def __init__(self, kind: dataplane_pb2.BufferHeader.Kind, body: bytes | memoryview = b"",
                 priority: bool = False,
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

    def __init__(self, receiver_id: int, subpartition: Subpartition, partition_id: PartitionId,
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
            return self.subpartition.failure is not None or self.subpartition.released
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
            queued = self.subpartition.peek()
            if queued is None:
                if self.subpartition.failure is not None or self.subpartition.released:
                    self.subpartition.poll()  # raises ProducerFailedError
                return None
            if queued.elements is not None and self.credit <= 0:
                return None
            buffer = self.subpartition.poll()
            if buffer is None:
                return None
            self._pending.extend(self._items(buffer))
        if not self._pending:
            return None
        head = self._pending[0]
        if isinstance(head, _Frame):
            self._pending.popleft()
            return head
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
        if buffer.wire is not None:
            batches = buffer.wire
        else:
            # Queued before this consumer subscribed, so not encoded by the producer yet.
            try:
                batches = [e.wire_batch() for e in buffer.elements]
            except Exception as err:
                self.subpartition.fail_encoding(err)
                msg = f"the producer cannot encode a record: {type(err).__name__}: {err}"
                raise ProducerFailedError(msg) from err
        for batch in batches:
            if self._schema is None or not batch.schema.equals(self._schema,
                                                                check_metadata=True):
                self._schema = batch.schema
                items.append(_Frame(_Kind.SCHEMA, batch.schema.serialize()))
            # Serialize once and cut the bytes: a batch spans as many buffers as it needs,
            # and no buffer costs any Arrow work of its own (as Flink's spanning records).
            items.append(_Message(memoryview(batch.serialize())))
        return items


class ServerConnection:
    """One consuming TaskExecutor's connection: a reader and a writer thread.

    ``token``: the cluster token the peer must prove it holds (None: anyone is accepted).
    ``tls_context``: TLS first, with a certificate from the cluster's CA (None: plain TCP).
    ``timers``: the server's timer thread (held requests). ``on_closed`` is called once,
    from whichever thread closes the connection. ``on_authenticated`` is called (reader
    thread) once the peer proved it holds the token, before anything it asked is served;
    it returns why the connection is refused (it is then closed), or None. The peer must
    authenticate within ``protocol.UNAUTHENTICATED_TIMEOUT_S`` of the connection's creation.
    ``warnings``: where refusals are logged (the server shares one among its connections).
    """

    def __init__(self, sock: socket.socket, partitions: PartitionManager,
                 segment_size: int, token: str | None = None,
                 timers: TimerThread | None = None,
                 on_closed: Callable[[ServerConnection], None] | None = None,
                 tls_context: ssl.SSLContext | None = None, *,
                 on_authenticated: Callable[[ServerConnection], str | None] | None = None,
                 warnings: RateLimitedWarnings | None = None) -> None:
        self._sock: socket.socket | tls.TlsSocket = sock
        #: The TLS socket while its handshake runs: close() must be able to wake it.
        self._handshaking: ssl.SSLSocket | None = None
        self._tls_context = tls_context
        self._partitions = partitions
        self._segment_size = segment_size
        self._token = token
        self._own_timers = timers is None
        self._timers = timers or TimerThread("data-server-timers")
        self._on_closed = on_closed
        self._on_authenticated = on_authenticated
        self._warnings = warnings or RateLimitedWarnings(log)
        #: When it was accepted: its handshake deadline counts from here.
        self.accepted_at = time.monotonic()
        self.peer = _address(sock)
        #: The peer's address without its port: what the per-host limits count.
        self.host = self.peer.rpartition(":")[0] or self.peer
        self._views: dict[int, SubpartitionView] = {}
        # Requests waiting for their partition: the timer and the registration callback.
        self._held: dict[int, tuple[DelayedCall, Callable[[], None], PartitionId]] = {}
        self._available: deque[SubpartitionView] = deque()
        self._queued: set[int] = set()
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._last_active = time.monotonic()
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self.authenticated = False
        name = f"data-server-{self.peer.rpartition(':')[2]}"
        self._reader = threading.Thread(target=self._read_loop, name=f"{name}-in", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"{name}-out",
                                        daemon=True)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def start(self) -> None:
        """Start the reader thread; raises RuntimeError when no thread can be started."""
        self._reader.start()

    def _warn(self, msg: str, *args: object) -> None:
        self._warnings.warning(self.host, msg, *args)

    # -- reader: handshake, requests and credit ---------------------------------------------

    def _read_loop(self) -> None:
        # One deadline for everything before authentication, TLS included.
        deadline = self.accepted_at + protocol.UNAUTHENTICATED_TIMEOUT_S
        if self._tls_context is not None and not self._start_tls(self._tls_context, deadline):
            return
        reader = protocol.FrameReader(self._sock, 64 * 1024, protocol.MAX_CONTROL_FRAME)
        try:
            pipelined = self._handshake(reader, deadline)
            if pipelined is None:
                return
            refusal = self._on_authenticated(self) if self._on_authenticated else None
            if refusal is not None:
                if not self._closed.is_set():
                    self._warn("refusing data connection from %s: %s", self.peer, refusal)
                    self._send_error(0, _Error.PROTOCOL_ERROR, refusal)
                return
            # Requests sent right behind the answer are served once the peer is admitted.
            for kind, message in pipelined:
                self._on_control(kind, message)
            self._writer.start()
            while not self._closed.is_set():
                if not self._wait_readable(_POLL_S * 5):
                    if self._idle_for() > protocol.IDLE_TIMEOUT_S:
                        self._send_error(0, _Error.CONNECTION_IDLE, "the connection was idle")
                        return
                    continue
                frames = reader.read()
                if frames is None:
                    return
                for kind, payload in frames:
                    if kind == protocol.CLOSE:
                        return
                    self._on_control(kind, bytes(payload))
        except (protocol.CorruptFrameError, ProtocolError) as err:
            kind = getattr(err, "kind", _Error.PROTOCOL_ERROR)
            self._warn("refusing data connection from %s: %s", self.peer, err)
            self._send_error(0, kind, str(err))
        except (OSError, ConnectionError, ValueError) as err:
            log.debug("data connection from %s ended: %s", self.peer, err)
        finally:
            self.close()

    def _start_tls(self, context: ssl.SSLContext, deadline: float) -> bool:
        """The server side of the TLS handshake (as ``tls.accept``), done here so that the
        data server can abort it from another thread: it closes connections that did not
        authenticate in time, or to make room for new ones."""
        raw = self._sock
        assert isinstance(raw, socket.socket)
        # Wrapping takes over the plain socket's descriptor; under the lock, so that
        # close() either closes the plain socket before or wakes the TLS one after.
        with self._cond:
            try:
                if self._closed.is_set():
                    return False
                raw.settimeout(max(0.01, deadline - time.monotonic()))
                wrapped = context.wrap_socket(raw, server_side=True,
                                              do_handshake_on_connect=False)
            except (OSError, ValueError) as err:
                failure: BaseException | None = err
            else:
                failure = None
                self._handshaking = wrapped
        if failure is not None:
            self._tls_failed(failure)
            return False
        try:
            wrapped.do_handshake()
        except (OSError, ValueError) as err:
            with self._cond:
                self._handshaking = None
            wrapped.close()  # this thread's socket: closed by no other
            self._tls_failed(err)
            return False
        with self._cond:
            self._handshaking = None
            self._sock = tls.TlsSocket(wrapped)
            closed = self._closed.is_set()
        if closed:  # close() ran before the socket was in place
            wrapped.close()
            return False
        self._sock.settimeout(None)
        return True

    def _tls_failed(self, err: BaseException) -> None:
        if not self._closed.is_set():
            self._warn("refusing data connection from %s: TLS handshake failed: %s",
                       self.peer, err)
        self.close()

    def _handshake(self, reader: protocol.FrameReader, deadline: float
                   ) -> list[tuple[int, bytes]] | None:
        """Challenge the peer; once it proved it holds the token, the frames it sent right
        behind its answer; None when the connection was closed first. Raises ProtocolError
        for a wrong answer, anything but an answer, or none by ``deadline``."""
        nonce = os.urandom(32)
        self._sock.sendall(protocol.frame(
            protocol.CHALLENGE, dataplane_pb2.Challenge(nonce=nonce).SerializeToString()))
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._wait_readable(left):
                if self._closed.is_set():
                    return None
                raise ProtocolError(_Error.NOT_AUTHENTICATED,
                                    "no handshake within "
                                    f"{protocol.UNAUTHENTICATED_TIMEOUT_S:.0f} s")
            frames = reader.read()
            if frames is None:
                return None
            if frames:
                break
        kind, payload = frames[0]
        if kind != protocol.HELLO:
            raise ProtocolError(_Error.NOT_AUTHENTICATED,
                                f"frame type {kind} before the handshake")
        hello = _parse(dataplane_pb2.Hello, payload)
        if not protocol.verify_hello(self._token, nonce, hello.mac):
            raise ProtocolError(_Error.NOT_AUTHENTICATED,
                                "the data connection did not prove it holds the cluster's "
                                "security.auth.token (both TaskExecutors need the same token)")
        self.authenticated = True
        # Copied: the views are valid only until the reader's next receive.
        return [(kind, bytes(payload)) for kind, payload in frames[1:]]

    def _wait_readable(self, timeout: float) -> bool:
        if isinstance(self._sock, tls.TlsSocket) and self._sock.pending():
            return True  # decrypted already: the socket itself has nothing to report
        try:
            return bool(self._poller.poll(timeout * 1000))
        except (OSError, ValueError):  # closed meanwhile
            return not self._closed.is_set()

    def _idle_for(self) -> float:
        with self._cond:
            if self._views or self._held:
                self._last_active = time.monotonic()
            return time.monotonic() - self._last_active

    def _on_control(self, kind: int, payload: bytes) -> None:
        if kind == protocol.PARTITION_REQUEST:
            self._on_request(_parse(dataplane_pb2.PartitionRequest, payload))
        elif kind == protocol.ADD_CREDIT:
            credit = _parse(dataplane_pb2.AddCredit, payload)
            with self._cond:
                view = self._views.get(credit.receiver_id)
                if view is not None:
                    view.credit += credit.credit
                    self._enqueue_locked(view)
        elif kind == protocol.NEW_BUFFER_SIZE:
            resize = _parse(dataplane_pb2.NewBufferSize, payload)
            with self._cond:
                view = self._views.get(resize.receiver_id)
                if view is not None and resize.buffer_size > 0:
                    view.buffer_size = resize.buffer_size
                    view.subpartition.flush_size = resize.buffer_size
        elif kind == protocol.CANCEL_PARTITION:
            cancel = _parse(dataplane_pb2.CancelPartition, payload)
            self._drop(cancel.receiver_id)
        else:
            raise ProtocolError(_Error.PROTOCOL_ERROR, f"unexpected frame type {kind}")

    def _on_request(self, request: dataplane_pb2.PartitionRequest, held: bool = False) -> None:
        partition_id = PartitionId(request.partition_id)
        with self._cond:
            taken = request.receiver_id in self._views or (
                not held and request.receiver_id in self._held)
        if taken:
            self._send_error(request.receiver_id, _Error.ALREADY_SUBSCRIBED,
                             f"receiver {request.receiver_id} is in use on this connection")
            return
        try:
            sub = self._partitions.subpartition(partition_id, request.subpartition)
        except PartitionNotFoundError as err:
            if not held and request.wait_ms and not self._closed.is_set() and self._hold(
                    request):
                return
            self._send_error(request.receiver_id, _Error.PARTITION_NOT_FOUND, str(err))
            return
        view = SubpartitionView(request.receiver_id, sub, partition_id,
                                request.initial_credit, self._segment_size)
        with self._cond:
            self._views[request.receiver_id] = view
        if not sub.subscribe(lambda: self._notify(view), remote=True):
            with self._cond:
                self._views.pop(request.receiver_id, None)
            self._warn("data connection from %s asked for subpartition %d of partition %s, "
                       "which another consumer reads: refused", self.peer,
                       request.subpartition, request.partition_id)
            self._send_error(request.receiver_id, _Error.ALREADY_SUBSCRIBED,
                             f"subpartition {request.subpartition} of partition "
                             f"{request.partition_id} is read by another consumer")

    def _hold(self, request: dataplane_pb2.PartitionRequest) -> bool:
        """Answer a request for a partition not registered yet when it is, or after the
        consumer's ``wait_ms`` (at most MAX_HOLD_MS), whichever comes first (the producer's
        task may still be deploying: answering at once would cost the consumer a whole
        back-off). False when this connection holds too many requests already."""
        receiver_id = request.receiver_id
        partition_id = PartitionId(request.partition_id)

        def answer() -> None:
            with self._cond:
                entry = self._held.pop(receiver_id, None)
            if entry is None:
                return  # answered already
            entry[0].cancel()
            self._partitions.forget_waiter(partition_id, answer)
            if not self._closed.is_set():
                self._on_request(request, held=True)

        wait_s = min(request.wait_ms, protocol.MAX_HOLD_MS) / 1000
        with self._cond:
            if len(self._held) >= protocol.MAX_HELD_PER_CONNECTION:
                return False
            timer = self._timers.schedule(wait_s, answer)
            self._held[receiver_id] = (timer, answer, partition_id)
        if not self._partitions.when_registered(partition_id, answer):
            answer()  # registered in the meantime
        return True

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
            self._last_active = time.monotonic()
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
                    pieces: list[bytes | memoryview] = []
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

    def _send_error(self, receiver_id: int, kind: int, message: str) -> None:
        # ``kind`` is an ErrorResponse.Kind, as ProtocolError carries it: a plain int.
        error = _Error(receiver_id=receiver_id, kind=cast("_Error.Kind", kind), message=message)
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
        for timer, answer, partition_id in held:
            timer.cancel()
            self._partitions.forget_waiter(partition_id, answer)
        with self._cond:
            sock, handshaking = self._sock, self._handshaking
        if handshaking is not None:
            # Wakes the reader inside the TLS handshake, which then closes the socket
            # itself: closing a descriptor another thread is reading could hit a new one.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(handshaking, socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
        if self._own_timers:
            self._timers.close()
        if self._on_closed is not None:
            self._on_closed(self)

    def join(self, timeout: float) -> None:
        for thread in (self._reader, self._writer):
            if thread is not threading.current_thread() and thread.ident is not None:
                thread.join(timeout)


def _family(host: str) -> socket.AddressFamily:
    """The socket family that binds ``host``: IPv6 for an IPv6 address (``::`` among
    them), else IPv4 (a host name binds the IPv4 address it resolves to)."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _address(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "a closed socket"
    return f"{host}:{port}"


def _parse(message_type: type[_M], payload: bytes | memoryview) -> _M:
    try:
        return message_type.FromString(bytes(payload))
    except DecodeError as err:
        raise ProtocolError(_Error.PROTOCOL_ERROR,
                            f"malformed {message_type.__name__} message") from err


class DataServer:
    """Accepts data connections from other TaskExecutors.

    ``token``: the cluster token every connection must prove it holds (None: none needed);
    ``tls_context``: a server context, for TLS on every connection (None: plain TCP).

    A new connection waits for its handshake in the pending pool (``limits.pending`` in
    all, ``limits.pending_per_peer`` per host; when full, the oldest connection of the
    host holding the most is closed), and is closed if it has not authenticated within
    ``protocol.UNAUTHENTICATED_TIMEOUT_S``. Once authenticated it counts against
    ``limits.connections`` and ``limits.per_peer`` (refused over them). ``limits`` derive
    from the process's open files limit, raised to its hard limit first.

    ``healthy`` is False, with ``unhealthy_reason``, once the accept thread died: the
    TaskExecutor reports it to the JobMaster.
    """

    def __init__(self, host: str, port: int, partitions: PartitionManager,
                 segment_size: int, token: str | None = None,
                 tls_context: ssl.SSLContext | None = None) -> None:
        self._partitions = partitions
        self._tls_context = tls_context
        self._segment_size = segment_size
        self._token = token
        descriptors = descriptor_limit()
        self.limits = protocol.connection_limits(descriptors)
        if self.limits.connections < protocol.MAX_CONNECTIONS:
            log.info("the data server admits %d connections (%d waiting for their "
                     "handshake): the process may open %d files", self.limits.connections,
                     self.limits.pending, descriptors)
        self._sock = socket.create_server((host, port), backlog=128,
                                          family=_family(host))
        self._sock.settimeout(_POLL_S)
        #: The bound port, and the bound address (a wildcard binds every interface: the
        #: environment advertises its own host with this port).
        self.port: int = self._sock.getsockname()[1]
        self.address = join_host_port(host, self.port)
        self._closed = threading.Event()
        #: Authenticated connections, and how many of them each host has.
        self._connections: set[ServerConnection] = set()
        self._per_host: Counter[str] = Counter()
        #: Connections waiting for their handshake, per host, oldest first.
        self._pending: dict[str, deque[ServerConnection]] = {}
        self._lock = threading.Lock()
        self._timers = TimerThread("data-server-timers")
        self._warnings = RateLimitedWarnings(log)
        self._failure: str | None = None
        self._acceptor = threading.Thread(target=self._accept_loop, name="data-server",
                                          daemon=True)

    def start(self) -> None:
        self._acceptor.start()

    @property
    def connections(self) -> int:
        """Open data connections, authenticated or still in their handshake."""
        with self._lock:
            return len(self._connections) + sum(map(len, self._pending.values()))

    @property
    def pending(self) -> int:
        """Connections that have not authenticated yet."""
        with self._lock:
            return sum(map(len, self._pending.values()))

    @property
    def unhealthy_reason(self) -> str | None:
        """Why this server can no longer accept connections, or None while it can."""
        if self._failure is not None:
            return self._failure
        if self._acceptor.ident is not None and not self._acceptor.is_alive() and \
                not self._closed.is_set():
            return "the data server's accept thread ended"
        return None

    @property
    def healthy(self) -> bool:
        return self.unhealthy_reason is None

    # -- accepting --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        backoff = _ACCEPT_BACKOFF_S[0]
        try:
            while not self._closed.is_set():
                self._close_expired()
                self._warnings.flush()
                try:
                    conn, address = self._sock.accept()
                except TimeoutError:
                    continue
                except OSError as err:
                    if self._closed.is_set():
                        return
                    if err.errno in _OUT_OF_RESOURCES:
                        # The connection stays queued in the kernel: accepting it later,
                        # once descriptors were freed, serves it.
                        self._warnings.warning(
                            "accept", "the data server at %s cannot accept connections "
                            "(%s); trying again in %.0f ms", self.address,
                            os.strerror(err.errno or 0), backoff * 1000)
                        self._closed.wait(backoff)
                        backoff = min(2 * backoff, _ACCEPT_BACKOFF_S[1])
                        continue
                    if err.errno in _CONNECTION_GONE:
                        continue
                    raise
                backoff = _ACCEPT_BACKOFF_S[0]
                self._add(conn, str(address[0]))
        except Exception as err:
            if not self._closed.is_set():
                self._fail(f"the data server's accept thread failed: "
                           f"{type(err).__name__}: {err}")

    def _fail(self, reason: str) -> None:
        """The server cannot accept connections any more: say so, and close the listening
        socket, so that consumers are refused at once instead of waiting for a handshake."""
        self._failure = reason
        log.error("%s; the data server at %s accepts no more connections", reason,
                  self.address)
        with contextlib.suppress(OSError):
            self._sock.close()

    def _add(self, conn: socket.socket, host: str) -> None:
        """Put a new connection into the pending pool (making room in it) and start it."""
        try:
            conn.settimeout(None)
            protocol.configure_socket(conn)
        except OSError as err:   # the peer reset it already
            log.debug("data connection from %s ended before its handshake: %s", host, err)
            conn.close()
            return
        connection = ServerConnection(
            conn, self._partitions, self._segment_size, self._token, self._timers,
            self._forget, self._tls_context, on_authenticated=self._admit,
            warnings=self._warnings)
        with self._lock:
            evicted = self._make_room(connection.host)
            self._pending.setdefault(connection.host, deque()).append(connection)
        if evicted is not None:
            self._warnings.warning(
                evicted.host, "closing data connection from %s before its handshake: too "
                "many connections are waiting for theirs (%d from %s, %d in all)",
                evicted.peer, self.limits.pending_per_peer, evicted.host, self.limits.pending)
            evicted.close()
        try:
            connection.start()
        except RuntimeError as err:   # no thread can be started now: as out of descriptors
            self._warnings.warning("accept", "cannot serve data connection from %s: %s",
                                   connection.peer, err)
            connection.close()

    def _make_room(self, host: str) -> ServerConnection | None:
        """The pending connection to close for one more from ``host`` (lock held): its own
        oldest when it has its share already, else when the pool is full the oldest of the
        host holding the most (a host with one pending connection keeps it; one flooding
        the pool only churns its own). None when there is room."""
        queue = self._pending.get(host)
        if queue is not None and len(queue) >= self.limits.pending_per_peer:
            victim = queue
        elif sum(map(len, self._pending.values())) >= self.limits.pending:
            victim = max(self._pending.values(), key=lambda q: (len(q), -q[0].accepted_at))
        else:
            return None
        evicted = victim.popleft()
        if not victim:
            del self._pending[evicted.host]
        return evicted

    def _close_expired(self) -> None:
        """Close pending connections past their handshake deadline that their own thread
        did not close (see _PENDING_GRACE_S)."""
        oldest = time.monotonic() - protocol.UNAUTHENTICATED_TIMEOUT_S - _PENDING_GRACE_S
        with self._lock:
            expired = [c for queue in self._pending.values() for c in queue
                       if c.accepted_at < oldest]
        for connection in expired:
            self._warnings.warning(
                connection.host, "closing data connection from %s: no handshake within "
                "%.0f s", connection.peer, protocol.UNAUTHENTICATED_TIMEOUT_S)
            connection.close()

    def _admit(self, connection: ServerConnection) -> str | None:
        """``connection`` authenticated (its reader thread): it leaves the pending pool and
        counts against the limits; returns why it is refused, or None."""
        host = connection.host
        with self._lock:
            queue = self._pending.get(host)
            if queue is None or connection not in queue:
                return "the connection was closed before its handshake completed"
            queue.remove(connection)
            if not queue:
                del self._pending[host]
            full = (f"{self._per_host[host]} connections from {host} already"
                    if self._per_host[host] >= self.limits.per_peer else
                    f"{len(self._connections)} connections already"
                    if len(self._connections) >= self.limits.connections else None)
            if full is None:
                self._connections.add(connection)
                self._per_host[host] += 1
        return None if full is None else f"too many data connections ({full})"

    def _forget(self, connection: ServerConnection) -> None:
        host = connection.host
        with self._lock:
            queue = self._pending.get(host)
            if queue is not None and connection in queue:
                queue.remove(connection)
                if not queue:
                    del self._pending[host]
            elif connection in self._connections:
                self._connections.discard(connection)
                self._per_host[host] -= 1
                if self._per_host[host] <= 0:
                    del self._per_host[host]

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._acceptor.join(timeout=5)
        with self._lock:
            connections = [*self._connections,
                           *(c for queue in self._pending.values() for c in queue)]
        for connection in connections:
            connection.close()
        for connection in connections:
            connection.join(timeout=5)
        self._timers.close()
