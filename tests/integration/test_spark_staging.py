"""Integration tests of the Spark -> weir staging contract, on a real local PySpark session.

All tests share one SparkSession (``tests.support.spark``); synchronisation with the
streaming query is by polling with a deadline, never by sleeping.
"""

# The shared ``spark`` fixture is imported below; test arguments named ``spark`` use it.
# ruff: noqa: F811

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from examples.clickstream_data import (
    BOT_PATTERN,
    COLUMNS,
    DAY_START_UTC_S,
    PAGES,
    click_events,
    raw_click_events,
)
from tests.support.spark import spark  # noqa: F401  (session-scoped fixture)
from weir.datastream.connectors.spark_stager import (
    SparkQueryError,
    StreamingStager,
    stage_batch,
    write_micro_batch,
)
from weir.datastream.connectors.spark_staging import (
    BATCH_COMMIT_DIR,
    CHECKPOINT_DIR_NAME,
    MANIFEST_NAME,
    SUCCESS_MARKER,
    StagingError,
    commit_dir_name,
    list_committed_splits,
    read_staging_manifest,
)

pytestmark = pytest.mark.spark


def _sorted_rows(table: pa.Table, key: str) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda row: row[key])


def _read_splits(paths: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in paths])


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def _small_query(spark: SparkSession) -> DataFrame:
    return spark.range(0, 1000, 1, 3).select(
        sf.col("id"),
        (sf.col("id") % 7).cast("int").alias("k"),
        sf.concat(sf.lit("v-"), sf.col("id").cast("string")).alias("s"),
        sf.when(sf.col("id") % 10 == 0, None).otherwise(sf.col("id") * 0.5).alias("x"),
        sf.timestamp_micros(sf.col("id") * 1_000_003).alias("t"),
    )


# --------------------------------------------------------------------------------------------
# batch


def test_stage_batch_splits_equal_query_result(spark: SparkSession, tmp_path: Path) -> None:
    staging = tmp_path / "stage"
    result = stage_batch(_small_query, str(staging), spark=spark)

    commit_dir = staging / BATCH_COMMIT_DIR
    assert (commit_dir / SUCCESS_MARKER).is_file()
    assert result.root == str(staging)
    assert result.rows == 1000
    assert len(result.files) == 3  # one split per partition of the query
    assert all(Path(f).parent == commit_dir and f.endswith(".parquet") for f in result.files)
    assert result.files == list_committed_splits(str(staging))
    assert list_committed_splits(staging.as_uri()) == ["file://" + f for f in result.files]
    assert not [p for p in staging.iterdir() if p.name.startswith("_tmp-")]

    expected = _small_query(spark).toArrow()
    staged = _read_splits(result.files)
    assert staged.num_rows == result.rows
    assert staged.column_names == expected.column_names
    assert _sorted_rows(staged, "id") == _sorted_rows(expected, "id")

    manifest = read_staging_manifest(str(staging))
    assert manifest is not None and manifest.mode == "batch"
    for split in result.files:  # the manifest schema is what readers get from every footer
        assert pq.read_schema(split).remove_metadata().equals(manifest.schema)
    assert manifest.schema.field("t").type == pa.timestamp("us", tz="UTC")


def test_committed_batch_is_immutable(spark: SparkSession, tmp_path: Path) -> None:
    staging = tmp_path / "stage"
    stage_batch(lambda s: s.range(10), str(staging), spark=spark)
    before = _snapshot(staging / BATCH_COMMIT_DIR)

    with pytest.raises(StagingError, match="already committed"):
        stage_batch(lambda s: s.range(20), str(staging), spark=spark)
    with pytest.raises(StagingError, match="holds a batch result"):
        StreamingStager(
            lambda s: s.readStream.format("rate").load(), str(staging), spark=spark
        ).start()
    assert _snapshot(staging / BATCH_COMMIT_DIR) == before


@pytest.mark.parametrize(
    ("query", "message"),
    [
        pytest.param(lambda s: s.table("no_such_table"), r"TABLE_OR_VIEW_NOT_FOUND", id="analysis"),
        pytest.param(
            lambda s: (_ for _ in ()).throw(ValueError("bad input")),
            r"raised ValueError: bad input$",
            id="python-raise",
        ),
        pytest.param(
            lambda s: s.range(3).collect(),
            r"returned builtins\.list, expected a pyspark\.sql\.DataFrame$",
            id="not-a-dataframe",
        ),
        pytest.param(
            lambda s: s.readStream.format("rate").load(),
            r"returned a streaming DataFrame; stage_batch needs a batch DataFrame",
            id="streaming-dataframe",
        ),
        pytest.param(
            lambda s: s.range(5).select(sf.raise_error(sf.lit("boom at runtime"))),
            r"Spark job of query .* failed: .*boom at runtime",
            id="job-fails",
        ),
    ],
)
def test_stage_batch_bad_query(spark: SparkSession, tmp_path: Path, query, message: str) -> None:
    staging = tmp_path / "stage"
    with pytest.raises(SparkQueryError) as info:
        stage_batch(query, str(staging), spark=spark)
    text = str(info.value)
    assert "\n" not in text and len(text) < 400, text
    assert re.search(message, text), text
    assert list_committed_splits(str(staging)) == []
    assert not staging.exists() or not [p for p in staging.iterdir() if p.name != MANIFEST_NAME]


def test_streaming_stager_rejects_batch_query(spark: SparkSession, tmp_path: Path) -> None:
    stager = StreamingStager(lambda s: s.range(3), str(tmp_path / "stage"), spark=spark)
    with pytest.raises(SparkQueryError, match="StreamingStager needs a streaming DataFrame"):
        stager.start()
    assert stager.exception() is None
    stager.stop()  # never started: a no-op


# --------------------------------------------------------------------------------------------
# streaming


def _rate_query(spark: SparkSession) -> DataFrame:
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .option("numPartitions", 2)
        .load()
        .select(sf.col("value").alias("row_id"), sf.col("timestamp").alias("ts"))
    )


def _committed_dirs(staging: Path) -> list[str]:
    return sorted({Path(p).parent.name for p in list_committed_splits(str(staging))})


def _assert_exactly_once(staging: Path) -> int:
    """Every rate-source row id 0..n-1 appears exactly once over all committed splits."""
    ids = _read_splits(list_committed_splits(str(staging))).column("row_id").to_pylist()
    assert sorted(ids) == list(range(len(ids))), "row ids missing or duplicated"
    return len(ids)


def _run_until(stager: StreamingStager, staging: Path, batches: int, timeout_s: float) -> None:
    """Poll until ``batches`` new commits; each listing must extend the previous one."""
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    while not stager.wait_for_batches(batches, timeout_s=0.5):
        assert stager.exception() is None, stager.exception()
        assert stager.is_active
        assert time.monotonic() < deadline, f"{stager.batches_committed} < {batches} batches"
        listing = list_committed_splits(str(staging))
        assert listing[: len(seen)] == seen, "a visible split changed or disappeared"
        assert all("/_" not in p[len(str(staging)) :] for p in listing)
        seen = listing


def _forget_last_visible_batch(staging: Path) -> int:
    """Edit Spark's checkpoint so that the last visible micro-batch is replayed on restart.

    Batches Spark planned (offset log) but that never became visible are forgotten, then the
    commit-log entry of the last visible one is removed: Spark re-runs a planned batch whose
    commit is missing.
    """
    checkpoint = staging / CHECKPOINT_DIR_NAME

    def forget(log: str, batch_id: int) -> None:
        (checkpoint / log / str(batch_id)).unlink(missing_ok=True)
        (checkpoint / log / f".{batch_id}.crc").unlink(missing_ok=True)

    planned = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    for batch_id in reversed(planned):
        if (staging / commit_dir_name(batch_id) / SUCCESS_MARKER).is_file():
            forget("commits", batch_id)
            return batch_id
        forget("commits", batch_id)
        forget("offsets", batch_id)
    raise AssertionError("no visible micro-batch to replay")


@pytest.mark.extended
def test_streaming_stager_commits_micro_batches(spark: SparkSession, tmp_path: Path) -> None:
    staging = tmp_path / "stream"
    stager = StreamingStager(_rate_query, str(staging), spark=spark, trigger_interval_s=0.5)
    assert stager.start() is stager
    try:
        _run_until(stager, staging, 3, timeout_s=90)
    finally:
        started = time.monotonic()
        stager.stop(timeout_s=30)
        stop_s = time.monotonic() - started
    assert stop_s < 30
    assert not stager.is_active
    assert stager.exception() is None

    dirs = _committed_dirs(staging)
    assert len(dirs) >= 3 and stager.batches_committed == len(dirs)
    assert dirs == [commit_dir_name(n) for n in range(len(dirs))]
    splits = list_committed_splits(str(staging))
    assert splits == sorted(splits, key=lambda p: (Path(p).parent.name, Path(p).name))
    first_run_rows = _assert_exactly_once(staging)
    assert first_run_rows > 0
    manifest = read_staging_manifest(str(staging))
    assert manifest is not None and manifest.mode == "streaming"
    assert manifest.schema.names == ["row_id", "ts"]
    assert pq.read_schema(splits[0]).remove_metadata().equals(manifest.schema)

    # Make Spark replay the last visible micro-batch after a restart.
    last = _forget_last_visible_batch(staging)
    replayed_dir = staging / commit_dir_name(last)
    before = _snapshot(replayed_dir)

    restarted = StreamingStager(_rate_query, str(staging), spark=spark, trigger_interval_s=0.5)
    restarted.start()
    try:
        _run_until(restarted, staging, 1, timeout_s=90)
    finally:
        restarted.stop(timeout_s=30)
    assert restarted.exception() is None
    assert restarted.batches_replayed >= 1  # the replay was seen, and skipped
    assert _snapshot(replayed_dir) == before
    dirs = _committed_dirs(staging)
    assert dirs == [commit_dir_name(n) for n in range(len(dirs))]
    assert _assert_exactly_once(staging) > first_run_rows


def test_streaming_stager_reports_query_failure(spark: SparkSession, tmp_path: Path) -> None:
    staging = tmp_path / "stream"

    def failing(s: SparkSession) -> DataFrame:
        return _rate_query(s).select(sf.raise_error(sf.lit("stream went wrong")).alias("x"))

    stager = StreamingStager(failing, str(staging), spark=spark, trigger_interval_s=0.2).start()
    started = time.monotonic()
    try:
        # Returns early, False, once the query died (Spark may commit an empty first batch).
        assert stager.wait_for_batches(10_000, timeout_s=60) is False
        assert time.monotonic() - started < 60
        assert not stager.is_active
        error = stager.exception()
        assert error is not None and "stream went wrong" in str(error)
    finally:
        stager.stop(timeout_s=30)
    splits = list_committed_splits(str(staging))
    assert stager.batches_committed == len({Path(p).parent for p in splits})
    assert sum(pq.read_metadata(p).num_rows for p in splits) == 0  # no failed batch visible
    assert not [p for p in staging.iterdir() if p.name.startswith("_tmp-")]


def test_write_micro_batch_is_idempotent(spark: SparkSession, tmp_path: Path) -> None:
    staging = tmp_path / "stage"
    assert write_micro_batch(spark.range(0, 10, 1, 2), 7, str(staging)) is True
    committed = staging / commit_dir_name(7)
    before = _snapshot(committed)
    assert SUCCESS_MARKER in before

    # The same batch id again (a replay), with different data: the first commit stays.
    assert write_micro_batch(spark.range(100, 200, 1, 3), 7, str(staging)) is False
    assert _snapshot(committed) == before
    splits = list_committed_splits(str(staging))
    assert splits and all(Path(p).parent == committed for p in splits)
    assert sorted(_read_splits(splits).column("id").to_pylist()) == list(range(10))

    # An invisible leftover under the final name (no _SUCCESS) is replaced, not trusted.
    leftover = staging / commit_dir_name(8)
    leftover.mkdir()
    pq.write_table(pa.table({"id": [999]}), leftover / "part-00000-stale.parquet")
    assert len(list_committed_splits(str(staging))) == len(splits)
    assert write_micro_batch(spark.range(10, 12), 8, str(staging)) is True
    ids = _read_splits(list_committed_splits(str(staging))).column("id").to_pylist()
    assert sorted(ids) == list(range(12))
    assert not [p for p in staging.iterdir() if p.name.startswith("_tmp-")]


def test_list_committed_splits_follows_the_contract(tmp_path: Path) -> None:
    """Pure pyarrow: which directories and files are splits, and in which order."""
    root = tmp_path / "stage"
    assert list_committed_splits(str(root)) == []  # no root yet: no splits

    def make(directory: str, files: list[str], committed: bool) -> None:
        path = root / directory
        path.mkdir(parents=True)
        for name in files:
            pq.write_table(pa.table({"x": [1]}), path / name)
        if committed:
            (path / SUCCESS_MARKER).touch()

    make("batch-000000000010", ["part-00001.parquet", "part-00000.parquet"], True)
    make("batch-000000000002", ["b.parquet", "a.parquet", "_meta.parquet", ".a.parquet"], True)
    make("batch-000000000011", ["part-00000.parquet"], False)  # not committed
    make("_tmp-batch-000000000003-abc", ["part-00000.parquet"], True)  # about to be renamed
    make(CHECKPOINT_DIR_NAME, ["x.parquet"], True)
    (root / "batch-000000000002" / "notes.txt").write_text("not a split")
    (root / "stray.parquet").touch()

    expected = [
        root / "batch-000000000002" / "a.parquet",
        root / "batch-000000000002" / "b.parquet",
        root / "batch-000000000010" / "part-00000.parquet",
        root / "batch-000000000010" / "part-00001.parquet",
    ]
    assert list_committed_splits(str(root)) == [str(p) for p in expected]
    assert list_committed_splits(root.as_uri()) == [p.as_uri() for p in expected]
    assert list_committed_splits(str(root) + os.sep) == [str(p) for p in expected]
    assert read_staging_manifest(str(root)) is None


# --------------------------------------------------------------------------------------------
# example data


@pytest.mark.extended
def test_click_events_are_clean_and_as_documented(spark: SparkSession) -> None:
    rows, users = 20_000, 500
    raw = raw_click_events(spark, rows, users).cache()
    clean = click_events(spark, rows, users, partitions=4).cache()
    try:
        assert clean.dtypes == list(COLUMNS)
        assert clean.rdd.getNumPartitions() == 4

        # Dirt was injected...
        dirty_ids = {
            kind: {r.event_id for r in raw.where(cond).select("event_id").collect()}
            for kind, cond in {
                "null user": sf.col("user").isNull(),
                "negative duration": sf.col("duration_ms") < 0,
                "bot": sf.col("user_agent").rlike(BOT_PATTERN),
            }.items()
        }
        for kind, ids in dirty_ids.items():
            assert len(ids) > 20, f"too few {kind} rows injected: {len(ids)}"
        duplicated = raw.groupBy("event_id").count().where("count > 1").count()
        assert duplicated > 50
        assert raw.select("event_id").distinct().count() == rows

        # ... and cleaning removed exactly that.
        stats = clean.agg(
            sf.count("*").alias("n"),
            sf.countDistinct("event_id").alias("ids"),
            sf.sum(sf.col("user").isNull().cast("int")).alias("null_users"),
            sf.sum((sf.col("duration_ms") < 0).cast("int")).alias("negative"),
            sf.min("ts").alias("min_ts"),
            sf.max("ts").alias("max_ts"),
        ).first()
        assert stats.n == stats.ids, "event_id is not unique"
        assert stats.null_users == 0 and stats.negative == 0
        all_dirty = set().union(*dirty_ids.values())
        assert stats.n == rows - len(all_dirty)
        kept = {r.event_id for r in clean.select("event_id").collect()}
        assert not kept & all_dirty

        assert DAY_START_UTC_S <= stats.min_ts.timestamp() < DAY_START_UTC_S + 86_400
        assert DAY_START_UTC_S <= stats.max_ts.timestamp() < DAY_START_UTC_S + 86_400
        bad_values = clean.where(
            ~sf.col("user").rlike(r"^user-\d{5}$")
            | ~sf.col("page").isin(*PAGES)
            | ~sf.col("country").rlike("^[A-Z]{2}$")
            | ~sf.col("device").isin("mobile", "desktop", "tablet")
            | sf.col("referrer").isNull()
        ).count()
        assert bad_values == 0
        assert len(PAGES) >= 40 and clean.select("page").distinct().count() >= 35

        # Skewed users; each user lives in exactly one partition.
        per_user = sorted(r["count"] for r in clean.groupBy("user").count().collect())
        assert per_user[-1] > 20 * per_user[len(per_user) // 2]
        spread = (
            clean.withColumn("partition", sf.spark_partition_id())
            .groupBy("user")
            .agg(sf.countDistinct("partition").alias("partitions"))
        )
        assert spread.agg(sf.max("partitions")).first()[0] == 1

        # Deterministic: same rows again, whatever the partitioning.
        again = click_events(spark, rows, users, partitions=3)
        assert _sorted_rows(again.toArrow(), "event_id") == _sorted_rows(
            clean.toArrow(), "event_id"
        )
    finally:
        raw.unpersist()
        clean.unpersist()


@pytest.mark.extended
def test_click_events_default_size_has_a_million_clean_rows(spark: SparkSession) -> None:
    assert click_events(spark).count() >= 1_000_000
