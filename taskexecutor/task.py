"""A Task: one subtask of a job vertex, run by its own mailbox thread.

The mailbox thread owns the task's operators, reader and writers. Other threads (RPC,
network, timers) never touch them: they put a *mail* (a callable) in the bounded mailbox or
set the wake-up flag. The loop runs mails first, then — while output has room — processes
one unit of input; when there is nothing to do it sleeps until woken or until the next
buffer-timeout flush is due. Checkpoint triggers and notifications are mails; barriers
arrive with the input. The task forwards all of them to its
:class:`~weir.taskexecutor.task_checkpoints.TaskCheckpoints`, which owns each checkpoint;
its input gates are a :class:`~weir.taskexecutor.task_input.TaskInput`.

With checkpointing on, a task that read all its input finishes its operators, tells its
consumers (end of data), and keeps taking part in checkpoints until one taken after that
completed (FLIP-147): only then does it end, so that two-phase-commit sinks commit their
last data.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.barrier import (
    BARRIER_EVENT,
    END_OF_DATA_EVENT,
    CheckpointBarrier,
    end_of_data_event,
)
from weir.checkpoint.barrier_handler import BarrierHandler
from weir.checkpoint.storage import CheckpointStorageAccess, create_storage
from weir.core import options
from weir.core.clock import wall_clock_ms
from weir.core.config import Configuration
from weir.core.errors import (
    ConfigError,
    CorruptStateError,
    IncompatibleStateError,
    MailboxFullError,
    MissingStateError,
    PartitionNotFoundError,
    RemoteTransportError,
    UserError,
    WeirError,
)
from weir.core.ids import CheckpointId, ExecutionAttemptId, JobId
from weir.core.processing_time import ProcessingTimeService
from weir.core.records import MAX_WATERMARK, Elements, decode_watermark
from weir.core.source import ReaderContext, SourceReader
from weir.core.user_code import user_location, user_traceback
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2, jobmaster_pb2
from weir.shuffle.api import (
    BufferOrEvent,
    ResultPartitionWriter,
    ShuffleEnvironment,
    TaskShuffleContext,
)
from weir.state.key_groups import operator_indexes
from weir.state.local_recovery import RestoreStorage
from weir.state.snapshot import SnapshotLocation
from weir.taskexecutor.checkpointing import SnapshotParticipant, SubtaskCheckpointing, UploadPool
from weir.taskexecutor.in_flight import InFlightBound
from weir.taskexecutor.jobmaster_gateway import JobMasterGateway
from weir.taskexecutor.mailbox import Mailbox
from weir.taskexecutor.operator import (
    CANCELLED_SERVICE,
    COLLECT_SERVICE,
    CONTINUATION_SERVICE,
    MAILBOX_SERVICE,
    OperatorContext,
    OperatorSnapshot,
    StateContext,
)
from weir.taskexecutor.operator_chain import OperatorChain, TaskCounters
from weir.taskexecutor.pending_input import PendingInput
from weir.taskexecutor.record_writer import (
    WATERMARK_EVENT,
    WATERMARK_STATUS_EVENT,
    RecordWriter,
    split_by_target,
)
from weir.taskexecutor.restore import TaskStateRestore
from weir.taskexecutor.source_reader_state import SourceReaderState
from weir.taskexecutor.task_checkpoints import TaskCheckpoints
from weir.taskexecutor.task_input import ChannelNumbering, TaskInput
from weir.taskexecutor.user_metrics import MetricRegistry, MetricScope
from weir.taskexecutor.watermark_valve import StatusWatermarkValve

log = logging.getLogger(__name__)

_MAX_IDLE_WAIT_S = 0.5
#: The channel a source's own records count as (its in-flight data, taken from its reader
#: but not processed at a checkpoint, is that channel's).
SOURCE_CHANNEL = 0
#: How long a chain of vectorised operators should take for what it takes of a channel at
#: once: it looks at barriers only between such batches.
VECTORISED_BATCH_TARGET_S = 0.02


class TaskCancelledError(WeirError):
    """Raised inside the task thread to unwind after cancellation; the task ends CANCELED."""


class _ReaderParticipant:
    """The source reader's part of a checkpoint: its splits, as operator list state.

    ``unread`` records of the reader's last batch are not processed yet: where the reader
    can rewind by records, the splits are stored at the first of them, which the task
    then need not persist (``covers_unread``); otherwise they go with the checkpoint as
    in-flight data of the source's channel."""

    def __init__(self, reader: SourceReader, unread: int) -> None:
        self._reader = reader
        self._unread = unread
        self.covers_unread = unread == 0

    @classmethod
    def of(cls, task: Task) -> _ReaderParticipant:
        assert task._reader is not None
        if task._pending and not task._pending_is_reader_batch:
            # Restored in-flight data of an older checkpoint, not the reader's batch: the
            # reader's position is not past it, so it cannot be rewound over; persist it.
            participant = cls(task._reader, 0)
            participant.covers_unread = False
            return participant
        return cls(task._reader, task._pending.records())

    def snapshot_state(self, checkpoint_id: CheckpointId, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        splits = None
        if self._unread:
            splits = self._reader.snapshot_state_unread(checkpoint_id, self._unread)
            self.covers_unread = splits is not None
        return OperatorSnapshot(operator_state=SourceReaderState.snapshot(
            self._reader, checkpoint_id, splits=splits))


class Task:
    """Runs one subtask. ``start`` launches the thread; ``cancel``, ``trigger_checkpoint``
    and ``notify_checkpoint`` may be called from any thread; ``on_state`` is called from
    the task thread on every state change."""

    def __init__(self, tdd: jobgraph_pb2.TaskDeploymentDescriptor, shuffle: ShuffleEnvironment,
                 gateway: JobMasterGateway, configuration: Configuration,
                 on_state: Callable[[Task, common_pb2.ExecutionState,
                                     common_pb2.ErrorInfo | None], None],
                 upload_pool: UploadPool | None = None,
                 local_state_root: Path | None = None,
                 user_metrics: MetricRegistry | None = None) -> None:
        self.tdd = tdd
        self.job_id = JobId(tdd.job_id)
        self.attempt_id = ExecutionAttemptId(tdd.attempt_id)
        self.name = f"{tdd.task_name} ({tdd.subtask_index + 1}/{tdd.parallelism})"
        self.configuration = configuration
        self._shuffle = shuffle
        self._gateway = gateway
        self._on_state = on_state
        self._upload_pool = upload_pool
        #: Task-local recovery: where this TaskExecutor keeps copies (None: it does not).
        self._local_state_root = local_state_root
        #: Where the TaskExecutor exports user metrics (None: they are not exported).
        self._user_metrics = user_metrics
        #: The user metrics of this task, unregistered when it ends.
        self.metrics: MetricScope | None = None
        #: What restoring state cost (reported with RUNNING; None: nothing restored).
        self.restore_stats: jobmaster_pb2.RestoreStats | None = None
        self.state: common_pb2.ExecutionState = common_pb2.CREATED
        self.counters = TaskCounters()
        self.mailbox = Mailbox()
        self._cancelled = threading.Event()
        self._writers: list[ResultPartitionWriter] = []
        #: The input gates and their task-wide channel numbering (empty until set up).
        self._input = TaskInput([], [])
        self._valve = StatusWatermarkValve(0)
        self.processing_time = ProcessingTimeService()
        self._chain: OperatorChain | None = None
        self._reader: SourceReader | None = None
        self._source_uid = ""
        self._buffer_timeout = configuration.get(options.BUFFER_TIMEOUT)
        self._thread = threading.Thread(target=self._run, name=f"task {self.name}", daemon=True)
        # Source bookkeeping.
        self._no_more_splits = False
        self._split_request_in_flight = False
        self._next_split_request = 0.0
        #: The owner of this task's checkpoints (None while checkpointing is off).
        self._checkpoints: TaskCheckpoints | None = None
        self._storage: CheckpointStorageAccess | None = None
        # End of input: channels that delivered end of data.
        self._data_ended: set[int] = set()
        self._data_finished = False
        #: What was taken (a buffer, a source's batch, restored in-flight data) and is not
        #: processed yet: handed to the chain in chunks, so that the loop turns between them.
        self._segment_size = int(configuration.get(options.SEGMENT_SIZE))
        self._pending = PendingInput(output_target_bytes=self._segment_size)
        #: A vectorised chain's measured bytes per second, and the most it takes of a
        #: channel at once (see _size_vectorised_batches).
        self._vectorised_rate: float | None = None
        self._batch_bytes = self._segment_size
        #: The most in-flight data a checkpoint of this subtask can persist (with
        #: checkpointing on): it learns the largest record from the input taken.
        self._in_flight_bound: InFlightBound | None = None
        #: A source's pending input is (the rest of) its reader's last batch, which the
        #: reader can rewind over; not restored in-flight data of an older checkpoint.
        self._pending_is_reader_batch = False
        #: Work an operator handed over when its time slice ran out (the rest of the timers
        #: of a watermark): done before any more input is taken.
        self._continuations: deque[Callable[[], None]] = deque()
        self._finished_on_restore = tdd.restore.finished if tdd.HasField("restore") else False
        self._savepoint_storages: dict[str, CheckpointStorageAccess] = {}
        self._record_writers: list[RecordWriter] = []

    # -- called from other threads ----------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancelled.set()
        self.mailbox.wakeup.set()

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def wake(self) -> None:
        self.mailbox.wakeup.set()

    def input_metrics(self) -> list[dict[str, float]]:
        """Each input gate's network metrics (``bytesIn``, ``inPoolUsage``, ...; none until
        the task set its gates up). Any thread (the TaskExecutor's metric collectors): the
        gates' counters are read as they are, without the task thread."""
        return [gate.metrics() for gate in self._input.gates]

    def output_metrics(self) -> list[dict[str, float]]:
        """Each result partition writer's network metrics (``bytesOut``, ``outPoolUsage``,
        ...). Any thread, as :meth:`input_metrics`."""
        return [writer.metrics() for writer in list(self._writers)]

    def late_records_dropped(self) -> int | None:
        """Records the chain's event-time operators dropped as late (None: the chain is
        not set up yet). Any thread, as :meth:`input_metrics`."""
        chain = self._chain
        if chain is None:
            return None
        return sum(getattr(op, "num_late_records_dropped", 0) for op in chain.operators)

    def trigger_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """Take checkpoint ``barrier`` now (a source, or a task whose inputs all ended).
        Any thread; raises MailboxFullError when the task takes no mails for 10 s."""
        self.mailbox.put(lambda: self._on_trigger(barrier))

    def notify_checkpoint(self, checkpoint_id: CheckpointId, complete: bool) -> None:
        """The coordinator completed (or aborted) ``checkpoint_id``. Any thread; a task
        whose mailbox stays full for 10 s is stuck, and the notification is dropped (a
        later one covers it: completion of n completes every older checkpoint)."""
        try:
            self.mailbox.put(lambda: self._on_notify(checkpoint_id, complete))
        except MailboxFullError:
            log.warning("task %s takes no mails: notification of checkpoint %d dropped",
                        self.name, checkpoint_id)

    # -- the task thread --------------------------------------------------------------------

    def _set_state(self, state: common_pb2.ExecutionState,
                   error: common_pb2.ErrorInfo | None = None) -> None:
        self.state = state
        self._on_state(self, state, error)

    def _run(self) -> None:
        error: common_pb2.ErrorInfo | None = None
        final = common_pb2.FINISHED
        try:
            self._set_state(common_pb2.INITIALIZING)
            self._setup()
            self._check_cancelled()
            self._set_state(common_pb2.RUNNING)
            self._loop()
            self._check_cancelled()
            stopped = self._checkpoints is not None and self._checkpoints.stopped
            if not self._data_finished and not stopped:
                self._finish_operators()
            for writer in self._writers:
                writer.finish()
        except TaskCancelledError:
            final = common_pb2.CANCELED
        except BaseException as err:  # the task reports every failure, user code included
            if self._cancelled.is_set():
                final = common_pb2.CANCELED
            else:
                final = common_pb2.FAILED
                error = self._error_info(err)
                log.warning("task %s failed: %s\n%s", self.name, error.message,
                            error.traceback.rstrip())
        finally:
            self._cleanup(final, error)
        self._set_state(final, error)

    def _error_info(self, err: BaseException) -> common_pb2.ErrorInfo:
        reason = common_pb2.USER_CODE_ERROR
        partition_id = ""
        if isinstance(err, PartitionNotFoundError):
            reason = common_pb2.PARTITION_NOT_FOUND
            partition_id = err.partition_id
        elif isinstance(err, RemoteTransportError):
            reason = common_pb2.REMOTE_TRANSPORT
        elif isinstance(err, CorruptStateError | MissingStateError) and \
                self.state == common_pb2.INITIALIZING:
            reason = common_pb2.STATE_RESTORE_FAILED
        elif isinstance(err, IncompatibleStateError):
            reason = common_pb2.STATE_INCOMPATIBLE
        message = f"{type(err).__name__}: {err}"
        full = "".join(traceback.format_exception(err))
        program = self.configuration.get(options.PROGRAM_FILE)
        if reason == common_pb2.USER_CODE_ERROR and (where := user_location(err, program)):
            # The user's function failed: point at their code, show their frames.
            message += f" (at {where})"
            full = user_traceback(err, program)
        return common_pb2.ErrorInfo(
            reason=reason, message=message,
            exception_class=f"{type(err).__module__}.{type(err).__qualname__}",
            traceback=full[-8000:], task=self.name, partition_id=partition_id)

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise TaskCancelledError

    # -- setup ------------------------------------------------------------------------------

    def _setup(self) -> None:
        tdd = self.tdd
        shuffle_ctx = TaskShuffleContext(self.job_id, self.name, self.attempt_id, self.wake)
        writers = []
        for deployment in tdd.partitions:
            writer = self._shuffle.create_result_partition_writer(shuffle_ctx, deployment)
            self._writers.append(writer)
            key = cloudpickle.loads(deployment.key_selector) if deployment.key_selector else None
            writers.append(RecordWriter(writer, deployment.partitioner, key,
                                        deployment.max_parallelism, tdd.subtask_index,
                                        deployment.side_output))
        self._record_writers = writers
        self._input = TaskInput.open(self._shuffle, shuffle_ctx, tdd.input_gates)
        self._valve = StatusWatermarkValve(self._input.num_channels)
        operators = cloudpickle.loads(tdd.chain)
        job_config = self.configuration.merged(dict(tdd.config))
        self.metrics = (self._user_metrics or MetricRegistry()).scope(
            job_id=tdd.job_id, task=tdd.task_name, subtask_index=str(tdd.subtask_index))
        ctx = OperatorContext(
            task_name=tdd.task_name, subtask_index=tdd.subtask_index,
            parallelism=tdd.parallelism, max_parallelism=tdd.max_parallelism,
            attempt_number=tdd.attempt_number, job_id=self.job_id, config=dict(tdd.config),
            services={COLLECT_SERVICE: self._push_collect, MAILBOX_SERVICE: self.mailbox.put,
                      CONTINUATION_SERVICE: self._continuations.append,
                      CANCELLED_SERVICE: self._cancelled},
            configuration=job_config, processing_time=self.processing_time,
            metrics=self.metrics, local_state_root=self._local_state_root)
        self._chain = OperatorChain(operators, ctx, writers, self.counters)
        # Per-record operators (a user function a record) get their input in chunks; a
        # chain of vectorised ones in whole batches (see pending_input).
        self._pending.chunked = any(op.max_batch_records is not None for op in operators)
        uids = list(tdd.operator_uids)
        if tdd.source:
            self._source_uid = uids.pop(0) if uids else "source"
        for operator, uid in zip(operators, uids, strict=False):
            operator.uid = operator.uid or uid or None
        if checkpoint_options.checkpointing_enabled(job_config):
            self._setup_checkpointing(job_config)
        restore_started = time.monotonic()
        restore = TaskStateRestore(tdd.restore, RestoreStorage(
            self._checkpoint_storage(), self._local_state_root, job_config)) \
            if tdd.HasField("restore") else None
        for operator in operators:
            operator.initialize_state(restore.context(operator.uid or operator.name)
                                      if restore is not None else StateContext())
        if tdd.source:
            source = cloudpickle.loads(tdd.source)
            # The TaskExecutor's configuration with the job's: a reader opens storage with
            # this process's credentials, which the job graph does not carry.
            self._reader = source.create_reader(ReaderContext(
                tdd.subtask_index, tdd.parallelism,
                job_config.get(options.BATCH_SIZE), job_config.options_dict()))
            if self._finished_on_restore:
                self._no_more_splits = True
            elif restore is not None:
                self._reader.add_splits(SourceReaderState.restore(
                    restore.operator_state(self._source_uid), tdd.subtask_index,
                    tdd.parallelism))
        self._chain.open()
        if restore is not None:
            self._restore_channel_state(restore)
            self.restore_stats = restore.stats(round((time.monotonic() - restore_started)
                                                     * 1000))

    def _setup_checkpointing(self, config: Configuration) -> None:
        if self._upload_pool is None:
            msg = "checkpointing needs the TaskExecutor's upload pool"
            raise ConfigError(msg)
        self._in_flight_bound = InFlightBound.of(self.tdd, self.configuration,
                                                 self._shuffle.is_local_channel, self._writers)
        checkpointing = SubtaskCheckpointing(
            job_id=self.job_id, attempt_id=self.attempt_id,
            owner=f"{self.tdd.vertex_id}-{self.tdd.subtask_index}", writers=self._writers,
            partitioners=[p.partitioner for p in self.tdd.partitions],
            storage=self._checkpoint_storage, pool=self._upload_pool,
            responder=self._gateway, clock_ms=wall_clock_ms,
            local_root=self._local_state_root, savepoint_storage=self._savepoint_storage,
            gate_channels=self._input.gate_channels,
            in_flight_bound=self._in_flight_bound)
        handler = None
        if self._input.num_channels:
            at_least_once = config.get(checkpoint_options.CHECKPOINTING_MODE) == "AT_LEAST_ONCE"
            handler = BarrierHandler(self._input.num_channels, wall_clock_ms, at_least_once,
                                     self._input.aligned_channels())
        self._checkpoints = TaskCheckpoints(
            checkpointing, _CheckpointedTask(self), self.counters, wall_clock_ms,
            handler=handler, inputs=self._input if handler is not None else None,
            name=self.name)

    def _checkpoint_storage(self) -> CheckpointStorageAccess:
        if self._storage is None:
            config = self.configuration.merged(dict(self.tdd.config))
            directory = config.get(checkpoint_options.CHECKPOINTS_DIR)
            if not directory:
                msg = ("checkpointing is on but state.checkpoints.dir is not set: set it to "
                       "a file:// path or s3://bucket/prefix")
                raise ConfigError(msg)
            self._storage = create_storage(directory, config)
        return self._storage

    def _savepoint_storage(self, location: str) -> CheckpointStorageAccess:
        """The storage of a savepoint's directory (task thread)."""
        storage = self._savepoint_storages.get(location)
        if storage is None:
            storage = create_storage(location, self.configuration.merged(dict(self.tdd.config)))
            self._savepoint_storages = {location: storage}  # one savepoint at a time
        return storage

    def _restore_channel_state(self, restore: TaskStateRestore) -> None:
        """Write the restored output data first, then queue the input data to be processed
        before any new input (both were in flight at the checkpoint)."""
        state = restore.channel_state()
        if state is None:
            self._restore_rescaled_channel_state(restore)
            return
        for (partition, subpartition), batches in sorted(state.outputs.items()):
            for elements in batches:
                self._writers[partition].emit(subpartition, elements)
        for writer in self._writers:
            writer.flush_all()
        replayed = 0
        for channel, batches in sorted(state.inputs.items()):
            self._pending.add(channel, self._input.input_of(channel), batches)
            self._pending_is_reader_batch = False
            replayed += len(batches)
        log.info("task %s restored %d output and %d input buffers of in-flight data",
                 self.name, sum(map(len, state.outputs.values())), replayed)

    def _restore_rescaled_channel_state(self, restore: TaskStateRestore) -> None:
        """In-flight data of an unaligned checkpoint taken at another parallelism: output
        records go out again through this subtask's partitioners (a keyed edge routes
        them by key group to the consumers of the new parallelism); of the input records,
        this subtask takes those of its key groups (keyed gates) or those of the old
        subtasks it stands in for (old index modulo parallelism, other gates)."""
        outputs, inputs = restore.rescaled_channel_state()
        for state in outputs:
            for (partition, _), batches in sorted(state.outputs.items()):
                for elements in batches:
                    self._record_writers[partition].emit(elements)
        for writer in self._writers:
            writer.flush_all()
        selectors: dict[int, Any] = {}
        replayed = 0
        for old_index, state, gate_channels in inputs:
            numbering = ChannelNumbering(gate_channels)
            for channel, batches in sorted(state.inputs.items()):
                gate = numbering.gate_of(channel)
                for elements in batches:
                    mine = self._my_share(elements, gate, old_index, selectors)
                    if mine is not None and len(mine):
                        self._pending.add(channel, self._input.input_of(channel), [mine])
                        self._pending_is_reader_batch = False
                        replayed += 1
        if outputs or inputs:
            log.info("task %s restored in-flight data of %d old subtasks at another "
                     "parallelism: %d output batches sent again, %d input batches to "
                     "process", self.name, len(inputs), sum(
                         len(b) for s in outputs for b in s.outputs.values()), replayed)

    def _my_share(self, elements: Elements, gate: int, old_index: int,
                  selectors: dict[int, Any]) -> Elements | None:
        tdd = self.tdd
        deployment = tdd.input_gates[gate] if gate < len(tdd.input_gates) else None
        if deployment is None or deployment.partitioner != common_pb2.HASH:
            return elements if old_index % tdd.parallelism == tdd.subtask_index else None
        if gate not in selectors:
            selectors[gate] = cloudpickle.loads(deployment.key_selector)
        groups = selectors[gate].key_groups(elements, deployment.max_parallelism)
        targets = operator_indexes(groups, deployment.max_parallelism, tdd.parallelism)
        for target, part in split_by_target(elements, targets, tdd.parallelism):
            if target == tdd.subtask_index:
                return part
        return None

    def _push_collect(self, data: bytes, end: bool) -> None:
        self._gateway.push_collect(self.job_id, self.tdd.subtask_index, self.attempt_id, data,
                                   end, self._cancelled)

    # -- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        counters = self.counters
        wakeup = self.mailbox.wakeup
        while True:
            wakeup.clear()
            for mail in self.mailbox.drain():
                mail()
            self._check_cancelled()
            time_slice = self.processing_time.time_slice
            if not self._input_suspended():
                time_slice.start()
                self.processing_time.fire_due()
            self._flush_if_due()
            self._input.maintain()
            if self._checkpoints is not None:
                self._checkpoints.on_tick()
            if not all(w.is_available() for w in self._writers):
                started = time.monotonic()
                wakeup.wait(self._wait_timeout())
                counters.backpressured_s += time.monotonic() - started
                continue
            started = time.monotonic()
            time_slice.start()
            status = self._process_input()
            if status == "end":
                return
            if status == "more" or (status == "nothing" and not self._input_suspended()
                                    and self._chain is not None
                                    and self._chain.work_while_idle()):
                counters.busy_s += time.monotonic() - started
                continue
            waited = time.monotonic()
            wakeup.wait(self._wait_timeout())
            counters.idle_s += time.monotonic() - waited

    def _input_suspended(self) -> bool:
        """A stop-with-savepoint was taken here: no input, no timers."""
        return self._checkpoints is not None and self._checkpoints.input_suspended

    def _wait_timeout(self) -> float:
        timeout = _MAX_IDLE_WAIT_S
        next_timer = self.processing_time.seconds_until_next()
        if next_timer is not None:
            timeout = min(timeout, next_timer)
        for writer in self._writers:
            age = writer.oldest_pending_age()
            if age is not None:
                timeout = min(timeout, max(0.0, self._buffer_timeout - age))
        if self._reader is not None and not self._split_request_in_flight:
            due = self._next_split_request - time.monotonic()
            if due > 0:  # a past due time must not turn the wait into a busy loop
                timeout = min(timeout, due)
        retry = self._input.seconds_until_retry()
        if retry is not None:
            timeout = min(timeout, retry)
        if self._checkpoints is not None:
            due_s = self._checkpoints.seconds_until_due()
            if due_s is not None:
                timeout = min(timeout, due_s)
        return timeout

    def _flush_if_due(self) -> None:
        for writer in self._writers:
            age = writer.oldest_pending_age()
            if age is not None and age >= self._buffer_timeout:
                writer.flush_all()

    def _process_input(self) -> str:
        """One unit of work: 'more' if something was processed, 'nothing', or 'end'. A
        unit is an event, or a chunk of records (see :mod:`weir.taskexecutor.pending_input`):
        the loop turns — mails, timers, priority events, backpressure — between two
        chunks of one buffer."""
        assert self._chain is not None
        if self._checkpoints is not None and self._checkpoints.input_suspended:
            return "end" if self._checkpoints.stopped else "nothing"
        if self._continuations:
            return self._continue()
        if self._pending:
            return self._process_chunk()
        if self._reader is not None:
            return self._process_source()
        polled = self._input.poll()
        if polled is None:
            return self._end_or_wait() if self._input.is_finished() else "nothing"
        channel, item = polled.channel, polled.item
        if item.elements:
            self._pending.add(channel, polled.input_index, item.elements, item.size)
            if self._in_flight_bound is not None:
                self._in_flight_bound.observe(item.size, sum(map(len, item.elements)))
            return self._process_chunk()
        if item.event is not None:
            self._on_event(channel, item)
        elif item.end_of_partition:
            self._on_end_of_data(channel)
            if self._checkpoints is not None:
                self._checkpoints.on_end_of_partition(channel)
        return "more"

    def _process_chunk(self) -> str:
        """Process the next chunk of the pending input, unless a priority event (an
        unaligned barrier) waits: that comes first, ahead of the records still pending."""
        assert self._chain is not None
        if self._checkpoints is not None:
            polled = self._input.poll_priority()
            if polled is not None:
                self._on_event(polled.channel, polled.item)
                return "more"
        chunk = self._pending.next_chunk()
        assert chunk is not None
        if self._checkpoints is not None:
            self._checkpoints.on_data(chunk.channel, (chunk.elements,), chunk.nbytes)
        emitted = self._emitted_bytes()
        started = time.perf_counter()
        self._chain.process(chunk.elements, chunk.input_index)
        seconds = time.perf_counter() - started
        self._pending.record_cost(len(chunk.elements), seconds, self._emitted_bytes() - emitted)
        if not self._pending.chunked:
            self._size_vectorised_batches(chunk.nbytes, seconds)
        return "more"

    def _size_vectorised_batches(self, nbytes: int, seconds: float) -> None:
        """A vectorised chain processes what it takes whole, and the more of it at once the
        cheaper (a keyed aggregation's call costs about the same for 3,000 records as for
        30,000): let it take as much of a channel as it gets through in
        ``VECTORISED_BATCH_TARGET_S``, and never less than a segment."""
        if nbytes <= 0 or seconds <= 0:
            return
        rate = nbytes / seconds
        self._vectorised_rate = rate if self._vectorised_rate is None \
            else (self._vectorised_rate + rate) / 2
        limit = max(self._segment_size, int(self._vectorised_rate * VECTORISED_BATCH_TARGET_S))
        if limit != self._batch_bytes:
            self._batch_bytes = limit
            self._input.set_batch_bytes(limit)

    def _emitted_bytes(self) -> int:
        return sum(writer.emitted_bytes for writer in self._writers)

    def _continue(self) -> str:
        """Run the next piece of work an operator handed over (unless a priority event
        waits: that comes first)."""
        if self._checkpoints is not None:
            polled = self._input.poll_priority()
            if polled is not None:
                self._on_event(polled.channel, polled.item)
                return "more"
        self._continuations.popleft()()
        return "more"

    def _process_pending(self) -> None:
        """Do everything taken or handed over now, without yielding (``stop --drain``, end
        of input: before event time ends)."""
        assert self._chain is not None
        self.processing_time.time_slice.unlimited = True
        while self._continuations:
            self._continuations.popleft()()
        while (chunk := self._pending.next_chunk()) is not None:
            if self._checkpoints is not None:
                self._checkpoints.on_data(chunk.channel, (chunk.elements,), chunk.nbytes)
            self._chain.process(chunk.elements, chunk.input_index)

    def _end_or_wait(self) -> str:
        """Every input ended: end now, or once the final checkpoint completed."""
        if not self._data_finished:
            self._finish_operators()
        if self._checkpoints is None or self._checkpoints.final_checkpoint_done:
            return "end"
        return "nothing"

    def _on_event(self, channel: int, item: BufferOrEvent) -> None:
        event = item.event
        assert event is not None
        if event.type == WATERMARK_EVENT:
            self._advance_watermark(self._valve.input_watermark(
                channel, decode_watermark(event.payload)))
        elif event.type == WATERMARK_STATUS_EVENT:
            watermark, idle = self._valve.input_status(channel, event.payload == b"idle")
            assert self._chain is not None
            if idle is False:  # active before the watermark: idle inputs ignore watermarks
                self._chain.process_watermark_status(False)
            self._advance_watermark(watermark)
            if idle is True:
                self._chain.process_watermark_status(True)
        elif event.type == BARRIER_EVENT:
            if self._checkpoints is not None:
                # Records of this channel taken before its barrier but not processed yet
                # were sent before it: in-flight data of the checkpoint.
                self._checkpoints.on_barrier(channel, CheckpointBarrier.from_event(event),
                                             item.priority, item.overtaken,
                                             self._pending.of_channel(channel))
        elif event.type == END_OF_DATA_EVENT:
            self._on_end_of_data(channel)

    def _on_end_of_data(self, channel: int) -> None:
        """``channel``'s producer finished its data (end of data, or end of partition)."""
        if channel in self._data_ended:
            return
        self._data_ended.add(channel)
        self._advance_watermark(self._valve.channel_finished(channel))
        if len(self._data_ended) == self._valve.num_channels and not self._data_finished \
                and self._checkpoints is not None:
            self._finish_operators()

    def _finish_operators(self, report: bool = True) -> None:
        """End of input: event time ends, operators emit what they hold, and (with
        checkpointing) consumers learn that no more data follows (``report``: a source
        tells the JobMaster, which takes the final checkpoint)."""
        assert self._chain is not None
        self._process_pending()  # from here on, nothing yields: the input ends now
        self._data_finished = True
        # End of input is the end of event time: every event-time timer fires, here and
        # (through the writers) downstream, before operators flush what they hold.
        self._advance_watermark(MAX_WATERMARK)
        self._chain.finish()
        if self._checkpoints is not None:
            for writer in self._writers:
                writer.broadcast_event(end_of_data_event())
            if self._reader is not None and report:
                self._gateway.report_end_of_data(self.job_id, self.attempt_id)

    def _advance_watermark(self, watermark: int | None) -> None:
        """Event time of this task moved to ``watermark`` (None: it did not move)."""
        if watermark is None or self._chain is None:
            return
        if self._chain.watermark is not None and watermark <= self._chain.watermark:
            return
        self._chain.process_watermark(watermark)

    # -- sources ----------------------------------------------------------------------------

    def _process_source(self) -> str:
        assert self._reader is not None and self._chain is not None
        if not self._data_finished:
            elements = self._reader.poll()
            if elements is not None:
                self._pending.add(SOURCE_CHANNEL, 0, [elements])
                self._pending_is_reader_batch = True
                return self._process_chunk() if self._pending else "more"
        if self._no_more_splits:
            return self._end_or_wait()
        if not self._split_request_in_flight and time.monotonic() >= self._next_split_request:
            self._split_request_in_flight = True
            passed = self._checkpoints.last_checkpoint_id if self._checkpoints else 0
            self._gateway.request_splits(self.tdd, self._on_split_response, passed)
        return "nothing"

    def _on_split_response(self, response: jobmaster_pb2.SplitResponse | None,
                           error: BaseException | None) -> None:
        """Called on an RPC thread: hand the answer (or the error) to the task thread as
        a mail."""
        def mail() -> None:
            self._split_request_in_flight = False
            if error is not None:
                raise error
            assert self._reader is not None and response is not None
            splits = [cloudpickle.loads(s) for s in response.splits]
            if splits:
                self._reader.add_splits(splits)
            if response.no_more_splits:
                self._no_more_splits = True
            if response.retry_after_ms:
                self._next_split_request = time.monotonic() + response.retry_after_ms / 1000
            if self._checkpoints is not None:
                self._checkpoints.on_splits_arrived()

        with contextlib.suppress(MailboxFullError):  # stuck: the request is not repeated
            self.mailbox.put(mail)

    # -- checkpoints: forwarded to their owner (task thread) --------------------------------

    def _on_trigger(self, barrier: CheckpointBarrier) -> None:
        if self._checkpoints is None:
            self._gateway.decline_checkpoint(
                self.job_id, self.attempt_id, barrier.checkpoint_id,
                checkpoint_pb2.CHECKPOINT_DECLINED_TASK_NOT_READY,
                "checkpointing is off for this task")
            return
        self._checkpoints.on_trigger(barrier)

    def _on_notify(self, checkpoint_id: CheckpointId, complete: bool) -> None:
        if self._chain is not None and self._checkpoints is not None:
            self._checkpoints.on_notify(checkpoint_id, complete)

    # -- cleanup ----------------------------------------------------------------------------

    def _cleanup(self, final: common_pb2.ExecutionState, error: common_pb2.ErrorInfo | None
                 ) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()
        if self._chain is not None:
            for close_error in self._chain.close():
                log.warning("task %s: closing an operator failed: %s", self.name, close_error)
        if self.metrics is not None:
            self.metrics.close()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        self._input.close()
        if final != common_pb2.FINISHED:
            cause = UserError(error.message if error else "task was cancelled")
            for writer in self._writers:
                with contextlib.suppress(Exception):
                    writer.fail(cause)
                    writer.release()


class _CheckpointedTask:
    """What the task's checkpoints may do to it (the task thread's narrow interface to
    :class:`TaskCheckpoints`)."""

    def __init__(self, task: Task) -> None:
        self._task = task
        # The reader's part of the snapshot being taken: whether it covers what the task
        # took from the reader and has not processed.
        self._reader_participant: _ReaderParticipant | None = None

    @property
    def data_finished(self) -> bool:
        return self._task._data_finished

    @property
    def awaiting_splits(self) -> bool:
        return self._task._reader is not None and self._task._split_request_in_flight

    def snapshot_participants(self) -> dict[str, SnapshotParticipant]:
        task = self._task
        assert task._chain is not None
        participants: dict[str, SnapshotParticipant] = {}
        if task._reader is not None:
            self._reader_participant = _ReaderParticipant.of(task)
            participants[task._source_uid] = self._reader_participant
        for operator in task._chain.operators:
            participants[operator.uid or operator.name] = operator
        return participants

    def drain(self) -> None:
        self._task._finish_operators(report=False)

    def unprocessed(self) -> list[tuple[int, Elements]]:
        reader = self._reader_participant
        if reader is not None and reader.covers_unread:
            return []   # the reader's splits point at the first of them
        return self._task._pending.everything()

    def notify_operators(self, checkpoint_id: CheckpointId, complete: bool) -> None:
        chain = self._task._chain
        assert chain is not None
        for operator in chain.operators:
            if complete:
                operator.notify_checkpoint_complete(checkpoint_id)
            else:
                operator.notify_checkpoint_aborted(checkpoint_id)

    def wake(self) -> None:
        self._task.wake()
