"""Number sequences (PyFlink's ``pyflink.datastream.connectors.number_seq``):
:class:`NumberSequenceSource`, and ``from_sequence``'s source.

The readers checkpoint exactly: a split carries the number of records already read from it.

Example:
    >>> from weir.core.source import ReaderContext
    >>> source = SequenceSource(1, 10)
    >>> reader = source.create_reader(ReaderContext(0, 1, batch_size=4))
    >>> reader.add_splits([SequenceSplit(1, 10)])
    >>> reader.poll().records()
    [1, 2, 3, 4]
    >>> reader.snapshot_state(CheckpointId(1))
    [SequenceSplit(start=1, end=10, offset=4)]
    >>> restored = source.create_reader(ReaderContext(0, 1, batch_size=100))
    >>> restored.add_splits(reader.snapshot_state(CheckpointId(1)))
    >>> restored.poll().records()
    [5, 6, 7, 8, 9, 10]
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from weir.core.ids import CheckpointId
from weir.core.records import Elements
from weir.core.source import (
    ReaderContext,
    Source,
    SourceReader,
    SplitEnumerator,
    StaticSplitEnumerator,
)
from weir.core.types import KIND_KEY, KIND_SCALAR

__all__ = ["NumberSequenceSource"]


@dataclass(frozen=True)
class SequenceSplit:
    """Numbers ``start`` to ``end`` inclusive, of which the first ``offset`` have been read."""

    start: int
    end: int
    offset: int = 0

    @property
    def split_id(self) -> str:
        return f"{self.start}-{self.end}"


class SequenceSource(Source):
    """The numbers ``start..end`` inclusive, split across readers, generated lazily as Arrow.

    Example:
        >>> len(SequenceSource(1, 100).create_enumerator(2).request_splits(0).splits)
        1
    """

    name = "Sequence Source"
    _SCHEMA = pa.schema([("f0", pa.int64())], metadata={KIND_KEY: KIND_SCALAR})

    def __init__(self, start: int, end: int) -> None:
        if end < start:
            msg = f"from_sequence: end ({end}) must not be smaller than start ({start})"
            raise ValueError(msg)
        self.start = start
        self.end = end

    def create_enumerator(self, parallelism: int) -> SplitEnumerator:
        # A few splits per reader so fast readers take more (as Flink's NumberSequenceSource).
        count = self.end - self.start + 1
        n = max(1, min(count, parallelism * 4))
        # Integer arithmetic: floats (np.linspace) lose precision beyond 2**53.
        bounds = [self.start + count * i // n for i in range(n + 1)]
        splits = [SequenceSplit(a, b - 1) for a, b in itertools.pairwise(bounds)
                  if b > a]
        return StaticSplitEnumerator(splits)

    def restore_enumerator(self, parallelism: int, checkpoint: Any) -> SplitEnumerator:
        return StaticSplitEnumerator(checkpoint)

    def create_reader(self, context: ReaderContext) -> SourceReader:
        return _SequenceReader(context.batch_size)


class _SequenceReader(SourceReader):
    def __init__(self, batch_size: int) -> None:
        self._splits: list[SequenceSplit] = []
        self._next = 0
        self._batch_size = batch_size

    def add_splits(self, splits: list[Any]) -> None:
        # Read in ascending order: numbers often double as event time, and splits dealt
        # out anew by a rescale must not make the reader's watermark jump past numbers
        # it has yet to read. The split being read stays first.
        started = bool(self._splits) and self._next > self._splits[0].start + \
            self._splits[0].offset
        current = self._splits[:1] if started else []
        rest = sorted([*self._splits[len(current):], *splits], key=lambda s: s.start + s.offset)
        self._splits = [*current, *rest]
        if not started and self._splits:
            self._next = self._splits[0].start + self._splits[0].offset

    def poll(self) -> Elements | None:
        while self._splits:
            split = self._splits[0]
            if self._next > split.end:
                self._splits.pop(0)
                if self._splits:
                    self._next = self._splits[0].start + self._splits[0].offset
                continue
            stop = min(split.end + 1, self._next + self._batch_size)
            values = pa.array(np.arange(self._next, stop, dtype=np.int64))
            self._next = stop
            return Elements.from_arrow(
                pa.RecordBatch.from_arrays([values], schema=SequenceSource._SCHEMA))
        return None

    def position(self) -> tuple[Any, int] | None:
        if not self._splits:
            return None
        return (self._splits[0].split_id, self._next - self._splits[0].start)

    def snapshot_state(self, checkpoint_id: CheckpointId) -> list[Any]:
        if not self._splits:
            return []
        current, *rest = self._splits
        if self._next > current.end:
            return list(rest)
        return [dataclasses.replace(current, offset=self._next - current.start), *rest]

    def snapshot_state_unread(self, checkpoint_id: CheckpointId,
                              unread: int) -> list[Any] | None:
        # The last batch came from the first split (``poll`` drops a split only when it
        # is asked for the batch after its last).
        if not self._splits:
            return None
        current, *rest = self._splits
        return [dataclasses.replace(current, offset=self._next - current.start - unread), *rest]


class NumberSequenceSource(SequenceSource):
    """PyFlink's ``NumberSequenceSource(start, end)``: the numbers ``start..end``
    inclusive, for ``env.from_source(source, watermark_strategy, name)``.

    Example:
        >>> NumberSequenceSource(1, 10).name
        'Number Sequence Source'
    """

    name = "Number Sequence Source"
