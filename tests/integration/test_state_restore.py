"""Restoring keyed state through real checkpoint storage (a directory and SeaweedFS S3):
chains of incremental checkpoints, rescaling with clip and baseline against the canonical
path, lazy restore, task-local copies, and the errors of missing or damaged files."""

from __future__ import annotations

import io
import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.faulty_storage import FaultyStorage
from tests.support.state_backends import Backends
from weir.checkpoint.filesystem import FsCheckpointStorageAccess
from weir.checkpoint.shared_registry import SharedStateRegistry
from weir.checkpoint.storage import CheckpointStorageAccess, create_storage
from weir.core.errors import CorruptStateError, MissingStateError, StateError
from weir.state.backend import KeyedStateBackend
from weir.state.canonical import read_canonical, write_canonical
from weir.state.descriptors import MapStateDescriptor, ValueStateDescriptor
from weir.state.handles import (
    CanonicalStateHandle,
    IncrementalRocksDBStateHandle,
    KeyedStateHandle,
)
from weir.state.key_groups import KeyGroupRange, assign_to_key_group, key_group_range_for_operator
from weir.state.restore import restore
from weir.state.serializers import encode_key
from weir.state.snapshot import SnapshotLocation
from weir.testing.cluster import poll

MAX_PAR = 128
ALL = KeyGroupRange(0, MAX_PAR - 1)
DEADLINE = 30.0


# -- builders ---------------------------------------------------------------------------------


@pytest.fixture
def storage(tmp_path: Path) -> FsCheckpointStorageAccess:
    return FsCheckpointStorageAccess(tmp_path / "checkpoints")


def fill(backend: KeyedStateBackend, keys: list, rng: random.Random) -> None:
    """Per-record writes to two states (a value and a map)."""
    count = backend.get_state(ValueStateDescriptor("count"))
    seen = backend.get_state(MapStateDescriptor("seen"))
    for key in keys:
        backend.set_current_key(key)
        count.update(rng.randrange(1_000_000))
        seen.put(rng.randrange(3), str(key))


def canonical(backend: KeyedStateBackend) -> bytes:
    out = io.BytesIO()
    write_canonical(backend.entries(), out)
    return out.getvalue()


def register(backend: KeyedStateBackend) -> None:
    backend.get_state(ValueStateDescriptor("count"))
    backend.get_state(MapStateDescriptor("seen"))


def take(backend: KeyedStateBackend, storage: CheckpointStorageAccess, n: int, owner: str = "op-0",
         local_root: Path | None = None, canonical_format: bool = False) -> KeyedStateHandle:
    location = SnapshotLocation.for_checkpoint(storage, "job", n, owner, local_root)
    return backend.snapshot_to(n, location, canonical=canonical_format).run()


def subtasks(parallelism: int) -> list[KeyGroupRange]:
    return [key_group_range_for_operator(MAX_PAR, parallelism, i) for i in range(parallelism)]


def keys_in(key_groups: KeyGroupRange, keys: list) -> list:
    return [k for k in keys if assign_to_key_group(k, MAX_PAR) in key_groups]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    poll(condition, DEADLINE, interval=0.005, what=what)


# -- chains of incremental checkpoints ------------------------------------------------------


def restore_a_chain(storage: CheckpointStorageAccess, backends: Backends) -> None:
    rng = random.Random(11)
    keys = [f"user-{i}" for i in range(3_000)]
    source = backends("rocksdb")
    registry = SharedStateRegistry(storage)
    fill(source, keys, rng)
    handles: dict[int, KeyedStateHandle] = {}
    expected: dict[int, bytes] = {}

    def complete(n: int) -> None:
        expected[n] = canonical(source)
        handles[n] = take(source, storage, n)
        source.notify_checkpoint_complete(n)
        registry.register_checkpoint(n, [handles[n]])
        for old in registry.checkpoints[:-1]:
            registry.unregister_checkpoint(old)

    complete(1)
    fill(source, rng.sample(keys, 300), rng)
    complete(2)
    fill(source, [f"new-{i}" for i in range(200)], rng)
    source.set_current_key("user-7")
    source.get_state(ValueStateDescriptor("count")).clear()
    complete(3)
    assert isinstance(handles[3], IncrementalRocksDBStateHandle)
    assert handles[3].files_reused > 0, "checkpoint 3 builds on 2 which builds on 1"
    assert any(h in handles[1].shared_state() for h in handles[3].shared_state())

    same = backends("rocksdb")
    register(same)
    restore(same, [handles[3]], storage)
    assert canonical(same) == expected[3]

    switched = backends("hashmap")
    register(switched)
    restore(switched, [handles[3]], storage)
    assert canonical(switched) == expected[3]

    merged = backends("hashmap")
    register(merged)
    for key_groups in subtasks(2):
        part = backends("rocksdb", key_groups)
        register(part)
        restore(part, [handles[3]], storage)
        merged.load_entries(part.entries())
    assert canonical(merged) == expected[3]


def test_a_chain_of_incremental_checkpoints_restores_from_a_directory(storage, backends):
    restore_a_chain(storage, backends)


def test_a_chain_of_incremental_checkpoints_restores_from_s3(seaweed_s3, s3_bucket, backends):
    storage = create_storage(f"s3://{s3_bucket}/checkpoints", seaweed_s3.config(s3_bucket))
    try:
        restore_a_chain(storage, backends)
    finally:
        storage.delete_prefix("")


def test_a_restored_backend_builds_its_next_checkpoint_on_the_restored_files(storage, backends):
    source = backends("rocksdb")
    fill(source, list(range(2_000)), random.Random(12))
    first = take(source, storage, 1)
    source.notify_checkpoint_complete(1)
    target = backends("rocksdb")
    register(target)
    restore(target, [first], storage)
    fill(target, list(range(10)), random.Random(13))
    second = take(target, storage, 2)
    assert isinstance(first, IncrementalRocksDBStateHandle)
    assert isinstance(second, IncrementalRocksDBStateHandle)
    assert second.files_reused >= len(first.shared)
    assert set(first.shared.values()) <= set(second.shared.values())


# -- rescaling: clip, baseline and the canonical path agree ----------------------------------


def rescale_and_check(keys: list, old: int, new: int, storage: CheckpointStorageAccess,
                      backends: Backends, tag: str) -> None:
    rng = random.Random(len(keys) * 31 + old * 7 + new)
    native: list[KeyedStateHandle] = []
    full: list[KeyedStateHandle] = []
    for index, key_groups in enumerate(subtasks(old)):
        part = backends("rocksdb", key_groups)
        register(part)
        fill(part, keys_in(key_groups, keys), rng)
        native.append(take(part, storage, 1, owner=f"{tag}-{old}-{index}"))
        full.append(take(part, storage, 2, owner=f"{tag}-{old}-{index}", canonical_format=True))
    seen: dict[bytes, int] = {}
    for key_groups in subtasks(new):
        results = {}
        for method in ("clip", "baseline"):
            target = backends("rocksdb", key_groups)
            register(target)
            restore(target, native, storage, rescale_method=method)
            results[method] = canonical(target)
        reference = backends("hashmap", key_groups)
        register(reference)
        restore(reference, full, storage)
        results["canonical"] = canonical(reference)
        assert results["clip"] == results["baseline"] == results["canonical"]
        for state, key_group, key, _, _ in read_canonical(results["clip"], ALL):
            assert key_group in key_groups
            if state == "count":
                assert key not in seen, "a key restored into two subtasks"
                seen[key] = key_group
    assert set(seen) == {encode_key(k) for k in keys}


@pytest.mark.extended
def test_rescaling_every_p_to_p_prime_up_to_4(storage, backends):
    keys = [f"k{i}" for i in range(400)] + list(range(400))
    for old in range(1, 5):
        for new in range(1, 5):
            rescale_and_check(keys, old, new, storage, backends, "grid")


@pytest.mark.extended
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.one_of(st.integers(), st.text(max_size=6),
                               st.tuples(st.integers(0, 9), st.text(max_size=3))),
                     unique_by=lambda k: encode_key(k), max_size=80),
       old=st.integers(1, 4), new=st.integers(1, 4))
def test_rescaling_random_keys_with_clip_and_baseline(keys, old, new, tmp_path):
    made = Backends(tmp_path / f"b-{time.monotonic_ns()}")
    storage = FsCheckpointStorageAccess(tmp_path / f"c-{time.monotonic_ns()}")
    try:
        rescale_and_check(keys, old, new, storage, made, "prop")
    finally:
        made.dispose()


def test_clip_reads_fewer_rows_than_baseline_on_scale_in(storage, backends):
    keys = list(range(3_000))
    handles = []
    for index, key_groups in enumerate(subtasks(3)):
        part = backends("rocksdb", key_groups)
        fill(part, keys_in(key_groups, keys), random.Random(index))
        handles.append(take(part, storage, 1, owner=f"old-{index}"))
    inserted = {}
    for method in ("clip", "baseline"):
        target = backends("rocksdb", subtasks(2)[0])
        register(target)
        inserted[method] = restore(target, handles, storage,
                                   rescale_method=method).native.rows_inserted
    # New subtask 0 of 2 owns 64 key groups: 43 come with the base instance, 21 are read.
    assert inserted["clip"] < inserted["baseline"] / 2


def test_a_rescaling_restore_fetches_only_the_files_of_its_key_groups(storage, backends):
    """Old subtasks whose SST files each hold a few key groups (written and flushed in
    key-group order, with overwrites and deletions of the previous batch in each file): the
    new middle subtask fetches part of the handle it does not take as its base, and every
    restored state equals the canonical restore; so does a second rescale of it."""
    keys = list(range(4_000))
    rng = random.Random(5)
    native, full = [], []
    for index, key_groups in enumerate(subtasks(2)):
        part = backends("rocksdb", key_groups)
        count = part.get_state(ValueStateDescriptor("count"))
        seen = part.get_state(MapStateDescriptor("seen"))
        by_group = sorted(keys_in(key_groups, keys), key=lambda k: assign_to_key_group(k, MAX_PAR))
        batches = [by_group[i:i + 250] for i in range(0, len(by_group), 250)]
        for number, batch in enumerate(batches):
            for key in batch:
                part.set_current_key(key)
                count.update(rng.randrange(1_000))
                seen.put(key % 3, "x" * (key % 7))
            for key in batches[number - 1][::5] if number else []:
                part.set_current_key(key)
                count.clear() if key % 2 else count.update(-1)
            part.flush()
        native.append(take(part, storage, 1, owner=f"old-{index}"))
        full.append(take(part, storage, 2, owner=f"old-{index}", canonical_format=True))
    assert all(len(h.sst_key_groups) > 4 for h in native)

    def check(handles: list[KeyedStateHandle], canonical_handles: list[KeyedStateHandle],
              parallelism: int, n: int) -> tuple[list[KeyedStateHandle], list[int]]:
        taken, fetched = [], []
        for index, key_groups in enumerate(subtasks(parallelism)):
            target = backends("rocksdb", key_groups)
            register(target)
            fetched.append(restore(target, handles, storage).native.bytes_fetched)
            reference = backends("hashmap", key_groups)
            register(reference)
            restore(reference, canonical_handles, storage)
            assert canonical(target) == canonical(reference)
            # The native files read row by row into the other backend, fetched alike.
            heap = backends("hashmap", key_groups)
            register(heap)
            restore(heap, handles, storage)
            assert canonical(heap) == canonical(reference)
            taken.append(take(target, storage, n, owner=f"new-{parallelism}-{index}"))
        return taken, fetched

    three, fetched = check(native, full, 3, 3)
    # Subtask 1 of 3 takes one old half whole and needs a third of the other.
    assert fetched[1] < sum(h.state_size for h in native) * 0.9
    # Checkpoints of clipped instances (range tombstones, inserted rows) rescale again.
    check(three, full, 2, 4)


# -- lazy restore ---------------------------------------------------------------------------


def two_halves(storage: CheckpointStorageAccess, backends: Backends, keys: list
               ) -> tuple[list[CanonicalStateHandle], bytes]:
    """Canonical handles of two old subtasks, and the canonical bytes of the whole state."""
    whole = backends("hashmap")
    register(whole)
    handles = []
    for index, key_groups in enumerate(subtasks(2)):
        part = backends("hashmap", key_groups)
        fill(part, keys_in(key_groups, keys), random.Random(index))
        whole.load_entries(part.entries())
        handle = take(part, storage, 1, owner=f"half-{index}")
        assert isinstance(handle, CanonicalStateHandle)
        handles.append(handle)
    return handles, canonical(whole)


@pytest.mark.parametrize("kind", ["hashmap", "rocksdb"])
def test_lazy_restore_reads_every_key_right_whatever_the_order(kind, storage, backends):
    keys = [f"user-{i}" for i in range(2_000)]
    handles, expected = two_halves(storage, backends, keys)
    reference = backends("hashmap")
    register(reference)
    restore(reference, handles, storage)
    target = backends(kind)
    count = target.get_state(ValueStateDescriptor("count"))
    target.get_state(MapStateDescriptor("seen"))
    result = restore(target, handles, storage, lazy=True)
    assert result.lazy is not None
    want = reference.get_state(ValueStateDescriptor("count"))
    order = list(keys)
    random.Random(3).shuffle(order)
    for key in order[:500]:  # per record, in random order
        target.set_current_key(key)
        reference.set_current_key(key)
        assert count.value() == want.value()
    batch = order[500:1500]  # and in batches
    groups = [assign_to_key_group(k, MAX_PAR) for k in batch]
    assert target.get_many("count", groups, batch) == reference.get_many("count", groups, batch)
    result.lazy.wait_until_loaded()
    assert canonical(target) == expected


def test_the_first_record_is_processed_before_the_load_completes(tmp_path, backends):
    storage = FaultyStorage(tmp_path / "gated")
    keys = list(range(1_000))
    handles, expected = two_halves(storage, backends, keys)
    second_half = threading.Event()
    storage.gates[handles[1].data.uri] = second_half
    target = backends("hashmap")
    count = target.get_state(ValueStateDescriptor("count"))
    target.get_state(MapStateDescriptor("seen"))
    lazy = restore(target, handles, storage, lazy=True).lazy
    assert lazy is not None
    first = keys_in(subtasks(2)[0], keys)[0]
    target.set_current_key(first)
    assert count.value() is not None  # processed while the second half cannot load
    assert not lazy.done
    assert all(g in subtasks(2)[0] for g in lazy.load_order)
    second_half.set()
    lazy.wait_until_loaded()
    assert lazy.done and canonical(target) == expected


def test_a_waiting_key_group_is_loaded_first(tmp_path, backends):
    storage = FaultyStorage(tmp_path / "gated")
    keys = list(range(1_000))
    whole = backends("hashmap")
    fill(whole, keys, random.Random(1))
    handle = take(whole, storage, 1)
    gate = threading.Event()
    storage.gates[handle.data.uri] = gate
    target = backends("hashmap")
    count = target.get_state(ValueStateDescriptor("count"))
    lazy = restore(target, [handle], storage, lazy=True).lazy
    assert lazy is not None
    late = max(keys, key=lambda k: assign_to_key_group(k, MAX_PAR))
    late_group = assign_to_key_group(late, MAX_PAR)

    def open_gate_once_asked() -> None:
        wait_until(lambda: late_group in lazy.requested(), "the request")
        gate.set()

    opener = threading.Thread(target=open_gate_once_asked)
    opener.start()
    target.set_current_key(late)  # blocks until its key group is loaded
    opener.join(DEADLINE)
    assert count.value() is not None
    # The loader was already fetching for its first key group; the request came next.
    assert late_group in lazy.load_order[:2]
    lazy.wait_until_loaded()


def test_a_loader_failure_surfaces_as_a_state_error_on_the_task_thread(tmp_path, backends):
    storage = FaultyStorage(tmp_path / "gated")
    keys = list(range(500))
    handles, _ = two_halves(storage, backends, keys)
    storage.failures[handles[1].data.uri] = CorruptStateError("object x is corrupt")
    target = backends("rocksdb")
    target.get_state(ValueStateDescriptor("count"))
    restore(target, handles, storage, lazy=True)
    with pytest.raises(StateError, match=r"lazy restore .* failed: .*corrupt"):
        target.set_current_key(keys_in(subtasks(2)[1], keys)[0])
    with pytest.raises(StateError, match="failed"):  # and at every later access
        target.set_current_key(keys_in(subtasks(2)[0], keys)[0])


def test_waiting_for_a_key_group_times_out(tmp_path, backends):
    storage = FaultyStorage(tmp_path / "gated")
    whole = backends("hashmap")
    fill(whole, list(range(100)), random.Random(1))
    handle = take(whole, storage, 1)
    gate = threading.Event()
    storage.gates[handle.data.uri] = gate
    target = backends("hashmap")
    lazy = restore(target, [handle], storage, lazy=True, wait_timeout=0.2).lazy
    assert lazy is not None
    try:
        with pytest.raises(StateError, match=r"not restored within 0\.2 s"):
            target.set_current_key(5)
    finally:
        gate.set()
    lazy.wait_until_loaded(DEADLINE)


def test_dispose_stops_the_loader(tmp_path, backends):
    storage = FaultyStorage(tmp_path / "gated")
    keys = list(range(500))
    handles, _ = two_halves(storage, backends, keys)
    gate = threading.Event()
    storage.gates[handles[1].data.uri] = gate
    target = backends("hashmap")
    lazy = restore(target, handles, storage, lazy=True).lazy
    assert lazy is not None
    wait_until(lambda: handles[1].data.uri in storage.reads, "the loader to reach the gate")
    disposer = threading.Thread(target=target.dispose)
    disposer.start()
    wait_until(lambda: lazy._closed, "close() to be called")
    gate.set()  # the fetch returns; the loader sees the close and stops
    disposer.join(DEADLINE)
    assert not disposer.is_alive() and not lazy.loader_alive
    assert not lazy.done
    assert not any(g in subtasks(2)[1] for g in lazy.load_order)
    with pytest.raises(StateError, match="stopped"):
        lazy.await_key_group(subtasks(2)[1].start)


# -- task-local copies ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hashmap", "rocksdb"])
def test_restore_prefers_a_verified_local_copy(kind, storage, backends, tmp_path, caplog):
    source = backends(kind)
    fill(source, list(range(1_000)), random.Random(2))
    expected = canonical(source)
    handle = take(source, storage, 1, local_root=tmp_path / "local")
    assert handle.local is not None
    # Remove the remote files: only the local copy can serve this restore.
    for remote in (*handle.shared_state(), *handle.private_state()):
        storage.delete(remote)
    target = backends(kind)
    register(target)
    with caplog.at_level(logging.WARNING):
        result = restore(target, [handle], storage)
    assert result.local_copies_used == 1
    assert canonical(target) == expected
    assert "unusable" not in caplog.text


@pytest.mark.parametrize("kind", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_bad_local_copy_falls_back_to_checkpoint_storage(kind, damage, storage, backends,
                                                           tmp_path, caplog):
    source = backends(kind)
    fill(source, list(range(1_000)), random.Random(3))
    expected = canonical(source)
    handle = take(source, storage, 1, local_root=tmp_path / "local")
    assert handle.local is not None
    victim = Path(handle.local.directory) / max(
        handle.local.files, key=lambda n: handle.local.files[n].length)
    if damage == "corrupt":
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x40
        victim.write_bytes(bytes(data))
    else:
        victim.unlink()
    target = backends(kind)
    register(target)
    with caplog.at_level(logging.WARNING):
        result = restore(target, [handle], storage)
    assert result.local_copies_used == 0
    assert canonical(target) == expected
    assert "local copy of" in caplog.text and "unusable" in caplog.text
    assert victim.name in caplog.text


# -- missing and damaged files --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hashmap", "rocksdb"])
def test_a_missing_remote_file_is_a_clear_error(kind, storage, backends):
    source = backends(kind)
    fill(source, list(range(300)), random.Random(4))
    handle = take(source, storage, 5)
    victim = max([*handle.shared_state(), *handle.private_state()], key=lambda h: h.length)
    storage.delete(victim)
    target = backends(kind)
    with pytest.raises(MissingStateError) as failure:
        restore(target, [handle], storage)
    message = str(failure.value)
    assert victim.uri in message and "checkpoint 5" in message
    assert "Restore from another retained checkpoint" in message


@pytest.mark.parametrize("kind", ["hashmap", "rocksdb"])
def test_a_corrupt_remote_file_is_a_clear_error(kind, storage, backends):
    source = backends(kind)
    fill(source, list(range(300)), random.Random(5))
    handle = take(source, storage, 6)
    victim = max([*handle.shared_state(), *handle.private_state()], key=lambda h: h.length)
    path = FsCheckpointStorageAccess.path_from_uri(victim.uri)
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01
    path.write_bytes(bytes(data))
    target = backends(kind)
    with pytest.raises(CorruptStateError, match=r"is corrupt: checksum .*checkpoint 6.*"
                                                "Restore from another retained checkpoint"):
        restore(target, [handle], storage)


def test_damaged_rocksdb_files_with_matching_checksums_are_a_state_error(storage, backends):
    source = backends("rocksdb")
    fill(source, list(range(300)), random.Random(6))
    handle = take(source, storage, 7)
    assert isinstance(handle, IncrementalRocksDBStateHandle)
    name = next(iter(handle.shared))
    garbage = storage.write(f"job/shared/garbage-{name}", b"not an sst file" * 100)
    broken = IncrementalRocksDBStateHandle(
        handle.key_group_range, handle.checkpoint_id, handle.backend_id,
        handle.column_families, {**handle.shared, name: garbage}, handle.private)
    target = backends("rocksdb")
    with pytest.raises(StateError, match=r"RocksDB state in .*db"):
        restore(target, [broken], storage)
    incomplete = IncrementalRocksDBStateHandle(
        handle.key_group_range, handle.checkpoint_id, handle.backend_id,
        handle.column_families, handle.shared,
        {n: h for n, h in handle.private.items() if n != "CURRENT"})
    with pytest.raises(CorruptStateError, match="incomplete"):
        restore(backends("rocksdb"), [incomplete], storage)
