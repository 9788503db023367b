"""What the JobMaster records for the REST API as it drives a job, without sockets or
sleeps (the scheduler harness of the BATCH failover tests, with its fake clock): when each
attempt entered each state, and the task failures and registrations of each TaskExecutor."""

from __future__ import annotations

from tests.unit.test_scheduler_batch_failover import CONSUMER, HASH, PRODUCER, Cluster, failure
from weir.proto import common_pb2, jobmaster_pb2


def test_each_attempt_records_when_it_entered_each_state_on_the_jobmasters_clock() -> None:
    cluster = Cluster(HASH, reconsumable=True)
    producer = cluster.scheduler.graph.vertices[PRODUCER][0]
    # Created, scheduled and deployed at start-up (clock 0).
    assert producer.state_timestamps == {common_pb2.CREATED: 0, common_pb2.SCHEDULED: 0,
                                         common_pb2.DEPLOYING: 0}
    cluster.main.run(advance=1.5)
    cluster.report(PRODUCER, 0, common_pb2.RUNNING)
    cluster.main.run(advance=2.0)
    cluster.report(PRODUCER, 0, common_pb2.RUNNING)  # a repeated report changes nothing
    cluster.report(PRODUCER, 0, common_pb2.FINISHED)
    assert producer.state_timestamps[common_pb2.RUNNING] == 1_500
    assert producer.state_timestamps[common_pb2.FINISHED] == 3_500
    [sub] = [s for v in cluster.scheduler.details().vertices if v.vertex_id == PRODUCER
             for s in v.subtasks if s.subtask_index == 0]
    assert dict(sub.state_timestamps) == {common_pb2.CREATED: 0, common_pb2.SCHEDULED: 0,
                                          common_pb2.DEPLOYING: 0, common_pb2.RUNNING: 1_500,
                                          common_pb2.FINISHED: 3_500}


def test_a_new_attempt_starts_its_timestamps_over_and_the_failure_counts_on_its_te() -> None:
    cluster = Cluster(HASH, reconsumable=True)
    cluster.produce()
    cluster.deployments()
    cluster.main.run(advance=1.0)
    cluster.report(CONSUMER, 0, common_pb2.RUNNING)
    where = cluster.where(CONSUMER, 0)
    cluster.main.run(advance=1.0)
    cluster.report(CONSUMER, 0, common_pb2.FAILED, failure())
    cluster.main.run(advance=0.2)
    consumer = cluster.scheduler.graph.vertices[CONSUMER][0]
    assert consumer.attempt_number == 1
    assert common_pb2.RUNNING not in consumer.state_timestamps
    assert consumer.state_timestamps[common_pb2.CREATED] >= 2_000
    infos = {te.resource_id: te for te in (r.to_info() for r in
                                           cluster.resources.task_executors.values())}
    assert infos[where].task_failures == 1
    assert sum(te.task_failures for te in infos.values()) == 1
    assert {te.registrations for te in infos.values()} == {1}


def test_registrations_and_failures_outlive_a_restarted_taskexecutor() -> None:
    cluster = Cluster(HASH, reconsumable=True)
    cluster.resources.note_task_failure("te-0")
    # The process restarts under the same resource id (a new instance, the old one gone).
    cluster.resources.remove("te-0", common_pb2.TASK_EXECUTOR_LOST, "killed")
    cluster.resources.register(jobmaster_pb2.RegisterTaskExecutorRequest(
        resource_id="te-0", rpc_address="te-0:1", data_address="te-0:2", num_slots=1,
        pid=200, instance_id="again"))
    info = cluster.resources.task_executors["te-0"].to_info()
    assert (info.registrations, info.task_failures, info.pid) == (2, 1, 200)
    assert info.registered_at_ms > 0
