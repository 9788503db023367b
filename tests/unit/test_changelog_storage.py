"""The state change log (checkpoint/changelog_storage.py): framing, batching, preemptive
persist, backpressure, retries and reading back, on file:// storage."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from weir.checkpoint.changelog_storage import (
    ChangelogStorage,
    ChangelogStorageOptions,
    LogSegmentHandle,
    frame_piece,
    parse_piece,
    read_changes,
)
from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle, create_storage
from weir.core.errors import CorruptStateError, StateError, StorageError


def _options(**overrides: float) -> ChangelogStorageOptions:
    values = {"persist_delay_s": 0.0, "upload_timeout_s": 5.0, "next_attempt_delay_s": 0.0}
    values.update(overrides)
    return ChangelogStorageOptions(**values)  # type: ignore[arg-type]


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorageAccess:
    return create_storage(str(tmp_path / "checkpoints"))


def test_framing_round_trip() -> None:
    records = [(7, 3, b"a"), (8, 120, b""), (9, 3, b"x" * 1000)]
    piece = frame_piece(7, records)
    assert [tuple(c) for c in parse_piece(piece, "f")] == records


def test_a_corrupt_piece_is_named() -> None:
    piece = bytearray(frame_piece(0, [(0, 1, b"value")]))
    piece[-6] ^= 0xFF
    with pytest.raises(CorruptStateError, match=r"log somewhere\.log is corrupt"):
        list(parse_piece(bytes(piece), "somewhere.log"))


def test_a_corrupt_file_is_named_on_read(storage: CheckpointStorageAccess) -> None:
    log = ChangelogStorage(storage, "job/changelog", _options())
    try:
        writer = log.create_writer("op")
        writer.append(1, b"change")
        handles = writer.persist(0).result(timeout=10)
        path = Path(handles[0].file.uri.removeprefix("file://"))
        data = bytearray(path.read_bytes())
        data[20] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(CorruptStateError, match=handles[0].file.uri):
            list(read_changes(storage, handles))
    finally:
        log.close()


def test_handle_round_trip() -> None:
    file = StreamStateHandle("s3://b/job/changelog/x.log", 500, "crc32c:00000001")
    handle = LogSegmentHandle(file, 100, 200, 4, 9, 30, 42, "crc32c:0000abcd")
    assert LogSegmentHandle.from_dict(handle.to_dict()) == handle
    assert handle.overlaps(0, 4) and handle.overlaps(9, 100) and not handle.overlaps(10, 20)


def test_pieces_of_several_writers_share_one_file(storage: CheckpointStorageAccess) -> None:
    # A long persist delay: both writers' pieces wait for each other and go together.
    log = ChangelogStorage(storage, "job/changelog", _options(persist_delay_s=0.5))
    try:
        first, second = log.create_writer("a"), log.create_writer("b")
        first.append(1, b"a1")
        second.append(70, b"b1")
        second.append(71, b"b2")
        a, b = first.persist(0), second.persist(0)
        ha, hb = a.result(timeout=10), b.result(timeout=10)
        assert ha[0].file.uri == hb[0].file.uri
        assert (ha[0].first_key_group, ha[0].last_key_group) == (1, 1)
        assert (hb[0].first_key_group, hb[0].last_key_group) == (70, 71)
        assert [c.payload for c in read_changes(storage, hb)] == [b"b1", b"b2"]
        assert log.metrics.upload_requests == 1
        assert log.in_flight_bytes == 0
    finally:
        log.close()


def test_preemptive_persist_and_replay_order(storage: CheckpointStorageAccess) -> None:
    log = ChangelogStorage(storage, "job/changelog", _options(preemptive_persist_bytes=100))
    try:
        writer = log.create_writer("op")
        for i in range(50):
            writer.append(i % 4, f"change {i}".encode())
        # Pieces were sealed and handed over before any persist request.
        assert len(writer._pieces) >= 5
        handles = writer.persist(0).result(timeout=10)
        changes = list(read_changes(storage, handles))
        assert [c.sequence for c in changes] == list(range(50))
        assert [c.payload for c in changes] == [f"change {i}".encode() for i in range(50)]
        # Only the changes of key groups 1..2.
        clipped = list(read_changes(storage, handles, (1, 2)))
        assert [c.sequence for c in clipped] == [i for i in range(50) if i % 4 in (1, 2)]
        # From a later position: only the pieces that hold it.
        later = writer.persist(40).result(timeout=10)
        assert later[0].first_sequence <= 40 < later[-1].end_sequence == 50
    finally:
        log.close()


def test_truncate_forgets_covered_pieces(storage: CheckpointStorageAccess) -> None:
    log = ChangelogStorage(storage, "job/changelog", _options(preemptive_persist_bytes=10))
    try:
        writer = log.create_writer("op")
        for i in range(6):
            writer.append(0, b"0123456789")
        writer.persist(0).result(timeout=10)
        writer.truncate(4)
        assert [p.first for p in writer._pieces] == [4, 5]
        assert [h.first_sequence for h in writer.persist(4).result(timeout=10)] == [4, 5]
    finally:
        log.close()


class _BlockingStorage:
    """File storage whose writes wait for ``release`` (a slow or stalled upload), and fail
    while ``failing`` is set."""

    def __init__(self, inner: CheckpointStorageAccess) -> None:
        self.inner = inner
        self.release = threading.Event()
        self.failing = threading.Event()
        self.base_uri = inner.base_uri
        self.writes = 0

    def write(self, path: str, data: bytes) -> StreamStateHandle:
        self.writes += 1
        if self.failing.is_set():
            msg = "storage down"
            raise StorageError(msg)
        self.release.wait()
        return self.inner.write(path, data)

    def read(self, handle: StreamStateHandle) -> bytes:
        return self.inner.read(handle)


def test_max_in_flight_backpressures_the_writer(storage: CheckpointStorageAccess) -> None:
    blocking = _BlockingStorage(storage)
    log = ChangelogStorage(blocking, "job/changelog",  # type: ignore[arg-type]
                           _options(max_in_flight_bytes=300, preemptive_persist_bytes=50))
    try:
        writer = log.create_writer("op")
        writer.backpressure_timeout = 0.2
        for _ in range(3):
            writer.append(0, b"x" * 60)  # each change seals a piece of 99 bytes
        assert log.in_flight_bytes <= 300
        with pytest.raises(StateError, match="max-in-flight"):
            writer.append(0, b"x" * 60)
        assert log.in_flight_bytes <= 300
        # Uploads complete: room again, and the writer goes on.
        blocking.release.set()
        writer.backpressure_timeout = 10
        writer.append(0, b"y" * 60)
        handles = writer.persist(0).result(timeout=10)
        assert [c.payload[:1] for c in read_changes(storage, handles)][-1] == b"y"
    finally:
        blocking.release.set()
        log.close()


def test_failed_uploads_are_retried_then_kept_for_the_next_persist(
        storage: CheckpointStorageAccess) -> None:
    blocking = _BlockingStorage(storage)
    blocking.release.set()
    blocking.failing.set()
    log = ChangelogStorage(blocking, "job/changelog", _options(max_attempts=3))  # type: ignore[arg-type]
    try:
        writer = log.create_writer("op")
        writer.append(5, b"kept")
        with pytest.raises(StorageError, match="storage down"):
            writer.persist(0).result(timeout=10)
        assert blocking.writes == 3
        assert log.metrics.upload_failures == 1 and log.metrics.total_attempts == 3
        blocking.failing.clear()
        writer.append(5, b"later")
        handles = writer.persist(0).result(timeout=10)
        assert [c.payload for c in read_changes(storage, handles)] == [b"kept", b"later"]
        assert log.in_flight_bytes == 0
    finally:
        log.close()


def test_an_upload_that_times_out_is_retried(storage: CheckpointStorageAccess) -> None:
    blocking = _BlockingStorage(storage)
    log = ChangelogStorage(blocking, "job/changelog",  # type: ignore[arg-type]
                           _options(upload_timeout_s=0.05, max_attempts=2))
    try:
        writer = log.create_writer("op")
        writer.append(0, b"slow")
        with pytest.raises(StorageError, match="timed out"):
            writer.persist(0).result(timeout=10)
        assert blocking.writes == 2
        blocking.release.set()
        assert writer.persist(0).result(timeout=10)[0].first_sequence == 0
    finally:
        blocking.release.set()
        log.close()
