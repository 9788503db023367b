"""Spark staging on S3: real PySpark writing locally, weir uploading to a real SeaweedFS
server; readers list committed directories only and get full ``s3://bucket/key`` URIs."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from tests.support.cluster import ClientEnvironment
from tests.support.seaweedfs import SeaweedS3
from weir.core.config import all_options
from weir.datastream.connectors.spark_stager import StreamingStager, stage_batch, write_micro_batch
from weir.datastream.connectors.spark_staging import (
    BATCH_COMMIT_DIR,
    MANIFEST_NAME,
    SUCCESS_MARKER,
    StagingError,
    commit_dir_name,
    delete_staging,
    list_committed_splits,
    read_staging_manifest,
)
from weir.testing.cluster import poll

pytestmark = pytest.mark.spark


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own $TMPDIR: where the client's local work directories go."""
    directory = tmp_path / "client-tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def _keys(server: SeaweedS3, bucket: str, prefix: str) -> list[str]:
    listing = server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def _read(server: SeaweedS3, uri: str) -> list[dict]:
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    body = server.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body)).to_pylist()


def _orders(session: SparkSession):
    from pyspark.sql import functions as sf

    return (session.range(0, 5_000, numPartitions=4)
            .withColumn("customer", sf.concat(sf.lit("c"), (sf.col("id") % 37).cast("string")))
            .withColumn("amount", (sf.col("id") % 11).cast("long")))


def test_batch_staged_on_s3_is_listed_with_full_uris(spark: SparkSession,
                                                      seaweed_s3: SeaweedS3, s3_bucket: str,
                                                      private_tmp: Path):
    conf = seaweed_s3.config(s3_bucket)
    root = f"s3://{s3_bucket}/staging/orders-1"
    result = stage_batch(_orders, root, spark=spark, config=conf)

    assert result.root == root
    assert result.rows == 5_000
    splits = list_committed_splits(root, conf)
    assert splits == result.files
    assert all(s.startswith(f"{root}/{BATCH_COMMIT_DIR}/part-") for s in splits)
    rows = [r for s in splits for r in _read(seaweed_s3, s)]
    expected = [(r["id"], r["customer"], r["amount"]) for r in _orders(spark).collect()]
    assert sorted((r["id"], r["customer"], r["amount"]) for r in rows) == sorted(expected)

    manifest = read_staging_manifest(root, conf)
    assert manifest is not None and manifest.mode == "batch"
    assert manifest.schema.names == ["id", "customer", "amount"]
    assert manifest.host and manifest.pid == os.getpid() and manifest.created
    assert manifest.job_id is None
    keys = _keys(seaweed_s3, s3_bucket, "staging/orders-1/")
    assert f"staging/orders-1/{MANIFEST_NAME}" in keys
    assert f"staging/orders-1/{BATCH_COMMIT_DIR}/{SUCCESS_MARKER}" in keys
    assert list(private_tmp.iterdir()) == [], "the local copies were not deleted"

    with pytest.raises(StagingError, match="already committed"):
        stage_batch(_orders, root, spark=spark, config=conf)

    delete_staging(root, conf)
    assert _keys(seaweed_s3, s3_bucket, "staging/orders-1/") == []
    assert list_committed_splits(root, conf) == []


def test_an_uncommitted_upload_is_invisible_and_replaced(spark: SparkSession,
                                                         seaweed_s3: SeaweedS3,
                                                         s3_bucket: str, private_tmp: Path):
    # A client that died mid-upload: Parquet objects, no _SUCCESS.
    conf = seaweed_s3.config(s3_bucket)
    root = f"s3://{s3_bucket}/stage"
    client = seaweed_s3.client()
    stray = f"stage/{BATCH_COMMIT_DIR}/part-00000-dead.snappy.parquet"
    client.put_object(Bucket=s3_bucket, Key=stray, Body=b"not parquet")
    assert list_committed_splits(root, conf) == []

    result = stage_batch(lambda s: s.range(10), root, spark=spark, config=conf)
    assert stray not in _keys(seaweed_s3, s3_bucket, "stage/")
    assert sorted(r["id"] for s in result.files for r in _read(seaweed_s3, s)) == list(range(10))
    delete_staging(root, conf)


def test_micro_batches_on_s3_are_idempotent_by_batch_id(spark: SparkSession,
                                                        seaweed_s3: SeaweedS3,
                                                        s3_bucket: str, private_tmp: Path):
    conf = seaweed_s3.config(s3_bucket)
    root = f"s3://{s3_bucket}/stream"
    first = spark.createDataFrame([(1, "a"), (2, "b")], ["n", "s"])
    assert write_micro_batch(first, 0, root, conf) is True
    committed = _keys(seaweed_s3, s3_bucket, f"stream/{commit_dir_name(0)}/")
    # A replay of batch 0 after a restart (different rows, as a re-run source might give)
    # must change nothing.
    replay = spark.createDataFrame([(9, "z")], ["n", "s"])
    assert write_micro_batch(replay, 0, root, conf) is False
    assert _keys(seaweed_s3, s3_bucket, f"stream/{commit_dir_name(0)}/") == committed
    assert write_micro_batch(replay, 1, root, conf) is True
    rows = [r["n"] for s in list_committed_splits(root, conf) for r in _read(seaweed_s3, s)]
    assert sorted(rows[:2]) == [1, 2] and rows[2:] == [9]
    assert list(private_tmp.iterdir()) == []
    delete_staging(root, conf)


@pytest.mark.extended
def test_a_streaming_query_stages_micro_batches_on_s3(spark: SparkSession,
                                                      seaweed_s3: SeaweedS3, s3_bucket: str,
                                                      private_tmp: Path):
    conf = seaweed_s3.config(s3_bucket)
    root = f"s3://{s3_bucket}/ticks"

    def ticks(session: SparkSession):
        return session.readStream.format("rate").option("rowsPerSecond", 50).load()

    stager = StreamingStager(ticks, root, spark=spark, trigger_interval_s=0.5, config=conf)
    checkpoint = Path(stager.checkpoint_dir)
    assert checkpoint.parent == private_tmp, "Spark's checkpoint stays on the client"
    stager.start()
    try:
        assert stager.wait_for_batches(3, timeout_s=90), stager.exception()
    finally:
        stager.stop()
    manifest = read_staging_manifest(root, conf)
    assert manifest is not None and manifest.mode == "streaming"
    splits = list_committed_splits(root, conf)
    directories = {s.rsplit("/", 2)[1] for s in splits}
    assert len(directories) >= 3
    values = [r["value"] for s in splits for r in _read(seaweed_s3, s)]
    assert len(values) == len(set(values)), "a row was staged twice"
    assert not checkpoint.exists(), "stop() leaves the temporary Spark checkpoint"
    poll(lambda: list(private_tmp.iterdir()) == [], 10, what="local copies deleted")
    delete_staging(root, conf)


def test_list_committed_splits_uses_the_environment_without_a_config(
        seaweed_s3: SeaweedS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch):
    # The JobMaster's enumerator lists with its own WEIR_S3_* environment.
    client = seaweed_s3.client()
    client.put_object(Bucket=s3_bucket, Key=f"env/{commit_dir_name(0)}/part-0.parquet", Body=b"x")
    client.put_object(Bucket=s3_bucket, Key=f"env/{commit_dir_name(0)}/{SUCCESS_MARKER}",
                      Body=b"")
    client.put_object(Bucket=s3_bucket, Key=f"env/{commit_dir_name(1)}/part-0.parquet", Body=b"x")
    options = all_options()
    for key, value in seaweed_s3.config(s3_bucket).options_dict().items():
        monkeypatch.setenv(options[key].env_var, value)
    assert list_committed_splits(f"s3://{s3_bucket}/env") == [
        f"s3://{s3_bucket}/env/{commit_dir_name(0)}/part-0.parquet"]


@pytest.mark.extended
def test_a_keyed_job_reads_spark_data_staged_on_s3(cluster_factory, spark: SparkSession,
                                                   seaweed_s3: SeaweedS3, s3_bucket: str):
    s3 = seaweed_s3.config(s3_bucket, "checkpoints").options_dict()
    cluster = cluster_factory(2, 2, *(f"{k}={v}" for k, v in s3.items()))
    client_conf = {**s3, "spark.staging.dir": f"s3://{s3_bucket}/staging",
                   "restart-strategy.type": "none"}
    with ClientEnvironment(cluster, **client_conf) as env:
        env.set_parallelism(2)
        sums = env.from_spark(_orders).map(lambda r: (r["customer"], r["amount"])) \
            .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
        latest: dict[str, int] = {}
        for customer, total in sums.execute_and_collect("spark on s3"):
            latest[customer] = max(latest.get(customer, 0), total)
    expected = {r["customer"]: r["total"] for r in
                _orders(spark).groupBy("customer").agg({"amount": "sum"})
                .withColumnRenamed("sum(amount)", "total").collect()}
    assert latest == expected
    # pyarrow keeps the parent "directory" (a marker object): spark.staging.dir itself.
    poll(lambda: _keys(seaweed_s3, s3_bucket, "staging/") in ([], ["staging/"]), 30,
         what="the JobMaster to delete the staging on S3")


@pytest.mark.extended
def test_a_streaming_job_reads_micro_batches_staged_on_s3(cluster_factory, spark: SparkSession,
                                                          seaweed_s3: SeaweedS3,
                                                          s3_bucket: str):
    # The JobMaster lists the committed micro-batches with its own s3.* options (the
    # client's secret key is not in the job graph).
    s3 = seaweed_s3.config(s3_bucket, "checkpoints").options_dict()
    cluster = cluster_factory(1, 2, *(f"{k}={v}" for k, v in s3.items()))
    client_conf = {**s3, "source.monitor-interval": "200 ms",
                   "spark.streaming.trigger-interval": "500 ms"}

    def ticks(session: SparkSession):
        return session.readStream.format("rate").option("rowsPerSecond", 40).load()

    received: list[int] = []
    with ClientEnvironment(cluster, **client_conf) as env:
        values = env.from_spark(ticks, streaming=True).map(lambda r: r["value"]) \
            .execute_and_collect("spark stream on s3")
        with values:
            for value in values:
                received.append(value)
                if len(received) >= 60:
                    break
    assert len(received) == len(set(received)), "a record was delivered twice"
    # Staged under <state.checkpoints.dir>/spark-staging, deleted once the job ended.
    poll(lambda: _keys(seaweed_s3, s3_bucket, "checkpoints/spark-staging/") in
         ([], ["checkpoints/spark-staging/"]), 60, what="the staging on S3 to be deleted")
