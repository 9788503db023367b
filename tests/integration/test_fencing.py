"""A TaskExecutor cut off from the JobMaster (SIGSTOP past the heartbeat timeout) and then
resumed cannot corrupt the restarted job: its stale tasks are cancelled, their late
acknowledgements and data ignored, and the committed output stays exactly once."""

from __future__ import annotations

import os
import signal

from tests.support.cluster import job_details, poll
from tests.support.exactly_once import (
    committed_output,
    diff,
    expected_output,
    kill_busy_taskexecutor,
    running_with_checkpoint_after,
    status_name,
    submit,
)

N = 120_000
RESTARTS = {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "200 ms"}


def test_a_paused_taskexecutor_resumed_after_the_timeout_cannot_corrupt_the_job(
        cluster_factory, tmp_path):
    cluster = cluster_factory(4, 2, "heartbeat.interval=500 ms", "heartbeat.timeout=3 s")
    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, gate=gate, config={
        "execution.checkpointing.interval": "500 ms", **RESTARTS})
    details = running_with_checkpoint_after(cluster, job_id, 0, 60)
    victim = kill_busy_taskexecutor(cluster, details, signal.SIGSTOP)
    pid = {te["resource_id"]: te["pid"] for te in cluster.status()["taskexecutors"]}[victim]
    try:
        # Declared lost after the timeout; the job runs on elsewhere, checkpoints again.
        restarted = poll(lambda: (d := job_details(cluster, job_id)).summary.restarts >= 1
                         and d, 60, interval=0.2, what="the job to restart without it")
        running_with_checkpoint_after(cluster, job_id, restarted.last_checkpoint_id, 60)
    finally:
        os.kill(pid, signal.SIGCONT)
    # Back: its stale tasks must not touch the job, and the job must not fail over it.
    gate.touch()
    final = poll(lambda: (d := job_details(cluster, job_id)) and
                 status_name(d) in ("FINISHED", "FAILED", "CANCELED") and d,
                 180, interval=0.2, what="the job to end")
    assert status_name(final) == "FINISHED", final.failure.message
    expected, got = expected_output(N, 13, 1000), committed_output(out)
    assert got == expected, diff(expected, got)
    assert not [p for p in out.iterdir() if p.name.startswith(".")], \
        "uncommitted part files were left behind"
    log = (cluster.dir / "log").glob("taskexecutor-*.log")
    assert any("lost the JobMaster" in p.read_text() or "no heartbeat" in p.read_text()
               for p in log), "the resumed TaskExecutor did not notice it was cut off"
