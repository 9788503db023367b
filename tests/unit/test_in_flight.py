"""The in-flight bound of a subtask, from its deployment and the network buffer settings."""

from __future__ import annotations

from weir.core.config import Configuration
from weir.proto import jobgraph_pb2
from weir.shuffle.pipelined.partition import MAX_SEGMENTS_PER_BUFFER as B
from weir.taskexecutor.in_flight import (
    FRAMING_BYTES,
    InFlightBound,
    NetworkBuffers,
    Slots,
    in_flight_bound_bytes,
    in_flight_slots,
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
    # floating-buffers-per-gate F = 8, and buffers spanning up to B = 8 segments:
    #   outputs: 2 subpartitions x Q                       =  8 segments
    #   inputs:  2 remote channels x E + F                 = 12 segments
    #            2 remote channels x 2 (reassembled, sent) =  4 buffers of a span
    #   the unit of work being processed                   =  1 buffer of a span
    #   one chunk's output beyond the outputs' room        =  1 buffer of a span
    # 20 x (32 KiB of records + 1 KiB of Arrow framing) + 6 x (256 + 1) KiB = 2,202 KiB.
    assert B == 8
    task = tdd([["remote-a", "remote-b"]], [2])
    assert in_flight_slots(task, NetworkBuffers.from_configuration(Configuration()),
                           is_local) == Slots(segments=20, spans=6)
    assert in_flight_bound_bytes(task, Configuration(), is_local) == \
        (20 * 33 + 6 * 257) * KIB
    assert FRAMING_BYTES == KIB


def test_local_channels_count_their_producers_queue_and_no_floating_buffers() -> None:
    task = tdd([["local-a", "local-b"]], [])
    assert in_flight_slots(task, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == \
        Slots(2 * 4, 1)
    mixed = tdd([["local-a", "remote-b"], ["remote-c"]], [3])
    # outputs 3 x 4; gate 1: 4 + 2 + 8 and 2 spans; gate 2: 2 + 8 and 2 spans; the unit and
    # a chunk's output: 2 spans
    assert in_flight_slots(mixed, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == \
        Slots(12 + 14 + 10, 2 + 2 + 2)


def test_the_configuration_sets_every_term() -> None:
    conf = Configuration().merged({
        "taskmanager.memory.segment-size": "64kb",
        "taskmanager.network.memory.buffers-per-subpartition": "2",
        "taskmanager.network.memory.buffers-per-channel": "1",
        "taskmanager.network.memory.floating-buffers-per-gate": "3"})
    task = tdd([["remote-a", "remote-b", "local-c"]], [4])
    # segments: 4 x 2 + 2 x 1 + 2 + 3 = 15 of 64 KiB; spans: 2 x 2 + 2 = 6 of 8 x 64 KiB
    assert in_flight_bound_bytes(task, conf, is_local) == \
        15 * (64 * KIB + FRAMING_BYTES) + 6 * (B * 64 * KIB + FRAMING_BYTES)


def test_a_source_counts_its_outputs_and_blocking_partitions_nothing() -> None:
    source = tdd([], [2, 1])
    assert in_flight_slots(source, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == \
        Slots(12, 2)
    batch = tdd([], [2], blocking=True)
    assert in_flight_slots(batch, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == Slots(0, 1)


class Writer:
    """What the bound reads of a result partition writer."""

    largest_record_bytes = 0


def test_records_larger_than_a_segment_scale_every_buffer() -> None:
    # A buffer holds a segment of records, a span of them, or one larger record: with
    # records of 1 MiB, each counted buffer may hold 1 MiB. The bound learns the largest
    # record from the input taken, the outputs and the persisted data, and never shrinks.
    writer = Writer()
    bound = InFlightBound(Slots(20, 6), segment_size=32 * KIB,
                          writers=[writer])  # type: ignore[list-item]
    small = 20 * (32 * KIB + FRAMING_BYTES) + 6 * (B * 32 * KIB + FRAMING_BYTES)
    assert bound.bytes() == small
    bound.observe(nbytes=20 * KIB, records=40)          # small records change nothing
    assert bound.bytes() == small
    bound.observe(nbytes=100 * KIB, records=1)   # 100 KiB: more than a segment, not a span
    assert bound.bytes() == 20 * (100 * KIB + FRAMING_BYTES) + \
        6 * (B * 32 * KIB + FRAMING_BYTES)
    writer.largest_record_bytes = 1 << 20              # the task emitted a 1 MiB record
    assert bound.bytes() == 26 * ((1 << 20) + FRAMING_BYTES)
    bound.observe(nbytes=4 << 20, records=2)           # two of 2 MiB came in
    assert bound.bytes() == 26 * ((2 << 20) + FRAMING_BYTES)
    writer.largest_record_bytes = 0
    bound.observe(nbytes=10, records=1)
    assert bound.bytes() == 26 * ((2 << 20) + FRAMING_BYTES)
