"""Deployment decisions without I/O: waiting for slots and for local state on a manual
clock, task-local slot preferences, and the descriptors subtasks are deployed with."""

from __future__ import annotations

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core.clock import ManualClock
from weir.jobmaster.deployment import (
    PartitionTable,
    RetryAllocation,
    SlotRequestTimedOut,
    SlotWaits,
    deployment_descriptor,
    local_preferences,
)
from weir.jobmaster.execution_graph import ExecutionGraph
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2

TIMEOUT_MS, LOCAL_WAIT_MS = 10_000, 3_000


def waits(clock: ManualClock, local_wait_ms: int = LOCAL_WAIT_MS) -> SlotWaits:
    return SlotWaits("job", clock, slot_timeout_ms=TIMEOUT_MS, local_wait_ms=local_wait_ms)


def test_waiting_for_slots_times_out_after_the_slot_request_timeout() -> None:
    clock = ManualClock(0)
    w = waits(clock)
    assert w.next_wakeup_ms() is None
    clock.advance(2_000)
    w.on_waiting(4, 1)
    clock.advance(5_000)
    w.on_waiting(4, 2)  # still waiting: the first wait counts
    assert w.next_wakeup_ms() == 12_000
    clock.advance(4_999)
    assert w.on_tick() == []
    clock.advance(1)
    assert w.on_tick() == [SlotRequestTimedOut(TIMEOUT_MS)]
    assert w.on_tick() == [] and w.next_wakeup_ms() is None


def test_slots_found_end_the_wait() -> None:
    clock = ManualClock(0)
    w = waits(clock)
    w.on_waiting(2, 0)
    w.on_allocated()
    clock.advance(TIMEOUT_MS)
    assert w.on_tick() == [] and w.waiting_since is None


def test_a_restart_starts_the_slot_wait_over() -> None:
    clock = ManualClock(0)
    w = waits(clock)
    w.on_waiting(2, 0)
    clock.advance(TIMEOUT_MS - 1)
    w.on_job_started()
    w.on_waiting(2, 0)
    assert w.next_wakeup_ms() == 2 * TIMEOUT_MS - 1


def test_an_untimed_wait_has_no_deadline() -> None:
    """A restarted region waits under the region restarter's own timeout."""
    w = waits(ManualClock(0))
    w.on_waiting(1, 0, timed=False)
    assert w.waiting_since == 0 and w.next_wakeup_ms() is None


def test_the_job_waits_for_an_absent_taskexecutor_holding_local_state() -> None:
    clock = ManualClock(100)
    w = waits(clock)
    assert w.wait_for_local_state({"te-1"})
    assert w.next_wakeup_ms() == 100 + LOCAL_WAIT_MS
    clock.advance(LOCAL_WAIT_MS - 1)
    assert w.wait_for_local_state({"te-1"}), "the wait does not start over"
    assert w.on_tick() == []
    clock.advance(1)
    assert w.on_tick() == [RetryAllocation()]
    assert w.on_tick() == [] and w.next_wakeup_ms() is None, "retried once"
    assert not w.wait_for_local_state({"te-1"})
    w.on_local_state_done()
    assert w.wait_for_local_state({"te-1"}), "a later restart waits again"


def test_no_wait_without_an_absent_holder_or_with_the_wait_off() -> None:
    assert not waits(ManualClock(0)).wait_for_local_state(set())
    assert not waits(ManualClock(0), local_wait_ms=0).wait_for_local_state({"te-1"})


def _two_vertices(partitioner: int = common_pb2.HASH) -> jobgraph_pb2.JobGraph:
    return jobgraph_pb2.JobGraph(job_id="job", name="j", vertices=[
        jobgraph_pb2.JobVertex(id=1, name="src", parallelism=2, max_parallelism=128),
        jobgraph_pb2.JobVertex(id=2, name="sink", parallelism=2, max_parallelism=128,
                               inputs=[jobgraph_pb2.JobEdge(source_vertex=1,
                                                            partitioner=partitioner)])])


def test_each_slot_prefers_the_taskexecutor_holding_most_of_its_pipeline_state() -> None:
    local_state = {"1-0": (7, "te-a"), "2-0": (7, "te-b"), "1-1": (6, "te-a")}
    offered = {("2-0", 7): ["te-b"], ("1-1", 7): ["te-c"], ("2-1", 7): ["te-c"]}
    preferred = local_preferences(_two_vertices(), 7, local_state,
                                  lambda owner, cid: offered.get((owner, cid), []))
    # Slot 0: te-a and te-b one vote each (the first seen wins); slot 1: te-c twice, the
    # copy of checkpoint 6 does not count.
    assert preferred == ["te-a", "te-c"]
    assert local_preferences(_two_vertices(), 8, {}, lambda owner, cid: []) == [None, None]


def test_a_descriptor_wires_every_channel_and_restores_its_subtask() -> None:
    graph = ExecutionGraph(_two_vertices(), ManualClock(5_000))
    assert graph.start_time == 5.0
    partitions = PartitionTable()
    for producer in graph.vertices[1]:
        partitions.add(producer.attempt_id, 2, f"{producer.attempt_id}.2",
                       f"desc-{producer.subtask_index}".encode())
    sink = graph.vertices[2][1]
    metadata = checkpoint_pb2.CheckpointMetadata(checkpoint_id=9)
    tdd = deployment_descriptor("job", graph, sink, partitions, batch=True,
                                restored=CompletedCheckpoint(9, metadata, "file:///c"))
    (gate,) = tdd.input_gates
    assert [(c.shuffle_descriptor, c.subpartition) for c in gate.channels] == [
        (b"desc-0", 1), (b"desc-1", 1)]
    assert tdd.restore.checkpoint_id == 9
    source = deployment_descriptor("job", graph, graph.vertices[1][0], partitions,
                                   batch=True)
    (partition,) = source.partitions
    assert (partition.num_subpartitions, partition.blocking, partition.consumer_vertex) == (
        2, True, 2)
    assert not source.HasField("restore")


def test_a_forward_channel_reads_subpartition_zero_of_its_own_producer() -> None:
    graph = ExecutionGraph(_two_vertices(common_pb2.FORWARD))
    partitions = PartitionTable()
    for producer in graph.vertices[1]:
        partitions.add(producer.attempt_id, 2, "p", f"desc-{producer.subtask_index}".encode())
    tdd = deployment_descriptor("job", graph, graph.vertices[2][1], partitions, batch=False)
    assert [(c.shuffle_descriptor, c.subpartition) for c in tdd.input_gates[0].channels] == [
        (b"desc-1", 0)]


def test_the_partition_table_hands_back_what_to_release() -> None:
    table = PartitionTable()
    table.add("a1", 2, "a1.2", b"d1")
    table.add("a1", 3, "a1.3", b"d2")
    table.add("a2", 2, "a2.2", b"d3")
    table.lost.add("a2.2")
    assert table.pop_outputs("a1", [2, 3, 4]) == [b"d1", b"d2"]
    assert table.clear() == [b"d3"]
    assert not (table.ids or table.descriptors or table.lost or table.read)
