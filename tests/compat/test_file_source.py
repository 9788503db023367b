"""The file source splits large files as Flink's does (Parquet by row groups, CSV and
JSON lines by byte ranges aligned to line ends), so one big file is read in parallel;
every row is read exactly once, also resuming from a split's offset."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from weir import StreamExecutionEnvironment
from weir.datastream.connectors.file_splits import (
    MIN_SPLIT_BYTES,
    FileReader,
    FileSplit,
    split_file,
    split_size,
)
from weir.datastream.connectors.file_system import FileSource

ROWS = [{"id": i, "name": f"user,{i}" if i % 7 == 0 else f"u{i}", "score": i * 0.5}
        for i in range(2000)]


def _write(tmp_path: Path, fmt: str) -> Path:
    path = tmp_path / f"data.{'jsonl' if fmt == 'json' else fmt}"
    table = pa.Table.from_pylist(ROWS)
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=150)
    elif fmt == "csv":
        pcsv.write_csv(table, path)  # quotes the names with commas
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def _read(split: FileSplit) -> list[tuple]:
    reader = FileReader(batch_size=97)
    reader.add_splits([split])
    out = []
    while (elements := reader.poll()) is not None:
        out.extend((r.id, r.name, r.score) for r in elements.records())
    return out


EXPECTED = [(r["id"], r["name"], r["score"]) for r in ROWS]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_a_large_file_splits_and_every_row_is_read_once(tmp_path: Path, fmt: str) -> None:
    path = _write(tmp_path, fmt)
    splits = split_file(str(path), fmt, split_bytes=4096)
    assert len(splits) > 3
    assert len({s.split_id for s in splits}) == len(splits)
    assert [row for split in splits for row in _read(split)] == EXPECTED
    # Resuming a split after some of its rows skips exactly those.
    middle = splits[len(splits) // 2]
    rows = _read(middle)
    resumed = _read(FileSplit(middle.path, fmt, 5, middle.start, middle.end))
    assert resumed == rows[5:]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_a_job_reads_a_split_file_in_parallel(tmp_path: Path, fmt: str) -> None:
    path = _write(tmp_path, fmt)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    rows = env.from_source(FileSource(str(path), format=fmt, split_bytes=4096))
    got = rows.map(lambda r: (r.id, r.name, r.score)).execute_and_collect()
    assert sorted(got) == EXPECTED


@pytest.mark.extended
def test_read_text_file_reads_every_line_once_in_parallel(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    lines = [f"line {i} " + "x" * (i % 13) for i in range(3000)]
    path.write_text("\n".join(lines) + "\n")
    splits = split_file(str(path), "text", split_bytes=2048)
    assert len(splits) > 3
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    assert sorted(env.read_text_file(str(path)).execute_and_collect()) == sorted(lines)
    in_splits = env.from_source(FileSource(str(path), format="text", split_bytes=2048))
    assert sorted(in_splits.execute_and_collect()) == sorted(lines)


@pytest.mark.parametrize("parallelism", [2, 3])
def test_a_bounded_source_gives_each_subtask_an_equal_share(tmp_path: Path,
                                                           parallelism: int) -> None:
    # 12 row groups of 1 MiB that do not compress: one file of 12 MiB.
    import numpy as np

    path = tmp_path / "big.parquet"
    rows = 12 * 1024
    blobs = np.random.default_rng(7).integers(0, 256, size=(rows, 1024), dtype=np.uint8)
    pq.write_table(pa.table({"b": pa.array([r.tobytes() for r in blobs], pa.binary())}),
                   path, row_group_size=1024, compression="none")
    total = path.stat().st_size
    assert split_size([str(path)], parallelism) == max(MIN_SPLIT_BYTES,
                                                       -(-total // parallelism))
    splits = FileSource(str(path)).create_enumerator(parallelism).snapshot_state(0)["pending"]
    groups = [s.end - s.start for s in splits]
    # 12 MiB at parallelism 2: two splits of 6 groups (a 64 MiB split would be one);
    # at 3, the 4 MiB floor: three of 4.
    assert groups == [12 // parallelism] * parallelism, groups
    # An explicit split_bytes is the size, whatever the parallelism.
    whole = FileSource(str(path), split_bytes=total * 2).create_enumerator(parallelism)
    assert [s.end for s in whole.snapshot_state(0)["pending"]] == [-1]
