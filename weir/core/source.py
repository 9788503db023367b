"""The source contract (FLIP-27).

A :class:`Source` is pickled into the job graph. The JobMaster creates one
:class:`SplitEnumerator` per source and answers readers' split requests from it (on the
JobMaster's main thread). Each source subtask creates a :class:`SourceReader` on its
mailbox thread; the reader asks for splits when it has none.

Configuration: the job graph carries the job's configuration only, and never the daemons'
secrets. An enumerator gets the JobMaster's configuration merged with the job's
(:class:`EnumeratorContext`, through :meth:`Source.create_enumerator_in`), a reader the
TaskExecutor's merged with the job's (:attr:`ReaderContext.config`), so each reads storage
with the credentials of the process it runs in.

Checkpoints: a split carries its own progress (``offset``: records already read), so
:meth:`SourceReader.snapshot_state` is the list of the reader's unfinished splits at their
current offsets, and a restored reader given those splits with ``add_splits`` resumes
exactly there (see :mod:`weir.taskexecutor.source_reader_state` for how a source task keeps them in
operator list state). :meth:`SplitEnumerator.snapshot_state` is the enumerator's side
(splits not handed out yet), restored with :meth:`Source.restore_enumerator`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from weir.core.config import Configuration
from weir.core.ids import CheckpointId
from weir.core.records import Elements


@dataclass
class SplitAssignment:
    """The enumerator's answer to a split request."""

    splits: list[Any] = field(default_factory=list)
    #: The reader gets no more splits after these: it ends when it has read them.
    no_more_splits: bool = False
    #: Nothing to hand out now: ask again after this many seconds (continuous sources).
    retry_after: float | None = None


class SplitEnumerator(ABC):
    """Hands splits to readers. Runs in the JobMaster, on its main thread only."""

    @abstractmethod
    def request_splits(self, subtask_index: int) -> SplitAssignment:
        """Called when reader ``subtask_index`` has no split left. Must not block for long."""

    def add_splits_back(self, splits: list[Any], subtask_index: int) -> None:  # noqa: B027
        """Splits of a failed reader, to hand out again."""

    def snapshot_state(self, checkpoint_id: CheckpointId) -> Any:
        """The enumerator's state for checkpoint ``checkpoint_id``: a picklable value that
        :meth:`Source.restore_enumerator` turns back into an equivalent enumerator.

        Called on the JobMaster's main thread, between two split requests. Splits handed out
        before this call belong to the readers' state from then on, so the caller must make
        sure every split assigned before it reaches its reader before that reader's snapshot
        of the same checkpoint (and treat assignments made after it as not checkpointed).
        Raises NotImplementedError for an enumerator that cannot be checkpointed.
        """
        msg = f"{type(self).__name__} cannot be checkpointed (it has no snapshot_state)"
        raise NotImplementedError(msg)

    def close(self) -> None:  # noqa: B027
        """The job ended."""


@dataclass
class ReaderContext:
    """Where a reader runs."""

    subtask_index: int
    parallelism: int
    batch_size: int
    #: The TaskExecutor's configuration merged with the job's (weir options as text); an
    #: option set in neither falls back to the TaskExecutor's ``WEIR_*`` environment.
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EnumeratorContext:
    """Where an enumerator runs (Flink's ``SplitEnumeratorContext``, reduced to what
    weir's enumerators use).

    Example:
        >>> EnumeratorContext(2).configuration.to_dict()
        {}
    """

    parallelism: int
    #: The JobMaster's configuration merged with the job's; an option set in neither falls
    #: back to the JobMaster's ``WEIR_*`` environment (``Configuration.get``).
    configuration: Configuration = field(default_factory=Configuration)


class SourceReader(ABC):
    """Reads splits on a source task's mailbox thread."""

    @abstractmethod
    def add_splits(self, splits: list[Any]) -> None:
        """Splits assigned by the enumerator, read in order after the current ones."""

    @abstractmethod
    def poll(self) -> Elements | None:
        """The next batch, or None when every assigned split is read (ask for more)."""

    def position(self) -> tuple[Any, int] | None:
        """(split id, records read from it) of the split being read, for replay."""
        return None

    def snapshot_state(self, checkpoint_id: CheckpointId) -> list[Any]:
        """The reader's unfinished splits, each at its current offset, in reading order.

        Called on the task thread between two ``poll`` calls, when checkpoint
        ``checkpoint_id`` is taken: every record of a batch ``poll`` returned before is
        counted as read. Does not change the reader. Handing the result to a new reader's
        ``add_splits`` makes it emit exactly the records this reader has not emitted yet.
        Raises NotImplementedError for a reader that cannot be checkpointed.
        """
        msg = f"{type(self).__name__} cannot be checkpointed (it has no snapshot_state)"
        raise NotImplementedError(msg)

    def snapshot_state_unread(self, checkpoint_id: CheckpointId,
                              unread: int) -> list[Any] | None:
        """``snapshot_state`` as if the last ``unread`` records of the batch ``poll``
        returned last had not been read yet: a reader restored from it emits them again.

        A source task takes a whole batch from its reader and processes it a few records
        at a time, so a checkpoint may come in the middle of it. A reader that can rewind
        its position by records (its splits carry an offset) returns the splits here, and
        the checkpoint stores a position, as Flink's sources do; the default, None, makes
        the task persist the unprocessed records with the checkpoint instead, as in-flight
        data that the configured network buffers do not bound.

        Called like ``snapshot_state``, with ``0 < unread <=`` the last batch's length.
        """
        return None

    def close(self) -> None:  # noqa: B027
        """Release files and connections; called on the task thread, also after failure."""


class Source(ABC):
    """A FLIP-27 source: creates the enumerator (JobMaster side) and readers (task side)."""

    #: Bounded sources end; unbounded ones run until cancelled.
    bounded: bool = True
    #: Parallelism the source must run with (e.g. 1 for a collection), or None.
    fixed_parallelism: int | None = None
    name: str = "Source"

    @abstractmethod
    def create_enumerator(self, parallelism: int) -> SplitEnumerator: ...

    @abstractmethod
    def create_reader(self, context: ReaderContext) -> SourceReader: ...

    def restore_enumerator(self, parallelism: int, checkpoint: Any) -> SplitEnumerator:
        """An enumerator continuing from ``checkpoint`` (what ``snapshot_state`` returned).

        Called in the JobMaster when a job restores. Raises NotImplementedError for a
        source whose enumerator cannot be checkpointed.
        """
        msg = f"{type(self).__name__} cannot restore its split enumerator from a checkpoint"
        raise NotImplementedError(msg)

    def create_enumerator_in(self, context: EnumeratorContext) -> SplitEnumerator:
        """The enumerator the JobMaster runs (main thread), knowing its configuration.

        The default is ``create_enumerator(context.parallelism)``: a source whose
        enumerator reads storage (and so needs credentials) overrides this one.
        """
        return self.create_enumerator(context.parallelism)

    def restore_enumerator_in(self, context: EnumeratorContext,
                              checkpoint: Any) -> SplitEnumerator:
        """:meth:`restore_enumerator` knowing the JobMaster's configuration; the default
        calls it. Raises what it raises."""
        return self.restore_enumerator(context.parallelism, checkpoint)


class StaticSplitEnumerator(SplitEnumerator):
    """Hands out a fixed list of splits, one per request, then says there are no more.

    Its checkpoint is the list of splits not handed out yet.

    Example:
        >>> enumerator = StaticSplitEnumerator(["a", "b"])
        >>> enumerator.request_splits(0).splits
        ['a']
        >>> StaticSplitEnumerator(enumerator.snapshot_state(1)).request_splits(0).splits
        ['b']
    """

    def __init__(self, splits: list[Any]) -> None:
        self._pending = list(splits)

    def snapshot_state(self, checkpoint_id: CheckpointId) -> list[Any]:
        return list(self._pending)

    def request_splits(self, subtask_index: int) -> SplitAssignment:
        if self._pending:
            return SplitAssignment([self._pending.pop(0)])
        return SplitAssignment(no_more_splits=True)

    def add_splits_back(self, splits: list[Any], subtask_index: int) -> None:
        self._pending[:0] = splits
