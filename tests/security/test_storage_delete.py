"""CheckpointStorageAccess.delete deletes only objects under the storage's base: a target
elsewhere (another directory, bucket or prefix, a '..' that climbs out, a symlinked
directory leading out) is refused and survives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.seaweedfs import SeaweedS3
from weir.checkpoint.filesystem import FsCheckpointStorageAccess
from weir.checkpoint.s3 import S3CheckpointStorageAccess
from weir.checkpoint.storage import StreamStateHandle, TargetOutsideStorageError
from weir.core.errors import StorageError


@pytest.fixture
def layout(tmp_path: Path):
    base = tmp_path / "checkpoints"
    victim = tmp_path / "elsewhere" / "precious"
    victim.parent.mkdir()
    victim.write_text("not the storage's")
    storage = FsCheckpointStorageAccess(base)
    storage.write("job/chk-1/state", b"ours")
    return storage, base, victim


def _refused(storage, target, victim: Path | None = None) -> str:
    with pytest.raises(TargetOutsideStorageError) as info:
        storage.delete(target)
    assert isinstance(info.value, StorageError)
    message = str(info.value)
    assert "refusing to delete" in message and storage.base_uri in message
    if victim is not None:
        assert victim.exists(), f"{victim} was deleted"
    return message


def test_file_targets_outside_the_base_are_refused(layout, tmp_path: Path):
    storage, base, victim = layout
    _refused(storage, victim.as_uri(), victim)
    _refused(storage, str(victim), victim)  # a plain absolute path
    _refused(storage, f"file://{base}/../elsewhere/precious", victim)
    _refused(storage, f"file://{base}/job/../../elsewhere/precious", victim)
    _refused(storage, StreamStateHandle(victim.as_uri(), 17, "crc32:00000000"), victim)
    _refused(storage, f"s3://bucket/{victim}")
    # a sibling directory whose name starts like the base is not inside it
    sibling = tmp_path / "checkpoints-other" / "x"
    sibling.parent.mkdir()
    sibling.write_text("x")
    _refused(storage, sibling.as_uri(), sibling)
    _refused(storage, base.as_uri())


def test_a_symlinked_directory_inside_the_base_does_not_lead_out(layout):
    storage, base, victim = layout
    os.symlink(victim.parent, base / "job" / "link")
    _refused(storage, f"file://{base}/job/link/precious", victim)


def test_file_delete_prefix_refuses_escapes(layout):
    storage, _, victim = layout
    for bad in ("../elsewhere", "/abs", "job/../../elsewhere"):
        with pytest.raises(TargetOutsideStorageError):
            storage.delete_prefix(bad)
    assert victim.exists()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the storage holding checkpoint-like contents."""
    elsewhere = tmp_path / "outside"
    (elsewhere / "chk-5" / "op").mkdir(parents=True)
    (elsewhere / "chk-5" / "op" / "state").write_text("not the storage's")
    (elsewhere / "kept").write_text("not the storage's")
    return elsewhere


def _outside_intact(outside: Path) -> None:
    assert (outside / "chk-5" / "op" / "state").read_text() == "not the storage's"
    assert (outside / "kept").read_text() == "not the storage's"


def _prefix_refused(storage, prefix: str, link: Path) -> None:
    with pytest.raises(TargetOutsideStorageError) as info:
        storage.delete_prefix(prefix)
    message = str(info.value)
    assert "refusing to delete" in message and "symbolic link" in message
    assert storage.base_uri in message
    assert link.is_symlink(), "the link itself was deleted"


@pytest.mark.parametrize("prefix", ["jobA/chk-5", "jobA/chk-5/", "jobA/chk-5/op"])
def test_file_delete_prefix_refuses_a_symlinked_directory_on_the_way(layout, outside, prefix):
    storage, base, _ = layout
    os.symlink(outside, base / "jobA")

    _prefix_refused(storage, prefix, base / "jobA")

    _outside_intact(outside)
    assert storage.list("job")  # nothing of the storage's went either


def test_file_delete_prefix_refuses_a_symlinked_directory_deeper_down(layout, outside):
    storage, base, _ = layout
    os.symlink(outside, base / "job" / "link")

    _prefix_refused(storage, "job/link/chk-5", base / "job" / "link")

    _outside_intact(outside)


def test_file_delete_prefix_refuses_a_symlink_as_the_directory_itself(layout, outside):
    storage, base, _ = layout
    os.symlink(outside / "chk-5", base / "job" / "chk-5")

    _prefix_refused(storage, "job/chk-5", base / "job" / "chk-5")

    _outside_intact(outside)
    assert storage.list("job")


def test_file_delete_of_the_whole_storage_removes_links_not_what_they_point_to(
        layout, outside):
    storage, base, _ = layout
    os.symlink(outside, base / "linked-dir")
    os.symlink(outside / "kept", base / "linked-file")

    storage.delete_prefix("")

    assert sorted(os.listdir(base)) == []
    _outside_intact(outside)


def test_file_delete_prefix_still_deletes_real_directories(layout, outside):
    storage, base, _ = layout
    storage.write("job/chk-2/op/state", b"ours")
    # A link inside the deleted directory is removed, not followed.
    os.symlink(outside, base / "job" / "chk-2" / "link")

    storage.delete_prefix("job/chk-2")

    assert not (base / "job" / "chk-2").exists()
    assert storage.list("job") == [f"{storage.base_uri}/job/chk-1/state"]
    _outside_intact(outside)
    storage.delete_prefix("job/chk-2")  # a missing prefix is still fine
    storage.delete_prefix("job/chk-1/state")  # a file is not a prefix: nothing deleted
    assert storage.list("job") == [f"{storage.base_uri}/job/chk-1/state"]


def test_file_targets_inside_the_base_are_still_deleted(layout):
    storage, _, _ = layout
    [uri] = storage.list("job")
    storage.delete(uri)
    assert not storage.exists(uri)
    storage.delete(uri)  # a missing object is still fine


def test_s3_targets_outside_the_prefix_are_refused(seaweed_s3: SeaweedS3, s3_bucket: str):
    client = seaweed_s3.client()
    other_bucket = f"{s3_bucket}-other"
    client.create_bucket(Bucket=other_bucket)
    storage = S3CheckpointStorageAccess(s3_bucket, "jobs/a", endpoint=seaweed_s3.endpoint,
                                  access_key=seaweed_s3.access_key,
                                  secret_key=seaweed_s3.secret_key)
    ours = storage.write("chk-1/state", b"ours")
    victims = {(s3_bucket, "jobs/b/chk-1/state"), (s3_bucket, "jobs/a-sibling/state"),
               (s3_bucket, "top-level"), (other_bucket, "jobs/a/chk-1/state")}
    for bucket, key in victims:
        client.put_object(Bucket=bucket, Key=key, Body=b"not the storage's")
    try:
        targets = [f"s3://{s3_bucket}/jobs/b/chk-1/state", f"s3://{s3_bucket}/jobs/a-sibling/state",
                   f"s3://{s3_bucket}/top-level", f"s3://{other_bucket}/jobs/a/chk-1/state",
                   f"s3://{s3_bucket}/jobs/a/../b/chk-1/state",
                   f"s3://{s3_bucket}/jobs/a/./chk-1/state", f"s3://{s3_bucket}/jobs/a",
                   "file:///etc/hostname", "/etc/hostname"]
        for target in targets:
            _refused(storage, target)
        with pytest.raises(TargetOutsideStorageError):
            storage.delete_prefix("../b")
        for bucket, key in victims:
            client.head_object(Bucket=bucket, Key=key)  # still there
        storage.delete(ours)
        assert not storage.exists(ours)
    finally:
        for bucket, key in victims:
            client.delete_object(Bucket=bucket, Key=key)
        client.delete_bucket(Bucket=other_bucket)
