"""A TaskExecutor's RocksDB instances live in a directory of its own (its working directory,
or ``state.backend.rocksdb.localdir/weir-tm-<resource id>``), which it empties when it
starts: the instances a killed run of it left do not stay on the disk. It holds its
directories locked while it runs (taskexecutor/local_dirs.py): a second process given
the same ones is refused, and the directories of a SIGKILLed TaskExecutor whose resource
id was random are removed by the next one to start on the host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import REPO, poll, stop_process
from tests.support.health import free_port
from weir.core.config import Configuration
from weir.taskexecutor.daemon import TaskExecutor, rocksdb_dir
from weir.taskexecutor.local_dirs import (
    EPHEMERAL_MARK,
    LOCK_FILE,
    DirectoryInUseError,
    DirectoryLock,
    empty_directory,
    sweep_abandoned,
)


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


def _taskexecutor(tmp_path: Path, name: str, *dynamic: str) -> subprocess.Popen[bytes]:
    """A TaskExecutor process whose temp directory is ``tmp_path/tmp`` (its JobMaster is
    not there: it keeps trying to register, which is all these tests need)."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "weir", "taskexecutor", "--jobmaster",
         f"127.0.0.1:{free_port()}", "--slots", "1", "-Dmetrics.reporter.prom.port=0",
         *dynamic],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / f"{name}.err").open("wb"),
        stdin=subprocess.DEVNULL, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp")})


def _held_by(path: Path) -> int | None:
    """The pid in ``path``'s lock file once one was written there."""
    try:
        text = (path / LOCK_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text else None


def _ephemeral_dirs(parent: Path) -> dict[int, Path]:
    """The ephemeral TaskExecutor directories under ``parent``, by the pid holding them."""
    found = {}
    for path in parent.glob("weir-tm-*"):
        pid = _held_by(path)
        if pid is not None and (path / EPHEMERAL_MARK).exists():
            found[pid] = path
    return found


def test_a_killed_taskexecutor_s_directories_are_removed_by_the_next_one(
        tmp_path: Path) -> None:
    """No resource id: the working directory under the temp directory and the RocksDB
    directory under the localdir are named after a random id, so only a sweep finds them."""
    ssd, tmp = tmp_path / "ssd", tmp_path / "tmp"
    localdir = f"-Dstate.backend.rocksdb.localdir={ssd}"
    first = _taskexecutor(tmp_path, "first", localdir)
    second = _taskexecutor(tmp_path, "second", localdir)
    third = None
    try:
        for parent in (tmp, ssd):
            poll(lambda parent=parent: {first.pid, second.pid} <= set(_ephemeral_dirs(parent)),
                 timeout=60, what=f"both TaskExecutors' directories under {parent}")
        killed = {parent: _ephemeral_dirs(parent)[first.pid] for parent in (tmp, ssd)}
        kept = {parent: _ephemeral_dirs(parent)[second.pid] for parent in (tmp, ssd)}
        (killed[ssd] / "weir-rocksdb-Keyed-0-abc").mkdir()
        (killed[ssd] / "weir-rocksdb-Keyed-0-abc" / "000012.sst").write_bytes(b"x" * 1024)
        (kept[ssd] / "instance-in-use").mkdir()
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert all(path.is_dir() for path in killed.values())  # nothing removes them yet
        third = _taskexecutor(tmp_path, "third", localdir)
        poll(lambda: not any(path.exists() for path in killed.values()), timeout=60,
             what="the killed TaskExecutor's directories to be removed")
        assert all(path.is_dir() for path in kept.values())
        assert (kept[ssd] / "instance-in-use").is_dir()
        assert second.poll() is None and third.poll() is None
    finally:
        for proc in (first, second, third):
            if proc is not None:
                stop_process(proc)
    # A clean stop removes what a random resource id named.
    assert list(tmp.glob("weir-tm-*")) == [] and list(ssd.glob("weir-tm-*")) == []


def test_a_second_taskexecutor_with_the_same_directory_is_refused(tmp_path: Path) -> None:
    """Same resource id on one host: the second one exits with one line naming the directory
    and the first one's pid, and leaves the first one's RocksDB instances alone."""
    work = tmp_path / "work"
    same = ["-Dtaskmanager.resource-id=te-twice", f"-Dprocess.taskmanager.working-dir={work}"]
    first = _taskexecutor(tmp_path, "first", *same)
    try:
        poll(lambda: _held_by(work) == first.pid, timeout=60,
             what="the first TaskExecutor to hold its directory")
        instance = work / "rocksdb" / "weir-rocksdb-Keyed-0-abc"
        instance.mkdir(parents=True)
        second = _taskexecutor(tmp_path, "second", *same)
        assert second.wait(60) == 2  # a user error
        output = (tmp_path / "second.err").read_text()
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert errors == [
            f"error: the TaskExecutor directory {work} is in use by another process on this "
            f"host (pid {first.pid}): give each TaskExecutor its own taskmanager.resource-id "
            "or process.taskmanager.working-dir"], output
        assert "Traceback" not in output
        assert instance.is_dir() and first.poll() is None and _held_by(work) == first.pid
    finally:
        stop_process(first)
    assert work.is_dir()  # a fixed working directory stays: its local state is kept


def test_sweeping_takes_only_marked_unlocked_directories_of_this_user(tmp_path: Path) -> None:
    held = DirectoryLock.acquire(tmp_path / "weir-tm-alive", ephemeral=True)
    fixed = DirectoryLock.acquire(tmp_path / "weir-tm-fixed-id", ephemeral=False)
    gone = DirectoryLock.acquire(tmp_path / "weir-tm-gone", ephemeral=True)
    fixed.release()
    gone.release()
    other = tmp_path / "other-ephemeral"  # not a TaskExecutor directory's name
    other.mkdir()
    (other / EPHEMERAL_MARK).touch()
    (tmp_path / "weir-tm-link").symlink_to(tmp_path / "weir-tm-gone")
    try:
        assert sweep_abandoned(tmp_path) == [tmp_path / "weir-tm-gone"]
        assert sorted(path.name for path in tmp_path.iterdir()) == [
            "other-ephemeral", "weir-tm-alive", "weir-tm-fixed-id", "weir-tm-link"]
        with pytest.raises(DirectoryInUseError, match=f"pid {os.getpid()}"):
            DirectoryLock.acquire(tmp_path / "weir-tm-alive", ephemeral=True)
    finally:
        held.release()


def test_emptying_keeps_the_lock(tmp_path: Path) -> None:
    lock = DirectoryLock.acquire(tmp_path / "weir-tm-x", ephemeral=True)
    try:
        (tmp_path / "weir-tm-x" / "instance" / "db").mkdir(parents=True)
        (tmp_path / "weir-tm-x" / "file").write_text("x")
        empty_directory(tmp_path / "weir-tm-x")
        assert sorted(path.name for path in (tmp_path / "weir-tm-x").iterdir()) == [
            EPHEMERAL_MARK, LOCK_FILE]
        with pytest.raises(DirectoryInUseError):
            DirectoryLock.acquire(tmp_path / "weir-tm-x", ephemeral=True)
    finally:
        lock.release()
