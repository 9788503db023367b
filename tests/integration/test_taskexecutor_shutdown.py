"""A TaskExecutor stopped with SIGTERM (a pod deleted, a machine drained) hands its work
back at once: it deregisters from the JobMaster, which fails its tasks over to the other
TaskExecutors long before ``heartbeat.timeout`` (60 s here), with the shutdown as the
cause, counted once; and the keyed job's committed output stays exactly once.

Real processes (``weir cluster start``): three one-slot TaskExecutors, a job of
parallelism 2, so one TaskExecutor is idle and takes the leaving one's place.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from tests.support.cluster import LocalCluster, job_details, poll
from tests.support.exactly_once import (
    finished_exactly_once,
    kill_busy_taskexecutor,
    running_with_checkpoint_after,
    status_name,
    submit,
)
from tests.support.health import probe
from weir.proto import common_pb2

N = 40_000
#: The budget from SIGTERM to every task RUNNING again (the heartbeat timeout is 60 s).
FAILOVER_BUDGET_S = 15.0
CONFIG = {"execution.checkpointing.interval": "300 ms",
          "restart-strategy.type": "fixed-delay",
          "restart-strategy.fixed-delay.attempts": "10",
          "restart-strategy.fixed-delay.delay": "200 ms"}


def process_gone(pid: int) -> bool:
    """``pid`` exited (or is a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def running_elsewhere(cluster: LocalCluster, job_id: str, restarts: int, gone: str) -> Any:
    """The job's details once it restarted and every task runs, none on ``gone``."""
    details = job_details(cluster, job_id)
    if status_name(details) in ("FAILED", "CANCELED", "FINISHED"):
        return details
    subtasks = [s for v in details.vertices for s in v.subtasks]
    return (details.summary.restarts > restarts and status_name(details) == "RUNNING"
            and all(s.state == common_pb2.RUNNING and s.resource_id != gone
                    for s in subtasks) and details)


def test_sigterm_fails_over_at_once_and_the_output_is_exact(cluster_factory,
                                                            tmp_path: Path) -> None:
    cluster = cluster_factory(3, 1, "heartbeat.timeout=60 s")
    jobmaster = cluster.files.jobmaster()
    assert jobmaster is not None
    assert probe(jobmaster.metrics_url, "/readyz")[0] == 200
    for url in cluster.taskexecutor_metrics_urls():
        status, body = probe(url, "/readyz")
        assert status == 200 and body["reason"].startswith("registered with the JobMaster")

    out, gate = tmp_path / "out", tmp_path / "gate"
    job_id = submit(cluster, tmp_path, out, N, config=CONFIG, gate=gate, held_slowdown=40)
    details = running_with_checkpoint_after(cluster, job_id, 0, timeout=90)
    assert status_name(details) == "RUNNING", details.failure.message
    restarts = details.summary.restarts

    victim = kill_busy_taskexecutor(cluster, details, signal.SIGTERM)
    sent = time.monotonic()
    pid = cluster.taskexecutor_pid(victim)
    details = poll(lambda: running_elsewhere(cluster, job_id, restarts, victim),
                   FAILOVER_BUDGET_S, interval=0.05,
                   what=f"every task RUNNING again without {victim}")
    took = time.monotonic() - sent
    print(f"\nfrom SIGTERM to every task RUNNING again: {took:.2f} s "
          f"(heartbeat.timeout 60 s)")
    assert status_name(details) == "RUNNING", details.failure.message
    assert details.summary.restarts == restarts + 1
    cause = details.restart_causes[-1]
    assert cause.reason == common_pb2.TASK_EXECUTOR_LOST
    assert f"TaskExecutor {victim} (" in cause.message
    assert cause.message.endswith("shut down (SIGTERM)"), cause.message
    poll(lambda: process_gone(pid), 30, what=f"TaskExecutor {victim} to exit")
    name = next(n for n, info in cluster.files.taskexecutors().items()
                if info.resource_id == victim)
    log = cluster.files.log_file(name).read_text()
    assert "deregistered from the JobMaster" in log and "(SIGTERM)" in log

    gate.touch()
    final = finished_exactly_once(cluster, job_id, out, N)
    # The tasks it cancelled after leaving, and their consumers' broken connections, are
    # no failures of their own.
    assert final.summary.restarts == restarts + 1, \
        [c.message for c in final.restart_causes]
