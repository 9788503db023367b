"""A real external shuffle service daemon (``weir shuffle-service``) for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import REPO, poll
from weir.core.cluster_directory import ShuffleServiceInfo

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
