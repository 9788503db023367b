"""The health probes of ``weir taskexecutor`` and ``weir jobmaster`` processes through
their lifecycle, and a SIGTERM whose deregistration cannot reach the JobMaster: the
TaskExecutor is ``stopping`` meanwhile, gives up after its deadline, logs it and exits
cleanly; the JobMaster, once it answers again, still loses it through the closed heartbeat
stream.

The JobMaster is frozen (SIGSTOP) to make it unreachable: alive, holding its connections,
answering nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cluster import REPO, poll, stop_process
from tests.support.health import free_port, probe, wait_probe
from weir.core.cluster_directory import JobMasterInfo, TaskExecutorInfo
from weir.testing.faults import frozen

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``weir <args>`` processes logging to ``tmp_path``; every one is stopped at
    the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "weir", *args, "-Dmetrics.reporter.prom.port=0",
             "--info-file", str(tmp_path / f"{name}.json"),
             "--log-file", str(tmp_path / f"{name}.log")],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        stop_process(proc)


def test_probes_of_daemon_processes_and_a_deregistration_that_cannot_be_delivered(
        daemons: Callable[..., subprocess.Popen[bytes]], tmp_path: Path) -> None:
    port = free_port()
    te = daemons("taskexecutor", "taskexecutor", "--jobmaster", f"127.0.0.1:{port}",
                 "--slots", "1", "-Dtaskmanager.resource-id=te-probed")
    te_info = poll(lambda: TaskExecutorInfo.read(tmp_path / "taskexecutor.json"), 60,
                   what="the TaskExecutor to start")
    assert wait_probe(te_info.metrics_url, "/healthz", 200)["status"] == "alive"
    assert wait_probe(te_info.metrics_url, "/readyz", 503)["reason"] == \
        f"registering with the JobMaster at 127.0.0.1:{port}"

    jm = daemons("jobmaster", "jobmaster", f"-Djobmaster.rpc.port={port}",
                 "-Drest.port=0")
    jm_info = poll(lambda: JobMasterInfo.read(tmp_path / "jobmaster.json"), 60,
                   what="the JobMaster to start")
    assert wait_probe(jm_info.metrics_url, "/healthz", 200)["status"] == "alive"
    assert wait_probe(te_info.metrics_url, "/readyz", 200)["status"] == "ready"
    assert wait_probe(jm_info.metrics_url, "/readyz", 200,
                      reason_ends="1 TaskExecutor(s) registered")["status"] == "ready"

    with frozen(jm.pid):
        te.send_signal(signal.SIGTERM)
        # It waits for the frozen JobMaster to take its deregistration: stopping.
        assert wait_probe(te_info.metrics_url, "/healthz", 503) == {
            "status": "stopping", "reason": "the TaskExecutor is shutting down"}
        assert probe(te_info.metrics_url, "/readyz")[0] == 503
        assert te.wait(30) == 0
    log = (tmp_path / "taskexecutor.log").read_text()
    assert "could not deregister from the JobMaster" in log, log[-2000:]
    # Unfrozen, the JobMaster sees the closed heartbeat stream and drops it.
    assert wait_probe(jm_info.metrics_url, "/readyz", 200,
                      reason_ends="0 TaskExecutor(s) registered")["status"] == "ready"

    jm.send_signal(signal.SIGTERM)
    assert jm.wait(30) == 0
