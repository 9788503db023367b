"""Rescales and updates as a state machine: requests, checkpoints, cancellations and task
reports in, actions out, on a manual clock."""

from __future__ import annotations

import pytest

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core.clock import ManualClock
from weir.core.errors import UserError
from weir.jobmaster.change_process import (
    CancelTasks,
    ChangeCompleted,
    ChangeFailed,
    ChangeKind,
    ChangePhase,
    ChangeProcess,
    ChangeRefused,
    DeployChange,
    JobFacts,
    TakeCheckpoint,
)
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2

STEADY = JobFacts(checkpointing=True, steady=True, slots_held=2, free_slots=0)


def two_pipelines(parallelism: int = 2, code: str = "code1") -> jobgraph_pb2.JobGraph:
    """Vertices 1 -> 2 and 3 -> 4: two regions (connected components) per pipeline."""
    graph = jobgraph_pb2.JobGraph(job_id="job")
    for vid in range(1, 5):
        vertex = graph.vertices.add(
            id=vid, name=f"v{vid}", parallelism=parallelism if vid < 3 else 2,
            max_parallelism=128, operator_uids=[f"op{vid}"],
            operator_fingerprints=[code if vid == 1 else f"code{vid}"])
        if vid in (2, 4):
            vertex.inputs.add(source_vertex=vid - 1, partitioner=common_pb2.HASH)
    return graph


def checkpoint(checkpoint_id: int = 5) -> CompletedCheckpoint:
    return CompletedCheckpoint(checkpoint_id, checkpoint_pb2.CheckpointMetadata(),
                               f"file:///c/job/chk-{checkpoint_id}")


def started(clock: ManualClock, kind: ChangeKind = ChangeKind.RESCALE,
            new: jobgraph_pb2.JobGraph | None = None, *, batch: bool = False
            ) -> ChangeProcess:
    """A change that took its checkpoint and cancels its tasks."""
    process = ChangeProcess("job", clock, batch=batch)
    restarted = ["op1"] if kind is ChangeKind.UPDATE else []
    assert process.request(kind, new or two_pipelines(parallelism=1), two_pipelines(),
                           restarted, STEADY) == [TakeCheckpoint()]
    assert process.on_checkpointed(checkpoint(), None) == [CancelTasks(every_task=False)]
    assert process.phase is ChangePhase.CANCELLING
    return process


@pytest.mark.parametrize(("job", "why"), [
    (JobFacts(checkpointing=False, steady=True, slots_held=2, free_slots=0),
     "job job takes no checkpoints, and a rescale restores one"),
    (JobFacts(checkpointing=True, steady=False, slots_held=2, free_slots=0),
     "job job is not running steadily"),
    (JobFacts(checkpointing=True, steady=True, slots_held=2, free_slots=1),
     "the job would need 4 slots; it holds 2 and the cluster has 1 free"),
])
def test_a_change_that_cannot_work_is_refused(job: JobFacts, why: str) -> None:
    process = ChangeProcess("job", ManualClock(0), batch=False)
    (action,) = process.request(ChangeKind.RESCALE, two_pipelines(parallelism=4),
                                two_pipelines(), [], job)
    assert isinstance(action, ChangeRefused) and action.message.startswith(why)
    assert process.change is None


def test_a_second_change_is_refused_and_the_first_goes_on() -> None:
    process = started(ManualClock(0))
    (action,) = process.request(ChangeKind.RESCALE, two_pipelines(), two_pipelines(), [],
                                STEADY)
    assert isinstance(action, ChangeRefused)
    assert process.phase is ChangePhase.CANCELLING


def test_a_failed_checkpoint_leaves_the_job_untouched() -> None:
    process = ChangeProcess("job", ManualClock(0), batch=False)
    process.request(ChangeKind.RESCALE, two_pipelines(1), two_pipelines(), [], STEADY)
    assert process.on_checkpointed(None, "checkpoint 5 expired") == [ChangeFailed(
        "the rescale was not made, the job runs on: checkpoint 5 expired")]
    assert process.change is None


def test_state_the_new_graph_cannot_take_refuses_the_change_before_cancelling() -> None:
    def check(metadata: checkpoint_pb2.CheckpointMetadata) -> None:
        raise UserError("operator op9 has state and is gone")

    process = ChangeProcess("job", ManualClock(0), batch=False)
    process.request(ChangeKind.UPDATE, two_pipelines(), two_pipelines(), [], STEADY, check)
    assert process.on_checkpointed(checkpoint(), None) == [ChangeFailed(
        "the update was refused, the job runs on: operator op9 has state and is gone")]


def test_a_rescale_is_made_and_its_downtime_measured_on_the_clock() -> None:
    clock = ManualClock(50_000)
    process = started(clock)
    clock.advance(300)
    (deploy,) = process.on_cancelled(all_finished=False)
    assert isinstance(deploy, DeployChange)
    assert (deploy.checkpoint.checkpoint_id, deploy.keep, deploy.down_since) == (
        5, frozenset(), 50_000)
    assert [v.parallelism for v in deploy.graph.vertices] == [1, 1, 2, 2]
    assert process.phase is ChangePhase.DEPLOYING
    clock.advance(900)
    (done,) = process.on_running()
    assert isinstance(done, ChangeCompleted)
    assert (done.record.kind, done.record.checkpoint_id, done.record.downtime_ms,
            done.record.timestamp_ms) == ("rescale", 5, 1_200, 51_200)
    assert done.graph is deploy.graph
    assert process.change is None


def test_an_update_keeps_the_regions_it_does_not_change() -> None:
    process = started(ManualClock(0), ChangeKind.UPDATE, two_pipelines(code="code1b"))
    assert process.keep == frozenset({3, 4})
    (deploy,) = process.on_cancelled(all_finished=False)
    assert isinstance(deploy, DeployChange) and deploy.keep == frozenset({3, 4})
    (done,) = process.on_running()
    assert isinstance(done, ChangeCompleted) and list(done.record.restarted_operators) == [
        "op1"]


def test_a_batch_update_keeps_nothing() -> None:
    process = started(ManualClock(0), ChangeKind.UPDATE, two_pipelines(code="code1b"),
                      batch=True)
    assert process.keep == frozenset()


def test_a_failed_task_the_update_left_running_makes_it_restart_every_task() -> None:
    process = started(ManualClock(0), ChangeKind.UPDATE, two_pipelines(code="code1b"))
    assert process.on_task_failure({4}, common_pb2.ErrorInfo(message="boom")) == [
        CancelTasks(every_task=True)]
    assert process.keep == frozenset()
    assert process.phase is ChangePhase.CANCELLING, "the failure is the change's"


def test_failures_while_cancelling_are_part_of_the_change() -> None:
    process = started(ManualClock(0))
    assert process.on_task_failure({1}, common_pb2.ErrorInfo(message="cancelled")) == []
    assert process.phase is ChangePhase.CANCELLING


def test_a_failure_while_checkpointing_is_left_to_failover() -> None:
    process = ChangeProcess("job", ManualClock(0), batch=False)
    process.request(ChangeKind.RESCALE, two_pipelines(1), two_pipelines(), [], STEADY)
    assert process.on_task_failure({1}, common_pb2.ErrorInfo(message="boom")) == []
    assert process.phase is ChangePhase.CHECKPOINTING


def test_a_changed_job_that_fails_to_start_is_rolled_back() -> None:
    process = started(ManualClock(0))
    process.on_cancelled(all_finished=False)
    error = common_pb2.ErrorInfo(message="ValueError: bad", task="v2 (1/1)")
    assert process.on_task_failure({2}, error) == [CancelTasks(every_task=False)]
    assert process.phase is ChangePhase.CANCELLING
    (deploy,) = process.on_cancelled(all_finished=False)
    assert isinstance(deploy, DeployChange)
    assert deploy.graph == two_pipelines(), "the old graph runs again"
    assert deploy.checkpoint.checkpoint_id == 5
    assert process.on_running() == [ChangeFailed(
        "the rescale failed (v2 (1/1): ValueError: bad); the job runs as before, from "
        "checkpoint 5")]


def test_a_failed_rollback_ends_the_change_and_leaves_the_failure_to_failover() -> None:
    process = started(ManualClock(0))
    process.on_cancelled(all_finished=False)
    process.on_task_failure({2}, common_pb2.ErrorInfo(message="first"))
    process.on_cancelled(all_finished=False)
    assert process.on_task_failure({2}, common_pb2.ErrorInfo(message="second")) == [
        ChangeFailed("the rescale did not complete: second")]
    assert process.change is None


def test_a_job_that_finished_while_cancelling_is_not_changed() -> None:
    process = started(ManualClock(0))
    assert process.on_cancelled(all_finished=True) == [
        ChangeFailed("the rescale did not complete: the job finished first")]


def test_abandoning_reports_once() -> None:
    process = started(ManualClock(0))
    assert process.abandon("the job was cancelled") == [
        ChangeFailed("the rescale did not complete: the job was cancelled")]
    assert process.abandon("again") == []
