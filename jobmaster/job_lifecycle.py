"""When a job ends, and how long it ran, was down and took to restore. I/O-free, on an
injected clock.

* :func:`final_status`: the status a job ends with, once its tasks allow it;
* :class:`JobTimes`: Flink's job time metrics (``uptime``, ``downtime``,
  ``restartingTime``, ``lastCheckpointRestoreTimestamp``) and the cost of the last restore
  (``weir status --json``'s ``last_restore``), fed the job's transitions by the scheduler.

Example:
    >>> from weir.core.clock import ManualClock
    >>> clock = ManualClock(1_000)
    >>> times = JobTimes(clock)
    >>> times.running(restored=False)
    >>> clock.advance(500); times.went_down()
    >>> clock.advance(200); times.times_ms(running=False, terminal=False)
    {'uptime': 0, 'downtime': 200, 'restartingTime': 200}
    >>> times.running(restored=False); times.last_restart_duration_ms
    200
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from weir.core.clock import Clock
from weir.core.ids import CheckpointId
from weir.jobmaster.failover import TaskId
from weir.proto import common_pb2, jobmaster_pb2


def final_status(status: int, task_states: Collection[int]) -> common_pb2.JobStatus | None:
    """The status a job with ``status`` ends with now that its tasks are in
    ``task_states`` (None: it does not end yet): FINISHED when it runs and every task
    finished, FAILED or CANCELED when it is failing or cancelling and every task ended."""
    ended = (common_pb2.FINISHED, common_pb2.CANCELED, common_pb2.FAILED)
    if status == common_pb2.JOB_RUNNING and task_states and \
            all(s == common_pb2.FINISHED for s in task_states):
        return common_pb2.JOB_FINISHED
    if status in (common_pb2.JOB_FAILING, common_pb2.JOB_CANCELLING) and \
            all(s in ended for s in task_states):
        return common_pb2.JOB_FAILED if status == common_pb2.JOB_FAILING \
            else common_pb2.JOB_CANCELED
    return None


class JobTimes:
    """The times of one job (epoch ms). Main thread only."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: Since when the job runs (None: it never ran).
        self._running_since: int | None = None
        #: Since when it is down: failing or restarting (None: it is not).
        self._down_since: int | None = None
        #: How long the last restart took, from the failure until the job ran again.
        self.last_restart_duration_ms = 0
        #: When the job last restored a checkpoint (0: never).
        self.restore_timestamp_ms = 0
        #: A restore in progress: since when (the failure, or the submission), and which
        #: tasks it restores (None: all).
        self._restoring_since: int | None = None
        self._restore_scope: frozenset[TaskId] | None = None

    def went_down(self, *, keep_earlier: bool = False) -> None:
        """The job (or a region of it) failed. ``keep_earlier``: a region restart, which
        counts from an earlier failure still being recovered from."""
        if self._down_since is None or not keep_earlier:
            self._down_since = self._clock()

    def restoring_now(self) -> None:
        """New attempts restore a checkpoint from now on."""
        self.restore_timestamp_ms = self._clock()

    def running(self, *, restored: bool) -> None:
        """Every task was (re)deployed (``restored``: from a checkpoint)."""
        now = self._clock()
        self._running_since = now
        self._restoring_since = self._down_since if restored else None
        self._restore_scope = None
        self._up(now)

    def region_running(self, tasks: frozenset[TaskId], *, restored: bool) -> None:
        """A restarted region's tasks are being deployed (``restored``: from a
        checkpoint); the others kept running."""
        self._restoring_since = self._down_since if restored else None
        self._restore_scope = tasks
        self._up(self._clock())

    def restore_counts_from(self, since_ms: int,
                            tasks: frozenset[TaskId] | None = None) -> None:
        """The restore in progress counts from ``since_ms`` (a change: when its tasks were
        cancelled; a recovered job: its start) and concerns ``tasks`` (None: all)."""
        self._restoring_since = since_ms
        self._restore_scope = tasks

    def restored(self, checkpoint_id: CheckpointId,
                 restores: Iterable[tuple[TaskId, jobmaster_pb2.RestoreStats | None]]
                 ) -> jobmaster_pb2.RestoreStats | None:
        """Every task of the restored attempt runs (or finished), ``restores`` saying what
        each restored: what the restore cost, from the failure on (None: no restore was
        in progress)."""
        if self._restoring_since is None:
            return None
        scope = self._restore_scope
        costs = [r for task, r in restores
                 if r is not None and (scope is None or task in scope)]
        stats = jobmaster_pb2.RestoreStats(
            checkpoint_id=checkpoint_id,
            duration_ms=max(0, self._clock() - self._restoring_since),
            local_bytes=sum(r.local_bytes for r in costs),
            remote_bytes=sum(r.remote_bytes for r in costs))
        self._restoring_since = None
        return stats

    @property
    def restoring(self) -> bool:
        return self._restoring_since is not None

    def times_ms(self, *, running: bool, terminal: bool) -> dict[str, int]:
        """Flink's job time metrics: uptime (running since the last (re)start), downtime
        (failing or restarting since), restartingTime (the current or last restart)."""
        now = self._clock()
        down = self._down_since if not terminal else None
        return {"uptime": now - self._running_since if running and self._running_since
                else 0,
                "downtime": now - down if down else 0,
                "restartingTime": now - down if down else self.last_restart_duration_ms}

    def _up(self, now: int) -> None:
        if self._down_since is not None:
            self.last_restart_duration_ms = now - self._down_since
            self._down_since = None
