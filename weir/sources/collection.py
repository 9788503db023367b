"""``from_collection`` and ``from_sequence`` sources."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from weir.records import Elements
from weir.sources.api import (
    ReaderContext,
    Source,
    SourceReader,
    SplitEnumerator,
    StaticSplitEnumerator,
)
from weir.types import KIND_KEY, KIND_SCALAR, TypeInformation


class CollectionSource(Source):
    """The items of a Python collection, in order, from one subtask (as Flink's fromCollection).

    Example:
        >>> CollectionSource([1, 2, 3]).fixed_parallelism
        1
    """

    fixed_parallelism = 1
    name = "Collection Source"

    def __init__(self, items: list[Any], type_info: TypeInformation | None = None) -> None:
        self.items = list(items)
        self.type_info = type_info

    def create_enumerator(self, parallelism: int) -> SplitEnumerator:
        return StaticSplitEnumerator(["collection"])

    def create_reader(self, context: ReaderContext) -> SourceReader:
        return _CollectionReader(self, context.batch_size)


class _CollectionReader(SourceReader):
    def __init__(self, source: CollectionSource, batch_size: int) -> None:
        self._source = source
        self._batch_size = batch_size
        self._offset = 0
        self._assigned = False

    def add_splits(self, splits: list[Any]) -> None:
        self._assigned = True

    def poll(self) -> Elements | None:
        items = self._source.items
        if not self._assigned or self._offset >= len(items):
            return None
        chunk = items[self._offset:self._offset + self._batch_size]
        self._offset += len(chunk)
        return Elements.from_records(chunk, self._source.type_info)

    def position(self) -> tuple[Any, int] | None:
        return ("collection", self._offset)


@dataclass(frozen=True)
class SequenceSplit:
    """Numbers ``start`` to ``end`` inclusive."""

    start: int
    end: int

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

    def create_reader(self, context: ReaderContext) -> SourceReader:
        return _SequenceReader(context.batch_size)


class _SequenceReader(SourceReader):
    def __init__(self, batch_size: int) -> None:
        self._splits: list[SequenceSplit] = []
        self._next = 0
        self._batch_size = batch_size

    def add_splits(self, splits: list[Any]) -> None:
        if not self._splits and splits:
            self._next = splits[0].start
        self._splits.extend(splits)

    def poll(self) -> Elements | None:
        while self._splits:
            split = self._splits[0]
            if self._next > split.end:
                self._splits.pop(0)
                if self._splits:
                    self._next = self._splits[0].start
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
