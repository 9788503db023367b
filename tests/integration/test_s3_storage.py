"""S3 checkpoint storage against a real S3 server (SeaweedFS, credentials enforced)."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.support.seaweedfs import SeaweedS3
from weir.checkpoint.s3 import S3CheckpointStorageAccess
from weir.checkpoint.storage import StreamStateHandle, checksum_of, create_storage
from weir.core.errors import (
    CorruptStateError,
    MissingStateError,
    StorageAccessError,
    StorageUnreachableError,
    UserError,
)

MIB = 1024 * 1024


@pytest.fixture
def storage(seaweed_s3: SeaweedS3, s3_bucket: str) -> S3CheckpointStorageAccess:
    created = create_storage(f"s3://{s3_bucket}/checkpoints", seaweed_s3.config(s3_bucket))
    assert isinstance(created, S3CheckpointStorageAccess)
    return created


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_bytes_round_trip(storage: S3CheckpointStorageAccess, seaweed_s3: SeaweedS3,
                          s3_bucket: str):
    data = os.urandom(256 * 1024)
    handle = storage.write("job-1/chk-3/op-a/state-0", data)

    assert handle.uri == f"s3://{s3_bucket}/checkpoints/job-1/chk-3/op-a/state-0"
    assert (handle.length, handle.checksum) == (len(data), checksum_of(data))
    assert storage.read(handle) == data
    assert storage.exists(handle) and storage.exists(handle.uri)
    # The object really is where the URI says, byte for byte.
    raw = seaweed_s3.client().get_object(Bucket=s3_bucket,
                                         Key="checkpoints/job-1/chk-3/op-a/state-0")
    assert raw["Body"].read() == data
    # A handle survives serialisation and a fresh storage instance.
    fresh = create_storage(storage.base_uri, seaweed_s3.config(s3_bucket))
    assert fresh.read(StreamStateHandle.from_dict(handle.to_dict())) == data


@pytest.mark.parametrize("background", [False, True])  # background: one part at a time
def test_large_file_goes_multipart_and_round_trips(storage: S3CheckpointStorageAccess,
                                                   seaweed_s3: SeaweedS3, s3_bucket: str,
                                                   tmp_path: Path, background: bool):
    source = tmp_path / "big.sst"
    source.write_bytes(os.urandom(20 * MIB + 12345))
    handle = storage.write_file("job/chk-1/op/big.sst", source, background=background)
    assert handle.length == source.stat().st_size
    assert handle.checksum == checksum_of(source.read_bytes())

    head = seaweed_s3.client().head_object(Bucket=s3_bucket, Key="checkpoints/job/chk-1/op/big.sst")
    assert head["ContentLength"] == handle.length
    assert head["ETag"].strip('"').endswith("-3"), f"not a 3-part upload: {head['ETag']}"

    destination = tmp_path / "restore" / "big.sst"
    storage.download(handle, destination)
    assert destination.read_bytes() == source.read_bytes()
    assert sorted(os.listdir(destination.parent)) == ["big.sst"]  # no temp left behind


def test_large_bytes_write_goes_multipart(seaweed_s3: SeaweedS3, s3_bucket: str):
    storage = S3CheckpointStorageAccess(s3_bucket, "p", endpoint=seaweed_s3.endpoint,
                                  access_key=seaweed_s3.access_key,
                                  secret_key=seaweed_s3.secret_key,
                                  multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    data = memoryview(os.urandom(11 * MIB))
    handle = storage.write("state", data)
    head = seaweed_s3.client().head_object(Bucket=s3_bucket, Key="p/state")
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]
    assert storage.read(handle) == data


def test_object_overwritten_behind_our_back_is_corrupt(storage: S3CheckpointStorageAccess,
                                                       seaweed_s3: SeaweedS3, s3_bucket: str,
                                                       tmp_path: Path):
    handle = storage.write("job/state-0", b"the real snapshot")
    raw = seaweed_s3.client()
    key = "checkpoints/job/state-0"

    raw.put_object(Bucket=s3_bucket, Key=key, Body=b"the fake snapshot")  # same length
    with pytest.raises(CorruptStateError) as info:
        storage.read(handle)
    assert handle.uri in str(info.value) and "checksum" in str(info.value)
    destination = tmp_path / "restored"
    with pytest.raises(CorruptStateError, match="checksum"):
        storage.download(handle, destination)
    assert not destination.exists()
    assert os.listdir(tmp_path) == []

    raw.put_object(Bucket=s3_bucket, Key=key, Body=b"short")
    with pytest.raises(CorruptStateError, match="length is 5 bytes"):
        storage.read(handle)


def test_missing_object(storage: S3CheckpointStorageAccess, tmp_path: Path):
    handle = StreamStateHandle(storage.base_uri + "/job/never-written", 3, checksum_of(b"abc"))
    with pytest.raises(MissingStateError) as info:
        storage.read(handle)
    assert handle.uri in str(info.value)
    with pytest.raises(MissingStateError):
        storage.download(handle, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert not storage.exists(handle)
    storage.delete(handle)  # deleting what is not there is fine


def test_wrong_secret_key_is_a_clear_access_error(seaweed_s3: SeaweedS3, s3_bucket: str,
                                                  storage: S3CheckpointStorageAccess):
    handle = storage.write("job/state-0", b"abc")
    bad = create_storage(f"s3://{s3_bucket}/checkpoints",
                         seaweed_s3.config(s3_bucket, **{"s3.secret-key": "not-the-secret"}))
    for attempt in (lambda: bad.write("job/state-1", b"abc"), lambda: bad.read(handle),
                    lambda: bad.list(), lambda: bad.exists(handle)):
        with pytest.raises(StorageAccessError) as info:
            attempt()
        message = str(info.value)
        assert isinstance(info.value, UserError)
        assert "s3.secret-key" in message and "s3.access-key" in message
        assert seaweed_s3.endpoint in message and s3_bucket in message
        assert "\n" not in message


def test_unknown_access_key_is_a_clear_access_error(seaweed_s3: SeaweedS3, s3_bucket: str):
    bad = create_storage(f"s3://{s3_bucket}",
                         seaweed_s3.config(s3_bucket, **{"s3.access-key": "nobody"}))
    with pytest.raises(StorageAccessError, match=r"InvalidAccessKeyId.*s3\.access-key"):
        bad.write("x", b"1")


def test_unreachable_endpoint_fails_fast_and_clearly(seaweed_s3: SeaweedS3, tmp_path: Path):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    storage = create_storage("s3://some-bucket/x",
                             seaweed_s3.config("some-bucket", **{"s3.endpoint": endpoint}))
    source = tmp_path / "f"
    source.write_bytes(b"data")
    for attempt in (lambda: storage.write("state", b"abc"),
                    lambda: storage.write_file("state", source),
                    lambda: storage.list()):
        started = time.monotonic()
        with pytest.raises(StorageUnreachableError) as info:
            attempt()
        assert time.monotonic() - started < 20
        message = str(info.value)
        assert isinstance(info.value, UserError)
        assert endpoint in message and "s3.endpoint" in message


class _Failing(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that answers every request as SeaweedFS does while it starts: 500
    InternalError."""

    def _fail(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
                b"<Message>We encountered an internal error, please try again.</Message>"
                b"</Error>")
        self.send_response(500)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _fail  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_service_that_cannot_serve_is_unreachable_not_damaged_state(
        seaweed_s3: SeaweedS3, tmp_path: Path):
    # A 5xx answer (after botocore's retries) says nothing about the state: a restore must
    # wait for the service, not take the checkpoint for broken and give up on it.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        storage = create_storage("s3://some-bucket/x",
                                 seaweed_s3.config("some-bucket", **{"s3.endpoint": endpoint}))
        handle = StreamStateHandle("s3://some-bucket/x/chk-1/_metadata", 1, checksum_of(b"x"))
        for attempt in (lambda: storage.read(handle), lambda: storage.write("state", b"abc"),
                        lambda: storage.list()):
            with pytest.raises(StorageUnreachableError) as info:
                attempt()
            assert "InternalError" in str(info.value) and endpoint in str(info.value)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_missing_bucket_is_a_clear_access_error(seaweed_s3: SeaweedS3, tmp_path: Path):
    bucket = f"weir-missing-{uuid.uuid4().hex[:10]}"
    storage = create_storage(f"s3://{bucket}/cp", seaweed_s3.config(bucket))
    big = tmp_path / "big"
    big.write_bytes(b"\0" * (9 * MIB))  # multipart: fails at CreateMultipartUpload
    handle = StreamStateHandle(f"s3://{bucket}/cp/x", 1, checksum_of(b"x"))
    for attempt in (lambda: storage.write("x", b"x"), lambda: storage.write_file("x", big),
                    lambda: storage.read(handle), lambda: storage.list(),
                    lambda: storage.exists(handle)):
        with pytest.raises(StorageAccessError) as info:
            attempt()
        message = str(info.value)
        assert f"bucket '{bucket}' does not exist" in message and "create it" in message

    assert isinstance(storage, S3CheckpointStorageAccess)
    try:
        storage.ensure_bucket()
        storage.ensure_bucket()  # idempotent
        written = storage.write("x", b"x")
        assert written == handle
        assert storage.read(handle) == b"x"
    finally:
        storage.delete_prefix("")
        seaweed_s3.client().delete_bucket(Bucket=bucket)


def test_list_and_delete_prefix(storage: S3CheckpointStorageAccess, seaweed_s3: SeaweedS3,
                                s3_bucket: str):
    names = [f"job/chk-3/op-{i}/state-0" for i in range(12)] + [
        "job/chk-30/op-0/state-0", "job/shared/x", "other/y"]
    for name in names:
        storage.write(name, name.encode())
    # An object outside the storage's prefix must never be listed or deleted.
    seaweed_s3.client().put_object(Bucket=s3_bucket, Key="elsewhere/z", Body=b"z")
    base = storage.base_uri

    assert storage.list() == sorted(f"{base}/{n}" for n in names)
    assert storage.list("job/chk-3") == sorted(f"{base}/job/chk-3/op-{i}/state-0"
                                               for i in range(12))
    assert storage.list("job/chk-3/") == storage.list("job/chk-3")
    assert storage.list("nothing") == []

    storage.delete_prefix("job/chk-3")
    assert storage.list("job") == [f"{base}/job/chk-30/op-0/state-0", f"{base}/job/shared/x"]
    storage.delete_prefix("job/chk-3")  # idempotent
    storage.delete(f"{base}/job/shared/x")
    assert storage.list() == [f"{base}/job/chk-30/op-0/state-0", f"{base}/other/y"]

    storage.delete_prefix("")
    assert storage.list() == []
    keys = [o["Key"] for o in
            seaweed_s3.client().list_objects_v2(Bucket=s3_bucket).get("Contents", [])]
    assert keys == ["elsewhere/z"]


def test_a_rerun_s3_file_sink_replaces_the_earlier_attempts_objects(
        seaweed_s3: SeaweedS3, s3_bucket: str) -> None:
    # Without checkpointing a sink commits when its input ends; a re-run (a BATCH region
    # restarted) replaces its earlier attempt's objects, and deletes those beyond them.
    from weir.core.records import Elements
    from weir.operators.sinks.file import FileSinkOperator
    from weir.taskexecutor.operator import OperatorContext, StateContext

    def run(attempt: int, subtask: int, *numbers: int) -> None:
        sink = FileSinkOperator("sink", f"s3://{s3_bucket}/out", "json", rolling_bytes=1)
        sink.setup(OperatorContext("sink", subtask, 2, 128, attempt_number=attempt,
                                   configuration=seaweed_s3.config(s3_bucket)),
                   output=None)  # type: ignore[arg-type]
        sink.initialize_state(StateContext())
        sink.open()
        for n in numbers:
            sink.process(Elements.from_records([{"n": n}]))
        sink.finish()
        sink.close()

    def committed() -> dict[str, list[int]]:
        client = seaweed_s3.client()
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="out/")
                .get("Contents", [])]
        return {key: [int(line.split(":")[1].strip(" }")) for line in client.get_object(
                    Bucket=s3_bucket, Key=key)["Body"].read().decode().splitlines()]
                for key in sorted(keys)}

    run(0, 0, 1, 2, 3)
    run(0, 1, 100)
    assert committed() == {"out/part-0-0.jsonl": [1], "out/part-0-1.jsonl": [2],
                           "out/part-0-2.jsonl": [3], "out/part-1-0.jsonl": [100]}
    run(1, 0, 1, 2)
    assert committed() == {"out/part-0-0.jsonl": [1], "out/part-0-1.jsonl": [2],
                           "out/part-1-0.jsonl": [100]}


def test_copy_is_server_side_and_keeps_the_handle(storage: S3CheckpointStorageAccess,
                                                  seaweed_s3: SeaweedS3, s3_bucket: str,
                                                  monkeypatch: pytest.MonkeyPatch):
    """A native savepoint copies the checkpoint's files with CopyObject: no byte passes
    through the process (downloading or uploading fails the test), the copy verifies
    against the source's handle, and a missing source is a clear MissingStateError."""
    data = os.urandom(3 * MIB)
    source = storage.write("job/shared/abc-000012.sst", data)
    savepoint = create_storage(f"s3://{s3_bucket}/savepoints/sp-1", seaweed_s3.config(s3_bucket))

    def no_transfer(*args: object, **kwargs: object) -> None:
        raise AssertionError("the copy moved bytes through this process")

    monkeypatch.setattr(S3CheckpointStorageAccess, "download", no_transfer)
    monkeypatch.setattr(S3CheckpointStorageAccess, "write_file", no_transfer)
    copy = savepoint.copy(source, "shared/000012.sst")
    assert copy.uri == f"s3://{s3_bucket}/savepoints/sp-1/shared/000012.sst"
    assert (copy.length, copy.checksum) == (source.length, source.checksum)
    assert savepoint.read(copy) == data
    with pytest.raises(MissingStateError, match="does not exist"):
        savepoint.copy(StreamStateHandle(source.uri + "-gone", 3, source.checksum), "x")
