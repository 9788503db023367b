"""Each subtask's in-flight bound travels with its acknowledgement into the coordinator's
checkpoint history, and ``weir checkpoints --tasks`` shows it as "persisted / bound"."""

from __future__ import annotations

import pytest

from tests.support.checkpoint_coordinator import TASKS, coordinator, trigger
from weir.cli.show import checkpoints_json, print_checkpoints
from weir.core.clock import ManualClock
from weir.proto import dispatcher_pb2
from weir.proto.checkpoint_pb2 import CheckpointTaskMetrics, TaskStateSnapshot


def history() -> dispatcher_pb2.CheckpointHistory:
    clock = ManualClock(0)
    c = coordinator(clock, unaligned=True)
    trigger(c, clock)
    for task, (persisted, bound) in zip(TASKS, [(0, 300_000), (2048, 300_000),
                                                 (700_000, 860_000)], strict=True):
        c.on_acknowledge(task.attempt_id, 1, TaskStateSnapshot(), CheckpointTaskMetrics(
            persisted_bytes=persisted, in_flight_bound_bytes=bound, unaligned=True,
            ack_timestamp_ms=clock() + 10))
    return dispatcher_pb2.CheckpointHistory(checkpoints=c.stats())


def test_the_history_keeps_each_subtasks_bound_and_their_sum() -> None:
    row = history().checkpoints[-1]
    assert row.in_flight_bound_bytes == 1_460_000
    assert [(s.task_name, s.metrics.persisted_bytes, s.metrics.in_flight_bound_bytes)
            for s in row.subtasks] == [("source (1/2)", 0, 300_000),
                                       ("source (2/2)", 2048, 300_000),
                                       ("sink (1/1)", 700_000, 860_000)]


def test_json_and_table_show_persisted_against_the_bound(
        capsys: pytest.CaptureFixture[str]) -> None:
    rows = checkpoints_json(history(), tasks=True)
    assert rows[-1]["in_flight_bound_bytes"] == 1_460_000
    assert [(s["persisted_bytes"], s["in_flight_bound_bytes"])
            for s in rows[-1]["subtasks"]] == [(0, 300_000), (2048, 300_000),
                                               (700_000, 860_000)]
    print_checkpoints(history(), tasks=True)
    out = capsys.readouterr().out
    assert "persisted 0 B / bound 293.0 KiB" in out
    assert "persisted 2.0 KiB / bound 293.0 KiB" in out
    assert "persisted 683.6 KiB / bound 839.8 KiB" in out
