"""A job whose file sources read Parquet and CSV from ``s3://`` on TaskExecutor hosts that
share no file with the client: the committed output equals what the test computes from the
rows it uploaded."""

from __future__ import annotations

import io
from collections import Counter

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from tests.cluster.keyed_job import committed, start_cluster
from tests.support.exactly_once import diff

pytestmark = pytest.mark.extended

JOB = '''
import sys

from weir import FileSink, StreamExecutionEnvironment

PARQUET, CSV, OUT = sys.argv[1], sys.argv[2], sys.argv[3]

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
parquet = env.from_source(PARQUET, format="parquet").map(
    lambda r: ("parquet", r["id"], r["name"]))
csv = env.from_source(CSV, format="csv").map(lambda r: ("csv", r["id"], r["name"]))
parquet.union(csv).sink_to(FileSink(OUT))
env.execute("files from s3")
'''


def upload(client, bucket: str, key: str, data: bytes) -> None:
    client.put_object(Bucket=bucket, Key=key, Body=data)


def test_parquet_and_csv_from_s3_give_exact_output(hosts, seaweed_s3, s3_bucket):
    cluster = start_cluster(hosts, seaweed_s3, s3_bucket, taskexecutors=2)
    client = seaweed_s3.client()
    expected: Counter[tuple[str, int, str]] = Counter()
    for part in range(3):
        ids = list(range(part * 1000, part * 1000 + 1000))
        table = pa.table({"id": ids, "name": [f"p{i}" for i in ids]})
        sink = io.BytesIO()
        pq.write_table(table, sink)
        upload(client, s3_bucket, f"in/parquet/part-{part}.parquet", sink.getvalue())
        expected.update(("parquet", i, f"p{i}") for i in ids)
        csv_table = pa.table({"id": ids, "name": [f"c{i}" for i in ids]})
        sink = io.BytesIO()
        pacsv.write_csv(csv_table, sink)
        upload(client, s3_bucket, f"in/csv/part-{part}.csv", sink.getvalue())
        expected.update(("csv", i, f"c{i}") for i in ids)

    job = cluster.client.write("/tmp/work/job.py", JOB)
    # The client host holds no S3 keys (the daemons do): the JobMaster lists the input
    # and plans the splits with its own.
    result = cluster.client.weir(
        "run", "--jobmaster", cluster.address, *(f"-D{o}" for o in cluster.daemon_options),
        str(job), f"s3://{s3_bucket}/in/parquet/", f"s3://{s3_bucket}/in/csv/",
        f"s3://{s3_bucket}/out", timeout=180)
    assert result.returncode == 0, result.stderr
    got = committed(seaweed_s3, s3_bucket, "out")
    assert got == expected, diff(expected, got)


def test_a_prefix_matching_nothing_fails_the_job_once(hosts, seaweed_s3, s3_bucket):
    # A client without keys cannot check the input before submission: the JobMaster's
    # enumerator refuses it, and the job fails at once instead of finishing with 0 rows
    # or restarting.
    cluster = start_cluster(hosts, seaweed_s3, s3_bucket, taskexecutors=2)
    upload(seaweed_s3.client(), s3_bucket, "in/csv/part-0.csv", b"id,name\n1,a\n")
    job = cluster.client.write("/tmp/work/job.py", JOB)
    result = cluster.client.weir(
        "run", "--jobmaster", cluster.address, *(f"-D{o}" for o in cluster.daemon_options),
        "-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.attempts=3",
        str(job), f"s3://{s3_bucket}/in/missing/", f"s3://{s3_bucket}/in/csv/",
        f"s3://{s3_bucket}/out", timeout=180)
    assert result.returncode != 0
    assert "matches no parquet files as the JobMaster lists it" in result.stderr, \
        result.stderr
    assert "Traceback" not in result.stderr
    assert committed(seaweed_s3, s3_bucket, "out") == Counter()
