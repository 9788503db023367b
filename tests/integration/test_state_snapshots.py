"""Keyed state snapshots through real checkpoint storage (a directory and SeaweedFS S3):
write the canonical snapshot of each subtask, restore at another parallelism, compare."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from weir.checkpoint.storage import CheckpointStorageAccess, create_storage
from weir.core.errors import CorruptStateError
from weir.state.backend import KeyedStateBackend
from weir.state.canonical import write_canonical
from weir.state.descriptors import MapStateDescriptor, ValueStateDescriptor
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, key_group_range_for_operator
from weir.state.restore import restore_canonical
from weir.state.rocksdb import RocksDBKeyedStateBackend

MAX_PAR = 128


def fill(backend: KeyedStateBackend, keys: range) -> None:
    count = backend.get_state(ValueStateDescriptor("count"))
    seen = backend.get_state(MapStateDescriptor("seen"))
    for key in keys:
        backend.set_current_key(f"user-{key}")
        count.update(key)
        seen.put(key % 7, str(key))


def snapshot_bytes(backend: KeyedStateBackend) -> bytes:
    out = io.BytesIO()
    write_canonical(backend.entries(), out)
    return out.getvalue()


def round_trip(storage: CheckpointStorageAccess, tmp_path: Path) -> None:
    whole = HeapKeyedStateBackend(MAX_PAR, KeyGroupRange(0, MAX_PAR - 1))
    fill(whole, range(2000))
    expected = snapshot_bytes(whole)
    # Two subtasks snapshot their halves into storage...
    handles = []
    for index in range(2):
        key_groups = key_group_range_for_operator(MAX_PAR, 2, index)
        part = RocksDBKeyedStateBackend(MAX_PAR, key_groups, tmp_path / f"old-{index}")
        try:
            restore_canonical(part, [expected])
            handles.append(storage.write(f"job/chk-1/op/subtask-{index}",
                                         snapshot_bytes(part)))
        finally:
            part.dispose()
    # ...and three restore from it, each reading the handles back (verified).
    merged = HeapKeyedStateBackend(MAX_PAR, KeyGroupRange(0, MAX_PAR - 1))
    for index in range(3):
        key_groups = key_group_range_for_operator(MAX_PAR, 3, index)
        part = HeapKeyedStateBackend(MAX_PAR, key_groups)
        restore_canonical(part, [storage.read(h) for h in handles])
        restore_canonical(merged, [snapshot_bytes(part)])
    merged.get_state(ValueStateDescriptor("count"))
    assert snapshot_bytes(merged) == expected


def test_snapshots_round_trip_through_a_directory(tmp_path: Path):
    round_trip(create_storage(str(tmp_path / "checkpoints")), tmp_path)


def test_snapshots_round_trip_through_s3(seaweed_s3, s3_bucket, tmp_path: Path):
    storage = create_storage(f"s3://{s3_bucket}/checkpoints", seaweed_s3.config(s3_bucket))
    round_trip(storage, tmp_path)


def test_a_corrupted_snapshot_file_is_refused(tmp_path: Path):
    storage = create_storage(str(tmp_path / "checkpoints"))
    backend = HeapKeyedStateBackend(MAX_PAR, KeyGroupRange(0, MAX_PAR - 1))
    fill(backend, range(100))
    handle = storage.write("job/chk-1/op/subtask-0", snapshot_bytes(backend))
    path = tmp_path / "checkpoints" / "job" / "chk-1" / "op" / "subtask-0"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="subtask-0"):
        storage.read(handle)
