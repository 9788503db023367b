"""A Task: one subtask of a job vertex, run by its own mailbox thread.

The mailbox thread owns the task's operators, reader and writers. Other threads (RPC,
network, timers) never touch them: they put a *mail* (a callable) in the bounded mailbox or
set the wake-up flag. The loop runs mails first, then — while output has room — processes
one unit of input; when there is nothing to do it sleeps until woken or until the next
buffer-timeout flush is due. Checkpoint triggers and barriers will be mails too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import cloudpickle

from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import UserError
from weir.core.processing_time import ProcessingTimeService
from weir.core.source import ReaderContext, SourceReader
from weir.core.watermarks import MAX_WATERMARK, decode_watermark
from weir.proto import common_pb2, jobgraph_pb2
from weir.shuffle.api import (
    InputGate,
    ResultPartitionWriter,
    ShuffleEnvironment,
    TaskShuffleContext,
)
from weir.taskexecutor.operator import COLLECT_SERVICE, OperatorContext
from weir.taskexecutor.operator_chain import OperatorChain, TaskCounters
from weir.taskexecutor.record_writer import WATERMARK_EVENT, WATERMARK_STATUS_EVENT, RecordWriter
from weir.taskexecutor.watermark_valve import StatusWatermarkValve

log = logging.getLogger(__name__)

MAILBOX_CAPACITY = 1024
_MAX_IDLE_WAIT_S = 0.5


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


class Task:
    """Runs one subtask. ``start`` launches the thread; ``cancel`` may be called from any
    thread; ``on_state`` is called from the task thread on every state change."""

    def __init__(self, tdd: jobgraph_pb2.TaskDeploymentDescriptor, shuffle: ShuffleEnvironment,
                 gateway: Any, configuration: Configuration,
                 on_state: Callable[[Task, int, common_pb2.ErrorInfo | None], None]) -> None:
        self.tdd = tdd
        self.job_id = tdd.job_id
        self.attempt_id = tdd.attempt_id
        self.name = f"{tdd.task_name} ({tdd.subtask_index + 1}/{tdd.parallelism})"
        self.configuration = configuration
        self._shuffle = shuffle
        self._gateway = gateway
        self._on_state = on_state
        self.state = common_pb2.CREATED
        self.counters = TaskCounters()
        self.mailbox = Mailbox()
        self._cancelled = threading.Event()
        self._writers: list[ResultPartitionWriter] = []
        self._gates: list[InputGate] = []
        #: Index of each gate's first channel in the task-wide channel numbering.
        self._channel_offsets: list[int] = []
        self._valve = StatusWatermarkValve(0)
        self.processing_time = ProcessingTimeService()
        self._chain: OperatorChain | None = None
        self._reader: SourceReader | None = None
        self._buffer_timeout = configuration.get(options.BUFFER_TIMEOUT)
        self._thread = threading.Thread(target=self._run, name=f"task {self.name}", daemon=True)
        # Source bookkeeping.
        self._no_more_splits = False
        self._split_request_in_flight = False
        self._next_split_request = 0.0

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
            assert self._chain is not None
            # End of input is the end of event time: every event-time timer fires, here and
            # (through the writers) downstream, before operators flush what they hold.
            self._advance_watermark(MAX_WATERMARK)
            self._chain.finish()
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
                log.warning("task %s failed: %s", self.name, error.message)
        finally:
            self._cleanup(final, error)
        self._set_state(final, error)

    def _error_info(self, err: BaseException) -> common_pb2.ErrorInfo:
        from weir.core.errors import PartitionNotFoundError, RemoteTransportError

        reason = common_pb2.USER_CODE_ERROR
        if isinstance(err, PartitionNotFoundError):
            reason = common_pb2.PARTITION_NOT_FOUND
        elif isinstance(err, RemoteTransportError):
            reason = common_pb2.REMOTE_TRANSPORT
        return common_pb2.ErrorInfo(
            reason=reason, message=f"{type(err).__name__}: {err}",
            exception_class=f"{type(err).__module__}.{type(err).__qualname__}",
            traceback="".join(traceback.format_exception(err))[-8000:], task=self.name)

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise TaskCancelledError

    def _setup(self) -> None:
        tdd = self.tdd
        shuffle_ctx = TaskShuffleContext(tdd.job_id, self.name, tdd.attempt_id, self.wake)
        writers = []
        for deployment in tdd.partitions:
            writer = self._shuffle.create_result_partition_writer(shuffle_ctx, deployment)
            self._writers.append(writer)
            key = cloudpickle.loads(deployment.key_selector) if deployment.key_selector else None
            writers.append(RecordWriter(writer, deployment.partitioner, key,
                                        deployment.max_parallelism, tdd.subtask_index))
        channels = 0
        for deployment in tdd.input_gates:
            gate = self._shuffle.create_input_gate(shuffle_ctx, deployment)
            self._gates.append(gate)
            self._channel_offsets.append(channels)
            channels += len(deployment.channels)
            gate.request_partitions()
        self._valve = StatusWatermarkValve(channels)
        operators = cloudpickle.loads(tdd.chain)
        ctx = OperatorContext(
            task_name=tdd.task_name, subtask_index=tdd.subtask_index,
            parallelism=tdd.parallelism, max_parallelism=tdd.max_parallelism,
            attempt_number=tdd.attempt_number, job_id=tdd.job_id, config=dict(tdd.config),
            services={COLLECT_SERVICE: self._push_collect},
            configuration=self.configuration.merged(dict(tdd.config)),
            processing_time=self.processing_time)
        self._chain = OperatorChain(operators, ctx, writers, self.counters)
        if tdd.source:
            source = cloudpickle.loads(tdd.source)
            self._reader = source.create_reader(ReaderContext(
                tdd.subtask_index, tdd.parallelism,
                self.configuration.get(options.BATCH_SIZE), dict(tdd.config)))
        self._chain.open()

    def _push_collect(self, data: bytes, end: bool) -> None:
        self._gateway.push_collect(self.tdd.job_id, self.tdd.subtask_index, self.attempt_id,
                                   data, end, self._cancelled)

    def _loop(self) -> None:
        counters = self.counters
        wakeup = self.mailbox.wakeup
        while True:
            wakeup.clear()
            for mail in self.mailbox.drain():
                mail()
            self._check_cancelled()
            self.processing_time.fire_due()
            self._flush_if_due()
            for gate in self._gates:
                gate.maintain()
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
        return timeout

    def _flush_if_due(self) -> None:
        for writer in self._writers:
            age = writer.oldest_pending_age()
            if age is not None and age >= self._buffer_timeout:
                writer.flush_all()

    def _process_input(self) -> str:
        """One unit of work: 'more' if something was processed, 'nothing', or 'end'."""
        assert self._chain is not None
        if self._reader is not None:
            return self._process_source()
        if not self._gates:
            return "end"
        all_finished = True
        for index, gate in enumerate(self._gates):
            if gate.is_finished():
                continue
            all_finished = False
            event = gate.poll_next()
            if event is None:
                continue
            if event.elements:
                for elements in event.elements:
                    self._chain.process(elements)
            elif event.event is not None:
                self._on_event(self._channel_offsets[index] + event.channel, event.event)
            elif event.end_of_partition:
                self._advance_watermark(self._valve.channel_finished(
                    self._channel_offsets[index] + event.channel))
            return "more"
        return "end" if all_finished else "nothing"

    def _on_event(self, channel: int, event: Any) -> None:
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

    def _advance_watermark(self, watermark: int | None) -> None:
        """Event time of this task moved to ``watermark`` (None: it did not move)."""
        if watermark is None or self._chain is None:
            return
        if self._chain.watermark is not None and watermark <= self._chain.watermark:
            return
        self._chain.process_watermark(watermark)

    def _process_source(self) -> str:
        assert self._reader is not None and self._chain is not None
        elements = self._reader.poll()
        if elements is not None:
            self._chain.process(elements)
            return "more"
        if self._no_more_splits:
            return "end"
        if not self._split_request_in_flight and time.monotonic() >= self._next_split_request:
            self._split_request_in_flight = True
            self._gateway.request_splits(self.tdd, self._on_split_response)
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

        with contextlib.suppress(RuntimeError):
            self.mailbox.put(mail)

    def _cleanup(self, final: int, error: common_pb2.ErrorInfo | None) -> None:
        if self._chain is not None:
            for close_error in self._chain.close():
                log.warning("task %s: closing an operator failed: %s", self.name, close_error)
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
