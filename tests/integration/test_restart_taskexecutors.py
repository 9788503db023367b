"""``weir cluster start --restart-taskexecutors``: a SIGKILLed TaskExecutor comes back with
the same resource id, and a job that needs every slot survives kills exactly once."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.cluster import poll
from tests.support.exactly_once import (
    committed_output,
    diff,
    expected_output,
    run_with_kills,
    status_name,
    submit,
)
from weir.core.processes import process_alive

RESTARTS = {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "200 ms"}


def test_a_killed_taskexecutor_comes_back_with_its_resource_id(cluster_factory):
    cluster = cluster_factory(2, 1, "--restart-taskexecutors")
    info = cluster.files.taskexecutor(0)
    assert info is not None
    os.kill(info.pid, signal.SIGKILL)

    def back() -> dict | None:
        # Absent while the new process starts: its info file is written once it listens.
        entry = next((te for te in cluster.status()["taskexecutors"]
                      if te["resource_id"] == info.resource_id), None)
        return entry if entry and entry["pid"] != info.pid and entry["alive"] and \
            entry["registered"] else None

    entry = poll(back, 60, interval=0.2, what="the TaskExecutor to be started again")
    assert entry["restarts"] == 1
    # The new process is not taken for dead while it starts (before its info file exists):
    # that would queue a second start of the same TaskExecutor.
    log = (cluster.dir / "log" / "supervisor.log").read_text()
    assert log.count("TaskExecutor taskexecutor-0 died") == 1, log
    pid = entry["pid"]
    cluster.stop()                               # and stop does not race the supervisor
    assert not list(cluster.dir.glob("*.json"))
    assert not process_alive(pid), "the restarted TaskExecutor outlived the cluster"


@pytest.mark.extended
def test_a_job_needing_every_slot_survives_kills_with_restarted_taskexecutors(
        cluster_factory, tmp_path):
    # Two TaskExecutors of one slot for a job of two slots: after a kill, the job can only
    # run again once the supervisor has brought the TaskExecutor back.
    cluster = cluster_factory(2, 1, "--restart-taskexecutors")
    out, gate, n = tmp_path / "out", tmp_path / "gate", 120_000
    job_id = submit(cluster, tmp_path, out, n, gate=gate, config={
        "execution.checkpointing.interval": "500 ms", **RESTARTS})
    details = run_with_kills(cluster, job_id, 2, gate=gate)
    assert status_name(details) == "FINISHED", details.failure.message
    assert details.summary.restarts >= 2
    expected, got = expected_output(n, 13, 1000), committed_output(out)
    assert got == expected, diff(expected, got)
    assert sum(te.get("restarts", 0) for te in cluster.status()["taskexecutors"]) == 2
