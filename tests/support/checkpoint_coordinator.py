"""A checkpoint coordinator over a small job, driven by hand: two source subtasks and one
sink subtask, a manual clock, no network and no storage (the coordinator's tests build on
it, split by aspect)."""

from __future__ import annotations

from weir.checkpoint.coordinator import (
    CheckpointCoordinator,
    CheckpointCoordinatorConfiguration,
    FinalizeCheckpoint,
    TaskInfo,
    TriggerCheckpoint,
)
from weir.core.clock import ManualClock
from weir.proto.checkpoint_pb2 import CheckpointTaskMetrics, TaskStateSnapshot

SOURCE = [TaskInfo("s0", 1, 0, "source (1/2)"), TaskInfo("s1", 1, 1, "source (2/2)")]
SINK = [TaskInfo("k0", 2, 0, "sink (1/1)")]
TASKS = SOURCE + SINK
#: Subtask -> the subtasks it reads (the sources read none).
INPUTS = {(2, 0): [(1, 0), (1, 1)]}


def coordinator(clock: ManualClock, **config: object) -> CheckpointCoordinator:
    settings: dict[str, object] = {"interval_ms": 1000, **config}
    c = CheckpointCoordinator("job", CheckpointCoordinatorConfiguration(**settings), clock)  # type: ignore[arg-type]
    c.on_job_running(TASKS, INPUTS)
    for task in TASKS:
        c.on_task_running(task.attempt_id)
    return c


def trigger(c: CheckpointCoordinator, clock: ManualClock) -> TriggerCheckpoint:
    wakeup = c.next_wakeup_ms()
    assert wakeup is not None
    clock.advance(max(0, wakeup - clock()))
    actions = c.on_tick()
    triggers = [a for a in actions if isinstance(a, TriggerCheckpoint)]
    assert len(triggers) == 1, actions
    return triggers[0]


def ack_all(c: CheckpointCoordinator, checkpoint_id: int) -> list[object]:
    actions: list[object] = []
    for task in TASKS:
        actions += c.on_acknowledge(task.attempt_id, checkpoint_id, TaskStateSnapshot(),
                                    CheckpointTaskMetrics(state_size=10))
    return actions


def complete(c: CheckpointCoordinator, checkpoint_id: int) -> list[object]:
    actions = ack_all(c, checkpoint_id)
    assert [type(a) for a in actions] == [FinalizeCheckpoint]
    return c.on_finalized(checkpoint_id, f"file:///c/job/chk-{checkpoint_id}")
