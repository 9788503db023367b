"""``from_collection``'s source: the items of a Python collection, read by one subtask.

The reader checkpoints exactly: its split carries the number of items already read.

Example:
    >>> from weir.core.source import ReaderContext
    >>> source = CollectionSource(["a", "b", "c"])
    >>> reader = source.create_reader(ReaderContext(0, 1, batch_size=2))
    >>> reader.add_splits([CollectionSplit()])
    >>> reader.poll().records(), reader.snapshot_state(CheckpointId(1))
    (['a', 'b'], [CollectionSplit(split_id='collection', offset=2)])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from weir.core.ids import CheckpointId
from weir.core.records import Elements, as_rows
from weir.core.source import (
    ReaderContext,
    Source,
    SourceReader,
    SplitEnumerator,
    StaticSplitEnumerator,
)
from weir.core.types import KIND_ROW, TypeInformation, collection_converter


class CollectionSource(Source):
    """The items of a Python collection, in order, from one subtask (as Flink's fromCollection).

    Example:
        >>> CollectionSource([1, 2, 3]).fixed_parallelism
        1
    """

    fixed_parallelism = 1
    name = "Collection Source"

    def __init__(self, items: list[Any], type_info: TypeInformation | None = None) -> None:
        # Rows are built here, so a record that does not fit a declared row type is an
        # error when the job is built, not when it runs.
        self.items = (as_rows(list(items), type_info)
                      if type_info is not None and type_info.kind == KIND_ROW else list(items))
        # As PyFlink's items on their way into Java: BYTE, SHORT and INT values wrap, FLOAT
        # values round to 32 bits, so a chained function sees what PyFlink's would.
        convert = collection_converter(type_info) if type_info is not None else None
        if convert is not None:
            self.items = list(map(convert, self.items))
        self.type_info = type_info

    def create_enumerator(self, parallelism: int) -> SplitEnumerator:
        return StaticSplitEnumerator([CollectionSplit()])

    def restore_enumerator(self, parallelism: int, checkpoint: Any) -> SplitEnumerator:
        return StaticSplitEnumerator(checkpoint)

    def create_reader(self, context: ReaderContext) -> SourceReader:
        return _CollectionReader(self, context.batch_size)


@dataclass(frozen=True)
class CollectionSplit:
    """The whole collection, of which the first ``offset`` items have been read."""

    split_id: str = "collection"
    offset: int = 0


class _CollectionReader(SourceReader):
    def __init__(self, source: CollectionSource, batch_size: int) -> None:
        self._source = source
        self._batch_size = batch_size
        self._offset = 0
        self._split: CollectionSplit | None = None

    def add_splits(self, splits: list[Any]) -> None:
        for split in splits:
            # A bare split id is a split at offset 0.
            split = split if isinstance(split, CollectionSplit) else CollectionSplit(str(split))
            if self._split is not None:
                msg = "a collection reader reads one split, and already has one"
                raise ValueError(msg)
            self._split = split
            self._offset = split.offset

    def poll(self) -> Elements | None:
        items = self._source.items
        if self._split is None or self._offset >= len(items):
            return None
        chunk = items[self._offset:self._offset + self._batch_size]
        self._offset += len(chunk)
        return Elements.from_records(chunk, self._source.type_info)

    def position(self) -> tuple[Any, int] | None:
        return ("collection", self._offset)

    def snapshot_state(self, checkpoint_id: CheckpointId) -> list[Any]:
        if self._split is None or self._offset >= len(self._source.items):
            return []
        return [dataclasses.replace(self._split, offset=self._offset)]

    def snapshot_state_unread(self, checkpoint_id: CheckpointId,
                              unread: int) -> list[Any] | None:
        if self._split is None:
            return None
        return [dataclasses.replace(self._split, offset=self._offset - unread)]
