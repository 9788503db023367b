"""FLIP-31 shuffle interfaces. Nothing outside ``shuffle/`` knows which implementation runs.

* The JobMaster holds one :class:`ShuffleMaster`: it registers each result partition with
  its producer and gets back an opaque, serialisable shuffle descriptor that consumers'
  deployment descriptors carry.
* Each TaskExecutor holds one :class:`ShuffleEnvironment`: it creates the
  :class:`ResultPartitionWriter` of each producing task and the :class:`InputGate` of each
  consuming task from their deployment descriptors.
* A :class:`ShuffleServiceFactory`, named by ``shuffle-service-factory.class``, creates both.

Threads: writers and gates are used by their task's mailbox thread only, except where a
method says otherwise; implementations wake that thread through the listeners it registers.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from typing import Any

from weir.core.config import Configuration
from weir.core.ids import ExecutionAttemptId, JobId, PartitionId, ResourceId
from weir.core.records import Elements
from weir.proto import jobgraph_pb2


@dataclass(frozen=True)
class ProducerDescriptor:
    """Where a producing task runs."""

    resource_id: ResourceId
    data_address: str


@dataclass(frozen=True)
class PartitionDescriptor:
    """A result partition as the JobMaster sees it."""

    job_id: JobId
    partition_id: PartitionId
    num_subpartitions: int
    producer_attempt_id: ExecutionAttemptId


class ShuffleMaster(ABC):
    """The JobMaster side of a shuffle service. Called on the JobMaster's main thread."""

    #: Whether a finished partition can be read again, by a consumer that restarts (Flink's
    #: reconsumable result partitions). When not, a restarted BATCH consumer's producers
    #: restart with it.
    reconsumable: bool = False

    @abstractmethod
    def register_partition_with_producer(self, partition: PartitionDescriptor,
                                         producer: ProducerDescriptor) -> bytes:
        """Register a partition before its producer is deployed; returns the serialised
        shuffle descriptor that consumers receive. Must not block."""

    @abstractmethod
    def release_partition_externally(self, descriptor: bytes) -> None:
        """The partition is no longer needed (consumed, or its job ended)."""

    @abstractmethod
    def is_partition_available(self, partition_id: PartitionId) -> bool:
        """False once the partition was released or its producer's TaskExecutor was lost."""

    def on_producer_lost(self, resource_id: ResourceId) -> list[PartitionId]:
        """A TaskExecutor was lost: returns the ids of the partitions lost with it."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook
        """The JobMaster shuts down."""


@dataclass
class ShuffleEnvironmentContext:
    """What a TaskExecutor tells its shuffle environment: ``host`` is the address its
    peers reach it at (advertised in the data address), ``bind_host`` what its data server
    binds (None: ``host``; a wildcard such as 0.0.0.0 binds every interface)."""

    configuration: Configuration
    resource_id: ResourceId
    host: str
    bind_host: str | None = None


@dataclass
class TaskShuffleContext:
    """The task a writer or gate belongs to."""

    job_id: JobId
    task_name: str
    attempt_id: ExecutionAttemptId
    #: Called (from any thread) when the task may make progress: data arrived, or output
    #: capacity freed up. Must only enqueue or set a flag.
    wakeup: Callable[[], None]


class ResultPartitionWriter(ABC):
    """Output of one producing subtask for one consumer vertex, split in subpartitions."""

    num_subpartitions: int
    #: Estimated bytes of every batch ``emit`` was given so far: the task sizes its chunks
    #: of input so that one chunk's output stays within a buffer or so.
    emitted_bytes: int = 0
    #: The largest record emitted so far (estimated by its batch's average): a buffer holds
    #: at most a segment or one such record (the in-flight bound of a checkpoint).
    largest_record_bytes: int = 0

    @abstractmethod
    def emit(self, subpartition: int, elements: Elements) -> None:
        """Append a batch to a subpartition's pending buffer (flushed when full)."""

    @abstractmethod
    def flush_all(self) -> None:
        """Hand every pending buffer to the consumers now."""

    @abstractmethod
    def is_available(self) -> bool:
        """True while every subpartition has room for another buffer (no backpressure)."""

    @abstractmethod
    def oldest_pending_age(self) -> float | None:
        """Seconds since the oldest unflushed batch was emitted, or None when nothing waits."""

    @abstractmethod
    def broadcast_event(self, event: Event, priority: bool = False) -> list[list[Elements]]:
        """Send ``event`` to every consumer after the data emitted so far or, with
        ``priority``, ahead of the buffers still queued; returns per subpartition the
        batches a priority event overtook (they are still delivered, after it)."""

    @abstractmethod
    def prioritize_event(self, event: Event) -> list[list[Elements]]:
        """Move ``event``, sent earlier without priority, ahead of the buffers queued before
        it in every subpartition where it still waits; returns per subpartition the batches
        it passed (empty where it had left already). An unaligned checkpoint persists them.
        """

    @abstractmethod
    def is_event_queued(self, event: Event) -> bool:
        """Whether ``event`` still waits in some subpartition (has not left to a consumer).
        Any thread."""

    @abstractmethod
    def finish(self) -> None:
        """End of data: flush and send end-of-partition on every subpartition."""

    @abstractmethod
    def fail(self, cause: BaseException) -> None:
        """The producer failed: consumers get an error instead of more data."""

    @abstractmethod
    def release(self) -> None:
        """Free the partition's memory and unregister it (the job ended or was cancelled)."""

    def metrics(self) -> dict[str, float]:
        return {}


@dataclass(frozen=True)
class Event:
    """An in-band event (watermark, checkpoint barrier, ...): it travels in order with the
    data of a channel, or ahead of it when sent with priority. Payloads are opaque here."""

    type: str
    payload: bytes = b""


class OvertakenData:
    """The batches a priority event overtook on the consumer's side: sent before it, they
    reach the consumer after it. The channel fills it — with what it had queued when the
    event arrived and, from its network thread, with the batches still in flight — and the
    task reads it once :attr:`complete`. Thread-safe.

    Example:
        >>> data = OvertakenData(expected=2, batches=["b1"])
        >>> data.complete
        False
        >>> data.add("b2"); data.complete, data.batches()
        (True, ['b1', 'b2'])
    """

    def __init__(self, expected: int, batches: Sequence[Any] = ()) -> None:
        self.expected = expected
        self._batches = list(batches)
        self._lock = threading.Lock()

    def add(self, elements: Any) -> None:
        with self._lock:
            self._batches.append(elements)

    @property
    def complete(self) -> bool:
        with self._lock:
            return len(self._batches) >= self.expected

    def batches(self) -> list[Any]:
        with self._lock:
            return list(self._batches)


@dataclass
class BufferOrEvent:
    """What an input gate yields: data (one or more batches), an event, or the end of a
    channel's data."""

    channel: int
    elements: list[Elements] | None = None
    end_of_partition: bool = False
    size: int = 0
    event: Event | None = None
    priority: bool = False
    #: A priority event: the batches it overtook on the consumer's side (None when there
    #: are none, or the producer kept what it overtook). They are still delivered, after it.
    overtaken: OvertakenData | None = None


def poll_round_robin(channels: Sequence[Any], start: int,
                     blocked: Set[int] = frozenset()) -> tuple[int, Any] | None:
    """Take from the first channel, from ``start`` on and wrapping around, that is neither
    finished nor ``blocked`` and has something (``channel.take()`` not None): returns
    (index, item).

    Shared by input gates so that no channel starves the others.
    """
    n = len(channels)
    for step in range(n):
        index = (start + step) % n
        channel = channels[index]
        if channel.finished or index in blocked:
            continue
        item = channel.take()
        if item is not None:
            return index, item
    return None


class InputGate(ABC):
    """Input of one consuming subtask from one producer vertex (one channel per producer)."""

    @abstractmethod
    def request_partitions(self) -> None:
        """Start fetching from every producer (retried with back-off until they exist)."""

    @abstractmethod
    def poll_next(self) -> BufferOrEvent | None:
        """The next buffer or event of any channel, or None if none is there now. A
        priority event comes first, even from a blocked channel; a blocked channel gives
        nothing else.

        Raises the cause when a channel failed (producer lost, partition not found).
        """

    def poll_priority(self) -> BufferOrEvent | None:
        """A priority event waiting at the head of any channel (blocked or not), taken; None
        when there is none. Called between the records of a buffer being processed, so it
        must be cheap; a gate whose channels never carry priority events keeps this default.

        Raises the cause when a channel failed.
        """
        return None

    @abstractmethod
    def block_consumption(self, channel: int) -> None:
        """Take nothing but priority events from ``channel`` until it is resumed (barrier
        alignment). Its data stays queued, so its producer is backpressured."""

    @abstractmethod
    def resume_consumption(self, channel: int) -> None:
        """Undo :meth:`block_consumption`."""

    @abstractmethod
    def prioritize_event(self, event: Event) -> None:
        """Move ``event``, where it waits in a channel's queue behind data, to the front; it
        is then delivered with ``priority`` and ``overtaken`` = the batches it passed."""

    @abstractmethod
    def is_finished(self) -> bool:
        """Every channel delivered end-of-partition."""

    def maintain(self) -> None:  # noqa: B027 - optional hook
        """Periodic housekeeping, called often on the task thread (e.g. buffer debloating).
        Must be cheap when there is nothing to do."""

    def set_batch_bytes(self, limit: int) -> None:  # noqa: B027 - optional hook
        """Hand the task up to ``limit`` bytes of what a channel holds when it takes data
        from it, joined into one batch (by default about a segment). Called by a task whose
        operators are all vectorised and fast: it processes what it took whole before it
        looks at a barrier, so it never persists it, and a call of a keyed aggregation
        costs about the same whatever the batch's length. What a channel holds is bounded
        by its credit (or its producer's queue), so the task's taken data still is."""

    @abstractmethod
    def close(self) -> None:
        """Stop fetching and drop buffered data (also called after failures)."""

    def metrics(self) -> dict[str, float]:
        return {}


class ShuffleEnvironment(ABC):
    """The TaskExecutor side of a shuffle service."""

    @abstractmethod
    def start(self) -> str:
        """Start serving data; returns the data address other TaskExecutors connect to."""

    @abstractmethod
    def create_result_partition_writer(
            self, task: TaskShuffleContext,
            deployment: jobgraph_pb2.ResultPartitionDeployment) -> ResultPartitionWriter:
        """The writer of one result partition; registers the partition for consumers."""

    @abstractmethod
    def create_input_gate(self, task: TaskShuffleContext,
                          deployment: jobgraph_pb2.InputGateDeployment) -> InputGate:
        """The gate reading the channels described by ``deployment``."""

    def is_local_channel(self, channel: jobgraph_pb2.InputChannelDeployment) -> bool:
        """Whether ``channel`` reads its producer's queue on this TaskExecutor in memory
        (True), or holds network buffers of its own (False, the default). Tells how much
        in-flight data the channel can hold; any thread, never blocks."""
        return False

    @abstractmethod
    def release_partitions_of_job(self, job_id: JobId) -> None:
        """Drop every partition of a job that ended."""

    def metrics(self) -> dict[str, Any]:
        return {}

    def unhealthy_reason(self) -> str | None:
        """Why this environment can no longer do its part (e.g. the thread accepting data
        connections died), or None while it can. The TaskExecutor's heartbeat reports it to
        the JobMaster; any thread, never blocks."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Stop serving; release everything. Called once, at TaskExecutor shutdown."""


class ShuffleServiceFactory(ABC):
    """Creates the two halves of a shuffle service; named by ``shuffle-service-factory.class``."""

    @abstractmethod
    def create_shuffle_master(self, configuration: Configuration) -> ShuffleMaster: ...

    @abstractmethod
    def create_shuffle_environment(self,
                                   context: ShuffleEnvironmentContext) -> ShuffleEnvironment: ...
