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

Checkpoints, also on the task thread: ``initialize_state`` (once, after ``setup`` and
before ``open``, with what a restore brings), ``snapshot_state`` (at a barrier, between two
batches: cheap, returns what the task uploads off its thread), then
``notify_checkpoint_complete`` or ``notify_checkpoint_aborted``. By default an operator
checkpoints the operator state of its user functions implementing ``CheckpointedFunction``
and its keyed state backend (``keyed_state_backend()``), and notifies the functions implementing
``CheckpointListener``.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weir.checkpoint.storage import CheckpointStorageAccess
from weir.core.config import Configuration
from weir.core.ids import CheckpointId, JobId
from weir.core.processing_time import ProcessingTimeService
from weir.core.records import Elements
from weir.state.operator_state import (
    CheckpointedFunction,
    CheckpointListener,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorStateBackend,
)

if TYPE_CHECKING:
    from weir.state.backend import KeyedStateBackend
    from weir.state.handles import KeyedStateHandle
    from weir.state.snapshot import AsyncSnapshot, SnapshotLocation
    from weir.taskexecutor.user_metrics import MetricScope

#: The job id of an operator context outside a deployed task.
NO_JOB = JobId("")
#: Service key under which a task offers the collect channel to the JobMaster.
COLLECT_SERVICE = "collect"
#: Service key of ``put(mail)``: run ``mail()`` on the task thread soon (from any thread).
MAILBOX_SERVICE = "mailbox"
#: Service key of ``defer(work)`` (task thread): an operator whose work ran out of its time
#: slice (timers of a watermark) hands the rest over; the task runs ``work()`` on a later
#: turn, before it takes any more input, so records after the watermark wait for it.
CONTINUATION_SERVICE = "continuation"
#: Service key of the task's cancellation event (a ``threading.Event``): what blocks the
#: task thread outside the task's own loop (the changelog's backpressure) watches it.
CANCELLED_SERVICE = "cancelled"


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

    def emit_side(self, tag: str, elements: Elements) -> None:  # noqa: B027 - optional
        """Send a batch to the side output ``tag`` (an OutputTag's id) of the operator this
        output belongs to: to the task's partitions for that side output when the operator
        is its chain's tail (the only place a read side output can be); a side output
        nobody reads is dropped, as are those of operators inside a chain."""


@dataclass
class OperatorContext:
    """Where an operator instance runs."""

    task_name: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    attempt_number: int = 0
    job_id: JobId = NO_JOB
    config: dict[str, str] = field(default_factory=dict)
    #: Services the task offers operators (e.g. the collect-sink channel to the JobMaster).
    services: dict[str, Any] = field(default_factory=dict)
    #: The TaskExecutor's configuration with the job's on top (None: the job's alone).
    configuration: Configuration | None = None
    #: Wall-clock callbacks, run on the task thread between batches.
    processing_time: ProcessingTimeService = field(default_factory=ProcessingTimeService)
    #: Task-local recovery's directory on this TaskExecutor (None: no local copies).
    local_state_root: Path | None = None
    #: Where the task's user metrics go (``RuntimeContext.get_metrics_group()``); None:
    #: functions get metrics of their own that nothing exports.
    metrics: MetricScope | None = None

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
                                          f"{self.task_name}-{self.subtask_index}-{operator}",
                                          job_id=None if self.job_id == NO_JOB else self.job_id,
                                          local_root=self.local_state_root,
                                          cancelled=self.services.get(CANCELLED_SERVICE))


@dataclass
class StateContext:
    """What an operator's state starts from (given to ``initialize_state``)."""

    #: The checkpoint restored from; None on a fresh start.
    checkpoint_id: CheckpointId | None = None
    #: Keyed state handles of the old subtasks overlapping this subtask's key groups.
    keyed_handles: list[KeyedStateHandle] = field(default_factory=list)
    #: Operator state of every old subtask, in subtask order (None: that one had none).
    operator_state: list[bytes | None] = field(default_factory=list)
    #: Where the handles' files are.
    storage: CheckpointStorageAccess | None = None
    #: False: the snapshot is not the job's (NO_CLAIM): nothing may build on its files.
    owned: bool = True

    @property
    def is_restored(self) -> bool:
        return self.checkpoint_id is not None


@dataclass
class OperatorSnapshot:
    """The synchronous part of an operator's snapshot: the task finishes it off its thread
    (``keyed.run()`` uploads; the operator state bytes are written as one file)."""

    keyed: AsyncSnapshot | None = None
    operator_state: bytes | None = None


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

    # -- checkpoints ------------------------------------------------------------------------

    #: The operator state of this instance (created by ``initialize_state``).
    operator_state: OperatorStateBackend | None = None
    #: What ``initialize_state`` was given (keyed operators restore from it in ``open``).
    state_context: StateContext | None = None

    def initialize_state(self, context: StateContext) -> None:
        """Restore operator state and let checkpointed functions register theirs. Called
        once on the task thread, after ``setup``, before ``open``; raises StateError (or
        what a function raises) when the state cannot be restored."""
        assert self.ctx is not None
        self.state_context = context
        self.operator_state = OperatorStateBackend()
        if context.is_restored:
            self.operator_state.restore(context.operator_state, self.ctx.subtask_index,
                                        self.ctx.parallelism)
        for fn in self.functions():
            if isinstance(fn, CheckpointedFunction):
                fn.initialize_state(FunctionInitializationContext(self.operator_state))

    def keyed_state_backend(self) -> KeyedStateBackend | None:
        """The keyed state to snapshot with this operator (None: it has none)."""
        return None

    def snapshot_state(self, checkpoint_id: CheckpointId, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        """Take the synchronous part of this operator's snapshot for ``checkpoint_id``
        (task thread, between two batches; must be cheap: copy-on-write or a RocksDB
        checkpoint). Raises what the functions or backends raise."""
        for fn in self.functions():
            if isinstance(fn, CheckpointedFunction):
                fn.snapshot_state(FunctionSnapshotContext(checkpoint_id, timestamp_ms))
        snapshot = OperatorSnapshot()
        if self.operator_state is not None and self.operator_state.state_names:
            snapshot.operator_state = self.operator_state.snapshot()
        backend = self.keyed_state_backend()
        if backend is not None:
            snapshot.keyed = backend.snapshot_to(checkpoint_id, location)
        return snapshot

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> None:
        """Checkpoint ``checkpoint_id`` (and every earlier one) is complete (task thread)."""
        backend = self.keyed_state_backend()
        if backend is not None:
            backend.notify_checkpoint_complete(checkpoint_id)
        for fn in self.functions():
            if isinstance(fn, CheckpointListener):
                fn.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> None:
        """Checkpoint ``checkpoint_id`` will not complete (task thread)."""
        backend = self.keyed_state_backend()
        if backend is not None:
            backend.notify_checkpoint_aborted(checkpoint_id)
        for fn in self.functions():
            if isinstance(fn, CheckpointListener):
                fn.notify_checkpoint_aborted(checkpoint_id)

