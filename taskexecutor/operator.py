"""The contract between a task and the operators of its chain (Flink's ``StreamOperator``).

The task (``weir.taskexecutor.task``) drives operators only through this module; the
operators themselves (``weir.operators``) are written against it and live a floor above.

Lifecycle, all on the task's mailbox thread: ``setup`` (once, wiring), ``open`` (once,
before the first batch), ``process`` (per batch, any number of times), ``finish`` (once,
at end of input: emit what is pending), ``close`` (once, last; also after a failure, so it
must tolerate a partly opened operator).

Event time flows through the same chain: ``process_watermark`` (the task's combined
watermark advanced) and ``process_watermark_status`` (all inputs went idle, or one came
back), which by default pass straight on to the next operator.

Example:
    >>> class Doubler(StreamOperator):
    ...     def process(self, elements, input_index=0):
    ...         self.output.emit([2 * x for x in elements])
    >>> class Printer(Output):
    ...     def emit(self, elements): print(elements)
    ...     def emit_watermark(self, watermark): pass
    ...     def emit_watermark_status(self, idle): pass
    >>> op = Doubler("double")
    >>> op.setup(OperatorContext("t", 0, 1, 128), Printer())
    >>> op.process([1, 2])
    [2, 4]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from weir.core.config import Configuration
from weir.core.processing_time import ProcessingTimeService
from weir.core.records import Elements

if TYPE_CHECKING:
    from weir.state.backend import KeyedStateBackend

#: Service key under which a task offers the collect channel to the JobMaster.
COLLECT_SERVICE = "collect"


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
        from weir.state.factory import create_keyed_state_backend
        from weir.state.key_groups import key_group_range_for_operator

        conf = self.get_configuration()
        key_groups = key_group_range_for_operator(self.max_parallelism, self.parallelism,
                                                  self.subtask_index)
        return create_keyed_state_backend(conf, self.max_parallelism, key_groups,
                                          f"{self.task_name}-{self.subtask_index}-{operator}")


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
