"""A checkpoint in the middle of a source's batch stores a position, not records.

A source task takes a whole batch from its reader and processes it a few records at a time,
so a trigger may come when part of the batch is unprocessed. The readers weir ships rewind
their splits' offsets by that many records (``snapshot_state_unread``): a reader restored
from the snapshot emits exactly those records again, then the rest, and the checkpoint
persists no in-flight data for the source. A reader that cannot rewind leaves the records
to be persisted with the checkpoint (``_ReaderParticipant.covers_unread`` is False).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from weir.core.source import ReaderContext, SourceReader
from weir.datastream.connectors.collection import CollectionSource
from weir.datastream.connectors.file_splits import FileReader, FileSplit
from weir.datastream.connectors.number_seq import SequenceSource, SequenceSplit
from weir.taskexecutor.source_reader_state import SourceReaderState
from weir.taskexecutor.task import _ReaderParticipant


def read_all(reader: SourceReader) -> list[Any]:
    out: list[Any] = []
    while (batch := reader.poll()) is not None:
        out.extend(batch.records())
    return out


def values(records: list[Any]) -> list[Any]:
    """Plain values of a reader's records (Parquet rows come as rows of one field)."""
    return [r[0] if isinstance(r, tuple) else getattr(r, "n", r) for r in records]


def sequence_reader() -> tuple[SourceReader, Any]:
    source = SequenceSource(0, 19)
    reader = source.create_reader(ReaderContext(0, 1, batch_size=6))
    reader.add_splits([SequenceSplit(0, 9), SequenceSplit(10, 19)])
    return reader, lambda: source.create_reader(ReaderContext(0, 1, batch_size=6))


def collection_reader() -> tuple[SourceReader, Any]:
    source = CollectionSource(list(range(20)))
    reader = source.create_reader(ReaderContext(0, 1, batch_size=6))
    reader.add_splits(["collection"])
    return reader, lambda: source.create_reader(ReaderContext(0, 1, batch_size=6))


def parquet_reader(tmp_path: Path) -> tuple[SourceReader, Any]:
    paths = []
    for i in range(2):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"n": list(range(10 * i, 10 * i + 10))}), path,
                       row_group_size=4)
        paths.append(str(path))
    reader = FileReader(batch_size=6)
    reader.add_splits([FileSplit(p, "parquet") for p in paths])
    return reader, lambda: FileReader(batch_size=6)


@pytest.mark.parametrize("kind", ["sequence", "collection", "parquet"])
@pytest.mark.parametrize("polls", [1, 2, 3])
@pytest.mark.parametrize("unread", [1, 3])
def test_a_restored_reader_emits_the_unread_records_again_then_the_rest(
        kind: str, polls: int, unread: int, tmp_path: Path) -> None:
    make = {"sequence": sequence_reader, "collection": collection_reader,
            "parquet": lambda: parquet_reader(tmp_path)}[kind]
    expected = values(read_all(make()[0]))
    reader, new_reader = make()
    emitted: list[Any] = []
    for _ in range(polls):
        batch = reader.poll()
        assert batch is not None
        emitted.extend(values(batch.records()))
    unread = min(unread, len(batch))
    splits = reader.snapshot_state_unread(1, unread)
    assert splits is not None
    processed = emitted[:len(emitted) - unread]
    restored = new_reader()
    restored.add_splits(SourceReaderState.restore(
        [SourceReaderState.snapshot(reader, 1, splits=splits)], 0, 1))
    # Nothing lost, nothing twice: what was processed before the checkpoint, then what
    # the restored reader emits, is the input exactly.
    assert processed + values(read_all(restored)) == expected


class OpaqueReader(SourceReader):
    """A reader without a record position: it cannot rewind."""

    def __init__(self) -> None:
        self._read = 0

    def add_splits(self, splits: list[Any]) -> None:
        pass

    def poll(self) -> Any:
        return None

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        return [self._read]


def test_a_reader_that_cannot_rewind_leaves_the_unread_records_to_be_persisted() -> None:
    participant = _ReaderParticipant(OpaqueReader(), unread=5)
    participant.snapshot_state(1, 0, None)  # type: ignore[arg-type]
    assert not participant.covers_unread


def test_a_reader_that_rewinds_covers_the_unread_records() -> None:
    reader, _ = sequence_reader()
    assert reader.poll() is not None
    participant = _ReaderParticipant(reader, unread=4)
    participant.snapshot_state(1, 0, None)  # type: ignore[arg-type]
    assert participant.covers_unread


def test_restored_in_flight_data_of_an_older_checkpoint_is_persisted_not_rewound() -> None:
    # A source restored from a checkpoint that persisted the rest of a batch processes
    # that first; a trigger meanwhile must not rewind the reader over records it never
    # read, so the participant leaves them to be persisted.
    from types import SimpleNamespace

    from weir.core.records import Elements
    from weir.taskexecutor.pending_input import PendingInput

    reader, _ = sequence_reader()
    pending = PendingInput()
    pending.add(0, 0, [Elements.from_records([1, 2, 3])])
    restored = SimpleNamespace(_reader=reader, _pending=pending,
                               _pending_is_reader_batch=False)
    participant = _ReaderParticipant.of(restored)  # type: ignore[arg-type]
    participant.snapshot_state(1, 0, None)  # type: ignore[arg-type]
    assert not participant.covers_unread
    polled = SimpleNamespace(_reader=reader, _pending=pending, _pending_is_reader_batch=True)
    participant = _ReaderParticipant.of(polled)  # type: ignore[arg-type]
    assert participant._unread == 3
