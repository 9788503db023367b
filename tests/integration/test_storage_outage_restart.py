"""A restart while the checkpoint storage is down: the JobMaster cannot read the checkpoint
back, which says nothing about the checkpoint. The job keeps trying (as its restart
strategy allows) instead of dropping its checkpoints and failing, and once the storage is
back it restores and commits exactly the expected output."""

from __future__ import annotations

import signal

from tests.support.cluster import job_details, poll
from tests.support.exactly_once import (
    finished_exactly_once,
    kill_busy_taskexecutor,
    running_with_checkpoint_after,
    status_name,
    submit,
)
from weir.testing.faults import restart_cluster_s3, stop_cluster_s3

N = 40_000


def test_a_restart_during_a_storage_outage_waits_for_the_storage_and_loses_nothing(
        cluster_factory, tmp_path):
    cluster = cluster_factory(3, 2, "--with-s3")
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, gate=gate, config={
        "execution.checkpointing.interval": "300 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": "1000",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "1000",
        "restart-strategy.fixed-delay.delay": "200 ms"})
    before = running_with_checkpoint_after(cluster, job_id, 0, 120)
    info = stop_cluster_s3(cluster.dir)
    server = None
    try:
        kill_busy_taskexecutor(cluster, before, signal.SIGKILL)
        # The restore is tried, fails on the storage, and is tried again: the job must not
        # give up (before the fix it ended FAILED: "no retained checkpoint can be restored").
        log = cluster.dir / "log" / "jobmaster.log"
        poll(lambda: log.read_text().count("cannot reach the checkpoint storage") >= 2, 120,
             interval=0.2, what="the JobMaster to retry the restore while S3 is down")
        assert status_name(job_details(cluster, job_id)) not in ("FAILED", "FAILING")
    finally:
        server = restart_cluster_s3(cluster.dir, info)
    try:
        restored = poll(lambda: (d := job_details(cluster, job_id)).HasField("last_restore")
                        and d, 120, interval=0.2, what="the job to restore after the outage")
        assert restored.last_restore.checkpoint_id >= before.last_checkpoint_id
        gate.touch()
        finished_exactly_once(cluster, job_id, out, N, no_uncommitted=False)
    finally:
        cluster.stop()
        server.stop()
