"""Failures with real processes: cancellation, a killed TaskExecutor, a frozen one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cluster import (
    REPO,
    LocalCluster,
    job_details,
    poll,
    wait_all_running,
    wait_job_status,
    write_job,
)
from weir.client.cluster_client import failure_text
from weir.proto import common_pb2
from weir.testing.faults import frozen

ENDLESS = """
    from weir import StreamExecutionEnvironment, DiscardingSink
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism({parallelism})
    (env.from_sequence(0, 10**12).map(lambda n: (n % 1000, 1))
        .key_by(lambda t: t[0]).sum(1).sink_to(DiscardingSink()))
    env.execute("endless")
"""


def _start_endless(cluster: LocalCluster, tmp_path: Path, parallelism: int = 4) -> str:
    job = write_job(tmp_path, ENDLESS.format(parallelism=parallelism))
    result = cluster.weir("run", "--detached", str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    wait_all_running(cluster, job_id)
    return job_id


def _task_slots_used(cluster: LocalCluster) -> int:
    import urllib.request

    used = 0
    for te in cluster.status()["taskexecutors"]:
        body = urllib.request.urlopen(te["metrics_url"], timeout=5).read().decode()
        used += int(float(next(line.split()[1] for line in body.splitlines()
                               if line.startswith("weir_taskexecutor_slots_used "))))
    return used


@pytest.mark.extended
def test_cancel_stops_every_task_and_frees_every_slot(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 2)
    job_id = _start_endless(cluster, tmp_path)
    assert cluster.status()["slots_free"] == 0
    started = time.monotonic()
    result = cluster.weir("cancel", job_id)
    assert result.returncode == 0, result.stderr
    assert "canceled" in result.stdout
    assert time.monotonic() - started < 15
    details = job_details(cluster, job_id)
    states = {s.state for v in details.vertices for s in v.subtasks}
    assert states == {common_pb2.CANCELED}
    poll(lambda: cluster.status()["slots_free"] == 4, 10, what="all slots to be free")
    poll(lambda: _task_slots_used(cluster) == 0, 10, what="TaskExecutors to run no task")


def test_sigkill_of_a_task_executor_fails_the_job_with_a_clear_reason(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 2)
    job = write_job(tmp_path, ENDLESS.format(parallelism=4))
    # An attached `weir run`: it must end, non-zero, naming the lost TaskExecutor.
    runner = subprocess.Popen(
        [sys.executable, "-m", "weir", "run", "--dir", str(cluster.dir), str(job)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        job_id = poll(lambda: [j.job_id for j in cluster.client().list_jobs()], 60,
                      what="the job to be submitted")[0]
        wait_all_running(cluster, job_id)
        victim = cluster.status()["taskexecutors"][0]["resource_id"]
        killed_at = time.monotonic()
        cluster.kill_taskexecutor(0, signal.SIGKILL)
        details = wait_job_status(cluster, job_id, {"FAILED"}, timeout=10)
        assert time.monotonic() - killed_at < 10, "must be noticed within heartbeat.timeout"
        assert details.failure.reason == common_pb2.TASK_EXECUTOR_LOST
        assert victim in details.failure.message
        _, stderr = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 1
    assert "was lost" in stderr and victim in stderr
    assert "Traceback" not in stderr
    assert "TASK_EXECUTOR_LOST" in failure_text(details)
    # The surviving TaskExecutor frees its slots.
    poll(lambda: cluster.status()["slots_free"] == 2, 15, what="the survivor's slots")


@pytest.mark.chaos
def test_frozen_task_executor_is_detected_by_heartbeat_timeout(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 2, "heartbeat.timeout=3 s", "heartbeat.interval=500 ms")
    job_id = _start_endless(cluster, tmp_path)
    # Alive but silent: only the heartbeat timeout can tell.
    with frozen(cluster.taskexecutor_pids()[1]):
        stopped_at = time.monotonic()
        details = wait_job_status(cluster, job_id, {"FAILED"}, timeout=20)
        assert time.monotonic() - stopped_at < 12
        assert details.failure.reason in (common_pb2.HEARTBEAT_TIMEOUT,
                                          common_pb2.TASK_EXECUTOR_LOST,
                                          common_pb2.REMOTE_TRANSPORT)


def test_failing_user_function_fails_the_job_naming_the_operator(cluster_factory, tmp_path):
    cluster = cluster_factory(1, 2)
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment, DiscardingSink
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.from_sequence(0, 100_000).map(lambda n: 1 // (n - 77_777)).sink_to(DiscardingSink())
        env.execute("divides by zero")
    """)
    result = cluster.weir("run", str(job))
    assert result.returncode == 1
    assert "ZeroDivisionError" in result.stderr and "Map" in result.stderr
    assert "Traceback" not in result.stderr
    poll(lambda: cluster.status()["slots_free"] == 2, 10, what="slots to be freed")
