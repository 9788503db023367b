"""Recovery on a real cluster beyond a killed TaskExecutor: checkpoints and the sink on a
real S3 server, the S3 server going away while the job runs, a corrupt latest checkpoint,
a restart strategy that gives up, and restarts that find no slots."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import job_details, poll, wait_job_status, write_job
from tests.support.exactly_once import (
    checkpoints,
    committed_output,
    diff,
    expected_output,
    kill_busy_taskexecutor,
    part_records,
    run_with_kills,
    running_with_checkpoint_after,
    status_name,
    submit,
)
from tests.support.seaweedfs import SeaweedS3
from weir.client.cluster_client import failure_text

RESTARTS = {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "200 ms"}


def s3_options(server: SeaweedS3, bucket: str) -> list[str]:
    return [f"state.checkpoints.dir=s3://{bucket}/checkpoints", f"s3.endpoint={server.endpoint}",
            f"s3.access-key={server.access_key}", f"s3.secret-key={server.secret_key}",
            "s3.path.style.access=true"]


def committed_s3(server: SeaweedS3, bucket: str, prefix: str) -> Counter[tuple[Any, ...]]:
    client = server.client()
    out: Counter[tuple[Any, ...]] = Counter()
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
    for obj in listing.get("Contents", []):
        name = obj["Key"].rsplit("/", 1)[-1]
        assert not name.startswith((".", "_")), f"uncommitted object {obj['Key']}"
        body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        out.update(part_records(name, body))
    return out


def test_s3_checkpoints_and_s3_sink_exactly_once(cluster_factory, tmp_path, seaweed_s3,
                                                 s3_bucket):
    cluster = cluster_factory(4, 2, *s3_options(seaweed_s3, s3_bucket))
    n = 120_000
    gate = tmp_path / "gate"
    # Parquet here (the other exactly-once tests write JSON lines): a part is one
    # multipart upload of a Parquet file, closed at each checkpoint.
    job_id = submit(cluster, tmp_path, f"s3://{s3_bucket}/out", n, gate=gate, config={
        "execution.checkpointing.interval": "500 ms", "state.backend.type": "rocksdb",
        **RESTARTS}, sink_format="parquet")
    details = run_with_kills(cluster, job_id, kills=2, gate=gate)
    assert status_name(details) == "FINISHED", details.failure.message
    assert details.summary.restarts == 2
    expected, got = expected_output(n, 13, 1000), committed_s3(seaweed_s3, s3_bucket, "out")
    assert got == expected, diff(expected, got)
    leftovers = seaweed_s3.client().list_multipart_uploads(Bucket=s3_bucket,
                                                          Prefix="out/").get("Uploads", [])
    assert leftovers == [], "uploads of failed attempts were not aborted"


# Slow (about 80 s: it waits out S3 request timeouts); test_storage_outage_restart.py keeps
# a storage outage in `make test`.
@pytest.mark.slow
def test_storage_outage_fails_checkpoints_not_the_job(cluster_factory, tmp_path):
    server = SeaweedS3(keep_data=True)     # what it stored is there again after the outage
    server.start()
    try:
        server.create_bucket("outage")
        cluster = cluster_factory(3, 2, *s3_options(server, "outage"))
        out = tmp_path / "out"
        n = 400_000                    # about a minute: the outage alone takes 20 s
        job_id = submit(cluster, tmp_path, out, n, pause_every=100, pause_s=0.03, config={
            "execution.checkpointing.interval": "500 ms",
            "execution.checkpointing.tolerable-failed-checkpoints": "1000", **RESTARTS})
        before = running_with_checkpoint_after(cluster, job_id, 0, 60).last_checkpoint_id
        server.stop()
        stopped = time.monotonic()
        # While S3 is away, checkpoints fail with a storage reason and the job runs on.
        poll(lambda: any(c["status"] == "FAILED" and c["failure_reason"] in (
                "IO_EXCEPTION", "FINALIZE_CHECKPOINT_FAILURE") and c["id"] > before
                for c in checkpoints(cluster, job_id)),
             30, interval=0.5, what="a checkpoint to fail while S3 is down")
        poll(lambda: time.monotonic() - stopped >= 20, 25, interval=0.5, what="20 s")
        details = job_details(cluster, job_id)
        assert status_name(details) == "RUNNING" and details.summary.restarts == 0
        assert details.last_checkpoint_id == before
        server.start(same_ports=True)
        after = running_with_checkpoint_after(cluster, job_id, before, 60)
        # A later failure restores a checkpoint taken after the outage: still exact.
        kill_busy_taskexecutor(cluster, after)
        final = wait_job_status(cluster, job_id, {"FINISHED", "FAILED"}, timeout=120)
        assert status_name(final) == "FINISHED", final.failure.message
        assert final.summary.restarts == 1
        expected, got = expected_output(n, 13, 1000), committed_output(out)
        assert got == expected, diff(expected, got)
    finally:
        server.stop()
        shutil.rmtree(server.data_dir, ignore_errors=True)


def restart_slowly(cluster, tmp_path: Path, n: int, out: Path) -> str:
    """Start the job with two retained checkpoints and a 3 s restart delay (time to
    damage a checkpoint while the job waits to restart). Its second half waits for the
    gate file, which :func:`kill_and_wait_restarting` opens once the job restarts, so a
    fast machine cannot finish it before the kill."""
    return submit(cluster, tmp_path, out, n, gate=tmp_path / "gate", config={
        "execution.checkpointing.interval": "300 ms", "state.checkpoints.num-retained": "2",
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "3 s"})


def kill_and_wait_restarting(cluster, job_id: str, gate: Path) -> Any:
    details = running_with_checkpoint_after(cluster, job_id, 1, 60)
    kill_busy_taskexecutor(cluster, details)
    restarting = wait_job_status(cluster, job_id, {"RESTARTING"}, timeout=30)
    gate.touch()
    return restarting


@pytest.mark.extended
def test_corrupt_latest_checkpoint_restores_the_previous_one(cluster_factory, tmp_path):
    cluster = cluster_factory(3, 2)
    out = tmp_path / "out"
    n = 100_000
    job_id = restart_slowly(cluster, tmp_path, n, out)
    details = kill_and_wait_restarting(cluster, job_id, tmp_path / "gate")
    latest, path = details.last_checkpoint_id, details.last_checkpoint_path
    metadata = Path(path.removeprefix("file://")) / "_metadata"
    data = bytearray(metadata.read_bytes())
    data[-1] ^= 0xFF                               # one flipped bit: the checksum catches it
    metadata.write_bytes(bytes(data))
    final = wait_job_status(cluster, job_id, {"FINISHED", "FAILED"}, timeout=120)
    assert status_name(final) == "FINISHED", final.failure.message
    history = cluster.client().checkpoints(job_id)
    assert history.restored_checkpoint_id < latest
    log = (cluster.dir / "log" / "jobmaster.log").read_text()
    warning = next(line for line in log.splitlines() if f"checkpoint {latest} " in line
                   and "cannot be restored" in line)
    assert "checksum" in warning
    assert f"restoring checkpoint {history.restored_checkpoint_id} " in log
    expected, got = expected_output(n, 13, 1000), committed_output(out)
    assert got == expected, diff(expected, got)


@pytest.mark.extended
def test_no_usable_checkpoint_fails_the_job_with_the_reason(cluster_factory, tmp_path):
    cluster = cluster_factory(3, 2)
    job_id = restart_slowly(cluster, tmp_path, 100_000, tmp_path / "out")
    details = kill_and_wait_restarting(cluster, job_id, tmp_path / "gate")
    job_dir = Path(details.last_checkpoint_path.removeprefix("file://")).parent
    for metadata in job_dir.glob("chk-*/_metadata"):
        metadata.unlink()
    final = wait_job_status(cluster, job_id, {"FINISHED", "FAILED"}, timeout=60)
    assert status_name(final) == "FAILED"
    text = failure_text(final)
    assert text.startswith("STATE_RESTORE_FAILED")
    assert "no retained checkpoint can be restored" in text and "does not exist" in text


FAILING_JOB = """
    from weir import DiscardingSink, StreamExecutionEnvironment

    def explode(n):
        if n == 5_000:
            raise ValueError("record 5000 is poisoned")
        return n

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_sequence(0, 10_000).map(explode).sink_to(DiscardingSink())
    env.execute("poisoned")
"""


def test_exhausted_restart_strategy_fails_with_root_cause_and_restart_count(
        cluster_factory, tmp_path):
    cluster = cluster_factory(1, 2)
    job = write_job(tmp_path, FAILING_JOB)
    result = cluster.weir("run", "-Dexecution.checkpointing.interval=200 ms",
                          "-Drestart-strategy.type=fixed-delay",
                          "-Drestart-strategy.fixed-delay.attempts=2",
                          "-Drestart-strategy.fixed-delay.delay=100 ms", str(job))
    assert result.returncode == 1
    assert "record 5000 is poisoned" in result.stderr
    assert "2 restart(s)" in result.stderr and "fixed-delay" in result.stderr


@pytest.mark.extended
def test_a_restart_without_enough_slots_is_retried_then_fails(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 1)                # the job needs both slots
    job_id = submit(cluster, tmp_path, tmp_path / "out", 400_000, config={
        "execution.checkpointing.interval": "500 ms", "slot.request.timeout": "1 s",
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "200 ms"})
    details = running_with_checkpoint_after(cluster, job_id, 0, 60)
    kill_busy_taskexecutor(cluster, details)
    final = wait_job_status(cluster, job_id, {"FAILED", "FINISHED"}, timeout=60)
    assert status_name(final) == "FAILED"
    assert final.summary.restarts == 3             # each restart waited, then was retried
    assert final.failure.reason == 6               # NO_RESOURCES
    assert "3 restart(s)" in final.failure.message
