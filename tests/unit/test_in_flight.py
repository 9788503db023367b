"""The in-flight bound of a subtask, from its deployment and the network buffer settings."""

from __future__ import annotations

from weir.core.config import Configuration
from weir.proto import jobgraph_pb2
from weir.taskexecutor.in_flight import (
    FRAMING_BYTES,
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
    # 25 buffers of at most 32 KiB of records and 1 KiB of Arrow framing: 825 KiB.
    task = tdd([["remote-a", "remote-b"]], [2])
    assert in_flight_buffers(task, NetworkBuffers.from_configuration(Configuration()),
                             is_local) == 25
    assert in_flight_bound_bytes(task, Configuration(), is_local) == 25 * (32 + 1) * KIB
    assert FRAMING_BYTES == KIB


def test_local_channels_count_their_producers_queue_and_no_floating_buffers() -> None:
    task = tdd([["local-a", "local-b"]], [])
    assert in_flight_buffers(task, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == 2 * 4 + 1
    mixed = tdd([["local-a", "remote-b"], ["remote-c"]], [3])
    # outputs 3 x 4; gate 1: 4 + (2 + 2) + 8; gate 2: (2 + 2) + 8; the unit: 1
    assert in_flight_buffers(mixed, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == \
        12 + 16 + 12 + 1


def test_the_configuration_sets_every_term() -> None:
    conf = Configuration().merged({
        "taskmanager.memory.segment-size": "64kb",
        "taskmanager.network.memory.buffers-per-subpartition": "2",
        "taskmanager.network.memory.buffers-per-channel": "1",
        "taskmanager.network.memory.floating-buffers-per-gate": "3"})
    task = tdd([["remote-a", "remote-b", "local-c"]], [4])
    # 4 x 2 + (2 x (1 + 2) + 2 + 3) + 1 = 20 buffers of 64 KiB and the framing
    assert in_flight_bound_bytes(task, conf, is_local) == 20 * (64 * KIB + FRAMING_BYTES)


def test_a_source_counts_its_outputs_and_blocking_partitions_nothing() -> None:
    source = tdd([], [2, 1])
    assert in_flight_buffers(source, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == 12 + 1
    batch = tdd([], [2], blocking=True)
    assert in_flight_buffers(batch, NetworkBuffers(32 * KIB, 4, 2, 8), is_local) == 1
