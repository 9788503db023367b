"""/healthz and /readyz of a JobMaster and a TaskExecutor (real daemons in this process:
gRPC, the data server and the HTTP endpoints on free ports) through their lifecycle: the
TaskExecutor before its JobMaster exists, both registered, and each stopping.

A JobMaster whose main thread is held busy makes the states that last milliseconds last
as long as the test needs: a TaskExecutor stopping waits there for its deregistration to
be taken, a JobMaster stopping for its jobs to be cancelled. The probes answer meanwhile,
and also while the TaskExecutor's own lock is held: they wait for no other thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import poll
from tests.support.faulty_storage import FaultyStorage
from tests.support.health import free_port, probe, wait_probe
from weir.core.config import Configuration
from weir.jobmaster.daemon import JobMaster
from weir.jobmaster.high_availability import StorageJobStore
from weir.taskexecutor import daemon as te_daemon
from weir.taskexecutor.daemon import TaskExecutor


@contextmanager
def main_thread_held(jm: JobMaster) -> Iterator[threading.Event]:
    """The JobMaster's main thread busy until the yielded event is set (or the block ends)."""
    release, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(30)

    jm.main.submit(hold)
    assert holding.wait(10)
    try:
        yield release
    finally:
        release.set()


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def taskexecutor(port: int) -> Iterator[TaskExecutor]:
    te = TaskExecutor(f"127.0.0.1:{port}", Configuration.from_pairs({
        "metrics.reporter.prom.port": "0", "taskmanager.resource-id": "te-health"}),
        num_slots=1)
    te.start()
    yield te
    te.stop()


@pytest.fixture
def jobmaster(port: int) -> Iterator[JobMaster]:
    """Not started: the test starts it when the TaskExecutor has waited for it."""
    jm = JobMaster(Configuration.from_pairs({"jobmaster.rpc.port": str(port), "rest.port": "0",
                                             "metrics.reporter.prom.port": "0"}))
    yield jm
    jm.stop()


def stopping_in_background(stop: Any) -> threading.Thread:
    thread = threading.Thread(target=stop, name="stopping", daemon=True)
    thread.start()
    return thread


def test_probes_through_registration_and_shutdown(taskexecutor: TaskExecutor,
                                                  jobmaster: JobMaster, port: int,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    te_url = taskexecutor.metrics_url
    # Before registration: alive, not ready, and saying whom it waits for.
    assert wait_probe(te_url, "/healthz", 200)["status"] == "alive"
    body = wait_probe(te_url, "/readyz", 503)
    assert body == {"status": "not ready",
                    "reason": f"registering with the JobMaster at 127.0.0.1:{port}"}

    jobmaster.start()
    jm_url = jobmaster.metrics_url
    assert wait_probe(jm_url, "/healthz", 200)["status"] == "alive"
    assert wait_probe(te_url, "/readyz", 200) == {
        "status": "ready", "reason": f"registered with the JobMaster at 127.0.0.1:{port}"}
    assert wait_probe(jm_url, "/readyz", 200,
                      reason_ends="1 TaskExecutor(s) registered")["status"] == "ready"

    # The probes wait for no lock and no busy thread.
    with taskexecutor._lock, main_thread_held(jobmaster):
        started = time.monotonic()
        assert probe(te_url, "/readyz")[0] == 200
        assert probe(te_url, "/healthz")[0] == 200
        assert probe(jm_url, "/readyz")[0] == 200
        assert probe(jm_url, "/healthz")[0] == 200
        assert time.monotonic() - started < 2

    # Stopping: the TaskExecutor deregisters first and waits for the (busy) JobMaster.
    with main_thread_held(jobmaster) as release:
        stopping = stopping_in_background(lambda: taskexecutor.stop("SIGTERM"))
        assert wait_probe(te_url, "/healthz", 503) == {
            "status": "stopping", "reason": "the TaskExecutor is shutting down"}
        assert probe(te_url, "/readyz")[0] == 503
        assert stopping.is_alive(), "the TaskExecutor stopped without deregistering"
        release.set()
        stopping.join(15)
        assert not stopping.is_alive()
    assert "deregistered from the JobMaster" in caplog.text
    assert "TaskExecutor te-health (" in caplog.text and "shut down (SIGTERM)" in caplog.text
    assert wait_probe(jm_url, "/readyz", 200,
                      reason_ends="0 TaskExecutor(s) registered")["status"] == "ready"

    # The JobMaster stopping: 503 while it cancels its jobs (held up here).
    with main_thread_held(jobmaster) as release:
        stopping = stopping_in_background(jobmaster.stop)
        assert wait_probe(jm_url, "/healthz", 503) == {
            "status": "stopping", "reason": "the JobMaster is shutting down"}
        assert probe(jm_url, "/readyz")[0] == 503
        release.set()
        stopping.join(30)
        assert not stopping.is_alive()


def test_a_jobmaster_that_does_not_answer_delays_the_shutdown_only_until_the_deadline(
        taskexecutor: TaskExecutor, jobmaster: JobMaster, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(te_daemon, "DEREGISTRATION_TIMEOUT_S", 1.0)
    jobmaster.start()
    assert taskexecutor.wait_registered(20)
    with main_thread_held(jobmaster):
        started = time.monotonic()
        taskexecutor.stop("SIGTERM")
        took = time.monotonic() - started
    assert took < 1.0 + 5, f"the shutdown took {took:.1f} s"
    assert "could not deregister from the JobMaster" in caplog.text
    assert "DEADLINE_EXCEEDED" in caplog.text
    # The stream it closed tells the JobMaster instead.
    poll(lambda: not jobmaster.main.call(lambda: list(jobmaster.resources.task_executors)),
         20, interval=0.05, what="the JobMaster to lose the TaskExecutor")


def test_with_high_availability_a_jobmaster_is_ready_once_its_jobs_are_recovered(
        tmp_path: Path) -> None:
    jm = JobMaster(Configuration.from_pairs({
        "jobmaster.rpc.port": "0", "metrics.reporter.prom.port": "0", "rest.port": "0",
        "high-availability.type": "file",
        "high-availability.storageDir": (tmp_path / "ha").as_uri()}))
    # The job store's listing held back: the recovery is in progress while it waits.
    storage = FaultyStorage(tmp_path / "ha")
    storage.list_gate = threading.Event()
    jm.job_store = StorageJobStore(storage)
    jm.start()
    try:
        assert wait_probe(jm.metrics_url, "/healthz", 200)["status"] == "alive"
        assert wait_probe(jm.metrics_url, "/readyz", 503) == {
            "status": "not ready",
            "reason": f"high availability: reading the jobs stored in {jm.job_store.uri}"}
        storage.list_gate.set()
        assert wait_probe(jm.metrics_url, "/readyz", 200)["status"] == "ready"
    finally:
        storage.list_gate.set()
        jm.stop()
