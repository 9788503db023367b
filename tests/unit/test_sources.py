"""FLIP-27 sources: sequence, collection and file sources, enumerators and readers."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.core.row import Row
from weir.core.source import ReaderContext, SourceReader, SplitAssignment, SplitEnumerator
from weir.core.types import Types
from weir.datastream.connectors.collection import CollectionSource
from weir.datastream.connectors.file_splits import FileSplit, list_files
from weir.datastream.connectors.file_system import FileSource
from weir.datastream.connectors.number_seq import SequenceSource, SequenceSplit

FAST = settings(max_examples=40, deadline=None)


def all_splits(enumerator: SplitEnumerator, subtask_index: int = 0) -> list:
    splits = []
    for _ in range(10_000):
        assignment = enumerator.request_splits(subtask_index)
        if assignment.no_more_splits:
            assert not assignment.splits
            return splits
        assert assignment.splits, "a bounded enumerator must not ask to retry"
        splits.extend(assignment.splits)
    raise AssertionError("the enumerator never said no_more_splits")


def read_all(reader: SourceReader) -> list:
    out = []
    while (elements := reader.poll()) is not None:
        assert len(elements) > 0
        out.extend(elements.records())
    return out


def run_readers(source, parallelism: int, batch_size: int) -> list[list]:
    """Simulate the JobMaster: each reader asks for a split whenever it has read its own."""
    enumerator = source.create_enumerator(parallelism)
    readers = [source.create_reader(ReaderContext(i, parallelism, batch_size))
               for i in range(parallelism)]
    outputs: list[list] = [[] for _ in readers]
    done = [False] * parallelism
    while not all(done):
        for i, reader in enumerate(readers):
            if done[i]:
                continue
            elements = reader.poll()
            if elements is not None:
                assert 0 < len(elements) <= batch_size
                outputs[i].extend(elements.records())
                continue
            assignment = enumerator.request_splits(i)
            if assignment.no_more_splits:
                done[i] = True
            else:
                reader.add_splits(assignment.splits)
    return outputs


# --- SequenceSource ----------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 2, 3, 7, 32])
@pytest.mark.parametrize(("start", "end"), [
    (1, 1000), (0, 0), (-50, 49), (5, 7), (2**60, 2**60 + 100), (-(2**62), -(2**62) + 9),
])
def test_sequence_splits_cover_the_range_exactly_once(start, end, parallelism) -> None:
    splits = all_splits(SequenceSource(start, end).create_enumerator(parallelism))
    assert all(isinstance(s, SequenceSplit) and s.start <= s.end for s in splits)
    covered = sorted((s.start, s.end) for s in splits)
    assert covered[0][0] == start
    assert covered[-1][1] == end
    for (_, prev_end), (next_start, _) in itertools.pairwise(covered):
        assert next_start == prev_end + 1
    assert len(splits) <= max(1, parallelism * 4)
    assert len({s.split_id for s in splits}) == len(splits)


@FAST
@given(st.integers(-(2**62), 2**62), st.integers(0, 5000), st.integers(1, 16),
       st.integers(1, 700))
def test_sequence_readers_produce_exactly_the_numbers(start, length, parallelism,
                                                      batch_size) -> None:
    end = start + length
    outputs = run_readers(SequenceSource(start, end), parallelism, batch_size)
    produced = [n for out in outputs for n in out]
    assert sorted(produced) == list(range(start, end + 1))
    for out in outputs:
        assert all(type(n) is int for n in out[:3])


def test_sequence_reader_emits_arrow_ints_and_tracks_its_position() -> None:
    source = SequenceSource(10, 19)
    reader = source.create_reader(ReaderContext(0, 1, batch_size=4))
    assert reader.poll() is None
    assert reader.position() is None
    reader.add_splits([SequenceSplit(10, 14), SequenceSplit(15, 19)])
    first = reader.poll()
    assert first.is_arrow
    assert first.arrow().schema.field("f0").type == pa.int64()
    assert first.records() == [10, 11, 12, 13]
    assert reader.position() == ("10-14", 4)
    assert read_all(reader) == [14, 15, 16, 17, 18, 19]
    assert reader.position() is None


def test_sequence_end_before_start_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"must not be smaller than start"):
        SequenceSource(5, 4)


def test_failed_reader_splits_are_handed_out_again() -> None:
    enumerator = SequenceSource(1, 100).create_enumerator(1)
    first = enumerator.request_splits(0).splits
    enumerator.add_splits_back(first, 0)
    assert enumerator.request_splits(1).splits == first


# --- CollectionSource --------------------------------------------------------------------


def test_collection_source_reads_the_items_in_order_in_batches() -> None:
    items = [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)]
    source = CollectionSource(items)
    assert source.fixed_parallelism == 1
    assert run_readers(source, 1, 2) == [items]


def test_collection_reader_waits_for_its_split() -> None:
    source = CollectionSource([1, 2, 3])
    reader = source.create_reader(ReaderContext(0, 1, batch_size=2))
    assert reader.poll() is None
    (split,) = all_splits(source.create_enumerator(1))
    reader.add_splits([split])
    assert reader.poll().records() == [1, 2]
    assert reader.position() == ("collection", 2)
    assert reader.poll().records() == [3]
    assert reader.poll() is None


def test_collection_source_copies_the_collection_and_keeps_the_type() -> None:
    items = [1, 2]
    source = CollectionSource(items, Types.INT())
    items.append(3)
    reader = source.create_reader(ReaderContext(0, 1, batch_size=10))
    reader.add_splits(["collection"])
    elements = reader.poll()
    assert elements.records() == [1, 2]
    assert elements.arrow().schema.field("f0").type == pa.int32()


def test_empty_collection() -> None:
    assert run_readers(CollectionSource([]), 1, 5) == [[]]


# --- FileSource --------------------------------------------------------------------------


ROWS = [{"user": f"u{i % 3}", "amount": i} for i in range(7)]


def write(path, fmt: str, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "csv":
        lines = [",".join(rows[0])] + [",".join(str(v) for v in r.values()) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


EXT = {"parquet": "parquet", "csv": "csv", "json": "jsonl"}


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
@pytest.mark.parametrize("parallelism", [1, 3])
def test_file_source_reads_every_row_once_as_rows(tmp_path, fmt, parallelism) -> None:
    ext = EXT[fmt]
    write(tmp_path / f"a.{ext}", fmt, ROWS[:4])
    write(tmp_path / "sub" / f"b.{ext}", fmt, ROWS[4:])
    write(tmp_path / f".hidden.{ext}", fmt, ROWS)
    write(tmp_path / f"_temporary.{ext}", fmt, ROWS)
    write(tmp_path / "_staging" / f"c.{ext}", fmt, ROWS)
    (tmp_path / "notes.txt").write_text("not data\n")
    source = FileSource(str(tmp_path), format=fmt)
    assert source.bounded
    outputs = run_readers(source, parallelism, batch_size=3)
    rows = [r for out in outputs for r in out]
    assert all(type(r) is Row for r in rows)
    assert sorted((r.user, r.amount) for r in rows) == sorted(
        (r["user"], r["amount"]) for r in ROWS)


def test_list_files(tmp_path) -> None:
    for name in ["b.parquet", "a.parquet", "x/c.parquet", ".x/d.parquet", "_y/e.parquet",
                 "f.csv", "_g.parquet", ".h.parquet"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert list_files(str(tmp_path), "parquet") == [
        str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), str(tmp_path / "x/c.parquet")]
    assert list_files(f"file://{tmp_path}", "csv") == [str(tmp_path / "f.csv")]
    assert list_files(str(tmp_path / "b.parquet"), "parquet") == [str(tmp_path / "b.parquet")]
    assert list_files(str(tmp_path / "missing"), "parquet") == []


def test_file_reader_batches_and_position(tmp_path) -> None:
    path = tmp_path / "data.csv"
    write(path, "csv", ROWS)
    source = FileSource(str(path), format="csv")
    (split,) = all_splits(source.create_enumerator(1))
    assert split == FileSplit(str(path), "csv")
    reader = source.create_reader(ReaderContext(0, 1, batch_size=3))
    reader.add_splits([split])
    sizes = []
    positions = []
    while (elements := reader.poll()) is not None:
        sizes.append(len(elements))
        positions.append(reader.position())
    assert sizes == [3, 3, 1]
    assert positions == [(str(path), 3), (str(path), 6), (str(path), 7)]
    assert reader.position() is None


def test_continuous_file_source_discovers_new_files(tmp_path) -> None:
    write(tmp_path / "1.parquet", "parquet", ROWS[:2])
    source = FileSource(str(tmp_path), format="parquet", monitor_interval=0.25)
    assert not source.bounded
    enumerator = source.create_enumerator(2)
    first = enumerator.request_splits(0)
    assert [s.path for s in first.splits] == [str(tmp_path / "1.parquet")]
    idle = enumerator.request_splits(1)
    assert idle == SplitAssignment(retry_after=0.25)
    write(tmp_path / "2.parquet", "parquet", ROWS[2:])
    later = enumerator.request_splits(1)
    assert [s.path for s in later.splits] == [str(tmp_path / "2.parquet")]
    assert not later.no_more_splits
    # Files already handed out are not handed out again.
    assert enumerator.request_splits(0) == SplitAssignment(retry_after=0.25)
    reader = source.create_reader(ReaderContext(0, 1, batch_size=100))
    reader.add_splits(first.splits + later.splits)
    assert [(r.user, r.amount) for r in read_all(reader)] == [
        (r["user"], r["amount"]) for r in ROWS]


def test_bounded_file_source_lists_once(tmp_path) -> None:
    write(tmp_path / "1.jsonl", "json", ROWS[:1])
    enumerator = FileSource(str(tmp_path), format="json").create_enumerator(1)
    write(tmp_path / "2.jsonl", "json", ROWS[1:2])
    assert [s.path for s in all_splits(enumerator)] == [str(tmp_path / "1.jsonl")]


def test_file_splits_are_handed_back_on_failure(tmp_path) -> None:
    write(tmp_path / "1.csv", "csv", ROWS)
    write(tmp_path / "2.csv", "csv", ROWS)
    enumerator = FileSource(str(tmp_path), format="csv").create_enumerator(2)
    taken = enumerator.request_splits(0).splits
    enumerator.add_splits_back(taken, 0)
    assert [s.path for s in all_splits(enumerator, 1)] == [
        str(tmp_path / "1.csv"), str(tmp_path / "2.csv")]


def test_file_source_with_a_custom_lister(tmp_path) -> None:
    write(tmp_path / "keep.parquet", "parquet", ROWS[:1])
    write(tmp_path / "skip.parquet", "parquet", ROWS[1:])
    source = FileSource(str(tmp_path), lister=lambda p: [f"{p}/keep.parquet"], name="Custom")
    assert source.name == "Custom"
    assert [r.amount for out in run_readers(source, 1, 10) for r in out] == [0]


def test_unreadable_file_names_the_file(tmp_path) -> None:
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"this is not parquet")
    source = FileSource(str(path))
    reader = source.create_reader(ReaderContext(0, 1, batch_size=10))
    reader.add_splits(all_splits(source.create_enumerator(1)))
    with pytest.raises(OSError, match=r"cannot read parquet file .*broken.parquet"):
        reader.poll()


def test_unknown_file_format() -> None:
    with pytest.raises(ValueError, match=r"unknown file format 'xml'"):
        FileSource("/tmp/x", format="xml")


def test_sequence_reader_reads_dealt_splits_in_ascending_order():
    """A rescale deals splits out in old-subtask order; numbers are often event time, so
    the reader takes them in ascending order (its watermark never passes unread ones),
    keeping the split it is reading first."""
    from weir.core.source import ReaderContext
    from weir.datastream.connectors.number_seq import SequenceSource, SequenceSplit

    reader = SequenceSource(0, 99).create_reader(ReaderContext(0, 1, batch_size=5))
    reader.add_splits([SequenceSplit(60, 69, offset=2), SequenceSplit(10, 19, offset=7)])
    first = reader.poll().records()
    reader.add_splits([SequenceSplit(0, 4)])
    rest = []
    while (batch := reader.poll()) is not None:
        rest += batch.records()
    assert first == [17, 18, 19]
    assert rest == [0, 1, 2, 3, 4, *range(62, 70)]
