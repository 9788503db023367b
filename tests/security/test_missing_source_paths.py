"""A file source whose path matches nothing is refused when the job is submitted (one line,
exit 2, no job registered) instead of finishing with 0 rows; relative paths mean the
submitting process's working directory, not the daemons'."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = LocalCluster(tmp_path_factory.mktemp("paths") / "cluster").start(1, 2)
    yield cluster
    cluster.stop()






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
    env = {"WEIR_S3_ENDPOINT": seaweed_s3.endpoint,
           "WEIR_S3_ACCESS_KEY": seaweed_s3.access_key,
           "WEIR_S3_SECRET_KEY": seaweed_s3.secret_key}
    before = len(job_names(cluster))
    missing = f"s3://{s3_bucket}/events/2024"
    user_error_line(_run(cluster, job, missing, "parquet", env=env), missing, "no objects")
    # A prefix of another object's name is no match either: S3 keys are not directories.
    seaweed_s3.client().put_object(Bucket=s3_bucket, Key="events/2024-01.parquet", Body=b"x")
    user_error_line(_run(cluster, job, missing, "parquet", env=env), missing, "no objects")
    user_error_line(_run(cluster, job, missing, "parquet", "1", env=env), missing)
    assert len(job_names(cluster)) == before


def test_an_s3_prefix_with_objects_is_refused_as_unreadable(cluster: LocalCluster,
                                                            tmp_path: Path,
                                                            seaweed_s3: SeaweedS3,
                                                            s3_bucket: str):
    # The file source cannot read s3:// yet; before, such a job "finished" with 0 rows.
    seaweed_s3.client().put_object(Bucket=s3_bucket, Key="events/part-0.parquet", Body=b"x")
    job = write_job(tmp_path, JOB)
    env = {"WEIR_S3_ENDPOINT": seaweed_s3.endpoint,
           "WEIR_S3_ACCESS_KEY": seaweed_s3.access_key,
           "WEIR_S3_SECRET_KEY": seaweed_s3.secret_key}
    before = len(job_names(cluster))
    user_error_line(_run(cluster, job, f"s3://{s3_bucket}/events", "parquet", env=env),
                    f"s3://{s3_bucket}/events", "cannot read s3://")
    assert len(job_names(cluster)) == before


def test_s3_listing_errors_are_one_line(cluster: LocalCluster, tmp_path: Path,
                                        seaweed_s3: SeaweedS3, s3_bucket: str):
    job = write_job(tmp_path, JOB)
    wrong = {"WEIR_S3_ENDPOINT": seaweed_s3.endpoint, "WEIR_S3_ACCESS_KEY": "nobody",
             "WEIR_S3_SECRET_KEY": "wrong"}
    user_error_line(_run(cluster, job, f"s3://{s3_bucket}/x", "parquet", env=wrong),
                    "s3.access-key")


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
