"""Native savepoints that refer to an earlier savepoint in the same directory: what they
store, their relative paths, relocation, disposal and the ``_refs`` files."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_incremental_snapshots import ALL, MAX_PAR, put
from weir.checkpoint.metadata import (
    METADATA_NAME,
    decode_metadata,
    read_metadata,
    write_savepoint_metadata,
)
from weir.checkpoint.savepoint_chain import (
    REFS_NAME,
    SavepointRefs,
    commit_refs,
    normalize_uri,
    read_refs,
    sibling_relative,
)
from weir.checkpoint.storage import create_storage
from weir.core.config import Configuration
from weir.core.errors import ConfigError, CorruptStateError, MissingStateError
from weir.jobmaster.savepoints import dispose_savepoint, load_snapshot
from weir.proto import checkpoint_pb2
from weir.proto.checkpoint_pb2 import SAVEPOINT_NATIVE
from weir.state.descriptors import ValueStateDescriptor
from weir.state.handles import IncrementalRocksDBStateHandle, KeyedStateHandle
from weir.state.restore import restore
from weir.state.rocksdb import RocksDBKeyedStateBackend
from weir.state.snapshot import SnapshotLocation

CONFIG = Configuration()


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[RocksDBKeyedStateBackend]:
    created = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "rocks")
    created.get_state(ValueStateDescriptor("v"))
    yield created
    created.dispose()


def savepoint(backend: RocksDBKeyedStateBackend, parent: Path, name: str, n: int
              ) -> tuple[str, IncrementalRocksDBStateHandle]:
    """A native savepoint of one subtask as the JobMaster completes it: the task's snapshot,
    then ``_refs`` and ``_metadata``. Returns its directory URI and handle."""
    storage = create_storage(str(parent / name))
    handle = backend.snapshot_to(n, SnapshotLocation.for_savepoint(
        storage, "op-0", SAVEPOINT_NATIVE)).run()
    assert isinstance(handle, IncrementalRocksDBStateHandle)
    metadata = checkpoint_pb2.CheckpointMetadata(job_id="job-1", checkpoint_id=n,
                                                 savepoint=True)
    _ = metadata.vertices.add(vertex_id=1, parallelism=1, max_parallelism=MAX_PAR,
                              operator_uids=["op"])
    sub = metadata.subtasks.add(vertex_id=1, subtask_index=0)
    _ = sub.state.operators.add(operator_uid="op", keyed_state=json.dumps([handle.to_dict()]),
                                keyed_state_size=handle.state_size)
    commit_refs(storage, metadata)
    return write_savepoint_metadata(storage, metadata), handle


def restored_entries(directory: str, tmp_path: Path, tag: str) -> list[object]:
    metadata = read_metadata(create_storage(directory), directory)
    keyed = json.loads(metadata.subtasks[0].state.operators[0].keyed_state)
    handle = KeyedStateHandle.from_dict(keyed[0])
    target = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / f"restored-{tag}")
    try:
        restore(target, [handle], create_storage(directory))
        return list(target.entries())
    finally:
        target.dispose()


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


@pytest.fixture
def chain(backend: RocksDBKeyedStateBackend, tmp_path: Path
          ) -> tuple[Path, list[tuple[str, IncrementalRocksDBStateHandle]], list[list[object]]]:
    """Three savepoints into ``DIR`` with ~1% of the keys changed between them, and the
    backend's entries at each."""
    parent = tmp_path / "savepoints"
    rng = random.Random(5)
    keys = list(range(100_000))
    put(backend, keys, rng)
    backend.compact()
    points, expected = [], []
    for n in range(1, 4):
        if n > 1:
            put(backend, rng.sample(keys, 1_000), rng)
        points.append(savepoint(backend, parent, f"savepoint-job-1-{n}", n))
        expected.append(list(backend.entries()))
    return parent, points, expected


def test_later_savepoints_refer_to_the_files_earlier_ones_hold(chain, tmp_path):
    parent, points, expected = chain
    (first_dir, first), (second_dir, second), (third_dir, third) = points
    assert first.files_reused == 0 and first.savepoint_base == ""
    for handle, base in [(second, "savepoint-job-1-1"), (third, "savepoint-job-1-2")]:
        assert handle.savepoint_base == base
        assert handle.files_reused > 0
        assert handle.uploaded_bytes < 0.05 * first.uploaded_bytes
    # The second savepoint's own directory holds only what changed.
    own = files_under(parent / "savepoint-job-1-2")
    assert sum((parent / "savepoint-job-1-2" / f).stat().st_size for f in own) \
        < 0.05 * first.state_size
    # _metadata refers to siblings relatively, never absolutely.
    raw = decode_metadata((parent / "savepoint-job-1-3" / METADATA_NAME).read_bytes(), "x")
    text = raw.subtasks[0].state.operators[0].keyed_state
    assert "../savepoint-job-1-1/shared/" in text and "../savepoint-job-1-2/shared/" in text
    assert str(tmp_path) not in text and "file:" not in text
    refs = read_refs(create_storage(third_dir), third_dir)
    assert refs is not None and refs.bases == ("savepoint-job-1-2",)
    assert {f.split("/")[0] for f in refs.files} == {"savepoint-job-1-1", "savepoint-job-1-2"}
    for index, directory in enumerate([first_dir, second_dir, third_dir]):
        assert restored_entries(directory, tmp_path, str(index)) == expected[index]


def test_a_moved_directory_restores_every_savepoint(chain, tmp_path):
    parent, _points, expected = chain
    moved = tmp_path / "elsewhere" / "sp"
    moved.parent.mkdir()
    shutil.move(parent, moved)
    for index in range(3):
        directory = (moved / f"savepoint-job-1-{index + 1}").as_uri()
        assert restored_entries(directory, tmp_path, f"m{index}") == expected[index]


def test_disposal_keeps_the_files_later_savepoints_need(chain, tmp_path):
    parent, points, expected = chain
    first = parent / "savepoint-job-1-1"
    before = files_under(first)
    dispose_savepoint(points[0][0], CONFIG)
    left = files_under(first)
    assert METADATA_NAME not in left and left < before and left
    assert all(f.startswith("shared/") for f in left)
    with pytest.raises(MissingStateError):
        load_snapshot(points[0][0], CONFIG)
    assert restored_entries(points[2][0], tmp_path, "after-1") == expected[2]
    # Disposing the second: what the third needs of the first and second stays.
    dispose_savepoint(points[1][0], CONFIG)
    assert restored_entries(points[2][0], tmp_path, "after-2") == expected[2]
    # The last one takes the leftovers of the others with it.
    dispose_savepoint(points[2][0], CONFIG)
    assert not files_under(parent)


def test_a_savepoint_whose_base_was_disposed_meanwhile_fails(backend, tmp_path):
    parent = tmp_path / "savepoints"
    put(backend, list(range(20_000)), random.Random(1))
    first_dir, _ = savepoint(backend, parent, "savepoint-job-1-1", 1)
    put(backend, list(range(100)), random.Random(2))
    storage = create_storage(str(parent / "savepoint-job-1-2"))
    handle = backend.snapshot_to(2, SnapshotLocation.for_savepoint(
        storage, "op-0", SAVEPOINT_NATIVE)).run()
    assert isinstance(handle, IncrementalRocksDBStateHandle) and handle.savepoint_base
    dispose_savepoint(first_dir, CONFIG)  # before the JobMaster finalizes the second
    metadata = checkpoint_pb2.CheckpointMetadata(job_id="job-1", checkpoint_id=2,
                                                 savepoint=True)
    sub = metadata.subtasks.add(vertex_id=1, subtask_index=0)
    _ = sub.state.operators.add(operator_uid="op", keyed_state=json.dumps([handle.to_dict()]))
    with pytest.raises(MissingStateError, match="savepoint-job-1-1 was disposed of"):
        commit_refs(storage, metadata)


def test_a_file_whose_checksum_differs_is_stored_again(backend, tmp_path):
    parent = tmp_path / "savepoints"
    put(backend, list(range(20_000)), random.Random(1))
    backend.compact()
    savepoint(backend, parent, "savepoint-job-1-1", 1)
    strategy = backend.incremental_strategy
    _directory, files = strategy._savepoints[-1]
    name = sorted(n for n in files if n.endswith(".sst"))[0]
    files[name] = type(files[name])(files[name].uri, files[name].length, "crc32c:00000000")
    _, second = savepoint(backend, parent, "savepoint-job-1-2", 2)
    assert name in second.shared
    assert second.shared[name].uri.startswith((parent / "savepoint-job-1-2").as_uri())
    assert second.files_reused == len(files) - 1 - sum(not n.endswith(".sst") for n in files)


def test_a_corrupt_refs_file_stops_disposal_naming_it(chain):
    parent, points, _ = chain
    refs = parent / "savepoint-job-1-3" / REFS_NAME
    refs.write_text("{not json")
    with pytest.raises(CorruptStateError, match=str(refs.name)) as err:
        dispose_savepoint(points[0][0], CONFIG)
    assert "savepoint-job-1-3/_refs is corrupt" in str(err.value)
    assert (parent / "savepoint-job-1-1" / METADATA_NAME).exists()  # nothing deleted


def test_claiming_a_savepoint_that_shares_files_is_refused(chain):
    _, points, _ = chain
    claim = Configuration.from_pairs({"execution.state-recovery.claim-mode": "CLAIM"})
    for directory, _ in points:
        with pytest.raises(ConfigError, match="NO_CLAIM"):
            load_snapshot(directory, claim)
    assert load_snapshot(points[2][0], CONFIG).owned is False


def test_paths_and_refs_files():
    assert sibling_relative("file:///d/savepoint-a/shared/x", "file:///d/savepoint-b") \
        == "../savepoint-a/shared/x"
    assert sibling_relative("file:///d/savepoint-b/shared/x", "file:///d/savepoint-b") is None
    assert sibling_relative("file:///d/job/shared/x", "file:///d/savepoint-b") is None
    assert sibling_relative("file:///e/savepoint-a/x", "file:///d/savepoint-b") is None
    assert normalize_uri("file:///d/savepoint-b/../savepoint-a/x") == "file:///d/savepoint-a/x"
    assert normalize_uri("s3://bkt/p/savepoint-b/../savepoint-a/x") == "s3://bkt/p/savepoint-a/x"
    for bad in [b"[]", b'{"version": 9}', b'{"version": 1, "job_id": "j", "bases": [],'
                b' "files": ["../up/x"]}']:
        with pytest.raises(CorruptStateError, match="DIR/sp/_refs"):
            SavepointRefs.decode(bad, "DIR/sp/_refs")



def test_two_jobs_saving_into_one_directory_share_nothing(backend, tmp_path):
    parent = tmp_path / "savepoints"
    other = RocksDBKeyedStateBackend(MAX_PAR, ALL, tmp_path / "other-rocks")
    try:
        other.get_state(ValueStateDescriptor("v"))
        for index, created in enumerate([backend, other]):
            put(created, list(range(20_000)), random.Random(index))
            created.compact()
        savepoint(backend, parent, "savepoint-job-1-1", 1)
        _, second = savepoint(other, parent, "savepoint-job-2-1", 1)
        assert second.savepoint_base == "" and second.files_reused == 0
        assert not (parent / "savepoint-job-2-1" / REFS_NAME).exists()
    finally:
        other.dispose()
