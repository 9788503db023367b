"""The operator contract shared by every operator in a chain.

Lifecycle, all on the task's mailbox thread: ``setup`` (once, wiring), ``open`` (once,
before the first batch), ``process`` (per batch, any number of times), ``finish`` (once,
at end of input: emit what is pending), ``close`` (once, last; also after a failure, so it
must tolerate a partly opened operator).

Event time flows through the same chain: ``process_watermark`` (the task's combined
watermark advanced) and ``process_watermark_status`` (all inputs went idle, or one came
back), which by default pass straight on to the next operator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from weir.config import Configuration
from weir.functions import Function, RuntimeContext
from weir.operators.processing_time import ProcessingTimeService
from weir.records import Elements

#: Largest batch a per-record operator processes at once.
PER_RECORD_SLICE = 8192


if TYPE_CHECKING:
    from state.backend import KeyedStateBackend
    from state.timers import InternalTimerService, Timer


class Output(ABC):
    """Where an operator sends its results: the next operator, or the task's writers."""

    @abstractmethod
    def emit(self, elements: Elements) -> None:
        """Pass a batch on. Called on the task thread; may block only in the task's writers."""

    @abstractmethod
    def emit_watermark(self, watermark: int) -> None:
        """Pass on a watermark (epoch ms): no record with a smaller timestamp follows."""

    @abstractmethod
    def emit_watermark_status(self, idle: bool) -> None:
        """Pass on that this output went idle (no watermarks for now) or is active again."""


@dataclass
class OperatorContext:
    """Where an operator instance runs."""

    task_name: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    attempt_number: int = 0
    job_id: str = ""
    config: dict[str, str] = field(default_factory=dict)
    #: Services the task offers operators (e.g. the collect-sink channel to the JobMaster).
    services: dict[str, Any] = field(default_factory=dict)
    #: The TaskExecutor's configuration with the job's on top (None: the job's alone).
    configuration: Configuration | None = None
    #: Wall-clock callbacks, run on the task thread between batches.
    processing_time: ProcessingTimeService = field(default_factory=ProcessingTimeService)

    def get_configuration(self) -> Configuration:
        return self.configuration or Configuration.from_pairs(self.config)

    def create_keyed_state_backend(self, operator: str) -> KeyedStateBackend:
        """A keyed state backend (``state.backend.type``) over this subtask's key groups."""
        from state.factory import create_keyed_state_backend
        from state.key_groups import key_group_range_for_operator

        conf = self.get_configuration()
        key_groups = key_group_range_for_operator(self.max_parallelism, self.parallelism,
                                                  self.subtask_index)
        return create_keyed_state_backend(conf, self.max_parallelism, key_groups,
                                          f"{self.task_name}-{self.subtask_index}-{operator}")

    def runtime_context(self, state_store: Any = None) -> RuntimeContext:
        return RuntimeContext(self.task_name, self.subtask_index, self.parallelism,
                              self.max_parallelism, self.attempt_number, state_store)


class StreamOperator(ABC):
    """One operator of a chain. Instances are pickled into the job graph."""

    #: Per-record operators get batches of at most this many records (the chain slices
    #: larger ones), so large source batches serve vectorised operators without turning
    #: into huge lists of Python objects. None = the whole batch (vectorised operators).
    max_batch_records: int | None = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.uid: str | None = None
        self.ctx: OperatorContext | None = None
        self.output: Output | None = None

    def setup(self, ctx: OperatorContext, output: Output) -> None:
        self.ctx = ctx
        self.output = output

    def open(self) -> None:  # noqa: B027 - optional hook
        """Prepare to process; user functions' ``open`` runs here."""

    @abstractmethod
    def process(self, elements: Elements, input_index: int = 0) -> None:
        """Process one batch and emit results through ``self.output``."""

    def process_watermark(self, watermark: int) -> None:
        """Event time reached ``watermark``: fire what it completes, then pass it on."""
        assert self.output is not None
        self.output.emit_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        """The input went idle or became active again; passed on unchanged by default."""
        assert self.output is not None
        self.output.emit_watermark_status(idle)

    def finish(self) -> None:  # noqa: B027 - optional hook
        """End of input: emit anything still held back."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; runs after finish and also after failures."""

    def functions(self) -> list[Any]:
        """User functions, for pickling checks and lifecycle calls."""
        return []

    def _open_functions(self, state_store: Any = None) -> None:
        assert self.ctx is not None
        for fn in self.functions():
            if isinstance(fn, Function):
                fn.open(self.ctx.runtime_context(state_store))

    def _close_functions(self) -> None:
        for fn in self.functions():
            if isinstance(fn, Function):
                fn.close()


class KeyedOperator(StreamOperator):
    """An operator on a keyed stream: keyed state in ``self.backend`` and, if it asks for
    them, event-time and processing-time timers in ``self.timers`` (stored in the same
    backend). Subclasses call :meth:`open_keyed` from ``open``; closing, and firing
    event-time timers as the watermark advances, are done here.
    """

    backend: KeyedStateBackend | None = None
    timers: InternalTimerService | None = None
    #: Processing-time windows of a bounded input are evaluated at its end rather than
    #: lost with the task (Flink's BATCH-mode behaviour); a keyed process function's
    #: processing-time timers are not.
    fire_processing_time_at_end = False

    def open_keyed(self, timers: str | None = None) -> KeyedStateBackend:
        """Create the backend over this subtask's key groups (and a timer service named
        ``timers``, if given)."""
        assert self.ctx is not None
        from state.timers import InternalTimerService

        backend = self.ctx.create_keyed_state_backend(self.uid or self.name)
        self.backend = backend
        if timers is not None:
            self.timers = InternalTimerService(timers, backend, self.ctx.processing_time, self)
        return backend

    def on_event_time(self, timer: Timer) -> None:
        """An event-time timer fired; the backend's current key is the timer's."""

    def on_processing_time(self, timer: Timer) -> None:
        """A processing-time timer fired; the backend's current key is the timer's."""

    def after_timers(self) -> None:
        """Timers fired (at a watermark or a wall-clock wake-up): emit what they produced
        as one batch."""

    def process_watermark(self, watermark: int) -> None:
        if self.timers is not None:
            self.timers.advance_watermark(watermark)
            self.after_timers()
        super().process_watermark(watermark)

    def finish(self) -> None:
        if self.fire_processing_time_at_end and self.timers is not None:
            from weir.watermarks import MAX_WATERMARK

            self.timers.fire_processing_time(MAX_WATERMARK)
            self.after_timers()

    def close(self) -> None:
        try:
            self._close_functions()
        finally:
            if self.timers is not None:
                self.timers.close()
            if self.backend is not None:
                self.backend.dispose()
