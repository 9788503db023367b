"""Schedules one job: the thin layer that performs what its I/O-free state machines decide.

Runs on the JobMaster's main thread only. STREAMING: all subtasks are deployed at once
(pipelined exchanges), one slot per parallel pipeline (slot sharing: subtask i of every
vertex goes to slot i). BATCH: a vertex's subtasks are deployed once every subtask it reads
has finished (blocking exchanges), one slot per subtask, freed when the subtask finishes.

The decisions live elsewhere, each fed events on an injected clock and returning actions:

* :mod:`~weir.jobmaster.region_restarter`: what a failure restarts (a region, or the job's
  whole attempt), the restart strategy's verdict and delays, and the phases of a restart;
* :mod:`~weir.jobmaster.change_process`: rescaling and updating the running job;
* :mod:`~weir.jobmaster.deployment`: where subtasks go (task-local state first), how long
  the job waits for slots, and what each subtask is deployed with;
* :mod:`~weir.jobmaster.job_lifecycle`: when the job ends and its time metrics.

This adapter performs their actions: it has :class:`~weir.jobmaster.task_deployer.
TaskDeployer` allocate slots, register partitions with the shuffle master and send the
``SubmitTask``/``CancelTask``/``ReleaseJob`` RPCs; it drives the split enumerators and the
job's checkpointing, feeds task reports to the state machines and schedules their
wake-ups on the main thread (one timer, at the earliest deadline any of them has).
Reports of earlier attempts are ignored (attempt ids fence them).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.checkpoint.options import checkpointing_enabled
from weir.core import options
from weir.core.clock import Clock, wall_clock_ms
from weir.core.config import Configuration
from weir.core.ids import ExecutionAttemptId, PartitionId, ResourceId
from weir.jobmaster import options as jm_options
from weir.jobmaster.change_process import Action as ChangeAction
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
from weir.jobmaster.checkpointing import JobCheckpointing
from weir.jobmaster.collect import CollectBuffer
from weir.jobmaster.deployment import RetryAllocation, SlotWaits
from weir.jobmaster.execution_graph import ExecutionGraph, ExecutionVertex
from weir.jobmaster.failover import FailoverStrategy, TaskId, create_failover_strategy
from weir.jobmaster.job_lifecycle import JobTimes, final_status
from weir.jobmaster.main_thread import MainThreadExecutor
from weir.jobmaster.recovery_history import RecoveryHistory
from weir.jobmaster.region_restarter import Action as RestartAction
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
from weir.jobmaster.resource_manager import ResourceManager, Slot
from weir.jobmaster.restart_strategy import RestartStrategy, create_restart_strategy
from weir.jobmaster.source_coordinator import SourceCoordinator
from weir.jobmaster.task_deployer import TaskDeployer, task_id
from weir.jobmaster.task_restore import master_states_for
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2, jobmaster_pb2
from weir.shuffle.api import ShuffleMaster
from weir.state import options as state_options

__all__ = ["JobScheduler", "master_states_for"]

log = logging.getLogger(__name__)

RUNNING_OR_FINISHED = (common_pb2.RUNNING, common_pb2.FINISHED)


class JobScheduler:
    """Drives one job's ExecutionGraph. ``on_terminal`` is called once when the job ends.
    ``clock`` (epoch ms) is every time the job's decisions read."""

    def __init__(self, job_graph: jobgraph_pb2.JobGraph, resources: ResourceManager,
                 shuffle_master: ShuffleMaster, main: MainThreadExecutor,
                 configuration: Configuration, on_terminal: Callable[[JobScheduler], None],
                 io: Executor | None = None, clock: Clock = wall_clock_ms) -> None:
        """Raises ConfigError when the job's configuration cannot work (checkpointing
        without a checkpoint directory, say)."""
        self._clock = clock
        self.graph = ExecutionGraph(job_graph, clock)
        self.job_id = self.graph.job_id
        self.sources = SourceCoordinator(job_graph, configuration)
        self.collect = CollectBuffer(configuration.get(jm_options.COLLECT_BUFFER_BATCHES))
        self._resources = resources
        self._main = main
        self._config = configuration
        self._on_terminal = on_terminal
        self.batch = configuration.get(options.RUNTIME_MODE).upper() == "BATCH"
        self.checkpointing: JobCheckpointing | None = None
        if checkpointing_enabled(configuration):
            assert io is not None, "checkpointing needs the JobMaster's I/O pool"
            self.checkpointing = JobCheckpointing(
                self.job_id, configuration, self.graph, self.sources, resources, main, io,
                self.fail, clock)
        slot_timeout_ms = round(configuration.get(jm_options.SLOT_REQUEST_TIMEOUT) * 1000)
        self.restarter = RegionRestarter(
            self.job_id,
            create_restart_strategy(configuration, self.checkpointing is not None, clock),
            self._failover_strategy(job_graph), clock, batch=self.batch,
            slot_timeout_ms=slot_timeout_ms)
        self.changes = ChangeProcess(self.job_id, clock, batch=self.batch)
        self._change_done: Callable[[jobmaster_pb2.JobChange | None, str | None], None] | \
            None = None
        self.slot_waits = SlotWaits(
            self.job_id, clock, slot_timeout_ms=slot_timeout_ms,
            local_wait_ms=round(configuration.get(state_options.LOCAL_RECOVERY_WAIT) * 1000))
        self.times = JobTimes(clock)
        #: Restarts and restores (``recoveries`` of ``/jobs/:jobid``).
        self.recoveries = RecoveryHistory(clock, configuration.get(
            jm_options.CHECKPOINTS_HISTORY))
        self.deployer = TaskDeployer(
            self.job_id, self.graph, resources, shuffle_master, main, configuration,
            self.slot_waits, batch=self.batch, topology=lambda: self.failover.topology,
            on_deploy_failed=self._task_failed, on_cancel_timeout=self._check_progress,
            recover_without_channel_state=self.checkpointing.recover_without_channel_state
            if self.checkpointing is not None else None)
        #: The last rescale or update made.
        self.last_change: jobmaster_pb2.JobChange | None = None
        #: Called with the job graph after a change (high availability stores it).
        self.on_graph_changed: Callable[[jobgraph_pb2.JobGraph], None] | None = None
        #: When the scheduled wake-up fires (epoch ms; None: none is scheduled).
        self._timer_at: int | None = None
        #: Called on the main thread when a checkpoint completed or failed, or a recovery
        #: began, progressed or ended (high availability stores the history).
        self._on_history_changed: Callable[[], None] | None = None

    # -- history ----------------------------------------------------------------------------

    @property
    def on_history_changed(self) -> Callable[[], None] | None:
        return self._on_history_changed

    @on_history_changed.setter
    def on_history_changed(self, callback: Callable[[], None] | None) -> None:
        self._on_history_changed = callback
        self.recoveries.on_change = callback
        if self.checkpointing is not None:
            self.checkpointing.on_history_changed = callback

    def history(self) -> jobmaster_pb2.JobHistory:
        """What high availability keeps of the job's past (main thread): its finished
        checkpoints and its recoveries, the newest ``web.checkpoints.history`` of each."""
        history = jobmaster_pb2.JobHistory(recoveries=self.recoveries.entries())
        if self.checkpointing is not None:
            coordinator = self.checkpointing.coordinator
            history.checkpoints.extend(
                s for s in coordinator.stats()
                if s.status != checkpoint_pb2.CheckpointStats.IN_PROGRESS)
            history.completed_checkpoints = coordinator.counts["completed"]
            history.failed_checkpoints = coordinator.counts["failed"]
        return history

    def restore_history(self, history: jobmaster_pb2.JobHistory) -> None:
        """The job's past as an earlier JobMaster stored it (before the job starts): its
        checkpoints, and its recoveries, whose causes also head the restart causes
        (``/jobs/:jobid/exceptions``)."""
        self.recoveries.restore(history.recoveries)
        causes = self.restarter.causes
        mine = list(causes)
        causes.clear()
        causes.extend([*(r.cause for r in history.recoveries), *mine])  # the newest kept
        if self.checkpointing is not None:
            self.checkpointing.coordinator.restore_history(
                history.checkpoints, history.completed_checkpoints,
                history.failed_checkpoints)

    def taken_over(self, checkpoint: CompletedCheckpoint | None) -> None:
        """This JobMaster recovered the job from high-availability storage (its previous
        JobMaster was lost): a recovery, from now until every task runs, restoring
        ``checkpoint`` (None: the job starts afresh). Call before starting the job."""
        cause = common_pb2.ErrorInfo(
            reason=common_pb2.JOBMASTER_FAILOVER,
            message="the job's JobMaster was lost; this JobMaster recovered the job from "
                    "high-availability storage", timestamp_ms=self._clock())
        self.restarter.causes.append(cause)
        self.recoveries.failed(cause, tasks=len(self.graph.all()))
        self.recoveries.restoring(checkpoint.checkpoint_id if checkpoint else None)

    # -- what the state machines know -------------------------------------------------------

    @property
    def restored(self) -> CompletedCheckpoint | None:
        """The checkpoint the current attempts restored from (None: none)."""
        return self.deployer.restored

    @restored.setter
    def restored(self, checkpoint: CompletedCheckpoint | None) -> None:
        self.deployer.restored = checkpoint

    @property
    def slots(self) -> list[Slot]:
        """STREAMING: the job's slot of each pipeline (empty: it has none yet)."""
        return self.deployer.slots

    @property
    def restart_strategy(self) -> RestartStrategy:
        return self.restarter.restart_strategy

    @property
    def failover(self) -> FailoverStrategy:
        return self.restarter.failover

    @property
    def restarts(self) -> int:
        return self.restarter.restarts

    @property
    def restart_causes(self) -> deque[common_pb2.ErrorInfo]:
        return self.restarter.causes

    @property
    def restore_timestamp_ms(self) -> int:
        return self.times.restore_timestamp_ms

    @property
    def last_restart_duration_ms(self) -> int:
        return self.times.last_restart_duration_ms

    @property
    def required_slots(self) -> int:
        return max(v.parallelism for v in self.graph.job_graph.vertices)

    def checkpoint_timeout_s(self) -> float:
        return float(self._config.get(checkpoint_options.CHECKPOINTING_TIMEOUT))

    def slot_timeout_s(self) -> float:
        return float(self._config.get(jm_options.SLOT_REQUEST_TIMEOUT))

    # -- starting ---------------------------------------------------------------------------

    def start(self) -> None:
        self._set_running()

    def start_from(self, checkpoint: CompletedCheckpoint) -> None:
        """Start the job restored from ``checkpoint`` instead of afresh: a job that a
        restarted JobMaster recovers (high availability). Main thread; the caller has
        registered the checkpoint with ``checkpointing`` (``add_restored``). The job then
        waits for slots as after ``start()`` (slot.request.timeout applies). Raises what
        restoring the split enumerators raises (user code)."""
        assert self.checkpointing is not None, "restoring a checkpoint needs checkpointing"
        self.sources.restore(master_states_for(checkpoint.metadata, self.graph.job_graph))
        self.restored = checkpoint
        self.times.restoring_now()
        log.info("job %s starts from checkpoint %d (%s)", self.job_id,
                 checkpoint.checkpoint_id, checkpoint.external_path)
        self._set_running()
        # From submission (or recovery).
        self.times.restore_counts_from(self.times.restore_timestamp_ms)

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

    def _set_running(self) -> None:
        self.graph.status = common_pb2.JOB_RUNNING
        self.times.running(restored=self.restored is not None)
        self.slot_waits.on_job_started()
        if self.checkpointing is not None:
            self.checkpointing.job_running()
        self.try_allocate()

    # -- deployment -------------------------------------------------------------------------

    def try_allocate(self) -> None:
        """Deploy what can run now: everything at once (STREAMING, one shared slot per
        pipeline), or the subtasks not deployed yet of the vertices whose inputs have all
        finished (BATCH, a slot each; a vertex's subtasks get theirs together)."""
        self._allocate()
        self._arm_timer()

    def _allocate(self) -> None:
        if self.graph.status != common_pb2.JOB_RUNNING:
            return
        if self.batch:
            self.deployer.deploy_ready_stages()
        elif not self.slots:
            self.deployer.deploy_pipelines()
        elif self.restarter.phase is RestartPhase.DEPLOYING:
            self._deploy_region()

    # -- rescale and update -----------------------------------------------------------------

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
        steady = self.graph.status == common_pb2.JOB_RUNNING and \
            not self.restarter.in_progress and bool(self.slots) and \
            all(ev.state in RUNNING_OR_FINISHED for ev in self.graph.all())
        job = JobFacts(checkpointing=self.checkpointing is not None, steady=steady,
                       slots_held=len(self.slots), free_slots=self._resources.free_slots())
        actions = self.changes.request(ChangeKind(kind), job_graph, self.graph.job_graph,
                                       restarted, job, check)
        for action in actions:
            if isinstance(action, ChangeRefused):
                done(None, action.message)
                return
        self._change_done = done
        self._run_change(actions)

    def _change_checkpointed(self, path: str | None, error: str | None) -> None:
        if self.changes.phase is not ChangePhase.CHECKPOINTING:
            return
        latest = None
        if error is None and self.checkpointing is not None:
            latest = self.checkpointing.coordinator.latest_completed()
            assert latest is not None and latest.external_path == path
        self._run_change(self.changes.on_checkpointed(latest, error))

    def _run_change(self, actions: Iterable[ChangeAction]) -> None:
        for action in actions:
            if isinstance(action, TakeCheckpoint):
                assert self.checkpointing is not None
                self.checkpointing.request_checkpoint(self._change_checkpointed)
            elif isinstance(action, CancelTasks):
                if self.checkpointing is not None:
                    self.checkpointing.job_not_running()
                self.deployer.cancel(None if action.every_task else
                                   self._outside(self.changes.keep))
                self._check_progress()
            elif isinstance(action, DeployChange):
                self._deploy_change(action)
            elif isinstance(action, ChangeCompleted):
                self.last_change = action.record
                if self.on_graph_changed is not None:
                    self.on_graph_changed(action.graph)
                self._report_change(action.record, None)
            elif isinstance(action, ChangeFailed):
                self._report_change(None, action.message)

    def _report_change(self, record: jobmaster_pb2.JobChange | None, error: str | None
                       ) -> None:
        done, self._change_done = self._change_done, None
        if done is not None:
            done(record, error)

    def _outside(self, keep: frozenset[int]) -> list[ExecutionVertex]:
        """The tasks a change restarts: all, but for the vertices ``keep`` (regions an
        update leaves running)."""
        return [ev for ev in self.graph.all() if ev.job_vertex.id not in keep]

    def _deploy_change(self, action: DeployChange) -> None:
        """Every old task ended: deploy the changed graph from the change's checkpoint.
        An update that leaves some regions running deploys only the other regions' tasks
        anew (into the job's slots, as a region restart does); their readers continue
        from the change's checkpoint."""
        checkpoint, graph = action.checkpoint, action.graph
        if action.keep:
            self.deployer.release_outputs(self._outside(action.keep))
            self.graph.replace(graph, keep=action.keep)
        else:
            self.deployer.release_all()
            self.graph.replace(graph)
            self.sources.replace_graph(graph)
        self.restarter.set_failover(self._failover_strategy(graph))
        if self.checkpointing is not None:
            self.checkpointing.set_job_graph(graph)
        self.restored = checkpoint
        self.times.restoring_now()
        if not action.keep:
            self.sources.restore(master_states_for(checkpoint.metadata, graph))
            self._set_running()
            # `weir status` reports the restore from the moment the old tasks were cancelled.
            self.times.restore_counts_from(action.down_since)
            return
        restarted = self._outside(action.keep)
        tasks = frozenset(task_id(ev) for ev in restarted)
        self.sources.reset_subtasks(tasks, checkpoint.checkpoint_id)
        self.times.restore_counts_from(action.down_since, tasks)
        self.deployer.deploy(restarted, lambda ev: self.slots[ev.subtask_index])
        if self.checkpointing is not None:
            self.checkpointing.job_running()

    def _failover_strategy(self, job_graph: jobgraph_pb2.JobGraph) -> FailoverStrategy:
        return create_failover_strategy(self._config.get(jm_options.FAILOVER_STRATEGY),
                                        job_graph, self.batch)

    # -- failures ---------------------------------------------------------------------------

    def fail(self, error: common_pb2.ErrorInfo) -> None:
        """The current attempt failed with ``error``: restart if the restart strategy
        allows, else fail the job with it as the root cause (the first failure wins)."""
        self._stamp(error)
        if self.graph.status not in (common_pb2.JOB_RUNNING, common_pb2.JOB_CREATED):
            self._check_progress()
            return
        self._run_change(self.changes.abandon(error.message))
        if self.checkpointing is not None:
            self.checkpointing.job_not_running()
        self.times.went_down()
        self._restart(self.restarter.on_job_failure(
            error, [task_id(ev) for ev in self.graph.all()]))

    def fail_terminal(self, error: common_pb2.ErrorInfo) -> None:
        """End the job FAILED with ``error``, whatever the restart strategy says."""
        self._stamp(error)
        self.restarter.on_job_stopped()
        self._restart([FailTerminally(error, recoverable=False)])

    def cancel(self) -> None:
        if self.graph.status not in (common_pb2.JOB_RUNNING, common_pb2.JOB_CREATED,
                                     common_pb2.JOB_RESTARTING):
            return
        self._run_change(self.changes.abandon("the job was cancelled"))
        if self.checkpointing is not None:
            self.checkpointing.job_not_running()
        self.restarter.on_job_stopped()
        self.graph.status = common_pb2.JOB_CANCELLING
        self.graph.failure = common_pb2.ErrorInfo(reason=common_pb2.JOB_CANCELLED,
                                                  message="the job was cancelled",
                                                  timestamp_ms=self._clock())
        self.deployer.cancel()
        self._check_progress()

    def on_task_executor_lost(self, resource_id: ResourceId, reason: common_pb2.FailureReason,
                              message: str) -> None:
        lost = [ev for ev in self.graph.all()
                if ev.resource_id == resource_id and not ev.is_terminal]
        now = self._clock()
        for ev in lost:
            ev.state = common_pb2.FAILED
            ev.failure = common_pb2.ErrorInfo(reason=reason, message=message, task=ev.name,
                                              timestamp_ms=now)
        if lost and self.graph.status in (common_pb2.JOB_FAILING, common_pb2.JOB_RESTARTING):
            # A consumer may have reported its broken connection to these tasks first: the
            # lost TaskExecutor is the cause to report.
            root = self.restarter.root_cause(
                self.graph.failure, common_pb2.ErrorInfo(reason=reason, message=message,
                                                         task=lost[0].name, timestamp_ms=now),
                failing=self.graph.status == common_pb2.JOB_FAILING)
            if root is not None:
                self.graph.failure = root
                self.recoveries.cause_refined(root)
        # The result partitions the shuffle master says went with it restart their
        # producers (Flink's rule; an external shuffle service keeps them). In BATCH a
        # finished producer whose lost output is still to be read restarts now, rather
        # than when its consumers fail to read it.
        gone = self.deployer.lost_outputs()
        needed = [ev for ev in self.graph.all() if self.batch
                  and ev.state == common_pb2.FINISHED and ev.resource_id == resource_id
                  and task_id(ev) in gone and self._feeds_unfinished(ev)]
        if lost or needed:
            self._failover(lost + needed, common_pb2.ErrorInfo(
                reason=reason, message=message, task=(lost or needed)[0].name,
                timestamp_ms=now))
        self._check_progress()

    def _feeds_unfinished(self, ev: ExecutionVertex) -> bool:
        """Some task that reads ``ev``'s output has not finished."""
        task = task_id(ev)
        return any(task in self.failover.topology.inputs_of(task_id(consumer))
                   and consumer.state != common_pb2.FINISHED
                   for vertex, _ in self.graph.consumers_of(ev.job_vertex.id)
                   for consumer in self.graph.vertices[vertex.id])

    def _stamp(self, error: common_pb2.ErrorInfo) -> common_pb2.ErrorInfo:
        """Note when the JobMaster learned of ``error`` (kept if noted already)."""
        if not error.timestamp_ms:
            error.timestamp_ms = self._clock()
        return error

    def _task_failed(self, ev: ExecutionVertex, error: common_pb2.ErrorInfo) -> None:
        self._stamp(error)
        self._resources.note_task_failure(ev.resource_id)
        ev.state = common_pb2.FAILED
        ev.failure = error
        if not error.task:
            error.task = ev.name
        self._failover([ev], error)

    def _failover(self, failed: list[ExecutionVertex], error: common_pb2.ErrorInfo,
                  lost: frozenset[TaskId] = frozenset()) -> None:
        """Restart what ``failed`` (and the outputs ``lost`` with a TaskExecutor) require.
        A change in progress may take the failure as its own (see ChangeProcess)."""
        actions = self.changes.on_task_failure({ev.job_vertex.id for ev in failed}, error)
        self._run_change(actions)
        if self.changes.phase is ChangePhase.CANCELLING:
            if not actions:
                self._check_progress()
            return
        evs = self.graph.all()
        self._restart(self.restarter.on_task_failure(
            [task_id(ev) for ev in failed], error, tasks=[task_id(ev) for ev in evs],
            slots_held=bool(self.slots),
            running=self.graph.status == common_pb2.JOB_RUNNING,
            lost=lost | self.deployer.lost_outputs(),
            finished=[task_id(ev) for ev in evs if ev.state == common_pb2.FINISHED]))

    # -- restarts ---------------------------------------------------------------------------

    def _restart(self, actions: Iterable[RestartAction]) -> None:
        """Perform the region restarter's ``actions``."""
        for action in actions:
            if isinstance(action, (RestartRegion, RestartJob, FailAttempt, FailTerminally)):
                self._stamp(action.error)
            if isinstance(action, RestartRegion):
                if self.checkpointing is not None:
                    self.checkpointing.job_not_running()
                self.times.went_down(keep_earlier=True)
                self.recoveries.failed(action.error, len(action.tasks))
                self.graph.failure = action.error
                self.deployer.cancel(self._region(action.tasks))
                self._check_progress()
            elif isinstance(action, FailAttempt):
                self.fail(action.error)
            elif isinstance(action, RestartJob):
                self.recoveries.failed(action.error, len(self.graph.all()))
                self.graph.failure = action.error
                self.graph.status = common_pb2.JOB_RESTARTING
                self.deployer.cancel()
                self._check_progress()
            elif isinstance(action, FailTerminally):
                self._fail_job(action)
            elif isinstance(action, StartAttempts):
                self._start_attempts(action)
            elif isinstance(action, FindCheckpoint):
                self._find_checkpoint()
            elif isinstance(action, DeployRestored):
                self._resume(action)
        self._arm_timer()

    def _fail_job(self, action: FailTerminally) -> None:
        if not action.recoverable:
            self._run_change(self.changes.abandon(action.error.message))
        elif self.checkpointing is not None:
            self.checkpointing.job_not_running()
        log.warning("job %s fails: %s", self.job_id, action.error.message)
        self.graph.failure = action.error
        self.graph.status = common_pb2.JOB_FAILING
        self.deployer.cancel()
        self._check_progress()

    def _start_attempts(self, action: StartAttempts) -> None:
        """The cancelled tasks start over as new attempts (their slots and partitions go
        back: a whole job's all of them)."""
        if action.scope is RestartScope.JOB:
            self.deployer.release_all()
            self.graph.new_attempts()
            return
        region = self._region(action.tasks)
        self.deployer.release_tasks(region)
        for ev in region:
            self.graph.new_attempt(ev)

    def _find_checkpoint(self) -> None:
        checkpointing = self.checkpointing
        if checkpointing is None:
            self._restart(self.restarter.on_checkpoint_found(None))
            return
        had_checkpoints = checkpointing.coordinator.had_completed()

        def found(checkpoint: CompletedCheckpoint | None, warnings: list[str],
                  unreachable: Exception | None = None) -> None:
            for warning in warnings:
                log.warning("job %s: %s", self.job_id, warning)
            problems = [*checkpointing.coordinator.unusable(), *warnings]
            self._restart(self.restarter.on_checkpoint_found(
                checkpoint, had_checkpoints=had_checkpoints, problems=problems,
                unreachable=unreachable))

        checkpointing.find_restorable(found)

    def _resume(self, action: DeployRestored) -> None:
        checkpoint = self.restored = action.checkpoint
        self.recoveries.restoring(checkpoint.checkpoint_id if checkpoint else None)
        if action.scope is RestartScope.JOB:
            if checkpoint is not None:
                self.times.restoring_now()
                self.sources.restore(master_states_for(checkpoint.metadata,
                                                       self.graph.job_graph))
                log.info("job %s restores checkpoint %d (%s)", self.job_id,
                         checkpoint.checkpoint_id, checkpoint.external_path)
            else:
                self.sources.close()
            self._set_running()
            return
        self.times.restoring_now()
        self.sources.reset_subtasks(action.tasks,
                                    checkpoint.checkpoint_id if checkpoint else None)
        self.times.region_running(action.tasks, restored=checkpoint is not None)
        self._deploy_region()

    def _deploy_region(self) -> None:
        """Deploy the region into its slots; a slot whose TaskExecutor is gone is replaced
        (preferring the TaskExecutor holding its local state), or the region waits for one.
        BATCH: the region's tasks are deployed as their inputs are ready, as at the start."""
        if self.batch:
            self.restarter.on_region_deployed()
            self._allocate()
            return
        evs = self._region(self.restarter.tasks)
        if not self.deployer.region_slots(evs):
            return
        self.restarter.on_region_deployed()
        self.deployer.deploy(evs, lambda ev: self.slots[ev.subtask_index])
        if self.checkpointing is not None:
            self.checkpointing.job_running()

    def _region(self, tasks: frozenset[TaskId]) -> list[ExecutionVertex]:
        """The current attempts of ``tasks``, in the job's order."""
        return [ev for ev in self.graph.all() if task_id(ev) in tasks]

    # -- timers -----------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        """Wake up on the main thread when a state machine's next deadline is due."""
        due = [t for t in (self.restarter.next_wakeup_ms(), self.slot_waits.next_wakeup_ms())
               if t is not None]
        if not due or self.graph.is_terminal():
            return
        wakeup = min(due)
        if self._timer_at is not None and self._timer_at <= wakeup:
            return  # an earlier wake-up comes first, and arms the next
        self._timer_at = wakeup
        self._main.schedule(max(0.0, (wakeup - self._clock()) / 1000),
                            lambda: self._on_timer(wakeup))

    def _on_timer(self, wakeup: int) -> None:
        if self._timer_at == wakeup:
            self._timer_at = None
        if self.graph.is_terminal():
            return
        for action in self.slot_waits.on_tick():
            if isinstance(action, RetryAllocation):
                self._allocate()
            elif self.graph.status == common_pb2.JOB_RUNNING:  # SlotRequestTimedOut
                self.fail(common_pb2.ErrorInfo(
                    reason=common_pb2.NO_RESOURCES,
                    message=(f"could not get the slots the job needs within "
                             f"{action.timeout_ms / 1000:.0f} s (slot.request.timeout): the "
                             f"cluster has {self._resources.free_slots()} free of "
                             f"{self._resources.total_slots()}; start more TaskExecutors "
                             "or lower the job's parallelism")))
        self._restart(self.restarter.on_tick())

    # -- task states and the job's end ------------------------------------------------------

    def on_task_state(self, update: jobmaster_pb2.TaskExecutionStateUpdate) -> None:
        ev = self.graph.by_attempt.get(ExecutionAttemptId(update.attempt_id))
        if ev is None or ev.is_terminal:
            return
        if update.HasField("metrics"):
            ev.metrics = update.metrics
        if update.state == common_pb2.FAILED:
            self._on_task_failed(ev, update.error)
            return
        ev.state = update.state
        if update.HasField("restore"):
            ev.restore = update.restore
        evs = self.graph.all()
        if update.state == common_pb2.RUNNING and \
                all(e.state in RUNNING_OR_FINISHED for e in evs):
            restore = None
            if self.times.restoring and self.restored is not None:
                restore = self._restored(self.restored, evs)
            if self.recoveries.in_progress and not self.restarter.in_progress:
                self.recoveries.recovered(restore)
        if update.state in RUNNING_OR_FINISHED and self.changes.phase is ChangePhase.DEPLOYING \
                and all(e.state in RUNNING_OR_FINISHED for e in evs):
            self._run_change(self.changes.on_running())
        if self.checkpointing is not None and self.graph.status == common_pb2.JOB_RUNNING:
            self.checkpointing.on_task_state(ev.attempt_id, update.state)
        if self.batch and update.state == common_pb2.FINISHED:
            self.deployer.finished(ev)
            self.try_allocate()
        self._check_progress()

    def _on_task_failed(self, ev: ExecutionVertex, error: common_pb2.ErrorInfo) -> None:
        self._stamp(error)
        if ev.state == common_pb2.CANCELING:
            # Failing while being cancelled (e.g. its producer was cancelled first) is
            # the end of cancellation, not a new failure: as Flink does.
            ev.state = common_pb2.CANCELED
            root = self.restarter.root_cause(
                self.graph.failure, error, failing=self.graph.status == common_pb2.JOB_FAILING)
            if root is not None:
                self.graph.failure = root
                self.recoveries.cause_refined(root)
            self._check_progress()
            return
        if error.reason == common_pb2.STATE_RESTORE_FAILED and \
                self.restored is not None and self.checkpointing is not None:
            log.warning("job %s: checkpoint %d is unusable (%s); the next restart uses "
                        "an older retained checkpoint", self.job_id,
                        self.restored.checkpoint_id, error.message)
            self.checkpointing.forget(self.restored.checkpoint_id, error.message)
        if error.reason == common_pb2.STATE_INCOMPATIBLE and \
                self.changes.phase is not ChangePhase.DEPLOYING:
            # Restarting would restore the same state into the same code again.
            self._resources.note_task_failure(ev.resource_id)
            ev.state = common_pb2.FAILED
            ev.failure = error
            self.fail_terminal(error)
            return
        if error.reason == common_pb2.PARTITION_NOT_FOUND and error.partition_id:
            # Its producer must produce it again (the region rule's lost input).
            self.deployer.partitions.lost.add(PartitionId(error.partition_id))
        self._task_failed(ev, error)

    def _restored(self, checkpoint: CompletedCheckpoint, evs: list[ExecutionVertex]
                  ) -> jobmaster_pb2.RestoreStats | None:
        """Every task of a restored attempt runs (or already finished): note what the
        restore cost, from the failure on (``weir status --json`` ``last_restore``), and
        return it (None: no restore was in progress)."""
        stats = self.times.restored(checkpoint.checkpoint_id,
                                    [(task_id(ev), ev.restore) for ev in evs])
        if stats is None:
            return None
        self.graph.last_restore = stats
        log.info("job %s restored checkpoint %d in %d ms (%d bytes local, %d remote)",
                 self.job_id, checkpoint.checkpoint_id, stats.duration_ms,
                 stats.local_bytes, stats.remote_bytes)
        return stats

    def _check_progress(self) -> None:
        graph = self.graph
        if graph.is_terminal():
            return
        evs = graph.all()
        if graph.status == common_pb2.JOB_RUNNING and \
                self.changes.phase is ChangePhase.CANCELLING and \
                all(ev.is_terminal for ev in self._outside(self.changes.keep)):
            finished = all(ev.state == common_pb2.FINISHED for ev in evs)
            self._run_change(self.changes.on_cancelled(finished))
            if finished:
                self._end(common_pb2.JOB_FINISHED)
            return
        status = final_status(graph.status, [ev.state for ev in evs])
        if status is not None:
            self._end(status)
        elif graph.status in (common_pb2.JOB_RUNNING, common_pb2.JOB_RESTARTING):
            self._restart(self.restarter.on_tasks_ended(
                {task_id(ev) for ev in evs if ev.is_terminal}))

    def _end(self, status: common_pb2.JobStatus) -> None:
        graph = self.graph
        graph.status = status
        graph.end_time = self._clock() / 1000
        log.info("job %s (%s) %s", self.job_id, graph.job_graph.name,
                 common_pb2.JobStatus.Name(status))
        if self.checkpointing is not None:
            self.checkpointing.job_terminal(status)
        self.collect.close()
        self.sources.close()
        self.deployer.release_job()
        self._on_terminal(self)

    # -- queries ----------------------------------------------------------------------------

    def details(self) -> jobmaster_pb2.JobDetails:
        for ev in self.graph.all():
            record = self._resources.get(ev.resource_id) if ev.resource_id else None
            if record is not None and ev.attempt_id in record.metrics:
                ev.metrics = record.metrics[ev.attempt_id]
        details = self.graph.details()
        details.summary.restarts = self.restarts
        details.restart_causes.extend(self.restarter.causes)
        details.recoveries.extend(self.recoveries.entries())
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
        return self.times.times_ms(running=self.graph.status == common_pb2.JOB_RUNNING,
                                   terminal=self.graph.is_terminal())


