"""Checkpoints of jobs nobody tuned, under full backpressure: a slow per-record function
after a keyed exchange, a flat_map fanning out fifty records an input, and records of
1 MiB (tests/support/backpressure_shapes.py).

Unaligned checkpoints complete quickly although the keyed stage is far slower than the
source — a barrier waits for a few records, not for a buffer — and persist no more
in-flight data than the configured network buffers hold. Exactly once holds with
TaskExecutors SIGKILLed mid-job, unaligned and aligned with a timeout: the records a task
took before a barrier but had not processed are neither lost nor processed twice.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.support.backpressure_shapes import JOB, SHAPES, expected_counts, job_args
from tests.support.cluster import LocalCluster, poll, wait_all_running, write_job
from tests.support.exactly_once import (
    checkpoints,
    committed_output,
    diff,
    run_job_with_kills,
)

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

UNALIGNED = {"execution.checkpointing.unaligned.enabled": "true"}
ALIGNED_TIMEOUT = {**UNALIGNED, "execution.checkpointing.aligned-checkpoint-timeout": "100 ms"}


def completed(cluster: LocalCluster, job_id: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` checkpoints to complete after the job's first one (the queues
    may not be full yet then)."""
    rows = poll(lambda: (r := [c for c in checkpoints(cluster, job_id, tasks=True)
                               if c["status"] == "COMPLETED"]) and len(r) > count and r,
                120, interval=0.5, what=f"{count + 1} completed checkpoints")
    return rows[1:count + 1]  # type: ignore[no-any-return]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_unaligned_checkpoints_of_a_backpressured_job_take_a_second_at_most(
        cluster_factory: Any, tmp_path: Path, shape: str) -> None:
    cluster = cluster_factory(2, 2)
    job = write_job(tmp_path, JOB, f"{shape}.py")
    gate = tmp_path / "gate"  # never opened: the job stays backpressured until cancelled
    config = {"execution.checkpointing.interval": "1 s", **UNALIGNED}
    result = cluster.weir("run", "--detached", *(f"-D{k}={v}" for k, v in config.items()),
                          str(job), *job_args(str(tmp_path / "out"), shape, str(gate),
                                              records=10**6))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().splitlines()[-1]
    try:
        wait_all_running(cluster, job_id)
        rows = completed(cluster, job_id, 6)
    finally:
        cluster.weir("cancel", job_id)
    durations = sorted(r["duration_ms"] for r in rows)
    assert all(r["unaligned"] for r in rows), rows
    # p99 of six is their maximum.
    assert durations[-1] <= 1000, durations
    assert statistics.median(r["persisted_bytes"] for r in rows) > 0, rows
    # No subtask persisted more than the network buffers of its configuration hold
    # (`weir checkpoints --tasks`); a checkpoint's bound is its subtasks'.
    subtasks = [(r["id"], s["task"], s["subtask"], s["persisted_bytes"],
                 s["in_flight_bound_bytes"]) for r in rows for s in r["subtasks"]]
    assert all(len(r["subtasks"]) >= 4 for r in rows), rows  # source, keyed (, sink)
    over = [s for s in subtasks if s[4] <= 0 or s[3] > s[4]]
    assert not over, over
    assert all(r["in_flight_bound_bytes"] == sum(s["in_flight_bound_bytes"]
                                                 for s in r["subtasks"]) for r in rows)
    # Backpressure filled the buffers: some subtask persisted a good part of its bound.
    assert max(p / b for *_, p, b in subtasks) > 0.1, subtasks
    print(shape, "durations", durations, "persisted/bound per checkpoint:",
          [(r["persisted_bytes"], r["in_flight_bound_bytes"]) for r in rows])


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("mode", ["unaligned", "aligned-timeout"])
def test_exactly_once_under_backpressure_with_killed_taskexecutors(
        cluster_factory: Any, tmp_path: Path, shape: str, mode: str) -> None:
    # Four TaskExecutors of two slots: after a kill, the survivors have enough.
    cluster = cluster_factory(4, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    config = UNALIGNED if mode == "unaligned" else ALIGNED_TIMEOUT
    run_job_with_kills(cluster, tmp_path, JOB, job_args(str(out), shape, str(gate)),
                       kills=2, config=config, gate=gate)
    expected, got = expected_counts(shape), committed_output(out)
    assert got == expected, diff(expected, got)
