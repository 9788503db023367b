"""The source contract (FLIP-27).

A :class:`Source` is pickled into the job graph. The JobMaster creates one
:class:`SplitEnumerator` per source and answers readers' split requests from it (on the
JobMaster's main thread). Each source subtask creates a :class:`SourceReader` on its
mailbox thread; the reader asks for splits when it has none, and its position is
(split, offset), so a later checkpoint can replay exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from weir.records import Elements


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

    def close(self) -> None:  # noqa: B027
        """The job ended."""


@dataclass
class ReaderContext:
    """Where a reader runs."""

    subtask_index: int
    parallelism: int
    batch_size: int
    config: dict[str, str] = field(default_factory=dict)


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


class StaticSplitEnumerator(SplitEnumerator):
    """Hands out a fixed list of splits, one per request, then says there are no more."""

    def __init__(self, splits: list[Any]) -> None:
        self._pending = list(splits)

    def request_splits(self, subtask_index: int) -> SplitAssignment:
        if self._pending:
            return SplitAssignment([self._pending.pop(0)])
        return SplitAssignment(no_more_splits=True)

    def add_splits_back(self, splits: list[Any], subtask_index: int) -> None:
        self._pending[:0] = splits
