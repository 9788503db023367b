"""A job's recoveries: each restart or restore, when it failed, why, what it restarted and
what getting back cost. I/O-free, on an injected clock; the scheduler feeds it.

A recovery begins with a failure that restarts tasks (a region or the whole job), or with
a JobMaster taking the job over (high availability). It ends when every restarted task
runs again: its ``duration_ms`` is then the time since the failure, and the restore's
bytes (task-local and downloaded) are filled in. A failure while an earlier recovery is
still under way begins a recovery of its own; both end together, when everything runs
again. The newest ``size`` recoveries are kept.

Example:
    >>> from weir.core.clock import ManualClock
    >>> clock = ManualClock(1_000)
    >>> history = RecoveryHistory(clock, size=10)
    >>> failure = common_pb2.ErrorInfo(reason=common_pb2.TASK_EXECUTOR_LOST, message="gone")
    >>> history.failed(failure, tasks=2)
    >>> history.restoring(7)
    >>> clock.advance(1_500)
    >>> history.recovered(jobmaster_pb2.RestoreStats(local_bytes=10, remote_bytes=5))
    >>> entry = history.entries()[0]
    >>> entry.cause.timestamp_ms, entry.checkpoint_id, entry.duration_ms, entry.local_bytes
    (1000, 7, 1500, 10)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from weir.core.clock import Clock
from weir.proto import common_pb2, jobmaster_pb2


class RecoveryHistory:
    """The last ``size`` recoveries of one job, oldest first. Main thread only.
    ``on_change`` is called after every change (high availability stores the history)."""

    def __init__(self, clock: Clock, size: int) -> None:
        self._clock = clock
        self._entries: deque[jobmaster_pb2.Recovery] = deque(maxlen=max(1, size))
        self.on_change: Callable[[], None] | None = None

    def failed(self, error: common_pb2.ErrorInfo, tasks: int) -> None:
        """A failure restarts ``tasks`` subtasks: a recovery begins, at ``error``'s
        timestamp (when the JobMaster learned of it) or now."""
        entry = jobmaster_pb2.Recovery(tasks=tasks)
        entry.cause.CopyFrom(error)
        entry.cause.traceback = ""   # in the exceptions history; kept small here
        if not entry.cause.timestamp_ms:
            entry.cause.timestamp_ms = self._clock()
        self._entries.append(entry)
        self._changed()

    def cause_refined(self, error: common_pb2.ErrorInfo) -> None:
        """The latest recovery's failure turned out to be a symptom of ``error`` (a lost
        TaskExecutor, say): report that as its cause, still from when it began."""
        if not self._entries or self._entries[-1].HasField("duration_ms"):
            return
        entry = self._entries[-1]
        began = entry.cause.timestamp_ms
        entry.cause.CopyFrom(error)
        entry.cause.traceback = ""
        entry.cause.timestamp_ms = began
        self._changed()

    def restoring(self, checkpoint_id: int | None) -> None:
        """The recoveries under way restore ``checkpoint_id`` (None: no checkpoint)."""
        for entry in self._in_progress():
            entry.checkpoint_id = checkpoint_id or 0
        self._changed()

    def recovered(self, restore: jobmaster_pb2.RestoreStats | None) -> None:
        """Every restarted task runs again; ``restore``: what restoring read (None:
        nothing was restored)."""
        now = self._clock()
        for entry in self._in_progress():
            entry.duration_ms = max(0, now - entry.cause.timestamp_ms)
            if restore is not None:
                entry.local_bytes = restore.local_bytes
                entry.remote_bytes = restore.remote_bytes
        self._changed()

    def restore(self, earlier: Iterable[jobmaster_pb2.Recovery]) -> None:
        """Recoveries seen by an earlier JobMaster of the job, oldest first: they come
        before this one's."""
        mine = list(self._entries)
        self._entries.clear()
        self._entries.extend([*earlier, *mine])

    @property
    def in_progress(self) -> bool:
        """Some recovery has not ended yet."""
        return bool(self._in_progress())

    def entries(self) -> list[jobmaster_pb2.Recovery]:
        """The kept recoveries, oldest first."""
        return list(self._entries)

    def _in_progress(self) -> list[jobmaster_pb2.Recovery]:
        return [e for e in self._entries if not e.HasField("duration_ms")]

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
