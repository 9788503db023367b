"""The file source on S3 (a real SeaweedFS server): listing a prefix, splitting objects
from their metadata, reading splits with ranged reads, and restoring a reader at an offset.

Every read here is checked against an independent read of the same bytes with pyarrow.
"""

from __future__ import annotations

import io
import itertools
import json
import pickle

import cloudpickle
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from tests.support.seaweedfs import SeaweedS3
from weir.core.config import Configuration
from weir.core.source import EnumeratorContext, ReaderContext
from weir.datastream.connectors.file_splits import (
    FileReader,
    FileSplit,
    list_files,
    list_objects,
    split_file,
    split_size,
)
from weir.datastream.connectors.file_system import FileSource

ROWS = 5000


@pytest.fixture
def s3(seaweed_s3: SeaweedS3, s3_bucket: str) -> S3:
    return S3(seaweed_s3, s3_bucket)


class S3:
    """A bucket to put test objects in, and the configuration that reads it."""

    def __init__(self, server: SeaweedS3, bucket: str) -> None:
        self.server = server
        self.bucket = bucket
        self.client = server.client()
        self.config = Configuration.from_pairs({
            "s3.endpoint": server.endpoint, "s3.access-key": server.access_key,
            "s3.secret-key": server.secret_key, "s3.path.style.access": "true"})

    def put(self, key: str, body: bytes) -> str:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        return f"s3://{self.bucket}/{key}"

    def reader(self, batch_size: int = 1000) -> FileReader:
        reader = FileSource(f"s3://{self.bucket}/x").create_reader(
            ReaderContext(0, 1, batch_size, self.config.options_dict()))
        assert isinstance(reader, FileReader)
        return reader


def table() -> pa.Table:
    """Rows of varied widths, so that line ends fall anywhere in a byte range."""
    return pa.table({"n": list(range(ROWS)),
                     "word": ["x" * (n % 37) + f"w{n}" for n in range(ROWS)],
                     "score": [n / 7 for n in range(ROWS)]})


def parquet_bytes(data: pa.Table, row_group_size: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(data, sink, row_group_size=row_group_size)
    return sink.getvalue()


def csv_bytes(data: pa.Table) -> bytes:
    sink = io.BytesIO()
    pcsv.write_csv(data, sink)
    return sink.getvalue()


def json_bytes(data: pa.Table) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in data.to_pylist())


def text_bytes(data: pa.Table) -> bytes:
    return b"".join(f"{w}\n".encode() for w in data.column("word").to_pylist())


def read_all(reader: FileReader, splits: list[FileSplit]) -> list[dict]:
    reader.add_splits(splits)
    rows: list[dict] = []
    while (batch := reader.poll()) is not None:
        rows.extend(batch.arrow().to_pylist())
    reader.close()
    return rows


def values(rows: list[dict]) -> list:
    """Rows as plain values (text rows are single strings in a one-column batch)."""
    return [tuple(r.values()) if len(r) > 1 else next(iter(r.values())) for r in rows]


def expected(fmt: str, data: pa.Table) -> list:
    if fmt == "text":
        return data.column("word").to_pylist()
    return [tuple(r.values()) for r in data.to_pylist()]


BODIES = {"csv": csv_bytes, "json": json_bytes, "text": text_bytes}
SUFFIX = {"parquet": ".parquet", "csv": ".csv", "json": ".jsonl", "text": ".txt"}


def test_a_prefix_lists_the_objects_below_it_sorted_without_hidden_ones(s3: S3):
    keys = ["events/b.parquet", "events/a.parquet", "events/day=2/c.parquet",
            "events/_SUCCESS", "events/.part-9.parquet", "events/_temporary/d.parquet",
            "events/.staging/e.parquet", "events/notes.csv", "events-old/f.parquet",
            "events.parquet"]
    for key in keys:
        s3.put(key, b"x")
    base = f"s3://{s3.bucket}"
    listed = [f"{base}/events/a.parquet", f"{base}/events/b.parquet",
              f"{base}/events/day=2/c.parquet"]
    assert list_objects(f"{base}/events", "parquet", s3.config) == listed
    assert list_objects(f"{base}/events/", "parquet", s3.config) == listed
    assert list_files(f"{base}/events", "csv", s3.config) == [f"{base}/events/notes.csv"]
    # One object named exactly; a prefix of a key is no directory.
    assert list_objects(f"{base}/events/b.parquet", "parquet", s3.config) == \
        [f"{base}/events/b.parquet"]
    assert list_objects(f"{base}/event", "parquet", s3.config) == []
    assert list_objects(f"{base}/events/day=", "parquet", s3.config) == []
    source = FileSource([f"{base}/events/day=2", f"{base}/events"], format="parquet")
    assert source.list(s3.config) == [f"{base}/events/day=2/c.parquet", *listed[:2]]


def test_parquet_splits_into_row_group_ranges_that_read_the_whole_object(s3: S3,
                                                                         tmp_path):
    data = table()
    body = parquet_bytes(data, row_group_size=400)
    uri = s3.put("big/data.parquet", body)
    (tmp_path / "data.parquet").write_bytes(body)
    groups = pq.ParquetFile(tmp_path / "data.parquet").metadata.num_row_groups
    assert groups == 13

    splits = split_file(uri, "parquet", split_bytes=len(body) // 4, configuration=s3.config)
    assert len(splits) > 2
    assert all(s.path == uri for s in splits)
    assert splits[0].start == 0 and splits[-1].end == groups
    assert all(a.end == b.start for a, b in itertools.pairwise(splits))
    # The same ranges as for the local copy: one code path.
    local = split_file(str(tmp_path / "data.parquet"), "parquet", len(body) // 4)
    assert [(s.start, s.end) for s in local] == [(s.start, s.end) for s in splits]
    assert values(read_all(s3.reader(batch_size=333), splits)) == expected("parquet", data)
    assert split_size([uri, uri], 2, configuration=s3.config) >= len(body)


@pytest.mark.parametrize("fmt", ["csv", "json", "text"])
def test_line_formats_split_by_byte_ranges_with_lines_crossing_range_ends(s3: S3,
                                                                          tmp_path, fmt: str):
    data = table()
    body = BODIES[fmt](data)
    uri = s3.put(f"lines/data{SUFFIX[fmt]}", body)
    split_bytes = 1000 + 7  # not a multiple of any line length: ends fall inside lines
    splits = split_file(uri, fmt, split_bytes, s3.config)
    assert len(splits) == -(-len(body) // split_bytes)
    assert sum(1 for s in splits if body[s.end - 1:s.end] != b"\n") > len(splits) // 2
    rows = values(read_all(s3.reader(batch_size=97), splits))
    assert rows == expected(fmt, data)
    # Read as one split, it is the same.
    assert values(read_all(s3.reader(), [FileSplit(uri, fmt)])) == expected(fmt, data)
    # And so is the local copy split the same way.
    local = tmp_path / f"data{SUFFIX[fmt]}"
    local.write_bytes(body)
    assert values(read_all(s3.reader(), split_file(str(local), fmt, split_bytes))) == rows


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "text"])
def test_a_split_restored_at_an_offset_reads_exactly_the_rest(s3: S3, fmt: str):
    data = table()
    body = parquet_bytes(data, 400) if fmt == "parquet" else BODIES[fmt](data)
    uri = s3.put(f"restore/data{SUFFIX[fmt]}", body)
    split_bytes = len(body) // 3
    splits = split_file(uri, fmt, split_bytes, s3.config)
    assert len(splits) >= 3
    middle = splits[1]
    whole = read_all(s3.reader(batch_size=64), [middle])
    assert len(whole) > 900
    # Offsets inside the first row group or batch, on a boundary, and past both.
    for offset in (1, 64, 400, 401, len(whole) - 1, len(whole)):
        restored = cloudpickle.loads(cloudpickle.dumps(FileSplit(
            middle.path, fmt, offset, middle.start, middle.end)))
        assert read_all(s3.reader(batch_size=64), [restored]) == whole[offset:], offset


def test_a_restored_parquet_reader_skips_whole_row_groups_unread(s3: S3, tmp_path):
    body = bytearray(parquet_bytes(table(), 400))
    (tmp_path / "data.parquet").write_bytes(body)
    metadata = pq.ParquetFile(tmp_path / "data.parquet").metadata
    # Zero the pages of row groups 0-2 (the footer stays): reading them fails, so a reader
    # that reads from row group 3 on proves it never fetched them.
    chunks = [metadata.row_group(g).column(c) for g in range(3)
              for c in range(metadata.num_columns)]
    starts = [c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
              for c in chunks]
    first = min(starts)
    last = max(start + c.total_compressed_size for start, c in zip(starts, chunks, strict=True))
    assert last < metadata.row_group(3).column(0).data_page_offset
    body[first:last] = bytes(last - first)
    uri = s3.put("skip/data.parquet", bytes(body))
    assert [r["n"] for r in read_all(s3.reader(), [FileSplit(uri, "parquet", offset=1200,
                                                             start=0, end=4)])] == \
        list(range(1200, 1600))
    with pytest.raises(OSError, match=f"^cannot read parquet file {uri}: ") as err:
        read_all(s3.reader(), [FileSplit(uri, "parquet", offset=1199, start=0, end=4)])
    assert "\n" not in str(err.value)  # pyarrow's multi-line cause, on one line


def test_a_monitored_prefix_picks_up_objects_added_later(s3: S3):
    source = FileSource(f"s3://{s3.bucket}/incoming", format="json", monitor_interval=0.05)
    enumerator = source.create_enumerator_in(EnumeratorContext(2, s3.config))
    first = enumerator.request_splits(0)
    assert first.splits == [] and first.retry_after == 0.05
    uri = s3.put("incoming/2026/a.jsonl", b'{"n": 1}\n{"n": 2}\n')
    s3.put("incoming/.a.jsonl.inprogress", b'{"n": 3}\n')
    s3.put("incoming/_SUCCESS", b"")
    assigned = enumerator.request_splits(1)
    assert assigned.splits == [FileSplit(uri, "json")]
    assert enumerator.request_splits(0).splits == []
    # The checkpoint knows what was seen: a restored enumerator hands out only new objects.
    state = pickle.loads(pickle.dumps(enumerator.snapshot_state(1)))
    restored = source.restore_enumerator_in(EnumeratorContext(2, s3.config), state)
    later = s3.put("incoming/b.jsonl", b'{"n": 4}\n')
    assert restored.request_splits(0).splits == [FileSplit(later, "json")]
    assert values(read_all(s3.reader(), [FileSplit(uri, "json"), FileSplit(later, "json")])) \
        == [1, 2, 4]


def test_a_bounded_enumerator_splits_what_it_lists(s3: S3):
    body = parquet_bytes(table(), 400)
    for key in ("data/part-0.parquet", "data/part-1.parquet", "data/_SUCCESS"):
        s3.put(key, body)
    source = FileSource(f"s3://{s3.bucket}/data", format="parquet")
    enumerator = source.create_enumerator_in(EnumeratorContext(8, s3.config))
    splits = enumerator.snapshot_state(0)["pending"]
    # 2 x ~100 KB over 8 subtasks: below MIN_SPLIT_BYTES, so one split a file.
    assert [s.path for s in splits] == [f"s3://{s3.bucket}/data/part-{i}.parquet"
                                        for i in range(2)]
    assert len(read_all(s3.reader(), splits)) == 2 * ROWS


def test_a_file_source_with_a_lister_reads_the_s3_uris_it_returns(s3: S3):
    uris = [s3.put(f"staging/run-1/split-{i}.parquet",
                   parquet_bytes(pa.table({"n": [i, i + 10]}), 1)) for i in range(3)]
    # The lister (Spark's staged output) decides what exists, whatever the path says.
    source = FileSource("s3://elsewhere/staging", "parquet", lister=lambda path: uris[::-1])
    splits = source.create_enumerator_in(EnumeratorContext(1, s3.config)) \
        .snapshot_state(0)["pending"]
    assert sorted(r["n"] for r in read_all(s3.reader(), splits)) == [0, 1, 2, 10, 11, 12]


def test_a_split_pickled_before_s3_support_still_reads(tmp_path):
    # A FileSplit of a local file as weir pickled it into checkpoints before: the class,
    # its fields and the local path form are unchanged.
    path = tmp_path / "old.csv"
    path.write_text("n\n1\n2\n3\n")
    encoded = str(path).encode()
    body = (b"\x8c&weir.datastream.connectors.file_system\x94\x8c\tFileSplit\x94\x93\x94)"
            b"\x81\x94}\x94(\x8c\x04path\x94\x8c" + bytes([len(encoded)]) + encoded +
            b"\x94\x8c\x06format\x94\x8c\x03csv\x94\x8c\x06offset\x94K\x01\x8c\x05start"
            b"\x94K\x00\x8c\x03end\x94J\xff\xff\xff\xffub.")
    old = b"\x80\x04\x95" + len(body).to_bytes(8, "little") + body  # protocol 4, one frame
    split = pickle.loads(old)
    assert split == FileSplit(str(path), "csv", offset=1)
    assert values(read_all(FileReader(10), [split])) == [2, 3]


def test_reading_a_deleted_object_names_it(s3: S3):
    uri = s3.put("gone/data.csv", b"n\n1\n")
    (split,) = split_file(uri, "csv", configuration=s3.config)
    s3.client.delete_object(Bucket=s3.bucket, Key="gone/data.csv")
    with pytest.raises(OSError, match=f"^cannot read csv file {uri}: .*") as err:
        read_all(s3.reader(), [split])
    assert "\n" not in str(err.value)


def test_reading_with_wrong_keys_names_the_object(s3: S3):
    uri = s3.put("secret/data.parquet", parquet_bytes(pa.table({"n": [1]}), 1))
    wrong = Configuration(s3.config).set_string("s3.secret-key", "wrong")
    reader = FileReader(100, wrong)
    with pytest.raises(OSError, match=f"^cannot read parquet file {uri}: .*(?i:access|"
                                      "denied|forbidden|signature)"):
        read_all(reader, [FileSplit(uri, "parquet")])


def test_no_secret_is_pickled_with_the_source(s3: S3):
    s3.put("data/part-0.parquet", parquet_bytes(pa.table({"n": [1]}), 1))
    source = FileSource(f"s3://{s3.bucket}/data", format="parquet")
    source.check_paths(s3.config)
    enumerator = source.create_enumerator_in(EnumeratorContext(1, s3.config))
    for shipped in (cloudpickle.dumps(source),
                    cloudpickle.dumps(enumerator.snapshot_state(1)),
                    cloudpickle.dumps(enumerator.request_splits(0).splits)):
        assert s3.server.secret_key.encode() not in shipped
