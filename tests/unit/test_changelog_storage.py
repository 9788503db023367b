"""The state change log (checkpoint/changelog_storage.py): framing, batching, preemptive
persist, backpressure, retries and reading back, on file:// storage."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from weir.checkpoint.changelog_storage import (
    RECORD,
    ChangelogStorage,
    ChangelogStorageOptions,
    LogSegmentHandle,
    VerifiedPiece,
    frame_piece,
    parse_piece,
    read_changes,
)
from weir.checkpoint.storage import CheckpointStorageAccess, StreamStateHandle, create_storage
from weir.core.errors import CorruptStateError, StateError, StorageError

#: The bytes of a piece of one change of 60 bytes (the room tests count in these).
PIECE = len(frame_piece(0, [(0, 0, b"x" * 60)]))

def _options(**overrides: float) -> ChangelogStorageOptions:
    # No grace after the last attempt unless a test asks: a timed-out upload fails at once.
    values = {"persist_delay_s": 0.0, "upload_timeout_s": 5.0, "next_attempt_delay_s": 0.0,
              "last_attempt_grace_s": 0.0}
    values.update(overrides)
    return ChangelogStorageOptions(**values)  # type: ignore[arg-type]


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorageAccess:
    return create_storage(str(tmp_path / "checkpoints"))


def test_framing_round_trip() -> None:
    from weir.state.changelog_replay import PUT, encode_change

    def change(state: str, n: int) -> bytes:
        return encode_change(PUT, state, str(n).encode(), b"", b"x" * n)

    records = [(7, 3, change("b", 1)), (8, 120, change("b", 0)), (9, 3, change("a", 1000)),
               (10, 0, change("b", 2)), (11, 3, change("b", 3))]
    # Version 2 groups the records by state and key group, each group in sequence order,
    # and says where each group starts.
    piece = frame_piece(7, records)
    assert [c.sequence for c in parse_piece(piece, "f")] == [9, 10, 7, 11, 8]
    assert sorted(tuple(c) for c in parse_piece(piece, "f")) == records
    verified = VerifiedPiece.of(piece)
    assert verified.records == 5 and verified.groups is not None
    assert [(state, kg, n) for state, kg, _, n in verified.groups] == \
        [("a", 3, 1), ("b", 0, 1), ("b", 3, 2), ("b", 120, 1)]
    assert verified.groups[0][2] == verified.start
    assert [RECORD.unpack_from(piece, start)[:2] for _, _, start, _ in verified.groups] == \
        [(9, 3), (10, 0), (7, 3), (8, 120)]
    # Version 1, written before: sequence order, no groups; still read.
    old = frame_piece(7, records, version=1)
    assert [tuple(c) for c in parse_piece(old, "f")] == records
    assert VerifiedPiece.of(old).groups is None
    # Any payload frames (one that names no state is in the group of the empty name).
    odd = [(0, 1, b""), (1, 1, b"x" * 70)]
    assert sorted(tuple(c) for c in parse_piece(frame_piece(0, odd), "f")) == odd


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
        # In order of the pieces, each grouped by key group; a key group's in sequence order.
        assert sorted(c.sequence for c in changes) == list(range(50))
        assert [c.payload for c in changes] == [f"change {c.sequence}".encode() for c in changes]
        for kg in range(4):
            assert [c.sequence for c in changes if c.key_group == kg] == list(range(kg, 50, 4))
        # Only the changes of key groups 1..2.
        clipped = list(read_changes(storage, handles, (1, 2)))
        assert sorted(c.sequence for c in clipped) == [i for i in range(50) if i % 4 in (1, 2)]
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


def test_local_copies_go_when_released_not_when_truncated(
        storage: CheckpointStorageAccess, tmp_path: Path) -> None:
    # Two writers share a log file. A materialization truncates a piece while it is still
    # uploading (a checkpoint waiting for it names it once it is up): the file's local
    # copy stays until both writers release it, and not while the upload runs.
    blocking = _BlockingStorage(storage)
    local = tmp_path / "local"
    # The upload starts once both pieces wait (and not before): one file.
    both = 2 * len(frame_piece(0, [(0, 1, b"a1")]))
    log = ChangelogStorage(blocking, "job/changelog",  # type: ignore[arg-type]
                           _options(persist_delay_s=60.0, persist_size_bytes=both),
                           local_dir=local)
    try:
        first, second = log.create_writer("a"), log.create_writer("b")
        first.append(1, b"a1")
        second.append(70, b"b1")
        pending_a, pending_b = first.persist(0), second.persist(0)
        first.truncate(1)  # uploading: dropped, yet named once up
        first.release_local(1)  # a checkpoint naming the materialization completed
        blocking.release.set()
        handles = pending_a.result(timeout=10)
        assert pending_b.result(timeout=10)[0].file == handles[0].file
        name = handles[0].file.uri.rsplit("/", 1)[-1]
        assert first.local_copies(pending_a) == {name: pending_a._pieces[0].local}
        assert (local / name).is_file(), "released while its upload ran"
        first.release_local(1)
        second.truncate(1)
        assert (local / name).is_file(), "truncated, but no checkpoint naming the "\
            "materialization completed"
        second.release_local(1)
        assert not (local / name).exists()
    finally:
        blocking.release.set()
        log.close()


def test_max_in_flight_backpressures_the_writer(storage: CheckpointStorageAccess) -> None:
    blocking = _BlockingStorage(storage)
    log = ChangelogStorage(blocking, "job/changelog",  # type: ignore[arg-type]
                           _options(max_in_flight_bytes=3 * PIECE, preemptive_persist_bytes=50))
    try:
        writer = log.create_writer("op")
        writer.backpressure_timeout = 0.2
        for _ in range(3):
            writer.append(0, b"x" * 60)  # each change seals a piece of PIECE bytes
        assert log.in_flight_bytes <= 3 * PIECE
        with pytest.raises(StateError, match="max-in-flight"):
            writer.append(0, b"x" * 60)
        assert log.in_flight_bytes <= 3 * PIECE
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


def test_attempts_still_running_after_the_last_timeout_may_still_succeed(
        storage: CheckpointStorageAccess, caplog: pytest.LogCaptureFixture) -> None:
    from weir.testing.cluster import poll

    blocking = _BlockingStorage(storage)
    log = ChangelogStorage(blocking, "job/changelog",  # type: ignore[arg-type]
                           _options(upload_timeout_s=0.05, max_attempts=2,
                                    last_attempt_grace_s=60.0))
    try:
        writer = log.create_writer("op")
        writer.append(0, b"slow")
        persisted = writer.persist(0)
        # Both attempts timed out (neither failed): the upload still waits for them.
        poll(lambda: "attempt 2 of 2 failed" in caplog.text, 10,
             what="the last attempt to time out")
        blocking.release.set()
        handles = persisted.result(timeout=10)
        assert [c.payload for c in read_changes(storage, handles)] == [b"slow"]
        assert log.metrics.upload_failures == 0
    finally:
        blocking.release.set()
        log.close()


# -- bounded waits ---------------------------------------------------------------------------


class _JumpingClock:
    """A clock that moves ``step`` seconds each time it is read: a wait measured by it
    runs out after a few looks, without sleeping for its length."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_storage_that_makes_no_room_fails_the_writer_naming_the_cause(
        storage: CheckpointStorageAccess) -> None:
    failing = _BlockingStorage(storage)
    failing.failing.set()
    options = _options(max_in_flight_bytes=3 * PIECE, preemptive_persist_bytes=50,
                       upload_timeout_s=1.0, max_attempts=2)
    # The bound comes from the upload options: two uploads of two 1 s attempts each.
    assert options.stall_timeout_s == pytest.approx(4.0)
    log = ChangelogStorage(failing, "job/changelog", options,  # type: ignore[arg-type]
                           clock=_JumpingClock(1.0))
    try:
        writer = log.create_writer("op")
        for _ in range(3):
            writer.append(0, b"x" * 60)  # each change seals a piece of PIECE bytes
        with pytest.raises(StorageError, match="storage down"):
            writer.persist(0).result(timeout=10)
        # Failed pieces stay with the writer and keep their room: nothing frees it.
        with pytest.raises(StateError) as raised:
            writer.append(0, b"x" * 60)
        message = str(raised.value)
        assert "\n" not in message
        assert "cannot keep up or is unreachable" in message
        assert "no upload completed in 4 s" in message
        assert "max-in-flight" in message and "the last upload failed: storage down" in message
    finally:
        log.close()


def test_room_made_by_an_upload_restarts_the_wait(storage: CheckpointStorageAccess) -> None:
    blocking = _BlockingStorage(storage)
    clock = _JumpingClock(0.0)
    log = ChangelogStorage(blocking, "job/changelog",  # type: ignore[arg-type]
                           _options(max_in_flight_bytes=2 * PIECE, preemptive_persist_bytes=50,
                                    upload_timeout_s=30.0), clock=clock)
    try:
        writer = log.create_writer("op")
        writer.append(0, b"x" * 60)
        writer.append(0, b"x" * 60)
        errors: list[BaseException] = []

        def third() -> None:
            try:
                writer.append(0, b"y" * 60)
            except BaseException as err:  # reported to the test thread
                errors.append(err)

        waiter = threading.Thread(target=third)
        waiter.start()
        # The uploads complete long after the wait began (by the clock), but they complete:
        # the writer goes on.
        clock.now += 50.0
        blocking.release.set()
        waiter.join(timeout=30)
        assert not waiter.is_alive() and errors == []
        handles = writer.persist(0).result(timeout=10)
        assert [c.payload[:1] for c in read_changes(storage, handles)] == [b"x", b"x", b"y"]
    finally:
        blocking.release.set()
        log.close()


def test_a_writer_waiting_for_room_ends_when_its_task_is_cancelled(
        storage: CheckpointStorageAccess) -> None:
    blocking = _BlockingStorage(storage)
    log = ChangelogStorage(blocking, "job/changelog",  # type: ignore[arg-type]
                           _options(max_in_flight_bytes=2 * PIECE, preemptive_persist_bytes=50,
                                    upload_timeout_s=60.0))
    try:
        writer = log.create_writer("op")
        writer.cancelled = threading.Event()
        writer.append(0, b"x" * 60)
        writer.append(0, b"x" * 60)
        errors: list[BaseException] = []
        entered = threading.Event()

        def third() -> None:
            entered.set()
            try:
                writer.append(0, b"y" * 60)
            except BaseException as err:  # reported to the test thread
                errors.append(err)

        waiter = threading.Thread(target=third)
        waiter.start()
        assert entered.wait(10)
        writer.cancelled.set()
        # The stall bound here is minutes: only the cancellation ends the wait this soon.
        waiter.join(timeout=10)
        assert not waiter.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], StateError)
        assert "cancelled" in str(errors[0])
    finally:
        blocking.release.set()
        log.close()


def test_the_upload_thread_waits_with_a_timeout() -> None:
    import ast
    import inspect

    from weir.checkpoint import changelog_storage

    tree = ast.parse(inspect.getsource(changelog_storage))
    bare = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "wait"
            and not node.args and not node.keywords]
    assert bare == [], f"waits without a timeout at lines {bare}"


# -- attempts that finish late ----------------------------------------------------------------


class _SlowFirstStorage:
    """File storage whose first write waits for ``release`` (an attempt that times out and
    finishes later); every other write goes through at once."""

    def __init__(self, inner: CheckpointStorageAccess, slow: int = 1) -> None:
        self.inner = inner
        self.base_uri = inner.base_uri
        self.release = threading.Event()
        self.finished = threading.Event()
        self._slow = slow
        self._lock = threading.Lock()
        self.written: list[str] = []

    def write(self, path: str, data: bytes) -> StreamStateHandle:
        with self._lock:
            slow = self._slow > 0
            self._slow -= 1
        if slow:
            self.release.wait()
        handle = self.inner.write(path, data)
        self.written.append(handle.uri)
        if slow:
            self.finished.set()
        return handle

    def read(self, handle: StreamStateHandle) -> bytes:
        return self.inner.read(handle)

    def delete(self, target: StreamStateHandle | str) -> None:
        self.inner.delete(target)


def _log_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "checkpoints" / "job" / "changelog").glob("*.log"))


def test_a_late_attempt_s_file_is_deleted_and_the_retry_s_kept(
        storage: CheckpointStorageAccess, tmp_path: Path) -> None:
    from weir.testing.cluster import poll

    slow = _SlowFirstStorage(storage)
    log = ChangelogStorage(slow, "job/changelog",  # type: ignore[arg-type]
                           _options(upload_timeout_s=0.2, max_attempts=3))
    try:
        writer = log.create_writer("op")
        writer.append(2, b"change")
        handles = writer.persist(0).result(timeout=30)
        assert log.metrics.total_attempts == 2
        kept = handles[0].file.uri.rsplit("/", 1)[-1]
        assert _log_files(tmp_path) == [kept]
        slow.release.set()  # the first attempt finishes after its retry succeeded
        assert slow.finished.wait(10)
        late = slow.written[-1].rsplit("/", 1)[-1]
        assert late != kept
        poll(lambda: log.metrics.late_files_deleted == 1, 10, what="the late file's deletion")
        assert _log_files(tmp_path) == [kept]
        assert [c.payload for c in read_changes(storage, handles)] == [b"change"]
    finally:
        slow.release.set()
        log.close()


class _GatedStorage(_SlowFirstStorage):
    """File storage whose first two writes each wait for their own gate."""

    def __init__(self, inner: CheckpointStorageAccess) -> None:
        super().__init__(inner, slow=0)
        self.gates = [threading.Event(), threading.Event()]
        self.started = 0

    def write(self, path: str, data: bytes) -> StreamStateHandle:
        with self._lock:
            index = self.started
            self.started += 1
        if index < len(self.gates):
            self.gates[index].wait()
        handle = self.inner.write(path, data)
        self.written.append(handle.uri)
        return handle


def test_an_attempt_that_timed_out_still_wins_if_it_finishes_first(
        storage: CheckpointStorageAccess, tmp_path: Path) -> None:
    from weir.testing.cluster import poll

    gated = _GatedStorage(storage)
    log = ChangelogStorage(gated, "job/changelog",  # type: ignore[arg-type]
                           _options(upload_timeout_s=1.0, max_attempts=2))
    try:
        writer = log.create_writer("op")
        writer.append(2, b"change")
        persisted = writer.persist(0)
        # The first attempt timed out and its retry runs: the first one finishes now.
        poll(lambda: gated.started == 2, 10, what="the retry to start")
        gated.gates[0].set()
        handles = persisted.result(timeout=30)
        assert handles[0].file.uri == gated.written[0]
        gated.gates[1].set()  # the retry finishes after: its file goes
        poll(lambda: log.metrics.late_files_deleted == 1, 10, what="the retry's file deleted")
        assert _log_files(tmp_path) == [handles[0].file.uri.rsplit("/", 1)[-1]]
        assert [c.payload for c in read_changes(storage, handles)] == [b"change"]
    finally:
        for gate in gated.gates:
            gate.set()
        log.close()


def test_late_attempts_of_an_abandoned_upload_are_deleted(
        storage: CheckpointStorageAccess, tmp_path: Path) -> None:
    from weir.testing.cluster import poll

    slow = _SlowFirstStorage(storage, slow=2)
    log = ChangelogStorage(slow, "job/changelog",  # type: ignore[arg-type]
                           _options(upload_timeout_s=0.05, max_attempts=2))
    try:
        writer = log.create_writer("op")
        writer.append(2, b"change")
        with pytest.raises(StorageError, match="timed out"):
            writer.persist(0).result(timeout=30)
        slow.release.set()
        poll(lambda: log.metrics.late_files_deleted == 2, 10, what="both late files deleted")
        handles = writer.persist(0).result(timeout=30)  # the next persist uploads it again
        assert _log_files(tmp_path) == [handles[0].file.uri.rsplit("/", 1)[-1]]
    finally:
        slow.release.set()
        log.close()


# -- metrics --------------------------------------------------------------------------------


def test_upload_metrics_are_histograms(storage: CheckpointStorageAccess) -> None:
    log = ChangelogStorage(storage, "job/changelog", _options())
    try:
        writer = log.create_writer("op")
        writer.append(0, b"x" * 2000)
        writer.persist(0).result(timeout=10)
        sizes = log.metrics.sizes
        assert sizes.count == 1 and 2000 < sizes.sum < 4096
        # Cumulative buckets: the upload is above 1 KiB and at most 4 KiB.
        buckets = dict(sizes.buckets())
        assert (buckets["1024"], buckets["4096"], buckets["+Inf"]) == (0, 1, 1)
        assert dict(log.metrics.attempts.buckets())["1"] == 1
        assert log.metrics.latencies_ns.count == 1
    finally:
        log.close()


def test_the_taskexecutor_exports_them_as_prometheus_histograms(
        storage: CheckpointStorageAccess) -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from weir.checkpoint.changelog_storage import close_job, storage_for
    from weir.core.metric_names import label_value
    from weir.taskexecutor.daemon import _changelog_metrics

    log = storage_for(storage, "histjob/changelog", _options())
    try:
        writer = log.create_writer("op")
        writer.append(0, b"x" * 100)
        writer.persist(0).result(timeout=10)

        class Collector:
            def collect(self) -> list[Any]:
                return _changelog_metrics()

        location = label_value(f"{storage.base_uri}/histjob/changelog")
        registry = CollectorRegistry()
        registry.register(Collector())  # type: ignore[arg-type]
        text = generate_latest(registry).decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        for name in ("uploadSizes", "uploadLatenciesNanos", "attemptsPerUpload"):
            family = families[f"weir_changelog_{name}"]
            assert family.type == "histogram"
            counts = [s for s in family.samples if s.name.endswith("_count")
                      and s.labels["location"] == location]
            assert [s.value for s in counts] == [1.0]
        assert families["weir_changelog_numberOfUploadRequests"].type == "gauge"
    finally:
        close_job("histjob")


def test_a_materialization_s_upload_waits_for_the_log_s(storage: CheckpointStorageAccess,
                                                       tmp_path: Path) -> None:
    """YieldingStorage: a materialization's file upload starts only once no log upload is
    queued or running (or after its bound), and uploads one file at a time."""
    from weir.checkpoint.changelog_storage import YieldingStorage
    from weir.testing.cluster import poll

    blocking = _BlockingStorage(storage)
    log = ChangelogStorage(blocking, "job/changelog", _options())  # type: ignore[arg-type]
    yielding = YieldingStorage(storage, log, max_wait_s=30)
    sst = tmp_path / "000001.sst"
    sst.write_bytes(b"s" * 1000)
    order: list[StreamStateHandle] = []
    try:
        writer = log.create_writer("op")
        writer.append(0, b"change")
        persisted = writer.persist(0)
        poll(lambda: blocking.writes == 1, 10, what="the log upload to start")
        uploader = threading.Thread(
            target=lambda: order.append(yielding.write_file("m/000001.sst", sst)))
        uploader.start()
        assert not log.wait_quiet(0.05)
        assert order == []                                     # it waits for the log
        blocking.release.set()
        persisted.result(timeout=10)
        uploader.join(timeout=10)
        assert order and order[0].uri.endswith("m/000001.sst")
        assert storage.read(order[0]) == b"s" * 1000
        # A log that never goes quiet delays each file by at most max_wait_s.
        blocking.release.clear()
        writer.append(0, b"again")
        writer.persist(1)
        poll(lambda: blocking.writes == 2, 10, what="the second log upload to start")
        yielding.max_wait_s = 0.05
        assert yielding.write_file("m/000002.sst", sst).length == 1000
    finally:
        blocking.release.set()
        log.close()



def test_a_writer_groups_the_changes_of_a_piece_by_the_state_they_name(
        storage: CheckpointStorageAccess) -> None:
    from weir.checkpoint.changelog_storage import read_pieces, state_of
    from weir.state.changelog_replay import PUT, encode_change

    log = ChangelogStorage(storage, "job/changelog", _options())
    try:
        writer = log.create_writer("op")
        for n in range(12):
            state = ("count", "seen", "_timers/w/event")[n % 3]
            change = encode_change(PUT, state, str(n).encode(), b"", b"v")
            # The backend names the state (no parsing on the task thread); others need not.
            writer.append(n % 2, change, state if n % 4 else None)
        handles = writer.persist(0).result(timeout=10)
        pieces = list(read_pieces(storage, handles))
        assert len(pieces) == 1 and pieces[0].groups is not None
        data, runs = pieces[0].file, pieces[0].groups
        assert [(state, kg, n) for state, kg, _, n in runs] == \
            [(s, kg, 2) for s in ("_timers/w/event", "count", "seen") for kg in (0, 1)]
        for state, kg, start, n in runs:
            for _ in range(n):
                _seq, key_group, length = RECORD.unpack_from(data, start)
                payload = data[start + RECORD.size:start + RECORD.size + length]
                assert (state_of(payload).decode(), key_group) == (state, kg)
                start += RECORD.size + length
    finally:
        log.close()
