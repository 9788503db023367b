"""The checkpoint coordinator: an I/O-free state machine of one job's checkpoints.

It is fed events — a clock tick, a task's acknowledgement or decline, the result of
writing ``_metadata``, a task that ran, finished or failed, the job's status — and returns
the actions that follow (trigger the sources, write the metadata, notify the tasks,
discard files, fail the job). It never sends, writes or sleeps itself: the JobMaster's
adapter (``weir.jobmaster.checkpointing``) performs the actions and reports their results
as further events. The clock is injected, so timeouts, intervals and the pause between
checkpoints are tested by moving a manual clock.

Semantics are Flink's ``CheckpointCoordinator``:

* a checkpoint is triggered every ``interval`` while the job runs and every task it needs
  is RUNNING, unless ``max-concurrent-checkpoints`` are in progress or less than
  ``min-pause`` passed since the last one ended;
* it completes when every task acknowledged and ``_metadata`` was written; completing
  checkpoint n aborts pending checkpoints older than n (subsumed) and discards completed
  ones beyond ``state.checkpoints.num-retained``;
* it fails on a decline, on expiry (``timeout``), when writing ``_metadata`` fails, or when
  a task fails; declines, expiry and storage failures count towards
  ``tolerable-failed-checkpoints`` (a completed checkpoint resets the count) and exceeding
  it fails the job;
* when every source has read all its input (bounded jobs), the next checkpoint is
  triggered at once: tasks finish only after a checkpoint taken after their end of input
  completed (FLIP-147), so two-phase-commit sinks commit their last data.

Example:
    >>> from weir.core.clock import ManualClock
    >>> clock = ManualClock(0)
    >>> settings = CheckpointCoordinatorConfiguration(interval_ms=1000)
    >>> c = CheckpointCoordinator("job", settings, clock)
    >>> c.on_job_running([TaskInfo("a1", vertex_id=1, subtask_index=0, name="src")],
    ...                  inputs={(1, 0): []})
    []
    >>> c.on_task_running("a1")
    []
    >>> clock.advance(1000)
    >>> [type(a).__name__ for a in c.on_tick()]
    ['TriggerCheckpoint']
    >>> [type(a).__name__ for a in c.on_acknowledge("a1", 1, TaskStateSnapshot())]
    ['FinalizeCheckpoint']
    >>> [type(a).__name__ for a in c.on_finalized(1, "file:///c/job/chk-1")]
    ['NotifyCheckpointComplete']
    >>> c.latest_completed().checkpoint_id
    1
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from weir.core.clock import Clock
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId
from weir.proto import checkpoint_pb2
from weir.proto.checkpoint_pb2 import (
    CheckpointMetadata,
    CheckpointOptions,
    CheckpointStats,
    CheckpointTaskMetrics,
    TaskStateSnapshot,
)

log = logging.getLogger(__name__)

#: Version of the ``_metadata`` layout this coordinator writes.
METADATA_VERSION = 1

Reason = checkpoint_pb2.CheckpointFailureReason

#: The ``checkpoint_id`` of a requested snapshot that failed before it was triggered.
NOT_TRIGGERED = CheckpointId(0)

#: Failures that count towards tolerable-failed-checkpoints. As in Flink, a trigger that
#: cannot reach a task (TRIGGER_CHECKPOINT_FAILURE) is not counted: the task or its
#: TaskExecutor is gone, and failover, not the checkpoint, reports that. Unlike Flink, a
#: failed synchronous snapshot (TASK_CHECKPOINT_FAILURE) and a failed ``_metadata`` write
#: (FINALIZE_CHECKPOINT_FAILURE) count: here the task keeps running after the first, and
#: the second is storage failing, so neither must go on unnoticed for ever.
COUNTED_REASONS = frozenset({
    checkpoint_pb2.CHECKPOINT_EXPIRED,
    checkpoint_pb2.CHECKPOINT_DECLINED,
    checkpoint_pb2.CHECKPOINT_ASYNC_EXCEPTION,
    checkpoint_pb2.TASK_CHECKPOINT_FAILURE,
    checkpoint_pb2.FINALIZE_CHECKPOINT_FAILURE,
    checkpoint_pb2.IO_EXCEPTION,
    checkpoint_pb2.CHECKPOINT_FAILURE_UNKNOWN,
})

#: Checkpoints kept in the history by default (the JobMaster sets web.checkpoints.history).
HISTORY_SIZE = 100


def reason_name(reason: Reason) -> str:
    return checkpoint_pb2.CheckpointFailureReason.Name(reason)


@dataclass(frozen=True)
class CheckpointCoordinatorConfiguration:
    """The coordinator's settings (from the execution.checkpointing.* options); Flink's
    ``CheckpointCoordinatorConfiguration``. Not the user's PyFlink ``CheckpointConfig``
    (``weir.datastream.checkpoint_config``), which sets those options."""

    interval_ms: int | None = None
    timeout_ms: int = 600_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    unaligned: bool = False
    aligned_timeout_ms: int = 0
    at_least_once: bool = False
    num_retained: int = 1
    #: Checkpoints (the newest) kept in :attr:`CheckpointCoordinator.history`.
    history_size: int = HISTORY_SIZE

    @property
    def enabled(self) -> bool:
        return self.interval_ms is not None

    def options(self) -> CheckpointOptions:
        return CheckpointOptions(unaligned=self.unaligned and self.aligned_timeout_ms <= 0,
                                 aligned_timeout_ms=self.aligned_timeout_ms
                                 if self.unaligned else 0,
                                 at_least_once=self.at_least_once)


@dataclass(frozen=True)
class TaskInfo:
    """One subtask attempt the job runs."""

    attempt_id: ExecutionAttemptId
    vertex_id: int
    subtask_index: int
    name: str = ""


# -- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerCheckpoint:
    """Snapshot the split enumerators (report them with ``on_master_states``), then send
    the trigger to ``tasks`` (report a failure with ``on_trigger_failed``)."""

    checkpoint_id: CheckpointId
    timestamp_ms: int
    options: CheckpointOptions
    tasks: tuple[ExecutionAttemptId, ...]


@dataclass(frozen=True)
class FinalizeCheckpoint:
    """Write ``metadata`` to ``chk-<n>/_metadata`` (a savepoint: to ``_metadata`` in its
    ``metadata``'s target location); report ``on_finalized`` or ``on_finalize_failed``."""

    checkpoint_id: CheckpointId
    metadata: CheckpointMetadata
    #: A savepoint's directory ("" for a checkpoint).
    target_location: str = ""
    #: Restored after a failure if it completes (checkpoints, and a stop's savepoint).
    retained: bool = True


@dataclass(frozen=True)
class NotifyCheckpointComplete:
    checkpoint_id: CheckpointId
    tasks: tuple[ExecutionAttemptId, ...]


@dataclass(frozen=True)
class NotifyCheckpointAborted:
    checkpoint_id: CheckpointId
    tasks: tuple[ExecutionAttemptId, ...]
    reason: Reason


@dataclass(frozen=True)
class DiscardCheckpoint:
    """Delete what checkpoint ``checkpoint_id`` wrote. ``completed``: it was completed, so
    its shared files must be dereferenced rather than deleted. ``location``: it is not in
    the job's checkpoint directory: a failed savepoint's directory (delete it whole), or a
    claimed snapshot (``metadata`` set: delete the files it names, and its ``_metadata``)."""

    checkpoint_id: CheckpointId
    completed: bool
    location: str = ""
    metadata: CheckpointMetadata | None = None


@dataclass(frozen=True)
class SnapshotRequestCompleted:
    """The requested savepoint (or checkpoint) is complete at ``path``."""

    checkpoint_id: CheckpointId
    path: str


@dataclass(frozen=True)
class SnapshotRequestFailed:
    """The requested savepoint (or checkpoint) failed (``checkpoint_id`` 0: it was never
    triggered)."""

    checkpoint_id: CheckpointId
    reason: Reason
    message: str


@dataclass(frozen=True)
class FailJob:
    reason: Reason
    message: str


Action = (TriggerCheckpoint | FinalizeCheckpoint | NotifyCheckpointComplete
          | NotifyCheckpointAborted | DiscardCheckpoint | FailJob | SnapshotRequestCompleted
          | SnapshotRequestFailed)


# -- bookkeeping ------------------------------------------------------------------------------


@dataclass
class PendingCheckpoint:
    checkpoint_id: CheckpointId
    timestamp_ms: int
    options: CheckpointOptions
    #: Attempts that must acknowledge, and those that already did.
    waiting: set[ExecutionAttemptId]
    acknowledged: dict[ExecutionAttemptId, tuple[TaskStateSnapshot, CheckpointTaskMetrics]] = field(
        default_factory=dict)
    #: Attempts that had finished when it was triggered (recorded as finished).
    finished: dict[ExecutionAttemptId, TaskInfo] = field(default_factory=dict)
    master_states: list[checkpoint_pb2.MasterState] = field(default_factory=list)
    #: Set once every task acknowledged: what ``_metadata`` holds.
    metadata: CheckpointMetadata | None = None


@dataclass
class CompletedCheckpoint:
    """A checkpoint the job may restore. ``owned`` False: a snapshot restored in NO_CLAIM
    mode, never deleted by the job. ``claimed``: a snapshot restored in CLAIM mode, owned
    but not in the job's checkpoint directory."""

    checkpoint_id: CheckpointId
    metadata: CheckpointMetadata
    external_path: str
    owned: bool = True
    claimed: bool = False


class CheckpointCoordinator:
    """Coordinates the checkpoints of one job. Not thread-safe: the JobMaster's main thread
    alone feeds it. Every ``on_*`` method returns the actions to perform, in order."""

    def __init__(self, job_id: JobId, config: CheckpointCoordinatorConfiguration, clock: Clock,
                 first_checkpoint_id: int = 1) -> None:
        self.job_id = job_id
        self.config = config
        self._clock = clock
        self._next_id = first_checkpoint_id
        self._tasks: dict[ExecutionAttemptId, TaskInfo] = {}
        self._running: set[ExecutionAttemptId] = set()
        self._finished: set[ExecutionAttemptId] = set()
        self._end_of_data: set[ExecutionAttemptId] = set()
        #: Per attempt, the attempts whose output it reads (FLIP-147's trigger roots).
        self._producers: dict[ExecutionAttemptId, tuple[ExecutionAttemptId, ...]] = {}
        self._vertices: dict[int, checkpoint_pb2.VertexLayout] = {}
        self._job_running = False
        self._pending: dict[CheckpointId, PendingCheckpoint] = {}
        self._completed: deque[CompletedCheckpoint] = deque()
        self._last_trigger_ms: int | None = None
        self._last_end_ms: int | None = None
        self._trigger_now = False
        #: A requested savepoint or checkpoint not triggered yet (a checkpoint was in
        #: progress), and the id of the one in progress.
        self._requested: CheckpointOptions | None = None
        self._requested_id: CheckpointId | None = None
        #: Periodic checkpoints stop for good (stop-with-savepoint succeeded).
        self._stopping = False
        self.consecutive_failures = 0
        self.history: deque[CheckpointStats] = deque(maxlen=max(1, config.history_size))
        self.counts = {"completed": 0, "failed": 0}
        #: Retained checkpoints found unusable and forgotten.
        self._forgotten: dict[CheckpointId, str] = {}

    # -- inputs: the job ----------------------------------------------------------------

    def set_vertices(self, vertices: Iterable[checkpoint_pb2.VertexLayout]) -> None:
        """The job's vertices (parallelism, operator uids), recorded in every ``_metadata``."""
        self._vertices = {v.vertex_id: v for v in vertices}

    def add_completed(self, checkpoint: CompletedCheckpoint) -> None:
        """A checkpoint completed earlier (restored from storage): counts for retention and
        as the latest, and ids continue after it."""
        self._completed.append(checkpoint)
        self._next_id = max(self._next_id, checkpoint.checkpoint_id + 1)

    def restore_history(self, stats: Iterable[CheckpointStats], completed: int = 0,
                        failed: int = 0) -> None:
        """Checkpoints of this job seen by an earlier JobMaster (high availability), oldest
        first, and how many completed and failed in all: they come before the ones of this
        coordinator, and ids continue after every one of them (a failed checkpoint's id is
        never used again)."""
        earlier = [s for s in stats if s.status != CheckpointStats.IN_PROGRESS]
        mine = list(self.history)
        self.history.clear()
        self.history.extend([*earlier, *mine])
        self.counts["completed"] += max(completed, sum(
            s.status == CheckpointStats.COMPLETED for s in earlier))
        self.counts["failed"] += max(failed, sum(
            s.status == CheckpointStats.FAILED for s in earlier))
        if earlier:
            self._next_id = max(self._next_id, max(s.checkpoint_id for s in earlier) + 1)

    def on_job_running(self, tasks: Iterable[TaskInfo],
                       inputs: Mapping[tuple[int, int], Iterable[tuple[int, int]]]
                       ) -> list[Action]:
        """The job (re)started with these attempts; ``inputs`` maps each subtask (vertex
        id, subtask index) to the subtasks whose output it reads (over a FORWARD edge
        subtask i of the producer alone, over any other every producer subtask; a source:
        none). Periodic triggering starts one interval from now."""
        self._tasks = {t.attempt_id: t for t in tasks}
        attempts = {(t.vertex_id, t.subtask_index): t.attempt_id for t in self._tasks.values()}
        self._producers = {
            attempt: tuple(attempts[p] for p in inputs.get(task, ()) if p in attempts)
            for task, attempt in attempts.items()}
        self._running.clear()
        self._finished.clear()
        self._end_of_data.clear()
        self._job_running = True
        self._trigger_now = False
        # A job that runs again after a stop's savepoint (a failure before it ended)
        # takes checkpoints again.
        self._stopping = False
        self._last_trigger_ms = self._clock()
        return []

    def on_task_running(self, attempt_id: ExecutionAttemptId) -> list[Action]:
        if attempt_id in self._tasks:
            self._running.add(attempt_id)
        return []

    def on_end_of_data(self, attempt_id: ExecutionAttemptId) -> list[Action]:
        """A source task read all its input; when every source did, checkpoint at once."""
        if attempt_id not in self._tasks:
            return []
        self._end_of_data.add(attempt_id)
        if self._sources_ended():
            self._trigger_now = True
            return self.on_tick()
        return []

    def _sources_ended(self) -> bool:
        """Every source read all its input (or finished): the job is ending."""
        sources = [a for a in self._tasks if not self._producers.get(a)]
        return all(a in self._end_of_data or a in self._finished for a in sources)

    def on_task_finished(self, attempt_id: ExecutionAttemptId) -> list[Action]:
        """A task ended normally: later checkpoints record it as finished instead of
        waiting for it. A pending checkpoint still waiting for it is declined; when every
        source has read all its input, the next one is triggered at once."""
        if attempt_id not in self._tasks:
            return []
        self._running.discard(attempt_id)
        self._finished.add(attempt_id)
        actions: list[Action] = []
        for pending in list(self._pending.values()):
            if attempt_id in pending.waiting:
                actions += self._abort(
                    pending, checkpoint_pb2.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM,
                    f"task {self._name(attempt_id)} finished before acknowledging")
                if self._sources_ended():
                    # The job is ending and its other tasks wait for a checkpoint taken
                    # after their end of input (FLIP-147): take the next one at once, in
                    # which this task counts as finished, not an interval later.
                    self._trigger_now = True
        return actions + self.on_tick() if self._trigger_now else actions

    def on_task_failed(self, attempt_id: ExecutionAttemptId) -> list[Action]:
        """A task failed: every pending checkpoint fails (not counted: the job restarts)."""
        return self.on_job_not_running(checkpoint_pb2.TASK_FAILURE,
                                       f"a task failed ({self._name(attempt_id)})")

    def on_job_not_running(self, reason: Reason = checkpoint_pb2.JOB_FAILOVER_REGION,
                           message: str = "the job is restarting") -> list[Action]:
        """The job fails, restarts or is cancelled: stop triggering, abort what is pending."""
        self._job_running = False
        actions: list[Action] = []
        for pending in list(self._pending.values()):
            actions += self._abort(pending, reason, message, notify=False)
        if self._requested is not None:
            self._requested = None
            self._stopping = False
            actions.append(SnapshotRequestFailed(NOT_TRIGGERED, reason, message))
        return actions

    def on_job_terminal(self, discard_completed: bool) -> list[Action]:
        """The job ended. ``discard_completed``: its retention says delete the retained
        checkpoints (the adapter decides from the job's final status)."""
        actions = self.on_job_not_running(checkpoint_pb2.CHECKPOINT_COORDINATOR_SHUTDOWN,
                                           "the job ended")
        if discard_completed:
            while self._completed:
                actions += self._discard_completed(self._completed.popleft())
        return actions

    # -- inputs: savepoints -----------------------------------------------------------------

    def on_snapshot_request(self, options: CheckpointOptions) -> list[Action]:
        """Take a snapshot with ``options`` as soon as no checkpoint is in progress;
        periodic checkpoints wait meanwhile. A savepoint (``savepoint`` set, a target
        location, and ``terminate`` for stop-with-savepoint), or a checkpoint taken now
        (rescaling, updating the job), retained like the periodic ones. It ends with
        ``SnapshotRequestCompleted`` or ``SnapshotRequestFailed`` (not counted towards
        tolerable-failed-checkpoints); a stop that completes ends periodic checkpoints
        for good."""
        if self._requested is not None or self._requested_id is not None:
            return [SnapshotRequestFailed(NOT_TRIGGERED,
                                          checkpoint_pb2.TOO_MANY_CHECKPOINT_REQUESTS,
                                          "another savepoint or change of the job is in "
                                          "progress")]
        self._requested = options
        return self._maybe_trigger_requested(self._clock())

    def _maybe_trigger_requested(self, now: int) -> list[Action]:
        options = self._requested
        if options is None or self._pending:
            return []
        self._requested = None
        live = [a for a in self._tasks if a not in self._finished]
        if not self._job_running or not live or any(a not in self._running for a in live):
            return [SnapshotRequestFailed(NOT_TRIGGERED,
                                          checkpoint_pb2.CHECKPOINT_DECLINED_TASK_NOT_READY,
                                    "not every task of the job is running (it is starting, "
                                    "restarting or ending); try again when it runs")]
        actions = self._trigger(now, options)
        trigger = actions[0]
        assert isinstance(trigger, TriggerCheckpoint)
        self._requested_id = trigger.checkpoint_id
        return actions

    # -- inputs: time -------------------------------------------------------------------

    def next_wakeup_ms(self) -> int | None:
        """When ``on_tick`` has something to do next (None: nothing scheduled)."""
        # Only times at which on_tick can act: a due trigger that must wait for a slot
        # among the concurrent checkpoints or for tasks to run is re-evaluated by the
        # event that frees it, so it never makes the caller spin.
        times = [p.timestamp_ms + self.config.timeout_ms for p in self._pending.values()
                 if p.metadata is None]
        due = self._next_trigger_ms()
        if due is not None and self._can_trigger():
            times.append(due)
        if self._requested is not None and not self._pending:
            times.append(self._clock())
        return min(times) if times else None

    def _can_trigger(self) -> bool:
        live = [a for a in self._tasks if a not in self._finished]
        return (len(self._pending) < self.config.max_concurrent and bool(live)
                and all(a in self._running for a in live))

    def _next_trigger_ms(self) -> int | None:
        if not self._job_running or not self.config.enabled or self._stopping or \
                self._requested is not None or self._requested_id is not None:
            return None
        assert self.config.interval_ms is not None
        due = (self._last_trigger_ms or 0) + self.config.interval_ms
        if self._trigger_now:
            due = self._clock()
        if self._last_end_ms is not None:
            due = max(due, self._last_end_ms + self.config.min_pause_ms)
        return due

    def on_tick(self) -> list[Action]:
        """Expire overdue checkpoints and trigger the next one when it is due."""
        now = self._clock()
        actions: list[Action] = []
        for pending in list(self._pending.values()):
            if pending.metadata is None and now >= pending.timestamp_ms + self.config.timeout_ms:
                actions += self._abort(pending, checkpoint_pb2.CHECKPOINT_EXPIRED,
                                       f"checkpoint {pending.checkpoint_id} expired before "
                                       f"completing (timeout {self.config.timeout_ms} ms; "
                                       f"waiting for {self._names(pending.waiting)})")
        actions += self._maybe_trigger_requested(now)
        due = self._next_trigger_ms()
        if due is not None and now >= due and self._can_trigger():
            actions += self._trigger(now)
        return actions

    def _trigger(self, now: int, options: CheckpointOptions | None = None) -> list[Action]:
        live = [a for a in self._tasks if a not in self._finished]
        roots = [a for a in live if self._is_trigger_root(a)]
        checkpoint_id = CheckpointId(self._next_id)
        self._next_id += 1
        self._last_trigger_ms = now
        if options is None:
            self._trigger_now = False
            options = self.config.options()
        pending = PendingCheckpoint(checkpoint_id, now, options, waiting=set(live),
                                    finished={a: self._tasks[a] for a in self._finished})
        self._pending[checkpoint_id] = pending
        self._record(pending, CheckpointStats.IN_PROGRESS)
        return [TriggerCheckpoint(checkpoint_id, now, options, tuple(sorted(roots)))]

    def _is_trigger_root(self, attempt_id: ExecutionAttemptId) -> bool:
        """Sources, and tasks all of whose producers finished (FLIP-147): no barrier can
        reach them through their inputs any more. Producers are the subtasks a task reads:
        over a FORWARD edge one, not the whole upstream vertex (a subtask whose producer
        finished while the other producer subtasks run would otherwise wait for a barrier
        forever)."""
        return all(a in self._finished for a in self._producers.get(attempt_id, ()))

    # -- inputs: tasks and storage --------------------------------------------------------

    def on_master_states(self, checkpoint_id: CheckpointId,
                         states: Iterable[checkpoint_pb2.MasterState]) -> list[Action]:
        """The split enumerators' snapshots taken for ``checkpoint_id`` at its trigger."""
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            pending.master_states = list(states)
        return []

    def on_trigger_failed(self, checkpoint_id: CheckpointId, message: str,
                          reason: Reason = checkpoint_pb2.TRIGGER_CHECKPOINT_FAILURE
                          ) -> list[Action]:
        """The trigger could not be delivered (not counted as a failure: the task is
        gone). ``CHECKPOINT_DECLINED_TASK_NOT_READY``: it had just finished or is not there
        yet; ``CHECKPOINT_DECLINED``: the JobMaster's own part (a split enumerator's
        snapshot) failed, which counts."""
        pending = self._pending.get(checkpoint_id)
        if pending is None:
            return []
        return self._abort(pending, reason, message)

    def on_acknowledge(self, attempt_id: ExecutionAttemptId, checkpoint_id: CheckpointId,
                       state: TaskStateSnapshot, metrics: CheckpointTaskMetrics | None = None
                       ) -> list[Action]:
        """A task wrote its part of ``checkpoint_id``. A late or unknown ack is ignored
        (its files are discarded with the checkpoint)."""
        pending = self._pending.get(checkpoint_id)
        if pending is None or attempt_id not in pending.waiting:
            return []
        pending.waiting.discard(attempt_id)
        pending.acknowledged[attempt_id] = (state, metrics or CheckpointTaskMetrics())
        self._record(pending, CheckpointStats.IN_PROGRESS)
        if pending.waiting:
            return []
        pending.metadata = self._metadata(pending)
        pending.metadata.completion_timestamp_ms = self._clock()
        return [FinalizeCheckpoint(checkpoint_id, pending.metadata,
                                   pending.options.target_location,
                                   retained=not pending.options.savepoint
                                   or pending.options.terminate)]

    def on_decline(self, attempt_id: ExecutionAttemptId, checkpoint_id: CheckpointId,
                   reason: Reason, message: str) -> list[Action]:
        pending = self._pending.get(checkpoint_id)
        if pending is None or attempt_id not in pending.waiting:
            return []
        return self._abort(pending, reason,
                           f"declined by {self._name(attempt_id)}: {message}")

    def on_finalized(self, checkpoint_id: CheckpointId, external_path: str) -> list[Action]:
        """``_metadata`` of ``checkpoint_id`` is written: the checkpoint is complete."""
        pending = self._pending.pop(checkpoint_id, None)
        if pending is None:
            return [DiscardCheckpoint(checkpoint_id, False)]
        now = self._clock()
        assert pending.metadata is not None, "finalized before every task acknowledged"
        if pending.options.savepoint:
            return self._savepoint_completed(pending, external_path, now)
        self._completed.append(CompletedCheckpoint(checkpoint_id, pending.metadata,
                                                   external_path))
        self._last_end_ms = now
        self.consecutive_failures = 0
        self.counts["completed"] += 1
        self._record(pending, CheckpointStats.COMPLETED, path=external_path, end_ms=now)
        actions: list[Action] = [NotifyCheckpointComplete(checkpoint_id,
                                                          tuple(sorted(pending.acknowledged)))]
        for older in [p for p in self._pending.values() if p.checkpoint_id < checkpoint_id]:
            actions += self._abort(older, checkpoint_pb2.CHECKPOINT_SUBSUMED,
                                   f"checkpoint {checkpoint_id} completed first")
        while len(self._completed) > self.config.num_retained:
            actions += self._discard_completed(self._completed.popleft())
        if checkpoint_id == self._requested_id:
            self._requested_id = None
            actions.append(SnapshotRequestCompleted(checkpoint_id, external_path))
        return actions + self._maybe_trigger_requested(now)

    def _savepoint_completed(self, pending: PendingCheckpoint, path: str, now: int
                             ) -> list[Action]:
        """A savepoint is the user's: neither retained for failover nor subsumed, and (as
        in Flink) tasks are told only when it stops the job, so sinks commit with it."""
        self._requested_id = None
        self._last_end_ms = now
        self.counts["completed"] += 1
        self._record(pending, CheckpointStats.COMPLETED, path=path, end_ms=now)
        actions: list[Action] = [SnapshotRequestCompleted(pending.checkpoint_id, path)]
        if pending.options.terminate:
            # Sinks commit it: should the job fail before it ended, it must restore this
            # savepoint, not an older checkpoint (the user's still: never deleted).
            assert pending.metadata is not None
            self._stopping = True
            self._completed.append(CompletedCheckpoint(pending.checkpoint_id,
                                                       pending.metadata, path, owned=False))
            while len(self._completed) > self.config.num_retained:
                actions += self._discard_completed(self._completed.popleft())
            actions.append(NotifyCheckpointComplete(pending.checkpoint_id,
                                                    tuple(sorted(pending.acknowledged))))
        return actions

    def _discard_completed(self, checkpoint: CompletedCheckpoint) -> list[Action]:
        """What subsuming (or ending the job with) a retained checkpoint deletes."""
        if not checkpoint.owned:
            return []  # restored in NO_CLAIM mode: the user's
        if checkpoint.claimed:
            return [DiscardCheckpoint(checkpoint.checkpoint_id, True,
                                      location=checkpoint.external_path,
                                      metadata=checkpoint.metadata)]
        return [DiscardCheckpoint(checkpoint.checkpoint_id, True)]

    def on_finalize_failed(self, checkpoint_id: CheckpointId, message: str) -> list[Action]:
        pending = self._pending.get(checkpoint_id)
        if pending is None:
            return []
        return self._abort(pending, checkpoint_pb2.FINALIZE_CHECKPOINT_FAILURE,
                           f"writing the metadata of checkpoint {checkpoint_id} failed: "
                           f"{message}")

    # -- queries --------------------------------------------------------------------------

    def latest_completed(self) -> CompletedCheckpoint | None:
        return self._completed[-1] if self._completed else None

    def completed(self) -> list[CompletedCheckpoint]:
        """Retained completed checkpoints, oldest first."""
        return list(self._completed)

    def forget_completed(self, checkpoint_id: CheckpointId, why: str = "") -> None:
        """A retained checkpoint turned out unusable (missing or corrupt files): ``why``."""
        self._completed = deque(c for c in self._completed if c.checkpoint_id != checkpoint_id)
        self._forgotten[checkpoint_id] = why

    def unusable(self) -> list[str]:
        """Why each forgotten checkpoint could not be restored, oldest first."""
        return [f"checkpoint {n}: {why}" if why else f"checkpoint {n}"
                for n, why in sorted(self._forgotten.items())]

    def had_completed(self) -> bool:
        """Whether the job has, or had, a retained checkpoint (or the snapshot it started
        from), even if each one turned out unusable: a restart without state would then
        repeat output the job already committed."""
        return bool(self._completed or self._forgotten)

    def pending_ids(self) -> list[CheckpointId]:
        return sorted(self._pending)

    def stats(self) -> list[CheckpointStats]:
        return list(self.history)

    # -- internals ------------------------------------------------------------------------

    def _abort(self, pending: PendingCheckpoint, reason: Reason, message: str,
               notify: bool = True) -> list[Action]:
        if self._pending.pop(pending.checkpoint_id, None) is None:
            return []
        now = self._clock()
        self._last_end_ms = now
        self.counts["failed"] += 1
        self._record(pending, CheckpointStats.FAILED, reason=reason, message=message,
                     end_ms=now)
        log.warning("checkpoint %d of job %s failed (%s): %s", pending.checkpoint_id,
                    self.job_id, reason_name(reason), message)
        actions: list[Action] = []
        if notify:
            tasks = tuple(sorted(set(pending.acknowledged) | pending.waiting))
            actions.append(NotifyCheckpointAborted(pending.checkpoint_id, tasks, reason))
        actions.append(DiscardCheckpoint(pending.checkpoint_id, False,
                                         location=pending.options.target_location))
        if pending.checkpoint_id == self._requested_id:
            # The user hears why; the job goes on (a failed savepoint is not counted
            # towards tolerable-failed-checkpoints, as in Flink).
            self._requested_id = None
            return [*actions, SnapshotRequestFailed(pending.checkpoint_id, reason, message)]
        if reason in COUNTED_REASONS:
            self.consecutive_failures += 1
            if self.consecutive_failures > self.config.tolerable_failures:
                self._job_running = False
                actions.append(FailJob(reason, (
                    f"exceeded checkpoint tolerable failure threshold "
                    f"({self.config.tolerable_failures}, "
                    "execution.checkpointing.tolerable-failed-checkpoints): checkpoint "
                    f"{pending.checkpoint_id} failed with {reason_name(reason)}: {message}")))
        return actions

    def _metadata(self, pending: PendingCheckpoint) -> CheckpointMetadata:
        metadata = CheckpointMetadata(
            version=METADATA_VERSION, job_id=self.job_id, checkpoint_id=pending.checkpoint_id,
            trigger_timestamp_ms=pending.timestamp_ms,
            unaligned=any(m.unaligned for _, m in pending.acknowledged.values()),
            savepoint=pending.options.savepoint, master_states=pending.master_states,
            vertices=list(self._vertices.values()))
        for attempt_id, (state, _) in sorted(pending.acknowledged.items(),
                                             key=lambda kv: self._order(kv[0])):
            task = self._tasks[attempt_id]
            metadata.subtasks.add(vertex_id=task.vertex_id, subtask_index=task.subtask_index,
                                  state=state)
        for task in sorted(pending.finished.values(),
                           key=lambda t: (t.vertex_id, t.subtask_index)):
            metadata.subtasks.add(vertex_id=task.vertex_id, subtask_index=task.subtask_index,
                                  finished=True)
        return metadata

    def _order(self, attempt_id: ExecutionAttemptId) -> tuple[int, int]:
        task = self._tasks[attempt_id]
        return task.vertex_id, task.subtask_index

    def _record(self, pending: PendingCheckpoint, status: CheckpointStats.Status, *,
                reason: Reason | None = None,
                message: str = "", path: str = "", end_ms: int | None = None) -> None:
        """Update ``pending``'s row of the history."""
        row = next((r for r in reversed(self.history)
                    if r.checkpoint_id == pending.checkpoint_id), None)
        if row is None:
            row = CheckpointStats(checkpoint_id=pending.checkpoint_id,
                                  trigger_timestamp_ms=pending.timestamp_ms,
                                  savepoint=pending.options.savepoint)
            self.history.append(row)
        row.status = status
        row.acknowledged = len(pending.acknowledged)
        row.total = len(pending.acknowledged) + len(pending.waiting)
        metrics = [m for _, m in pending.acknowledged.values()]
        row.unaligned = any(m.unaligned for m in metrics)
        row.state_size = sum(m.state_size for m in metrics)
        row.incremental_size = sum(m.incremental_size for m in metrics)
        row.changelog_state_size = sum(m.changelog_state_size for m in metrics)
        row.persisted_bytes = sum(m.persisted_bytes for m in metrics)
        row.in_flight_bound_bytes = sum(m.in_flight_bound_bytes for m in metrics)
        row.processed_bytes = sum(m.processed_bytes for m in metrics)
        row.alignment_ms = max((m.alignment_duration_ms for m in metrics), default=0)
        last_ack = max((m.ack_timestamp_ms for m in metrics), default=0)
        row.duration_ms = max(0, (end_ms or last_ack or pending.timestamp_ms)
                              - pending.timestamp_ms)
        if reason:
            row.failure_reason = reason
            row.failure_message = message
        if path:
            row.external_path = path
        del row.subtasks[:]
        for attempt_id, (_, m) in sorted(pending.acknowledged.items(),
                                         key=lambda kv: self._order(kv[0])):
            task = self._tasks[attempt_id]
            row.subtasks.add(vertex_id=task.vertex_id, task_name=task.name,
                             subtask_index=task.subtask_index, metrics=m)

    def _name(self, attempt_id: ExecutionAttemptId) -> str:
        task = self._tasks.get(attempt_id)
        return task.name if task is not None and task.name else attempt_id

    def _names(self, attempts: Iterable[ExecutionAttemptId]) -> str:
        names = sorted(self._name(a) for a in attempts)
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
