"""Cluster fixtures (real daemon processes) and the helpers tests use with them.

The cluster itself, :func:`weir_cli` and :func:`poll` are :mod:`weir.testing.cluster`'s
(shared with the benchmarks); this module adds the pytest fixtures and what only tests
need.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from weir.testing.cluster import REPO, LocalCluster, poll, weir_cli

__all__ = [
    "REPO",
    "ClientEnvironment",
    "LocalCluster",
    "cluster_factory",
    "extra_taskexecutor",
    "job_details",
    "job_names",
    "poll",
    "shared_cluster",
    "stop_process",
    "user_error_line",
    "wait_all_running",
    "wait_job_status",
    "weir_cli",
    "write_job",
]


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """Stop a daemon the test started: SIGTERM (a stopped one is continued first), then
    SIGKILL if it has not exited within ``timeout`` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def extra_taskexecutor(cluster: LocalCluster, slots: int, *dynamic: str) -> Iterator[int]:
    """A TaskExecutor started by hand that joins ``cluster`` (``dynamic``: KEY=VALUE
    options); yields its pid and stops it on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "weir", "taskexecutor", "--jobmaster", cluster.address,
         "--slots", str(slots), *(f"-D{o}" for o in dynamic),
         "-Dmetrics.reporter.prom.port=0"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        yield proc.pid
    finally:
        stop_process(proc)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Start local clusters; every one is stopped at the end of the test."""
    clusters: list[LocalCluster] = []

    def make(taskexecutors: int = 2, slots: int = 2, *dynamic: str) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster-{len(clusters)}")
        clusters.append(cluster)
        return cluster.start(taskexecutors, slots, *dynamic)

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster (2 TaskExecutors x 2 slots) shared by a module's well-behaved tests."""
    cluster = LocalCluster(tmp_path_factory.mktemp("shared") / "cluster").start(2, 2)
    yield cluster
    cluster.stop()


def write_job(directory: Path, source: str, name: str = "job.py") -> Path:
    """Write a job program (dedented) and return its path."""
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path


class ClientEnvironment:
    """Submits jobs from the test process to a running cluster (as ``weir run`` would)."""

    def __init__(self, cluster: LocalCluster, **config: str) -> None:
        from weir.core.config import Configuration
        from weir.core.execution import ExecutionContext

        # Only ``config``: a client does not know the options the cluster was started with.
        self.context = ExecutionContext(address=cluster.address, token=config.pop("token", None),
                                        configuration=Configuration.from_pairs(config),
                                        cluster_dir=str(cluster.dir))

    def __enter__(self) -> Any:
        from weir import StreamExecutionEnvironment
        from weir.core.execution import set_execution_context

        set_execution_context(self.context)
        return StreamExecutionEnvironment.get_execution_environment()

    def __exit__(self, *exc: object) -> None:
        from weir.core.execution import set_execution_context

        set_execution_context(None)


def job_details(cluster: LocalCluster, job_id: str) -> Any:
    client = cluster.client()
    try:
        return client.job_details(job_id)
    finally:
        client.close()


def wait_job_status(cluster: LocalCluster, job_id: str, statuses: set[str],
                    timeout: float) -> Any:
    """Poll until the job reaches one of ``statuses`` (names such as "RUNNING")."""
    from weir.client.cluster_client import job_status_name

    return poll(lambda: (d := job_details(cluster, job_id)) and
                job_status_name(d.summary.status) in statuses and d,
                timeout, interval=0.1, what=f"job {job_id} to reach {statuses}")


def wait_all_running(cluster: LocalCluster, job_id: str, timeout: float = 60) -> Any:
    from weir.proto import common_pb2

    def ready() -> Any:
        details = job_details(cluster, job_id)
        subtasks = [s for v in details.vertices for s in v.subtasks]
        return subtasks and all(s.state == common_pb2.RUNNING for s in subtasks) and details

    return poll(ready, timeout, interval=0.1, what=f"all tasks of {job_id} to run")


def user_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The one ``error:`` line a refused command printed (exit 2, no traceback), checked to
    contain every needle."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def job_names(cluster: LocalCluster) -> list[str]:
    """Names of every job the cluster's JobMaster knows."""
    client = cluster.client()
    try:
        return [job.name for job in client.list_jobs()]
    finally:
        client.close()
