"""JobMaster high availability on a local cluster of real processes: a SIGKILLed JobMaster
comes back (the supervisor starts it again, same address), recovers the job under its id
from its latest checkpoint, and the committed output stays exactly once. Without high
availability, a lost JobMaster takes its jobs with it: the TaskExecutors cancel their
tasks, nothing more is committed, and a new JobMaster knows no job."""

from __future__ import annotations

import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, job_details, poll
from tests.support.exactly_once import (
    committed_output,
    diff,
    expected_output,
    finished_exactly_once,
    running_with_checkpoint_after,
    status_name,
    submit,
)
from weir.core.cluster_directory import JobMasterInfo
from weir.core.processes import process_alive

N = 120_000
CONFIG = {"execution.checkpointing.interval": "500 ms",
          "restart-strategy.type": "fixed-delay",
          "restart-strategy.fixed-delay.attempts": "10",
          "restart-strategy.fixed-delay.delay": "200 ms"}


def jobmaster_info(cluster: LocalCluster) -> JobMasterInfo | None:
    # None between the supervisor's unlink and the new file.
    return cluster.files.jobmaster()


def answered(call: Any) -> Any:
    """``call()``, or None while no JobMaster answers (it is being started again)."""
    from weir.core.errors import UserError

    try:
        return call()
    except (UserError, OSError, KeyError):
        return None


def checkpoint_history(cluster: LocalCluster, job_id: str) -> Any:
    client = cluster.client()
    try:
        return client.checkpoints(job_id)
    finally:
        client.close()


def kill_jobmaster_and_wait_for_recovery(cluster: LocalCluster, job_id: str,
                                        last_checkpoint: int) -> int:
    """SIGKILL the JobMaster; wait until the supervisor started it again at the same address
    and it recovered the job from a checkpoint no older than ``last_checkpoint`` (a newer
    one may have completed between the caller's look and the kill). Returns the restored
    checkpoint's id."""
    old = jobmaster_info(cluster)
    assert old is not None
    os.kill(old.pid, signal.SIGKILL)
    new = poll(lambda: (i := jobmaster_info(cluster)) and i.pid != old.pid
               and process_alive(i.pid) and i, 60, interval=0.1,
               what="the supervisor to start the JobMaster again")
    assert new.address == old.address
    history = poll(lambda: answered(lambda: checkpoint_history(cluster, job_id)), 60,
                   interval=0.2, what="the job to be recovered")
    assert history.restored_checkpoint_id >= last_checkpoint
    return int(history.restored_checkpoint_id)


def run_with_jobmaster_kills(cluster: LocalCluster, tmp_path: Path, kills: int,
                             config: dict[str, str]) -> None:
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, gate=gate, config={**CONFIG, **config})
    last = 0
    for _ in range(kills):
        details = running_with_checkpoint_after(cluster, job_id, last, 90)
        assert status_name(details) == "RUNNING", details.failure.message
        before = {c.checkpoint_id for c in checkpoint_history(cluster, job_id).checkpoints}
        restored = kill_jobmaster_and_wait_for_recovery(cluster, job_id,
                                                        details.last_checkpoint_id)
        # The TaskExecutors re-register, the job runs again and checkpoints on, its
        # checkpoint ids continuing after the restored one (the history keeps the earlier
        # JobMaster's checkpoints too).
        last = restored
        again = running_with_checkpoint_after(cluster, job_id, restored, 90)
        assert status_name(again) == "RUNNING", again.failure.message
        new = {c.checkpoint_id for c in checkpoint_history(cluster, job_id).checkpoints
               } - before
        assert new and min(new) > restored
        last = again.last_checkpoint_id

    gate.touch()
    finished_exactly_once(cluster, job_id, out, N,
                          details=lambda: answered(lambda: job_details(cluster, job_id)))
    listed = cluster.weir("list")
    assert job_id in listed.stdout and "FINISHED" in listed.stdout, listed.stdout
    status = cluster.status()
    assert status["jobmaster"]["restarts"] == kills
    assert status["high_availability"]


def test_a_killed_jobmaster_comes_back_and_resumes_the_job_exactly_once(cluster_factory,
                                                                          tmp_path: Path):
    cluster = cluster_factory(2, 2, "--ha")
    run_with_jobmaster_kills(cluster, tmp_path, 1, {})
    # A finished job is never recovered again.
    assert poll(lambda: not list((cluster.dir / "ha").rglob("jobgraph")), 30,
                what="the finished job to leave the high-availability store")


@pytest.mark.chaos
def test_jobmaster_kills_with_high_availability_on_the_embedded_s3(cluster_factory,
                                                                     tmp_path: Path):
    cluster = cluster_factory(2, 2, "--ha", "--with-s3")
    assert cluster.status()["high_availability"].startswith("s3://")
    run_with_jobmaster_kills(cluster, tmp_path, 2, {
        "state.backend.type": "rocksdb", "execution.checkpointing.unaligned.enabled": "true"})


def overview(cluster: LocalCluster) -> Any:
    client = cluster.client()
    try:
        return client.cluster_overview()
    finally:
        client.close()


def slots_used(status: dict[str, Any]) -> int:
    used = 0
    for te in status["taskexecutors"]:
        body = urllib.request.urlopen(te["metrics_url"], timeout=5).read().decode()
        used += int(float(next(line.split()[1] for line in body.splitlines()
                               if line.startswith("weir_taskexecutor_slots_used "))))
    return used


@pytest.mark.extended
def test_without_high_availability_a_lost_jobmaster_takes_its_jobs_with_it(cluster_factory,
                                                                             tmp_path: Path):
    from weir.cli.cluster import spawn

    cluster = cluster_factory(2, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"      # the gate stays closed
    job_id = submit(cluster, tmp_path, out, N, gate=gate, config=CONFIG)
    running_with_checkpoint_after(cluster, job_id, 1, 60)
    status = cluster.status()
    port = int(status["jobmaster"]["address"].rsplit(":", 1)[1])
    os.kill(status["jobmaster"]["pid"], signal.SIGKILL)

    # The TaskExecutors notice at once and cancel their tasks.
    poll(lambda: slots_used(status) == 0, 30, what="the TaskExecutors to stop their tasks")
    committed = committed_output(out)
    expected = expected_output(N, 13, 1000)
    assert not committed - expected, "records were committed twice or wrongly: " + \
        diff(expected, committed)
    assert committed != expected                         # the job did not get to finish

    # A new JobMaster at the same address: the TaskExecutors register with it, and it
    # knows no job — nothing resumes, nothing more is committed.
    spawn(["jobmaster", f"-Djobmaster.rpc.port={port}", "-Dmetrics.reporter.prom.port=0",
           "-Drest.port=0",
           "--info-file", str(cluster.dir / "jobmaster.json"),
           "--log-file", str(cluster.dir / "log" / "jobmaster-2.log")],
          cluster.dir / "log" / "jobmaster-2.log")
    poll(lambda: answered(lambda: len(overview(cluster).task_executors) == 2), 60,
         interval=0.2, what="the TaskExecutors to register with the new JobMaster")
    client = cluster.client()
    try:
        assert client.list_jobs() == []
    finally:
        client.close()
    assert committed_output(out) == committed
    assert slots_used(status) == 0
    assert not (cluster.dir / "ha").exists()
    assert answered(lambda: job_details(cluster, job_id)) is None
