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
