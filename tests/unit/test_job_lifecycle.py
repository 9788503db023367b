"""When a job ends, and its time metrics (uptime, downtime, restartingTime, the last
restore), on a manual clock."""

from __future__ import annotations

import pytest

from weir.core.clock import ManualClock
from weir.jobmaster.job_lifecycle import JobTimes, final_status
from weir.proto import common_pb2, jobmaster_pb2

F, C, X, R = common_pb2.FINISHED, common_pb2.CANCELED, common_pb2.FAILED, common_pb2.RUNNING


@pytest.mark.parametrize(("status", "tasks", "ends"), [
    (common_pb2.JOB_RUNNING, [F, F], common_pb2.JOB_FINISHED),
    (common_pb2.JOB_RUNNING, [F, R], None),
    (common_pb2.JOB_RUNNING, [], None),
    (common_pb2.JOB_FAILING, [F, C, X], common_pb2.JOB_FAILED),
    (common_pb2.JOB_FAILING, [C, common_pb2.CANCELING], None),
    (common_pb2.JOB_CANCELLING, [C, C], common_pb2.JOB_CANCELED),
    (common_pb2.JOB_RESTARTING, [C, C], None),
])
def test_final_status(status: int, tasks: list[int], ends: int | None) -> None:
    assert final_status(status, tasks) == ends


def test_uptime_downtime_and_restarting_time_follow_the_job() -> None:
    clock = ManualClock(1_000)
    times = JobTimes(clock)
    assert times.times_ms(running=False, terminal=False) == {
        "uptime": 0, "downtime": 0, "restartingTime": 0}
    times.running(restored=False)
    clock.advance(4_000)
    assert times.times_ms(running=True, terminal=False)["uptime"] == 4_000
    times.went_down()
    clock.advance(1_500)
    assert times.times_ms(running=False, terminal=False) == {
        "uptime": 0, "downtime": 1_500, "restartingTime": 1_500}
    times.running(restored=True)
    clock.advance(10)
    assert times.times_ms(running=True, terminal=False) == {
        "uptime": 10, "downtime": 0, "restartingTime": 1_500}
    times.went_down()
    assert times.times_ms(running=False, terminal=True)["downtime"] == 0, "it ended"


def test_a_region_restart_counts_from_the_first_failure_it_recovers_from() -> None:
    clock = ManualClock(0)
    times = JobTimes(clock)
    times.running(restored=False)
    times.went_down(keep_earlier=True)
    clock.advance(200)
    times.went_down(keep_earlier=True)
    clock.advance(300)
    times.restoring_now()
    times.region_running(frozenset({(1, 0)}), restored=True)
    assert times.last_restart_duration_ms == 500
    assert times.restore_timestamp_ms == 500
    clock.advance(100)
    stats = times.restored(4, [((1, 0), jobmaster_pb2.RestoreStats(local_bytes=7)),
                               ((1, 1), jobmaster_pb2.RestoreStats(remote_bytes=99))])
    assert stats is not None
    assert (stats.checkpoint_id, stats.duration_ms, stats.local_bytes,
            stats.remote_bytes) == (4, 600, 7, 0), "only the region's tasks restored"
    assert times.restored(4, []) is None, "reported once"


def test_a_restart_without_a_checkpoint_restores_nothing() -> None:
    times = JobTimes(ManualClock(0))
    times.went_down()
    times.running(restored=False)
    assert not times.restoring
    assert times.restored(1, []) is None


def test_a_change_counts_its_restore_from_when_it_cancelled_the_tasks() -> None:
    clock = ManualClock(10_000)
    times = JobTimes(clock)
    times.running(restored=True)
    times.restore_counts_from(9_000)
    stats = times.restored(2, [])
    assert stats is not None and stats.duration_ms == 1_000
