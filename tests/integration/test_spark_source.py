"""Spark feeds the sources: batch staging and Structured Streaming micro-batches."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cluster import ClientEnvironment, LocalCluster

pytestmark = pytest.mark.spark


def test_batch_spark_source_equals_spark_group_by(shared_cluster: LocalCluster, spark,
                                                  tmp_path: Path):
    def orders(session):
        from pyspark.sql import functions as sf

        return (session.range(0, 60_000, numPartitions=6)
                .withColumn("customer", sf.concat(sf.lit("c"), (sf.col("id") * 7919 % 113)
                                                  .cast("string")))
                .withColumn("amount", (sf.col("id") % 97).cast("long"))
                .filter(sf.col("id") % 5 != 0))

    with ClientEnvironment(shared_cluster, **{"spark.staging.dir": str(tmp_path)}) as env:
        env.set_parallelism(2)
        sums = env.from_spark(orders).key_by("customer").sum("amount")
        latest: dict[str, int] = {}
        updates = 0
        for customer, total in sums.execute_and_collect("spark batch"):
            latest[customer] = max(latest.get(customer, 0), total)
            updates += 1
    expected = {r["customer"]: r["total"] for r in
                orders(spark).groupBy("customer").agg({"amount": "sum"})
                .withColumnRenamed("sum(amount)", "total").collect()}
    assert updates == orders(spark).count()
    assert latest == expected


def test_rows_from_spark_read_by_name_and_position(shared_cluster: LocalCluster, spark,
                                                   tmp_path: Path):
    def people(session):
        return session.createDataFrame([("ada", 36), ("alan", 41)], ["name", "age"])

    with ClientEnvironment(shared_cluster, **{"spark.staging.dir": str(tmp_path)}) as env:
        got = sorted(env.from_spark(people)
                     .map(lambda r: (r.name, r["age"], r[0] == r.name))
                     .execute_and_collect())
    assert got == [("ada", 36, True), ("alan", 41, True)]


@pytest.mark.extended
def test_streaming_spark_source_delivers_each_micro_batch_exactly_once(
        shared_cluster: LocalCluster, spark, tmp_path: Path):
    staging = tmp_path / "stream"

    def ticks(session):
        return (session.readStream.format("rate").option("rowsPerSecond", 40)
                .option("numPartitions", 2).load())

    from weir.datastream.connectors.spark_staging import list_committed_splits

    def complete_batches(got: set[int]) -> int:
        """Non-empty committed micro-batches whose every row was received."""
        per_batch: dict[str, list[int]] = {}
        for split in list_committed_splits(str(staging)):
            per_batch.setdefault(Path(split).parent.name, []).extend(
                pq.read_table(split).column("value").to_pylist())
        return sum(1 for rows in per_batch.values() if rows and set(rows) <= got)

    received: list[int] = []
    with ClientEnvironment(shared_cluster, **{"source.monitor-interval": "200 ms",
                                              "spark.streaming.trigger-interval": "1 s"}) as env:
        values = (env.from_spark(ticks, streaming=True, staging=str(staging))
                  .map(lambda r: r["value"]).execute_and_collect("spark streaming"))
        with values:
            for value in values:
                received.append(value)
                if len(received) >= 120 and len(received) % 10 == 0 and \
                        complete_batches(set(received)) >= 3:
                    break
    splits = list_committed_splits(str(staging))
    per_split = [pq.read_table(s).column("value").to_pylist() for s in splits]
    staged = [v for values_ in per_split for v in values_]
    assert len(received) == len(set(received)), "a record was delivered twice"
    assert set(received) <= set(staged), "a record was delivered that Spark never staged"
    # The one source reader reads splits in order: everything received is whole splits
    # plus at most one split in progress when the job was cancelled.
    fully = [s for s in per_split if s and set(s) <= set(received)]
    partial = [s for s in per_split if set(s) & set(received) and not set(s) <= set(received)]
    assert len(partial) <= 1
    assert sum(len(s) for s in fully) + sum(len(set(s) & set(received)) for s in partial) \
        == len(received)
    assert len({Path(splits[i]).parent.name for i, s in enumerate(per_split)
                if s and set(s) <= set(received)}) >= 3, "at least 3 micro-batches delivered"
