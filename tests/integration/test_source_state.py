"""Source readers checkpoint exactly: read part of the input on p readers, snapshot readers
and enumerator, restore into p' new readers (rescaled or not), read the rest. What was
emitted before the snapshot followed by what was emitted after it must be the input, split
by split, with nothing lost and nothing emitted twice."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir.core.config import Configuration
from weir.core.source import ReaderContext, Source, SourceReader, SplitEnumerator
from weir.datastream.connectors.collection import CollectionSource
from weir.datastream.connectors.file_splits import FileSplit
from weir.datastream.connectors.file_system import FileSource
from weir.datastream.connectors.number_seq import SequenceSource
from weir.taskexecutor.source_reader_state import SourceReaderState

PAIRS = [(p, q) for p in range(1, 5) for q in range(1, 5)]


class Run:
    """The JobMaster and p source subtasks, simulated: round-robin polls, and a split
    request whenever a reader has nothing to read."""

    def __init__(self, source: Source, enumerator: SplitEnumerator,
                 readers: list[SourceReader]) -> None:
        self.source = source
        self.enumerator = enumerator
        self.readers = readers
        self.done = [False] * len(readers)
        self.emitted: list[Any] = []

    @classmethod
    def fresh(cls, source: Source, parallelism: int, batch_size: int) -> Run:
        return cls(source, source.create_enumerator(parallelism),
                   [source.create_reader(ReaderContext(i, parallelism, batch_size))
                    for i in range(parallelism)])

    def step(self) -> bool:
        """One round over the readers; False once every reader has finished."""
        for i, reader in enumerate(self.readers):
            if self.done[i]:
                continue
            elements = reader.poll()
            if elements is not None:
                assert len(elements) > 0
                self.emitted.extend(elements.records())
                continue
            assignment = self.enumerator.request_splits(i)
            assert assignment.retry_after is None, "bounded sources never ask to retry"
            if assignment.no_more_splits:
                self.done[i] = True
            else:
                reader.add_splits(assignment.splits)
        return not all(self.done)

    def run(self, rounds: int | None = None) -> Run:
        count = 0
        while (rounds is None or count < rounds) and self.step():
            count += 1
        return self

    def checkpoint(self, checkpoint_id: int = 1) -> tuple[list[bytes], Any]:
        """Reader snapshots (as the task threads take them) and the enumerator's state,
        both through the bytes they travel as."""
        readers = [SourceReaderState.snapshot(r, checkpoint_id) for r in self.readers]
        enumerator = cloudpickle.loads(cloudpickle.dumps(
            self.enumerator.snapshot_state(checkpoint_id)))
        for reader in self.readers:
            reader.close()
        return readers, enumerator

    @classmethod
    def restored(cls, source: Source, snapshots: list[bytes], enumerator_state: Any,
                 parallelism: int, batch_size: int) -> Run:
        source = cloudpickle.loads(cloudpickle.dumps(source))  # as a redeployed task has it
        readers = []
        for i in range(parallelism):
            reader = source.create_reader(ReaderContext(i, parallelism, batch_size))
            reader.add_splits(SourceReaderState.restore(snapshots, i, parallelism))
            readers.append(reader)
        return cls(source, source.restore_enumerator(parallelism, enumerator_state), readers)


def read_with_restore(source: Source, p: int, q: int, rounds: int, batch_size: int,
                      restored_batch_size: int | None = None) -> tuple[list, list]:
    first = Run.fresh(source, p, batch_size).run(rounds)
    snapshots, enumerator_state = first.checkpoint()
    second = Run.restored(source, snapshots, enumerator_state, q,
                          restored_batch_size or batch_size).run()
    return first.emitted, second.emitted


def assert_exactly(before: list, after: list, expected_splits: list[list],
                   split_of: Callable[[Any], int]) -> None:
    """``before + after``, restricted to each split, is that split's records in order."""
    emitted = before + after
    assert len(emitted) == sum(map(len, expected_splits)), "records lost or duplicated"
    for index, expected in enumerate(expected_splits):
        assert [r for r in emitted if split_of(r) == index] == expected, f"split {index}"


# --- collection and sequence ----------------------------------------------------------------


@pytest.mark.parametrize(("p", "q"), PAIRS)
def test_collection_source_resumes_exactly(p, q):
    items = [(f"k{i % 7}", i) for i in range(53)]
    for rounds in (0, 2, 4, 10, 30):
        before, after = read_with_restore(CollectionSource(items), p, q, rounds, batch_size=5)
        assert bool(before) == (rounds > 0)  # round 1 asks for the split, round 2 reads
        assert before + after == items


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 30), st.integers(1, 40),
       st.integers(1, 40))
def test_sequence_source_resumes_exactly(p, q, rounds, batch_size, restored_batch_size):
    start, end = -20, 480
    before, after = read_with_restore(SequenceSource(start, end), p, q, rounds, batch_size,
                                      restored_batch_size)
    splits = [list(range(s.start, s.end + 1))
              for s in SequenceSource(start, end).create_enumerator(p).snapshot_state(0)]
    bounds = [(s[0], s[-1]) for s in splits]
    assert_exactly(before, after, splits,
                   lambda n: next(i for i, (a, b) in enumerate(bounds) if a <= n <= b))


# --- files ------------------------------------------------------------------------------------

#: Rows per file; the empty file checks that a split with nothing to read is harmless.
FILE_SIZES = [23, 0, 41, 7, 64]


def file_rows(index: int) -> list[dict[str, Any]]:
    return [{"id": index * 1000 + i, "word": f"w{(index * 31 + i) % 11}"}
            for i in range(FILE_SIZES[index])]


@pytest.fixture(scope="module")
def data_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same rows as Parquet (small row groups, so restores skip whole groups), CSV and
    JSON lines, one directory per format."""
    root = tmp_path_factory.mktemp("files")
    directories = {}
    for fmt, ext in (("parquet", "parquet"), ("csv", "csv"), ("json", "jsonl")):
        directory = root / fmt
        directory.mkdir()
        for index in range(len(FILE_SIZES)):
            rows = file_rows(index)
            path = directory / f"part-{index}.{ext}"
            schema = pa.schema([("id", pa.int64()), ("word", pa.string())])
            if fmt == "parquet":
                pq.write_table(pa.Table.from_pylist(rows, schema=schema), path,
                               row_group_size=6)
            elif fmt == "csv":
                path.write_text("id,word\n" + "".join(f"{r['id']},{r['word']}\n"
                                                      for r in rows))
            else:
                path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        directories[fmt] = directory
    return directories


def check_files(before: list, after: list) -> None:
    expected = [[(r["id"], r["word"]) for r in file_rows(i)] for i in range(len(FILE_SIZES))]
    assert_exactly([tuple(r) for r in before], [tuple(r) for r in after], expected,
                   lambda r: r[0] // 1000)


@pytest.mark.parametrize(("p", "q"), PAIRS)
def test_parquet_source_resumes_exactly(data_files, p, q):
    for rounds in (2, 5, 12):
        before, after = read_with_restore(FileSource(str(data_files["parquet"])), p, q,
                                          rounds, batch_size=5, restored_batch_size=4)
        assert before, "something was read before the snapshot"
        check_files(before, after)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["parquet", "csv", "json"]), st.integers(1, 4), st.integers(1, 4),
       st.integers(0, 25), st.integers(1, 70), st.integers(1, 70))
def test_file_sources_resume_exactly(data_files, fmt, p, q, rounds, batch_size,
                                     restored_batch_size):
    source = FileSource(str(data_files[fmt]), format=fmt)
    before, after = read_with_restore(source, p, q, rounds, batch_size, restored_batch_size)
    check_files(before, after)


def test_a_restored_reader_resumes_mid_row_group_without_reading_what_it_skips(data_files):
    path = str(data_files["parquet"] / "part-4.parquet")
    reader = FileSource(path).create_reader(ReaderContext(0, 1, batch_size=100))
    reader.add_splits([FileSplit(path, "parquet", offset=45)])  # row groups of 6: 7 skipped
    assert [r.id for r in reader.poll().records()] == list(range(4045, 4064))
    assert reader.snapshot_state(2) == [FileSplit(path, "parquet", offset=64)]
    assert reader.poll() is None
    assert reader.snapshot_state(3) == []


def test_a_file_shorter_than_its_checkpointed_offset_is_an_error(data_files):
    path = str(data_files["csv"] / "part-3.csv")
    reader = FileSource(path, format="csv").create_reader(ReaderContext(0, 1, 10))
    reader.add_splits([FileSplit(path, "csv", offset=8)])
    with pytest.raises(OSError, match=r"has 7 rows, but 8 were read .* changed since"):
        reader.poll()


def test_continuous_file_source_restores_without_handing_out_a_file_twice(tmp_path):
    def write(name: str, ids: range) -> None:
        pq.write_table(pa.table({"id": list(ids)}), tmp_path / name)

    write("a.parquet", range(0, 10))
    write("b.parquet", range(10, 20))
    source = FileSource(str(tmp_path), monitor_interval=0.5)
    enumerator = source.create_enumerator(1)
    reader = source.create_reader(ReaderContext(0, 1, batch_size=4))
    reader.add_splits(enumerator.request_splits(0).splits)
    before = [r.id for r in reader.poll().records()]
    snapshots, state = [SourceReaderState.snapshot(reader, 1)], enumerator.snapshot_state(1)
    write("c.parquet", range(20, 25))
    restored_enumerator = source.restore_enumerator(1, cloudpickle.loads(
        cloudpickle.dumps(state)))
    restored = source.create_reader(ReaderContext(0, 1, batch_size=100))
    restored.add_splits(SourceReaderState.restore(snapshots, 0, 1))
    after = []
    while True:
        while (elements := restored.poll()) is not None:
            after += [r.id for r in elements.records()]
        assignment = restored_enumerator.request_splits(0)
        if assignment.retry_after is not None:
            break
        restored.add_splits(assignment.splits)
    assert before + after == list(range(25))


# --- Spark ------------------------------------------------------------------------------------


SPARK_ROWS = 3000


def clicks(spark):
    from pyspark.sql import functions as sf

    return (spark.range(0, SPARK_ROWS, numPartitions=4)
            .withColumn("user", sf.concat(sf.lit("u"), (sf.col("id") % 13).cast("string"))))


@pytest.fixture(scope="module")
def staged_spark_source(spark, tmp_path_factory: pytest.TempPathFactory) -> Source:
    from weir.datastream.connectors.spark import SparkSource

    staging = tmp_path_factory.mktemp("spark") / "clicks"
    source, cleanup = SparkSource(clicks, staging=str(staging)).prepare(Configuration())
    cleanup()
    return source


@pytest.mark.extended
@pytest.mark.spark
@pytest.mark.parametrize(("p", "q", "rounds"), [
    (1, 1, 3), (1, 4, 2), (2, 2, 5), (2, 3, 2), (3, 1, 6), (4, 2, 4), (4, 4, 2), (3, 4, 9)])
def test_spark_source_resumes_exactly(staged_spark_source, p, q, rounds):
    before, after = read_with_restore(staged_spark_source, p, q, rounds, batch_size=97,
                                      restored_batch_size=211)
    assert before
    # The staged splits, in order, from the enumerator the job would start with.
    splits = [pq.read_table(s.path).column("id").to_pylist()
              for s in staged_spark_source.create_enumerator(1).snapshot_state(0)["pending"]]
    assert sorted(i for split in splits for i in split) == list(range(SPARK_ROWS))
    split_of = {i: index for index, split in enumerate(splits) for i in split}
    emitted = [(r.id, r.user) for r in before + after]
    assert sorted(emitted) == [(i, f"u{i % 13}") for i in range(SPARK_ROWS)]
    assert_exactly([r.id for r in before], [r.id for r in after], splits, split_of.__getitem__)
