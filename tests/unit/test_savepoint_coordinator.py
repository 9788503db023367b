"""Savepoints and snapshot ownership in the checkpoint coordinator: a manual clock, no
network, no storage."""

from __future__ import annotations

from tests.support.checkpoint_coordinator import (
    INPUTS,
    TASKS,
    ack_all,
    complete,
    coordinator,
    trigger,
)
from weir.checkpoint.coordinator import (
    CompletedCheckpoint,
    DiscardCheckpoint,
    FailJob,
    FinalizeCheckpoint,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    SnapshotRequestCompleted,
    SnapshotRequestFailed,
    TriggerCheckpoint,
)
from weir.core.clock import ManualClock
from weir.proto import checkpoint_pb2
from weir.proto.checkpoint_pb2 import CheckpointMetadata, CheckpointOptions

TARGET = "file:///sp/savepoint-job-1"


def savepoint_options(terminate: bool = False) -> CheckpointOptions:
    return CheckpointOptions(savepoint=True, target_location=TARGET, terminate=terminate)


def only(actions: list[object], kind: type) -> object:
    found = [a for a in actions if isinstance(a, kind)]
    assert len(found) == 1, actions
    return found[0]


def test_savepoint_is_triggered_at_once_and_not_retained() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    first = trigger(c, clock)
    complete(c, first.checkpoint_id)
    request = c.on_snapshot_request(savepoint_options())
    savepoint = only(request, TriggerCheckpoint)
    assert isinstance(savepoint, TriggerCheckpoint)
    assert savepoint.options.savepoint and savepoint.options.target_location == TARGET
    finalize = only(ack_all(c, savepoint.checkpoint_id), FinalizeCheckpoint)
    assert isinstance(finalize, FinalizeCheckpoint) and finalize.target_location == TARGET
    assert finalize.metadata.savepoint
    done = c.on_finalized(savepoint.checkpoint_id, TARGET)
    # The user's: no notification (sinks do not commit it), nothing subsumed or discarded.
    assert done == [SnapshotRequestCompleted(savepoint.checkpoint_id, TARGET)]
    assert [x.checkpoint_id for x in c.completed()] == [first.checkpoint_id]
    rows = [r for r in c.stats() if r.savepoint]
    assert rows and rows[0].status == checkpoint_pb2.CheckpointStats.COMPLETED


def test_savepoint_waits_for_a_checkpoint_in_progress_and_holds_periodic_ones() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    first = trigger(c, clock)
    assert c.on_snapshot_request(savepoint_options()) == []
    # Queued: due at once, triggered as soon as the checkpoint in progress completes.
    actions = complete(c, first.checkpoint_id)
    savepoint = only(actions, TriggerCheckpoint)
    assert isinstance(savepoint, TriggerCheckpoint) and savepoint.options.savepoint
    clock.advance(5000)
    assert not [a for a in c.on_tick() if isinstance(a, TriggerCheckpoint)]
    ack_all(c, savepoint.checkpoint_id)
    c.on_finalized(savepoint.checkpoint_id, TARGET)
    assert isinstance(trigger(c, clock), TriggerCheckpoint)  # periodic ones go on


def test_a_failed_savepoint_is_reported_and_not_counted() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, tolerable_failures=0)
    savepoint = only(c.on_snapshot_request(savepoint_options()), TriggerCheckpoint)
    assert isinstance(savepoint, TriggerCheckpoint)
    actions = c.on_decline("k0", savepoint.checkpoint_id, checkpoint_pb2.CHECKPOINT_DECLINED,
                           "disk full")
    failed = only(actions, SnapshotRequestFailed)
    assert isinstance(failed, SnapshotRequestFailed) and "disk full" in failed.message
    discard = only(actions, DiscardCheckpoint)
    assert isinstance(discard, DiscardCheckpoint) and discard.location == TARGET
    assert not [a for a in actions if isinstance(a, FailJob)]
    assert c.consecutive_failures == 0


def test_one_savepoint_at_a_time_and_only_while_every_task_runs() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    only(c.on_snapshot_request(savepoint_options()), TriggerCheckpoint)
    busy = only(c.on_snapshot_request(savepoint_options()), SnapshotRequestFailed)
    assert isinstance(busy, SnapshotRequestFailed)
    assert busy.reason == checkpoint_pb2.TOO_MANY_CHECKPOINT_REQUESTS
    other = coordinator(clock)
    other.on_task_failed("s0")
    refused = only(other.on_snapshot_request(savepoint_options()), SnapshotRequestFailed)
    assert isinstance(refused, SnapshotRequestFailed) and "running" in refused.message


def test_stop_with_savepoint_notifies_the_tasks_and_ends_periodic_checkpoints() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    stop = only(c.on_snapshot_request(savepoint_options(terminate=True)), TriggerCheckpoint)
    assert isinstance(stop, TriggerCheckpoint) and stop.options.terminate
    ack_all(c, stop.checkpoint_id)
    actions = c.on_finalized(stop.checkpoint_id, TARGET)
    notify = only(actions, NotifyCheckpointComplete)
    assert isinstance(notify, NotifyCheckpointComplete)
    assert set(notify.tasks) == {"s0", "s1", "k0"}
    clock.advance(60_000)
    assert c.on_tick() == [] and c.next_wakeup_ms() is None


def test_a_failed_stop_resumes_periodic_checkpoints() -> None:
    clock = ManualClock(0)
    c = coordinator(clock, timeout_ms=2000)
    stop = only(c.on_snapshot_request(savepoint_options(terminate=True)), TriggerCheckpoint)
    assert isinstance(stop, TriggerCheckpoint)
    clock.advance(2000)
    expired = c.on_tick()
    assert isinstance(only(expired, SnapshotRequestFailed), SnapshotRequestFailed)
    assert isinstance(only(expired, NotifyCheckpointAborted), NotifyCheckpointAborted)
    periodic = only(expired, TriggerCheckpoint)  # due long ago: at once
    assert isinstance(periodic, TriggerCheckpoint) and not periodic.options.savepoint


def test_a_job_that_stops_running_fails_a_queued_savepoint() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    trigger(c, clock)
    assert c.on_snapshot_request(savepoint_options()) == []
    failed = only(c.on_job_not_running(), SnapshotRequestFailed)
    assert isinstance(failed, SnapshotRequestFailed) and failed.checkpoint_id == 0


def _restored(owned: bool, claimed: bool) -> CompletedCheckpoint:
    return CompletedCheckpoint(40, CheckpointMetadata(checkpoint_id=40), "file:///sp/a",
                               owned=owned, claimed=claimed)


def test_a_snapshot_restored_without_claim_is_never_discarded() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    c.add_completed(_restored(owned=False, claimed=False))
    first = trigger(c, clock)
    assert first.checkpoint_id == 41
    actions = complete(c, first.checkpoint_id)
    assert not [a for a in actions if isinstance(a, DiscardCheckpoint)]
    assert [x.checkpoint_id for x in c.completed()] == [41]
    assert not [a for a in c.on_job_terminal(discard_completed=True)
                if isinstance(a, DiscardCheckpoint) and a.checkpoint_id == 40]


def test_a_claimed_snapshot_is_discarded_where_it_is_once_subsumed() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    c.add_completed(_restored(owned=True, claimed=True))
    first = trigger(c, clock)
    discard = only(complete(c, first.checkpoint_id), DiscardCheckpoint)
    assert isinstance(discard, DiscardCheckpoint)
    assert (discard.checkpoint_id, discard.completed, discard.location) == \
        (40, True, "file:///sp/a")
    assert discard.metadata is not None and discard.metadata.checkpoint_id == 40


def test_a_failover_before_the_first_checkpoint_restores_the_snapshot() -> None:
    clock = ManualClock(0)
    c = coordinator(clock)
    c.add_completed(_restored(owned=False, claimed=False))
    latest = c.latest_completed()
    assert latest is not None and latest.checkpoint_id == 40 and not latest.owned


def test_a_job_failing_after_its_stop_savepoint_restores_it_and_checkpoints_again() -> None:
    """Sinks commit a stop's savepoint: a failure before the job ended must restore it
    (not an older checkpoint, whose data they committed already); it stays the user's."""
    clock = ManualClock(0)
    c = coordinator(clock)
    first = trigger(c, clock)
    complete(c, first.checkpoint_id)
    stop = only(c.on_snapshot_request(savepoint_options(terminate=True)), TriggerCheckpoint)
    assert isinstance(stop, TriggerCheckpoint)
    ack_all(c, stop.checkpoint_id)
    actions = c.on_finalized(stop.checkpoint_id, TARGET)
    latest = c.latest_completed()
    assert latest is not None and latest.checkpoint_id == stop.checkpoint_id
    assert not latest.owned and latest.external_path == TARGET
    discard = only(actions, DiscardCheckpoint)  # the older checkpoint is subsumed
    assert isinstance(discard, DiscardCheckpoint) and discard.checkpoint_id == 1
    c.on_job_not_running()
    c.on_job_running(TASKS, INPUTS)
    for task in TASKS:
        c.on_task_running(task.attempt_id)
    assert isinstance(trigger(c, clock), TriggerCheckpoint)
