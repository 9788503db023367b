"""The checkpoint coordinator while a bounded job ends (FLIP-147): the tasks wait for a
checkpoint taken after their end of input, so a final checkpoint declined because a task
finished meanwhile is followed at once by the next one, not an interval later."""

from __future__ import annotations

from tests.support.checkpoint_coordinator import coordinator, trigger
from weir.checkpoint.coordinator import NotifyCheckpointAborted, TriggerCheckpoint
from weir.core.clock import ManualClock
from weir.proto import checkpoint_pb2
from weir.proto.checkpoint_pb2 import TaskStateSnapshot


def test_a_final_checkpoint_declined_by_a_finishing_source_is_retaken_at_once() -> None:
    # Checkpoint 1 is pending when both sources read their last record, so the final
    # checkpoint (2) waits for it; each source took its part of 1 after its end of input
    # and finishes once 1 completed, declining 2. The sink still waits for a checkpoint
    # after its own end of input: 3 follows at once, with the sources counted finished.
    clock = ManualClock(0)
    c = coordinator(clock, interval_ms=60_000)
    first = trigger(c, clock)
    assert c.on_end_of_data("s0") == []
    assert c.on_end_of_data("s1") == []            # 1 is still pending
    for task in ("s0", "s1", "k0"):
        c.on_acknowledge(task, first.checkpoint_id, TaskStateSnapshot())
    c.on_finalized(first.checkpoint_id, "file:///c/job/chk-1")
    final = [a for a in c.on_tick() if isinstance(a, TriggerCheckpoint)]
    assert [t.checkpoint_id for t in final] == [2]
    clock.advance(5)
    actions = c.on_task_finished("s0")
    aborted = [a for a in actions if isinstance(a, NotifyCheckpointAborted)]
    assert [(a.checkpoint_id, a.reason) for a in aborted] == [
        (2, checkpoint_pb2.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)]
    again = [a for a in actions if isinstance(a, TriggerCheckpoint)]
    assert [(t.checkpoint_id, t.timestamp_ms, t.tasks) for t in again] == [
        (3, clock(), ("s1",))]
    actions = c.on_task_finished("s1")             # declines 3 as well: 4 at once
    again = [a for a in actions if isinstance(a, TriggerCheckpoint)]
    assert [(t.checkpoint_id, t.tasks) for t in again] == [(4, ("k0",))]
    actions = c.on_acknowledge("k0", 4, TaskStateSnapshot())
    metadata = actions[0].metadata                 # type: ignore[attr-defined]
    assert [(s.vertex_id, s.subtask_index, s.finished) for s in metadata.subtasks] == [
        (2, 0, False), (1, 0, True), (1, 1, True)]
    assert c.consecutive_failures == 0


def test_a_task_finishing_while_the_job_runs_on_does_not_trigger_early() -> None:
    # Only the end of the job is urgent: while a source still reads, the next checkpoint
    # keeps to the interval.
    clock = ManualClock(0)
    c = coordinator(clock, interval_ms=60_000)
    trigger(c, clock)
    actions = c.on_task_finished("s0")
    assert any(isinstance(a, NotifyCheckpointAborted) for a in actions)
    assert not any(isinstance(a, TriggerCheckpoint) for a in actions)
    clock.advance(1000)
    assert not any(isinstance(a, TriggerCheckpoint) for a in c.on_tick())
