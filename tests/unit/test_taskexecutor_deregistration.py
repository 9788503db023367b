"""A TaskExecutor shutting down deregisters (DisconnectTaskExecutor): the JobMaster removes
it at once and fails over its tasks as for a lost one, with the shutdown as the reason.
The resource manager and the scheduler alone: a manual clock, no sockets, no sleeps."""

from __future__ import annotations

import pytest

from tests.support.resource_manager import ResourceManagerHarness
from tests.unit.test_scheduler_batch_failover import HASH, Cluster
from weir.proto import common_pb2, jobmaster_pb2

PRODUCER, CONSUMER = 1, 2


@pytest.fixture
def manager() -> ResourceManagerHarness:
    return ResourceManagerHarness(timeout_s=60.0)


# -- the resource manager ------------------------------------------------------------------


def test_a_deregistration_removes_the_taskexecutor_at_once_with_its_reason(
        manager: ResourceManagerHarness) -> None:
    record = manager.register(slots=2)
    manager.register(resource_id="te-2", address="127.0.0.1:2000", instance="b")
    assert manager.rm.disconnect(record.resource_id, record.registration_id, "SIGTERM")
    assert manager.lost == [("te-1", common_pb2.TASK_EXECUTOR_LOST,
                             "TaskExecutor te-1 (127.0.0.1:1000) shut down (SIGTERM)")]
    assert manager.rm.get(record.resource_id) is None
    assert manager.channels[0].closed, "the channel to it stays open"
    assert manager.rm.total_slots() == 2, "its slots are still offered"


def test_nothing_more_is_heard_of_a_deregistered_taskexecutor(
        manager: ResourceManagerHarness) -> None:
    record = manager.register()
    manager.rm.disconnect(record.resource_id, record.registration_id, "SIGTERM")
    # Its heartbeat stream may still deliver one, and its silence passes the timeout: it is
    # not lost a second time.
    assert not manager.heartbeat(record.registration_id)
    manager.clock.advance(61_000)
    manager.rm.check_heartbeats()
    manager.rm.remove(record.resource_id, common_pb2.TASK_EXECUTOR_LOST, "stream closed")
    assert len(manager.lost) == 1


def test_a_replaced_registration_cannot_deregister_its_successor(
        manager: ResourceManagerHarness) -> None:
    old = manager.register(instance="a")
    manager.clock.advance(61_000)              # silent: another process takes the id over
    new = manager.register(instance="b", address="127.0.0.1:2000")
    manager.lost.clear()
    assert not manager.rm.disconnect(old.resource_id, old.registration_id, "SIGTERM")
    assert not manager.rm.disconnect("te-unknown", new.registration_id, "SIGTERM")
    assert manager.lost == []
    assert manager.rm.get(new.resource_id) is new


def test_the_same_process_may_register_again_after_deregistering(
        manager: ResourceManagerHarness) -> None:
    record = manager.register(instance="a")
    manager.rm.disconnect(record.resource_id, record.registration_id, "SIGTERM")
    again = manager.register(instance="a")     # e.g. it did not stop after all
    assert again.registration_id != record.registration_id
    assert manager.heartbeat(again.registration_id)


@pytest.mark.parametrize(("reason", "shown"), [
    ("", "no reason given"),
    ("SIGINT\nand more", "SIGINT and more"),
    ("x" * 1000, "x" * 200),
])
def test_the_reason_is_one_short_line(manager: ResourceManagerHarness, reason: str,
                                      shown: str) -> None:
    record = manager.register()
    manager.rm.disconnect(record.resource_id, record.registration_id, reason)
    assert manager.lost[0][2] == f"TaskExecutor te-1 (127.0.0.1:1000) shut down ({shown})"


# -- the scheduler: failover as for a lost TaskExecutor --------------------------------------


def streaming_cluster() -> Cluster:
    """PRODUCER -hash-> CONSUMER, two subtasks each (one pipelined region; subtask i of
    both shares a slot), running on two of five one-slot TaskExecutors."""
    cluster = Cluster(HASH, reconsumable=False, taskexecutors=5,
                      config={"execution.runtime-mode": "STREAMING"})
    assert len(cluster.deployments()) == 4
    for vertex in (PRODUCER, CONSUMER):
        for subtask in (0, 1):
            cluster.report(vertex, subtask, common_pb2.RUNNING)
    assert cluster.scheduler.graph.status == common_pb2.JOB_RUNNING
    return cluster


def deregister(cluster: Cluster, resource_id: str) -> None:
    record = cluster.resources.get(resource_id)  # type: ignore[arg-type]
    assert record is not None
    assert cluster.resources.disconnect(record.resource_id, record.registration_id, "SIGTERM")
    cluster.main.run()


def test_its_tasks_fail_over_once_with_the_shutdown_as_the_cause() -> None:
    cluster = streaming_cluster()
    leaving = cluster.where(CONSUMER, 1)
    tasks = [(v, s) for v in (PRODUCER, CONSUMER) for s in (0, 1)]
    gone = [cluster.attempt(v, s) for v, s in tasks if cluster.where(v, s) == leaving]
    others = [cluster.attempt(v, s) for v, s in tasks if cluster.where(v, s) != leaving]
    assert len(gone) == 2 and len(others) == 2
    deregister(cluster, leaving)
    assert cluster.scheduler.graph.status == common_pb2.JOB_RESTARTING
    # The region's other tasks are cancelled where they run; the leaving TaskExecutor is
    # asked for nothing more.
    assert sorted(cluster.cancelled) == sorted(others)
    # It then cancels its task, which reports so (and a consumer elsewhere may fail on the
    # broken connection): none of it counts as another failure.
    for attempt_id in gone:
        cluster.scheduler.on_task_state(jobmaster_pb2.TaskExecutionStateUpdate(
            job_id="job", attempt_id=attempt_id, state=common_pb2.CANCELED))
    cluster.scheduler.on_task_state(jobmaster_pb2.TaskExecutionStateUpdate(
        job_id="job", attempt_id=others[1], state=common_pb2.FAILED,
        error=common_pb2.ErrorInfo(reason=common_pb2.REMOTE_TRANSPORT, message="reset")))
    cluster.confirm_cancellations()
    assert cluster.scheduler.restarts == 1
    causes = cluster.scheduler.details().restart_causes
    assert [(c.reason, c.message) for c in causes] == [(
        common_pb2.TASK_EXECUTOR_LOST, f"TaskExecutor {leaving} ({leaving}:1) shut down "
                                       "(SIGTERM)")]
    # Redeployed on the TaskExecutors left.
    redeployed = cluster.deployed[:]
    assert len(redeployed) == 4
    assert leaving not in {t.allocation_id.rsplit(":", 1)[0] for t in redeployed}
    for vertex in (PRODUCER, CONSUMER):
        for subtask in (0, 1):
            cluster.report(vertex, subtask, common_pb2.RUNNING)
    assert cluster.scheduler.graph.status == common_pb2.JOB_RUNNING


def test_a_taskexecutor_without_tasks_of_the_job_leaves_it_running() -> None:
    cluster = streaming_cluster()
    busy = {cluster.where(v, s) for v in (PRODUCER, CONSUMER) for s in (0, 1)}
    idle = next(f"te-{i}" for i in range(5) if f"te-{i}" not in busy)
    deregister(cluster, idle)
    assert cluster.scheduler.restarts == 0
    assert cluster.cancelled == []
    assert cluster.scheduler.graph.status == common_pb2.JOB_RUNNING
    assert cluster.resources.total_slots() == 4
