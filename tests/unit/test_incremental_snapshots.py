"""RocksDB native incremental snapshots: what gets uploaded, which checkpoint they build
on, the shared-state registry's reference counts, cancellation, local copies and the
handles' JSON form."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faulty_storage import FaultyStorage
from weir.checkpoint.shared_registry import SharedStateRegistry
from weir.core.errors import StateError, StorageError
from weir.state.descriptors import ValueStateDescriptor
from weir.state.handles import (
    CanonicalStateHandle,
    IncrementalRocksDBStateHandle,
    KeyedStateHandle,
)
from weir.state.key_groups import KeyGroupRange, assign_to_key_group
from weir.state.restore import restore
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.snapshot import SnapshotLocation

MAX_PAR = 128
ALL = KeyGroupRange(0, MAX_PAR - 1)


@pytest.fixture
def storage(tmp_path: Path) -> FaultyStorage:
    return FaultyStorage(tmp_path / "checkpoints")


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[RocksDBKeyedStateBackend]:
    created = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "rocks")
    created.get_state(ValueStateDescriptor("v"))
    yield created
    created.dispose()


def put(backend: RocksDBKeyedStateBackend, keys: list[int], rng: random.Random,
        size: int = 100) -> None:
    for start in range(0, len(keys), 10_000):
        chunk = keys[start:start + 10_000]
        groups = [assign_to_key_group(k, MAX_PAR) for k in chunk]
        # Random bytes: incompressible, so file sizes are proportional to rows written.
        backend.put_many("v", groups, chunk, None, [rng.randbytes(size) for _ in chunk])


def take_checkpoint(backend: RocksDBKeyedStateBackend, storage: FaultyStorage, n: int,
               local_root: Path | None = None) -> IncrementalRocksDBStateHandle:
    location = SnapshotLocation.for_checkpoint(storage, "job", n, "op-0", local_root)
    handle = backend.snapshot_to(n, location).run()
    assert isinstance(handle, IncrementalRocksDBStateHandle)
    return handle


def test_after_changing_one_percent_of_keys_about_one_percent_is_uploaded(backend, storage):
    rng = random.Random(1)
    keys = list(range(200_000))
    put(backend, keys, rng)
    # Settle the LSM tree first: the load itself triggered compactions, which would
    # otherwise still rewrite files between the two checkpoints.
    backend.compact()
    full = take_checkpoint(backend, storage, 1)
    assert full.uploaded_bytes == full.state_size and full.files_reused == 0
    backend.notify_checkpoint_complete(1)
    uploads_before = len(storage.uploads)

    put(backend, rng.sample(keys, 2_000), rng)
    incremental = take_checkpoint(backend, storage, 2)

    fraction = incremental.uploaded_bytes / full.state_size
    assert 0.005 < fraction < 0.02, f"uploaded {fraction:.2%} of the state"
    assert set(full.shared) < set(incremental.shared)
    for name in full.shared:
        assert incremental.shared[name] == full.shared[name], "reused, not uploaded again"
    new = storage.uploads[uploads_before:]
    new_shared = [h for h in new if "/shared/" in h.uri]
    assert len(new_shared) == 1, "one flushed level-0 file for the one column family"
    assert incremental.files_reused == len(full.shared)
    assert sum(h.length for h in new) == incremental.uploaded_bytes
    private_names = set(incremental.private)
    assert {"CURRENT"} <= private_names and any(n.startswith("MANIFEST") for n in private_names)
    assert not any(n.endswith(".sst") for n in private_names)
    assert all(h.uri.startswith(storage.base_uri + "/job/chk-2/op-0/")
               for h in incremental.private.values())


def test_only_a_confirmed_checkpoint_is_built_upon(backend, storage):
    rng = random.Random(2)
    put(backend, list(range(5_000)), rng)
    first = take_checkpoint(backend, storage, 1)
    # Checkpoint 1 is not confirmed (yet): checkpoint 2 may not rely on its uploads.
    second = take_checkpoint(backend, storage, 2)
    assert second.files_reused == 0
    assert all(second.shared[n] != first.shared[n] for n in first.shared)
    backend.notify_checkpoint_complete(2)
    assert backend.incremental_strategy.confirmed_checkpoint_id == 2

    put(backend, list(range(100)), rng)
    third = take_checkpoint(backend, storage, 3)
    new_in_third = set(third.shared) - set(second.shared)
    assert len(new_in_third) == 1
    backend.notify_checkpoint_aborted(3)

    put(backend, list(range(100, 200)), rng)
    fourth = take_checkpoint(backend, storage, 4)
    (name,) = new_in_third
    assert fourth.shared[name] != third.shared[name], "an aborted upload is not reused"
    for reused in second.shared:
        assert fourth.shared[reused] == second.shared[reused]
    # A late confirmation of the subsumed checkpoint 1 changes nothing.
    backend.notify_checkpoint_complete(4)
    backend.notify_checkpoint_complete(1)
    assert backend.incremental_strategy.confirmed_checkpoint_id == 4


def test_shared_files_are_deleted_when_no_retained_checkpoint_refers_to_them(backend, storage):
    rng = random.Random(3)
    registry = SharedStateRegistry(storage)
    put(backend, list(range(20_000)), rng)
    handles: dict[int, IncrementalRocksDBStateHandle] = {}

    def complete(n: int) -> None:
        handles[n] = take_checkpoint(backend, storage, n)
        backend.notify_checkpoint_complete(n)
        registry.register_checkpoint(n, [handles[n]])
        for old in registry.checkpoints:
            if old < n:  # retain one checkpoint: register first, then subsume
                registry.unregister_checkpoint(old)

    complete(1)
    put(backend, list(range(100)), rng)
    complete(2)
    assert registry.checkpoints == [2]
    for handle in handles[1].shared.values():
        assert storage.exists(handle), "still referred to by checkpoint 2"
        assert registry.reference_count(handle) == 1
    backend.compact()  # rewrites every file: checkpoint 3 shares nothing with 1 and 2
    complete(3)
    gone = {h.uri for h in (*handles[1].shared.values(), *handles[2].shared.values())}
    assert gone.isdisjoint({h.uri for h in handles[3].shared.values()})
    assert not any(storage.exists(uri) for uri in gone)
    assert storage.files("job/shared") == {h.uri for h in handles[3].shared.values()}
    assert len(registry) == len(handles[3].shared)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_checkpoint(3, [handles[3]])
    registry.unregister_checkpoint(3)
    assert storage.files("job/shared") == set()


def test_a_failed_upload_deletes_what_it_uploaded(backend, tmp_path):
    storage = FaultyStorage(tmp_path / "failing", fail_on_upload=3)
    put(backend, list(range(1_000)), random.Random(4))
    running = backend.snapshot_to(1, SnapshotLocation.for_checkpoint(storage, "j", 1, "op"))
    with pytest.raises(StorageError, match="injected"):
        running.run()
    assert storage.list() == []
    assert not any(p.name.startswith("chk-") for p in backend.directory.iterdir()), \
        "the scratch checkpoint is released"


def test_a_cancelled_snapshot_releases_its_files_and_cannot_run(backend, storage):
    put(backend, list(range(1_000)), random.Random(5))
    running = backend.snapshot_to(1, SnapshotLocation.for_checkpoint(storage, "j", 1, "op"))
    assert any(p.name.startswith("chk-1-") for p in backend.directory.iterdir())
    running.cancel()
    assert not any(p.name.startswith("chk-1-") for p in backend.directory.iterdir())
    with pytest.raises(StateError, match="already ran"):
        running.run()
    assert storage.uploads == []


def test_handles_round_trip_through_json(backend, storage, tmp_path):
    put(backend, list(range(500)), random.Random(6))
    native = take_checkpoint(backend, storage, 1, local_root=tmp_path / "local")
    canonical = backend.snapshot_to(
        2, SnapshotLocation.for_checkpoint(storage, "job", 2, "op-0"), canonical=True).run()
    assert isinstance(canonical, CanonicalStateHandle)
    for handle in (native, canonical):
        text = json.dumps(handle.to_dict())
        assert KeyedStateHandle.from_dict(json.loads(text)) == handle
    assert native.local is not None and native.column_families == {"v": "v"}
    with pytest.raises(ValueError, match="not a keyed state handle"):
        KeyedStateHandle.from_dict({"kind": "nope"})


def test_local_copies_of_older_and_aborted_checkpoints_are_removed(backend, storage, tmp_path):
    root = tmp_path / "local"
    owner = root / "job" / "op-0"
    put(backend, list(range(1_000)), random.Random(7))
    first = take_checkpoint(backend, storage, 1, local_root=root)
    second = take_checkpoint(backend, storage, 2, local_root=root)
    assert first.local and second.local
    assert set(os.listdir(owner)) == {"chk-1", "chk-2"}
    for name, handle in second.local.files.items():
        assert Path(second.local.directory, name).stat().st_size == handle.length
    backend.notify_checkpoint_complete(2)
    assert set(os.listdir(owner)) == {"chk-2"}
    take_checkpoint(backend, storage, 3, local_root=root)
    backend.notify_checkpoint_aborted(3)
    assert set(os.listdir(owner)) == {"chk-2"}


def test_without_incremental_rocksdb_writes_canonical_snapshots(tmp_path, storage):
    backend = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "full", incremental=False)
    try:
        backend.get_state(ValueStateDescriptor("v"))
        put(backend, list(range(100)), random.Random(8))
        handle = backend.snapshot_to(
            1, SnapshotLocation.for_checkpoint(storage, "job", 1, "op")).run()
        assert isinstance(handle, CanonicalStateHandle)
        assert handle.shared_state() == [] and handle.private_state() == [handle.data]
    finally:
        backend.dispose()


def test_local_copies_go_to_the_configured_root_or_the_working_directory(tmp_path):
    from weir.core.config import Configuration
    from weir.state.local_recovery import local_state_root

    off = Configuration.from_pairs({})
    assert local_state_root(off, tmp_path) is None
    on = Configuration.from_pairs({"state.backend.local-recovery": "true"})
    assert local_state_root(on, tmp_path) == tmp_path / "localState"
    assert local_state_root(on, None) is None
    rooted = Configuration.from_pairs({"state.backend.local-recovery": "true",
                                       "taskmanager.state.local.root-dirs": str(tmp_path / "x")})
    assert local_state_root(rooted, None) == tmp_path / "x"


@pytest.mark.parametrize("incremental", [False, True])
def test_a_local_directory_that_cannot_be_written_costs_the_local_copy_not_the_checkpoint(
        tmp_path, storage, incremental):
    # A regular file where the local-recovery root should be: every write under it fails,
    # as on a full disk.
    blocked = tmp_path / "blocked"
    blocked.write_text("not a directory")
    backend = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "db", incremental=incremental)
    try:
        backend.get_state(ValueStateDescriptor("v"))
        put(backend, list(range(300)), random.Random(9))
        handle = backend.snapshot_to(1, SnapshotLocation.for_checkpoint(
            storage, "job", 1, "op-0", blocked / "local")).run()
        assert handle.local is None
        restored = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "restored")
        try:
            restore(restored, [handle], storage)
            assert list(restored.entries()) == list(backend.entries())
        finally:
            restored.dispose()
    finally:
        backend.dispose()


def _native_savepoint(backend: RocksDBKeyedStateBackend, storage: FaultyStorage, n: int,
                      full: bool = False) -> IncrementalRocksDBStateHandle:
    from weir.proto.checkpoint_pb2 import SAVEPOINT_NATIVE, SAVEPOINT_NATIVE_FULL

    location = SnapshotLocation.for_savepoint(
        storage, "op-0", SAVEPOINT_NATIVE_FULL if full else SAVEPOINT_NATIVE)
    handle = backend.snapshot_to(n, location).run()
    assert isinstance(handle, IncrementalRocksDBStateHandle)
    return handle


def test_native_savepoint_copies_what_the_last_checkpoint_stored(backend, tmp_path):
    """An incremental native savepoint uploads only the files the confirmed checkpoint
    did not store and copies the others into its own directory (hard links on file://),
    so it is self-contained; it never becomes the base of the next checkpoint."""
    checkpoints = FaultyStorage(tmp_path / "checkpoints")
    rng = random.Random(3)
    keys = list(range(100_000))
    put(backend, keys, rng)
    backend.compact()
    take_checkpoint(backend, checkpoints, 1)
    backend.notify_checkpoint_complete(1)
    put(backend, rng.sample(keys, 1_000), rng)
    savepoints = FaultyStorage(tmp_path / "savepoint")
    incremental = _native_savepoint(backend, savepoints, 2)
    full = _native_savepoint(backend, FaultyStorage(tmp_path / "savepoint-full"), 3,
                             full=True)
    assert incremental.files_reused > 0 and full.files_reused == 0
    assert incremental.uploaded_bytes < 0.1 * full.uploaded_bytes
    base = savepoints.base_uri + "/"
    assert all(h.uri.startswith(base) for h in incremental.files().values())
    # The copies are links to the checkpoint's files: same bytes, no second copy on disk.
    copied = [h for h in incremental.shared.values()
              if os.stat(h.uri.removeprefix("file://")).st_nlink > 1]
    assert len(copied) == incremental.files_reused
    # The checkpoint after the savepoint still builds on checkpoint 1, not on it.
    after = take_checkpoint(backend, checkpoints, 4)
    assert not [h for h in after.shared.values() if h.uri.startswith(base)]
    restored = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "restored")
    try:
        restore(restored, [incremental], savepoints)
        restored.set_current_key(keys[0])
        assert restored.get_state(ValueStateDescriptor("v")).value() is not None
    finally:
        restored.dispose()


def test_a_snapshot_the_job_does_not_own_is_never_built_on(backend, storage, tmp_path):
    """NO_CLAIM: restored from a snapshot it does not own, a backend's next incremental
    checkpoint refers to none of that snapshot's files; owned, it reuses them."""
    rng = random.Random(4)
    put(backend, list(range(20_000)), rng)
    backend.compact()
    snapshot = take_checkpoint(backend, storage, 1)
    for owned, expect_reuse in ((False, False), (True, True)):
        fresh = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / f"restored-{owned}")
        try:
            fresh.get_state(ValueStateDescriptor("v"))
            restore(fresh, [snapshot], storage, build_on=owned)
            following = take_checkpoint(fresh, storage, 2 + owned)
            reused = set(following.shared.values()) & set(snapshot.shared.values())
            assert bool(reused) == expect_reuse, (owned, following.files_reused)
        finally:
            fresh.dispose()


def test_the_first_checkpoint_after_a_clip_rescale_reuses_the_base_files(backend, storage,
                                                                          tmp_path):
    """Clip adopts the base instance's files unchanged: the checkpoint after a rescale
    refers to them again instead of uploading the whole state."""
    rng = random.Random(5)
    put(backend, list(range(40_000)), rng)
    backend.compact()
    old = take_checkpoint(backend, storage, 1)
    half = RocksDBKeyedStateBackend(MAX_PAR, KeyGroupRange(0, 63), tmp_path / "half")
    try:
        half.get_state(ValueStateDescriptor("v"))
        restore(half, [old], storage)
        following = take_checkpoint(half, storage, 2)
        reused = set(following.shared.values()) & set(old.shared.values())
        assert reused and following.files_reused == len(reused)
        assert following.uploaded_bytes < 0.5 * old.state_size
    finally:
        half.dispose()


def test_subtasks_of_one_native_savepoint_never_overwrite_each_others_files(tmp_path):
    """Two subtasks' RocksDB instances number their SST files alike (000009.sst in both):
    their copies into the savepoint's one shared directory must not land on one path, or
    one subtask's state is corrupt (or another's) when the savepoint is restored."""
    from weir.proto.checkpoint_pb2 import SAVEPOINT_NATIVE
    from weir.state.key_groups import KeyGroupRange

    checkpoints = FaultyStorage(tmp_path / "checkpoints")
    savepoints = FaultyStorage(tmp_path / "savepoint")
    halves = [KeyGroupRange(0, MAX_PAR // 2 - 1), KeyGroupRange(MAX_PAR // 2, MAX_PAR - 1)]
    backends = [RocksDBKeyedStateBackend(MAX_PAR, r, tmp_path / f"rocks-{i}")
                for i, r in enumerate(halves)]
    handles = []
    try:
        for index, (backend, key_groups) in enumerate(zip(backends, halves, strict=True)):
            backend.get_state(ValueStateDescriptor("v"))
            keys = [k for k in range(20_000)
                    if key_groups.start <= assign_to_key_group(k, MAX_PAR) <= key_groups.end]
            put(backend, keys, random.Random(10 + index), size=100 + 50 * index)
            backend.compact()
            location = SnapshotLocation.for_checkpoint(checkpoints, "job", 1, f"op-{index}")
            backend.snapshot_to(1, location).run()
            backend.notify_checkpoint_complete(1)
            savepoint = SnapshotLocation.for_savepoint(savepoints, f"op-{index}",
                                                       SAVEPOINT_NATIVE)
            handle = backend.snapshot_to(2, savepoint).run()
            assert isinstance(handle, IncrementalRocksDBStateHandle)
            handles.append(handle)
        names = [set(h.shared) for h in handles]
        assert names[0] & names[1], "the two instances share SST file names"
        uris = [h.uri for handle in handles for h in handle.shared.values()]
        assert len(uris) == len(set(uris))
        for index, (handle, key_groups) in enumerate(zip(handles, halves, strict=True)):
            restored = RocksDBKeyedStateBackend(MAX_PAR, key_groups, tmp_path / f"back-{index}")
            try:
                restore(restored, [handle], savepoints)
                assert list(restored.entries()) == list(backends[index].entries())
            finally:
                restored.dispose()
    finally:
        for backend in backends:
            backend.dispose()
