"""Pipelined result partitions: bounded queues of buffers, one per consumer subtask.

The producer's task thread appends; one consumer (a local input channel on the consumer's
task thread, or the data server's connection thread for a remote consumer) takes. A
subpartition holds at most ``capacity`` buffers; the producer checks ``is_available``
before processing more input, which is how a slow consumer holds its producer back.

Capacities count *segments* (``taskmanager.memory.segment-size`` bytes of records). A
buffer carries one segment of records, or a piece of a larger batch of up to
:data:`MAX_SEGMENTS_PER_BUFFER` segments, which counts as that many, or one record larger
than a segment alone, which counts as one. The writer cuts batches at record boundaries.
So a capacity is a capacity in bytes, and so is what an unaligned checkpoint can find
queued here (``taskexecutor/in_flight.py``). A batch travels whole where it can because
every buffer costs Python work on both sides (a queue entry and a wake-up, an Arrow IPC
message, its decoding, a call of the consumer's operators), whatever its size: cutting a
keyed exchange's batches into one-segment buffers cost 2.2x the CPU per GB of cutting
them into pieces of up to 8 segments (``benchmarks/bench_shuffle.py``). While a consumer
debloats (announces a smaller buffer size), buffers stay within that size, one each.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from weir.core.errors import PartitionNotFoundError, WeirError
from weir.core.ids import JobId, PartitionId
from weir.core.records import Elements
from weir.shuffle.api import Event, OvertakenData, ResultPartitionWriter

#: Segments one buffer of a batch may span (256 KiB at the default segment size): enough
#: to carry a source's batch for one consumer whole, few enough to keep the in-flight
#: bound (``taskexecutor/in_flight.py``) within a few times that of one-segment buffers.
MAX_SEGMENTS_PER_BUFFER = 8


@dataclass
class Buffer:
    """A unit of transfer: one or more batches, an in-band event, or end of partition."""

    elements: list[Elements] | None
    size: int
    end_of_partition: bool = False
    event: Event | None = None
    priority: bool = False
    #: A priority event: what it overtook on the consumer's side (see BufferOrEvent).
    overtaken: OvertakenData | None = None
    #: A priority event off the network: batches the producer had sent only in part, or
    #: not at all, when the event overtook its queue (they follow it, captured on arrival).
    in_flight: int = 0
    #: For a remote consumer: ``elements`` in their wire form, encoded by the producing
    #: task (encoding runs user code, e.g. pickling, whose errors are that task's).
    wire: list[pa.RecordBatch] | None = None
    #: Segments of the subpartition's capacity it takes (see the module docstring).
    units: int = 1


class ProducerFailedError(WeirError):
    """The producing task failed; its consumers must fail too."""


class Subpartition:
    """Buffers for one consumer, at most ``capacity`` segments of them (``Buffer.units``).
    Thread-safe; the only blocking call is ``poll(timeout)``."""

    def __init__(self, capacity: int) -> None:
        self._queue: deque[Buffer] = deque()
        self._capacity = capacity
        self._units = 0
        self._cond = threading.Condition()
        self._consumer_listener: Callable[[], None] | None = None
        self.producer_listener: Callable[[], None] | None = None
        #: A remote consumer reads this subpartition: the producer encodes what it adds.
        self.remote = False
        #: A buffer queued before the remote consumer came could not be encoded for it; the
        #: producing task raises this on its own thread.
        self.encoding_failure: BaseException | None = None
        self.failure: BaseException | None = None
        self.released = False
        self.consumed = False
        #: Flush threshold announced by a debloating consumer (None: the segment size).
        self.flush_size: int | None = None
        self.buffers_out = 0
        self.bytes_out = 0

    def add(self, buffer: Buffer) -> None:
        with self._cond:
            if self.released:
                return  # nobody will read it: the job ended or the consumer went away
            self._queue.append(buffer)
            self._units += buffer.units
            self.buffers_out += 1
            self.bytes_out += buffer.size
            self._cond.notify_all()
            listener = self._consumer_listener
        if listener is not None:
            listener()

    def add_priority(self, buffer: Buffer) -> list[Buffer]:
        """Put an event ahead of every queued buffer (after earlier priority events).

        Returns the data buffers it overtook: they are still delivered, after the event, and
        the caller may persist them (unaligned checkpoints store them as channel state).
        """
        buffer.priority = True
        with self._cond:
            if self.released:
                return []
            position = 0
            while position < len(self._queue) and self._queue[position].priority:
                position += 1
            overtaken = [b for b in list(self._queue)[position:] if b.elements is not None]
            self._queue.insert(position, buffer)
            self._units += buffer.units
            self._cond.notify_all()
            listener = self._consumer_listener
        if listener is not None:
            listener()
        return overtaken

    def prioritize(self, event: Event, consumer_persists: bool) -> list[Buffer] | None:
        """Move the queued (non-priority) ``event`` ahead of every data buffer queued before
        it; returns the data buffers it passed, or None if it is not queued (any more).
        ``consumer_persists``: the consumer, not the caller, persists what it passed, so
        the event carries it (``overtaken``)."""
        with self._cond:
            index = next((i for i, b in enumerate(self._queue)
                          if not b.priority and b.event == event), None)
            if index is None:
                return None
            buffer = self._queue[index]
            del self._queue[index]
            position = 0
            while position < index and self._queue[position].priority:
                position += 1
            passed = [b for b in list(self._queue)[position:index] if b.elements is not None]
            buffer.priority = True
            if consumer_persists and passed:
                batches = [e for b in passed for e in b.elements or ()]
                buffer.overtaken = OvertakenData(len(batches), batches)
            self._queue.insert(position, buffer)
            self._cond.notify_all()
            listener = self._consumer_listener
        if listener is not None:
            listener()
        return passed

    def contains_event(self, event: Event) -> bool:
        with self._cond:
            return any(b.event == event for b in self._queue)

    def peek(self) -> Buffer | None:
        with self._cond:
            return self._queue[0] if self._queue else None

    def has_priority_event(self) -> bool:
        with self._cond:
            return bool(self._queue) and self._queue[0].priority

    def fail(self, cause: BaseException) -> None:
        with self._cond:
            self.failure = cause
            self._cond.notify_all()
            listener = self._consumer_listener
        if listener is not None:
            listener()

    def release(self) -> None:
        with self._cond:
            self.released = True
            self._queue.clear()
            self._units = 0
            self._cond.notify_all()
            listener = self._consumer_listener
        if listener is not None:
            listener()  # a consumer still attached hears it is no longer served

    def is_writable(self) -> bool:
        return self._units < self._capacity or self.released

    def backlog(self) -> int:
        """Segments queued (what the consumer needs buffers for)."""
        return self._units

    def _taken(self, buffer: Buffer) -> bool:
        """Account for ``buffer`` leaving the queue (lock held); whether that made room."""
        full = self._units >= self._capacity
        self._units -= buffer.units
        return full and self._units < self._capacity

    def subscribe(self, listener: Callable[[], None] | None, remote: bool = False) -> bool:
        """Attach the consumer; ``listener`` is called whenever a buffer or failure arrives
        (None detaches it). False, attaching nothing, when another consumer is attached:
        a subpartition has one reader, and a second one must not silently replace it."""
        with self._cond:
            if listener is not None and self._consumer_listener is not None:
                return False
            self._consumer_listener = listener
            self.remote = remote and listener is not None
            notify = listener is not None and bool(self._queue or self.failure is not None
                                                   or self.released)
        if notify:
            listener()  # type: ignore[misc]
        return True

    def fail_encoding(self, cause: BaseException) -> None:
        """The remote consumer's connection could not encode a buffer: the producing task
        fails with ``cause`` (on its own thread, at its next emit or availability check)."""
        with self._cond:
            if self.encoding_failure is None:
                self.encoding_failure = cause
        if self.producer_listener is not None:
            self.producer_listener()

    def poll_data(self, max_size: int) -> Buffer | None:
        """The next buffer if it is data of at most ``max_size`` bytes, there now; None
        otherwise (nothing, an event, a failure: the next :meth:`poll` gives it)."""
        with self._cond:
            head = self._queue[0] if self._queue and not self.released else None
            if head is None or head.elements is None or head.size > max_size:
                return None
            self._queue.popleft()
            drained = self._taken(head)
        if drained and self.producer_listener is not None:
            self.producer_listener()
        return head

    def poll(self, timeout: float | None = None) -> Buffer | None:
        """The next buffer; None if there is none (after waiting up to ``timeout``)."""
        with self._cond:
            if not self._queue and self.failure is None and timeout:
                self._cond.wait(timeout)
            if self.failure is not None and not self._queue:
                msg = f"the producer failed: {self.failure}"
                raise ProducerFailedError(msg)
            if self.released and not self.consumed:
                msg = "the partition was released by its producer's TaskExecutor"
                raise ProducerFailedError(msg)
            if not self._queue:
                return None
            buffer = self._queue.popleft()
            drained = self._taken(buffer) and buffer.elements is not None
            if buffer.end_of_partition:
                self.consumed = True
        if drained and self.producer_listener is not None:
            self.producer_listener()
        return buffer


class PipelinedResultPartition(ResultPartitionWriter):
    """Writer side: buffers batches per subpartition until full or flushed."""

    def __init__(self, partition_id: PartitionId, job_id: JobId, num_subpartitions: int,
                 capacity: int, segment_size: int, wakeup: Callable[[], None]) -> None:
        self.partition_id = partition_id
        self.job_id = job_id
        self.num_subpartitions = num_subpartitions
        self.subpartitions = [Subpartition(capacity) for _ in range(num_subpartitions)]
        for sub in self.subpartitions:
            sub.producer_listener = wakeup
        self._segment_size = segment_size
        self._pending: list[list[Elements]] = [[] for _ in range(num_subpartitions)]
        self._pending_bytes = [0] * num_subpartitions
        self._pending_since: float | None = None
        self.finished = False

    def emit(self, subpartition: int, elements: Elements) -> None:
        """Add ``elements`` to the subpartition's pending buffer, handing over every buffer
        that fills up. A buffer holds at most the buffer size (the segment size, or the
        smaller one a debloating consumer announced) in estimated bytes, except that a
        batch larger than a segment travels in pieces of up to
        :data:`MAX_SEGMENTS_PER_BUFFER` segments, each a buffer of its own (not while
        debloating: then it is cut into buffers of the announced size). A smaller batch
        fills the pending buffer and begins the next. A record larger than a buffer
        travels alone. Order is kept."""
        n = len(elements)
        if not n:
            return
        sub = self.subpartitions[subpartition]
        limit = sub.flush_size or self._segment_size
        size = elements.estimated_bytes()
        per_record = size / n
        self.emitted_bytes += size
        if per_record > self.largest_record_bytes:
            self.largest_record_bytes = math.ceil(per_record)
        room = limit - self._pending_bytes[subpartition]
        if size <= room:
            pieces = [elements]
        elif size <= limit or sub.flush_size is not None or per_record > limit:
            pieces = elements.split_by_bytes(limit, first=room)
        else:
            # A batch larger than a segment: pieces of up to a span each go out alone (the
            # first one too, after what is pending); the last, if smaller than a segment,
            # stays pending.
            self._flush(subpartition)
            pieces = elements.split_by_bytes(MAX_SEGMENTS_PER_BUFFER * limit)
        for piece in pieces:
            piece_size = size if piece is elements else piece.estimated_bytes()
            pending = self._pending_bytes[subpartition]
            if pending and pending + piece_size > limit:
                self._flush(subpartition)
                pending = 0
            self._pending[subpartition].append(piece)
            self._pending_bytes[subpartition] = pending = pending + piece_size
            if self._pending_since is None:
                self._pending_since = time.monotonic()
            if pending + per_record > limit:  # full: no more record like these fits
                self._flush(subpartition)

    def _flush(self, index: int) -> None:
        pending = self._pending[index]
        if pending:
            if len(pending) > 1:
                # One batch a buffer: one message on the wire and one call downstream,
                # and its framing persisted once by an unaligned checkpoint.
                joined = Elements.concat(pending)
                if joined is not None:
                    pending = [joined]
            sub = self.subpartitions[index]
            size = self._pending_bytes[index]
            # Segments the buffer takes: one for a single record larger than a segment.
            records = sum(map(len, pending))
            unit = max(sub.flush_size or self._segment_size, size / max(1, records))
            buffer = Buffer(pending, size, units=max(1, math.ceil(size / unit)))
            if sub.remote:
                # Here, on the producing task's thread: the connection's writer thread is
                # shared by every job, and a record that cannot be encoded is this task's.
                buffer.wire = [e.wire_batch() for e in pending]
            sub.add(buffer)
            self._pending[index] = []
            self._pending_bytes[index] = 0
        if not any(self._pending):
            self._pending_since = None

    def flush_all(self) -> None:
        for index in range(self.num_subpartitions):
            self._flush(index)
        self._pending_since = None

    def oldest_pending_age(self) -> float | None:
        if self._pending_since is None:
            return None
        return time.monotonic() - self._pending_since

    def is_available(self) -> bool:
        """Whether every subpartition takes more; raises (on the task's thread) what a
        remote consumer's connection could not encode."""
        available = True
        for sub in self.subpartitions:
            if sub.encoding_failure is not None:
                raise sub.encoding_failure
            available = available and sub.is_writable()
        return available

    def broadcast_event(self, event: Event, priority: bool = False) -> list[list[Elements]]:
        """Send ``event`` to every consumer, in order after pending data, or — with
        ``priority`` — ahead of the buffers already queued. Returns, per subpartition, the
        batches a priority event overtook (empty lists otherwise)."""
        self.flush_all()
        overtaken: list[list[Elements]] = []
        for sub in self.subpartitions:
            buffer = Buffer(None, 0, event=event)
            if priority:
                overtaken.append([e for b in sub.add_priority(buffer) for e in b.elements or ()])
            else:
                sub.add(buffer)
                overtaken.append([])
        return overtaken

    def prioritize_event(self, event: Event) -> list[list[Elements]]:
        overtaken = []
        for sub in self.subpartitions:
            passed = sub.prioritize(event, consumer_persists=False) or []
            overtaken.append([e for b in passed for e in b.elements or ()])
        return overtaken

    def is_event_queued(self, event: Event) -> bool:
        return any(sub.contains_event(event) for sub in self.subpartitions)

    def finish(self) -> None:
        self.flush_all()
        for sub in self.subpartitions:
            sub.add(Buffer(None, 0, end_of_partition=True))
        self.finished = True

    def fail(self, cause: BaseException) -> None:
        for sub in self.subpartitions:
            sub.fail(cause)

    def release(self) -> None:
        for sub in self.subpartitions:
            sub.release()

    def metrics(self) -> dict[str, float]:
        queued = sum(s.backlog() for s in self.subpartitions)
        capacity = sum(s._capacity for s in self.subpartitions)
        return {
            "outPoolUsage": queued / capacity if capacity else 0.0,
            "buffersOut": float(sum(s.buffers_out for s in self.subpartitions)),
            "bytesOut": float(sum(s.bytes_out for s in self.subpartitions)),
        }


class PartitionManager:
    """The partitions a TaskExecutor serves, by id. Thread-safe."""

    def __init__(self) -> None:
        self._partitions: dict[PartitionId, PipelinedResultPartition] = {}
        self._waiters: dict[PartitionId, list[Callable[[], None]]] = {}
        self._lock = threading.Lock()

    def register(self, partition: PipelinedResultPartition) -> None:
        with self._lock:
            self._partitions[partition.partition_id] = partition
            waiters = self._waiters.pop(partition.partition_id, [])
        for waiter in waiters:
            waiter()

    def when_registered(self, partition_id: PartitionId, callback: Callable[[], None]) -> bool:
        """Call ``callback`` (on the registering thread) once ``partition_id`` is registered;
        False, without calling it, if it is registered already. A consumer that asked too
        early hears of the partition at once instead of at its next retry."""
        with self._lock:
            if partition_id in self._partitions:
                return False
            self._waiters.setdefault(partition_id, []).append(callback)
            return True

    def forget_waiter(self, partition_id: PartitionId, callback: Callable[[], None]) -> None:
        with self._lock:
            waiters = self._waiters.get(partition_id)
            if waiters and callback in waiters:
                waiters.remove(callback)
                if not waiters:
                    del self._waiters[partition_id]

    def subpartition(self, partition_id: PartitionId, index: int) -> Subpartition:
        with self._lock:
            partition = self._partitions.get(partition_id)
        if partition is None:
            msg = f"partition {partition_id} is not (or no longer) on this TaskExecutor"
            raise PartitionNotFoundError(msg)
        if not 0 <= index < partition.num_subpartitions:
            msg = f"partition {partition_id} has no subpartition {index}"
            raise PartitionNotFoundError(msg)
        return partition.subpartitions[index]

    def release(self, partition_id: PartitionId) -> None:
        with self._lock:
            partition = self._partitions.pop(partition_id, None)
        if partition is not None:
            partition.release()

    def release_job(self, job_id: JobId) -> None:
        with self._lock:
            ids = [pid for pid, p in self._partitions.items() if p.job_id == job_id]
        for pid in ids:
            self.release(pid)

    def release_consumed(self, partition_id: PartitionId) -> None:
        """Drop a partition once every subpartition delivered end-of-partition."""
        with self._lock:
            partition = self._partitions.get(partition_id)
            if partition is None or not all(s.consumed for s in partition.subpartitions):
                return
            del self._partitions[partition_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._partitions)
