"""A TaskExecutor's RocksDB instances live in a directory of its own (its working directory,
or ``state.backend.rocksdb.localdir/weir-tm-<resource id>``), which it empties when it
starts: the instances a killed run of it left do not stay on the disk."""

from __future__ import annotations

from pathlib import Path

from tests.support.health import free_port
from weir.core.config import Configuration
from weir.taskexecutor.daemon import TaskExecutor, rocksdb_dir


def test_the_rocksdb_directory_is_the_taskexecutor_s_own(tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert rocksdb_dir(Configuration(), work, "te-1") == work / "rocksdb"
    local = Configuration.from_pairs({"state.backend.rocksdb.localdir": str(tmp_path / "ssd")})
    assert rocksdb_dir(local, work, "te-1") == tmp_path / "ssd" / "weir-tm-te-1"


def test_a_taskexecutor_started_again_removes_the_instances_it_left(tmp_path: Path) -> None:
    work = tmp_path / "work"
    stale = work / "rocksdb" / "weir-rocksdb-Keyed-0-abc" / "db"
    stale.mkdir(parents=True)
    (stale / "000012.sst").write_bytes(b"x" * 1024)
    kept = work / "localState" / "copy"  # task-local recovery's copies are not touched
    kept.mkdir(parents=True)
    te = TaskExecutor(f"127.0.0.1:{free_port()}", Configuration.from_pairs({
        "metrics.reporter.prom.port": "0", "taskmanager.resource-id": "te-restarted",
        "process.taskmanager.working-dir": str(work)}), num_slots=1)
    te.start()
    try:
        assert te.rocksdb_dir == work / "rocksdb"
        assert not te.rocksdb_dir.exists()
        assert kept.is_dir()
    finally:
        te.stop()
