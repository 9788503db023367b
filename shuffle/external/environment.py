"""TaskExecutor side of the external shuffle: writers stream to the service, gates read back.

A :class:`ExternalResultPartitionWriter` buffers emitted batches per subpartition; a full
buffer (``taskmanager.memory.segment-size``), ``flush_all`` or ``finish`` moves it to a
bounded send queue, drained by one client-streaming ``WritePartition`` call: gRPC's request
thread encodes each buffer as an Arrow IPC stream and sends it. ``finish`` sends the commit
and blocks until the service acknowledges it (the partition is then durable and readable).

A :class:`ExternalInputGate` has one :class:`ExternalInputChannel` per producer; each
channel's thread (``shuffle-read <partition>/<subpartition>``) reads its subpartition with
``ReadSubpartition`` calls of at most ``fetch_bytes`` each, into a queue it refills only once
less than ``fetch_bytes`` is left (backpressure without holding a service thread), and
wakes the task. A partition not committed yet is asked for again with back-off
(``taskmanager.network.request-backoff.*``); while the service says it is being written
the channel waits without limit, polling at most every 0.5 s.

Batch partitions carry no events: ``broadcast_event`` is a no-op (checkpoint barriers and
watermarks do not exist in BATCH execution).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pyarrow as pa

from weir.core import options
from weir.core.errors import PartitionNotFoundError, RemoteTransportError, WeirError
from weir.core.ids import JobId, PartitionId
from weir.core.records import Elements
from weir.core.rpc import create_channel, keep_until_done
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles
from weir.proto import jobgraph_pb2, shuffle_service_pb2_grpc
from weir.proto import shuffle_service_pb2 as pb
from weir.shuffle import options as shuffle_options
from weir.shuffle.api import (
    BufferOrEvent,
    Event,
    InputGate,
    ResultPartitionWriter,
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    TaskShuffleContext,
    poll_round_robin,
)
from weir.shuffle.external.service import (
    IN_PROGRESS,
    PARTITION_STATE_KEY,
)
from weir.shuffle.external.service import (
    MAX_MESSAGE_BYTES as SERVICE_MAX_MESSAGE_BYTES,
)

log = logging.getLogger(__name__)

#: Default time ``finish`` waits for the service to acknowledge a commit.
COMMIT_TIMEOUT_S = 60.0
#: Deadline of one ReadSubpartition call (it sends at most ``fetch_bytes``).
READ_CALL_TIMEOUT_S = 60.0
#: Deadline of a ReleasePartitions call.
RELEASE_TIMEOUT_S = 30.0
#: Longest pause between asking for a partition its producer is still writing.
IN_PROGRESS_POLL_MAX_S = 0.5
#: Smallest fetch of an input channel (a read call has a fixed cost).
MIN_FETCH_BYTES = 256 * 1024
#: Largest chunk (one gRPC message): bigger buffers are sent in several chunks.
MAX_CHUNK_BYTES = 8 * 1024 * 1024

_COMMIT = object()
_OPEN, _COMMITTING, _COMMITTED, _ABORTED = "open", "committing", "committed", "aborted"


def _slices(batch: pa.RecordBatch, max_bytes: int) -> list[pa.RecordBatch]:
    """``batch`` in zero-copy slices of about ``max_bytes`` at most (a row is not split)."""
    if batch.num_rows <= 1 or batch.nbytes <= max_bytes:
        return [batch]
    rows = max(1, int(batch.num_rows * max_bytes / batch.nbytes))
    return [batch.slice(i, rows) for i in range(0, batch.num_rows, rows)]


def encode_chunks(elements: list[Elements],
                  max_chunk_bytes: int = MAX_CHUNK_BYTES) -> list[bytes]:
    """Batches as chunks, each an Arrow IPC stream of batches with one schema.

    A new chunk starts when the schema changes or the current one holds ``max_chunk_bytes``
    (large batches are sliced): messages stay far below gRPC's size limit.
    """
    chunks: list[bytes] = []
    sink: Any = None
    writer: Any = None
    schema: pa.Schema | None = None
    size = 0
    for item in elements:
        if len(item) == 0:
            continue
        for batch in _slices(item.wire_batch(), max_chunk_bytes):
            if writer is None or size >= max_chunk_bytes or \
                    not batch.schema.equals(schema, check_metadata=True):
                if writer is not None:
                    writer.close()
                    chunks.append(sink.getvalue().to_pybytes())
                sink = pa.BufferOutputStream()
                schema = batch.schema
                writer = pa.ipc.new_stream(sink, schema)
                size = 0
            writer.write_batch(batch)
            size += batch.nbytes
    if writer is not None:
        writer.close()
        chunks.append(sink.getvalue().to_pybytes())
    return chunks


def decode_chunk(chunk: bytes) -> list[Elements]:
    """The batches of one chunk (zero-copy over ``chunk``); raises pyarrow.ArrowInvalid."""
    with pa.ipc.open_stream(pa.py_buffer(chunk)) as reader:
        return [Elements.from_wire(batch) for batch in reader]


def _rpc_status(err: BaseException | None) -> str:
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        return f"{err.code().name}: {err.details()}"
    return f"{type(err).__name__}: {err}"


class ExternalResultPartitionWriter(ResultPartitionWriter):
    """Streams one result partition to the shuffle service and commits it on ``finish``.

    Threads: the task thread calls every method; ``fail``/``release`` may also come from
    another thread (the TaskExecutor releasing a job). gRPC's request thread runs
    :meth:`_requests`, which encodes and sends queued buffers and wakes the task when the
    queue drops below ``queue_bytes``; the call's done callback runs on a gRPC thread.

    Memory: pending buffers (< ``chunk_bytes`` per subpartition) plus the send queue, which
    ``is_available`` keeps under ``queue_bytes``; ``flush_all`` and ``finish`` may overshoot
    it by one buffer per subpartition.

    Errors (raised by ``emit``/``flush_all``/``finish``): RemoteTransportError when the
    call failed or the commit was not acknowledged within ``commit_timeout``; an encoding
    error (e.g. records not matching a declared type) is raised as itself.
    """

    def __init__(self, stub: shuffle_service_pb2_grpc.ShuffleServiceStub, service_address: str,
                 job_id: JobId, partition_id: PartitionId, num_subpartitions: int, chunk_bytes: int,
                 queue_bytes: int, wakeup: Callable[[], None],
                 commit_timeout: float = COMMIT_TIMEOUT_S,
                 on_closed: Callable[[ExternalResultPartitionWriter], None] | None = None
                 ) -> None:
        self.job_id = job_id
        self.partition_id = partition_id
        self.num_subpartitions = num_subpartitions
        self.service_address = service_address
        self._stub = stub
        self._chunk_bytes = chunk_bytes
        self._queue_bytes = queue_bytes
        self._wakeup = wakeup
        self._commit_timeout = commit_timeout
        self._on_closed = on_closed
        self._pending: list[list[Elements]] = [[] for _ in range(num_subpartitions)]
        self._pending_bytes = [0] * num_subpartitions
        self._pending_since: float | None = None
        self._cond = threading.Condition()
        self._queue: deque[Any] = deque()
        self._queued = 0
        self._state = _OPEN
        self._error: BaseException | None = None
        self._stream_ended = False
        self._chunks_sent = 0
        self._bytes_sent = 0
        # Opened now, not at the first buffer: the service then knows the partition is
        # being written, and consumers asking for it wait instead of giving up.
        self._future = stub.WritePartition.future(self._requests())
        self._future.add_done_callback(self._on_call_done)

    def _request(self, **fields: Any) -> pb.WritePartitionRequest:
        return pb.WritePartitionRequest(job_id=self.job_id, partition_id=self.partition_id,
                                        num_subpartitions=self.num_subpartitions, **fields)

    def _requests(self) -> Iterator[pb.WritePartitionRequest]:
        """The call's messages; runs on gRPC's request thread."""
        yield self._request()
        while True:
            with self._cond:
                while not self._queue and self._state != _ABORTED and not self._stream_ended:
                    self._cond.wait()
                if self._state == _ABORTED or self._stream_ended:
                    return
                item = self._queue[0]
            if item is _COMMIT:
                yield self._request(commit=True, total_chunks=self._chunks_sent,
                                    total_bytes=self._bytes_sent)
                return
            subpartition, elements, size = item
            try:
                chunks = encode_chunks(elements)
            except Exception as err:  # user data that Arrow cannot encode: fail the task
                with self._cond:
                    self._error = err
                    self._cond.notify_all()
                self._wakeup()
                return  # ending the stream without a commit makes the service drop it
            for chunk in chunks:
                yield self._request(subpartition=subpartition, data=chunk)
                self._chunks_sent += 1
                self._bytes_sent += len(chunk)
            with self._cond:
                if self._state == _ABORTED:
                    return
                self._queue.popleft()
                was_full = self._queued >= self._queue_bytes
                self._queued -= size
                freed = was_full and self._queued < self._queue_bytes
            if freed:
                self._wakeup()

    def _on_call_done(
            self, future: grpc.Future[pb.WritePartitionResponse]) -> None:
        """Runs on a gRPC thread when the call ends, however it ends."""
        with self._cond:
            self._stream_ended = True
            if self._state == _OPEN and self._error is None:
                cause = "cancelled" if future.cancelled() else _rpc_status(future.exception())
                self._error = RemoteTransportError(
                    f"writing partition {self.partition_id} to the shuffle service at "
                    f"{self.service_address} failed: {cause}")
            self._cond.notify_all()
        self._wakeup()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def emit(self, subpartition: int, elements: Elements) -> None:
        self._check()
        if self._state != _OPEN:
            return  # aborted (the job is being released): the data is not wanted
        self._pending[subpartition].append(elements)
        size = elements.estimated_bytes()
        self.emitted_bytes += size
        self._pending_bytes[subpartition] += size
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        if self._pending_bytes[subpartition] >= self._chunk_bytes:
            self._enqueue(subpartition)

    def _enqueue(self, subpartition: int) -> None:
        pending = self._pending[subpartition]
        if pending:
            size = self._pending_bytes[subpartition]
            with self._cond:
                if self._state == _OPEN:
                    self._queue.append((subpartition, pending, size))
                    self._queued += size
                    self._cond.notify_all()
            self._pending[subpartition] = []
            self._pending_bytes[subpartition] = 0
        if not any(self._pending):
            self._pending_since = None

    def flush_all(self) -> None:
        self._check()
        for subpartition in range(self.num_subpartitions):
            self._enqueue(subpartition)
        self._pending_since = None

    def is_available(self) -> bool:
        with self._cond:
            # After a failure, report room: the task then calls emit, which raises.
            return self._queued < self._queue_bytes or self._error is not None or \
                self._state != _OPEN

    def oldest_pending_age(self) -> float | None:
        if self._pending_since is None:
            return None
        return time.monotonic() - self._pending_since

    def broadcast_event(self, event: Event, priority: bool = False) -> list[list[Elements]]:
        """No-op: blocking (batch) partitions carry no events; nothing is overtaken."""
        return [[] for _ in range(self.num_subpartitions)]

    def prioritize_event(self, event: Event) -> list[list[Elements]]:
        """No-op, as :meth:`broadcast_event`."""
        return [[] for _ in range(self.num_subpartitions)]

    def is_event_queued(self, event: Event) -> bool:
        return False

    def finish(self) -> None:
        """Send what is pending, commit, and wait for the service's acknowledgement.

        Blocks the task thread until every queued buffer was sent and the service made the
        partition durable, at most ``commit_timeout`` seconds (then the write is aborted).
        """
        self.flush_all()
        with self._cond:
            if self._state != _OPEN:
                msg = f"partition {self.partition_id} was released before it was finished"
                raise RemoteTransportError(msg)
            self._state = _COMMITTING
            self._queue.append(_COMMIT)
            self._cond.notify_all()
        try:
            response = self._future.result(timeout=self._commit_timeout)
        except grpc.FutureTimeoutError:
            self._abort()
            msg = (f"the shuffle service at {self.service_address} did not acknowledge the "
                   f"commit of partition {self.partition_id} within {self._commit_timeout:g} s")
            raise RemoteTransportError(msg) from None
        except (grpc.RpcError, grpc.FutureCancelledError) as err:
            self._abort()
            if self._error is not None:
                raise self._error from err
            msg = (f"committing partition {self.partition_id} to the shuffle service at "
                   f"{self.service_address} failed: {_rpc_status(err)}")
            raise RemoteTransportError(msg) from err
        with self._cond:
            self._state = _COMMITTED
        log.debug("partition %s committed: %d chunks, %d bytes, %d runs", self.partition_id,
                  response.chunks, response.bytes, response.runs)
        if self._on_closed is not None:
            self._on_closed(self)

    def _abort(self) -> bool:
        """Stop the write so that nothing is committed; False if it committed already."""
        with self._cond:
            if self._state == _COMMITTED:
                return False
            if self._state == _ABORTED:
                return True
            self._state = _ABORTED
            self._queue.clear()
            self._queued = 0
            self._cond.notify_all()
        # Cancelling makes the service delete what it received (it never sees a commit).
        self._future.cancel()
        if self._on_closed is not None:
            self._on_closed(self)
        return True

    def fail(self, cause: BaseException) -> None:
        """Abort: the service drops the partition. Any thread."""
        self._abort()

    def release(self) -> None:
        """Abort an unfinished write; a committed partition is released at the service
        (the task failed after committing: nobody will read it). Any thread; no waiting."""
        if self._abort():
            return
        future = self._stub.ReleasePartitions.future(
            pb.ReleasePartitionsRequest(job_id=self.job_id, partition_ids=[self.partition_id]),
            timeout=RELEASE_TIMEOUT_S)
        keep_until_done(future)

    @property
    def committed(self) -> bool:
        return self._state == _COMMITTED

    def metrics(self) -> dict[str, float]:
        return {"outPoolUsage": min(1.0, self._queued / self._queue_bytes),
                "buffersOut": float(self._chunks_sent), "bytesOut": float(self._bytes_sent)}


class _ClosedError(WeirError):
    """The channel was closed: its thread ends quietly."""


_END = object()


class ExternalInputChannel:
    """Reads one subpartition of one partition from the service on its own thread.

    The gate's task thread calls ``take``; ``close`` may come from any thread. The reader
    thread raises nothing: errors are stored and raised by ``take`` once the data that
    arrived before them was taken.
    """

    def __init__(self, stub: shuffle_service_pb2_grpc.ShuffleServiceStub,
                 descriptor: pb.ExternalShuffleDescriptor, subpartition: int,
                 fetch_bytes: int, initial_backoff: float, max_backoff: float,
                 wakeup: Callable[[], None]) -> None:
        self._stub = stub
        self.descriptor = descriptor
        self.subpartition = subpartition
        self._fetch_bytes = fetch_bytes
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._queue: deque[tuple[list[Elements], int]] = deque()
        self._queued = 0
        self._all_arrived = False
        self._error: BaseException | None = None
        self._call: Any = None
        self._closed = threading.Event()
        self._position = 0
        self.finished = False
        self.bytes_in = 0
        self.buffers_in = 0
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"shuffle-read {descriptor.partition_id}/{subpartition}")

    def _describe(self) -> str:
        d = self.descriptor
        return (f"subpartition {self.subpartition} of partition {d.partition_id} in the shuffle "
                f"service at {d.service_address}")

    def start(self) -> None:
        self._thread.start()

    def take(self) -> tuple[list[Elements], int] | object | None:
        """The next ``(batches, bytes)``, ``_END`` once, or None; raises the channel's error."""
        with self._lock:
            if self._queue:
                item = self._queue.popleft()
                self._queued -= item[1]
                if self._queued < self._fetch_bytes:
                    self._space.notify_all()
                return item
            if self._error is not None:
                raise self._error
            if self._all_arrived and not self.finished:
                self.finished = True
                return _END
            return None

    def queued_bytes(self) -> int:
        return self._queued

    def _run(self) -> None:
        try:
            self._read_all()
        except _ClosedError:
            return
        except Exception as err:  # anything unexpected fails the consumer, with its cause
            failure = RemoteTransportError(f"reading {self._describe()} failed: {err}")
            failure.__cause__ = err
            self._fail(failure)

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            self._error = error
        self._wakeup()

    def _pause(self, seconds: float) -> None:
        if self._closed.wait(seconds):
            raise _ClosedError

    def _read_all(self) -> None:
        backoff = self._initial_backoff
        poll = self._initial_backoff
        while True:
            with self._lock:
                # Refill only when less than one fetch is left: memory stays under about two.
                while self._queued >= self._fetch_bytes and not self._closed.is_set():
                    self._space.wait()
            try:
                if self._fetch():
                    return
                backoff = poll = self._initial_backoff
            except grpc.RpcError as err:
                if self._closed.is_set():
                    raise _ClosedError from None
                code = err.code()
                # grpc-stubs declare the metadata items as objects; they are (key, value) pairs.
                metadata = dict(err.trailing_metadata() or ())  # type: ignore[arg-type,var-annotated]
                if code == grpc.StatusCode.NOT_FOUND and self._position == 0:
                    if metadata.get(PARTITION_STATE_KEY) == IN_PROGRESS:
                        # Its producer is writing it: wait for the commit, however long.
                        self._pause(poll)
                        poll = min(poll * 2, IN_PROGRESS_POLL_MAX_S)
                        continue
                    if backoff > self._max_backoff:
                        error: Exception = PartitionNotFoundError(
                            f"{self._describe()} was not found: {err.details()}",
                            self.descriptor.partition_id)
                        error.__cause__ = err
                        self._fail(error)
                        return
                elif code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    if backoff > self._max_backoff:
                        error = RemoteTransportError(
                            f"cannot read {self._describe()}: {_rpc_status(err)}")
                        error.__cause__ = err
                        self._fail(error)
                        return
                else:
                    # Released while read (NOT_FOUND), corrupt files (DATA_LOSS): the
                    # partition cannot be served any more and must be produced again.
                    message = f"cannot read {self._describe()}: {_rpc_status(err)}"
                    error = PartitionNotFoundError(message, self.descriptor.partition_id) \
                        if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DATA_LOSS) \
                        else RemoteTransportError(message)
                    error.__cause__ = err
                    self._fail(error)
                    return
                self._pause(backoff)
                backoff *= 2

    def _fetch(self) -> bool:
        """One read call from the current position; True once everything arrived."""
        d = self.descriptor
        request = pb.ReadSubpartitionRequest(
            job_id=d.job_id, partition_id=d.partition_id, subpartition=self.subpartition,
            start_chunk=self._position, max_bytes=self._fetch_bytes)
        with self._lock:
            if self._closed.is_set():
                raise _ClosedError
            call = self._call = self._stub.ReadSubpartition(request, timeout=READ_CALL_TIMEOUT_S)
        try:
            progressed = False
            for response in call:
                elements = [e for chunk in response.chunks for e in decode_chunk(chunk)]
                size = sum(len(chunk) for chunk in response.chunks)
                with self._lock:
                    self._position += len(response.chunks)
                    if elements:
                        self._queue.append((elements, size))
                        self._queued += size
                    self.bytes_in += size
                    self.buffers_in += 1
                    self._all_arrived = response.end_of_subpartition
                self._wakeup()
                progressed = progressed or bool(response.chunks)
                if response.end_of_subpartition:
                    return True
            if not progressed:
                msg = "the service ended a read without data or end of subpartition"
                raise RemoteTransportError(msg)
            return False
        finally:
            with self._lock:
                self._call = None

    def close(self) -> None:
        """Stop reading (cancels a call in flight) and drop queued data. Any thread."""
        with self._lock:
            self._closed.set()
            self._queue.clear()
            self._queued = 0
            self._space.notify_all()
            call = self._call
        if call is not None:
            call.cancel()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)


class ExternalInputGate(InputGate):
    """Round robin over channels with data; finished once every channel delivered its end.

    The task thread calls every method; channel threads only wake it.
    """

    def __init__(self, channels: list[ExternalInputChannel]) -> None:
        self.channels = channels
        self._next = 0
        self._finished = 0
        self._requested = False
        self._blocked: set[int] = set()

    def request_partitions(self) -> None:
        if not self._requested:
            self._requested = True
            for channel in self.channels:
                channel.start()

    def block_consumption(self, channel: int) -> None:
        self._blocked.add(channel)

    def resume_consumption(self, channel: int) -> None:
        self._blocked.discard(channel)

    def prioritize_event(self, event: Event) -> None:
        """No-op: blocking partitions carry no events."""

    def poll_next(self) -> BufferOrEvent | None:
        taken = poll_round_robin(self.channels, self._next, self._blocked)
        if taken is None:
            return None
        index, item = taken
        self._next = (index + 1) % len(self.channels)
        if item is _END:
            self._finished += 1
            return BufferOrEvent(index, end_of_partition=True)
        elements, size = item
        return BufferOrEvent(index, elements=elements, size=size)

    def is_finished(self) -> bool:
        return self._finished == len(self.channels)

    def close(self) -> None:
        """Stop every channel thread (waits up to about 2 s in all)."""
        for channel in self.channels:
            channel.close()
        deadline = time.monotonic() + 2.0
        for channel in self.channels:
            channel.join(max(0.0, deadline - time.monotonic()))

    def metrics(self) -> dict[str, float]:
        return {"bytesIn": float(sum(c.bytes_in for c in self.channels)),
                "buffersIn": float(sum(c.buffers_in for c in self.channels)),
                "inputQueueBytes": float(sum(c.queued_bytes() for c in self.channels))}


class ExternalShuffleEnvironment(ShuffleEnvironment):
    """The TaskExecutor's side: creates writers to, and gates from, the shuffle service.

    Serves nothing itself (``start`` returns ``external:<service address>``). Methods may
    be called from several task threads at once. ``release_partitions_of_job`` aborts this
    TaskExecutor's unfinished writes of the job; committed partitions belong to the
    JobMaster's :class:`~shuffle.external.master.ExternalShuffleMaster`, which releases them.
    """

    def __init__(self, context: ShuffleEnvironmentContext, service_address: str,
                 commit_timeout: float = COMMIT_TIMEOUT_S) -> None:
        conf = context.configuration
        self._context = context
        self.service_address = service_address
        self._token = auth_token(conf)
        self._tls = TlsFiles.from_conf(conf)
        self._commit_timeout = commit_timeout
        segment = conf.get(options.SEGMENT_SIZE)
        self._chunk_bytes = segment
        self._queue_bytes = segment * conf.get(shuffle_options.SUBPARTITION_QUEUE)
        self._fetch_bytes = max(MIN_FETCH_BYTES,
                                segment * conf.get(shuffle_options.BUFFERS_PER_CHANNEL))
        self._backoff = (conf.get(shuffle_options.REQUEST_BACKOFF_INITIAL),
                         conf.get(shuffle_options.REQUEST_BACKOFF_MAX))
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel,
                                        shuffle_service_pb2_grpc.ShuffleServiceStub]] = {}
        self._writers: set[ExternalResultPartitionWriter] = set()
        self._closed = False

    def start(self) -> str:
        return f"external:{self.service_address}"

    def _stub(self, address: str) -> shuffle_service_pb2_grpc.ShuffleServiceStub:
        with self._lock:
            if self._closed:
                msg = "the shuffle environment is closed"
                raise RemoteTransportError(msg)
            entry = self._channels.get(address)
            if entry is None:
                # A chunk is cut at the segment size; the service accepts at most 64 MiB.
                channel = create_channel(address, self._token, tls=self._tls,
                                         max_send_bytes=SERVICE_MAX_MESSAGE_BYTES)
                entry = (channel, shuffle_service_pb2_grpc.ShuffleServiceStub(channel))
                self._channels[address] = entry
            return entry[1]

    def create_result_partition_writer(
            self, task: TaskShuffleContext,
            deployment: jobgraph_pb2.ResultPartitionDeployment) -> ResultPartitionWriter:
        writer = ExternalResultPartitionWriter(
            self._stub(self.service_address), self.service_address, task.job_id,
            PartitionId(deployment.partition_id), deployment.num_subpartitions, self._chunk_bytes,
            self._queue_bytes, task.wakeup, self._commit_timeout, self._writer_closed)
        with self._lock:
            self._writers.add(writer)
        return writer

    def _writer_closed(self, writer: ExternalResultPartitionWriter) -> None:
        with self._lock:
            self._writers.discard(writer)

    def create_input_gate(self, task: TaskShuffleContext,
                          deployment: jobgraph_pb2.InputGateDeployment) -> InputGate:
        channels = []
        for channel in deployment.channels:
            descriptor = pb.ExternalShuffleDescriptor.FromString(channel.shuffle_descriptor)
            channels.append(ExternalInputChannel(
                self._stub(descriptor.service_address), descriptor, channel.subpartition,
                self._fetch_bytes, *self._backoff, wakeup=task.wakeup))
        return ExternalInputGate(channels)

    def release_partitions_of_job(self, job_id: JobId) -> None:
        with self._lock:
            writers = [w for w in self._writers if w.job_id == job_id]
        for writer in writers:
            writer.release()

    def metrics(self) -> dict[str, Any]:
        with self._lock:
            return {"partitionsWriting": len(self._writers)}

    def close(self) -> None:
        """Abort unfinished writes and close the connections. Idempotent."""
        with self._lock:
            self._closed = True
            writers = list(self._writers)
            channels = [c for c, _ in self._channels.values()]
            self._channels.clear()
        for writer in writers:
            writer.release()
        for channel in channels:
            channel.close()
