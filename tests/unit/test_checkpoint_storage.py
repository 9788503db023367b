"""File-system checkpoint storage: atomic writes, verified reads, listing and deletion."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import weir.checkpoint.filesystem as fs_module
from weir.checkpoint.filesystem import TEMP_SUFFIX, FsCheckpointStorageAccess
from weir.checkpoint.storage import StreamStateHandle, checksum_of, create_storage
from weir.core.config import Configuration
from weir.core.errors import ConfigError, CorruptStateError, MissingStateError


@pytest.fixture
def storage(tmp_path: Path) -> FsCheckpointStorageAccess:
    created = create_storage((tmp_path / "checkpoints").as_uri())
    assert isinstance(created, FsCheckpointStorageAccess)
    return created


def all_files(root: Path) -> list[str]:
    """Every file under ``root``, hidden ones included, relative to it."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_round_trip_returns_verifiable_handle(storage: FsCheckpointStorageAccess,
                                              tmp_path: Path):
    data = os.urandom(3 * 1024 * 1024 + 17)  # spans several copy chunks
    handle = storage.write("job-1/chk-3/op-a/state-0", data)

    path = tmp_path / "checkpoints/job-1/chk-3/op-a/state-0"
    assert handle.uri == path.as_uri()
    assert handle.uri.startswith("file:///")
    assert handle.length == len(data)
    assert handle.checksum == checksum_of(data)
    assert path.read_bytes() == data
    assert storage.read(handle) == data
    assert storage.exists(handle) and storage.exists(handle.uri)


def test_memoryview_and_overwrite(storage: FsCheckpointStorageAccess):
    first = storage.write("a/b", memoryview(b"0123456789")[2:6])
    assert (first.length, storage.read(first)) == (4, b"2345")
    second = storage.write("a/b", b"replaced")
    assert storage.read(second) == b"replaced"
    # The old handle now points at different bytes: detected, not silently accepted.
    with pytest.raises(CorruptStateError):
        storage.read(first)


def test_uri_with_special_characters_round_trips(tmp_path: Path):
    storage = create_storage(str(tmp_path / "with space %20"))
    handle = storage.write("x/y", b"data")
    assert " " not in handle.uri
    assert create_storage(storage.base_uri).read(handle) == b"data"
    assert Path(tmp_path / "with space %20" / "x" / "y").read_bytes() == b"data"


def test_failed_write_leaves_no_final_file_and_no_temp(storage: FsCheckpointStorageAccess,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(fs_module.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="injected"):
        storage.write("job/chk-1/state-0", b"x" * 100_000)
    monkeypatch.undo()

    assert not (tmp_path / "checkpoints/job/chk-1/state-0").exists()
    assert all_files(tmp_path / "checkpoints") == []
    assert storage.list() == []


def test_failed_write_keeps_previous_version(storage: FsCheckpointStorageAccess,
                                            monkeypatch: pytest.MonkeyPatch):
    old = storage.write("meta", b"version 1")

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("rename failed (injected)")

    monkeypatch.setattr(fs_module.os, "replace", failing_replace)
    with pytest.raises(OSError, match="injected"):
        storage.write("meta", b"version 2 is longer")
    monkeypatch.undo()
    assert storage.read(old) == b"version 1"
    assert all_files(storage.base_path) == ["meta"]


def test_reader_never_sees_partial_object(storage: FsCheckpointStorageAccess, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch):
    """At the last moment before the rename, all data is written but the name is absent."""
    final = tmp_path / "checkpoints/job/state-0"
    data = os.urandom(2 * 1024 * 1024)
    seen: list[tuple[bool, list[int]]] = []
    real_fsync = os.fsync

    def observing_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            real_fsync(fd)  # the directory sync after the rename
            return
        temps = [p for p in final.parent.iterdir() if p.name.endswith(TEMP_SUFFIX)]
        seen.append((final.exists(), [p.stat().st_size for p in temps]))
        real_fsync(fd)

    monkeypatch.setattr(fs_module.os, "fsync", observing_fsync)
    handle = storage.write("job/state-0", data)
    monkeypatch.undo()

    assert seen == [(False, [len(data)])]
    assert storage.read(handle) == data
    assert all_files(final.parent) == ["state-0"]


def test_flipped_byte_is_corrupt(storage: FsCheckpointStorageAccess, tmp_path: Path):
    handle = storage.write("job/state-0", b"abcdefgh" * 1000)
    path = tmp_path / "checkpoints/job/state-0"
    raw = bytearray(path.read_bytes())
    raw[4321] ^= 0x01
    path.write_bytes(raw)

    with pytest.raises(CorruptStateError) as info:
        storage.read(handle)
    message = str(info.value)
    assert handle.uri in message and "checksum" in message
    with pytest.raises(CorruptStateError, match="checksum"):
        storage.download(handle, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_truncated_file_is_corrupt(storage: FsCheckpointStorageAccess, tmp_path: Path):
    handle = storage.write("job/state-0", b"0123456789")
    path = tmp_path / "checkpoints/job/state-0"
    path.write_bytes(b"01234")

    with pytest.raises(CorruptStateError) as info:
        storage.read(handle)
    assert handle.uri in str(info.value)
    assert "length is 5 bytes" in str(info.value) and "recorded 10" in str(info.value)


def test_missing_object(storage: FsCheckpointStorageAccess):
    handle = StreamStateHandle(storage.base_uri + "/job/never-written", 3, checksum_of(b"abc"))
    with pytest.raises(MissingStateError, match="never-written"):
        storage.read(handle)
    with pytest.raises(MissingStateError, match="never-written"):
        storage.download(handle, storage.base_path / "dest")
    assert not storage.exists(handle)
    storage.delete(handle)  # deleting what is not there is fine


def test_write_file_and_download_round_trip(storage: FsCheckpointStorageAccess,
                                           tmp_path: Path):
    source = tmp_path / "local-sst"
    source.write_bytes(os.urandom(5 * 1024 * 1024 + 3))
    handle = storage.write_file("job/chk-2/op/000042.sst", source)
    assert handle.length == source.stat().st_size
    assert handle.checksum == checksum_of(source.read_bytes())

    destination = tmp_path / "restore" / "deep" / "000042.sst"
    destination.parent.mkdir(parents=True)
    destination.write_bytes(b"stale content")  # replaced atomically
    storage.download(handle, destination)
    assert destination.read_bytes() == source.read_bytes()
    assert all_files(destination.parent) == ["000042.sst"]


def test_download_of_corrupt_object_keeps_existing_destination(
        storage: FsCheckpointStorageAccess, tmp_path: Path):
    handle = storage.write("x", b"good bytes")
    (tmp_path / "checkpoints/x").write_bytes(b"evil bytes")  # same length
    destination = tmp_path / "dest"
    destination.write_bytes(b"previous")
    with pytest.raises(CorruptStateError):
        storage.download(handle, destination)
    assert destination.read_bytes() == b"previous"
    assert all_files(tmp_path / "checkpoints") == ["x"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoints", "dest"]


def test_list_and_delete_prefix(storage: FsCheckpointStorageAccess):
    names = ["job/chk-3/a/state-0", "job/chk-3/b/state-0", "job/chk-30/a/state-0",
             "job/shared/x", "other/y"]
    handles = {name: storage.write(name, name.encode()) for name in names}
    base = storage.base_uri

    assert storage.list() == sorted(f"{base}/{n}" for n in names)
    # Directory semantics: chk-3 is not a string prefix of chk-30's objects.
    assert storage.list("job/chk-3") == [f"{base}/job/chk-3/a/state-0",
                                         f"{base}/job/chk-3/b/state-0"]
    assert storage.list("job/chk-3/") == storage.list("job/chk-3")
    assert storage.list("nothing/here") == []

    storage.delete_prefix("job/chk-3")
    assert storage.list("job") == [f"{base}/job/chk-30/a/state-0", f"{base}/job/shared/x"]
    assert not storage.exists(handles["job/chk-3/a/state-0"])
    storage.delete_prefix("job/chk-3")  # idempotent

    storage.delete(handles["job/shared/x"].uri)
    assert storage.list("job") == [f"{base}/job/chk-30/a/state-0"]

    storage.delete_prefix("")
    assert storage.list() == []
    assert storage.base_path.is_dir()


def test_list_skips_in_progress_temp_files(storage: FsCheckpointStorageAccess):
    storage.write("job/a", b"1")
    (storage.base_path / "job" / f".b.123{TEMP_SUFFIX}").write_bytes(b"partial")
    assert storage.list("job") == [storage.base_uri + "/job/a"]


@pytest.mark.parametrize("bad", ["", "/abs/path", "a/../b", "../escape", "a//b", "./a", "a/"])
def test_relative_paths_that_escape_or_are_malformed_are_refused(
        storage: FsCheckpointStorageAccess, bad: str):
    with pytest.raises(ValueError, match="relative path"):
        storage.write(bad, b"x")


def test_handles_of_another_scheme_are_refused(storage: FsCheckpointStorageAccess):
    with pytest.raises(ValueError, match="not a file:// URI"):
        storage.read(StreamStateHandle("s3://bucket/key", 1, "crc32:00000000"))


@pytest.mark.parametrize("uri", ["hdfs://namenode/checkpoints", "gs://bucket/x", "ftp://h/x"])
def test_unknown_scheme_is_a_config_error(uri: str):
    scheme = uri.split("://")[0]
    with pytest.raises(ConfigError, match=f"unsupported checkpoint storage scheme '{scheme}://'"):
        create_storage(uri, Configuration())


def test_relative_location_is_a_config_error():
    with pytest.raises(ConfigError, match="not absolute"):
        create_storage("checkpoints/here")


def test_plain_path_and_file_uri_are_the_same_storage(tmp_path: Path):
    by_path = create_storage(str(tmp_path))
    by_uri = create_storage(tmp_path.as_uri())
    assert by_path.base_uri == by_uri.base_uri == tmp_path.as_uri()
    handle = by_path.write("k", b"v")
    assert by_uri.read(handle) == b"v"


def test_handle_serialises_to_json_and_back():
    handle = StreamStateHandle("s3://bucket/job/chk-1/state-0", 123, "crc32:0badf00d")
    as_json = json.dumps(handle.to_dict())
    assert StreamStateHandle.from_dict(json.loads(as_json)) == handle


@pytest.mark.parametrize("bad", [
    {"uri": "file:///x", "length": 1},
    {"uri": "file:///x", "length": "1", "checksum": "crc32:00000000"},
    {"uri": "file:///x", "length": -1, "checksum": "crc32:00000000"},
    {"uri": "file:///x", "length": True, "checksum": "crc32:00000000"},
    ["not", "a", "dict"],
])
def test_malformed_handle_dicts_are_refused(bad: object):
    with pytest.raises(ValueError, match="state handle"):
        StreamStateHandle.from_dict(bad)  # type: ignore[arg-type]


def test_new_handles_use_crc32c_and_older_crc32_handles_still_verify(
        storage: FsCheckpointStorageAccess, tmp_path: Path):
    import zlib

    import google_crc32c

    data = os.urandom(2 * 1024 * 1024 + 5)
    handle = storage.write("job/chk-1/state", data)
    assert handle.checksum == f"crc32c:{google_crc32c.value(data):08x}"
    # A handle from before CRC-32C: zlib's CRC-32, verified as such on read and download.
    old = StreamStateHandle(handle.uri, len(data), f"crc32:{zlib.crc32(data):08x}")
    assert storage.read(old) == data
    storage.download(old, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == data
    path = tmp_path / "checkpoints/job/chk-1/state"
    path.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    for stale in (old, handle):
        with pytest.raises(CorruptStateError, match="checksum"):
            storage.read(stale)


def test_a_checksum_of_an_unknown_algorithm_checks_the_length_only(
        storage: FsCheckpointStorageAccess):
    handle = storage.write("job/chk-1/state", b"abc")
    future = StreamStateHandle(handle.uri, 3, "sha3:00")
    assert storage.read(future) == b"abc"
    with pytest.raises(CorruptStateError, match="length"):
        storage.read(StreamStateHandle(handle.uri, 4, "sha3:00"))
