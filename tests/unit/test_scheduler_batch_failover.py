"""The scheduler's BATCH region failover (and which failure it reports as a job's cause),
driven without sockets or sleeps: TaskExecutors are registrations whose stubs record
deployments and cancellations, the main thread is a queue with a fake clock, and task
state reports are fed in by hand.

Each test checks which subtasks get new attempts, which partitions the redeployed
consumers read, and that the job still finishes."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from weir.core.config import Configuration
from weir.jobmaster.resource_manager import ResourceManager
from weir.jobmaster.scheduler import JobScheduler
from weir.proto import common_pb2, jobgraph_pb2, jobmaster_pb2
from weir.shuffle.api import PartitionDescriptor, ProducerDescriptor, ShuffleMaster

FORWARD, HASH = common_pb2.FORWARD, common_pb2.HASH
PRODUCER, CONSUMER = 1, 2


class FakeMain:
    """The JobMaster's main thread: submitted functions run in order when ``run`` is
    called; scheduled ones when the fake clock passes their time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[Callable[[], Any]] = []
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def submit(self, fn: Callable[[], Any], timeout: float = 10.0) -> None:
        self._queue.append(fn)

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (self.now + delay, next(self._order), fn))

    def run(self, advance: float = 0.0) -> None:
        """Run what is queued, then advance the clock by ``advance`` running due timers."""
        until = self.now + advance
        while True:
            while self._queue:
                self._queue.pop(0)()
            if not self._timers or self._timers[0][0] > until:
                break
            self.now, _, fn = heapq.heappop(self._timers)
            fn()
        self.now = until


class Stub:
    """A TaskExecutor's stub: remembers deployments and cancellations, answers at once."""

    def __init__(self, cluster: Cluster) -> None:
        self.SubmitTask = _Method(lambda tdd: cluster.deployed.append(tdd))
        self.CancelTask = _Method(lambda request: cluster.cancelled.append(request.attempt_id))
        self.ReleaseJob = _Method(lambda request: None)


class _Method:
    def __init__(self, record: Callable[[Any], None]) -> None:
        self._record = record

    def future(self, request: Any, timeout: float | None = None) -> Future[Any]:
        self._record(request)
        done: Future[Any] = Future()
        done.set_result(None)
        return done


class FakeShuffleMaster(ShuffleMaster):
    """Partitions kept by producer; with ``reconsumable`` False they are lost with their
    producer's TaskExecutor, as in the pipelined shuffle."""

    def __init__(self, reconsumable: bool) -> None:
        self.reconsumable = reconsumable
        self.producer_of: dict[str, str] = {}
        self.released: list[str] = []

    def register_partition_with_producer(self, partition: PartitionDescriptor,
                                         producer: ProducerDescriptor) -> bytes:
        self.producer_of[partition.partition_id] = producer.resource_id
        return partition.partition_id.encode()

    def release_partition_externally(self, descriptor: bytes) -> None:
        self.released.append(descriptor.decode())
        self.producer_of.pop(descriptor.decode(), None)

    def is_partition_available(self, partition_id: str) -> bool:
        return partition_id in self.producer_of

    def on_producer_lost(self, resource_id: str) -> list[str]:
        if self.reconsumable:
            return []
        lost = [p for p, r in self.producer_of.items() if r == resource_id]
        for partition_id in lost:
            del self.producer_of[partition_id]
        return lost


class Cluster:
    """One BATCH job PRODUCER (parallelism 2) -edge-> CONSUMER (``consumers``) on one-slot
    TaskExecutors te-0 .. te-<n-1>."""

    def __init__(self, edge: int, reconsumable: bool, taskexecutors: int = 3,
                 consumers: int = 2, config: dict[str, str] | None = None) -> None:
        self.deployed: list[jobgraph_pb2.TaskDeploymentDescriptor] = []
        self.cancelled: list[str] = []
        self.main = FakeMain()
        self.shuffle = FakeShuffleMaster(reconsumable)
        self.ended: list[int] = []
        self.resources = ResourceManager(
            None, heartbeat_timeout=30.0, on_lost=self._lost,
            on_slots_available=lambda: self.main.submit(self._try_allocate),
            clock=lambda: self.main.now, connect=lambda address, token: (_Channel(), Stub(self)))
        graph = jobgraph_pb2.JobGraph(job_id="job", name="batch", vertices=[
            jobgraph_pb2.JobVertex(id=PRODUCER, name="produce", parallelism=2,
                                   max_parallelism=128),
            jobgraph_pb2.JobVertex(id=CONSUMER, name="consume", parallelism=consumers,
                                   max_parallelism=128,
                                   inputs=[jobgraph_pb2.JobEdge(source_vertex=PRODUCER,
                                                                partitioner=edge)])])
        config = Configuration.from_pairs({
            "execution.runtime-mode": "BATCH", "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "100 ms", **(config or {})})
        self.scheduler = JobScheduler(graph, self.resources, self.shuffle,
                                      self.main, config,  # type: ignore[arg-type]
                                      lambda s: self.ended.append(s.graph.status),
                                      clock=lambda: round(self.main.now * 1000))
        for i in range(taskexecutors):
            self.resources.register(jobmaster_pb2.RegisterTaskExecutorRequest(
                resource_id=f"te-{i}", rpc_address=f"te-{i}:1", data_address=f"te-{i}:2",
                num_slots=1, pid=100 + i, instance_id=f"i{i}"))
        self.scheduler.start()
        self.main.run()

    def _try_allocate(self) -> None:
        self.scheduler.try_allocate()

    def _lost(self, resource_id: str, reason: int, message: str) -> None:
        self.shuffle.on_producer_lost(resource_id)
        self.scheduler.on_task_executor_lost(resource_id, reason, message)

    # -- driving ------------------------------------------------------------------------

    def attempt(self, vertex: int, subtask: int) -> str:
        return self.scheduler.graph.vertices[vertex][subtask].attempt_id

    def where(self, vertex: int, subtask: int) -> str:
        return self.scheduler.graph.vertices[vertex][subtask].resource_id

    def report(self, vertex: int, subtask: int, state: int,
               error: common_pb2.ErrorInfo | None = None) -> None:
        update = jobmaster_pb2.TaskExecutionStateUpdate(
            job_id="job", attempt_id=self.attempt(vertex, subtask), state=state, error=error)
        self.scheduler.on_task_state(update)
        self.main.run()

    def run_and_finish(self, vertex: int, subtask: int) -> None:
        self.report(vertex, subtask, common_pb2.RUNNING)
        self.report(vertex, subtask, common_pb2.FINISHED)

    def confirm_cancellations(self) -> None:
        """Every cancelled attempt reports CANCELED; then the restart delay passes."""
        for attempt_id in self.cancelled:
            self.scheduler.on_task_state(jobmaster_pb2.TaskExecutionStateUpdate(
                job_id="job", attempt_id=attempt_id, state=common_pb2.CANCELED))
        self.cancelled.clear()
        self.main.run(advance=0.2)

    def deployments(self) -> list[tuple[int, int, int]]:
        """(vertex, subtask, attempt number) deployed since the last call."""
        out = [(t.vertex_id, t.subtask_index, t.attempt_number) for t in self.deployed]
        self.deployed.clear()
        return out

    def inputs_of_last(self, vertex: int, subtask: int) -> list[str]:
        tdd = next(t for t in reversed(self.deployed)
                   if (t.vertex_id, t.subtask_index) == (vertex, subtask))
        return sorted(c.shuffle_descriptor.decode() for g in tdd.input_gates
                      for c in g.channels)

    def produce(self) -> list[str]:
        """Run the producers to the end; returns their partition ids."""
        assert self.deployments() == [(PRODUCER, 0, 0), (PRODUCER, 1, 0)]
        for i in range(2):
            self.run_and_finish(PRODUCER, i)
        return sorted(self.shuffle.producer_of)


class _Channel:
    def close(self) -> None:
        pass


def failure(reason: int = common_pb2.USER_CODE_ERROR, partition_id: str = "") -> (
        common_pb2.ErrorInfo):
    return common_pb2.ErrorInfo(reason=reason, message="boom", partition_id=partition_id)


def test_a_failed_consumer_rereads_the_finished_producers_partitions() -> None:
    cluster = Cluster(HASH, reconsumable=True)
    partitions = cluster.produce()
    assert cluster.deployments() == [(CONSUMER, 0, 0), (CONSUMER, 1, 0)]
    cluster.report(CONSUMER, 0, common_pb2.RUNNING)
    cluster.report(CONSUMER, 1, common_pb2.RUNNING)
    cluster.report(CONSUMER, 0, common_pb2.FAILED, failure())
    cluster.main.run(advance=0.2)
    assert cluster.deployments() == [(CONSUMER, 0, 1)]
    assert sorted(cluster.shuffle.producer_of) == partitions, "producer output released"
    cluster.run_and_finish(CONSUMER, 0)
    cluster.run_and_finish(CONSUMER, 1)
    assert cluster.ended == [common_pb2.JOB_FINISHED]
    assert cluster.scheduler.restarts == 1


def test_the_restarted_consumer_is_wired_to_the_same_partitions() -> None:
    cluster = Cluster(HASH, reconsumable=True)
    partitions = cluster.produce()
    cluster.report(CONSUMER, 1, common_pb2.RUNNING)
    cluster.report(CONSUMER, 1, common_pb2.FAILED, failure())
    cluster.main.run(advance=0.2)
    assert cluster.inputs_of_last(CONSUMER, 1) == partitions


def test_an_unreadable_partition_restarts_its_producer_and_its_readers_only() -> None:
    cluster = Cluster(HASH, reconsumable=True)
    cluster.produce()
    cluster.deployments()
    kept = cluster.attempt(PRODUCER, 1)
    broken = next(p for p in cluster.shuffle.producer_of
                  if p.startswith(cluster.attempt(PRODUCER, 0)))
    cluster.report(CONSUMER, 0, common_pb2.RUNNING)
    cluster.report(CONSUMER, 1, common_pb2.RUNNING)
    cluster.report(CONSUMER, 0, common_pb2.FAILED,
                   failure(common_pb2.PARTITION_NOT_FOUND, broken))
    # Consumer 1 reads the broken partition too: it is cancelled, then everything waits for
    # producer 0 to run again.
    assert cluster.cancelled == [cluster.attempt(CONSUMER, 1)]
    cluster.confirm_cancellations()
    assert cluster.deployments() == [(PRODUCER, 0, 1)]
    assert broken in cluster.shuffle.released
    cluster.run_and_finish(PRODUCER, 0)
    assert cluster.deployments() == [(CONSUMER, 0, 1), (CONSUMER, 1, 1)]
    assert cluster.attempt(PRODUCER, 1) == kept
    for i in range(2):
        cluster.run_and_finish(CONSUMER, i)
    assert cluster.ended == [common_pb2.JOB_FINISHED]


def test_partitions_read_once_rerun_the_producers_of_a_restarted_consumer() -> None:
    # FORWARD: consumer i reads producer i only, so one pair restarts, not the job.
    cluster = Cluster(FORWARD, reconsumable=False)
    cluster.produce()
    cluster.deployments()
    kept = (cluster.attempt(PRODUCER, 1), cluster.attempt(CONSUMER, 1))
    cluster.report(CONSUMER, 0, common_pb2.RUNNING)
    cluster.report(CONSUMER, 1, common_pb2.RUNNING)
    cluster.report(CONSUMER, 0, common_pb2.FAILED, failure())
    cluster.main.run(advance=0.2)
    assert cluster.deployments() == [(PRODUCER, 0, 1)]
    cluster.run_and_finish(PRODUCER, 0)
    assert cluster.deployments() == [(CONSUMER, 0, 1)]
    assert (cluster.attempt(PRODUCER, 1), cluster.attempt(CONSUMER, 1)) == kept


def test_a_lost_taskexecutor_reruns_a_finished_producer_whose_output_is_still_needed() -> None:
    # Pipelined partitions live in their TaskExecutor. The three consumers wait for a third
    # slot, so nothing fails: the producer reruns because its output is still to be read.
    cluster = Cluster(HASH, reconsumable=False, taskexecutors=2, consumers=3)
    cluster.produce()
    assert cluster.deployments() == []
    kept = cluster.attempt(PRODUCER, 1)
    cluster.resources.remove(cluster.where(PRODUCER, 0), common_pb2.TASK_EXECUTOR_LOST,
                             "gone")
    cluster.main.run(advance=0.2)
    assert cluster.deployments() == [(PRODUCER, 0, 1)]
    assert cluster.attempt(PRODUCER, 1) == kept, "an unread partition was produced again"
    cluster.run_and_finish(PRODUCER, 0)
    assert cluster.deployments() == []  # still one slot short
    assert [ev.attempt_number for ev in cluster.scheduler.graph.vertices[CONSUMER]] == [1] * 3


def test_losing_output_that_finished_consumers_read_reruns_nothing() -> None:
    cluster = Cluster(FORWARD, reconsumable=False)
    cluster.produce()
    cluster.deployments()
    cluster.run_and_finish(CONSUMER, 0)
    cluster.report(CONSUMER, 1, common_pb2.RUNNING)
    victim = cluster.where(PRODUCER, 0)
    assert victim not in (cluster.where(PRODUCER, 1), cluster.where(CONSUMER, 1))
    cluster.resources.remove(victim, common_pb2.TASK_EXECUTOR_LOST, "gone")
    cluster.main.run(advance=0.2)
    assert cluster.deployments() == [] and cluster.cancelled == []
    cluster.report(CONSUMER, 1, common_pb2.FINISHED)
    assert cluster.ended == [common_pb2.JOB_FINISHED]
    assert cluster.scheduler.restarts == 0


@pytest.mark.parametrize("second", ["while cancelling", "while waiting to restart"])
def test_failures_during_a_batch_restart_join_it(second: str) -> None:
    cluster = Cluster(HASH, reconsumable=True)
    cluster.produce()
    cluster.deployments()
    cluster.report(CONSUMER, 0, common_pb2.RUNNING)
    cluster.report(CONSUMER, 1, common_pb2.RUNNING)
    cluster.scheduler.on_task_state(jobmaster_pb2.TaskExecutionStateUpdate(
        job_id="job", attempt_id=cluster.attempt(CONSUMER, 0), state=common_pb2.FAILED,
        error=failure()))
    if second == "while waiting to restart":
        cluster.main.run()  # the restart is scheduled, its delay not passed
    cluster.report(CONSUMER, 1, common_pb2.FAILED, failure())
    cluster.main.run(advance=0.5)
    assert sorted(cluster.deployments()) == [(CONSUMER, 0, 1), (CONSUMER, 1, 1)]
    assert cluster.scheduler.restarts == 1
    for i in range(2):
        cluster.run_and_finish(CONSUMER, i)
    assert cluster.ended == [common_pb2.JOB_FINISHED]


def test_the_cause_is_the_user_code_failure_not_a_consumers_lost_connection() -> None:
    """STREAMING, no restarts: the consumer reports its broken connection before the
    producer reports the user-code failure that broke it (it is being cancelled by then);
    the job's cause is the producer's failure."""
    cluster = Cluster(HASH, reconsumable=False, config={
        "execution.runtime-mode": "STREAMING", "restart-strategy.type": "none"})
    for vertex in (PRODUCER, CONSUMER):
        for subtask in range(2):
            cluster.report(vertex, subtask, common_pb2.RUNNING)
    cluster.report(CONSUMER, 0, common_pb2.FAILED, common_pb2.ErrorInfo(
        reason=common_pb2.REMOTE_TRANSPORT, message="RemoteTransportError: connection reset"))
    assert cluster.scheduler.graph.failure.reason == common_pb2.REMOTE_TRANSPORT
    cluster.report(PRODUCER, 1, common_pb2.FAILED, common_pb2.ErrorInfo(
        reason=common_pb2.USER_CODE_ERROR, message="ValueError: x (at job.py:4 in parse)"))
    cluster.confirm_cancellations()
    failure = cluster.scheduler.graph.failure
    assert (failure.reason, failure.message) == (
        common_pb2.USER_CODE_ERROR, "ValueError: x (at job.py:4 in parse)")
    assert cluster.ended == [common_pb2.JOB_FAILED]
