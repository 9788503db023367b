"""File source: read throughput of one Parquet file from S3 (SeaweedFS on loopback) against
the same file on the local disk.

What is measured
----------------
One Parquet file of about ``--mb`` MB (random int64, float64 and 16-character string
columns, so it hardly compresses; row groups of ``ROW_GROUP_ROWS`` rows) is written under
``build/bench-file-source/`` and uploaded to a SeaweedFS server started here. Each run
reads every row once, in one thread, through weir's reader (``FileReader`` over the splits
``split_file`` makes, ranges of row groups of about 64 MB, batches of the default
``pipeline.batch-size``), from the local path and from its ``s3://`` URI. For reference,
pyarrow's own ``ParquetFile.iter_batches`` reads the same file the same two ways. The
median of ``--runs`` runs (rows/s), after one warm-up run, is reported; the S3 server runs
on the same 2 cores as the reader, so S3 pays for both ends of every request.

Results: a table on stdout and ``benchmarks/results/file_source.json`` (``rows``,
``file_mb``, ``row_groups``, ``splits``, and per case the run times and the median rows/s;
``s3_over_local``: the S3 reader's rows/s over the local one's).

Usage::

    python benchmarks/bench_file_source.py --quick      # a 20 MB file, 2 runs: ~30 s
    python benchmarks/bench_file_source.py              # a 100 MB file, 3 runs
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import (
    BUILD_DIR,
    RESULTS_DIR,
    engine_revision,
    format_table,
    machine_info,
    median,
    rate,
    write_json,
)

from weir.core.config import Configuration
from weir.core.object_store import filesystem
from weir.core.options import BATCH_SIZE
from weir.datastream.connectors.file_splits import FileReader, split_file

WORK_DIR = BUILD_DIR / "bench-file-source"
BUCKET = "file-source-bench"
#: Rows per row group: a 100 MB file has about 8.
ROW_GROUP_ROWS = 400_000
#: Bytes per row of the generated file (8 + 8 + 16 characters, plus Parquet's overhead).
ROW_BYTES = 36


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def write_file(path: Path, mb: int) -> int:
    """A Parquet file of about ``mb`` MB; returns its number of rows."""
    rows = mb * 1_000_000 // ROW_BYTES
    rng = np.random.default_rng(7)
    writer: pq.ParquetWriter | None = None
    for start in range(0, rows, ROW_GROUP_ROWS):
        n = min(ROW_GROUP_ROWS, rows - start)
        words = rng.integers(0, 256, size=(n, 8), dtype=np.uint8)
        table = pa.table({
            "id": pa.array(rng.integers(0, 1 << 62, size=n)),
            "value": pa.array(rng.random(n)),
            "word": pa.array([bytes(w).hex() for w in words]),
        })
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    assert writer is not None
    writer.close()
    return rows


def read_weir(path: str, config: Configuration) -> int:
    """Every row of ``path`` through weir's reader, split as the enumerator would."""
    reader = FileReader(config.get(BATCH_SIZE), config)
    reader.add_splits(split_file(path, "parquet", configuration=config))
    rows = 0
    while (batch := reader.poll()) is not None:
        rows += len(batch)
    reader.close()
    return rows


def read_pyarrow(path: str, config: Configuration) -> int:
    """Every row of ``path`` with pyarrow alone (the same file system, one pass)."""
    fs, location = filesystem(path, config)
    with pq.ParquetFile(location, filesystem=fs) as parquet:
        return sum(b.num_rows for b in parquet.iter_batches(batch_size=config.get(BATCH_SIZE)))


def measure(read: Callable[[str, Configuration], int], path: str, config: Configuration,
            runs: int, rows: int) -> dict[str, Any]:
    read(path, config)  # warm-up (imports, the page cache, S3 connections): not counted
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        got = read(path, config)
        times.append(time.perf_counter() - started)
        if got != rows:
            msg = f"read {got} rows of {path}, expected {rows}"
            raise AssertionError(msg)
    return {"seconds": times, "rows_per_s": rows / median(times)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 20 MB file, 2 runs")
    parser.add_argument("--mb", type=int, help="size of the Parquet file (default 100)")
    parser.add_argument("--runs", type=int, help="runs per case (default 3; quick 2)")
    parser.add_argument("--no-revision", action="store_true",
                        help="do not record the engine's git revision")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "file_source.json")
    args = parser.parse_args(argv)
    args.mb = args.mb or (20 if args.quick else 100)
    args.runs = args.runs or (2 if args.quick else 3)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    info = machine_info()
    revision = None if args.no_revision else engine_revision()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.seaweedfs import SeaweedS3

    shutil.rmtree(WORK_DIR, ignore_errors=True)
    WORK_DIR.mkdir(parents=True)
    local = WORK_DIR / "data.parquet"
    say(f"writing a {args.mb} MB Parquet file ...")
    rows = write_file(local, args.mb)
    size = local.stat().st_size
    groups = pq.ParquetFile(local).metadata.num_row_groups
    seaweed = SeaweedS3(data_dir=WORK_DIR / "seaweed").start()
    result: dict[str, Any] = {"benchmark": "file_source", "quick": args.quick,
                              "runs": args.runs, "rows": rows, "file_mb": size / 1e6,
                              "row_groups": groups}
    try:
        seaweed.client().create_bucket(Bucket=BUCKET)
        seaweed.client().upload_file(str(local), BUCKET, "data.parquet")
        config = seaweed.config(BUCKET)
        uri = f"s3://{BUCKET}/data.parquet"
        result["splits"] = len(split_file(uri, "parquet", configuration=config))
        cases = {"weir local": (read_weir, str(local)), "weir s3": (read_weir, uri),
                 "pyarrow local": (read_pyarrow, str(local)), "pyarrow s3": (read_pyarrow, uri)}
        result["cases"] = {}
        for name, (read, path) in cases.items():
            say(f"{name}: {args.runs} runs ...")
            result["cases"][name] = measure(read, path, config, args.runs, rows)
    finally:
        seaweed.stop()
        shutil.rmtree(WORK_DIR, ignore_errors=True)
    cases_out = result["cases"]
    result["s3_over_local"] = (cases_out["weir s3"]["rows_per_s"]
                               / cases_out["weir local"]["rows_per_s"])
    result["machine"] = info
    result["engine"] = revision
    write_json(args.output, result)
    print(f"{rows:,} rows, {size / 1e6:.0f} MB, {groups} row groups, "
          f"{result['splits']} splits")
    print(format_table(["case", "rows/s (median)", "runs (s)"],
                       [[name, rate(case["rows_per_s"]),
                         " ".join(f"{t:.2f}" for t in case["seconds"])]
                        for name, case in cases_out.items()]))
    print(f"S3 / local (weir's reader): {result['s3_over_local']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
