"""A TaskExecutor host SIGKILLed mid-job: the job, submitted from a client host to a JobMaster
host with three TaskExecutor hosts (one slot each, the job needs two), restarts on the
remaining hosts from its latest checkpoint on S3 and commits exactly its expected output to
S3 — nothing lost, nothing twice — although no two hosts share a file."""

from __future__ import annotations

import time

import pytest

from tests.cluster.keyed_job import s3_keys, start_cluster


def run_through_a_taskexecutor_host_kill(hosts, seaweed_s3, s3_bucket, source: str, n: int,
                                         client_env: dict[str, str] | None = None) -> None:
    cluster = start_cluster(hosts, seaweed_s3, s3_bucket, taskexecutors=3)
    job_id = cluster.submit(source, n, env=client_env)
    details = cluster.running_with_checkpoint(job_id)
    busy = cluster.busy_hosts(details)
    assert len(busy) == 2, busy  # one slot per host, parallelism 2: the third is spare
    killed = busy[0].kill()
    cluster.running_again(job_id, details.summary.restarts)
    recovered = time.monotonic() - killed
    print(f"TaskExecutor host SIGKILL -> job running again: {recovered:.2f} s")
    cluster.open_gate()
    final = cluster.finished_exactly_once(job_id, n)
    assert final.summary.restarts >= 1


def test_a_killed_taskexecutor_host_loses_and_duplicates_nothing(hosts, seaweed_s3,
                                                                  s3_bucket):
    run_through_a_taskexecutor_host_kill(hosts, seaweed_s3, s3_bucket, "sequence", 20_000)


@pytest.mark.extended
@pytest.mark.spark
def test_a_spark_fed_job_survives_a_killed_taskexecutor_host(hosts, seaweed_s3, s3_bucket):
    # The client stages Spark's output on S3 (it needs the keys for that); the TaskExecutor
    # hosts read it from there.
    run_through_a_taskexecutor_host_kill(
        hosts, seaweed_s3, s3_bucket, "spark", 20_000,
        client_env={**s3_keys(seaweed_s3), "WEIR_SPARK_STAGING_DIR": f"s3://{s3_bucket}/staging",
                    "WEIR_S3_ENDPOINT": seaweed_s3.endpoint, "WEIR_S3_PATH_STYLE_ACCESS": "true"})
