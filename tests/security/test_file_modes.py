"""What weir writes is its owner's only: the cluster directory (0700) and its logs (0600),
the external shuffle service's partitions (0700 directories, 0600 files); and a credentials
file other users can read is refused, naming the file and `chmod 600`."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.support.cluster import weir_cli
from weir.checkpoint.seaweedfs import S3Credentials
from weir.core.errors import ConfigError
from weir.shuffle.external.storage import PartitionStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_new_cluster_directory_and_its_logs_are_private(cluster_factory):
    cluster = cluster_factory(1, 1)
    assert mode(cluster.dir) == 0o700
    assert mode(cluster.dir / "log") == 0o700
    logs = sorted(p.name for p in (cluster.dir / "log").iterdir())
    assert {"jobmaster.log", "jobmaster.out", "taskexecutor-0.log",
            "taskexecutor-0.out"} <= set(logs), logs
    for log in (cluster.dir / "log").iterdir():
        assert mode(log) == 0o600, f"{log.name} is {oct(mode(log))}"


def test_an_existing_cluster_directory_is_tightened(tmp_path: Path):
    directory = tmp_path / "cluster"
    (directory / "log").mkdir(parents=True)
    directory.chmod(0o755)
    (directory / "log").chmod(0o755)
    old_log = directory / "log" / "jobmaster.log"
    old_log.write_text("an earlier run, readable by everyone\n")
    old_log.chmod(0o644)
    started = weir_cli("cluster", "start", "--dir", str(directory), "--taskexecutors", "1",
                       "--slots", "1")
    try:
        assert started.returncode == 0, started.stderr
        assert mode(directory) == 0o700
        assert mode(directory / "log") == 0o700
        assert mode(old_log) == 0o600
        assert old_log.read_text().startswith("an earlier run")
    finally:
        weir_cli("cluster", "stop", "--dir", str(directory), timeout=60)


def test_shuffle_partitions_are_private(tmp_path: Path):
    data = tmp_path / "shuffle"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    store = PartitionStore(data)
    try:
        job, partition = "a" * 32, "b" * 32
        write = store.begin_write(job, partition, num_subpartitions=2)
        in_progress = write.directory
        assert mode(in_progress) == 0o700
        assert mode(in_progress / "data") == 0o600
        write.add(0, b"record bytes")
        write.add(1, b"more")
        write.commit(2, len(b"record bytes") + len(b"more"))
        assert mode(data) == 0o700
        assert mode(data / job) == 0o700
        assert mode(data / job / partition) == 0o700
        files = _files_under(data)
        assert {p.name for p in files} >= {"data", "index"}
        for path in files:
            assert mode(path) == 0o600, f"{path.relative_to(data)} is {oct(mode(path))}"
    finally:
        store.close()


def _credentials_file(directory: Path, file_mode: int) -> Path:
    path = directory / "credentials.json"
    path.write_text(json.dumps({"access_key": "weir-ak", "secret_key": "s3cret"}))
    path.chmod(file_mode)
    return path


@pytest.mark.parametrize("file_mode", [0o644, 0o640, 0o604])
def test_a_credentials_file_others_can_read_is_refused(tmp_path: Path, file_mode: int):
    path = _credentials_file(tmp_path, file_mode)
    with pytest.raises(ConfigError, match=rf"{path}.*chmod 600 {path}"):
        S3Credentials.load(path)
    path.chmod(0o600)
    assert S3Credentials.load(path) == S3Credentials("weir-ak", "s3cret")


def test_cluster_start_refuses_a_readable_credentials_file_in_one_line(tmp_path: Path):
    directory = tmp_path / "cluster"
    (directory / "s3").mkdir(parents=True)
    path = _credentials_file(directory / "s3", 0o644)
    result = weir_cli("cluster", "start", "--dir", str(directory), "--taskexecutors", "1",
                      "--slots", "1", "--with-s3", timeout=120)
    try:
        assert result.returncode == 2, result.stdout + result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert str(path) in lines[0] and f"chmod 600 {path}" in lines[0]
    finally:
        if any(directory.glob("*.json")):
            weir_cli("cluster", "stop", "--dir", str(directory), timeout=60)
