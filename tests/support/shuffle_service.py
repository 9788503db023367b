"""The external shuffle service for tests: a real daemon process (``weir shuffle-service``),
or the service running in the test's own process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import REPO, poll
from weir.core.cluster_directory import ShuffleServiceInfo
from weir.shuffle.external.service import ShuffleServiceDaemon

#: The shuffle service factory the daemons load to use it.
FACTORY = "weir.shuffle.external.factory.ExternalShuffleServiceFactory"


def shuffle_options(address: str) -> list[str]:
    """Cluster options (KEY=VALUE) that make a cluster's jobs shuffle through ``address``."""
    return [f"shuffle-service-factory.class={FACTORY}", f"shuffle-service.address={address}"]


@pytest.fixture
def shuffle_service(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(address, data directory) of a shuffle service, stopped at the end of the test."""
    data = tmp_path / "shuffle-data"
    info = tmp_path / "shuffle-service.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "weir", "shuffle-service", "--dir", str(data), "--port", "0",
         "--info-file", str(info)], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        address = poll(lambda: (i := ShuffleServiceInfo.read(info)) and i.address, 30,
                       what="the shuffle service to listen")
        yield address, data
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def start_shuffle_daemon(tmp_path: Path) -> Iterator[Callable[..., ShuffleServiceDaemon]]:
    """``start(**options)``: a shuffle service running in this process (its data in the
    test's directory), stopped at the end of the test."""
    started: list[ShuffleServiceDaemon] = []

    def start(**kwargs: Any) -> ShuffleServiceDaemon:
        daemon = ShuffleServiceDaemon(str(tmp_path / "data"), **kwargs)
        daemon.start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()
