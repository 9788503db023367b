"""`weir cluster start --with-s3`: an embedded SeaweedFS S3 server next to the daemons, with
enforced, stored credentials; shown by `status`, stopped by `stop`, data kept across
restarts."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.support.cluster import poll, weir_cli
from weir.checkpoint.seaweedfs import S3Credentials, s3_client
from weir.checkpoint.storage import create_storage
from weir.core.config import Configuration
from weir.core.processes import process_alive

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A cluster directory whose cluster (and S3 server) is stopped whatever happens."""
    directory = tmp_path / "cluster"
    yield directory
    if any(directory.glob("*.json")):
        weir_cli("cluster", "stop", "--dir", str(directory), timeout=60)


def start(directory: Path, *extra: str) -> None:
    result = weir_cli("cluster", "start", "--dir", str(directory), "--taskexecutors", "1",
                      "--slots", "1", "--with-s3", *extra)
    assert result.returncode == 0, result.stderr + result.stdout


def status(directory: Path) -> dict:
    result = weir_cli("cluster", "status", "--dir", str(directory), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def stop(directory: Path) -> list[int]:
    """Stop the cluster; returns the pids it ran, each checked to be gone."""
    info = status(directory)
    pids = [info["jobmaster"]["pid"], info["s3"]["pid"],
            *(te["pid"] for te in info["taskexecutors"])]
    result = weir_cli("cluster", "stop", "--dir", str(directory), timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"stopped {len(pids)} processes" in result.stdout
    poll(lambda: not any(process_alive(p) for p in pids), timeout=10,
         what="every process of the cluster to exit")
    assert not any(directory.glob("*.json"))
    return pids


def test_cluster_with_s3_serves_checkpoints_with_enforced_credentials(cluster_dir: Path):
    start(cluster_dir)
    info = status(cluster_dir)["s3"]
    assert info["alive"] and info["checkpoints"] == "s3://weir/checkpoints"
    assert info["endpoint"].startswith("http://127.0.0.1:")

    credentials_file = Path(info["credentials_file"])
    assert credentials_file.parent == cluster_dir / "s3"
    assert stat.S_IMODE(credentials_file.stat().st_mode) == 0o600
    credentials = S3Credentials.load(credentials_file)
    client = s3_client(info["endpoint"], credentials)
    client.put_object(Bucket="weir", Key="probe/hello", Body=b"kept across restarts")
    assert client.get_object(Bucket="weir", Key="probe/hello")["Body"].read() == \
        b"kept across restarts"

    for wrong in (S3Credentials(credentials.access_key, "not-the-secret"),
                  S3Credentials("nobody", credentials.secret_key)):
        with pytest.raises(ClientError) as refused:
            s3_client(info["endpoint"], wrong).get_object(Bucket="weir", Key="probe/hello")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

    # The daemons are pointed at it through their environment (not their command line).
    te_pid = status(cluster_dir)["taskexecutors"][0]["pid"]
    environ = dict(line.split("=", 1) for line in
                   Path(f"/proc/{te_pid}/environ").read_text().split("\0") if "=" in line)
    assert environ["WEIR_STATE_CHECKPOINTS_DIR"] == "s3://weir/checkpoints"
    assert environ["WEIR_S3_ENDPOINT"] == info["endpoint"]
    assert credentials.secret_key not in Path(f"/proc/{te_pid}/cmdline").read_text()
    conf = Configuration.from_pairs({
        "s3.endpoint": environ["WEIR_S3_ENDPOINT"], "s3.access-key": environ["WEIR_S3_ACCESS_KEY"],
        "s3.secret-key": environ["WEIR_S3_SECRET_KEY"]})
    storage = create_storage(environ["WEIR_STATE_CHECKPOINTS_DIR"], conf)
    assert storage.read(storage.write("job/chk-1/state", b"state")) == b"state"

    text = weir_cli("cluster", "status", "--dir", str(cluster_dir))
    assert f"S3 (SeaweedFS) {info['endpoint']}" in text.stdout
    assert "checkpoints s3://weir/checkpoints" in text.stdout

    stop(cluster_dir)

    # A restart reuses the credentials and the data.
    start(cluster_dir)
    again = status(cluster_dir)["s3"]
    assert S3Credentials.load(Path(again["credentials_file"])) == credentials
    assert s3_client(again["endpoint"], credentials).get_object(
        Bucket="weir", Key="probe/hello")["Body"].read() == b"kept across restarts"
    stop(cluster_dir)


def test_missing_weed_binary_is_one_clear_line(cluster_dir: Path):
    result = weir_cli("cluster", "start", "--dir", str(cluster_dir), "--with-s3",
                      "-Dcluster.s3.binary=/nonexistent/weed")
    assert result.returncode == 2
    assert result.stderr.startswith("error: the SeaweedFS binary /nonexistent/weed")
    assert "Traceback" not in result.stderr
    assert not (cluster_dir / "jobmaster.json").exists()


def test_a_server_that_does_not_start_names_its_log(cluster_dir: Path, tmp_path: Path):
    fake = tmp_path / "weed"
    fake.write_text("#!/bin/sh\necho 'weed: cannot open the data directory' >&2\nexit 3\n")
    fake.chmod(0o755)
    result = weir_cli("cluster", "start", "--dir", str(cluster_dir), "--with-s3",
                      f"-Dcluster.s3.binary={fake}")
    assert result.returncode == 2
    first_line = result.stderr.splitlines()[0]
    assert "the S3 server (SeaweedFS) did not start: weed exited with status 3" in first_line
    assert str(cluster_dir / "log" / "s3.log") in first_line
    assert "cannot open the data directory" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (cluster_dir / "jobmaster.json").exists()
    assert not (cluster_dir / "s3.json").exists()
