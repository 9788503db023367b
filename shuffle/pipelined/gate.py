"""Input gates of the pipelined shuffle: local channels read the producer's subpartition
directly (no serialisation); remote channels read what a network thread fetched."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from weir.core.errors import PartitionNotFoundError, RemoteTransportError
from weir.core.ids import PartitionId
from weir.core.records import Elements
from weir.shuffle.api import BufferOrEvent, Event, InputGate, poll_round_robin
from weir.shuffle.pipelined.client import FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.debloat import BufferDebloater
from weir.shuffle.pipelined.partition import (
    Buffer,
    PartitionManager,
    ProducerFailedError,
    Subpartition,
)


class InputChannel(ABC):
    """A source of buffers for an input gate; RemoteInputChannel has the same shape."""

    finished = False
    bytes_in = 0

    @abstractmethod
    def request(self) -> None: ...

    @abstractmethod
    def take(self, max_size: int | None = None) -> Buffer | None:
        """The next buffer; with ``max_size``, only a data buffer of at most that size."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def prioritize(self, event: Event) -> bool: ...

    @abstractmethod
    def has_priority_event(self) -> bool: ...


class LocalInputChannel(InputChannel):
    """Reads a subpartition of a producer on the same TaskExecutor."""

    def __init__(self, partitions: PartitionManager, partition_id: PartitionId, index: int,
                 listener: object, initial_backoff: float, max_backoff: float) -> None:
        self._partitions = partitions
        self._partition_id = partition_id
        self._index = index
        self._listener = listener
        self._sub: Subpartition | None = None
        self._backoff = initial_backoff
        self._max_backoff = max_backoff
        self._next_try = 0.0

    def request(self) -> None:
        self._try_subscribe()

    def _try_subscribe(self) -> bool:
        if self._sub is not None:
            return True
        now = time.monotonic()
        if now < self._next_try:
            return False
        try:
            sub = self._partitions.subpartition(self._partition_id, self._index)
        except PartitionNotFoundError:
            if self._backoff > self._max_backoff:
                raise
            self._next_try = now + self._backoff
            self._backoff *= 2
            # Retry as soon as the producer registers it, not only after the back-off.
            self._partitions.when_registered(self._partition_id, self._registered)
            return False
        sub.subscribe(self._listener)  # type: ignore[arg-type]
        self._sub = sub
        return True

    def _registered(self) -> None:
        """The producer's partition appeared (on the deploying thread): retry now."""
        self._next_try = 0.0
        self._listener()  # type: ignore[operator]

    def retry_due(self) -> float | None:
        return None if self._sub is not None else self._next_try

    def take(self, max_size: int | None = None) -> Buffer | None:
        if not self._try_subscribe():
            return None
        assert self._sub is not None
        try:
            buffer = self._sub.poll() if max_size is None else self._sub.poll_data(max_size)
        except ProducerFailedError as err:
            msg = f"producer of partition {self._partition_id} failed: {err}"
            raise RemoteTransportError(msg) from err
        if buffer is not None:
            self.bytes_in += buffer.size
            if buffer.end_of_partition:
                self._partitions.release_consumed(self._partition_id)
        return buffer

    def prioritize(self, event: Event) -> bool:
        # The queue is the producer's subpartition: this consumer persists what the event
        # passes (unless the producer already moved it and kept the passed buffers).
        return self._sub is not None and \
            self._sub.prioritize(event, consumer_persists=True) is not None

    def has_priority_event(self) -> bool:
        return self._sub is not None and self._sub.has_priority_event()

    def close(self) -> None:
        self._partitions.forget_waiter(self._partition_id, self._registered)
        if self._sub is not None:
            self._sub.subscribe(None)


class PipelinedInputGate(InputGate):
    """Round-robin over channels that have data; finished when all sent end-of-partition."""

    def __init__(self, channels: Sequence[InputChannel | RemoteInputChannel],
                 pool: FloatingBufferPool | None = None, exclusive_per_channel: int = 0,
                 debloater: BufferDebloater | None = None,
                 batch_bytes: int | None = None) -> None:
        """``batch_bytes`` (the segment size): data buffers of one channel that are there
        already are handed to the task together, as one batch of up to that many bytes.
        Buffers smaller than a segment (debloated, or flushed early) then cost the task
        and its operators one call, not one each; the task still holds at most a segment
        of taken data, as with one full buffer."""
        self.channels = channels
        self._batch_bytes = batch_bytes
        self._pool = pool
        self._exclusive = exclusive_per_channel
        self.debloater = debloater
        self._remote = [c for c in channels if isinstance(c, RemoteInputChannel)]
        self._next = 0
        self._finished_count = 0
        self._blocked: set[int] = set()
        self.buffers_in = 0

    def request_partitions(self) -> None:
        for channel in self.channels:
            channel.request()

    def set_batch_bytes(self, limit: int) -> None:
        self._batch_bytes = limit

    def block_consumption(self, channel: int) -> None:
        self._blocked.add(channel)

    def resume_consumption(self, channel: int) -> None:
        self._blocked.discard(channel)

    def prioritize_event(self, event: Event) -> None:
        for channel in self.channels:
            if not channel.finished:
                channel.prioritize(event)

    def poll_next(self) -> BufferOrEvent | None:
        taken = self._poll_priority() or poll_round_robin(self.channels, self._next,
                                                          self._blocked)
        if taken is None:
            return None
        index, buffer = taken
        self._next = (index + 1) % len(self.channels)
        return self._delivered(index, buffer)

    def poll_priority(self) -> BufferOrEvent | None:
        taken = self._poll_priority()
        return None if taken is None else self._delivered(*taken)

    def _delivered(self, index: int, buffer: Buffer) -> BufferOrEvent:
        """What taking ``buffer`` from channel ``index`` delivers."""
        self.buffers_in += 1
        if buffer.end_of_partition:
            self.channels[index].finished = True
            self._finished_count += 1
            return BufferOrEvent(index, end_of_partition=True)
        if buffer.event is not None:
            return BufferOrEvent(index, event=buffer.event, priority=buffer.priority,
                                 overtaken=buffer.overtaken)
        elements, size = buffer.elements, buffer.size
        room = 0 if self._batch_bytes is None else self._batch_bytes - size
        if room > 0 and elements is not None:
            channel = self.channels[index]
            while room > 0 and (more := channel.take(room)) is not None:
                if elements is buffer.elements:
                    elements = list(elements)
                elements.extend(more.elements or ())
                size += more.size
                room -= more.size
                self.buffers_in += 1
            if elements is not buffer.elements:
                joined = Elements.concat(elements)
                if joined is not None:
                    elements = [joined]
        if self.debloater is not None:
            self.debloater.on_consumed(size)
        return BufferOrEvent(index, elements=elements, size=size)

    def _poll_priority(self) -> tuple[int, Buffer] | None:
        """A priority event at the head of any channel, blocked or not."""
        for index, channel in enumerate(self.channels):
            if not channel.finished and channel.has_priority_event():
                buffer = channel.take()
                if buffer is not None:
                    return index, buffer
        return None

    def maintain(self) -> None:
        """Revise the debloated buffer size once per period and tell the producers."""
        debloater = self.debloater
        if debloater is None or not debloater.due():
            return
        size = debloater.tick()
        if size is not None:
            for channel in self._remote:
                channel.announce_buffer_size(size)

    def next_retry(self) -> float | None:
        """When a local channel next retries its request (the task sleeps until then)."""
        due = [c.retry_due() for c in self.channels if isinstance(c, LocalInputChannel)]
        pending = [d for d in due if d is not None]
        return min(pending) if pending else None

    def is_finished(self) -> bool:
        return self._finished_count == len(self.channels)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()

    def metrics(self) -> dict[str, float]:
        remote = [c for c in self.channels if isinstance(c, RemoteInputChannel)]
        total = len(remote) * self._exclusive + (self._pool.size if self._pool else 0)
        used = sum(c.queued() for c in remote)
        queued = sum(c.queued_bytes() for c in remote)
        debloat = {}
        if self.debloater is not None:
            debloat = {"debloatedBufferSize": float(self.debloater.buffer_size),
                       "estimatedTimeToConsumeBuffersMs":
                           self.debloater.estimated_time_to_consume_ms(queued)}
        return {**debloat, "inputQueueBytes": float(queued),
                "bytesIn": float(sum(c.bytes_in for c in self.channels)),
                "buffersIn": float(self.buffers_in),
                "buffersInRemote": float(sum(c.buffers_in for c in remote)),
                "inPoolUsage": used / total if total else 0.0}
