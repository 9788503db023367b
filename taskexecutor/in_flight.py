"""How much in-flight data an unaligned checkpoint of one subtask can persist at most.

An unaligned barrier overtakes data instead of waiting for it, and the data it overtakes is
persisted as channel state. That data sits in network buffers, each of at most
``taskmanager.memory.segment-size`` bytes of records (``shuffle/pipelined/partition.py``
cuts batches to fit), so the configuration bounds it. What a subtask persists, and so what
is counted:

* **outputs** (``taskexecutor/checkpointing.py``, ``take_snapshot``): the buffers its
  barrier overtook in each subpartition. The task takes a barrier from its input only
  while every subpartition has room, so a subpartition then holds fewer than
  ``buffers-per-subpartition`` (Q) buffers plus the partly filled one the barrier
  flushes: Q buffers a subpartition.
* **inputs** (``taskexecutor/task_checkpoints.py``): what each channel delivers before its
  own barrier.

  - A *remote* channel holds what its credit let the producer send: its
    ``buffers-per-channel`` (E) exclusive buffers and the gate's
    ``floating-buffers-per-gate`` (F), shared by the gate's channels. On top of them it
    may hold one record batch whose buffers it freed while reassembling it (``client.py``),
    and the buffer the producer had begun to send when its barrier overtook the queue
    (``Buffer.in_flight``, granted credit over the budget): E + 2 a channel, F a gate.
  - A *local* channel reads its producer's subpartition in memory: what it delivers
    before its barrier comes from that queue, Q buffers.
* **one more buffer**: the unit of work the task took and has not processed when the
  barrier comes (what it took from one channel, at most a segment; or a source's batch).

Each counted buffer is persisted as at most a segment of records and its Arrow IPC framing
(schema and message header, about 0.5 KiB for a few columns; :data:`FRAMING_BYTES` is
allowed). So, with S the segment size::

    bound = (S + FRAMING_BYTES) * (  Q * output subpartitions
                                   + sum over input gates of
                                       (E + 2) * remote channels + Q * local channels
                                       + F if the gate has a remote channel
                                   + 1)

With the defaults (S = 32 KiB, Q = 4, E = 2, F = 8), a subtask with one gate of two remote
channels and one output of two subpartitions: 8 + (2 * 4 + 8) + 1 = 25 buffers, 825 KiB.
Debloating only makes buffers smaller. Blocking (BATCH) partitions carry no barriers and
are not counted.

What the bound assumes: a batch's records are of about one size (buffers are cut by the
batch's average record); a source's batch (``pipeline.batch-size`` records, taken from its
reader whole and persisted in the part not processed yet) fits in a buffer; and barriers
reach a subtask's channels about together, as unaligned barriers overtake every queue on
their way (data a channel delivers between the subtask's first barrier and its own comes
on top). A source with larger batches persists more than its bound, visibly.

Example:
    >>> from weir.core.config import Configuration
    >>> from weir.proto import jobgraph_pb2
    >>> tdd = jobgraph_pb2.TaskDeploymentDescriptor(
    ...     input_gates=[jobgraph_pb2.InputGateDeployment(channels=[
    ...         jobgraph_pb2.InputChannelDeployment(), jobgraph_pb2.InputChannelDeployment()])],
    ...     partitions=[jobgraph_pb2.ResultPartitionDeployment(num_subpartitions=2)])
    >>> in_flight_bound_bytes(tdd, Configuration(), is_local=lambda channel: False)
    844800
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from weir.core import options
from weir.core.config import Configuration
from weir.proto import jobgraph_pb2
from weir.shuffle import options as shuffle_options

#: Arrow IPC framing allowed for each persisted buffer: the channel state stores each one
#: as an IPC stream (schema, message header, end marker) behind a 13-byte record header.
FRAMING_BYTES = 1024
#: Beyond its credit, a remote channel may hold the batch it reassembled from buffers it
#: freed on the way, and the producer's partly sent buffer that a barrier overtook.
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


def in_flight_buffers(tdd: jobgraph_pb2.TaskDeploymentDescriptor, buffers: NetworkBuffers,
                      is_local: Callable[[jobgraph_pb2.InputChannelDeployment], bool]) -> int:
    """The network buffers an unaligned checkpoint of the subtask ``tdd`` deploys can
    persist at most (see the module docstring). ``is_local`` tells whether a channel reads
    a producer on the same TaskExecutor."""
    q = buffers.buffers_per_subpartition
    count = sum(q * p.num_subpartitions for p in tdd.partitions if not p.blocking)
    for gate in tdd.input_gates:
        local = sum(1 for channel in gate.channels if is_local(channel))
        remote = len(gate.channels) - local
        count += q * local + (buffers.buffers_per_channel + REMOTE_EXTRA_BUFFERS) * remote
        if remote:
            count += buffers.floating_per_gate
    return count + 1


def in_flight_bound_bytes(tdd: jobgraph_pb2.TaskDeploymentDescriptor,
                          configuration: Configuration,
                          is_local: Callable[[jobgraph_pb2.InputChannelDeployment], bool]
                          ) -> int:
    """Bytes an unaligned checkpoint of the subtask ``tdd`` deploys can persist at most,
    with the network buffers ``configuration`` (the TaskExecutor's) sets. Called once, on
    the task thread, when the task sets up its checkpoints; pure."""
    buffers = NetworkBuffers.from_configuration(configuration)
    return in_flight_buffers(tdd, buffers, is_local) * (buffers.segment_size + FRAMING_BYTES)
