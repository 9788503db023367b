"""Cluster fixtures: real daemon processes (``LocalCluster``) and in-process mini clusters."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def weir_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the ``weir`` command in a subprocess (as a user would)."""
    return subprocess.run([sys.executable, "-m", "weir", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or REPO,
                          env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)})


def poll(predicate: Callable[[], Any], timeout: float, interval: float = 0.05,
         what: str = "condition") -> Any:
    """Wait until ``predicate()`` is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class LocalCluster:
    """A JobMaster and TaskExecutors as real OS processes, via ``weir cluster start``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def start(self, taskexecutors: int = 2, slots: int = 2, *dynamic: str) -> LocalCluster:
        """``dynamic``: KEY=VALUE options, or flags of ``cluster start`` (``--tls``)."""
        result = weir_cli("cluster", "start", "--dir", str(self.dir), "--taskexecutors",
                          str(taskexecutors), "--slots", str(slots),
                          *(d if d.startswith("--") else f"-D{d}" for d in dynamic))
        assert result.returncode == 0, result.stderr + result.stdout
        return self

    @property
    def address(self) -> str:
        return str(json.loads((self.dir / "jobmaster.json").read_text())["address"])

    def status(self) -> dict[str, Any]:
        result = weir_cli("cluster", "status", "--dir", str(self.dir), "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def taskexecutor_pids(self) -> list[int]:
        return [int(json.loads(p.read_text())["pid"])
                for p in sorted(self.dir.glob("taskexecutor-*.json"))]

    def kill_taskexecutor(self, index: int = 0, sig: int = signal.SIGKILL) -> int:
        pid = self.taskexecutor_pids()[index]
        os.kill(pid, sig)
        return pid

    def weir(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A client command against this cluster (``--dir`` added)."""
        return weir_cli(*args[:1], "--dir", str(self.dir), *args[1:], timeout=timeout)

    def client(self) -> Any:
        from weir.client.cluster_client import JobMasterClient

        return JobMasterClient(self.address, timeout=10)

    def stop(self) -> None:
        if (self.dir / "jobmaster.json").exists() or (self.dir / "cluster.json").exists():
            weir_cli("cluster", "stop", "--dir", str(self.dir), timeout=60)


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
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


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
