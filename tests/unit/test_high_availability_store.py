"""The high-availability job store on file://: layout, atomic and verified writes, pointers
that never go backwards, and clear errors for damaged or missing files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from weir.checkpoint.storage import create_storage
from weir.core.config import Configuration
from weir.core.errors import ConfigError, CorruptStateError
from weir.jobmaster.high_availability import (
    KIND_JOB_GRAPH,
    StorageJobStore,
    create_job_store,
    encode,
)
from weir.testing.job_store import JOB, OTHER, check_job_store


@pytest.fixture
def store(tmp_path: Path) -> StorageJobStore:
    created = create_job_store(Configuration.from_pairs({
        "high-availability.type": "file",
        "high-availability.storageDir": f"file://{tmp_path}/ha"}))
    assert isinstance(created, StorageJobStore)
    return created


def test_the_store_on_file(store: StorageJobStore):
    check_job_store(store)


def test_layout_is_cluster_id_jobs_job_id(tmp_path: Path):
    store = create_job_store(Configuration.from_pairs({
        "high-availability.type": "FILE", "high-availability.cluster-id": "blue",
        "high-availability.storageDir": str(tmp_path)}))
    store.put_job(b"g", JOB)
    store.put_checkpoint_pointer(JOB, 1, "file:///c/chk-1")
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                   if p.is_file())
    assert files == [f"blue/jobs/{JOB}/checkpoint", f"blue/jobs/{JOB}/jobgraph"]


def test_a_resubmitted_job_does_not_inherit_a_stale_pointer(store: StorageJobStore):
    store.put_job(b"first", JOB)
    store.put_checkpoint_pointer(JOB, 9, "file:///c/chk-9")
    store.remove_job(JOB)
    store.put_job(b"second", JOB)
    assert store.checkpoint_pointer(JOB) is None
    store.put_checkpoint_pointer(JOB, 1, "file:///c/chk-1")   # starts over from 1
    assert store.checkpoint_pointer(JOB).checkpoint_id == 1


@pytest.mark.parametrize(("damage", "message"), [
    (lambda data: data[:-3], "truncated"),
    (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "checksum mismatch"),
    (lambda data: b"", "not a weir high-availability file"),
    (lambda data: b'{"job_id": "x", "checkpoint_id": 3}', "not a weir high-availability file"),
    (lambda data: encode(KIND_JOB_GRAPH, b"a graph"), "holds a job graph, not a checkpoint"),
])
def test_a_damaged_pointer_is_refused_naming_the_file(store: StorageJobStore, damage, message):
    store.put_job(b"graph", JOB)
    store.put_checkpoint_pointer(JOB, 2, "file:///c/chk-2")
    path = Path(store.location(JOB, "checkpoint").removeprefix("file://"))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptStateError, match=message) as err:
        store.checkpoint_pointer(JOB)
    assert str(path) in str(err.value)


def test_a_pointer_with_a_valid_envelope_but_wrong_content_is_refused(store: StorageJobStore):
    from weir.jobmaster.high_availability import KIND_POINTER

    store.put_job(b"graph", JOB)
    path = Path(store.location(JOB, "checkpoint").removeprefix("file://"))
    for payload, message in [
            (b"not json", "not a checkpoint pointer"),
            (b'{"job_id": "%s", "checkpoint_id": 0, "metadata_uri": "x"}' % OTHER.encode(),
             f"of job '{OTHER}'"),
            (b'{"job_id": "%s", "checkpoint_id": "7", "metadata_uri": "x"}' % JOB.encode(),
             "checkpoint '7'")]:
        path.write_bytes(encode(KIND_POINTER, payload))
        with pytest.raises(CorruptStateError, match=message):
            store.checkpoint_pointer(JOB)


def test_a_crash_mid_write_leaves_the_previous_pointer(store: StorageJobStore, monkeypatch):
    store.put_job(b"graph", JOB)
    store.put_checkpoint_pointer(JOB, 4, "file:///c/chk-4")
    import os

    # The process dies between writing the temporary file and renaming it over the pointer.
    def crash(*args: object) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        store.put_checkpoint_pointer(JOB, 5, "file:///c/chk-5")
    monkeypatch.undo()
    # SIGKILL would not even clean up: a torn temporary file stays next to the pointer.
    directory = Path(store.location(JOB).removeprefix("file://"))
    (directory / ".checkpoint.x1y2.weir-tmp").write_bytes(b"WEIRHA\x01\x02")
    reopened = StorageJobStore(create_storage(store.uri))
    assert reopened.checkpoint_pointer(JOB).checkpoint_id == 4
    assert reopened.job_ids() == [JOB]


def test_a_write_is_read_back_before_it_counts(store: StorageJobStore, monkeypatch):
    storage = store.storage
    real_write = storage.write

    def lossy(relative: str, data: bytes):       # a storage that loses the last byte
        return real_write(relative, bytes(data)[:-1])

    monkeypatch.setattr(storage, "write", lossy)
    with pytest.raises(CorruptStateError, match="truncated"):
        store.put_job(b"graph", JOB)


def test_concurrent_pointer_writes_keep_the_newest(store: StorageJobStore):
    store.put_job(b"graph", JOB)
    threads = [threading.Thread(target=store.put_checkpoint_pointer,
                                args=(JOB, n, f"file:///c/chk-{n}")) for n in range(1, 41)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.checkpoint_pointer(JOB).checkpoint_id == 40


def test_only_job_ids_become_paths(store: StorageJobStore):
    with pytest.raises(ValueError, match="not a job id"):
        store.put_job(b"graph", "../../etc")


def test_listing_ignores_what_is_not_a_stored_job(store: StorageJobStore, tmp_path: Path):
    store.put_job(b"graph", JOB)
    jobs = tmp_path / "ha" / "default" / "jobs"
    (jobs / OTHER).mkdir()
    (jobs / OTHER / "checkpoint").write_bytes(b"a pointer left by a removal cut short")
    (jobs / "notes").mkdir()
    (jobs / "notes" / "jobgraph").write_bytes(b"?")
    assert store.job_ids() == [JOB]


def test_no_high_availability_by_default_and_with_none():
    assert create_job_store(Configuration()) is None
    assert create_job_store(Configuration.from_pairs({"high-availability.type": "NONE"})) is None


@pytest.mark.parametrize(("pairs", "message"), [
    ({"high-availability.type": "file"}, "high-availability.storageDir is not set"),
    ({"high-availability.type": "file", "high-availability.storageDir": "relative/ha"},
     "invalid value for 'high-availability.storageDir'"),
    ({"high-availability.type": "file", "high-availability.storageDir": "ftp://x/ha"},
     "invalid value for 'high-availability.storageDir'"),
])
def test_a_bad_storage_dir_is_one_config_error_naming_the_key(pairs, message):
    with pytest.raises(ConfigError, match=message):
        create_job_store(Configuration.from_pairs(pairs))


@pytest.mark.parametrize(("key", "value"), [
    ("high-availability.type", "zookeeper"), ("high-availability.cluster-id", "../x")])
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        Configuration.from_pairs({key: value})


def test_the_jobmaster_refuses_to_start_without_a_storage_dir():
    from weir.jobmaster.daemon import JobMaster

    with pytest.raises(ConfigError, match=r"high-availability\.storageDir"):
        JobMaster(Configuration.from_pairs({"high-availability.type": "file",
                                            "jobmaster.rpc.port": "0"}))
