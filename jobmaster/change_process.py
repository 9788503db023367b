"""Rescaling and updating a running job: an I/O-free state machine of one change at a time.

A change (``weir rescale``, ``weir update``; the graph to run comes from
:mod:`weir.jobmaster.job_change`) goes CHECKPOINTING (a checkpoint is taken; ``check`` may
refuse its state for the new graph) -> CANCELLING (the tasks it restarts are cancelled:
every task, but for the regions an update leaves running) -> DEPLOYING (the new graph runs,
restored from that checkpoint) -> done once every task runs. It is fed those steps'
results and returns the actions that follow; the JobMaster's adapter
(:class:`~weir.jobmaster.scheduler.JobScheduler`) takes the checkpoint, cancels and
deploys, and tells whoever asked.

A change is refused, and the job runs on untouched, when it cannot work (no checkpoints,
not every task running, not enough slots) or fails before the tasks were cancelled. A
failure while the changed job starts rolls it back: the old graph is deployed again from
the same checkpoint (a failure during that is left to the usual failover). While the tasks
are being cancelled, failures are part of the change; a failed task that an update was
leaving running makes the change restart every task.

Example:
    >>> from weir.core.clock import ManualClock
    >>> from weir.checkpoint.coordinator import CompletedCheckpoint
    >>> from weir.proto import checkpoint_pb2, jobgraph_pb2
    >>> old = jobgraph_pb2.JobGraph(vertices=[jobgraph_pb2.JobVertex(id=1, parallelism=1)])
    >>> new = jobgraph_pb2.JobGraph(vertices=[jobgraph_pb2.JobVertex(id=1, parallelism=2)])
    >>> clock = ManualClock(0)
    >>> changes = ChangeProcess("job", clock, batch=False)
    >>> job = JobFacts(checkpointing=True, steady=True, slots_held=1, free_slots=1)
    >>> changes.request(ChangeKind.RESCALE, new, old, [], job)
    [TakeCheckpoint()]
    >>> checkpoint = CompletedCheckpoint(7, checkpoint_pb2.CheckpointMetadata(), "file:///c")
    >>> changes.on_checkpointed(checkpoint, None)
    [CancelTasks(every_task=False)]
    >>> [type(a).__name__ for a in changes.on_cancelled(all_finished=False)]
    ['DeployChange']
    >>> clock.advance(1200)
    >>> [(type(a).__name__, a.record.downtime_ms) for a in changes.on_running()]
    [('ChangeCompleted', 1200)]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import Enum

from weir.checkpoint.coordinator import CompletedCheckpoint
from weir.core.clock import Clock
from weir.core.errors import UserError
from weir.core.ids import JobId
from weir.jobmaster.job_change import kept_vertices
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2, jobmaster_pb2

log = logging.getLogger(__name__)


class ChangeKind(Enum):
    """What a change changes (the values are the CLI's and ``JobChange.kind``'s words)."""

    RESCALE = "rescale"
    UPDATE = "update"


class ChangePhase(Enum):
    """Where a change is."""

    CHECKPOINTING = "checkpointing"
    CANCELLING = "cancelling"
    DEPLOYING = "deploying"


@dataclass(frozen=True)
class JobFacts:
    """What a change request is judged on."""

    #: The job takes checkpoints (a change restores one).
    checkpointing: bool
    #: The job is RUNNING, not restarting, holds its slots and every task runs or finished.
    steady: bool
    #: Slots the job holds, and the cluster's free ones.
    slots_held: int
    free_slots: int


# -- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeRefused:
    """The request is refused (tell its requester); the job runs on untouched, and a
    change in progress goes on."""

    message: str


@dataclass(frozen=True)
class TakeCheckpoint:
    """Take a checkpoint now; report it with :meth:`ChangeProcess.on_checkpointed`."""


@dataclass(frozen=True)
class CancelTasks:
    """Stop checkpointing and cancel the tasks the change restarts (``every_task``: all of
    them, also those an update meant to leave running); report with
    :meth:`ChangeProcess.on_cancelled` once they all ended."""

    every_task: bool


@dataclass(frozen=True)
class DeployChange:
    """Run ``graph`` restored from ``checkpoint``: every task anew, or (``keep`` not empty)
    only the tasks outside the vertices ``keep``, into the job's slots. The restore counts
    from ``down_since`` (epoch ms). Report with :meth:`ChangeProcess.on_running` once
    every task runs."""

    graph: jobgraph_pb2.JobGraph
    checkpoint: CompletedCheckpoint
    keep: frozenset[int]
    down_since: int


@dataclass(frozen=True)
class ChangeCompleted:
    """The change is made: the job runs ``graph`` (store it); tell the requester."""

    record: jobmaster_pb2.JobChange
    graph: jobgraph_pb2.JobGraph


@dataclass(frozen=True)
class ChangeFailed:
    """The change in progress ends without being made; tell the requester why."""

    message: str


Action = (ChangeRefused | TakeCheckpoint | CancelTasks | DeployChange | ChangeCompleted
          | ChangeFailed)


@dataclass
class Change:
    """A rescale or update in progress."""

    kind: ChangeKind
    #: The graph to run (after a rollback: the one that ran before).
    graph: jobgraph_pb2.JobGraph
    previous: jobgraph_pb2.JobGraph
    restarted: list[str]
    check: Callable[[checkpoint_pb2.CheckpointMetadata], None] | None = None
    phase: ChangePhase = ChangePhase.CHECKPOINTING
    checkpoint: CompletedCheckpoint | None = None
    #: When the tasks were cancelled (epoch ms).
    down_since: int = 0
    #: Why the change was rolled back ("": it was not).
    rollback: str = ""
    #: Vertices an update leaves running (their regions did not change).
    keep: frozenset[int] = frozenset()


class ChangeProcess:
    """The changes of one job. Not thread-safe: the JobMaster's main thread alone feeds
    it. Every method returns the actions to perform, in order."""

    def __init__(self, job_id: JobId, clock: Clock, *, batch: bool) -> None:
        self.job_id = job_id
        self._clock = clock
        self._batch = batch
        self.change: Change | None = None

    # -- inputs ---------------------------------------------------------------------------

    def request(self, kind: ChangeKind, graph: jobgraph_pb2.JobGraph,
                running: jobgraph_pb2.JobGraph, restarted: list[str], job: JobFacts,
                check: Callable[[checkpoint_pb2.CheckpointMetadata], None] | None = None
                ) -> list[Action]:
        """Change the job from ``running`` to ``graph`` (``restarted``: the uids of the
        operators an update changes). ``check`` may refuse the checkpoint's state for
        ``graph`` by raising a UserError."""
        word = kind.value
        if not job.checkpointing:
            return [ChangeRefused(f"job {self.job_id} takes no checkpoints, and a {word} "
                                  "restores one: run it with execution.checkpointing.interval"
                                  " set")]
        if not job.steady or self.change is not None:
            return [ChangeRefused(f"job {self.job_id} is not running steadily (starting, "
                                  "restarting or changing already): try again when every "
                                  "task runs")]
        needed = max(v.parallelism for v in graph.vertices)
        if needed > job.slots_held + job.free_slots:
            return [ChangeRefused(f"the job would need {needed} slots; it holds "
                                  f"{job.slots_held} and the cluster has {job.free_slots} "
                                  "free: start more TaskExecutors first")]
        self.change = Change(kind, graph, running, restarted, check)
        if kind is ChangeKind.UPDATE and not self._batch:
            self.change.keep = kept_vertices(running, graph, restarted)
        log.info("job %s: %s requested; taking a checkpoint first", self.job_id, word)
        return [TakeCheckpoint()]

    def on_checkpointed(self, checkpoint: CompletedCheckpoint | None, error: str | None
                        ) -> list[Action]:
        """The change's checkpoint completed (``checkpoint``) or failed (``error``)."""
        change = self.change
        if change is None or change.phase is not ChangePhase.CHECKPOINTING:
            return []
        word = change.kind.value
        if error is not None or checkpoint is None:
            self.change = None
            return [ChangeFailed(f"the {word} was not made, the job runs on: {error}")]
        if change.check is not None:
            try:
                change.check(checkpoint.metadata)
            except UserError as err:
                self.change = None
                return [ChangeFailed(f"the {word} was refused, the job runs on: {err}")]
        change.checkpoint = checkpoint
        change.down_since = self._clock()
        log.info("job %s: %s from checkpoint %d; cancelling its tasks", self.job_id, word,
                 checkpoint.checkpoint_id)
        change.phase = ChangePhase.CANCELLING
        return [CancelTasks(every_task=False)]

    def on_cancelled(self, all_finished: bool) -> list[Action]:
        """Every task the change cancelled ended; ``all_finished``: every task of the job
        finished (it ended before it could change)."""
        change = self.change
        if change is None or change.phase is not ChangePhase.CANCELLING:
            return []
        if all_finished:
            return self.abandon("the job finished first")
        assert change.checkpoint is not None
        change.phase = ChangePhase.DEPLOYING
        return [DeployChange(change.graph, change.checkpoint, change.keep, change.down_since)]

    def on_task_failure(self, vertices: Collection[int], error: common_pb2.ErrorInfo
                        ) -> list[Action]:
        """Tasks of ``vertices`` failed with ``error``. When the change is CANCELLING
        afterwards, the failure is the change's; otherwise failover handles it."""
        change = self.change
        if change is None:
            return []
        actions: list[Action] = []
        if change.keep and any(v in change.keep for v in vertices):
            # A task the update left running failed: the change restarts every task.
            change.keep = frozenset()
            if change.phase is ChangePhase.CANCELLING:
                actions.append(CancelTasks(every_task=True))
        if change.phase is ChangePhase.DEPLOYING:
            actions += self._roll_back(change, error)
        return actions

    def on_running(self) -> list[Action]:
        """Every task of the job runs (or finished)."""
        change = self.change
        if change is None or change.phase is not ChangePhase.DEPLOYING:
            return []
        assert change.checkpoint is not None
        self.change = None
        now = self._clock()
        word = change.kind.value
        if change.rollback:
            return [ChangeFailed(f"the {word} failed ({change.rollback}); the job runs as "
                                 f"before, from checkpoint {change.checkpoint.checkpoint_id}")]
        record = jobmaster_pb2.JobChange(
            kind=word, checkpoint_id=change.checkpoint.checkpoint_id,
            downtime_ms=now - change.down_since, timestamp_ms=now,
            restarted_operators=change.restarted)
        log.info("job %s: %s done; down for %d ms", self.job_id, word, record.downtime_ms)
        return [ChangeCompleted(record, change.graph)]

    def abandon(self, why: str) -> list[Action]:
        """The job fails, is cancelled or ended: the change in progress (if any) ends."""
        change, self.change = self.change, None
        if change is None:
            return []
        return [ChangeFailed(f"the {change.kind.value} did not complete: {why}")]

    # -- queries --------------------------------------------------------------------------

    @property
    def phase(self) -> ChangePhase | None:
        return self.change.phase if self.change is not None else None

    @property
    def keep(self) -> frozenset[int]:
        """The vertices the change in progress leaves running."""
        return self.change.keep if self.change is not None else frozenset()

    # -- internals ------------------------------------------------------------------------

    def _roll_back(self, change: Change, error: common_pb2.ErrorInfo) -> list[Action]:
        """The changed job failed while starting: deploy the old graph again from the
        same checkpoint. A failure of that rollback ends the change."""
        if change.rollback:
            return self.abandon(error.message)
        log.warning("job %s: the %s failed (%s); rolling it back", self.job_id,
                    change.kind.value, error.message)
        change.rollback = f"{error.task}: {error.message}" if error.task else error.message
        change.graph = change.previous
        change.restarted = []
        change.phase = ChangePhase.CANCELLING
        return [CancelTasks(every_task=False)]
