"""How much in-flight data an unaligned checkpoint of one subtask can persist at most.

An unaligned barrier overtakes data instead of waiting for it, and the data it overtakes is
persisted as channel state. That data sits in network buffers, and every capacity of them
counts segments of ``taskmanager.memory.segment-size`` bytes of records: a buffer is one
segment, or a piece of a batch of up to B = ``MAX_SEGMENTS_PER_BUFFER`` (8) segments
counted as that many (``shuffle/pipelined/partition.py`` cuts batches to fit), so the
configuration bounds it. What a subtask persists, and so what is counted:

* **outputs** (``taskexecutor/checkpointing.py``, ``take_snapshot``): the buffers its
  barrier overtook in each subpartition. The task takes a barrier from its input only
  while every subpartition has room, so a subpartition then holds fewer than
  ``buffers-per-subpartition`` (Q) segments plus the partly filled one the barrier
  flushes: Q segments a subpartition.
* **inputs** (``taskexecutor/task_checkpoints.py``): what each channel delivers before its
  own barrier.

  - A *remote* channel holds what its credit let the producer send: its
    ``buffers-per-channel`` (E) exclusive buffers and the gate's
    ``floating-buffers-per-gate`` (F), shared by the gate's channels. On top of them it
    may hold one record batch whose buffers it freed while reassembling it (``client.py``),
    and the buffer the producer had begun to send when its barrier overtook the queue
    (``Buffer.in_flight``, granted credit over the budget), each of up to B segments:
    E segments and 2 buffers a channel, F segments a gate.
  - A *local* channel reads its producer's subpartition in memory: what it delivers
    before its barrier comes from that queue, Q segments.
* **one more buffer** (up to B segments): the unit of work the task took and has not
  processed when the barrier comes (what it took from one channel).
* **one more for outputs** (up to B segments): the task checks its outputs for room
  between two chunks of input only, and a chunk is cut so that it emits about a segment
  (:mod:`weir.taskexecutor.pending_input`), a vectorised chain about what it took: what
  a subtask's outputs may hold beyond their capacity. A source's reader
  stores a position before the records of its batch not processed yet
  (``SourceReader.snapshot_state_unread``), so they are not persisted.

Each counted segment is persisted as at most a segment of records, or one record larger
than that, and each buffer of a span as at most B segments, or one larger record; each
with its Arrow IPC framing (schema and message header, about 0.5 KiB for a few columns;
:data:`FRAMING_BYTES` is allowed). So, with S the segment size and R the largest record
the subtask has seen (in its inputs, outputs or persisted data)::

    bound = (max(S, R) + FRAMING_BYTES) * (  Q * output subpartitions
                                           + sum over input gates of
                                               E * remote channels
                                               + Q * local channels
                                               + F if the gate has a remote channel)
          + (max(B * S, R) + FRAMING_BYTES) * (  2 * remote channels
                                               + 1 + 1 if the subtask has outputs)

With the defaults (S = 32 KiB, Q = 4, E = 2, F = 8, B = 8) and records under 32 KiB, a
subtask with one gate of two remote channels and one output of two subpartitions:
(8 + 4 + 8) x 33 KiB + (4 + 2) x 257 KiB = 2,202 KiB. (With buffers of one segment it was
26 x 33 = 858 KiB: buffers that span segments cost the bound 2.6x, and halved a keyed
exchange's CPU per GB. With records of 1 MiB both are 26 buffers of 1 MiB.) Debloating
only makes buffers smaller, one segment each. Blocking (BATCH) partitions carry no
barriers and are not counted.

What the bound assumes: a batch's records are of about one size (buffers are cut by the
batch's average record); barriers reach a subtask's channels about together, as unaligned
barriers overtake every queue on their way (data a channel delivers between the subtask's
first barrier and its own comes on top); and a source's reader can rewind (those of your
own that cannot make the task persist the unprocessed rest of their batch, visibly).

Example:
    >>> from weir.core.config import Configuration
    >>> from weir.proto import jobgraph_pb2
    >>> tdd = jobgraph_pb2.TaskDeploymentDescriptor(
    ...     input_gates=[jobgraph_pb2.InputGateDeployment(channels=[
    ...         jobgraph_pb2.InputChannelDeployment(), jobgraph_pb2.InputChannelDeployment()])],
    ...     partitions=[jobgraph_pb2.ResultPartitionDeployment(num_subpartitions=2)])
    >>> in_flight_bound_bytes(tdd, Configuration(), is_local=lambda channel: False)
    2254848
    >>> in_flight_bound_bytes(tdd, Configuration(), is_local=lambda channel: False,
    ...                       largest_record=1 << 20)   # records of 1 MiB
    27289600
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from weir.core import options
from weir.core.config import Configuration
from weir.proto import jobgraph_pb2
from weir.shuffle import options as shuffle_options
from weir.shuffle.api import ResultPartitionWriter
from weir.shuffle.pipelined.partition import MAX_SEGMENTS_PER_BUFFER

#: Arrow IPC framing allowed for each persisted buffer: the channel state stores each one
#: as an IPC stream (schema, message header, end marker) behind a 13-byte record header.
FRAMING_BYTES = 1024
#: Beyond its credit, a remote channel may hold the batch it reassembled from buffers it
#: freed on the way, and the producer's partly sent buffer that a barrier overtook: two
#: buffers of up to a span each.
REMOTE_EXTRA_BUFFERS = 2


@dataclass(frozen=True)
class NetworkBuffers:
    """The network buffer settings of a TaskExecutor."""

    segment_size: int
    buffers_per_subpartition: int
    buffers_per_channel: int
    floating_per_gate: int

    @classmethod
    def from_configuration(cls, configuration: Configuration) -> NetworkBuffers:
        return cls(configuration.get(options.SEGMENT_SIZE),
                   configuration.get(shuffle_options.SUBPARTITION_QUEUE),
                   configuration.get(shuffle_options.BUFFERS_PER_CHANNEL),
                   configuration.get(shuffle_options.FLOATING_BUFFERS_PER_GATE))


@dataclass(frozen=True)
class Slots:
    """What an unaligned checkpoint of a subtask can persist, in buffers: ``segments``
    hold at most a segment of records (or one larger record) each, ``spans`` at most
    ``MAX_SEGMENTS_PER_BUFFER`` segments (or one larger record) each."""

    segments: int
    spans: int

    def bytes(self, segment_size: int, largest_record: int) -> int:
        """The bound in bytes, with records of at most ``largest_record`` bytes."""
        span = MAX_SEGMENTS_PER_BUFFER * segment_size
        return (self.segments * (max(segment_size, largest_record) + FRAMING_BYTES)
                + self.spans * (max(span, largest_record) + FRAMING_BYTES))


def in_flight_slots(tdd: jobgraph_pb2.TaskDeploymentDescriptor, buffers: NetworkBuffers,
                    is_local: Callable[[jobgraph_pb2.InputChannelDeployment], bool]) -> Slots:
    """The network buffers an unaligned checkpoint of the subtask ``tdd`` deploys can
    persist at most (see the module docstring). ``is_local`` tells whether a channel reads
    a producer on the same TaskExecutor."""
    q = buffers.buffers_per_subpartition
    pipelined = [p for p in tdd.partitions if not p.blocking]
    segments = sum(q * p.num_subpartitions for p in pipelined)
    spans = 0
    for gate in tdd.input_gates:
        local = sum(1 for channel in gate.channels if is_local(channel))
        remote = len(gate.channels) - local
        segments += q * local + buffers.buffers_per_channel * remote
        spans += REMOTE_EXTRA_BUFFERS * remote
        if remote:
            segments += buffers.floating_per_gate
    # The unit of work being processed, and one chunk's output beyond the outputs' room.
    return Slots(segments, spans + 1 + (1 if pipelined else 0))


def in_flight_bound_bytes(tdd: jobgraph_pb2.TaskDeploymentDescriptor,
                          configuration: Configuration,
                          is_local: Callable[[jobgraph_pb2.InputChannelDeployment], bool],
                          largest_record: int = 0) -> int:
    """Bytes an unaligned checkpoint of the subtask ``tdd`` deploys can persist at most,
    with the network buffers ``configuration`` (the TaskExecutor's) sets and records of at
    most ``largest_record`` bytes. Pure."""
    buffers = NetworkBuffers.from_configuration(configuration)
    return in_flight_slots(tdd, buffers, is_local).bytes(buffers.segment_size, largest_record)


class InFlightBound:
    """The bound of one running subtask: its buffers, counted once from its deployment, and
    the largest record it has seen so far, which only grows. Task thread only.

    Example:
        >>> bound = InFlightBound(Slots(segments=10, spans=2), segment_size=32 * 1024,
        ...                       writers=[])
        >>> bound.bytes()                       # 10 x (32 KiB + 1 KiB) + 2 x (256 + 1) KiB
        864256
        >>> bound.observe(nbytes=3 << 20, records=3)   # three records of 1 MiB
        >>> bound.bytes()                       # 12 x (1 MiB + 1 KiB)
        12595200
    """

    def __init__(self, slots: Slots, segment_size: int,
                 writers: Sequence[ResultPartitionWriter]) -> None:
        self.slots = slots
        self.segment_size = segment_size
        self._writers = writers
        self._largest = 0

    @classmethod
    def of(cls, tdd: jobgraph_pb2.TaskDeploymentDescriptor, configuration: Configuration,
           is_local: Callable[[jobgraph_pb2.InputChannelDeployment], bool],
           writers: Sequence[ResultPartitionWriter]) -> InFlightBound:
        buffers = NetworkBuffers.from_configuration(configuration)
        return cls(in_flight_slots(tdd, buffers, is_local), buffers.segment_size, writers)

    def observe(self, nbytes: int, records: int) -> None:
        """A batch of ``records`` taking ``nbytes`` came in (or is persisted)."""
        if records and nbytes > self._largest * records:
            self._largest = -(-nbytes // records)

    def largest_record(self) -> int:
        return max(self._largest, *(w.largest_record_bytes for w in self._writers), 0)

    def bytes(self) -> int:
        """The bound now."""
        return self.slots.bytes(self.segment_size, self.largest_record())
