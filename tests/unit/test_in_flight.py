"""The in-flight bound of a subtask, from its deployment and the network buffer settings."""

from __future__ import annotations

from weir.core.config import Configuration
from weir.proto import jobgraph_pb2
from weir.taskexecutor.in_flight import (
    FRAMING_BYTES,
    InFlightBound,
    NetworkBuffers,
    in_flight_bound_bytes,
    in_flight_buffers,
)

KIB = 1024


def channel(name: str) -> jobgraph_pb2.InputChannelDeployment:
    return jobgraph_pb2.InputChannelDeployment(shuffle_descriptor=name.encode())


def tdd(gates: list[list[str]], outputs: list[int],
        blocking: bool = False) -> jobgraph_pb2.TaskDeploymentDescriptor:
    return jobgraph_pb2.TaskDeploymentDescriptor(
        input_gates=[jobgraph_pb2.InputGateDeployment(channels=[channel(c) for c in gate])
                     for gate in gates],
        partitions=[jobgraph_pb2.ResultPartitionDeployment(num_subpartitions=n,
                                                           blocking=blocking)
                    for n in outputs])


def is_local(c: jobgraph_pb2.InputChannelDeployment) -> bool:
    return c.shuffle_descriptor.startswith(b"local")


def test_two_remote_channels_and_two_subpartitions_at_the_defaults() -> None:
    # By hand, with S = 32 KiB, buffers-per-subpartition Q = 4, buffers-per-channel E = 2,
    # floating-buffers-per-gate F = 8:
    #   outputs: 2 subpartitions x Q                 =  8 buffers
    #   inputs:  2 remote channels x (E + 2) + F     = 16 buffers
    #   the unit of work being processed             =  1 buffer
    #   one chunk's output beyond the outputs' room  =  1 buffer
    # 26 buffers of at most 32 KiB of records and 1 KiB of Arrow framing: 858 KiB.
    task = tdd([["remote-a", "remote-b"]], [2])
    assert in_flight_buffers(task, NetworkBuffers.from_configuration(Configuration()),
                             is_local) == 26
    assert in_flight_bound_bytes(task, Configuration(), is_local) == 26 * (32 + 1) * KIB
    assert FRAMING_BYTES == KIB


def test_local_channels_count_their_producers_queue_and_no_floating_buffers() -> None:
    task = tdd([["local-a", "local-b"]], [])
    assert in_flight_buffers(task, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == 2 * 4 + 1
    mixed = tdd([["local-a", "remote-b"], ["remote-c"]], [3])
    # outputs 3 x 4; gate 1: 4 + (2 + 2) + 8; gate 2: (2 + 2) + 8; the unit and a chunk's
    # output: 2
    assert in_flight_buffers(mixed, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == \
        12 + 16 + 12 + 2


def test_the_configuration_sets_every_term() -> None:
    conf = Configuration().merged({
        "taskmanager.memory.segment-size": "64kb",
        "taskmanager.network.memory.buffers-per-subpartition": "2",
        "taskmanager.network.memory.buffers-per-channel": "1",
        "taskmanager.network.memory.floating-buffers-per-gate": "3"})
    task = tdd([["remote-a", "remote-b", "local-c"]], [4])
    # 4 x 2 + (2 x (1 + 2) + 2 + 3) + 2 = 21 buffers of 64 KiB and the framing
    assert in_flight_bound_bytes(task, conf, is_local) == 21 * (64 * KIB + FRAMING_BYTES)


def test_a_source_counts_its_outputs_and_blocking_partitions_nothing() -> None:
    source = tdd([], [2, 1])
    assert in_flight_buffers(source, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == 12 + 2
    batch = tdd([], [2], blocking=True)
    assert in_flight_buffers(batch, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == 1


class Writer:
    """What the bound reads of a result partition writer."""

    largest_record_bytes = 0


def test_records_larger_than_a_segment_scale_every_buffer() -> None:
    # A buffer holds a segment of records or one larger record: with records of 1 MiB,
    # each counted buffer may hold 1 MiB. The bound learns the largest record from the
    # input taken, the outputs and the persisted data, and never shrinks.
    writer = Writer()
    bound = InFlightBound(buffers=26, segment_size=32 * KIB, writers=[writer])  # type: ignore[list-item]
    assert bound.bytes() == 26 * (32 * KIB + FRAMING_BYTES)
    bound.observe(nbytes=20 * KIB, records=40)          # small records change nothing
    assert bound.bytes() == 26 * (32 * KIB + FRAMING_BYTES)
    writer.largest_record_bytes = 1 << 20              # the task emitted a 1 MiB record
    assert bound.bytes() == 26 * ((1 << 20) + FRAMING_BYTES)
    bound.observe(nbytes=4 << 20, records=2)           # two of 2 MiB came in
    assert bound.bytes() == 26 * ((2 << 20) + FRAMING_BYTES)
    writer.largest_record_bytes = 0
    bound.observe(nbytes=10, records=1)
    assert bound.bytes() == 26 * ((2 << 20) + FRAMING_BYTES)
