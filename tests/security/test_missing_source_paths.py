"""A file source whose path matches nothing is refused when the job is submitted (one line,
exit 2, no job registered) instead of finishing with 0 rows; relative paths mean the
submitting process's working directory, not the daemons'. On S3, a matching prefix runs,
and wrong credentials, an unreachable endpoint or a missing bucket are one line each."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cluster import LocalCluster, job_names, user_error_line, weir_cli, write_job
from tests.support.seaweedfs import SeaweedS3
from weir.client.cluster_client import job_status_name

JOB = """
    import sys
    from weir import StreamExecutionEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    path, fmt = sys.argv[1], sys.argv[2]
    monitor = float(sys.argv[3]) if len(sys.argv) > 3 else None
    env.from_source(path, format=fmt, monitor_interval=monitor).map(str).print()
    env.execute("files")
"""


COLLECT = """
    import sys
    from weir import StreamExecutionEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    rows = env.from_source(sys.argv[1], format=sys.argv[2]).map(lambda r: r.n)
    print(sorted(rows.execute_and_collect("s3 files")))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, seaweed_s3: SeaweedS3):
    # The daemons read S3 with keys from their own environment, as on a real cluster.
    with pytest.MonkeyPatch.context() as env:
        for key, value in _s3_env(seaweed_s3).items():
            env.setenv(key, value)
        cluster = LocalCluster(tmp_path_factory.mktemp("paths") / "cluster").start(1, 2)
    yield cluster
    cluster.stop()


def _s3_env(seaweed_s3: SeaweedS3, **changes: str) -> dict[str, str]:
    return {"WEIR_S3_ENDPOINT": seaweed_s3.endpoint,
            "WEIR_S3_ACCESS_KEY": seaweed_s3.access_key,
            "WEIR_S3_SECRET_KEY": seaweed_s3.secret_key, **changes}


def _run(cluster: LocalCluster, job: Path, *args: str, cwd: Path | None = None,
         env: dict[str, str] | None = None, detached: bool = False):
    flags = ["--detached"] if detached else []
    return weir_cli("run", "--dir", str(cluster.dir), *flags, str(job), *args, cwd=cwd,
                    env=env, timeout=120)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_a_missing_path_is_refused_at_submission(cluster: LocalCluster, tmp_path: Path,
                                                 fmt: str):
    job = write_job(tmp_path, JOB)
    missing = tmp_path / "no-such-dir" / f"events.{fmt}"
    before = len(job_names(cluster))
    user_error_line(_run(cluster, job, str(missing), fmt), str(missing), "does not exist")
    user_error_line(_run(cluster, job, f"file://{missing}", fmt), str(missing), "does not exist")
    assert len(job_names(cluster)) == before, "nothing may be submitted"


def test_a_directory_without_files_of_the_format_isuser_error_line(cluster: LocalCluster,
                                                                   tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"n": [1, 2]}), data / "part-0.parquet")
    (data / "_SUCCESS").write_text("")
    job = write_job(tmp_path, JOB)
    before = len(job_names(cluster))
    user_error_line(_run(cluster, job, str(data), "csv"), str(data), "no csv files")
    assert len(job_names(cluster)) == before


def test_relative_paths_are_the_submitters(cluster: LocalCluster, tmp_path: Path):
    work = tmp_path / "work"
    (work / "input").mkdir(parents=True)
    pq.write_table(pa.table({"n": [7, 8, 9]}), work / "input" / "part-0.parquet")
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        rows = env.from_source("input", format="parquet").map(lambda r: r.n)
        print(sorted(rows.execute_and_collect("relative")))
    """)
    # The daemons run in another working directory: "input" must mean work/input here.
    ran = _run(cluster, job, cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[7, 8, 9]"

    missing = write_job(tmp_path, JOB, name="missing.py")
    user_error_line(_run(cluster, missing, "nothing-here", "parquet", cwd=work),
                    str(work / "nothing-here"), "does not exist")


def test_a_monitored_directory_must_exist_but_may_be_empty(cluster: LocalCluster,
                                                           tmp_path: Path):
    job = write_job(tmp_path, JOB)
    before = len(job_names(cluster))
    user_error_line(_run(cluster, job, str(tmp_path / "incoming"), "parquet", "0.2"),
                    str(tmp_path / "incoming"), "does not exist")
    assert len(job_names(cluster)) == before

    (tmp_path / "incoming").mkdir()
    ran = _run(cluster, job, str(tmp_path / "incoming"), "parquet", "0.2", detached=True)
    assert ran.returncode == 0, ran.stderr
    job_id = ran.stdout.strip()
    client = cluster.client()
    try:
        status = job_status_name(client.job_details(job_id).summary.status)
        assert status in ("CREATED", "RUNNING"), status
        client.cancel_job(job_id)
    finally:
        client.close()


def test_an_s3_prefix_without_objects_isuser_error_line(cluster: LocalCluster, tmp_path: Path,
                                                        seaweed_s3: SeaweedS3, s3_bucket: str):
    job = write_job(tmp_path, JOB)
    env = _s3_env(seaweed_s3)
    before = len(job_names(cluster))
    missing = f"s3://{s3_bucket}/events/2024"
    user_error_line(_run(cluster, job, missing, "parquet", env=env), missing,
                    "matches no parquet objects")
    # A prefix of another object's name is no match either: S3 keys are not directories.
    seaweed_s3.client().put_object(Bucket=s3_bucket, Key="events/2024-01.parquet", Body=b"x")
    user_error_line(_run(cluster, job, missing, "parquet", env=env), missing,
                    "matches no parquet objects")
    # Objects of another format, or hidden ones, do not match.
    for key in ("events/2024/a.csv", "events/2024/_SUCCESS", "events/2024/.b.parquet"):
        seaweed_s3.client().put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    user_error_line(_run(cluster, job, missing, "parquet", env=env), missing,
                    "matches no parquet objects")
    # A monitored source needs its bucket, not objects (they may come later).
    other = f"s3://no-such-bucket-{s3_bucket}/events"
    user_error_line(_run(cluster, job, other, "parquet", "1", env=env), other,
                    "does not exist")
    assert len(job_names(cluster)) == before


def test_an_s3_prefix_with_objects_runs(cluster: LocalCluster, tmp_path: Path,
                                        seaweed_s3: SeaweedS3, s3_bucket: str):
    # Before, such a job was refused (the file source could not read s3://).
    for i, key in enumerate(("events/part-0.parquet", "events/day=2/part-1.parquet")):
        body = io.BytesIO()
        pq.write_table(pa.table({"n": [10 * i, 10 * i + 1]}), body)
        seaweed_s3.client().put_object(Bucket=s3_bucket, Key=key, Body=body.getvalue())
    seaweed_s3.client().put_object(Bucket=s3_bucket, Key="events/_SUCCESS", Body=b"")
    job = write_job(tmp_path, COLLECT)
    ran = _run(cluster, job, f"s3://{s3_bucket}/events", "parquet", env=_s3_env(seaweed_s3))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[0, 1, 10, 11]"


def test_s3_listing_errors_are_one_line(cluster: LocalCluster, tmp_path: Path,
                                        seaweed_s3: SeaweedS3, s3_bucket: str):
    seaweed_s3.client().put_object(Bucket=s3_bucket, Key="x/part-0.parquet", Body=b"x")
    job = write_job(tmp_path, JOB)
    path = f"s3://{s3_bucket}/x"
    before = len(job_names(cluster))
    wrong = _s3_env(seaweed_s3, WEIR_S3_ACCESS_KEY="nobody", WEIR_S3_SECRET_KEY="wrong")
    user_error_line(_run(cluster, job, path, "parquet", env=wrong), path, "s3.access-key")
    wrong_secret = _s3_env(seaweed_s3, WEIR_S3_SECRET_KEY="wrong")
    user_error_line(_run(cluster, job, path, "parquet", env=wrong_secret), path,
                    "s3.secret-key")
    closed = _s3_env(seaweed_s3, WEIR_S3_ENDPOINT="http://127.0.0.1:9")
    user_error_line(_run(cluster, job, path, "parquet", env=closed), path,
                    "cannot reach S3 endpoint http://127.0.0.1:9")
    missing = f"s3://no-such-bucket-{s3_bucket}/x"
    user_error_line(_run(cluster, job, missing, "parquet", env=_s3_env(seaweed_s3)),
                    missing, "does not exist")
    assert len(job_names(cluster)) == before


def test_unsupported_schemes_areuser_error_line(cluster: LocalCluster, tmp_path: Path):
    job = write_job(tmp_path, JOB)
    user_error_line(_run(cluster, job, "hdfs://namenode/data", "parquet"), "hdfs://namenode/data")


def test_an_existing_file_still_runs(cluster: LocalCluster, tmp_path: Path):
    data = tmp_path / "one.csv"
    data.write_text("n\n1\n2\n")
    job = write_job(tmp_path, JOB)
    ran = _run(cluster, job, str(data), "csv")
    assert ran.returncode == 0, ran.stderr
    assert os.path.exists(data)
