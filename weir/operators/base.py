"""What operators share on top of the task's contract (``weir.taskexecutor.operator``):
the lifecycle of user functions, and keyed state with timers (:class:`KeyedOperator`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from weir.core import options
from weir.core.records import NO_TIMESTAMP, Elements
from weir.core.types import TypeInformation
from weir.datastream.functions import Function, RuntimeContext, _SideOutputs
from weir.datastream.output_tag import OutputTag
from weir.datastream.timerservice import OperatorClock, TimerService, non_keyed_timer_service
from weir.metrics.metricbase import task_metric_group
from weir.state.restore import restore
from weir.state.timers import InternalTimerService
from weir.taskexecutor.operator import (
    CONTINUATION_SERVICE,
    OperatorContext,
    Output,
    StreamOperator,
)

#: Largest batch a per-record operator processes at once.
PER_RECORD_SLICE = 8192


if TYPE_CHECKING:
    from weir.state.backend import KeyedStateBackend
    from weir.state.timers import Timer


def emit_with_side_outputs(output: Output, out: list[Any], stamps: Sequence[int] | None,
                           contexts: Sequence[_SideOutputs] = (),
                           output_type: TypeInformation | None = None) -> None:
    """Emit ``out`` (records a function returned, stamped with ``stamps``): the
    ``(OutputTag, value)`` pairs among them, and what ``ctx.output`` collected in the
    ``contexts``, to their side outputs, the rest to the main output."""
    sides: dict[str, tuple[list[Any], list[int]]] = {}
    if any(type(x) is tuple and len(x) == 2 and isinstance(x[0], OutputTag) for x in out):
        main: list[Any] = []
        main_stamps: list[int] = []
        for index, record in enumerate(out):
            stamp = stamps[index] if stamps is not None else NO_TIMESTAMP
            if type(record) is tuple and len(record) == 2 and isinstance(record[0], OutputTag):
                records, side_stamps = sides.setdefault(record[0].tag_id, ([], []))
                records.append(record[1])
                side_stamps.append(stamp)
            else:
                main.append(record)
                main_stamps.append(stamp)
        out, stamps = main, (main_stamps if stamps is not None else None)
    for ctx in contexts:
        collected = getattr(ctx, "_side", None)  # set by the first ctx.output
        if collected:
            for tag, value, stamp in collected:
                records, side_stamps = sides.setdefault(tag, ([], []))
                records.append(value)
                side_stamps.append(NO_TIMESTAMP if stamp is None else stamp)
            collected.clear()
    if out:
        timestamps = None if stamps is None else np.array(stamps, dtype=np.int64)
        output.emit(Elements.from_records(out, output_type, timestamps))
    for tag, (records, side_stamps) in sides.items():
        timestamps = np.array(side_stamps, dtype=np.int64)
        if (timestamps == NO_TIMESTAMP).all():
            timestamps = None
        output.emit_side(tag, Elements.from_records(records, None, timestamps))


def runtime_context(ctx: OperatorContext, state_store: KeyedStateBackend | None = None
                    ) -> RuntimeContext:
    """The RuntimeContext user functions of an operator running in ``ctx`` see (the job's
    global parameters travel in its configuration)."""
    parameters = options.job_parameters(ctx.get_configuration())
    metric_group = task_metric_group(ctx.metrics, ctx.task_name, ctx.subtask_index)
    return RuntimeContext(ctx.task_name, ctx.subtask_index, ctx.parallelism,
                          ctx.max_parallelism, ctx.attempt_number, state_store, parameters,
                          metric_group)


def open_functions(operator: StreamOperator, state_store: KeyedStateBackend | None = None
                   ) -> None:
    """Call ``open`` of the operator's rich functions (after ``setup``)."""
    assert operator.ctx is not None
    for fn in operator.functions():
        if isinstance(fn, Function):
            fn.open(runtime_context(operator.ctx, state_store))


def close_functions(operator: StreamOperator) -> None:
    """Call ``close`` of the operator's rich functions."""
    for fn in operator.functions():
        if isinstance(fn, Function):
            fn.close()


class KeyedOperator(StreamOperator):
    """An operator on a keyed stream: keyed state in ``self.backend`` and, if it asks for
    them, event-time and processing-time timers in ``self.timers`` (stored in the same
    backend). Subclasses call :meth:`open_keyed` (then :meth:`open_timers`) from ``open``;
    closing, and firing
    event-time timers as the watermark advances, are done here.
    """

    backend: KeyedStateBackend | None = None
    timers: InternalTimerService | None = None
    #: The clocks of a function on a non-keyed stream (see :meth:`clock_service`).
    clock: OperatorClock | None = None
    #: Processing-time windows of a bounded input are evaluated at its end rather than
    #: lost with the task (Flink's BATCH-mode behaviour); a keyed process function's
    #: processing-time timers are not.
    fire_processing_time_at_end = False

    def final_values_only(self) -> bool:
        """BATCH mode (``execution.runtime-mode``): a keyed aggregation emits each key's
        final value at the end of its input, not an update per record (as Flink does)."""
        assert self.ctx is not None
        return str(self.ctx.get_configuration().get(options.RUNTIME_MODE)).upper() == "BATCH"

    def final_values(self, state: str, value: Callable[[], Any]) -> list[Any]:
        """What ``value()`` (read with the current key set) gives for every key that has
        ``state`` in this subtask: the final values a BATCH aggregation emits."""
        assert self.backend is not None
        out = []
        for key in list(self.backend.keys(state)):
            self.backend.set_current_key(key)
            out.append(value())
        return out

    def open_keyed(self) -> KeyedStateBackend:
        """Create the backend over this subtask's key groups, restored from the state
        context's keyed handles when the task restarted from a checkpoint."""
        assert self.ctx is not None
        backend = self.ctx.create_keyed_state_backend(self.uid or self.name)
        backend.owner = self.uid or self.name
        self.backend = backend
        context = self.state_context
        if context is not None and context.keyed_handles:
            assert context.storage is not None
            restore(backend, context.keyed_handles, context.storage,
                    build_on=context.owned)
        return backend

    def open_timers(self, name: str) -> InternalTimerService:
        """Create the timer service ``name`` in the backend :meth:`open_keyed` created (call
        that first), with its restored timers scheduled when the task restarted from a
        checkpoint."""
        assert self.ctx is not None and self.backend is not None
        timers = InternalTimerService(name, self.backend, self.ctx.processing_time, self)
        self.timers = timers
        context = self.state_context
        if context is not None and context.is_restored:
            timers.restore()
        return timers

    def keyed_state_backend(self) -> KeyedStateBackend | None:
        return self.backend

    def clock_service(self) -> TimerService:
        """The timer service of a non-keyed function's context: this subtask's processing
        time and the last watermark this operator received; setting timers is refused."""
        assert self.ctx is not None
        self.clock = OperatorClock(self.ctx.processing_time.current_time_ms)
        return non_keyed_timer_service(self.clock)

    def on_event_time(self, timer: Timer) -> None:
        """An event-time timer fired; the backend's current key is the timer's."""

    def on_processing_time(self, timer: Timer) -> None:
        """A processing-time timer fired; the backend's current key is the timer's."""

    def after_timers(self) -> None:
        """Timers fired (at a watermark or a wall-clock wake-up): emit what they produced
        as one batch."""

    def process_watermark(self, watermark: int) -> None:
        """Fire the event-time timers ``watermark`` completes, then pass it on. Many timers
        fire over several turns of the task (each within its time slice, see
        ``CONTINUATION_SERVICE``): the watermark goes on once the last one fired, and no
        record after it is processed meanwhile."""
        if self.clock is not None:
            self.clock.current_watermark = watermark
        if self.timers is not None:
            defer = self.ctx.services.get(CONTINUATION_SERVICE) if self.ctx else None
            if defer is None:
                self.timers.advance_watermark(watermark)
            elif not self.timers.advance_watermark_in_slice(watermark):
                self.after_timers()
                defer(lambda: self.process_watermark(watermark))
                return
            self.after_timers()
        super().process_watermark(watermark)

    def finish(self) -> None:
        if self.fire_processing_time_at_end and self.timers is not None:
            from weir.core.records import MAX_WATERMARK

            self.timers.fire_processing_time(MAX_WATERMARK)
            self.after_timers()

    def close(self) -> None:
        try:
            close_functions(self)
        finally:
            if self.timers is not None:
                self.timers.close()
            if self.backend is not None:
                self.backend.dispose()
