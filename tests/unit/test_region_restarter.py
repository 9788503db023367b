"""The region restarter as a state machine: failures in, restart actions out, on a manual
clock, without a network, slots or storage."""

from __future__ import annotations

import pytest

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core.clock import ManualClock
from weir.jobmaster.failover import TaskId, create_failover_strategy
from weir.jobmaster.region_restarter import (
    DeployRestored,
    FailAttempt,
    FailTerminally,
    FindCheckpoint,
    RegionRestarter,
    RestartJob,
    RestartPhase,
    RestartRegion,
    RestartScope,
    StartAttempts,
)
from weir.jobmaster.restart_strategy import (
    FailureRateRestartStrategy,
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    RestartStrategy,
)
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2

DELAY_MS, SLOT_TIMEOUT_MS = 1_000, 30_000
#: Two pipelines source -forward-> sink: regions {(1, 0), (2, 0)} and {(1, 1), (2, 1)}.
FIRST, SECOND = frozenset({(1, 0), (2, 0)}), frozenset({(1, 1), (2, 1)})
EVERY_TASK = FIRST | SECOND


def graph(partitioner: int = common_pb2.FORWARD) -> jobgraph_pb2.JobGraph:
    return jobgraph_pb2.JobGraph(vertices=[
        jobgraph_pb2.JobVertex(id=1, parallelism=2),
        jobgraph_pb2.JobVertex(id=2, parallelism=2, inputs=[
            jobgraph_pb2.JobEdge(source_vertex=1, partitioner=partitioner)])])


def restarter(clock: ManualClock, strategy: RestartStrategy | None = None, *,
              batch: bool = False, partitioner: int = common_pb2.FORWARD
              ) -> RegionRestarter:
    return RegionRestarter(
        "job", strategy or FixedDelayRestartStrategy(10, DELAY_MS, clock),
        create_failover_strategy("region", graph(partitioner), batch), clock, batch=batch,
        slot_timeout_ms=SLOT_TIMEOUT_MS)


def error(message: str = "boom", reason: int = common_pb2.USER_CODE_ERROR
          ) -> common_pb2.ErrorInfo:
    return common_pb2.ErrorInfo(reason=reason, message=message)


def fail_task(r: RegionRestarter, task: TaskId, cause: common_pb2.ErrorInfo | None = None,
              **facts: object) -> list[object]:
    settings: dict[str, object] = {"tasks": EVERY_TASK, "slots_held": True, **facts}
    return list(r.on_task_failure([task], cause or error(), **settings))  # type: ignore[arg-type]


def checkpoint(checkpoint_id: int = 3) -> CompletedCheckpoint:
    return CompletedCheckpoint(checkpoint_id, checkpoint_pb2.CheckpointMetadata(),
                               f"file:///c/job/chk-{checkpoint_id}")


def pass_delay(r: RegionRestarter, clock: ManualClock) -> list[object]:
    wakeup = r.next_wakeup_ms()
    assert wakeup is not None
    clock.advance(wakeup - clock())
    return list(r.on_tick())


def test_a_region_restart_goes_through_its_phases_on_the_clock() -> None:
    clock = ManualClock(10_000)
    r = restarter(clock)
    cause = error()
    assert fail_task(r, (2, 0), cause) == [RestartRegion(FIRST, cause)]
    assert (r.phase, r.scope, r.tasks) == (RestartPhase.CANCELLING, RestartScope.REGION, FIRST)
    assert r.next_wakeup_ms() is None
    assert r.on_tasks_ended({(2, 0)}) == []
    assert r.phase is RestartPhase.CANCELLING, "one of its tasks is still cancelling"
    assert r.on_tasks_ended(FIRST) == []
    assert r.phase is RestartPhase.SCHEDULED
    assert r.next_wakeup_ms() == 11_000
    clock.advance(999)
    assert r.on_tick() == []
    assert r.restarts == 0
    clock.advance(1)
    assert r.on_tick() == [StartAttempts(RestartScope.REGION, FIRST), FindCheckpoint()]
    assert (r.phase, r.restarts) == (RestartPhase.RESTORING, 1)
    restored = checkpoint()
    assert r.on_checkpoint_found(restored, had_checkpoints=True) == [
        DeployRestored(RestartScope.REGION, FIRST, restored)]
    assert r.phase is RestartPhase.DEPLOYING
    assert r.next_wakeup_ms() == 11_000 + SLOT_TIMEOUT_MS
    r.on_region_deployed()
    assert (r.phase, r.next_wakeup_ms(), r.in_progress) == (RestartPhase.IDLE, None, False)
    assert list(r.causes) == [cause]


def test_a_restarted_region_without_slots_fails_the_attempt_after_the_slot_timeout() -> None:
    clock = ManualClock(0)
    r = restarter(clock)
    fail_task(r, (1, 1))
    r.on_tasks_ended(SECOND)
    pass_delay(r, clock)
    r.on_checkpoint_found(None)
    clock.advance(SLOT_TIMEOUT_MS - 1)
    assert r.on_tick() == []
    clock.advance(1)
    (action,) = r.on_tick()
    assert isinstance(action, FailAttempt)
    assert action.error.reason == common_pb2.NO_RESOURCES
    assert "slot.request.timeout" in action.error.message


def test_a_failure_during_a_streaming_region_restart_fails_the_whole_attempt() -> None:
    clock = ManualClock(0)
    r = restarter(clock)
    fail_task(r, (2, 0))
    second = error("again")
    assert fail_task(r, (2, 1), second) == [FailAttempt(second)]
    # The adapter fails the attempt: the job restarts whole, overtaking the region restart.
    assert r.on_job_failure(second, EVERY_TASK) == [RestartJob(second)]
    assert (r.phase, r.scope, r.tasks) == (RestartPhase.CANCELLING, RestartScope.JOB,
                                          EVERY_TASK)
    assert r.on_tasks_ended(FIRST) == []
    assert r.on_tasks_ended(EVERY_TASK) == []
    assert pass_delay(r, clock) == [StartAttempts(RestartScope.JOB, EVERY_TASK),
                                    FindCheckpoint()]
    assert r.on_checkpoint_found(None) == [DeployRestored(RestartScope.JOB, EVERY_TASK, None)]
    assert r.phase is RestartPhase.IDLE, "a whole job's restart is done once it resumes"
    assert r.restarts == 1
    assert list(r.causes) == [error(), second]


def test_a_failure_that_reaches_every_task_fails_the_attempt() -> None:
    r = restarter(ManualClock(0), partitioner=common_pb2.HASH)  # one region
    cause = error()
    assert fail_task(r, (1, 0), cause) == [FailAttempt(cause)]
    assert r.phase is RestartPhase.IDLE


@pytest.mark.parametrize("facts", [{"slots_held": False}, {"running": False}])
def test_a_job_still_starting_or_restarting_fails_its_attempt(facts: dict[str, bool]) -> None:
    r = restarter(ManualClock(0))
    cause = error()
    assert fail_task(r, (2, 0), cause, **facts) == [FailAttempt(cause)]


@pytest.mark.parametrize("when", ["cancelling", "scheduled"])
def test_a_batch_failure_during_a_region_restart_joins_it(when: str) -> None:
    clock = ManualClock(0)
    r = restarter(clock, batch=True)  # BATCH: every subtask is a region of its own
    fail_task(r, (2, 0))
    if when == "scheduled":
        r.on_tasks_ended({(2, 0)})
        assert r.phase is RestartPhase.SCHEDULED
    cause = error("again")
    assert fail_task(r, (2, 1), cause) == [RestartRegion(frozenset({(2, 0), (2, 1)}), cause)]
    assert r.phase is RestartPhase.CANCELLING and r.next_wakeup_ms() is None
    r.on_tasks_ended({(2, 0), (2, 1)})
    assert pass_delay(r, clock)[0] == StartAttempts(RestartScope.REGION,
                                                    frozenset({(2, 0), (2, 1)}))
    assert r.restarts == 1, "the joined failures make one restart"


def test_no_restart_left_fails_the_job_saying_why() -> None:
    clock = ManualClock(0)
    r = restarter(clock, FixedDelayRestartStrategy(1, DELAY_MS, clock))
    fail_task(r, (2, 0))
    r.on_tasks_ended(FIRST)
    pass_delay(r, clock)
    r.on_checkpoint_found(None)
    r.on_region_deployed()
    cause = error("second")
    (action,) = fail_task(r, (2, 1), cause)
    assert isinstance(action, FailTerminally) and action.recoverable
    assert action.error.message == (
        "second (1 restart(s); restart strategy fixed-delay allows 1 restart(s) "
        "(restart-strategy.fixed-delay.attempts) and they are used up)")
    assert cause.message == "second", "the reported failure itself is left alone"
    assert r.phase is RestartPhase.IDLE


def test_without_a_restart_strategy_the_first_failure_fails_the_job_as_it_is() -> None:
    r = restarter(ManualClock(0), NoRestartStrategy())
    cause = error()
    assert r.on_job_failure(cause, EVERY_TASK) == [FailTerminally(cause)]


def test_failure_rate_counts_failures_within_its_interval_on_the_clock() -> None:
    clock = ManualClock(0)
    r = restarter(clock, FailureRateRestartStrategy(1, interval_ms=60_000, delay_ms=0,
                                                    clock=clock))
    assert isinstance(r.on_job_failure(error(), EVERY_TASK)[0], RestartJob)
    clock.advance(1_000)
    assert isinstance(r.on_job_failure(error(), EVERY_TASK)[0], FailTerminally)
    clock.advance(60_000)
    assert isinstance(r.on_job_failure(error(), EVERY_TASK)[0], RestartJob)


def test_an_unreachable_storage_is_tried_again_after_the_delay() -> None:
    clock = ManualClock(0)
    r = restarter(clock, FixedDelayRestartStrategy(2, DELAY_MS, clock))
    fail_task(r, (2, 0))
    r.on_tasks_ended(FIRST)
    pass_delay(r, clock)
    outage = OSError("connection refused")
    assert r.on_checkpoint_found(None, unreachable=outage) == []
    assert r.phase is RestartPhase.RESTORING
    assert r.next_wakeup_ms() == clock() + DELAY_MS
    assert pass_delay(r, clock) == [FindCheckpoint()], "a retry starts no new attempts"
    assert r.restarts == 1
    (action,) = r.on_checkpoint_found(None, unreachable=outage)
    assert isinstance(action, FailTerminally), "each retry counted as a failure: 3 > 2 attempts"
    assert action.error.reason == common_pb2.STATE_RESTORE_FAILED
    assert "cannot reach the checkpoint storage" in action.error.message


def test_no_usable_retained_checkpoint_fails_the_job_whatever_the_strategy() -> None:
    clock = ManualClock(0)
    r = restarter(clock)
    r.on_job_failure(error(), EVERY_TASK)
    r.on_tasks_ended(EVERY_TASK)
    pass_delay(r, clock)
    (action,) = r.on_checkpoint_found(None, had_checkpoints=True,
                                      problems=["chk-3 is missing a file"])
    assert isinstance(action, FailTerminally) and not action.recoverable
    assert action.error.message == "no retained checkpoint can be restored: " \
                                   "chk-3 is missing a file"


def test_a_lookup_overtaken_by_a_cancellation_is_ignored() -> None:
    clock = ManualClock(0)
    r = restarter(clock)
    fail_task(r, (2, 0))
    r.on_tasks_ended(FIRST)
    pass_delay(r, clock)
    r.on_job_stopped()
    assert r.on_checkpoint_found(checkpoint()) == []
    assert r.next_wakeup_ms() is None


def test_a_user_code_failure_becomes_the_root_cause_of_a_lost_connection() -> None:
    clock = ManualClock(0)
    r = restarter(clock)
    transport = error("connection reset", common_pb2.REMOTE_TRANSPORT)
    r.on_job_failure(transport, EVERY_TASK)
    user = error("ValueError: x", common_pb2.USER_CODE_ERROR)
    root = r.root_cause(transport, user, failing=False)
    assert root is not None and root.message == "ValueError: x"
    assert list(r.causes) == [root]
    assert r.root_cause(root, error("other"), failing=False) is None
    failing = r.root_cause(transport, user, failing=True)
    assert failing is not None and failing.message.startswith("ValueError: x (0 restart(s); ")


def test_a_lost_task_executor_becomes_the_root_cause_of_a_lost_connection() -> None:
    clock = ManualClock(0)
    r = restarter(clock)
    transport = error("connection reset", common_pb2.REMOTE_TRANSPORT)
    r.on_job_failure(transport, EVERY_TASK)
    lost = error("TaskExecutor te-1 was lost", common_pb2.TASK_EXECUTOR_LOST)
    root = r.root_cause(transport, lost, failing=False)
    assert root is not None and root.reason == common_pb2.TASK_EXECUTOR_LOST
    assert list(r.causes) == [root]
    # A lost TaskExecutor does not replace a failure that is itself a cause.
    user = error("ValueError: x", common_pb2.USER_CODE_ERROR)
    assert r.root_cause(user, lost, failing=False) is None
