"""Deploying a job's subtasks: the decisions, without I/O.

* :func:`local_preferences`: which TaskExecutor each slot should come from (task-local
  recovery prefers the one holding local copies of the restored checkpoint's state);
* :class:`SlotWaits`: how long the job waits for slots (``slot.request.timeout``) and for
  an absent TaskExecutor that holds local state
  (``state.backend.local-recovery.taskexecutor-wait``), on an injected clock;
* :class:`PartitionTable`: the result partitions the current attempts produce, by producer
  attempt and consumer vertex, with their shuffle descriptors;
* :func:`deployment_descriptor`: the ``TaskDeploymentDescriptor`` of one subtask.

The adapter (:class:`~weir.jobmaster.scheduler.JobScheduler`) allocates the slots, registers
partitions with the shuffle master and sends the descriptors.

Example:
    >>> from weir.core.clock import ManualClock
    >>> clock = ManualClock(0)
    >>> waits = SlotWaits("job", clock, slot_timeout_ms=300_000, local_wait_ms=5_000)
    >>> waits.wait_for_local_state(["te-1"]), waits.next_wakeup_ms()
    (True, 5000)
    >>> clock.advance(5_000)
    >>> waits.on_tick(), waits.wait_for_local_state(["te-1"])
    ([RetryAllocation()], False)
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core.clock import Clock
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId, PartitionId, ResourceId
from weir.jobmaster.execution_graph import ExecutionGraph, ExecutionVertex
from weir.jobmaster.task_restore import task_restore
from weir.proto import common_pb2, jobgraph_pb2

log = logging.getLogger(__name__)


def local_preferences(graph: jobgraph_pb2.JobGraph, checkpoint_id: CheckpointId,
                      local_state: dict[str, tuple[CheckpointId, ResourceId]],
                      holders: Callable[[str, CheckpointId], Iterable[ResourceId]]
                      ) -> list[ResourceId | None]:
    """Task-local recovery: per slot (pipeline) index, the TaskExecutor that holds local
    copies of that pipeline's state in checkpoint ``checkpoint_id`` (most owners wins;
    None: nobody). Known from completed checkpoints (``local_state``: owner ->
    (checkpoint id, resource id)), or offered at registration (``holders(owner,
    checkpoint_id)``)."""
    preferred: list[ResourceId | None] = []
    for index in range(max(v.parallelism for v in graph.vertices)):
        votes: Counter[ResourceId] = Counter()
        for vertex in graph.vertices:
            if index >= vertex.parallelism:
                continue
            owner = f"{vertex.id}-{index}"
            held = local_state.get(owner)
            if held is not None and held[0] == checkpoint_id:
                votes[held[1]] += 1
            else:
                votes.update(holders(owner, checkpoint_id))
        preferred.append(votes.most_common(1)[0][0] if votes else None)
    return preferred


# -- waiting for slots ------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotRequestTimedOut:
    """The job waited ``slot.request.timeout`` for slots: it fails (NO_RESOURCES)."""

    timeout_ms: int


@dataclass(frozen=True)
class RetryAllocation:
    """The wait for an absent TaskExecutor holding local state ended: allocate again."""


Action = SlotRequestTimedOut | RetryAllocation


class SlotWaits:
    """When a job waiting for slots gives up. Main thread only; I/O-free: fed the
    allocation outcomes, it returns what the clock makes due from :meth:`on_tick`."""

    def __init__(self, job_id: JobId, clock: Clock, *, slot_timeout_ms: int,
                 local_wait_ms: int) -> None:
        self.job_id = job_id
        self._clock = clock
        self.slot_timeout_ms = slot_timeout_ms
        self._local_wait_ms = local_wait_ms
        #: Since when the job waits for slots (None: it does not).
        self.waiting_since: int | None = None
        #: When waiting for slots fails the job (None: no deadline).
        self._deadline: int | None = None
        #: When the wait for local state ends, and whether that was acted on.
        self._local_until: int | None = None
        self._local_retried = False

    def on_job_started(self) -> None:
        """The job (re)starts: nothing waited for yet."""
        self.waiting_since = self._deadline = None
        self._local_until = None
        self._local_retried = False

    def on_waiting(self, needed: int, free: int, *, timed: bool = True) -> None:
        """An allocation of ``needed`` slots found too few (``free``). ``timed``: the job
        fails if it is still waiting ``slot.request.timeout`` after the first such
        allocation (a restarted region has a timeout of its own)."""
        if self.waiting_since is not None:
            return
        self.waiting_since = self._clock()
        if timed:
            self._deadline = self.waiting_since + self.slot_timeout_ms
        log.info("job %s waits for %d free slots (%d free now)", self.job_id, needed, free)

    def on_allocated(self) -> None:
        """An allocation succeeded: the job no longer waits."""
        self.waiting_since = self._deadline = None

    def wait_for_local_state(self, absent: Collection[ResourceId]) -> bool:
        """Whether to hold the (re)start back because TaskExecutors ``absent`` (that hold
        local state) are away: they may be restarting. The wait starts at the first call
        and lasts ``state.backend.local-recovery.taskexecutor-wait``."""
        if not absent or self._local_wait_ms <= 0:
            return False
        now = self._clock()
        if self._local_until is None:
            self._local_until = now + self._local_wait_ms
            log.info("job %s waits up to %.1f s for TaskExecutor(s) %s, which hold its "
                     "local state", self.job_id, self._local_wait_ms / 1000,
                     ", ".join(sorted(absent)))
        return now < self._local_until

    def on_local_state_done(self) -> None:
        """The tasks that waited for local state are deployed."""
        self._local_until = None
        self._local_retried = False

    def next_wakeup_ms(self) -> int | None:
        due = [t for t in (self._deadline, None if self._local_retried else self._local_until)
               if t is not None]
        return min(due, default=None)

    def on_tick(self) -> list[Action]:
        now = self._clock()
        actions: list[Action] = []
        if self._local_until is not None and not self._local_retried and \
                now >= self._local_until:
            self._local_retried = True
            actions.append(RetryAllocation())
        if self._deadline is not None and now >= self._deadline:
            self._deadline = None
            actions.append(SlotRequestTimedOut(self.slot_timeout_ms))
        return actions


# -- partitions and descriptors ---------------------------------------------------------------


class PartitionTable:
    """The result partitions of the current attempts. Main thread only."""

    def __init__(self) -> None:
        #: (producer attempt id, consumer vertex id) -> partition id.
        self.ids: dict[tuple[ExecutionAttemptId, int], PartitionId] = {}
        #: partition id -> shuffle descriptor (from the shuffle master).
        self.descriptors: dict[PartitionId, bytes] = {}
        #: Partitions a consumer reported it could not read (PARTITION_NOT_FOUND).
        self.lost: set[PartitionId] = set()
        #: BATCH: partitions a deployed consumer reads (gone once read, unless the
        #: shuffle master's partitions are reconsumable).
        self.read: set[PartitionId] = set()

    def add(self, attempt_id: ExecutionAttemptId, consumer: int, partition_id: PartitionId,
            descriptor: bytes) -> None:
        self.ids[(attempt_id, consumer)] = partition_id
        self.descriptors[partition_id] = descriptor

    def pop_outputs(self, attempt_id: ExecutionAttemptId, consumers: Iterable[int]
                    ) -> list[bytes]:
        """Forget the partitions attempt ``attempt_id`` produced for ``consumers``; returns
        their descriptors (to release)."""
        popped = []
        for consumer in consumers:
            partition_id = self.ids.pop((attempt_id, consumer), None)
            descriptor = self.descriptors.pop(partition_id, None) \
                if partition_id is not None else None
            if descriptor is not None:
                popped.append(descriptor)
        return popped

    def clear(self) -> list[bytes]:
        """Forget every partition; returns their descriptors (to release)."""
        released = list(self.descriptors.values())
        self.descriptors.clear()
        self.ids.clear()
        self.lost.clear()
        self.read.clear()
        return released


def deployment_descriptor(job_id: JobId, graph: ExecutionGraph, ev: ExecutionVertex,
                          partitions: PartitionTable, *, batch: bool,
                          restored: CompletedCheckpoint | None = None,
                          without_channel_state: bool = False
                          ) -> jobgraph_pb2.TaskDeploymentDescriptor:
    """The descriptor deploying ``ev``: its chain, its output partitions, its input
    gates wired to the producers' partitions (registered in ``partitions``), and what
    it restores from ``restored`` (``without_channel_state``: not its in-flight data)."""
    vertex = ev.job_vertex
    tdd = jobgraph_pb2.TaskDeploymentDescriptor(
        job_id=job_id, job_name=graph.job_graph.name, attempt_id=ev.attempt_id,
        vertex_id=vertex.id, task_name=vertex.name, subtask_index=ev.subtask_index,
        parallelism=vertex.parallelism, max_parallelism=vertex.max_parallelism,
        attempt_number=ev.attempt_number, chain=vertex.chain, source=vertex.source,
        config=graph.job_graph.config, allocation_id=ev.allocation_id,
        operator_names=list(vertex.operator_names),
        operator_uids=list(vertex.operator_uids))
    if restored is not None:
        tdd.restore.CopyFrom(task_restore(
            restored.metadata, vertex, ev.subtask_index,
            without_channel_state=without_channel_state, owned=restored.owned))
    for consumer, edge in graph.consumers_of(vertex.id):
        tdd.partitions.add(
            partition_id=partitions.ids[(ev.attempt_id, consumer.id)],
            num_subpartitions=1 if edge.partitioner == common_pb2.FORWARD
            else consumer.parallelism,
            partitioner=edge.partitioner, key_selector=edge.key_selector,
            max_parallelism=consumer.max_parallelism, consumer_vertex=consumer.id,
            blocking=batch, side_output=edge.side_output)
    for edge in vertex.inputs:
        gate = tdd.input_gates.add(input_index=edge.input_index,
                                   source_vertex=edge.source_vertex,
                                   partitioner=edge.partitioner,
                                   key_selector=edge.key_selector,
                                   max_parallelism=vertex.max_parallelism)
        producers = graph.vertices[edge.source_vertex]
        if edge.partitioner == common_pb2.FORWARD:
            pairs = [(producers[ev.subtask_index], 0)]
        else:
            pairs = [(p, ev.subtask_index) for p in producers]
        for producer, subpartition in pairs:
            partition_id = partitions.ids[(producer.attempt_id, vertex.id)]
            gate.channels.add(shuffle_descriptor=partitions.descriptors[partition_id],
                              subpartition=subpartition)
    return tdd
