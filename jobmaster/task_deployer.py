"""Putting one job's subtasks into slots and taking them out again: the I/O half of
deployment (its decisions are :mod:`weir.jobmaster.deployment`'s).

Main thread only. It allocates slots from the resource manager (task-local state first,
waiting as :class:`~weir.jobmaster.deployment.SlotWaits` says), registers result partitions
with the shuffle master, sends ``SubmitTask`` and ``CancelTask`` RPCs (asynchronously:
their outcomes come back as main-thread work), and gives slots and partitions back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import grpc

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core import options
from weir.core.config import Configuration
from weir.core.ids import ExecutionAttemptId, JobId, PartitionId, ResourceId
from weir.core.rpc import keep_until_done
from weir.jobmaster import options as jm_options
from weir.jobmaster.deployment import (
    PartitionTable,
    SlotWaits,
    deployment_descriptor,
    local_preferences,
)
from weir.jobmaster.execution_graph import ExecutionGraph, ExecutionVertex
from weir.jobmaster.failover import RegionTopology, TaskId
from weir.jobmaster.main_thread import MainThreadExecutor
from weir.jobmaster.resource_manager import ResourceManager, Slot
from weir.proto import common_pb2, taskexecutor_pb2
from weir.shuffle.api import PartitionDescriptor, ProducerDescriptor, ShuffleMaster

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 30.0


def task_id(ev: ExecutionVertex) -> TaskId:
    return (ev.job_vertex.id, ev.subtask_index)


class TaskDeployer:
    """Deploys and cancels the subtasks of one job. ``on_deploy_failed(ev, error)`` is
    called (main thread) when a deployment fails; ``on_cancel_timeout()`` when tasks that
    did not confirm their cancellation in time were given up on."""

    def __init__(self, job_id: JobId, graph: ExecutionGraph, resources: ResourceManager,
                 shuffle_master: ShuffleMaster, main: MainThreadExecutor,
                 config: Configuration, slot_waits: SlotWaits, *, batch: bool,
                 topology: Callable[[], RegionTopology],
                 on_deploy_failed: Callable[[ExecutionVertex, common_pb2.ErrorInfo], None],
                 on_cancel_timeout: Callable[[], None],
                 recover_without_channel_state: int | None = None) -> None:
        self.job_id = job_id
        self._graph = graph
        self._resources = resources
        self._shuffle_master = shuffle_master
        self._main = main
        self._config = config
        self._waits = slot_waits
        self._batch = batch
        self._topology = topology
        self._on_deploy_failed = on_deploy_failed
        self._on_cancel_timeout = on_cancel_timeout
        self._recover_without_channel_state = recover_without_channel_state
        #: STREAMING: the job's slot of each pipeline (subtask index).
        self.slots: list[Slot] = []
        #: BATCH: the slot of each deployed subtask, until it finishes or restarts.
        self._task_slots: dict[TaskId, Slot] = {}
        self.partitions = PartitionTable()
        self._used_task_executors: set[ResourceId] = set()
        #: The checkpoint the attempts deployed from now on restore (None: nothing).
        self.restored: CompletedCheckpoint | None = None

    # -- allocation -----------------------------------------------------------------------

    def deploy_pipelines(self) -> None:
        """STREAMING: a slot per pipeline (task-local state first), then every subtask."""
        preferred = self._local_preferences()
        if self._wait_for_local_state(preferred):
            return
        required = max(v.parallelism for v in self._graph.job_graph.vertices)
        slots = self._resources.allocate(self.job_id, required, self._spread(), preferred)
        if slots is None:
            self._waits.on_waiting(required, self._resources.free_slots())
            return
        self.slots = slots
        self._waits.on_allocated()
        self.deploy(self._graph.all(), lambda ev: slots[ev.subtask_index])

    def deploy_ready_stages(self) -> None:
        """BATCH: the subtasks not deployed yet of the vertices whose inputs all finished,
        a slot each (a vertex's subtasks get theirs together)."""
        graph = self._graph
        for vertex in graph.job_graph.vertices:
            waiting = [ev for ev in graph.vertices[vertex.id] if ev.state == common_pb2.CREATED]
            if not waiting or not all(ev.state == common_pb2.FINISHED for edge in vertex.inputs
                                      for ev in graph.vertices[edge.source_vertex]):
                continue
            slots = self._resources.allocate(self.job_id, len(waiting), self._spread())
            if slots is None:
                self._waits.on_waiting(len(waiting), self._resources.free_slots())
                return
            self._waits.on_allocated()
            for ev, slot in zip(waiting, slots, strict=True):
                self._task_slots[task_id(ev)] = slot
            self.deploy(waiting, lambda ev: self._task_slots[task_id(ev)])

    def region_slots(self, evs: list[ExecutionVertex]) -> bool:
        """STREAMING: whether every subtask of a restarted region has a live slot; a slot
        whose TaskExecutor is gone is replaced (preferring the TaskExecutor holding its
        local state), or the region waits for one (False)."""
        gone = sorted({ev.subtask_index for ev in evs
                       if not self._slot_alive(self.slots[ev.subtask_index])})
        if gone:
            preferred = self._local_preferences()
            wanted = [preferred[i] for i in gone] if preferred else None
            if self._wait_for_local_state(wanted or []):
                return False
            replacements = self._resources.allocate(self.job_id, len(gone), self._spread(),
                                                    wanted)
            if replacements is None:
                # The region restarter's own deadline (slot.request.timeout) applies.
                self._waits.on_waiting(len(gone), self._resources.free_slots(), timed=False)
                return False
            for index, slot in zip(gone, replacements, strict=True):
                self.slots[index] = slot
        self._waits.on_allocated()
        self._waits.on_local_state_done()
        return True

    def _spread(self) -> bool:
        return bool(self._config.get(jm_options.EVENLY_SPREAD_OUT_SLOTS))

    def _local_preferences(self) -> list[ResourceId | None]:
        if self.restored is None:
            return []
        return local_preferences(
            self._graph.job_graph, self.restored.checkpoint_id, self._graph.local_state,
            lambda owner, checkpoint_id: self._resources.holders(self.job_id, owner,
                                                                 checkpoint_id))

    def _wait_for_local_state(self, preferred: Iterable[ResourceId | None]) -> bool:
        absent = {r for r in preferred if r and self._resources.get(r) is None}
        return self._waits.wait_for_local_state(absent)

    def _slot_alive(self, slot: Slot) -> bool:
        """The slot still belongs to a registered TaskExecutor (one that came back under
        the same resource id offers new slots)."""
        record = self._resources.get(slot.resource_id)
        return record is not None and slot.index < len(record.slots) and \
            record.slots[slot.index] is slot

    # -- deployment -----------------------------------------------------------------------

    def deploy(self, deploying: list[ExecutionVertex],
               slot_of: Callable[[ExecutionVertex], Slot]) -> None:
        """Deploy the subtasks ``deploying`` (every subtask of some vertices, or a restarted
        region's), each into ``slot_of(ev)``.

        Output partitions are registered with the shuffle master first; input gates use the
        descriptors of the producers' partitions, registered when those were deployed (or
        now: a region's producers are in the region).
        """
        graph = self._graph
        for ev in deploying:
            slot = slot_of(ev)
            ev.resource_id = slot.resource_id
            ev.allocation_id = slot.allocation_id
            ev.state = common_pb2.SCHEDULED
            self._used_task_executors.add(slot.resource_id)
        for ev in deploying:
            for consumer, edge in graph.consumers_of(ev.job_vertex.id):
                subpartitions = 1 if edge.partitioner == common_pb2.FORWARD else \
                    consumer.parallelism
                partition_id = PartitionId(f"{ev.attempt_id}.{consumer.id}")
                record = self._resources.get(ev.resource_id)
                assert record is not None
                self.partitions.add(
                    ev.attempt_id, consumer.id, partition_id,
                    self._shuffle_master.register_partition_with_producer(
                        PartitionDescriptor(self.job_id, partition_id, subpartitions,
                                            ev.attempt_id),
                        ProducerDescriptor(ev.resource_id, record.data_address)))
        restored = self.restored
        without_channel_state = restored is not None and \
            restored.checkpoint_id == self._recover_without_channel_state
        for ev in deploying:
            if ev.state != common_pb2.SCHEDULED:
                continue  # cancelled by the failover of a deployment before it
            tdd = deployment_descriptor(self.job_id, graph, ev, self.partitions,
                                        batch=self._batch, restored=restored,
                                        without_channel_state=without_channel_state)
            if self._batch:
                inputs = self._topology().inputs_of(task_id(ev))
                self.partitions.read.update(
                    self.partitions.ids[(graph.vertices[v][i].attempt_id, ev.job_vertex.id)]
                    for v, i in sorted(inputs))
            record = self._resources.get(ev.resource_id)
            if record is None:
                self._on_deploy_failed(ev, common_pb2.ErrorInfo(
                    reason=common_pb2.DEPLOYMENT_FAILED, task=ev.name,
                    message=f"TaskExecutor {ev.resource_id} went away before deployment"))
                continue
            ev.state = common_pb2.DEPLOYING
            future = record.stub.SubmitTask.future(tdd, timeout=RPC_TIMEOUT_S)
            keep_until_done(future, self._on_submitted(ev.attempt_id))

    def _on_submitted(self, attempt_id: ExecutionAttemptId
                      ) -> Callable[[grpc.Future[taskexecutor_pb2.TaskAck]], None]:
        """What a finished ``SubmitTask`` call of ``attempt_id`` does (on a gRPC thread):
        hand its outcome to the main thread."""
        def submitted(future: grpc.Future[taskexecutor_pb2.TaskAck]) -> None:
            self._main.submit(lambda: self._deployed(attempt_id, future))
        return submitted

    def _deployed(self, attempt_id: ExecutionAttemptId,
                  future: grpc.Future[taskexecutor_pb2.TaskAck]) -> None:
        ev = self._graph.by_attempt.get(attempt_id)
        if ev is None or ev.is_terminal:
            return
        try:
            future.result()
        except Exception as err:  # gRPC errors and anything else the call raised
            details = err.details() if hasattr(err, "details") else str(err)
            self._on_deploy_failed(ev, common_pb2.ErrorInfo(
                reason=common_pb2.DEPLOYMENT_FAILED, task=ev.name,
                message=f"deploying to {ev.resource_id} failed: {details}"))

    # -- giving back ----------------------------------------------------------------------

    def finished(self, ev: ExecutionVertex) -> None:
        """BATCH: ``ev`` finished; its slot is free (its output stays until read)."""
        slot = self._task_slots.pop(task_id(ev), None)
        if slot is not None:
            self._resources.release_slots([slot])

    def release_tasks(self, evs: Iterable[ExecutionVertex]) -> None:
        """The ended attempts ``evs`` restart: their slots (BATCH) and partitions go."""
        slots = []
        for ev in evs:
            if (slot := self._task_slots.pop(task_id(ev), None)) is not None:
                slots.append(slot)
            self.release_outputs([ev])
        self._resources.release_slots(slots)

    def release_outputs(self, evs: Iterable[ExecutionVertex]) -> None:
        """Release the result partitions of the attempts ``evs``."""
        for ev in evs:
            consumers = [c.id for c, _ in self._graph.consumers_of(ev.job_vertex.id)]
            for descriptor in self.partitions.pop_outputs(ev.attempt_id, consumers):
                self._shuffle_master.release_partition_externally(descriptor)

    def release_all(self) -> None:
        """Give back the partitions and slots of the attempts that ended (all of them)."""
        for descriptor in self.partitions.clear():
            self._shuffle_master.release_partition_externally(descriptor)
        self._resources.release(self.job_id)
        self.slots = []
        self._task_slots = {}

    def release_job(self) -> None:
        """The job ended: its partitions, slots and TaskExecutor-side resources go."""
        for descriptor in self.partitions.descriptors.values():
            self._shuffle_master.release_partition_externally(descriptor)
        self._resources.release(self.job_id)
        for resource_id in self._used_task_executors:
            record = self._resources.get(resource_id)
            if record is not None:
                keep_until_done(record.stub.ReleaseJob.future(
                    taskexecutor_pb2.ReleaseJobRequest(job_id=self.job_id),
                    timeout=RPC_TIMEOUT_S))

    def lost_outputs(self) -> frozenset[TaskId]:
        """Tasks whose current result partitions cannot be read (again): gone with their
        TaskExecutor (the shuffle master says), reported missing by a consumer, or — when
        partitions are read once (not reconsumable) — read by a deployed consumer."""
        gone = self.partitions.lost
        if self._batch and not self._shuffle_master.reconsumable:
            gone = gone | self.partitions.read
        graph = self._graph
        return frozenset(
            task_id(ev) for ev in graph.all()
            for consumer, _ in graph.consumers_of(ev.job_vertex.id)
            if (partition_id := self.partitions.ids.get((ev.attempt_id, consumer.id)))
            and (partition_id in gone
                 or not self._shuffle_master.is_partition_available(partition_id)))

    # -- cancellation ---------------------------------------------------------------------

    def cancel(self, evs: list[ExecutionVertex] | None = None) -> None:
        """Cancel ``evs`` (default: every task) that have not ended. Those not deployed,
        or whose TaskExecutor is gone, are CANCELED at once; the others CANCELING until
        they report, or until ``execution.cancellation.timeout`` (plus 5 s) passed."""
        evs = self._graph.all() if evs is None else evs
        cancelling = [ev.attempt_id for ev in evs if not ev.is_terminal]
        for ev in evs:
            if ev.is_terminal:
                continue
            if ev.state in (common_pb2.CREATED, common_pb2.SCHEDULED):
                ev.state = common_pb2.CANCELED
                continue
            ev.state = common_pb2.CANCELING
            record = self._resources.get(ev.resource_id)
            if record is None:
                ev.state = common_pb2.CANCELED
                continue
            keep_until_done(record.stub.CancelTask.future(
                taskexecutor_pb2.CancelTaskRequest(attempt_id=ev.attempt_id),
                timeout=RPC_TIMEOUT_S))
        timeout = self._config.get(options.CANCELLATION_TIMEOUT)
        self._main.schedule(timeout + 5, lambda: self._cancellation_watchdog(cancelling))

    def _cancellation_watchdog(self, attempts: list[ExecutionAttemptId]) -> None:
        stuck = [ev for a in attempts if (ev := self._graph.by_attempt.get(a)) is not None
                 and not ev.is_terminal]
        for ev in stuck:
            log.warning("task %s did not confirm cancellation; giving up on it", ev.name)
            ev.state = common_pb2.CANCELED
        self._on_cancel_timeout()
