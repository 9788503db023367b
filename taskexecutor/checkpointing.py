"""The task side of checkpoints (Flink's ``SubtaskCheckpointCoordinator``).

On the task thread, at a barrier (or a source's trigger), :meth:`take_snapshot` takes the
synchronous part of every participant's snapshot (operators of the chain, the source
reader), emits the barrier to every output — with priority when the checkpoint is
unaligned, persisting the buffers it overtakes — and keeps the checkpoint pending until its
input side is complete (unaligned: the in-flight input was persisted) and its barriers left
the outputs (aligned with timeout: moved ahead of the data once the timeout passed). Then
the asynchronous part runs on the TaskExecutor's upload pool, never on the task thread:
keyed snapshots upload, operator and channel state are written, and the task acknowledges
with the state handles and its measurements — or declines, naming the checkpoint, the file
and the cause.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from weir.checkpoint.barrier import CheckpointBarrier
from weir.checkpoint.channel_state import ChannelStateWriter
from weir.checkpoint.metadata import from_stream_handle
from weir.checkpoint.storage import CheckpointStorageAccess
from weir.core.errors import StorageError, WeirError
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId
from weir.core.records import Elements
from weir.proto import checkpoint_pb2, common_pb2
from weir.proto.checkpoint_pb2 import CheckpointTaskMetrics, TaskStateSnapshot
from weir.shuffle.api import ResultPartitionWriter
from weir.state.local_recovery import LocalCopyTracker, keep_local_file
from weir.state.operator_state import split_only
from weir.state.snapshot import SnapshotLocation
from weir.taskexecutor.in_flight import InFlightBound
from weir.taskexecutor.operator import OperatorSnapshot

log = logging.getLogger(__name__)

#: Name of a subtask's in-flight data file inside a checkpoint.
CHANNEL_STATE_FILE = "channel-state"

#: Edges whose barriers stay aligned in unaligned checkpoints (as in Flink).
ALIGNED_PARTITIONERS = frozenset({common_pb2.FORWARD, common_pb2.BROADCAST})


class SnapshotParticipant(Protocol):
    """Something with state in a checkpoint: an operator of the chain, the source reader."""

    def snapshot_state(self, checkpoint_id: CheckpointId, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot: ...


class CheckpointResponder(Protocol):
    """How a task answers the coordinator (the JobMaster gateway). Any thread."""

    def acknowledge_checkpoint(self, job_id: JobId, attempt_id: ExecutionAttemptId,
                               checkpoint_id: CheckpointId, state: TaskStateSnapshot,
                               metrics: CheckpointTaskMetrics) -> None: ...

    def decline_checkpoint(self, job_id: JobId, attempt_id: ExecutionAttemptId,
                           checkpoint_id: CheckpointId,
                           reason: checkpoint_pb2.CheckpointFailureReason, message: str
                           ) -> None: ...


class UploadPoolFullError(WeirError):
    """The checkpoint upload pool stayed full for the whole timeout: the checkpoint is
    declined, the task goes on."""


class UploadPoolClosedError(WeirError):
    """The checkpoint upload pool was shut down (its TaskExecutor stops): the checkpoint is
    declined."""


class UploadPool:
    """The TaskExecutor's threads for the asynchronous part of checkpoints. Bounded: a
    task that finds it full for ``timeout`` seconds declines its checkpoint."""

    def __init__(self, threads: int, capacity: int = 256) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="checkpoint-upload")
        self._slots = threading.BoundedSemaphore(capacity)

    def submit(self, fn: Callable[[], None], timeout: float = 10.0) -> Future[None]:
        """Run ``fn`` on an upload thread. Any thread; blocks while the pool is full, for at
        most ``timeout`` seconds. Raises UploadPoolFullError when it stays full,
        UploadPoolClosedError after :meth:`shutdown`."""
        if not self._slots.acquire(timeout=timeout):
            msg = "the checkpoint upload pool is full"
            raise UploadPoolFullError(msg)
        try:
            future = self._executor.submit(fn)
        except RuntimeError as err:  # the executor's word for "shut down"
            self._slots.release()
            msg = "the checkpoint upload pool is shut down (the TaskExecutor stops)"
            raise UploadPoolClosedError(msg) from err
        future.add_done_callback(lambda _: self._slots.release())
        return future

    def shutdown(self) -> None:
        """The TaskExecutor stops: uploads not started are cancelled, running ones finished;
        a later :meth:`submit` raises UploadPoolClosedError."""
        self._executor.shutdown(wait=True, cancel_futures=True)


@dataclass
class _Pending:
    """A checkpoint this subtask took its snapshot for and has not acknowledged yet."""

    barrier: CheckpointBarrier
    snapshots: dict[str, OperatorSnapshot]
    channel_state: ChannelStateWriter
    metrics: CheckpointTaskMetrics
    location: SnapshotLocation
    input_complete: bool = False
    #: Timeout mode: the aligned barrier may still wait in an output, behind data.
    outputs_pending: bool = False
    started_async: bool = False
    async_start: float = field(default_factory=time.monotonic)

    @property
    def ready(self) -> bool:
        return self.input_complete and not self.outputs_pending and not self.started_async


class SubtaskCheckpointing:
    """Checkpoints of one subtask. Every method runs on the task thread."""

    def __init__(self, *, job_id: JobId, attempt_id: ExecutionAttemptId, owner: str,
                 writers: list[ResultPartitionWriter], partitioners: list[int],
                 storage: Callable[[], CheckpointStorageAccess], pool: UploadPool,
                 responder: CheckpointResponder, clock_ms: Callable[[], int],
                 local_root: Path | None = None,
                 savepoint_storage: Callable[[str], CheckpointStorageAccess] | None = None,
                 gate_channels: list[int] | None = None,
                 in_flight_bound: InFlightBound | None = None) -> None:
        """``local_root``: task-local recovery keeps a copy of every file there too.
        ``savepoint_storage``: the storage of a savepoint's directory (its URI).
        ``gate_channels``: channels per input gate (recorded with in-flight data).
        ``in_flight_bound``: the most in-flight data an unaligned checkpoint of this
        subtask can persist (:mod:`weir.taskexecutor.in_flight`), reported with each
        checkpoint beside what it persisted."""
        self._gate_channels = list(gate_channels or [])
        self._in_flight_bound = in_flight_bound
        self._savepoint_storage = savepoint_storage or _no_savepoints
        self.job_id = job_id
        self.attempt_id = attempt_id
        #: Directory name of this subtask inside a checkpoint (``<vertex>-<subtask>``).
        self.owner = owner
        self._writers = writers
        self._partitioners = partitioners
        self._storage = storage
        self._pool = pool
        self._responder = responder
        self._clock_ms = clock_ms
        self._local_root = local_root
        #: Local copies of operator and channel state (keyed backends track their own).
        self._local_copies = LocalCopyTracker()
        self._pending: dict[CheckpointId, _Pending] = {}
        self._futures: dict[CheckpointId, Future[None]] = {}
        #: The newest checkpoint whose barrier this subtask emitted (0: none yet).
        self.last_checkpoint_id = 0
        #: Alignment and start delay of the newest checkpoint (task metrics).
        self.last_alignment_ms = 0
        self.last_start_delay_ms = 0

    # -- the synchronous part ---------------------------------------------------------------

    def take_snapshot(self, barrier: CheckpointBarrier,
                      participants: dict[str, SnapshotParticipant],
                      *, unaligned: bool, ended: bool, alignment_ms: int = 0,
                      start_delay_ms: int = 0, processed_bytes: int = 0) -> bool:
        """Snapshot ``participants`` (by operator uid) and emit ``barrier`` downstream.

        ``unaligned``: the barrier overtakes the outputs' queued buffers (except on forward
        and broadcast edges), which are persisted. ``ended``: this subtask already sent end
        of data, so its barrier goes in band. Returns False (having declined the
        checkpoint) when a snapshot failed; the task goes on.
        """
        checkpoint_id = barrier.checkpoint_id
        started = time.monotonic()
        snapshots: dict[str, OperatorSnapshot] = {}
        try:
            options = barrier.options
            location = SnapshotLocation.for_savepoint(
                self._savepoint_storage(options.target_location), self.owner,
                options.savepoint_format) if options.savepoint else \
                SnapshotLocation.for_checkpoint(self._storage(), self.job_id, checkpoint_id,
                                                self.owner, self._local_root)
            for uid, participant in participants.items():
                snapshots[uid] = participant.snapshot_state(checkpoint_id,
                                                            barrier.timestamp_ms, location)
        except Exception as err:  # user code in snapshot_state, or a backend failure
            for snapshot in snapshots.values():
                if snapshot.keyed is not None:
                    snapshot.keyed.cancel()
            self._decline(checkpoint_id, checkpoint_pb2.TASK_CHECKPOINT_FAILURE,
                          f"the synchronous snapshot failed: {type(err).__name__}: {err}")
            return False
        channel_state = ChannelStateWriter(checkpoint_id)
        event = barrier.to_event()
        for index, writer in enumerate(self._writers):
            priority = unaligned and not ended and \
                self._partitioners[index] not in ALIGNED_PARTITIONERS
            overtaken = writer.broadcast_event(event, priority=priority)
            for subpartition, batches in enumerate(overtaken):
                if batches:
                    channel_state.add_output(index, subpartition, batches)
                    self._observe(batches)
        self.last_checkpoint_id = max(self.last_checkpoint_id, checkpoint_id)
        self.last_alignment_ms = alignment_ms
        self.last_start_delay_ms = start_delay_ms
        metrics = CheckpointTaskMetrics(
            sync_duration_ms=round((time.monotonic() - started) * 1000),
            alignment_duration_ms=alignment_ms, start_delay_ms=start_delay_ms,
            processed_bytes=processed_bytes, unaligned=unaligned)
        self._pending[checkpoint_id] = _Pending(
            barrier, snapshots, channel_state, metrics, location,
            outputs_pending=barrier.timeoutable and not unaligned and bool(self._writers))
        return True

    def persist_input(self, checkpoint_id: CheckpointId, channel: int, elements: Elements) -> None:
        """A buffer ``channel`` delivered before its barrier (unaligned)."""
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            pending.channel_state.add_input(channel, elements)
            self._observe([elements])

    def _observe(self, batches: Sequence[Elements]) -> None:
        """Persisted records count for the bound too (a record larger than any seen may be
        persisted before the task took it)."""
        if self._in_flight_bound is not None:
            for batch in batches:
                self._in_flight_bound.observe(batch.estimated_bytes(), len(batch))

    def input_complete(self, checkpoint_id: CheckpointId) -> None:
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            pending.input_complete = True
            self._maybe_start(checkpoint_id, pending)

    def maintain(self) -> None:
        """Called every turn of the task loop while checkpoints are pending: a barrier that
        left its outputs releases its checkpoint; one still queued behind data when the
        aligned-checkpoint timeout has passed is moved ahead, and what it passed is
        persisted (the checkpoint becomes unaligned here)."""
        for checkpoint_id, pending in list(self._pending.items()):
            if not pending.outputs_pending:
                continue
            barrier = pending.barrier
            event = barrier.to_event()
            deadline = barrier.timestamp_ms + barrier.options.aligned_timeout_ms
            if self._clock_ms() >= deadline:
                for index, writer in enumerate(self._writers):
                    for subpartition, batches in enumerate(writer.prioritize_event(event)):
                        if batches:
                            pending.channel_state.add_output(index, subpartition, batches)
                            pending.metrics.unaligned = True
                pending.outputs_pending = False
            elif not any(writer.is_event_queued(event) for writer in self._writers):
                pending.outputs_pending = False
            self._maybe_start(checkpoint_id, pending)

    def next_deadline_ms(self) -> int | None:
        """When :meth:`maintain` must run next at the latest (a barrier's timeout)."""
        deadlines = [p.barrier.timestamp_ms + p.barrier.options.aligned_timeout_ms
                     for p in self._pending.values() if p.outputs_pending]
        return min(deadlines) if deadlines else None

    @property
    def has_pending_outputs(self) -> bool:
        return any(p.outputs_pending for p in self._pending.values())

    # -- ends of a checkpoint -----------------------------------------------------------------

    def abort(self, checkpoint_id: CheckpointId,
              reason: checkpoint_pb2.CheckpointFailureReason | None = None, message: str = ""
              ) -> None:
        """Drop ``checkpoint_id`` here; with a ``reason``, also decline it (this subtask
        gave it up, rather than being told it was aborted)."""
        for old in [n for n in self._pending if n <= checkpoint_id]:
            pending = self._pending.pop(old)
            if not pending.started_async:
                _cancel(pending)
        future = self._futures.get(checkpoint_id)
        if future is not None:
            future.cancel()
        self._local_copies.abort(checkpoint_id)
        if reason is not None:
            self._decline(checkpoint_id, reason, message)

    def completed(self, checkpoint_id: CheckpointId) -> None:
        """The coordinator completed ``checkpoint_id``: forget what led to it, and older
        local copies."""
        for old in [n for n in self._futures if n <= checkpoint_id]:
            self._futures.pop(old, None)
        self._local_copies.confirm(checkpoint_id)

    def close(self) -> None:
        """The task ends: cancel what was not uploaded yet."""
        for pending in self._pending.values():
            if not pending.started_async:
                _cancel(pending)
        self._pending.clear()
        for future in self._futures.values():
            future.cancel()

    # -- the asynchronous part ----------------------------------------------------------------

    def _maybe_start(self, checkpoint_id: CheckpointId, pending: _Pending) -> None:
        if not pending.ready:
            return
        pending.started_async = True
        pending.async_start = time.monotonic()
        del self._pending[checkpoint_id]
        try:
            self._futures[checkpoint_id] = self._pool.submit(
                lambda: self._finish(checkpoint_id, pending))
        except (UploadPoolFullError, UploadPoolClosedError) as err:
            _cancel(pending)
            self._decline(checkpoint_id, checkpoint_pb2.CHECKPOINT_ASYNC_EXCEPTION, str(err))

    def _finish(self, checkpoint_id: CheckpointId, pending: _Pending) -> None:
        """Upload pool thread: write everything, then acknowledge (or decline)."""
        storage = pending.location.storage
        prefix = pending.location.private_prefix
        state = TaskStateSnapshot()
        metrics = pending.metrics
        current = "keyed state"
        try:
            for uid, snapshot in pending.snapshots.items():
                operator = state.operators.add(operator_uid=uid)
                if snapshot.keyed is not None:
                    current = f"the keyed state of operator {uid}"
                    handle = snapshot.keyed.run()
                    operator.keyed_state = json.dumps([handle.to_dict()])
                    operator.keyed_state_size = handle.state_size
                    operator.incremental_size = handle.checkpointed_size
                    metrics.state_size += handle.state_size
                    metrics.incremental_size += handle.checkpointed_size
                    metrics.changelog_state_size += getattr(handle, "log_size", 0)
                if snapshot.operator_state is not None:
                    name = f"operator-state-{_file_name(uid)}"
                    path = current = f"{prefix}/{name}"
                    written = storage.write(path, snapshot.operator_state)
                    self._keep_local(checkpoint_id, pending, name, snapshot.operator_state)
                    operator.operator_state.CopyFrom(from_stream_handle(written))
                    operator.operator_state_split_only = split_only(snapshot.operator_state)
                    metrics.state_size += written.length
                    metrics.incremental_size += written.length
            if pending.channel_state:
                path = current = f"{prefix}/{CHANNEL_STATE_FILE}"
                data = pending.channel_state.to_bytes()
                written = storage.write(path, data)
                self._keep_local(checkpoint_id, pending, CHANNEL_STATE_FILE, data)
                state.channel_state.data.CopyFrom(from_stream_handle(written))
                state.channel_state.gate_channels.extend(self._gate_channels)
                state.channel_state.input_bytes = pending.channel_state.input_bytes
                state.channel_state.output_bytes = pending.channel_state.output_bytes
                metrics.persisted_bytes = written.length
            if self._in_flight_bound is not None:
                metrics.in_flight_bound_bytes = self._in_flight_bound.bytes()
        except Exception as err:  # storage, state or encoding failures: decline, go on
            _cancel(pending)
            log.warning("checkpoint %d of %s failed writing %s: %s", checkpoint_id,
                        self.owner, current, err)
            reason = checkpoint_pb2.IO_EXCEPTION if isinstance(err, StorageError) \
                else checkpoint_pb2.CHECKPOINT_ASYNC_EXCEPTION
            self._decline(checkpoint_id, reason,
                          f"writing {current} of checkpoint {checkpoint_id} failed: "
                          f"{type(err).__name__}: {err}")
            return
        metrics.async_duration_ms = round((time.monotonic() - pending.async_start) * 1000)
        metrics.ack_timestamp_ms = self._clock_ms()
        with contextlib.suppress(Exception):  # the coordinator expires what never arrives
            self._responder.acknowledge_checkpoint(self.job_id, self.attempt_id,
                                                   checkpoint_id, state, metrics)

    def _keep_local(self, checkpoint_id: CheckpointId, pending: _Pending, name: str,
                    data: bytes) -> None:
        """Task-local recovery: the file just uploaded is also kept on this machine (a
        restore verifies it against the handle, so a bad copy costs a download only)."""
        directory = pending.location.local_dir
        if keep_local_file(directory, name, data):
            assert directory is not None
            self._local_copies.add(checkpoint_id, directory)

    def _decline(self, checkpoint_id: CheckpointId,
                 reason: checkpoint_pb2.CheckpointFailureReason, message: str) -> None:
        log.warning("%s declines checkpoint %d: %s", self.owner, checkpoint_id, message)
        with contextlib.suppress(Exception):
            self._responder.decline_checkpoint(self.job_id, self.attempt_id, checkpoint_id,
                                               reason, message)


def _no_savepoints(location: str) -> CheckpointStorageAccess:
    msg = f"this task cannot write savepoints (asked to write one to {location})"
    raise StorageError(msg)


def _cancel(pending: _Pending) -> None:
    for snapshot in pending.snapshots.values():
        if snapshot.keyed is not None:
            snapshot.keyed.cancel()


def _file_name(uid: str) -> str:
    """An operator uid as part of a file name (readable, and unique through its hash)."""
    readable = "".join(c if c.isalnum() or c in "-_." else "_" for c in uid)[:40]
    return f"{readable}-{zlib.crc32(uid.encode()):08x}"

