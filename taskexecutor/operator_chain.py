"""The operators of one task, wired head to tail, with the tail feeding the record writers."""

from __future__ import annotations

from weir.core.records import Elements
from weir.taskexecutor.operator import OperatorContext, Output, StreamOperator
from weir.taskexecutor.record_writer import RecordWriter


class _ChainedOutput(Output):
    """The output of an operator that is not the chain's tail: into the next operator.

    Such an operator's side outputs are read by nobody: a side output belongs to the
    operator that emits it, and the job graph never chains an operator onto one whose side
    output is read (the side-output edge is a second consumer), so that operator is always
    its chain's tail. Its side records are dropped here, as an unread side output is in
    Flink, instead of reaching the task's side-output partitions under the same tag as the
    tail's (two process functions of one chain may emit to one ``OutputTag``).
    """

    def __init__(self, operator: StreamOperator) -> None:
        self._operator = operator
        self._slice = operator.max_batch_records

    def emit_watermark(self, watermark: int) -> None:
        self._operator.process_watermark(watermark)

    def emit_watermark_status(self, idle: bool) -> None:
        self._operator.process_watermark_status(idle)

    def emit(self, elements: Elements, input_index: int = 0) -> None:
        if self._slice is not None and len(elements) > self._slice:
            for piece in elements.slices(self._slice):
                self._operator.process(piece, input_index)
        else:
            self._operator.process(elements, input_index)


class _WritersOutput(Output):
    def __init__(self, writers: list[RecordWriter], counters: TaskCounters) -> None:
        self._writers = writers
        self._main = [w for w in writers if not w.side_output]
        self._counters = counters

    def emit(self, elements: Elements) -> None:
        self._counters.records_out += len(elements)
        for writer in self._main:
            writer.emit(elements)

    def emit_side(self, tag: str, elements: Elements) -> None:
        for writer in self._writers:
            if writer.side_output == tag:
                self._counters.records_out += len(elements)
                writer.emit(elements)

    def emit_watermark(self, watermark: int) -> None:
        self._counters.output_watermark = watermark
        for writer in self._writers:
            writer.broadcast_watermark(watermark)

    def emit_watermark_status(self, idle: bool) -> None:
        for writer in self._writers:
            writer.broadcast_watermark_status(idle)


class TaskCounters:
    """Per-task counters, written by the task thread and read by metric collectors."""

    def __init__(self) -> None:
        self.records_in = 0
        self.records_out = 0
        self.busy_s = 0.0
        self.idle_s = 0.0
        self.backpressured_s = 0.0
        #: The last watermark the task sent downstream (Flink's currentOutputWatermark).
        self.output_watermark: int | None = None
        #: The task's combined input watermark (Flink's currentInputWatermark).
        self.input_watermark: int | None = None
        #: Of the newest checkpoint: first barrier to snapshot, and trigger to first barrier.
        self.checkpoint_alignment_ms = 0
        self.checkpoint_start_delay_ms = 0


class OperatorChain:
    """Owns the chain's operators; every method runs on the task thread."""

    def __init__(self, operators: list[StreamOperator], ctx: OperatorContext,
                 writers: list[RecordWriter], counters: TaskCounters) -> None:
        self.operators = operators
        self._counters = counters
        writers_output = _WritersOutput(writers, counters)
        tail: Output = writers_output
        self._head_output = tail
        # Only the tail writes to the task's partitions, its side outputs included.
        for operator in reversed(operators):
            operator.setup(ctx, tail)
            tail = _ChainedOutput(operator)
        self._head: _ChainedOutput | None = _ChainedOutput(operators[0]) if operators else None
        self._opened: list[StreamOperator] = []

    def open(self) -> None:
        # Tail first, so an operator never emits into one that is not open yet.
        for operator in reversed(self.operators):
            operator.open()
            self._opened.append(operator)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        self._counters.records_in += len(elements)
        if self._head is None:
            self._head_output.emit(elements)
        else:
            self._head.emit(elements, input_index)

    @property
    def watermark(self) -> int | None:
        """The last watermark given to the chain."""
        return self._counters.input_watermark

    def process_watermark(self, watermark: int) -> None:
        self._counters.input_watermark = watermark
        if self._head is None:
            self._head_output.emit_watermark(watermark)
        else:
            self._head.emit_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        if self._head is None:
            self._head_output.emit_watermark_status(idle)
        else:
            self._head.emit_watermark_status(idle)

    def work_while_idle(self) -> bool:
        """Deferred work of the operators' keyed backends (see
        KeyedStateBackend.work_while_idle); True when some is left."""
        left = False
        for operator in self._opened:
            backend = operator.keyed_state_backend()
            if backend is not None and backend.work_while_idle():
                left = True
        return left

    def finish(self) -> None:
        for operator in self.operators:
            operator.finish()

    def close(self) -> list[BaseException]:
        """Close every opened operator; returns what closing raised instead of stopping."""
        errors: list[BaseException] = []
        for operator in self._opened:
            try:
                operator.close()
            except Exception as err:  # one failing close must not skip the others
                errors.append(err)
        self._opened.clear()
        return errors

