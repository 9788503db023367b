"""A job on real daemons reads Parquet and CSV from s3://, split across its subtasks, with
the daemons' S3 keys in their environment only (the job graph carries none), and its
output is what pyarrow computes from the same objects."""

from __future__ import annotations

import io
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from tests.support.cluster import ClientEnvironment, LocalCluster
from tests.support.seaweedfs import SeaweedS3
from weir.datastream.connectors.file_system import FileSource

ROWS = 20_000


def test_a_job_reads_parquet_and_csv_from_s3(cluster_factory: Callable[..., LocalCluster],
                                              seaweed_s3: SeaweedS3, s3_bucket: str,
                                              monkeypatch: pytest.MonkeyPatch):
    data = pa.table({"user": [f"u{n % 97}" for n in range(ROWS)],
                     "amount": [n % 1000 for n in range(ROWS)]})
    client = seaweed_s3.client()
    parquet = io.BytesIO()
    pq.write_table(data.slice(0, ROWS // 2), parquet, row_group_size=1000)
    client.put_object(Bucket=s3_bucket, Key="in/parquet/part-0.parquet", Body=parquet.getvalue())
    client.put_object(Bucket=s3_bucket, Key="in/parquet/_SUCCESS", Body=b"")
    csv = io.BytesIO()
    pcsv.write_csv(data.slice(ROWS // 2), csv)
    client.put_object(Bucket=s3_bucket, Key="in/csv/events.csv", Body=csv.getvalue())

    # The daemons (and this client) get the keys from their environment; the job's own
    # configuration has no s3.* option, so the daemons must use theirs.
    monkeypatch.setenv("WEIR_S3_ENDPOINT", seaweed_s3.endpoint)
    monkeypatch.setenv("WEIR_S3_ACCESS_KEY", seaweed_s3.access_key)
    monkeypatch.setenv("WEIR_S3_SECRET_KEY", seaweed_s3.secret_key)
    cluster = cluster_factory(2, 2)
    with ClientEnvironment(cluster) as env:
        env.set_parallelism(3)
        # Small splits: several row-group ranges and byte ranges, read by every subtask.
        rows = env.from_source(FileSource(f"s3://{s3_bucket}/in/parquet", "parquet",
                                          split_bytes=len(parquet.getvalue()) // 4)) \
            .union(env.from_source(FileSource(f"s3://{s3_bucket}/in/csv", "csv",
                                              split_bytes=len(csv.getvalue()) // 5))) \
            .map(lambda r: (r.user, r.amount)) \
            .key_by(lambda t: t[0]) \
            .reduce(lambda a, b: (a[0], a[1] + b[1]))
        got = list(rows.execute_and_collect("s3 files"))

    # The last running total per user is the sum pyarrow computes.
    final: dict[str, int] = {}
    for user, total in got:
        final[user] = max(final.get(user, 0), total)
    sums = data.group_by("user").aggregate([("amount", "sum")])
    assert final == dict(zip(sums["user"].to_pylist(), sums["amount_sum"].to_pylist(),
                             strict=True))
    assert len(got) == ROWS
    assert pc.sum(data["amount"]).as_py() == sum(final.values())
