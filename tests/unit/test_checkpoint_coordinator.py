"""The checkpoint coordinator as a state machine: a manual clock, no network, no storage."""

from __future__ import annotations

import pytest

from tests.support.checkpoint_coordinator import (
    INPUTS,
    TASKS,
    ack_all,
    complete,
    coordinator,
    trigger,
)
from weir.checkpoint.coordinator import (
    CheckpointCoordinator,
    CheckpointCoordinatorConfiguration,
    CompletedCheckpoint,
    DiscardCheckpoint,
    FailJob,
    FinalizeCheckpoint,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    TaskInfo,
    TriggerCheckpoint,
)
from weir.core.clock import ManualClock
from weir.jobmaster.failover import subtask_inputs
from weir.proto import checkpoint_pb2
from weir.proto.checkpoint_pb2 import CheckpointMetadata, CheckpointTaskMetrics, TaskStateSnapshot
from weir.proto.common_pb2 import FORWARD, HASH
from weir.proto.jobgraph_pb2 import JobEdge, JobGraph, JobVertex


def test_triggers_only_sources_after_one_interval() -> None:
    clock = ManualClock(10_000)
    c = coordinator(clock)
    assert c.on_tick() == []                      # not due yet
    clock.advance(999)
    assert c.on_tick() == []
    clock.advance(1)
    t = c.on_tick()[0]
    assert isinstance(t, TriggerCheckpoint)
    assert (t.checkpoint_id, t.timestamp_ms, t.tasks) == (1, 11_000, ("s0", "s1"))


def test_no_trigger_until_every_task_runs() -> None:
    clock = ManualClock(0)
    c = CheckpointCoordinator("job", CheckpointCoordinatorConfiguration(interval_ms=1000), clock)
    c.on_job_running(TASKS, INPUTS)
    c.on_task_running("s0")
    clock.advance(5000)
    assert c.on_tick() == []
    c.on_task_running("s1")
    c.on_task_running("k0")
    assert isinstance(c.on_tick()[0], TriggerCheckpoint)


def test_completes_when_all_acknowledged_and_metadata_written() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    trigger(c, clock)
    assert c.on_acknowledge("s0", 1, TaskStateSnapshot()) == []
    assert c.on_acknowledge("s0", 1, TaskStateSnapshot()) == []   # a duplicate is ignored
    assert c.on_acknowledge("s1", 1, TaskStateSnapshot()) == []
    clock.advance(40)
    finalize = c.on_acknowledge("k0", 1, TaskStateSnapshot())
    assert len(finalize) == 1 and isinstance(finalize[0], FinalizeCheckpoint)
    metadata = finalize[0].metadata
    assert [(s.vertex_id, s.subtask_index) for s in metadata.subtasks] == [(1, 0), (1, 1),
                                                                          (2, 0)]
    assert metadata.completion_timestamp_ms == 1040
    assert c.latest_completed() is None           # not before the metadata is written
    actions = c.on_finalized(1, "file:///c/job/chk-1")
    assert actions == [NotifyCheckpointComplete(1, ("k0", "s0", "s1"))]
    latest = c.latest_completed()
    assert latest is not None and latest.checkpoint_id == 1
    assert c.stats()[-1].status == checkpoint_pb2.CheckpointStats.COMPLETED
    assert c.stats()[-1].external_path == "file:///c/job/chk-1"


def test_expiry_aborts_and_counts_against_tolerable_failures() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, timeout_ms=5000, tolerable_failures=1)
    trigger(c, clock)
    c.on_acknowledge("s0", 1, TaskStateSnapshot())
    clock.advance(4999)
    assert not any(isinstance(a, NotifyCheckpointAborted) for a in c.on_tick())
    clock.advance(1)
    actions = c.on_tick()
    aborted = [a for a in actions if isinstance(a, NotifyCheckpointAborted)]
    assert aborted == [NotifyCheckpointAborted(1, ("k0", "s0", "s1"),
                                               checkpoint_pb2.CHECKPOINT_EXPIRED)]
    assert DiscardCheckpoint(1, False) in actions
    assert not any(isinstance(a, FailJob) for a in actions)   # 1 failure is tolerated
    assert "source (2/2)" in c.stats()[0].failure_message   # names who did not answer
    # The same tick triggers the next checkpoint: the interval passed long ago.
    next_trigger = [a for a in actions if isinstance(a, TriggerCheckpoint)]
    assert [t.checkpoint_id for t in next_trigger] == [2]
    clock.advance(5000)
    fail = [a for a in c.on_tick() if isinstance(a, FailJob)]
    assert len(fail) == 1
    assert fail[0].reason == checkpoint_pb2.CHECKPOINT_EXPIRED
    assert "tolerable" in fail[0].message


def test_a_completed_checkpoint_resets_the_failure_count() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, tolerable_failures=1)
    trigger(c, clock)
    c.on_decline("k0", 1, checkpoint_pb2.CHECKPOINT_ASYNC_EXCEPTION, "S3 is down")
    assert c.consecutive_failures == 1
    trigger(c, clock)
    complete(c, 2)
    assert c.consecutive_failures == 0
    trigger(c, clock)
    actions = c.on_decline("k0", 3, checkpoint_pb2.CHECKPOINT_ASYNC_EXCEPTION, "again")
    assert not any(isinstance(a, FailJob) for a in actions)


def test_uncounted_reasons_never_fail_the_job() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, tolerable_failures=0)
    trigger(c, clock)
    actions = c.on_task_failed("k0")
    assert not any(isinstance(a, FailJob | NotifyCheckpointAborted) for a in actions)
    assert DiscardCheckpoint(1, False) in actions
    assert c.pending_ids() == []
    assert c.on_tick() == []                       # the job is not running: no trigger
    c.on_job_running(TASKS, INPUTS)
    for task in TASKS:
        c.on_task_running(task.attempt_id)
    assert trigger(c, clock).checkpoint_id == 2    # ids go on after a restart


def test_min_pause_delays_the_next_trigger() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, interval_ms=1000, min_pause_ms=3000)
    trigger(c, clock)                              # at 1000
    clock.advance(500)
    complete(c, 1)                                 # ends at 1500
    clock.advance(1000)                            # 2500: interval passed, pause did not
    assert c.on_tick() == []
    assert c.next_wakeup_ms() == 4500
    clock.advance(2000)
    assert trigger(c, clock).timestamp_ms == 4500


def test_next_wakeup_is_never_in_the_past_while_nothing_can_happen() -> None:
    # The adapter sleeps until next_wakeup_ms: a due time on_tick cannot act on would
    # make it spin. A checkpoint taking longer than the interval (max-concurrent 1),
    # one being finalized, and tasks not yet running all leave nothing to wake for.
    clock = ManualClock(0)
    c = coordinator(clock, interval_ms=1000, timeout_ms=10_000)
    trigger(c, clock)                              # at 1000, still in progress
    clock.advance(3000)
    assert c.next_wakeup_ms() == 11_000            # its expiry, not the overdue trigger
    ack_all(c, 1)                                  # being finalized: cannot expire
    assert c.next_wakeup_ms() is None
    c.on_finalized(1, "file:///c/job/chk-1")
    assert c.next_wakeup_ms() == clock()           # the trigger is due now
    c.on_task_failed("k0")
    c.on_job_running(TASKS, INPUTS)
    c.on_task_running("s0")
    assert c.next_wakeup_ms() is None              # waits for the other tasks
    for task in TASKS:
        c.on_task_running(task.attempt_id)
    assert trigger(c, clock).checkpoint_id == 2


def test_max_concurrent_checkpoints() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, max_concurrent=2, timeout_ms=60_000)
    assert trigger(c, clock).checkpoint_id == 1
    assert trigger(c, clock).checkpoint_id == 2
    clock.advance(5000)
    assert not any(isinstance(a, TriggerCheckpoint) for a in c.on_tick())
    assert c.pending_ids() == [1, 2]


def test_completing_a_newer_checkpoint_subsumes_older_pending_ones() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, max_concurrent=2)
    trigger(c, clock)
    trigger(c, clock)
    c.on_acknowledge("s0", 1, TaskStateSnapshot())
    ack_all(c, 2)
    actions = c.on_finalized(2, "file:///c/job/chk-2")
    assert isinstance(actions[0], NotifyCheckpointComplete)
    aborted = [a for a in actions if isinstance(a, NotifyCheckpointAborted)]
    assert [(a.checkpoint_id, a.reason) for a in aborted] == [
        (1, checkpoint_pb2.CHECKPOINT_SUBSUMED)]
    assert c.consecutive_failures == 0             # subsumption is not a failure
    assert c.on_acknowledge("k0", 1, TaskStateSnapshot()) == []   # late ack ignored


def test_retention_discards_completed_checkpoints_beyond_num_retained() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, num_retained=2)
    discarded = []
    for n in (1, 2, 3, 4):
        trigger(c, clock)
        discarded += [a for a in complete(c, n) if isinstance(a, DiscardCheckpoint)]
    assert discarded == [DiscardCheckpoint(1, True), DiscardCheckpoint(2, True)]
    assert [cp.checkpoint_id for cp in c.completed()] == [3, 4]
    assert c.on_job_terminal(discard_completed=True)[-2:] == [
        DiscardCheckpoint(3, True), DiscardCheckpoint(4, True)]


def test_finalize_failure_is_a_counted_storage_failure() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, tolerable_failures=0)
    trigger(c, clock)
    ack_all(c, 1)
    actions = c.on_finalize_failed(1, "S3 unreachable")
    assert isinstance(actions[0], NotifyCheckpointAborted)
    fail = [a for a in actions if isinstance(a, FailJob)]
    assert fail and fail[0].reason == checkpoint_pb2.FINALIZE_CHECKPOINT_FAILURE
    assert c.latest_completed() is None


def test_a_pending_checkpoint_does_not_expire_while_its_metadata_is_written() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, timeout_ms=1000)
    trigger(c, clock)
    ack_all(c, 1)
    clock.advance(10_000)
    assert not any(isinstance(a, NotifyCheckpointAborted) for a in c.on_tick())
    assert isinstance(c.on_finalized(1, "p")[0], NotifyCheckpointComplete)


def test_end_of_input_triggers_the_final_checkpoint_at_once() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, interval_ms=60_000)
    clock.advance(100)
    assert c.on_end_of_data("s0") == []
    actions = c.on_end_of_data("s1")
    assert [type(a) for a in actions] == [TriggerCheckpoint]
    assert actions[0].timestamp_ms == 100          # type: ignore[union-attr]


def test_finished_tasks_are_recorded_and_their_consumers_become_trigger_roots() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    c.on_task_finished("s0")
    c.on_task_finished("s1")
    t = trigger(c, clock)
    assert t.tasks == ("k0",)                      # every source finished
    actions = c.on_acknowledge("k0", t.checkpoint_id, TaskStateSnapshot())
    metadata = actions[0].metadata                 # type: ignore[union-attr]
    assert [(s.vertex_id, s.subtask_index, s.finished) for s in metadata.subtasks] == [
        (2, 0, False), (1, 0, True), (1, 1, True)]


def test_a_forward_consumer_whose_producer_finished_is_a_trigger_root() -> None:
    # source (2) -FORWARD-> map (2) -HASH-> sink (1). Source subtask 0 finished; its map
    # subtask reads nothing else, so no barrier reaches it through its input: it is
    # triggered directly, while map subtask 1 still gets its barrier from source 1. Left
    # out, a job hung: source 1 waits for its final checkpoint, which waits for map 0.
    tasks = [TaskInfo("s0", 1, 0), TaskInfo("s1", 1, 1), TaskInfo("m0", 2, 0),
             TaskInfo("m1", 2, 1), TaskInfo("k0", 3, 0)]
    inputs = subtask_inputs(JobGraph(vertices=[
        JobVertex(id=1, parallelism=2),
        JobVertex(id=2, parallelism=2, inputs=[JobEdge(source_vertex=1, partitioner=FORWARD)]),
        JobVertex(id=3, parallelism=1, inputs=[JobEdge(source_vertex=2, partitioner=HASH)])]))

    def roots_after(*finished: str) -> tuple[str, ...]:
        clock = ManualClock(0)
        c = CheckpointCoordinator("job", CheckpointCoordinatorConfiguration(interval_ms=1000),
                                  clock)
        c.on_job_running(tasks, inputs)
        for task in tasks:
            c.on_task_running(task.attempt_id)
        for attempt in finished:
            c.on_task_finished(attempt)
        return trigger(c, clock).tasks

    assert roots_after() == ("s0", "s1")
    assert roots_after("s0") == ("m0", "s1")
    # The sink reads every map subtask: a root only once both finished.
    assert roots_after("s0", "s1", "m0") == ("m1",)
    assert roots_after("s0", "s1", "m0", "m1") == ("k0",)


def test_a_task_that_finishes_before_acknowledging_declines_the_checkpoint() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    trigger(c, clock)
    actions = c.on_task_finished("k0")
    reasons = [a.reason for a in actions if isinstance(a, NotifyCheckpointAborted)]
    assert reasons == [checkpoint_pb2.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM]
    assert c.consecutive_failures == 0


def test_restored_checkpoints_count_for_ids_and_retention() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, num_retained=1)
    c.add_completed(CompletedCheckpoint(7, CheckpointMetadata(checkpoint_id=7), "p7"))
    assert trigger(c, clock).checkpoint_id == 8
    discards = [a for a in complete(c, 8) if isinstance(a, DiscardCheckpoint)]
    assert discards == [DiscardCheckpoint(7, True)]


def test_an_undelivered_trigger_aborts_without_counting() -> None:
    # The task's TaskExecutor is gone: failover reports that, not the checkpoint.
    clock = ManualClock(0)
    c = coordinator(clock, tolerable_failures=0)
    trigger(c, clock)
    actions = c.on_trigger_failed(1, "the trigger did not reach map (1/2): unavailable")
    assert isinstance(actions[0], NotifyCheckpointAborted)
    assert not any(isinstance(a, FailJob) for a in actions)
    assert c.consecutive_failures == 0
    assert c.stats()[-1].failure_reason == checkpoint_pb2.TRIGGER_CHECKPOINT_FAILURE


def test_a_failed_enumerator_snapshot_declines_and_counts() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, tolerable_failures=0)
    trigger(c, clock)
    actions = c.on_trigger_failed(1, "snapshotting a split enumerator failed",
                                  checkpoint_pb2.CHECKPOINT_DECLINED)
    assert isinstance(actions[0], NotifyCheckpointAborted)
    assert isinstance(actions[-1], FailJob)
    assert c.stats()[-1].failure_reason == checkpoint_pb2.CHECKPOINT_DECLINED


def test_stats_sum_task_metrics() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    trigger(c, clock)
    for task, aligned in zip(TASKS, (5, 9, 2), strict=True):
        c.on_acknowledge(task.attempt_id, 1, TaskStateSnapshot(), CheckpointTaskMetrics(
            state_size=100, persisted_bytes=7, processed_bytes=11, unaligned=True,
            alignment_duration_ms=aligned, ack_timestamp_ms=clock() + 250))
    row = c.stats()[-1]
    assert (row.state_size, row.persisted_bytes, row.processed_bytes, row.alignment_ms,
            row.unaligned, row.duration_ms, row.acknowledged, row.total) == (
        300, 21, 33, 9, True, 250, 3, 3)
    assert [s.task_name for s in row.subtasks] == ["source (1/2)", "source (2/2)",
                                                   "sink (1/1)"]


@pytest.mark.parametrize("unaligned,timeout,expected", [
    (False, 0, (False, 0)), (True, 0, (True, 0)), (True, 1000, (False, 1000)),
    (False, 1000, (False, 0))])
def test_options_sent_with_the_trigger(unaligned: bool, timeout: int,
                                       expected: tuple[bool, int]) -> None:
    clock = ManualClock(0)
    c = coordinator(clock, unaligned=unaligned, aligned_timeout_ms=timeout)
    options = trigger(c, clock).options
    assert (options.unaligned, options.aligned_timeout_ms) == expected


def test_a_job_that_had_a_checkpoint_remembers_it_when_every_one_proved_unusable() -> None:
    """A job started from a savepoint whose files are corrupt has no retained checkpoint
    left once it is forgotten, but it had one: its restart must not start without state
    (the scheduler fails it instead of repeating output already committed)."""
    clock = ManualClock(0)
    fresh = coordinator(clock)
    assert not fresh.had_completed()
    restored = coordinator(clock)
    restored.add_completed(CompletedCheckpoint(5, CheckpointMetadata(), "file:///sp",
                                               owned=False))
    assert restored.had_completed()
    restored.forget_completed(5)
    assert restored.completed() == [] and restored.had_completed()
    complete(fresh, trigger(fresh, clock).checkpoint_id)
    assert fresh.had_completed()
