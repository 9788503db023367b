"""Cluster fixtures: real daemon processes (``LocalCluster``) and in-process mini clusters."""

from __future__ import annotations

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
        result = weir_cli("cluster", "start", "--dir", str(self.dir), "--taskexecutors",
                          str(taskexecutors), "--slots", str(slots),
                          *(f"-D{d}" for d in dynamic))
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
        from weir.client import JobMasterClient

        return JobMasterClient(self.address, timeout=10)

    def stop(self) -> None:
        if (self.dir / "jobmaster.json").exists() or (self.dir / "cluster.json").exists():
            weir_cli("cluster", "stop", "--dir", str(self.dir), timeout=60)


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
