"""How long staged Spark data lives: the JobMaster deletes a job's staging when the job ends
(also when its client submitted ``--detached`` and is gone), keeps it when the job's
checkpoints are retained, and ``weir staging list|clean`` finds what a killed client left.
Real daemons, real PySpark, real SeaweedFS."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from tests.support.cluster import (
    ClientEnvironment,
    LocalCluster,
    job_details,
    wait_all_running,
    wait_job_status,
)
from tests.support.seaweedfs import SeaweedS3
from weir.core.config import Configuration
from weir.core.errors import JobExecutionError, UserError
from weir.core.ids import JobId
from weir.datastream.connectors.spark_stager import stage_batch
from weir.datastream.connectors.spark_staging import (
    MANIFEST_NAME,
    read_staging_manifest,
    update_staging_manifest,
)
from weir.jobmaster.staging_cleanup import finish
from weir.testing.cluster import poll

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
#: The schema field of a hand-written _staging.json (one int64 column).
SCHEMA = base64.b64encode(pa.schema([("id", pa.int64())]).serialize().to_pybytes()).decode()


def _numbers(session: SparkSession):
    return session.range(0, 200, numPartitions=2)


def _roots(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir()) if directory.exists() else []


def test_a_detached_jobs_staging_is_deleted_by_the_jobmaster_when_it_ends(
        shared_cluster: LocalCluster, spark: SparkSession, tmp_path: Path):
    staging = tmp_path / "staging"
    with ClientEnvironment(shared_cluster, **{"spark.staging.dir": str(staging)}) as env:
        from weir.core.execution import get_execution_context

        context = get_execution_context()
        assert context is not None
        context.detached = True  # the client returns at submission and never cleans up
        env.from_spark(_numbers).map(lambda r: r["id"]).print()
        job_id = env.execute("detached spark").job_id
    [root] = _roots(staging)
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    assert manifest["job_id"] == job_id, "the client names the job in _staging.json"
    wait_job_status(shared_cluster, job_id, {"FINISHED"}, timeout=120)
    poll(lambda: _roots(staging) == [], 30, what="the JobMaster to delete the staging root")


@pytest.mark.extended
def test_an_attached_jobs_staging_is_gone_after_the_job(shared_cluster: LocalCluster,
                                                        spark: SparkSession, tmp_path: Path):
    staging = tmp_path / "staging"
    with ClientEnvironment(shared_cluster, **{"spark.staging.dir": str(staging)}) as env:
        got = sorted(env.from_spark(_numbers).map(lambda r: r["id"]).execute_and_collect())
    assert got == list(range(200))
    poll(lambda: _roots(staging) == [], 30, what="the staging root to be deleted")


def test_a_failed_submission_deletes_its_staging(spark: SparkSession, tmp_path: Path):
    staging = tmp_path / "staging"
    # Nothing listens there: staging succeeds, submitting fails.
    context_conf = {"spark.staging.dir": str(staging), "client.timeout": "2 s"}
    from weir.core.execution import ExecutionContext, set_execution_context
    from weir.datastream.stream_execution_environment import StreamExecutionEnvironment

    set_execution_context(ExecutionContext(
        address="127.0.0.1:9", token=None, configuration=Configuration.from_pairs(context_conf)))
    try:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_spark(_numbers).print()
        with pytest.raises(UserError):
            env.execute()
    finally:
        set_execution_context(None)
    assert _roots(staging) == []


def test_the_jobmaster_deletes_only_roots_naming_its_job(spark: SparkSession,
                                                        seaweed_s3: SeaweedS3,
                                                        s3_bucket: str):
    conf = seaweed_s3.config(s3_bucket)
    mine, other = f"s3://{s3_bucket}/st/mine", f"s3://{s3_bucket}/st/other"
    for root, job in ((mine, "a" * 32), (other, "b" * 32)):
        stage_batch(lambda s: s.range(3), root, spark=spark, config=conf)
        update_staging_manifest(root, {"job_id": job}, conf)
    finish(JobId("a" * 32), [mine, other, f"s3://{s3_bucket}/st/missing"], conf, None)
    assert read_staging_manifest(mine, conf) is None
    keys = seaweed_s3.client().list_objects_v2(Bucket=s3_bucket, Prefix="st/mine")
    assert keys.get("Contents", []) == []
    assert read_staging_manifest(other, conf) is not None, "another job's root was deleted"

    finish(JobId("b" * 32), [other], conf, "job FAILED with RETAIN_ON_CANCELLATION checkpoints")
    manifest = read_staging_manifest(other, conf)
    assert manifest is not None and manifest.retained and "FAILED" in manifest.retained


@pytest.mark.extended
def test_retained_checkpoints_keep_the_staging(cluster_factory, spark: SparkSession,
                                               tmp_path: Path):
    cluster = cluster_factory(1, 2)
    staging = tmp_path / "staging"

    def ticks(session: SparkSession):
        return session.readStream.format("rate").option("rowsPerSecond", 20).load()

    conf = {"spark.staging.dir": str(staging),
            "execution.checkpointing.interval": "300 ms",
            "state.checkpoints.dir": f"file://{tmp_path}/checkpoints",
            "execution.checkpointing.externalized-checkpoint-retention":
                "RETAIN_ON_CANCELLATION",
            "spark.streaming.trigger-interval": "500 ms"}
    with ClientEnvironment(cluster, **conf) as env:
        env.from_spark(ticks, streaming=True).map(lambda r: r["value"]).print()
        job = env.execute_async("retained spark")
        try:
            wait_all_running(cluster, job.job_id)
            poll(lambda: job_details(cluster, job.job_id).last_checkpoint_id > 0, 60,
                 what="a completed checkpoint")
        finally:
            job.cancel_job()
            with pytest.raises(JobExecutionError, match="canceled"):
                job.wait(timeout=60)
    [root] = _roots(staging)
    manifest = poll(lambda: (m := read_staging_manifest(str(root))) and m.retained and m,
                    30, what="the root to be marked retained")
    assert "CANCELED" in manifest.retained
    assert (root / MANIFEST_NAME).exists()


def _manifest(root: Path, **fields: object) -> None:
    root.mkdir(parents=True)
    document = {"format": "weir-spark-staging", "version": 1, "mode": "batch",
                "schema": SCHEMA, "created": "2026-01-01T00:00:00Z",
                "host": socket.gethostname(), "pid": None, "job_id": None, **fields}
    (root / MANIFEST_NAME).write_text(json.dumps(document))


def _weir(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir", *args, "--dir", str(cluster.dir)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_weir_staging_lists_and_cleans_orphans(shared_cluster: LocalCluster, tmp_path: Path):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    with ClientEnvironment(shared_cluster) as env:
        env.from_source(str(incoming), format="parquet", monitor_interval=0.5).print()
        running = env.execute_async("runs on")
    try:
        wait_all_running(shared_cluster, running.job_id)
        staging = tmp_path / "staging"
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        _manifest(staging / "killed-before-submission", pid=int(dead.stdout))
        _manifest(staging / "being-staged", pid=os.getpid())
        _manifest(staging / "of-a-running-job", job_id=running.job_id)
        _manifest(staging / "of-a-forgotten-job", job_id="f" * 32)
        _manifest(staging / "retained", job_id="e" * 32, retained="job FAILED with ...")
        (staging / "not-staging").mkdir()

        listed = _weir(shared_cluster, "staging", "list", str(staging))
        assert listed.returncode == 0, listed.stderr
        states = {line.split()[1].rsplit("/", 1)[1]: line.split()[0]
                  for line in listed.stdout.splitlines()}
        assert states == {"killed-before-submission": "orphaned", "being-staged": "preparing",
                          "of-a-running-job": "running", "of-a-forgotten-job": "orphaned",
                          "retained": "retained"}

        refused = _weir(shared_cluster, "staging", "clean",
                        str(staging / "of-a-running-job"))
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert refused.stderr.strip().splitlines() == [
            f"error: not deleting {staging / 'of-a-running-job'}: job {running.job_id} "
            "still runs"]

        cleaned = _weir(shared_cluster, "staging", "clean", str(staging))
        assert cleaned.returncode == 0, cleaned.stderr
        assert sorted(p.name for p in staging.iterdir()) == [
            "being-staged", "not-staging", "of-a-running-job", "retained"]
        assert f"deleted {staging / 'killed-before-submission'}" in cleaned.stdout
    finally:
        running.cancel_job()
        wait_job_status(shared_cluster, running.job_id, {"CANCELED"}, timeout=60)


@pytest.mark.extended
def test_weir_staging_lists_roots_on_s3(shared_cluster: LocalCluster, seaweed_s3: SeaweedS3,
                                        s3_bucket: str, tmp_path: Path):
    client = seaweed_s3.client()
    document = {"format": "weir-spark-staging", "version": 1, "mode": "batch", "schema": SCHEMA,
                "created": "2026-01-01T00:00:00Z", "host": "gone-host", "pid": 1,
                "job_id": None}
    client.put_object(Bucket=s3_bucket, Key=f"spark-staging/q-1/{MANIFEST_NAME}",
                      Body=json.dumps(document).encode())
    client.put_object(Bucket=s3_bucket, Key="spark-staging/q-1/batch-000000000000/_SUCCESS",
                      Body=b"")
    conf = tmp_path / "weir.yaml"
    conf.write_text("".join(f"{k}: {v!r}\n" for k, v in
                            seaweed_s3.config(s3_bucket).options_dict().items()
                            if k != "s3.secret-key"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "WEIR_S3_SECRET_KEY": seaweed_s3.secret_key}
    base = [sys.executable, "-m", "weir", "staging"]
    # ROOT defaults to <state.checkpoints.dir>/spark-staging, as from_spark() stages.
    listed = subprocess.run([*base, "list", "--conf", str(conf), "--dir", str(shared_cluster.dir)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:2] == ["orphaned", f"s3://{s3_bucket}/spark-staging/q-1"]
    cleaned = subprocess.run([*base, "clean", "--conf", str(conf), "--dir",
                              str(shared_cluster.dir)],
                             capture_output=True, text=True, timeout=120, env=env)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"deleted s3://{s3_bucket}/spark-staging/q-1" in cleaned.stdout
    assert client.list_objects_v2(Bucket=s3_bucket, Prefix="spark-staging/q-1").get(
        "Contents", []) == []
