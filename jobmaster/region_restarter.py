"""Restarts after failures: an I/O-free state machine of one job's failover.

It is fed events — a task failed, the job's attempt failed, the tasks being restarted
ended, the clock moved on, the latest usable checkpoint was found, the restarted region
got its slots — and returns the actions that follow (cancel a region, restart or fail the
job, start new attempts, look up the checkpoint to restore, resume). The JobMaster's
adapter (:class:`~weir.jobmaster.scheduler.JobScheduler`) performs them and reports their
results as further events. The clock is injected: the restart strategy's delays and the
slot request timeout of a restarted region are tested by moving a manual clock.

Semantics (Flink's ``DefaultScheduler`` with ``RestartPipelinedRegionFailoverStrategy`` and a
``RestartBackoffTimeStrategy``):

* a task failure restarts what the failover strategy says; when that is not every task
  and the job runs, only those tasks (a *region* restart), else the job's whole attempt;
* the restart strategy decides first whether there is a restart at all; when it says no,
  the job fails with the failure as its root cause;
* a region restart goes CANCELLING (its tasks are cancelled) -> SCHEDULED (every one of
  them ended; the restart strategy's delay runs) -> RESTORING (new attempts; the latest
  usable checkpoint is looked up) -> DEPLOYING (the new attempts wait for slots, at most
  ``slot.request.timeout``) -> done. A restart of the whole job goes through the same
  phases, the job RESTARTING meanwhile;
* a BATCH failure while a region restart is still under way joins it (its tasks restart
  too); a STREAMING one makes the job's whole attempt fail, as does a failure of a job
  that has no slots yet;
* while the checkpoint storage cannot be reached, looking up the checkpoint is tried again
  after the restart strategy's delay, each try counted as a failure.

Example:
    >>> from weir.core.clock import ManualClock
    >>> from weir.jobmaster.failover import create_failover_strategy
    >>> from weir.jobmaster.restart_strategy import FixedDelayRestartStrategy
    >>> from weir.proto import common_pb2, jobgraph_pb2
    >>> graph = jobgraph_pb2.JobGraph(vertices=[jobgraph_pb2.JobVertex(id=1, parallelism=2)])
    >>> clock = ManualClock(0)
    >>> restarter = RegionRestarter(
    ...     "job", FixedDelayRestartStrategy(3, 500, clock),
    ...     create_failover_strategy("region", graph, batch=False), clock,
    ...     batch=False, slot_timeout_ms=10_000)
    >>> error = common_pb2.ErrorInfo(message="boom")
    >>> everything = frozenset({(1, 0), (1, 1)})
    >>> restarter.on_task_failure([(1, 0)], error, tasks=everything, slots_held=True)[0].tasks
    frozenset({(1, 0)})
    >>> restarter.on_tasks_ended(frozenset({(1, 0)}))
    []
    >>> restarter.phase, restarter.next_wakeup_ms()
    (<RestartPhase.SCHEDULED: 'scheduled'>, 500)
    >>> clock.advance(500)
    >>> [type(a).__name__ for a in restarter.on_tick()]
    ['StartAttempts', 'FindCheckpoint']
    >>> [type(a).__name__ for a in restarter.on_checkpoint_found(None)]
    ['DeployRestored']
    >>> restarter.on_region_deployed(); restarter.phase
    <RestartPhase.IDLE: 'idle'>
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import Enum

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core.clock import Clock
from weir.core.ids import JobId
from weir.jobmaster.failover import FailoverStrategy, TaskId
from weir.jobmaster.restart_strategy import NoRestartStrategy, RestartStrategy
from weir.proto import common_pb2

log = logging.getLogger(__name__)

#: How many restart causes a job keeps (``weir status`` shows them).
RESTART_CAUSES_KEPT = 10

#: Failures that another task only notices: its connection to the failed one broke.
SYMPTOMS = frozenset({common_pb2.REMOTE_TRANSPORT, common_pb2.PARTITION_NOT_FOUND})
#: Failures that explain such a symptom, reported as the cause when they follow it.
ROOT_CAUSES = frozenset({common_pb2.USER_CODE_ERROR, common_pb2.TASK_EXECUTOR_LOST})


class RestartPhase(Enum):
    """Where a restart is."""

    #: No restart in progress.
    IDLE = "idle"
    #: The tasks to restart are being cancelled.
    CANCELLING = "cancelling"
    #: Every one of them ended; the restart strategy's delay runs.
    SCHEDULED = "scheduled"
    #: New attempts exist; the checkpoint to restore is being looked up.
    RESTORING = "restoring"
    #: A region's new attempts wait for slots (a whole job's restart is done by then).
    DEPLOYING = "deploying"


class RestartScope(Enum):
    """What a restart restarts."""

    #: The regions a failure reaches; the other tasks keep running (the job RUNNING).
    REGION = "region"
    #: Every task: the job's current attempt failed (the job RESTARTING).
    JOB = "job"


# -- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestartRegion:
    """A region restart begins, or grows: stop checkpointing, record ``error`` as the job's
    failure and cancel those of ``tasks`` that have not ended; report the tasks that ended
    with :meth:`RegionRestarter.on_tasks_ended`."""

    tasks: frozenset[TaskId]
    error: common_pb2.ErrorInfo


@dataclass(frozen=True)
class FailAttempt:
    """The failure needs every task restarted: the job's current attempt fails with
    ``error`` (the adapter's ``fail``, which feeds :meth:`RegionRestarter.on_job_failure`)."""

    error: common_pb2.ErrorInfo


@dataclass(frozen=True)
class RestartJob:
    """The job restarts: it is RESTARTING with ``error`` as its failure and every task is
    cancelled; report the tasks that ended with :meth:`RegionRestarter.on_tasks_ended`."""

    error: common_pb2.ErrorInfo


@dataclass(frozen=True)
class FailTerminally:
    """No (further) restart: the job fails with ``error`` (its message says why there is
    no restart) and every task is cancelled. ``recoverable`` False: the restart strategy
    was not asked, nothing could be restored."""

    error: common_pb2.ErrorInfo
    recoverable: bool = True


@dataclass(frozen=True)
class StartAttempts:
    """The cancelled tasks (``scope`` JOB: every task) start over as new attempts, giving
    back their slots and result partitions."""

    scope: RestartScope
    tasks: frozenset[TaskId]


@dataclass(frozen=True)
class FindCheckpoint:
    """Look up the latest usable checkpoint; report it with
    :meth:`RegionRestarter.on_checkpoint_found`."""


@dataclass(frozen=True)
class DeployRestored:
    """The new attempts restore ``checkpoint`` (None: the job has none) and are deployed:
    ``scope`` JOB: the job runs again; REGION: the region waits for its slots, report them
    with :meth:`RegionRestarter.on_region_deployed`."""

    scope: RestartScope
    tasks: frozenset[TaskId]
    checkpoint: CompletedCheckpoint | None


Action = (RestartRegion | FailAttempt | RestartJob | FailTerminally | StartAttempts | FindCheckpoint
          | DeployRestored)


class RegionRestarter:
    """The failover of one job. Not thread-safe: the JobMaster's main thread alone feeds
    it. Every ``on_*`` method returns the actions to perform, in order."""

    def __init__(self, job_id: JobId, restart_strategy: RestartStrategy,
                 failover: FailoverStrategy, clock: Clock, *, batch: bool,
                 slot_timeout_ms: int) -> None:
        self.job_id = job_id
        self.restart_strategy = restart_strategy
        self.failover = failover
        self._clock = clock
        self._batch = batch
        self._slot_timeout_ms = slot_timeout_ms
        self.phase = RestartPhase.IDLE
        self.scope = RestartScope.REGION
        #: The tasks the restart in progress restarts.
        self.tasks: frozenset[TaskId] = frozenset()
        #: Restarts made (counted when new attempts start).
        self.restarts = 0
        self.causes: deque[common_pb2.ErrorInfo] = deque(maxlen=RESTART_CAUSES_KEPT)
        #: SCHEDULED: when the delay ends; RESTORING: when to look the checkpoint up again
        #: (the storage was unreachable); DEPLOYING: when the region's slots time out.
        self._due_ms: int | None = None

    # -- inputs: failures ---------------------------------------------------------------

    def on_task_failure(self, failed: Iterable[TaskId], error: common_pb2.ErrorInfo, *,
                        tasks: Collection[TaskId], slots_held: bool, running: bool = True,
                        lost: frozenset[TaskId] = frozenset(),
                        finished: Collection[TaskId] = ()) -> list[Action]:
        """Tasks ``failed`` with ``error`` (``lost``: tasks whose result partitions cannot
        be read any more; ``finished``: tasks that finished) while the job had ``tasks``;
        ``running``: the job is RUNNING (not starting or restarting as a whole);
        ``slots_held``: a STREAMING job has its slots."""
        if not running or (not self._batch and (self.phase is not RestartPhase.IDLE
                                                or not slots_held)):
            return [FailAttempt(error)]
        restart: set[TaskId] = set(self.tasks) if self.phase is not RestartPhase.IDLE \
            else set()
        for task in failed:
            restart |= self.failover.tasks_to_restart(task, lost_producers=lost,
                                                      finished=finished)
        if len(restart) >= len(tasks):
            return [FailAttempt(error)]
        self.restart_strategy.notify_failure()
        if not self.restart_strategy.can_restart():
            return self._fail(error)
        log.warning("job %s restarts %d of its %d tasks (region failover, restart %d): %s",
                    self.job_id, len(restart), len(tasks), self.restarts + 1, error.message)
        self.causes.append(error)
        self._begin(RestartScope.REGION, frozenset(restart))
        return [RestartRegion(self.tasks, error)]

    def on_job_failure(self, error: common_pb2.ErrorInfo, tasks: Collection[TaskId]
                       ) -> list[Action]:
        """The job's current attempt (of ``tasks``) failed: restart it whole if the restart
        strategy allows. A region restart in progress is overtaken."""
        self.restart_strategy.notify_failure()
        if not self.restart_strategy.can_restart():
            return self._fail(error)
        log.warning("job %s restarts after a failure (restart %d): %s", self.job_id,
                    self.restarts + 1, error.message)
        self.causes.append(error)
        self._begin(RestartScope.JOB, frozenset(tasks))
        return [RestartJob(error)]

    def on_job_stopped(self) -> None:
        """The job is cancelled or fails for good: no restart goes on."""
        self.phase = RestartPhase.IDLE
        self.tasks = frozenset()
        self._due_ms = None

    def root_cause(self, current: common_pb2.ErrorInfo | None, error: common_pb2.ErrorInfo,
                   *, failing: bool) -> common_pb2.ErrorInfo | None:
        """The failure to report instead of ``current`` now that a task being cancelled
        failed with ``error``, or its TaskExecutor was lost (None: keep ``current``). A task
        failing in user code, or a lost TaskExecutor, is the cause when ``current`` was
        reported by another task that only lost its connection to it (its consumer, say,
        saw the channel close first). ``failing``: the job fails (its message says why
        there is no restart)."""
        if current is None or error.reason not in ROOT_CAUSES or \
                current.reason not in SYMPTOMS:
            return None
        root = common_pb2.ErrorInfo()
        root.CopyFrom(error)
        if failing and not isinstance(self.restart_strategy, NoRestartStrategy):
            root.message += f" ({self.restarts} restart(s); {self.restart_strategy.describe()})"
        if self.causes and self.causes[-1] is current:
            self.causes[-1] = root
        return root

    # -- inputs: progress ---------------------------------------------------------------

    def on_tasks_ended(self, ended: Collection[TaskId]) -> list[Action]:
        """``ended``: the job's tasks that have ended (finished, cancelled or failed). Once
        every task being restarted did, the restart strategy's delay starts."""
        if self.phase is not RestartPhase.CANCELLING or not self.tasks <= set(ended):
            return []
        delay = self.restart_strategy.backoff_ms()
        self.phase = RestartPhase.SCHEDULED
        self._due_ms = self._clock() + delay
        log.info("job %s restarts %sin %.1f s", self.job_id,
                 "the region " if self.scope is RestartScope.REGION else "", delay / 1000)
        return []

    def on_tick(self) -> list[Action]:
        """The clock moved on: a delay ended, or a restarted region's slots timed out."""
        if self._due_ms is None or self._clock() < self._due_ms:
            return []
        self._due_ms = None
        if self.phase is RestartPhase.SCHEDULED:
            self.phase = RestartPhase.RESTORING
            self.restarts += 1
            return [StartAttempts(self.scope, self.tasks), FindCheckpoint()]
        if self.phase is RestartPhase.RESTORING:
            return [FindCheckpoint()]
        if self.phase is RestartPhase.DEPLOYING:
            seconds = self._slot_timeout_ms / 1000
            return [FailAttempt(common_pb2.ErrorInfo(
                reason=common_pb2.NO_RESOURCES,
                message=(f"could not get slots for the restarted region within "
                         f"{seconds:.0f} s (slot.request.timeout)")))]
        return []

    def on_checkpoint_found(self, checkpoint: CompletedCheckpoint | None, *,
                            had_checkpoints: bool = False, problems: Iterable[str] = (),
                            unreachable: Exception | None = None) -> list[Action]:
        """The latest usable checkpoint (None: none); ``had_checkpoints``: the job had
        retained ones when the look-up began (``problems`` says why none was usable);
        ``unreachable``: the storage could not be reached, so nothing was judged."""
        if self.phase is not RestartPhase.RESTORING or self._due_ms is not None:
            return []  # overtaken by another failure, a cancellation, or a retry to come
        if unreachable is not None:
            error = common_pb2.ErrorInfo(
                reason=common_pb2.STATE_RESTORE_FAILED,
                message=f"cannot reach the checkpoint storage to restore: {unreachable}")
            self.restart_strategy.notify_failure()
            if not self.restart_strategy.can_restart():
                return self._fail(error)
            delay = self.restart_strategy.backoff_ms()
            log.warning("job %s: %s; trying again in %.1f s", self.job_id, error.message,
                        delay / 1000)
            self._due_ms = self._clock() + delay
            return []
        if checkpoint is None and had_checkpoints:
            self.on_job_stopped()
            return [FailTerminally(common_pb2.ErrorInfo(
                reason=common_pb2.STATE_RESTORE_FAILED,
                message="no retained checkpoint can be restored: " + "; ".join(problems)),
                recoverable=False)]
        resume = DeployRestored(self.scope, self.tasks, checkpoint)
        if self.scope is RestartScope.JOB:
            self.on_job_stopped()
        else:
            self.phase = RestartPhase.DEPLOYING
            self._due_ms = self._clock() + self._slot_timeout_ms
        return [resume]

    def on_region_deployed(self) -> None:
        """The restarted region's new attempts have their slots (BATCH: they are deployed
        as their inputs are ready, as at the start): the restart is done."""
        if self.phase is RestartPhase.DEPLOYING:
            self.on_job_stopped()

    def set_failover(self, failover: FailoverStrategy) -> None:
        """The job runs another graph (a rescale or update)."""
        self.failover = failover

    # -- queries ------------------------------------------------------------------------

    @property
    def in_progress(self) -> bool:
        return self.phase is not RestartPhase.IDLE

    def next_wakeup_ms(self) -> int | None:
        """When :meth:`on_tick` has something to do (None: nothing is timed)."""
        return self._due_ms

    # -- internals ----------------------------------------------------------------------

    def _begin(self, scope: RestartScope, tasks: frozenset[TaskId]) -> None:
        self.scope = scope
        self.tasks = tasks
        self.phase = RestartPhase.CANCELLING
        self._due_ms = None

    def _fail(self, error: common_pb2.ErrorInfo) -> list[Action]:
        """The restart strategy allows no more restarts: the job fails with ``error``."""
        self.on_job_stopped()
        failed = common_pb2.ErrorInfo()
        failed.CopyFrom(error)
        if self.restarts or not isinstance(self.restart_strategy, NoRestartStrategy):
            failed.message += (f" ({self.restarts} restart(s); "
                               f"{self.restart_strategy.describe()})")
        return [FailTerminally(failed)]
