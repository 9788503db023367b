"""Schedules one job: slots, deployment, state transitions, failure, restarts and
cancellation.

Runs on the JobMaster's main thread only. STREAMING: all subtasks are deployed at once
(pipelined exchanges), one slot per parallel pipeline (slot sharing: subtask i of every
vertex goes to slot i). BATCH: a vertex's subtasks are deployed once every subtask it reads
has finished (blocking exchanges), one slot per subtask, freed when the subtask finishes.

A failed task (or a lost TaskExecutor) restarts what the failover strategy
(``jobmanager.execution.failover-strategy``) says. With ``region``, only the regions the
failure reaches, when that is not the whole job: their tasks are cancelled and deployed
again as new attempts — STREAMING into their slots, restored from the latest usable
completed checkpoint; BATCH as their inputs are ready, reading finished producers'
partitions again instead of recomputing them (a partition that is gone restarts its
producer) — while the other regions keep running. Otherwise (``full``, a failure during a
STREAMING region restart, or a failure reaching every task) the job's current attempt
fails: every task is cancelled and the job starts again in whatever slots are free. Either
way the restart strategy decides first whether there is a restart at all, or the job ends
FAILED with the failure as its root cause. Reports of earlier attempts are ignored
(attempt ids fence them).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.checkpoint.options import checkpointing_enabled
from weir.core import options
from weir.core.clock import wall_clock_ms
from weir.core.config import Configuration
from weir.core.errors import StorageUnreachableError, UserError
from weir.core.rpc import keep_until_done
from weir.jobmaster import options as jm_options
from weir.jobmaster.checkpointing import JobCheckpointing
from weir.jobmaster.collect import CollectBuffer
from weir.jobmaster.execution_graph import ExecutionGraph, ExecutionVertex
from weir.jobmaster.failover import TaskId, create_failover_strategy
from weir.jobmaster.job_change import kept_vertices
from weir.jobmaster.main_thread import MainThreadExecutor
from weir.jobmaster.resource_manager import ResourceManager, Slot
from weir.jobmaster.restart_strategy import NoRestartStrategy, create_restart_strategy
from weir.jobmaster.source_coordinator import SourceCoordinator
from weir.jobmaster.task_restore import task_restore
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2, jobmaster_pb2, taskexecutor_pb2
from weir.shuffle.api import PartitionDescriptor, ProducerDescriptor, ShuffleMaster
from weir.state import options as state_options

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 30.0


class JobScheduler:
    """Drives one job's ExecutionGraph. ``on_terminal`` is called once when the job ends."""

    def __init__(self, job_graph: jobgraph_pb2.JobGraph, resources: ResourceManager,
                 shuffle_master: ShuffleMaster, main: MainThreadExecutor,
                 configuration: Configuration, on_terminal: Callable[[JobScheduler], None],
                 io: Executor | None = None) -> None:
        """Raises ConfigError when the job's configuration cannot work (checkpointing
        without a checkpoint directory, say)."""
        self.graph = ExecutionGraph(job_graph)
        self.job_id = job_graph.job_id
        self.sources = SourceCoordinator(job_graph)
        self.collect = CollectBuffer(configuration.get(jm_options.COLLECT_BUFFER_BATCHES))
        self._resources = resources
        self._shuffle_master = shuffle_master
        self._main = main
        self._config = configuration
        self._on_terminal = on_terminal
        self.slots: list[Slot] = []
        self.batch = configuration.get(options.RUNTIME_MODE).upper() == "BATCH"
        #: BATCH: the slot of each deployed subtask, until it finishes or restarts.
        self._task_slots: dict[TaskId, Slot] = {}
        #: Partitions a consumer reported it could not read (PARTITION_NOT_FOUND).
        self._lost_partitions: set[str] = set()
        #: BATCH: partitions a deployed consumer reads (gone once read, unless the shuffle
        #: master's partitions are reconsumable).
        self._read_partitions: set[str] = set()
        self._waiting_for_slots_since: float | None = None
        self._partition_ids: dict[tuple[str, int], str] = {}
        self._descriptors: dict[str, bytes] = {}
        self._used_task_executors: set[str] = set()
        self.checkpointing: JobCheckpointing | None = None
        if checkpointing_enabled(configuration):
            assert io is not None, "checkpointing needs the JobMaster's I/O pool"
            self.checkpointing = JobCheckpointing(
                self.job_id, configuration, self.graph, self.sources, resources, main, io,
                self.fail)
        self.restart_strategy = create_restart_strategy(configuration,
                                                        self.checkpointing is not None)
        self.failover = create_failover_strategy(
            configuration.get(jm_options.FAILOVER_STRATEGY), job_graph, self.batch)
        self._topology = self.failover.topology
        #: A region restart in progress: the tasks it restarts.
        self._restarting: set[TaskId] | None = None
        self._region_phase = ""  # "cancelling", "scheduled", "restoring" or "deploying"
        self.restarts = 0
        self.restart_causes: deque[common_pb2.ErrorInfo] = deque(maxlen=10)
        #: The checkpoint the current attempts restored from.
        self.restored: CompletedCheckpoint | None = None
        self.restore_timestamp_ms = 0
        self._restart_scheduled = False
        self._slot_check_generation = 0
        # Wall-clock bookkeeping for uptime, downtime and restartingTime (ms).
        self._running_since: int | None = None
        self._down_since: int | None = None
        self.last_restart_duration_ms = 0
        #: A restore in progress: when the failure happened (for last_restore), and which
        #: tasks it restores (None: all).
        self._restoring_since: int | None = None
        self._restore_scope: set[TaskId] | None = None
        self._local_wait_until: float | None = None
        #: A rescale or update in progress, and the last one made.
        self._change: _Change | None = None
        self.last_change: jobmaster_pb2.JobChange | None = None
        #: Called with the job graph after a change (high availability stores it).
        self.on_graph_changed: Callable[[jobgraph_pb2.JobGraph], None] | None = None

    @property
    def required_slots(self) -> int:
        return max(v.parallelism for v in self.graph.job_graph.vertices)

    # -- scheduling -------------------------------------------------------------------------

    def start(self) -> None:
        self._set_running()

    def start_from(self, checkpoint: CompletedCheckpoint) -> None:
        """Start the job restored from ``checkpoint`` instead of afresh: a job that a
        restarted JobMaster recovers (high availability). Main thread; the caller has
        registered the checkpoint with ``checkpointing`` (``add_restored``). The job then
        waits for slots as after ``start()`` (slot.request.timeout applies). Raises what
        restoring the split enumerators raises (user code)."""
        assert self.checkpointing is not None, "restoring a checkpoint needs checkpointing"
        self.sources.restore(master_states_for(checkpoint.metadata,
                                                   self.graph.job_graph))
        self.restored = checkpoint
        self.restore_timestamp_ms = wall_clock_ms()
        log.info("job %s starts from checkpoint %d (%s)", self.job_id,
                 checkpoint.checkpoint_id, checkpoint.external_path)
        self._set_running()
        self._restoring_since = self.restore_timestamp_ms  # from submission (or recovery)

    def savepoint(self, request: jobmaster_pb2.SavepointRequest,
                  done: Callable[[str | None, str | None], None]) -> None:
        """Take a savepoint (``request.terminate``: stop the job with it, as ``weir
        stop``); ``done(path, None)`` or ``done(None, why)`` follows on the main thread. A
        stop that fails leaves the job running, except with ``drain``: its sources ended
        already, so the job restarts from its latest checkpoint."""
        if self.checkpointing is None:
            done(None, f"job {self.job_id} takes no checkpoints, and savepoints need them: "
                       "run it with execution.checkpointing.interval set")
            return
        if self.graph.status != common_pb2.JOB_RUNNING:
            done(None, f"job {self.job_id} is "
                       f"{common_pb2.JobStatus.Name(self.graph.status).removeprefix('JOB_')}, "
                       "not running")
            return

        def finished(path: str | None, error: str | None) -> None:
            if error is not None and request.terminate and request.drain and \
                    self.graph.status == common_pb2.JOB_RUNNING:
                self.fail(common_pb2.ErrorInfo(
                    reason=common_pb2.CHECKPOINT_FAILURE,
                    message=f"stop --drain failed after the sources ended: {error}"))
                error += "; the job restarts from its latest checkpoint"
            done(path, error)

        self.checkpointing.trigger_savepoint(request, finished)

    def checkpoint_timeout_s(self) -> float:
        return float(self._config.get(checkpoint_options.CHECKPOINTING_TIMEOUT))

    def slot_timeout_s(self) -> float:
        return float(self._config.get(jm_options.SLOT_REQUEST_TIMEOUT))

    def _set_running(self) -> None:
        self.graph.status = common_pb2.JOB_RUNNING
        self._running_since = wall_clock_ms()
        self._local_wait_until = None
        self._restoring_since = self._down_since if self.restored is not None else None
        self._restore_scope = None
        if self._down_since is not None:
            self.last_restart_duration_ms = self._running_since - self._down_since
            self._down_since = None
        if self.checkpointing is not None:
            self.checkpointing.job_running()
        self._waiting_for_slots_since = None
        self._slot_check_generation += 1
        generation = self._slot_check_generation
        timeout = self._config.get(jm_options.SLOT_REQUEST_TIMEOUT)
        self._main.schedule(timeout, lambda: self._check_slot_timeout(generation))
        self.try_allocate()

    def try_allocate(self) -> None:
        """Deploy what can run now: everything at once (STREAMING, one shared slot per
        pipeline), or the subtasks not deployed yet of the vertices whose inputs have all
        finished (BATCH, a slot each; a vertex's subtasks get theirs together)."""
        if self.graph.status != common_pb2.JOB_RUNNING:
            return
        spread = self._config.get(jm_options.EVENLY_SPREAD_OUT_SLOTS)
        if not self.batch:
            if self.slots:
                if self._region_phase == "deploying":
                    self._deploy_region()
                return
            preferred = self._local_preferences()
            if self._wait_for_local_state(preferred):
                return
            slots = self._resources.allocate(self.job_id, self.required_slots, spread,
                                             preferred)
            if slots is None:
                self._waiting(self.required_slots)
                return
            self.slots = slots
            self._waiting_for_slots_since = None
            self._deploy(self.graph.all(), lambda ev: slots[ev.subtask_index])
            return
        for vertex in self.graph.job_graph.vertices:
            waiting = [ev for ev in self.graph.vertices[vertex.id]
                       if ev.state == common_pb2.CREATED]
            if not waiting or not self._inputs_finished(vertex):
                continue
            slots = self._resources.allocate(self.job_id, len(waiting), spread)
            if slots is None:
                self._waiting(len(waiting))
                return
            self._waiting_for_slots_since = None
            for ev, slot in zip(waiting, slots, strict=True):
                self._task_slots[_task_id(ev)] = slot
            self._deploy(waiting, lambda ev: self._task_slots[_task_id(ev)])

    def _local_preferences(self) -> list[str | None]:
        """Task-local recovery: per slot (pipeline) index, the TaskExecutor that holds local
        copies of that pipeline's state in the checkpoint being restored (most owners wins;
        None: nobody). Known from completed checkpoints, or offered at registration."""
        if self.restored is None:
            return []
        checkpoint_id = self.restored.checkpoint_id
        preferred: list[str | None] = []
        for index in range(self.required_slots):
            votes: Counter[str] = Counter()
            for vertex in self.graph.job_graph.vertices:
                if index >= vertex.parallelism:
                    continue
                owner = f"{vertex.id}-{index}"
                held = self.graph.local_state.get(owner)
                if held is not None and held[0] == checkpoint_id:
                    votes[held[1]] += 1
                else:
                    votes.update(self._resources.holders(self.job_id, owner, checkpoint_id))
            preferred.append(votes.most_common(1)[0][0] if votes else None)
        return preferred

    def _wait_for_local_state(self, preferred: list[str | None]) -> bool:
        """Whether to hold the restart back because a TaskExecutor holding local state is
        away (``state.backend.local-recovery.taskexecutor-wait``; it may be restarting)."""
        absent = sorted({r for r in preferred if r and self._resources.get(r) is None})
        wait = self._config.get(state_options.LOCAL_RECOVERY_WAIT)
        if not absent or wait <= 0:
            return False
        now = time.monotonic()
        if self._local_wait_until is None:
            self._local_wait_until = now + wait
            log.info("job %s waits up to %.1f s for TaskExecutor(s) %s, which hold its "
                     "local state", self.job_id, wait, ", ".join(absent))
            self._main.schedule(wait, self.try_allocate)
        return now < self._local_wait_until

    def _inputs_finished(self, vertex: jobgraph_pb2.JobVertex) -> bool:
        return all(ev.state == common_pb2.FINISHED for edge in vertex.inputs
                   for ev in self.graph.vertices[edge.source_vertex])

    def _waiting(self, needed: int) -> None:
        if self._waiting_for_slots_since is None:
            self._waiting_for_slots_since = time.monotonic()
            log.info("job %s waits for %d free slots (%d free now)", self.job_id, needed,
                     self._resources.free_slots())

    def _check_slot_timeout(self, generation: int) -> None:
        if self.graph.is_terminal() or generation != self._slot_check_generation or \
                self.graph.status != common_pb2.JOB_RUNNING:
            return
        timeout = self._config.get(jm_options.SLOT_REQUEST_TIMEOUT)
        since = self._waiting_for_slots_since
        if since is None or time.monotonic() - since < timeout * 0.999:
            if self.batch or not self.slots:
                # Still scheduling (or later stages to come): check again later.
                self._main.schedule(timeout if since is None else
                                    timeout - (time.monotonic() - since),
                                    lambda: self._check_slot_timeout(generation))
            return
        self.fail(common_pb2.ErrorInfo(
            reason=common_pb2.NO_RESOURCES,
            message=(f"could not get the slots the job needs within {timeout:.0f} s "
                     f"(slot.request.timeout): the cluster has {self._resources.free_slots()} "
                     f"free of {self._resources.total_slots()}; start more TaskExecutors or "
                     "lower the job's parallelism")))

    def _deploy(self, deploying: list[ExecutionVertex],
                slot_of: Callable[[ExecutionVertex], Slot]) -> None:
        """Deploy the subtasks ``deploying`` (every subtask of some vertices, or a restarted
        region's), each into ``slot_of(ev)``.

        Output partitions are registered with the shuffle master first; input gates use the
        descriptors of the producers' partitions, registered when those were deployed (or
        now: a region's producers are in the region).
        """
        graph = self.graph
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
                partition_id = f"{ev.attempt_id}.{consumer.id}"
                record = self._resources.get(ev.resource_id)
                assert record is not None
                self._descriptors[partition_id] = \
                    self._shuffle_master.register_partition_with_producer(
                        PartitionDescriptor(self.job_id, partition_id, subpartitions,
                                            ev.attempt_id),
                        ProducerDescriptor(ev.resource_id, record.data_address))
                self._partition_ids[(ev.attempt_id, consumer.id)] = partition_id
        for ev in deploying:
            if ev.state != common_pb2.SCHEDULED:
                continue  # cancelled by the failover of a deployment before it
            tdd = self._deployment_descriptor(ev, self._partition_ids, self._descriptors)
            if self.batch:
                self._read_partitions.update(
                    self._partition_ids[(producer.attempt_id, ev.job_vertex.id)]
                    for producer in self._task_attempts(self._topology.inputs_of(_task_id(ev))))
            record = self._resources.get(ev.resource_id)
            if record is None:
                self._task_failed(ev, common_pb2.ErrorInfo(
                    reason=common_pb2.DEPLOYMENT_FAILED, task=ev.name,
                    message=f"TaskExecutor {ev.resource_id} went away before deployment"))
                continue
            ev.state = common_pb2.DEPLOYING
            future = record.stub.SubmitTask.future(tdd, timeout=RPC_TIMEOUT_S)
            attempt_id = ev.attempt_id
            keep_until_done(future, lambda f, a=attempt_id: self._main.submit(
                lambda: self._deployed(a, f)))

    def _deployment_descriptor(self, ev: ExecutionVertex, partition_ids: dict[tuple[str, int], str],
                               descriptors: dict[str, bytes]) -> (
            jobgraph_pb2.TaskDeploymentDescriptor):
        graph = self.graph
        vertex = ev.job_vertex
        tdd = jobgraph_pb2.TaskDeploymentDescriptor(
            job_id=self.job_id, job_name=graph.job_graph.name, attempt_id=ev.attempt_id,
            vertex_id=vertex.id, task_name=vertex.name, subtask_index=ev.subtask_index,
            parallelism=vertex.parallelism, max_parallelism=vertex.max_parallelism,
            attempt_number=ev.attempt_number, chain=vertex.chain, source=vertex.source,
            config=graph.job_graph.config, allocation_id=ev.allocation_id,
            operator_names=list(vertex.operator_names),
            operator_uids=list(vertex.operator_uids))
        if self.restored is not None:
            assert self.checkpointing is not None
            tdd.restore.CopyFrom(task_restore(
                self.restored.metadata, vertex, ev.subtask_index,
                without_channel_state=self.restored.checkpoint_id
                == self.checkpointing.recover_without_channel_state,
                owned=self.restored.owned))
        for consumer, edge in graph.consumers_of(vertex.id):
            tdd.partitions.add(
                partition_id=partition_ids[(ev.attempt_id, consumer.id)],
                num_subpartitions=1 if edge.partitioner == common_pb2.FORWARD
                else consumer.parallelism,
                partitioner=edge.partitioner, key_selector=edge.key_selector,
                max_parallelism=consumer.max_parallelism, consumer_vertex=consumer.id,
                blocking=self.batch, side_output=edge.side_output)
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
                partition_id = partition_ids[(producer.attempt_id, vertex.id)]
                gate.channels.add(shuffle_descriptor=descriptors[partition_id],
                                  subpartition=subpartition)
        return tdd

    def _deployed(self, attempt_id: str, future: Any) -> None:
        ev = self.graph.by_attempt.get(attempt_id)
        if ev is None or ev.is_terminal:
            return
        try:
            future.result()
        except Exception as err:  # gRPC errors and anything else the call raised
            details = err.details() if hasattr(err, "details") else str(err)
            self._task_failed(ev, common_pb2.ErrorInfo(
                reason=common_pb2.DEPLOYMENT_FAILED, task=ev.name,
                message=f"deploying to {ev.resource_id} failed: {details}"))

    # -- rescale and update ----------------------------------------------------------------

    def change(self, kind: str, job_graph: jobgraph_pb2.JobGraph, restarted: list[str],
               done: Callable[[jobmaster_pb2.JobChange | None, str | None], None],
               check: Callable[[checkpoint_pb2.CheckpointMetadata], None] | None = None
               ) -> None:
        """Run ``job_graph`` instead (``kind``: "rescale" or "update"): take a checkpoint,
        cancel every task, deploy the new graph restored from that checkpoint (task-local
        copies first: the slots are mostly the same). ``done(change, None)`` once every
        task runs, or ``done(None, why)``: refused or failed before the tasks were
        cancelled (the job runs on untouched), or rolled back after (it runs as before,
        from that checkpoint). ``check`` may refuse the checkpoint's state for the new
        graph (raising a UserError) before anything is cancelled. Main thread."""
        if self.checkpointing is None:
            done(None, f"job {self.job_id} takes no checkpoints, and a {kind} restores one: "
                       "run it with execution.checkpointing.interval set")
            return
        if self.graph.status != common_pb2.JOB_RUNNING or self._restarting is not None or \
                not self.slots or self._change is not None or \
                any(ev.state not in (common_pb2.RUNNING, common_pb2.FINISHED)
                    for ev in self.graph.all()):
            done(None, f"job {self.job_id} is not running steadily (starting, restarting or "
                       "changing already): try again when every task runs")
            return
        needed = max(v.parallelism for v in job_graph.vertices)
        free = self._resources.free_slots()
        if needed > len(self.slots) + free:
            done(None, f"the job would need {needed} slots; it holds {len(self.slots)} and "
                       f"the cluster has {free} free: start more TaskExecutors first")
            return
        self._change = _Change(kind, job_graph, self.graph.job_graph, done, restarted, check)
        if kind == "update" and not self.batch:
            self._change.keep = kept_vertices(self.graph.job_graph, job_graph, restarted)
        log.info("job %s: %s requested; taking a checkpoint first", self.job_id, kind)
        self.checkpointing.request_checkpoint(self._change_checkpointed)

    def _change_checkpointed(self, path: str | None, error: str | None) -> None:
        change = self._change
        if change is None or change.phase != "checkpointing":
            return
        if error is not None or self.checkpointing is None:
            self._change = None
            change.done(None, f"the {change.kind} was not made, the job runs on: {error}")
            return
        latest = self.checkpointing.coordinator.latest_completed()
        assert latest is not None and latest.external_path == path
        if change.check is not None:
            try:
                change.check(latest.metadata)
            except UserError as err:
                self._change = None
                change.done(None, f"the {change.kind} was refused, the job runs on: {err}")
                return
        change.checkpoint = latest
        change.down_since = wall_clock_ms()
        log.info("job %s: %s from checkpoint %d; cancelling its tasks", self.job_id,
                 change.kind, latest.checkpoint_id)
        self._cancel_for_change()

    def _cancel_for_change(self) -> None:
        assert self._change is not None
        self._change.phase = "cancelling"
        if self.checkpointing is not None:
            self.checkpointing.job_not_running()
        self._cancel_tasks(self._changing_tasks())
        self._check_progress()

    def _changing_tasks(self) -> list[ExecutionVertex]:
        """The tasks a change restarts: all, but for the regions an update leaves running."""
        keep = self._change.keep if self._change is not None else frozenset()
        return [ev for ev in self.graph.all() if ev.job_vertex.id not in keep]

    def _apply_change(self) -> None:
        """Every old task ended: deploy the changed graph from the change's checkpoint."""
        change = self._change
        assert change is not None and change.checkpoint is not None
        change.phase = "deploying"
        if change.keep:
            self._apply_in_place(change)
            return
        self._release_deployment()
        self.graph.replace(change.graph)
        self.sources.replace_graph(change.graph)
        self.failover = create_failover_strategy(
            self._config.get(jm_options.FAILOVER_STRATEGY), change.graph, self.batch)
        self._topology = self.failover.topology
        checkpoint = change.checkpoint
        if self.checkpointing is not None:
            self.checkpointing.set_job_graph(change.graph)
        self.restored = checkpoint
        self.restore_timestamp_ms = wall_clock_ms()
        self.sources.restore(master_states_for(checkpoint.metadata, change.graph))
        self._set_running()
        # `weir status` reports the restore from the moment the old tasks were cancelled.
        self._restoring_since = change.down_since

    def _apply_in_place(self, change: _Change) -> None:
        """An update that leaves some regions running: only the other regions' tasks are
        deployed anew (into the job's slots, as a region restart does), their readers
        continue from the change's checkpoint."""
        assert change.checkpoint is not None
        for ev in self._changing_tasks():
            for consumer, _ in self.graph.consumers_of(ev.job_vertex.id):
                partition_id = self._partition_ids.pop((ev.attempt_id, consumer.id), "")
                descriptor = self._descriptors.pop(partition_id, None)
                if descriptor is not None:
                    self._shuffle_master.release_partition_externally(descriptor)
        self.graph.replace(change.graph, keep=change.keep)
        self.failover = create_failover_strategy(
            self._config.get(jm_options.FAILOVER_STRATEGY), change.graph, self.batch)
        self._topology = self.failover.topology
        restarted = self._changing_tasks()
        tasks = {_task_id(ev) for ev in restarted}
        if self.checkpointing is not None:
            self.checkpointing.set_job_graph(change.graph)
        self.restored = change.checkpoint
        self.restore_timestamp_ms = wall_clock_ms()
        self.sources.reset_subtasks(tasks, change.checkpoint.checkpoint_id)
        self._restoring_since = change.down_since
        self._restore_scope = tasks
        self._deploy(restarted, lambda ev: self.slots[ev.subtask_index])
        if self.checkpointing is not None:
            self.checkpointing.job_running()

    def _maybe_changed(self) -> None:
        change = self._change
        if change is None or change.phase != "deploying" or any(
                ev.state not in (common_pb2.RUNNING, common_pb2.FINISHED)
                for ev in self.graph.all()):
            return
        assert change.checkpoint is not None
        self._change = None
        now = wall_clock_ms()
        record = jobmaster_pb2.JobChange(
            kind=change.kind, checkpoint_id=change.checkpoint.checkpoint_id,
            downtime_ms=now - change.down_since, timestamp_ms=now,
            restarted_operators=change.restarted)
        if change.rollback:
            change.done(None, f"the {change.kind} failed ({change.rollback}); the job runs as "
                              f"before, from checkpoint {change.checkpoint.checkpoint_id}")
            return
        self.last_change = record
        log.info("job %s: %s done; down for %d ms", self.job_id, change.kind,
                 record.downtime_ms)
        if self.on_graph_changed is not None:
            self.on_graph_changed(change.graph)
        change.done(record, None)

    def _roll_back_change(self, error: common_pb2.ErrorInfo) -> bool:
        """The changed job failed while starting: deploy the old graph again from the
        same checkpoint. False when that was the old graph already (normal failover)."""
        change = self._change
        assert change is not None
        if change.rollback:
            self._abandon_change(error.message)
            return False
        log.warning("job %s: the %s failed (%s); rolling it back", self.job_id, change.kind,
                    error.message)
        change.rollback = f"{error.task}: {error.message}" if error.task else error.message
        change.graph = change.previous
        change.restarted = []
        self._cancel_for_change()
        return True

    def _abandon_change(self, why: str) -> None:
        change, self._change = self._change, None
        if change is not None:
            change.done(None, f"the {change.kind} did not complete: {why}")

    def _release_deployment(self) -> None:
        """Give back the partitions and slots of the attempts that ended."""
        for descriptor in self._descriptors.values():
            self._shuffle_master.release_partition_externally(descriptor)
        self._descriptors.clear()
        self._partition_ids.clear()
        self._resources.release(self.job_id)
        self.slots = []
        self._task_slots = {}
        self._lost_partitions.clear()
        self._read_partitions.clear()

    # -- state changes ----------------------------------------------------------------------

    def on_task_state(self, update: jobmaster_pb2.TaskExecutionStateUpdate) -> None:
        ev = self.graph.by_attempt.get(update.attempt_id)
        if ev is None or ev.is_terminal:
            return
        if update.HasField("metrics"):
            ev.metrics = update.metrics
        if update.state == common_pb2.FAILED:
            if ev.state == common_pb2.CANCELING:
                # Failing while being cancelled (e.g. its producer was cancelled first) is
                # the end of cancellation, not a new failure: as Flink does.
                ev.state = common_pb2.CANCELED
                self._prefer_root_cause(update.error)
                self._check_progress()
                return
            if update.error.reason == common_pb2.STATE_RESTORE_FAILED and \
                    self.restored is not None and self.checkpointing is not None:
                log.warning("job %s: checkpoint %d is unusable (%s); the next restart uses "
                            "an older retained checkpoint", self.job_id,
                            self.restored.checkpoint_id, update.error.message)
                self.checkpointing.forget(self.restored.checkpoint_id)
            if update.error.reason == common_pb2.STATE_INCOMPATIBLE and (
                    self._change is None or self._change.phase != "deploying"):
                # Restarting would restore the same state into the same code again.
                ev.state = common_pb2.FAILED
                ev.failure = update.error
                self.fail_terminal(update.error)
                return
            if update.error.reason == common_pb2.PARTITION_NOT_FOUND and \
                    update.error.partition_id:
                # Its producer must produce it again (the region rule's lost input).
                self._lost_partitions.add(update.error.partition_id)
            self._task_failed(ev, update.error)
            return
        ev.state = update.state
        if update.HasField("restore"):
            ev.restore = update.restore
        if update.state == common_pb2.RUNNING and self._restoring_since is not None:
            self._maybe_restored()
        if update.state in (common_pb2.RUNNING, common_pb2.FINISHED) and \
                self._change is not None:
            self._maybe_changed()
        if self.checkpointing is not None and self.graph.status == common_pb2.JOB_RUNNING:
            self.checkpointing.on_task_state(ev.attempt_id, update.state)
        if self.batch and update.state == common_pb2.FINISHED:
            slot = self._task_slots.pop(_task_id(ev), None)
            if slot is not None:
                self._resources.release_slots([slot])
            self.try_allocate()
        self._check_progress()

    def _maybe_restored(self) -> None:
        """Every task of a restored attempt runs (or already finished): note what the
        restore cost, from the failure on (``weir status --json`` ``last_restore``)."""
        evs = self.graph.all()
        if self._restoring_since is None or self.restored is None or any(
                ev.state not in (common_pb2.RUNNING, common_pb2.FINISHED) for ev in evs):
            return
        scope = self._restore_scope
        restores = [ev.restore for ev in evs if ev.restore is not None
                    and (scope is None or _task_id(ev) in scope)]
        self.graph.last_restore = jobmaster_pb2.RestoreStats(
            checkpoint_id=self.restored.checkpoint_id,
            duration_ms=max(0, wall_clock_ms() - self._restoring_since),
            local_bytes=sum(r.local_bytes for r in restores),
            remote_bytes=sum(r.remote_bytes for r in restores))
        self._restoring_since = None
        log.info("job %s restored checkpoint %d in %d ms (%d bytes local, %d remote)",
                 self.job_id, self.restored.checkpoint_id, self.graph.last_restore.duration_ms,
                 self.graph.last_restore.local_bytes, self.graph.last_restore.remote_bytes)

    def _prefer_root_cause(self, error: common_pb2.ErrorInfo) -> None:
        """A task failed in user code after the failure being handled was reported by
        another task that only lost its connection to it (its consumer, say, saw the
        channel close first): the user code's failure is the cause to report."""
        current = self.graph.failure
        if current is None or error.reason != common_pb2.USER_CODE_ERROR or \
                current.reason not in (common_pb2.REMOTE_TRANSPORT,
                                       common_pb2.PARTITION_NOT_FOUND):
            return
        root = common_pb2.ErrorInfo()
        root.CopyFrom(error)
        if self.graph.status == common_pb2.JOB_FAILING and \
                not isinstance(self.restart_strategy, NoRestartStrategy):
            root.message += f" ({self.restarts} restart(s); {self.restart_strategy.describe()})"
        if self.restart_causes and self.restart_causes[-1] is current:
            self.restart_causes[-1] = root
        self.graph.failure = root

    def _task_failed(self, ev: ExecutionVertex, error: common_pb2.ErrorInfo) -> None:
        ev.state = common_pb2.FAILED
        ev.failure = error
        if not error.task:
            error.task = ev.name
        self._failover([ev], error)

    # -- region failover --------------------------------------------------------------------

    def _failover(self, failed: list[ExecutionVertex], error: common_pb2.ErrorInfo,
                  lost: frozenset[TaskId] = frozenset()) -> None:
        """Restart what ``failed`` (and the outputs ``lost`` with a TaskExecutor) require:
        a region restart when that leaves some tasks running, else :meth:`fail`. A BATCH
        failure while a region restart is still cancelling or waiting joins it. While a
        change cancels the tasks, failures are part of it; while it deploys the changed
        job, a failure rolls it back. A failed task that an update was leaving running
        makes the change (or its rollback) restart every task."""
        change = self._change
        if change is not None and change.keep and \
                any(ev.job_vertex.id in change.keep for ev in failed):
            # A task the update left running failed: the change restarts every task.
            change.keep = frozenset()
            if change.phase == "cancelling":
                self._cancel_tasks()
        if change is not None and change.phase == "cancelling":
            self._check_progress()
            return
        if change is not None and change.phase == "deploying" and \
                self._roll_back_change(error):
            return
        if self.graph.status != common_pb2.JOB_RUNNING or (not self.batch and (
                self._restarting is not None or not self.slots)):
            self.fail(error)
            return
        lost = lost | self._lost_outputs()
        finished = [_task_id(ev) for ev in self.graph.all() if ev.state == common_pb2.FINISHED]
        restart: set[TaskId] = set(self._restarting or ())
        for ev in failed:
            restart |= self.failover.tasks_to_restart(_task_id(ev), lost_producers=lost,
                                                      finished=finished)
        if len(restart) >= len(self.graph.all()):
            self.fail(error)
            return
        self.restart_strategy.notify_failure()
        if not self.restart_strategy.can_restart():
            self._fail_for_good(error)
            return
        log.warning("job %s restarts %d of its %d tasks (region failover, restart %d): %s",
                    self.job_id, len(restart), len(self.graph.all()), self.restarts + 1,
                    error.message)
        if self.checkpointing is not None:
            self.checkpointing.job_not_running()
        if self._down_since is None:
            self._down_since = wall_clock_ms()
        self.restart_causes.append(error)
        self.graph.failure = error
        self._restarting = restart
        self._region_phase = "cancelling"
        self._cancel_tasks(self._region_tasks())
        self._check_progress()

    def _lost_outputs(self) -> frozenset[TaskId]:
        """Tasks whose current result partitions cannot be read (again): gone with their
        TaskExecutor (the shuffle master says), reported missing by a consumer, or — when
        partitions are read once (not reconsumable) — read by a deployed consumer."""
        gone = self._lost_partitions
        if self.batch and not self._shuffle_master.reconsumable:
            gone = gone | self._read_partitions
        return frozenset(
            _task_id(ev) for ev in self.graph.all()
            for consumer, _ in self.graph.consumers_of(ev.job_vertex.id)
            if (partition_id := self._partition_ids.get((ev.attempt_id, consumer.id)))
            and (partition_id in gone
                 or not self._shuffle_master.is_partition_available(partition_id)))

    def _task_attempts(self, tasks: frozenset[TaskId]) -> list[ExecutionVertex]:
        return [self.graph.vertices[vertex_id][index] for vertex_id, index in sorted(tasks)]

    def _region_tasks(self) -> list[ExecutionVertex]:
        restarting = self._restarting or set()
        return [ev for ev in self.graph.all() if _task_id(ev) in restarting]

    def _restart_region(self) -> None:
        """The region's tasks all ended and the delay passed: new attempts, restored from
        the latest usable checkpoint, into their slots."""
        if self.graph.status != common_pb2.JOB_RUNNING or self._region_phase != "scheduled":
            return
        self._region_phase = "restoring"
        slots = []
        for ev in self._region_tasks():
            if (slot := self._task_slots.pop(_task_id(ev), None)) is not None:
                slots.append(slot)
            for consumer, _ in self.graph.consumers_of(ev.job_vertex.id):
                partition_id = self._partition_ids.pop((ev.attempt_id, consumer.id), "")
                descriptor = self._descriptors.pop(partition_id, None)
                if descriptor is not None:
                    self._shuffle_master.release_partition_externally(descriptor)
            self.graph.new_attempt(ev)
        self._resources.release_slots(slots)
        self._restore_latest(self._resume_region, lambda: (
            self.graph.status == common_pb2.JOB_RUNNING and self._region_phase == "restoring"))

    def _restore_latest(self, resume: Callable[[CompletedCheckpoint | None], None],
                        wanted: Callable[[], bool], retry: bool = False) -> None:
        """Count a restart and call ``resume`` (on the main thread) with the latest usable
        checkpoint, or None when the job has none, unless ``wanted()`` says the restart was
        overtaken meanwhile (cancelled, failed); a job whose retained checkpoints are all
        unusable fails instead. While the checkpoint storage cannot be reached, the lookup
        is tried again after the restart strategy's delay, each try counted as a failure
        (``retry``: this is such a try, not a new restart)."""
        if not retry:
            self.restarts += 1
        if self.checkpointing is None:
            resume(None)
            return
        had_checkpoints = bool(self.checkpointing.coordinator.completed())

        def found(checkpoint: CompletedCheckpoint | None, warnings: list[str],
                  unreachable: StorageUnreachableError | None = None) -> None:
            for warning in warnings:
                log.warning("job %s: %s", self.job_id, warning)
            if not wanted():
                return
            if unreachable is not None:
                error = common_pb2.ErrorInfo(
                    reason=common_pb2.STATE_RESTORE_FAILED,
                    message=f"cannot reach the checkpoint storage to restore: {unreachable}")
                self.restart_strategy.notify_failure()
                if not self.restart_strategy.can_restart():
                    self._fail_for_good(error)
                    return
                delay = self.restart_strategy.backoff_ms() / 1000
                log.warning("job %s: %s; trying again in %.1f s", self.job_id,
                            error.message, delay)
                self._main.schedule(delay, lambda: wanted() and self._restore_latest(
                    resume, wanted, retry=True))
                return
            if checkpoint is None and had_checkpoints:
                self.fail_terminal(common_pb2.ErrorInfo(
                    reason=common_pb2.STATE_RESTORE_FAILED,
                    message="no retained checkpoint can be restored: " + "; ".join(warnings)))
                return
            resume(checkpoint)

        self.checkpointing.find_restorable(found)

    def _resume_region(self, checkpoint: CompletedCheckpoint | None) -> None:
        self.restored = checkpoint
        self.restore_timestamp_ms = wall_clock_ms()
        self.sources.reset_subtasks(self._restarting or set(),
                                    checkpoint.checkpoint_id if checkpoint else 0)
        self._restoring_since = self._down_since if checkpoint is not None else None
        self._restore_scope = set(self._restarting or ())
        if self._down_since is not None:
            self.last_restart_duration_ms = wall_clock_ms() - self._down_since
            self._down_since = None
        self._region_phase = "deploying"
        timeout = self._config.get(jm_options.SLOT_REQUEST_TIMEOUT)
        generation = self.restarts
        self._main.schedule(timeout, lambda: self._check_region_slots(generation, timeout))
        self._deploy_region()

    def _deploy_region(self) -> None:
        """Deploy the region into its slots; a slot whose TaskExecutor is gone is replaced
        (preferring the TaskExecutor holding its local state), or the region waits for one.
        BATCH: the region's tasks are deployed as their inputs are ready, as at the start."""
        if self.batch:
            self._restarting = None
            self._region_phase = ""
            self.try_allocate()
            return
        evs = self._region_tasks()
        gone = sorted({ev.subtask_index for ev in evs
                       if not self._slot_alive(self.slots[ev.subtask_index])})
        if gone:
            preferred = self._local_preferences()
            if self._wait_for_local_state([preferred[i] for i in gone] if preferred else []):
                return
            spread = self._config.get(jm_options.EVENLY_SPREAD_OUT_SLOTS)
            replacements = self._resources.allocate(
                self.job_id, len(gone), spread,
                [preferred[i] for i in gone] if preferred else None)
            if replacements is None:
                self._waiting(len(gone))
                return
            for index, slot in zip(gone, replacements, strict=True):
                self.slots[index] = slot
        self._waiting_for_slots_since = None
        self._local_wait_until = None
        self._restarting = None
        self._region_phase = ""
        self._deploy(evs, lambda ev: self.slots[ev.subtask_index])
        if self.checkpointing is not None:
            self.checkpointing.job_running()

    def _check_region_slots(self, generation: int, timeout: float) -> None:
        if self.restarts == generation and self._region_phase == "deploying" and \
                self.graph.status == common_pb2.JOB_RUNNING:
            self.fail(common_pb2.ErrorInfo(
                reason=common_pb2.NO_RESOURCES,
                message=(f"could not get slots for the restarted region within "
                         f"{timeout:.0f} s (slot.request.timeout)")))

    def _slot_alive(self, slot: Slot) -> bool:
        """The slot still belongs to a registered TaskExecutor (one that came back under
        the same resource id offers new slots)."""
        record = self._resources.get(slot.resource_id)
        return record is not None and slot.index < len(record.slots) and \
            record.slots[slot.index] is slot

    def fail(self, error: common_pb2.ErrorInfo) -> None:
        """The current attempt failed with ``error``: restart if the restart strategy
        allows, else fail the job with it as the root cause (the first failure wins)."""
        if self.graph.status not in (common_pb2.JOB_RUNNING, common_pb2.JOB_CREATED):
            self._check_progress()
            return
        self._abandon_change(error.message)
        self._stop_checkpointing()
        self._down_since = wall_clock_ms()
        self.restart_strategy.notify_failure()
        if self.restart_strategy.can_restart():
            log.warning("job %s restarts after a failure (restart %d): %s", self.job_id,
                        self.restarts + 1, error.message)
            self.restart_causes.append(error)
            self.graph.failure = error
            self.graph.status = common_pb2.JOB_RESTARTING
            self._restart_scheduled = False
            self._cancel_tasks()
            self._check_progress()
            return
        self._fail_for_good(error)

    def _fail_for_good(self, error: common_pb2.ErrorInfo) -> None:
        """The restart strategy allows no more restarts: the job fails with ``error``."""
        self._stop_checkpointing()
        log.warning("job %s fails: %s", self.job_id, error.message)
        if self.restarts or not isinstance(self.restart_strategy, NoRestartStrategy):
            error.message += (f" ({self.restarts} restart(s); "
                              f"{self.restart_strategy.describe()})")
        self.graph.failure = error
        self.graph.status = common_pb2.JOB_FAILING
        self._cancel_tasks()
        self._check_progress()

    def _stop_checkpointing(self) -> None:
        """Every task stops: pending checkpoints abort, a region restart is off."""
        if self.checkpointing is not None:
            self.checkpointing.job_not_running()
        self._restarting = None
        self._region_phase = ""

    def _restart(self) -> None:
        """Every task of the failed attempt ended and the delay passed: start again."""
        if self.graph.status != common_pb2.JOB_RESTARTING:
            return
        self._release_deployment()
        self.graph.new_attempts()
        self._restore_latest(self._resume,
                             lambda: self.graph.status == common_pb2.JOB_RESTARTING)

    def _resume(self, checkpoint: CompletedCheckpoint | None) -> None:
        self.restored = checkpoint
        if checkpoint is not None:
            self.restore_timestamp_ms = wall_clock_ms()
            self.sources.restore(master_states_for(checkpoint.metadata,
                                                   self.graph.job_graph))
            log.info("job %s restores checkpoint %d (%s)", self.job_id,
                     checkpoint.checkpoint_id, checkpoint.external_path)
        else:
            self.sources.close()
        self._set_running()

    def fail_terminal(self, error: common_pb2.ErrorInfo) -> None:
        """End the job FAILED with ``error``, whatever the restart strategy says."""
        self._abandon_change(error.message)
        log.warning("job %s fails: %s", self.job_id, error.message)
        self.graph.failure = error
        self.graph.status = common_pb2.JOB_FAILING
        self._cancel_tasks()
        self._check_progress()

    def cancel(self) -> None:
        if self.graph.status not in (common_pb2.JOB_RUNNING, common_pb2.JOB_CREATED,
                                     common_pb2.JOB_RESTARTING):
            return
        self._abandon_change("the job was cancelled")
        if self.checkpointing is not None:
            self.checkpointing.job_not_running()
        self.graph.status = common_pb2.JOB_CANCELLING
        self.graph.failure = common_pb2.ErrorInfo(reason=common_pb2.JOB_CANCELLED,
                                                  message="the job was cancelled")
        self._cancel_tasks()
        self._check_progress()

    def on_task_executor_lost(self, resource_id: str, reason: int, message: str) -> None:
        lost = [ev for ev in self.graph.all()
                if ev.resource_id == resource_id and not ev.is_terminal]
        for ev in lost:
            ev.state = common_pb2.FAILED
            ev.failure = common_pb2.ErrorInfo(reason=reason, message=message, task=ev.name)
        # The result partitions the shuffle master says went with it restart their
        # producers (Flink's rule; an external shuffle service keeps them). In BATCH a
        # finished producer whose lost output is still to be read restarts now, rather
        # than when its consumers fail to read it.
        gone = self._lost_outputs()
        needed = [ev for ev in self.graph.all() if self.batch
                  and ev.state == common_pb2.FINISHED and ev.resource_id == resource_id
                  and _task_id(ev) in gone and self._feeds_unfinished(ev)]
        if lost or needed:
            self._failover(lost + needed, common_pb2.ErrorInfo(
                reason=reason, message=message, task=(lost or needed)[0].name))
        self._check_progress()

    def _feeds_unfinished(self, ev: ExecutionVertex) -> bool:
        """Some task that reads ``ev``'s output has not finished."""
        task = _task_id(ev)
        return any(task in self._topology.inputs_of(_task_id(consumer))
                   and consumer.state != common_pb2.FINISHED
                   for vertex, _ in self.graph.consumers_of(ev.job_vertex.id)
                   for consumer in self.graph.vertices[vertex.id])

    def _cancel_tasks(self, evs: list[ExecutionVertex] | None = None) -> None:
        """Cancel ``evs`` (default: every task) that have not ended."""
        evs = self.graph.all() if evs is None else evs
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

    def _cancellation_watchdog(self, attempts: list[str]) -> None:
        stuck = [ev for a in attempts if (ev := self.graph.by_attempt.get(a)) is not None
                 and not ev.is_terminal]
        for ev in stuck:
            log.warning("task %s did not confirm cancellation; giving up on it", ev.name)
            ev.state = common_pb2.CANCELED
        self._check_progress()

    def _check_progress(self) -> None:
        graph = self.graph
        if graph.is_terminal():
            return
        evs = graph.all()
        if graph.status == common_pb2.JOB_RUNNING and self._change is not None and \
                self._change.phase == "cancelling" and \
                all(ev.is_terminal for ev in self._changing_tasks()):
            if all(ev.state == common_pb2.FINISHED for ev in evs):
                self._abandon_change("the job finished first")
                self._end(common_pb2.JOB_FINISHED)
            else:
                self._apply_change()
            return
        if graph.status == common_pb2.JOB_RUNNING and evs and \
                all(ev.state == common_pb2.FINISHED for ev in evs):
            self._end(common_pb2.JOB_FINISHED)
        elif graph.status in (common_pb2.JOB_FAILING, common_pb2.JOB_CANCELLING) and \
                all(ev.is_terminal for ev in evs):
            self._end(common_pb2.JOB_FAILED if graph.status == common_pb2.JOB_FAILING
                      else common_pb2.JOB_CANCELED)
        elif graph.status == common_pb2.JOB_RUNNING and self._region_phase == "cancelling" \
                and all(ev.is_terminal for ev in self._region_tasks()):
            self._region_phase = "scheduled"
            delay = self.restart_strategy.backoff_ms() / 1000
            log.info("job %s restarts the region in %.1f s", self.job_id, delay)
            self._main.schedule(delay, self._restart_region)
        elif graph.status == common_pb2.JOB_RESTARTING and not self._restart_scheduled and \
                all(ev.is_terminal for ev in evs):
            self._restart_scheduled = True
            delay = self.restart_strategy.backoff_ms() / 1000
            log.info("job %s restarts in %.1f s", self.job_id, delay)
            self._main.schedule(delay, self._restart)

    def _end(self, status: int) -> None:
        graph = self.graph
        graph.status = status
        graph.end_time = time.time()
        log.info("job %s (%s) %s", self.job_id, graph.job_graph.name,
                 common_pb2.JobStatus.Name(status))
        if self.checkpointing is not None:
            self.checkpointing.job_terminal(status)
        self.collect.close()
        self.sources.close()
        for descriptor in self._descriptors.values():
            self._shuffle_master.release_partition_externally(descriptor)
        self._resources.release(self.job_id)
        for resource_id in self._used_task_executors:
            record = self._resources.get(resource_id)
            if record is not None:
                keep_until_done(record.stub.ReleaseJob.future(
                    taskexecutor_pb2.ReleaseJobRequest(job_id=self.job_id),
                    timeout=RPC_TIMEOUT_S))
        self._on_terminal(self)

    # -- queries ----------------------------------------------------------------------------

    def details(self) -> jobmaster_pb2.JobDetails:
        for ev in self.graph.all():
            record = self._resources.get(ev.resource_id) if ev.resource_id else None
            if record is not None and ev.attempt_id in record.metrics:
                ev.metrics = record.metrics[ev.attempt_id]
        details = self.graph.details()
        details.summary.restarts = self.restarts
        details.restart_causes.extend(self.restart_causes)
        latest = self.checkpointing.coordinator.latest_completed() \
            if self.checkpointing is not None else None
        if latest is not None:
            details.last_checkpoint_id = latest.checkpoint_id
            details.last_checkpoint_path = latest.external_path
        if self.last_change is not None:
            details.last_change.CopyFrom(self.last_change)
        return details

    def times_ms(self) -> dict[str, int]:
        """Flink's job time metrics: uptime (running since the last (re)start), downtime
        (failing or restarting since), restartingTime (the current or last restart)."""
        now = wall_clock_ms()
        running = self.graph.status == common_pb2.JOB_RUNNING
        restarting = self._down_since is not None and not self.graph.is_terminal()
        return {"uptime": now - self._running_since if running and self._running_since else 0,
                "downtime": now - self._down_since if restarting and self._down_since else 0,
                "restartingTime": now - self._down_since if restarting and self._down_since
                else self.last_restart_duration_ms}


def _task_id(ev: ExecutionVertex) -> TaskId:
    return (ev.job_vertex.id, ev.subtask_index)


@dataclass
class _Change:
    """A rescale or update in progress: "checkpointing", then "cancelling" the old tasks,
    then "deploying" the new graph (or the old one again, after a ``rollback``)."""

    kind: str
    graph: jobgraph_pb2.JobGraph
    previous: jobgraph_pb2.JobGraph
    done: Callable[[jobmaster_pb2.JobChange | None, str | None], None]
    restarted: list[str]
    check: Callable[[checkpoint_pb2.CheckpointMetadata], None] | None = None
    phase: str = "checkpointing"
    checkpoint: CompletedCheckpoint | None = None
    down_since: int = 0
    rollback: str = ""
    #: Vertices an update leaves running (their regions did not change).
    keep: frozenset[int] = frozenset()


def master_states_for(metadata: checkpoint_pb2.CheckpointMetadata,
                      job_graph: jobgraph_pb2.JobGraph) -> list[checkpoint_pb2.MasterState]:
    """The checkpoint's split enumerator states, each for the vertex of ``job_graph``
    whose source has the uid it had (an updated program may number vertices anew)."""
    uids = {v.vertex_id: v.operator_uids[0] for v in metadata.vertices if v.operator_uids}
    vertices = {v.operator_uids[0]: v.id for v in job_graph.vertices
                if v.source and v.operator_uids}
    states = []
    for state in metadata.master_states:
        uid = uids.get(state.vertex_id)
        vertex_id = vertices.get(uid, state.vertex_id) if uid else state.vertex_id
        states.append(checkpoint_pb2.MasterState(vertex_id=vertex_id,
                                                 enumerator=state.enumerator))
    return states
