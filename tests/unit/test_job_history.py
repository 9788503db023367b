"""A job's history of checkpoints and recoveries: bounded by web.checkpoints.history, the
lifecycle of a recovery on a manual clock, how high availability stores it (round trip,
coalesced writes, a damaged file ignored with a warning) and its REST shapes. No network,
no sleeps: a manual clock, file:// storage and a hand-driven I/O pool."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkpoint_coordinator import complete, coordinator, trigger
from weir.checkpoint.coordinator import CheckpointCoordinator
from weir.checkpoint.storage import create_storage
from weir.core.clock import ManualClock
from weir.core.config import Configuration
from weir.core.errors import ConfigError, CorruptStateError
from weir.jobmaster import options as jm_options
from weir.jobmaster.checkpointing import checkpoint_config
from weir.jobmaster.high_availability import (
    HISTORY_NAME,
    HistoryWriter,
    StorageJobStore,
    decode_history,
    read_history,
)
from weir.jobmaster.recovery_history import RecoveryHistory
from weir.jobmaster.rest import mapping
from weir.proto import checkpoint_pb2, common_pb2, dispatcher_pb2, jobmaster_pb2
from weir.testing.job_store import JOB

COMPLETED = checkpoint_pb2.CheckpointStats.COMPLETED
FAILED = checkpoint_pb2.CheckpointStats.FAILED


def lost(message: str = "TaskExecutor te-1 was lost", **fields: Any) -> common_pb2.ErrorInfo:
    return common_pb2.ErrorInfo(reason=common_pb2.TASK_EXECUTOR_LOST, message=message,
                                task="map (1/2)", **fields)


# -- the recovery history -------------------------------------------------------------------


def test_a_recovery_lasts_from_the_failure_until_every_restarted_task_runs() -> None:
    clock = ManualClock(10_000)
    history = RecoveryHistory(clock, size=10)
    history.failed(lost(timestamp_ms=9_990), tasks=2)   # stamped when the JobMaster heard
    assert history.in_progress
    entry = history.entries()[0]
    assert (entry.cause.timestamp_ms, entry.tasks, entry.HasField("duration_ms")) == \
        (9_990, 2, False)
    shown = mapping.recovery(entry)
    assert shown["duration"] is None and shown["checkpoint-id"] is None

    clock.advance(400)
    history.restoring(5)
    clock.advance(600)
    history.recovered(jobmaster_pb2.RestoreStats(checkpoint_id=5, local_bytes=300,
                                                 remote_bytes=20))
    assert not history.in_progress
    assert mapping.recovery(history.entries()[0]) == {
        "timestamp": 9_990, "cause": "TaskExecutor te-1 was lost",
        "exceptionName": "TASK_EXECUTOR_LOST", "taskName": "map (1/2)", "tasks": 2,
        "checkpoint-id": 5, "duration": 1_010, "local-bytes": 300, "remote-bytes": 20}


def test_an_unstamped_failure_is_stamped_now_and_a_restart_without_checkpoint_has_none(
        ) -> None:
    clock = ManualClock(5_000)
    history = RecoveryHistory(clock, size=10)
    history.failed(common_pb2.ErrorInfo(message="boom", traceback="long trace"), tasks=3)
    history.restoring(None)
    clock.advance(250)
    history.recovered(None)
    entry = history.entries()[0]
    assert (entry.cause.timestamp_ms, entry.duration_ms, entry.checkpoint_id) == \
        (5_000, 250, 0)
    assert entry.cause.traceback == ""      # kept in the exceptions history only
    shown = mapping.recovery(entry)
    assert shown["exceptionName"] is None and shown["checkpoint-id"] is None


def test_a_failure_during_a_recovery_begins_its_own_and_both_end_together() -> None:
    clock = ManualClock(0)
    history = RecoveryHistory(clock, size=10)
    history.failed(common_pb2.ErrorInfo(reason=common_pb2.REMOTE_TRANSPORT,
                                        message="connection closed"), tasks=1)
    clock.advance(100)
    # The symptom's real cause arrives: reported, still from when the recovery began.
    history.cause_refined(lost(timestamp_ms=100))
    assert history.entries()[0].cause.reason == common_pb2.TASK_EXECUTOR_LOST
    assert history.entries()[0].cause.timestamp_ms == 0
    clock.advance(100)
    history.failed(lost("another one"), tasks=4)
    clock.advance(800)
    history.restoring(2)
    history.recovered(None)
    assert [(e.cause.timestamp_ms, e.duration_ms, e.checkpoint_id)
            for e in history.entries()] == [(0, 1_000, 2), (200, 800, 2)]
    # Nothing is under way: a refinement now changes nothing.
    history.cause_refined(common_pb2.ErrorInfo(message="late"))
    assert history.entries()[-1].cause.message == "another one"


def test_recoveries_are_bounded_newest_kept_and_earlier_ones_come_first() -> None:
    clock = ManualClock(0)
    changes: list[int] = []
    history = RecoveryHistory(clock, size=3)
    history.on_change = lambda: changes.append(len(history.entries()))
    for n in range(5):
        clock.advance(10)
        history.failed(common_pb2.ErrorInfo(message=f"failure {n}"), tasks=1)
        history.recovered(None)
    assert [e.cause.message for e in history.entries()] == \
        ["failure 2", "failure 3", "failure 4"]
    assert changes                                         # each change is announced

    taken_over = RecoveryHistory(clock, size=3)
    taken_over.failed(common_pb2.ErrorInfo(reason=common_pb2.JOBMASTER_FAILOVER), tasks=2)
    taken_over.restore(history.entries())
    assert [e.cause.message for e in taken_over.entries()][:2] == ["failure 3", "failure 4"]
    assert taken_over.entries()[-1].cause.reason == common_pb2.JOBMASTER_FAILOVER


# -- the checkpoint history -------------------------------------------------------------------


def test_the_checkpoint_history_is_bounded_by_web_checkpoints_history() -> None:
    config = checkpoint_config(Configuration.from_pairs({
        "execution.checkpointing.interval": "1 s", "web.checkpoints.history": "3"}))
    assert config.history_size == 3
    assert checkpoint_config(Configuration.from_pairs({
        "execution.checkpointing.interval": "1 s"})).history_size == \
        jm_options.CHECKPOINTS_HISTORY.default == 100
    clock = ManualClock(0)
    c = coordinator(clock, history_size=3)
    for n in range(1, 6):
        trigger(c, clock)
        complete(c, n)
    assert [s.checkpoint_id for s in c.stats()] == [3, 4, 5]
    assert c.counts["completed"] == 5
    with pytest.raises(ConfigError, match=r"web\.checkpoints\.history"):
        Configuration.from_pairs({"web.checkpoints.history": "0"}).get(
            jm_options.CHECKPOINTS_HISTORY)


def test_a_restored_checkpoint_history_comes_first_and_ids_continue_after_it() -> None:
    clock = ManualClock(0)
    c: CheckpointCoordinator = coordinator(clock, history_size=4)
    earlier = [checkpoint_pb2.CheckpointStats(checkpoint_id=n, status=status)
               for n, status in ((6, COMPLETED), (7, FAILED), (8, COMPLETED), (9, FAILED))]
    earlier.append(checkpoint_pb2.CheckpointStats(
        checkpoint_id=10, status=checkpoint_pb2.CheckpointStats.IN_PROGRESS))
    c.restore_history(earlier, completed=8, failed=3)
    # In progress when the earlier JobMaster was lost: never finished, not shown.
    assert [s.checkpoint_id for s in c.stats()] == [6, 7, 8, 9]
    assert c.counts == {"completed": 8, "failed": 3}
    # A failed checkpoint's id is not used again (its row would be overwritten).
    assert trigger(c, clock).checkpoint_id == 10
    complete(c, 10)
    assert [s.checkpoint_id for s in c.stats()] == [7, 8, 9, 10]
    assert c.counts["completed"] == 9


# -- high availability --------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> StorageJobStore:
    return StorageJobStore(create_storage((tmp_path / "ha").as_uri()))


def sample_history() -> jobmaster_pb2.JobHistory:
    history = jobmaster_pb2.JobHistory(completed_checkpoints=12, failed_checkpoints=1)
    stats = history.checkpoints.add(checkpoint_id=12, status=COMPLETED, state_size=99,
                                    external_path="file:///c/chk-12")
    stats.subtasks.add(vertex_id=1, task_name="map (1/1)", subtask_index=0,
                       metrics=checkpoint_pb2.CheckpointTaskMetrics(state_size=99,
                                                                    sync_duration_ms=3))
    recovery = history.recoveries.add(tasks=2, checkpoint_id=11, duration_ms=1500,
                                      local_bytes=7, remote_bytes=8)
    recovery.cause.CopyFrom(lost(timestamp_ms=1234))
    return history


def test_the_history_round_trips_through_the_job_store(store: StorageJobStore) -> None:
    store.put_job(b"graph", JOB)
    assert read_history(store, JOB) == jobmaster_pb2.JobHistory()     # none written yet
    history = sample_history()
    store.put_history(JOB, history.SerializeToString(deterministic=True))
    assert read_history(store, JOB) == history
    files = sorted(p.name for p in (Path(store.storage.base_uri.removeprefix("file://"))
                                    / "jobs" / JOB).iterdir())
    assert files == [HISTORY_NAME, "jobgraph"]


def test_a_damaged_history_is_ignored_with_one_warning_naming_the_file(
        store: StorageJobStore, caplog: pytest.LogCaptureFixture) -> None:
    store.put_job(b"graph", JOB)
    store.put_history(JOB, sample_history().SerializeToString())
    path = Path(store.location(JOB, HISTORY_NAME).removeprefix("file://"))
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with caplog.at_level(logging.WARNING):
        assert read_history(store, JOB) == jobmaster_pb2.JobHistory()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and "checksum" in warnings[0]
    assert "\n" not in warnings[0]

    # A file with a valid envelope but no JobHistory inside is refused as well.
    with pytest.raises(CorruptStateError, match="not a job history"):
        decode_history(b"\xff\xff\xff", "somewhere/history")


class ManualPool(Executor):
    """An I/O pool that runs submitted work only when told to (the writes in flight)."""

    def __init__(self) -> None:
        self.queued: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.queued.append((future, lambda: fn(*args, **kwargs)))
        return future

    def run_next(self) -> None:
        future, work = self.queued.pop(0)
        try:
            future.set_result(work())
        except Exception as err:
            future.set_exception(err)


def test_history_writes_are_coalesced_with_one_in_flight(store: StorageJobStore) -> None:
    store.put_job(b"graph", JOB)
    pool = ManualPool()
    state = {"n": 0}
    snapshots: list[int] = []

    def snapshot() -> bytes:
        snapshots.append(state["n"])
        return jobmaster_pb2.JobHistory(completed_checkpoints=state["n"]).SerializeToString()

    writer = HistoryWriter(store, JOB, snapshot, pool, main=lambda fn: fn())
    state["n"] = 1
    writer.changed()
    for n in (2, 3, 4):                   # while the first write is in flight
        state["n"] = n
        writer.changed()
    assert len(pool.queued) == 1 and snapshots == [1] and not writer.idle
    pool.run_next()                       # done: the next write carries every change since
    assert len(pool.queued) == 1 and snapshots == [1, 4]
    pool.run_next()
    assert pool.queued == [] and writer.idle and writer.writes == 2
    assert read_history(store, JOB).completed_checkpoints == 4


def test_a_failed_history_write_is_logged_once_and_the_next_change_writes_again(
        store: StorageJobStore, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store.put_job(b"graph", JOB)
    pool = ManualPool()
    broken = StorageJobStore(create_storage((tmp_path / "file-not-dir").as_uri()))
    (tmp_path / "file-not-dir").write_text("a file where a directory should be")
    writer = HistoryWriter(broken, JOB, lambda: b"x", pool, main=lambda fn: fn())
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            writer.changed()
            pool.run_next()
    failures = [r for r in caplog.records if "storing the history" in r.getMessage()]
    assert len(failures) == 1 and JOB in failures[0].getMessage()
    assert writer.idle


# -- REST shapes ------------------------------------------------------------------------------


def test_exceptions_carry_the_times_the_failures_were_learned() -> None:
    details = jobmaster_pb2.JobDetails()
    details.restart_causes.add().CopyFrom(lost(timestamp_ms=1_000))
    details.restart_causes.add().CopyFrom(common_pb2.ErrorInfo(message="old, unstamped"))
    shown = mapping.exceptions(details)
    assert shown["timestamp"] is None                 # the newest cause had no time
    assert [e["timestamp"] for e in shown["exceptionHistory"]["entries"]] == [None, 1_000]
    details.failure.CopyFrom(lost("fatal", timestamp_ms=2_000))
    shown = mapping.exceptions(details)
    assert shown["timestamp"] == 2_000
    assert [e["timestamp"] for e in shown["exceptionHistory"]["entries"]] == \
        [2_000, None, 1_000]


def test_job_details_list_recoveries_newest_first_and_counts_span_the_job() -> None:
    details = jobmaster_pb2.JobDetails()
    details.recoveries.extend(sample_history().recoveries)
    failover = details.recoveries.add(tasks=2)
    failover.cause.CopyFrom(common_pb2.ErrorInfo(reason=common_pb2.JOBMASTER_FAILOVER,
                                                 message="taken over", timestamp_ms=5_000))
    shown = mapping.job_details(details, _graph(), 6_000)["recoveries"]
    assert [(r["timestamp"], r["exceptionName"], r["duration"]) for r in shown] == \
        [(5_000, "JOBMASTER_FAILOVER", None), (1_234, "TASK_EXECUTOR_LOST", 1_500)]

    history = dispatcher_pb2.CheckpointHistory(checkpoints=sample_history().checkpoints,
                                               completed_count=12, failed_count=1)
    counts = mapping.checkpoints(history, JOB, None)["counts"]
    assert counts == {"restored": 0, "total": 13, "in_progress": 0, "completed": 12,
                      "failed": 1}


def _graph() -> Any:
    from weir.proto import jobgraph_pb2

    return jobgraph_pb2.JobGraph(job_id=JOB, name="job")
