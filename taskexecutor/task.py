"""A Task: one subtask of a job vertex, run by its own mailbox thread.

The mailbox thread owns the task's operators, reader and writers. Other threads (RPC,
network, timers) never touch them: they put a *mail* (a callable) in the bounded mailbox or
set the wake-up flag. The loop runs mails first, then — while output has room — processes
one unit of input; when there is nothing to do it sleeps until woken or until the next
buffer-timeout flush is due. Checkpoint triggers and notifications are mails; barriers
arrive with the input and go through the task's :class:`BarrierHandler`.

With checkpointing on, a task that read all its input finishes its operators, tells its
consumers (end of data), and keeps taking part in checkpoints until one taken after that
completed (FLIP-147): only then does it end, so that two-phase-commit sinks commit their
last data.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
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
from weir.checkpoint.barrier_handler import (
    AbortCheckpoint,
    Action,
    BarrierHandler,
    Block,
    InputStateComplete,
    PersistData,
    PrioritizeInputBarriers,
    Resume,
    TakeSnapshot,
)
from weir.checkpoint.storage import CheckpointStorage, create_storage
from weir.core import options
from weir.core.clock import wall_clock_ms
from weir.core.config import Configuration
from weir.core.errors import (
    ConfigError,
    CorruptStateError,
    IncompatibleStateError,
    MissingStateError,
    PartitionNotFoundError,
    RemoteTransportError,
    UserError,
)
from weir.core.processing_time import ProcessingTimeService
from weir.core.records import MAX_WATERMARK, Elements, decode_watermark
from weir.core.source import ReaderContext, SourceReader
from weir.core.user_code import user_location, user_traceback
from weir.proto import checkpoint_pb2, common_pb2, jobgraph_pb2, jobmaster_pb2
from weir.shuffle.api import (
    BufferOrEvent,
    InputGate,
    OvertakenData,
    ResultPartitionWriter,
    ShuffleEnvironment,
    TaskShuffleContext,
)
from weir.state.key_groups import operator_indexes
from weir.state.local_recovery import RestoreStorage
from weir.state.snapshot import SnapshotLocation
from weir.taskexecutor.checkpointing import ALIGNED_PARTITIONERS, SubtaskCheckpointing, UploadPool
from weir.taskexecutor.operator import (
    COLLECT_SERVICE,
    MAILBOX_SERVICE,
    OperatorContext,
    OperatorSnapshot,
    StateContext,
)
from weir.taskexecutor.operator_chain import OperatorChain, TaskCounters
from weir.taskexecutor.record_writer import (
    WATERMARK_EVENT,
    WATERMARK_STATUS_EVENT,
    RecordWriter,
    split_by_target,
)
from weir.taskexecutor.restore import TaskStateRestore
from weir.taskexecutor.source_reader_state import SourceReaderState
from weir.taskexecutor.user_metrics import MetricRegistry, MetricScope
from weir.taskexecutor.watermark_valve import StatusWatermarkValve

log = logging.getLogger(__name__)

MAILBOX_CAPACITY = 1024
_MAX_IDLE_WAIT_S = 0.5
#: How often a task checks whether its aligned barriers left its outputs.
_OUTPUT_CHECK_S = 0.01


class TaskCancelledError(Exception):
    """Raised inside the task thread to unwind after cancellation."""


class Mailbox:
    """Bounded queue of mails plus the flag that wakes the task thread."""

    def __init__(self, capacity: int = MAILBOX_CAPACITY) -> None:
        self._mails: deque[Callable[[], None]] = deque()
        self._capacity = capacity
        self._lock = threading.Lock()
        self.wakeup = threading.Event()

    def put(self, mail: Callable[[], None], timeout: float = 10.0) -> None:
        """Enqueue a mail from any thread; raises if the mailbox stays full for ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self._mails) < self._capacity:
                    self._mails.append(mail)
                    break
            if time.monotonic() > deadline:
                msg = "task mailbox is full"
                raise RuntimeError(msg)
            time.sleep(0.01)
        self.wakeup.set()

    def drain(self) -> list[Callable[[], None]]:
        with self._lock:
            mails = list(self._mails)
            self._mails.clear()
        return mails


class _ReaderParticipant:
    """The source reader's part of a checkpoint: its splits, as operator list state."""

    def __init__(self, reader: SourceReader) -> None:
        self._reader = reader

    def snapshot_state(self, checkpoint_id: int, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        return OperatorSnapshot(
            operator_state=SourceReaderState.snapshot(self._reader, checkpoint_id))


class Task:
    """Runs one subtask. ``start`` launches the thread; ``cancel``, ``trigger_checkpoint``
    and ``notify_checkpoint`` may be called from any thread; ``on_state`` is called from
    the task thread on every state change."""

    def __init__(self, tdd: jobgraph_pb2.TaskDeploymentDescriptor, shuffle: ShuffleEnvironment,
                 gateway: Any, configuration: Configuration,
                 on_state: Callable[[Task, int, common_pb2.ErrorInfo | None], None],
                 upload_pool: UploadPool | None = None,
                 local_state_root: Path | None = None,
                 user_metrics: MetricRegistry | None = None) -> None:
        self.tdd = tdd
        self.job_id = tdd.job_id
        self.attempt_id = tdd.attempt_id
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
        self.state = common_pb2.CREATED
        self.counters = TaskCounters()
        self.mailbox = Mailbox()
        self._cancelled = threading.Event()
        self._writers: list[ResultPartitionWriter] = []
        self._gates: list[InputGate] = []
        #: Per gate, which input of the head operator it feeds (two-input operators).
        self._gate_inputs: list[int] = []
        #: Index of each gate's first channel in the task-wide channel numbering.
        self._channel_offsets: list[int] = []
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
        # Checkpointing (None when it is off).
        self.checkpointing: SubtaskCheckpointing | None = None
        self._handler: BarrierHandler | None = None
        self._storage: CheckpointStorage | None = None
        self._deferred_triggers: list[CheckpointBarrier] = []
        #: Overtaken data channels are still capturing: (checkpoint id, channel, data).
        self._captures: list[tuple[int, int, OvertakenData]] = []
        # End of input: channels that delivered end of data, and the final checkpoint.
        self._data_ended: set[int] = set()
        self._data_finished = False
        self._finish_checkpoints: set[int] = set()
        self._final_checkpoint_done = False
        self._replay: deque[tuple[int, Elements]] = deque()
        self._finished_on_restore = tdd.restore.finished if tdd.HasField("restore") else False
        #: Stop-with-savepoint without drain: the savepoint this task took its part of; no
        #: input is processed and no timer fires after it. Once it completed the task ends
        #: without finishing its operators; if it is aborted, the task goes on.
        self._stop_savepoint: int | None = None
        self._stopped = False
        self._savepoint_storages: dict[str, CheckpointStorage] = {}
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

    def trigger_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """Take checkpoint ``barrier`` now (a source, or a task whose inputs all ended)."""
        self.mailbox.put(lambda: self._on_trigger(barrier))

    def notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        """The coordinator completed (or aborted) ``checkpoint_id``."""
        self.mailbox.put(lambda: self._on_notify(checkpoint_id, complete))

    # -- the task thread --------------------------------------------------------------------

    def _set_state(self, state: int, error: common_pb2.ErrorInfo | None = None) -> None:
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
            if not self._data_finished and not self._stopped:
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
        shuffle_ctx = TaskShuffleContext(tdd.job_id, self.name, tdd.attempt_id, self.wake)
        writers = []
        for deployment in tdd.partitions:
            writer = self._shuffle.create_result_partition_writer(shuffle_ctx, deployment)
            self._writers.append(writer)
            key = cloudpickle.loads(deployment.key_selector) if deployment.key_selector else None
            writers.append(RecordWriter(writer, deployment.partitioner, key,
                                        deployment.max_parallelism, tdd.subtask_index,
                                        deployment.side_output))
        self._record_writers = writers
        channels = 0
        for deployment in tdd.input_gates:
            gate = self._shuffle.create_input_gate(shuffle_ctx, deployment)
            self._gates.append(gate)
            self._gate_inputs.append(deployment.input_index)
            self._channel_offsets.append(channels)
            channels += len(deployment.channels)
            gate.request_partitions()
        self._valve = StatusWatermarkValve(channels)
        operators = cloudpickle.loads(tdd.chain)
        job_config = self.configuration.merged(dict(tdd.config))
        self.metrics = (self._user_metrics or MetricRegistry()).scope(
            job_id=tdd.job_id, task=tdd.task_name, subtask_index=str(tdd.subtask_index))
        ctx = OperatorContext(
            task_name=tdd.task_name, subtask_index=tdd.subtask_index,
            parallelism=tdd.parallelism, max_parallelism=tdd.max_parallelism,
            attempt_number=tdd.attempt_number, job_id=tdd.job_id, config=dict(tdd.config),
            services={COLLECT_SERVICE: self._push_collect, MAILBOX_SERVICE: self.mailbox.put},
            configuration=job_config, processing_time=self.processing_time,
            metrics=self.metrics)
        self._chain = OperatorChain(operators, ctx, writers, self.counters)
        uids = list(tdd.operator_uids)
        if tdd.source:
            self._source_uid = uids.pop(0) if uids else "source"
        for operator, uid in zip(operators, uids, strict=False):
            operator.uid = operator.uid or uid or None
        if checkpoint_options.checkpointing_enabled(job_config):
            self._setup_checkpointing(job_config, channels)
        restore_started = time.monotonic()
        restore = TaskStateRestore(tdd.restore, RestoreStorage(
            self._checkpoint_storage(), self._local_state_root, job_config)) \
            if tdd.HasField("restore") else None
        for operator in operators:
            operator.initialize_state(restore.context(operator.uid or operator.name)
                                      if restore is not None else StateContext())
        if tdd.source:
            source = cloudpickle.loads(tdd.source)
            self._reader = source.create_reader(ReaderContext(
                tdd.subtask_index, tdd.parallelism,
                job_config.get(options.BATCH_SIZE), dict(tdd.config)))
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

    def _setup_checkpointing(self, config: Configuration, channels: int) -> None:
        if self._upload_pool is None:
            msg = "checkpointing needs the TaskExecutor's upload pool"
            raise ConfigError(msg)
        self.checkpointing = SubtaskCheckpointing(
            job_id=self.job_id, attempt_id=self.attempt_id,
            owner=f"{self.tdd.vertex_id}-{self.tdd.subtask_index}", writers=self._writers,
            partitioners=[p.partitioner for p in self.tdd.partitions],
            storage=self._checkpoint_storage, pool=self._upload_pool,
            responder=self._gateway, clock_ms=wall_clock_ms,
            local_root=self._local_state_root, savepoint_storage=self._savepoint_storage,
            gate_channels=[len(d.channels) for d in self.tdd.input_gates])
        if channels:
            at_least_once = config.get(checkpoint_options.CHECKPOINTING_MODE) == "AT_LEAST_ONCE"
            aligned = [offset + c for offset, d in zip(self._channel_offsets,
                                                       self.tdd.input_gates, strict=True)
                       if d.partitioner in ALIGNED_PARTITIONERS for c in range(len(d.channels))]
            self._handler = BarrierHandler(channels, wall_clock_ms, at_least_once, aligned)

    def _checkpoint_storage(self) -> CheckpointStorage:
        if self._storage is None:
            config = self.configuration.merged(dict(self.tdd.config))
            directory = config.get(checkpoint_options.CHECKPOINTS_DIR)
            if not directory:
                msg = ("checkpointing is on but state.checkpoints.dir is not set: set it to "
                       "a file:// path or s3://bucket/prefix")
                raise ConfigError(msg)
            self._storage = create_storage(directory, config)
        return self._storage

    def _savepoint_storage(self, location: str) -> CheckpointStorage:
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
        for channel, batches in sorted(state.inputs.items()):
            self._replay.extend((channel, elements) for elements in batches)
        log.info("task %s restored %d output and %d input buffers of in-flight data",
                 self.name, sum(map(len, state.outputs.values())), len(self._replay))

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
            for channel, batches in sorted(state.inputs.items()):
                gate = _gate_of(channel, gate_channels)
                for elements in batches:
                    mine = self._my_share(elements, gate, old_index, selectors)
                    if mine is not None and len(mine):
                        self._replay.append((channel, mine))
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
        self._gateway.push_collect(self.tdd.job_id, self.tdd.subtask_index, self.attempt_id,
                                   data, end, self._cancelled)

    # -- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        counters = self.counters
        wakeup = self.mailbox.wakeup
        while True:
            wakeup.clear()
            for mail in self.mailbox.drain():
                mail()
            self._check_cancelled()
            if self._stop_savepoint is None:
                self.processing_time.fire_due()
            self._flush_if_due()
            for gate in self._gates:
                gate.maintain()
            if self._handler is not None:
                self._execute(self._handler.on_tick())
                if self._captures:
                    self._check_captures()
            if self.checkpointing is not None and self.checkpointing.has_pending_outputs:
                self.checkpointing.maintain()
            if not all(w.is_available() for w in self._writers):
                started = time.monotonic()
                wakeup.wait(self._wait_timeout())
                counters.backpressured_s += time.monotonic() - started
                continue
            started = time.monotonic()
            status = self._process_input()
            if status == "end":
                return
            if status == "more":
                counters.busy_s += time.monotonic() - started
                continue
            waited = time.monotonic()
            wakeup.wait(self._wait_timeout())
            counters.idle_s += time.monotonic() - waited

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
        for gate in self._gates:
            next_retry = getattr(gate, "next_retry", lambda: None)()
            if next_retry is not None:
                timeout = min(timeout, max(0.001, next_retry - time.monotonic()))
        if self._handler is not None:
            due_ms = self._handler.next_timeout_ms()
            if due_ms is not None:
                timeout = min(timeout, max(0.001, (due_ms - wall_clock_ms()) / 1000))
        if (self.checkpointing is not None and self.checkpointing.has_pending_outputs) \
                or self._captures:
            timeout = min(timeout, _OUTPUT_CHECK_S)
        return timeout

    def _flush_if_due(self) -> None:
        for writer in self._writers:
            age = writer.oldest_pending_age()
            if age is not None and age >= self._buffer_timeout:
                writer.flush_all()

    def _process_input(self) -> str:
        """One unit of work: 'more' if something was processed, 'nothing', or 'end'."""
        assert self._chain is not None
        if self._stop_savepoint is not None:
            return "end" if self._stopped else "nothing"
        if self._replay:
            channel, elements = self._replay.popleft()
            self._chain.process(elements, self._input_of(channel))
            return "more"
        if self._reader is not None:
            return self._process_source()
        if not self._gates:
            return self._end_or_wait()
        all_finished = True
        for index, gate in enumerate(self._gates):
            if gate.is_finished():
                continue
            all_finished = False
            event = gate.poll_next()
            if event is None:
                continue
            channel = self._channel_offsets[index] + event.channel
            if event.elements:
                if self._handler is not None:
                    self._on_data(channel, event.elements, event.size)
                input_index = self._gate_inputs[index]
                for elements in event.elements:
                    self._chain.process(elements, input_index)
            elif event.event is not None:
                self._on_event(channel, event)
            elif event.end_of_partition:
                self._on_end_of_data(channel)
                if self._handler is not None:
                    self._execute(self._handler.on_end_of_partition(channel))
            return "more"
        if all_finished:
            return self._end_or_wait()
        return "nothing"

    def _input_of(self, channel: int) -> int:
        """The head operator's input that task-wide ``channel`` feeds."""
        gate = bisect.bisect_right(self._channel_offsets, channel) - 1
        return self._gate_inputs[gate] if gate >= 0 else 0

    def _end_or_wait(self) -> str:
        """Every input ended: end now, or once the final checkpoint completed."""
        if not self._data_finished:
            self._finish_operators()
        if self.checkpointing is None or self._final_checkpoint_done:
            return "end"
        return "nothing"

    def _on_data(self, channel: int, batches: list[Elements], size: int) -> None:
        assert self._handler is not None and self.checkpointing is not None
        for action in self._handler.on_data(channel, size):
            if isinstance(action, PersistData):
                for elements in batches:
                    self.checkpointing.persist_input(action.checkpoint_id, channel, elements)
            else:
                self._execute((action,))

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
            if self._handler is not None:
                barrier = CheckpointBarrier.from_event(event)
                self._execute(self._handler.on_barrier(channel, barrier, item.priority,
                                                       item.overtaken is not None))
                if item.overtaken is not None:
                    self._captures.append((barrier.checkpoint_id, channel, item.overtaken))
                    self._check_captures()
        elif event.type == END_OF_DATA_EVENT:
            self._on_end_of_data(channel)

    def _on_end_of_data(self, channel: int) -> None:
        """``channel``'s producer finished its data (end of data, or end of partition)."""
        if channel in self._data_ended:
            return
        self._data_ended.add(channel)
        self._advance_watermark(self._valve.channel_finished(channel))
        if len(self._data_ended) == self._valve.num_channels and not self._data_finished \
                and self.checkpointing is not None:
            self._finish_operators()

    def _finish_operators(self, report: bool = True) -> None:
        """End of input: event time ends, operators emit what they hold, and (with
        checkpointing) consumers learn that no more data follows (``report``: a source
        tells the JobMaster, which takes the final checkpoint)."""
        assert self._chain is not None
        self._data_finished = True
        # End of input is the end of event time: every event-time timer fires, here and
        # (through the writers) downstream, before operators flush what they hold.
        self._advance_watermark(MAX_WATERMARK)
        self._chain.finish()
        if self.checkpointing is not None:
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
                self._chain.process(elements)
                return "more"
        if self._no_more_splits:
            return self._end_or_wait()
        if not self._split_request_in_flight and time.monotonic() >= self._next_split_request:
            self._split_request_in_flight = True
            passed = self.checkpointing.last_checkpoint_id if self.checkpointing else 0
            self._gateway.request_splits(self.tdd, self._on_split_response, passed)
        return "nothing"

    def _on_split_response(self, response: Any, error: BaseException | None) -> None:
        """Called on an RPC thread: hand the answer to the task thread as a mail."""
        def mail() -> None:
            self._split_request_in_flight = False
            if error is not None:
                raise error
            assert self._reader is not None
            splits = [cloudpickle.loads(s) for s in response.splits]
            if splits:
                self._reader.add_splits(splits)
            if response.no_more_splits:
                self._no_more_splits = True
            if response.retry_after_ms:
                self._next_split_request = time.monotonic() + response.retry_after_ms / 1000
            # Triggers that came while the answer was on its way: the splits it brought
            # were assigned before the enumerator's snapshot, so they belong to the reader.
            deferred, self._deferred_triggers = self._deferred_triggers, []
            for barrier in deferred:
                self._on_trigger(barrier)

        with contextlib.suppress(RuntimeError):
            self.mailbox.put(mail)

    # -- checkpoints (task thread) ----------------------------------------------------------

    def _on_trigger(self, barrier: CheckpointBarrier) -> None:
        if self.checkpointing is None:
            self._gateway.decline_checkpoint(
                self.job_id, self.attempt_id, barrier.checkpoint_id,
                checkpoint_pb2.CHECKPOINT_DECLINED_TASK_NOT_READY,
                "checkpointing is off for this task")
            return
        if self._reader is not None and self._split_request_in_flight:
            self._deferred_triggers.append(barrier)
            return
        if barrier.options.drain and not self._data_finished:
            # stop --drain: the source ends here; event time advances to the end and the
            # operators flush, before the savepoint's barrier (the final checkpoint).
            self._finish_operators(report=False)
        # A source's start delay: from the trigger to its mail running on this thread.
        delay_ms = max(0, wall_clock_ms() - barrier.timestamp_ms)
        if self._take_snapshot(barrier, unaligned=barrier.options.unaligned,
                               start_delay_ms=delay_ms):
            self.checkpointing.input_complete(barrier.checkpoint_id)

    def _take_snapshot(self, barrier: CheckpointBarrier, unaligned: bool,
                       alignment_ms: int = 0, start_delay_ms: int = 0,
                       processed_bytes: int = 0) -> bool:
        assert self.checkpointing is not None and self._chain is not None
        participants: dict[str, Any] = {}
        if self._reader is not None:
            participants[self._source_uid] = _ReaderParticipant(self._reader)
        for operator in self._chain.operators:
            participants[operator.uid or operator.name] = operator
        taken = self.checkpointing.take_snapshot(
            barrier, participants, unaligned=unaligned, ended=self._data_finished,
            alignment_ms=alignment_ms, start_delay_ms=start_delay_ms,
            processed_bytes=processed_bytes)
        if taken and self._data_finished:
            self._finish_checkpoints.add(barrier.checkpoint_id)
        elif taken and barrier.options.terminate:
            self._stop_savepoint = barrier.checkpoint_id
        self.counters.checkpoint_alignment_ms = alignment_ms
        self.counters.checkpoint_start_delay_ms = start_delay_ms
        return taken

    def _execute(self, actions: Sequence[Action]) -> None:
        """Carry out what the barrier handler decided."""
        assert self.checkpointing is not None
        for action in actions:
            if isinstance(action, Block):
                gate, channel = self._gate_channel(action.channel)
                gate.block_consumption(channel)
            elif isinstance(action, Resume):
                for task_channel in action.channels:
                    gate, channel = self._gate_channel(task_channel)
                    gate.resume_consumption(channel)
            elif isinstance(action, TakeSnapshot):
                self._take_snapshot(action.barrier, action.unaligned, action.alignment_ms,
                                    action.start_delay_ms, action.processed_bytes)
            elif isinstance(action, PrioritizeInputBarriers):
                event = action.barrier.to_event()
                for gate, deployment in zip(self._gates, self.tdd.input_gates, strict=True):
                    if deployment.partitioner not in ALIGNED_PARTITIONERS:
                        gate.prioritize_event(event)
            elif isinstance(action, InputStateComplete):
                self.checkpointing.input_complete(action.checkpoint_id)
            elif isinstance(action, AbortCheckpoint):
                self.checkpointing.abort(action.checkpoint_id, action.reason, action.message)

    def _check_captures(self) -> None:
        """Persist the overtaken data channels finished capturing (unaligned)."""
        assert self._handler is not None and self.checkpointing is not None
        waiting = []
        for checkpoint_id, channel, data in self._captures:
            # Persisted only once the snapshot is taken: before, the checkpoint waits for
            # its forced-aligned channels and nothing of it is recorded yet.
            if not data.complete or not self._handler.snapshot_taken(checkpoint_id):
                if self._handler.current_checkpoint_id == checkpoint_id:
                    waiting.append((checkpoint_id, channel, data))
                continue
            for elements in data.batches():
                self.checkpointing.persist_input(checkpoint_id, channel, elements)
            self._execute(self._handler.on_overtaken_captured(checkpoint_id, channel))
        self._captures = waiting

    def _gate_channel(self, task_channel: int) -> tuple[InputGate, int]:
        index = max(i for i, offset in enumerate(self._channel_offsets)
                    if offset <= task_channel)
        return self._gates[index], task_channel - self._channel_offsets[index]

    def _on_notify(self, checkpoint_id: int, complete: bool) -> None:
        if self._chain is None or self.checkpointing is None:
            return
        if complete:
            self.checkpointing.completed(checkpoint_id)
            for operator in self._chain.operators:
                operator.notify_checkpoint_complete(checkpoint_id)
            if any(n <= checkpoint_id for n in self._finish_checkpoints):
                self._final_checkpoint_done = True
                self.wake()
            if self._stop_savepoint is not None and self._stop_savepoint <= checkpoint_id:
                self._stopped = True
                log.info("task %s stops with savepoint %d", self.name, self._stop_savepoint)
        else:
            for operator in self._chain.operators:
                operator.notify_checkpoint_aborted(checkpoint_id)
            if self._handler is not None:
                self._execute(self._handler.on_abort(checkpoint_id))
            self.checkpointing.abort(checkpoint_id)
            self._finish_checkpoints.discard(checkpoint_id)
            if self._stop_savepoint == checkpoint_id:
                self._stop_savepoint = None  # the stop failed: the job goes on

    # -- cleanup ----------------------------------------------------------------------------

    def _cleanup(self, final: int, error: common_pb2.ErrorInfo | None) -> None:
        if self.checkpointing is not None:
            self.checkpointing.close()
        if self._chain is not None:
            for close_error in self._chain.close():
                log.warning("task %s: closing an operator failed: %s", self.name, close_error)
        if self.metrics is not None:
            self.metrics.close()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        for gate in self._gates:
            with contextlib.suppress(Exception):
                gate.close()
        if final != common_pb2.FINISHED:
            cause = UserError(error.message if error else "task was cancelled")
            for writer in self._writers:
                with contextlib.suppress(Exception):
                    writer.fail(cause)
                    writer.release()


def _gate_of(channel: int, gate_channels: list[int]) -> int:
    """The input gate of task-wide channel number ``channel`` (0 without gate sizes)."""
    for gate, count in enumerate(gate_channels):
        if channel < count:
            return gate
        channel -= count
    return 0
