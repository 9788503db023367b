"""The in-flight data of unaligned checkpoints is bounded by the network buffers: under
full backpressure, with wide records, every subtask of every completed checkpoint
persists at most the bound it reports (``weir checkpoints --tasks``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, poll, wait_all_running, write_job

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

WIDE_RECORDS = """
    import time

    from weir import DiscardingSink, StreamExecutionEnvironment

    class Slow:
        # About 1000 records/s per subtask: far slower than the source.
        def __call__(self, record):
            time.sleep(0.001)
            return record

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_sequence(0, 10**9).map(lambda n: (n, f"{n:064d}"))
        .key_by(lambda t: t[0] % 100).map(Slow()).sink_to(DiscardingSink()))
    env.execute("wide records")
"""


def completed_with_tasks(cluster: LocalCluster, job_id: str, count: int,
                         timeout: float) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        result = cluster.weir("checkpoints", job_id, "--json", "--tasks")
        assert result.returncode == 0, result.stderr
        rows = [r for r in json.loads(result.stdout) if r["status"] == "COMPLETED"]
        return rows if len(rows) >= count else None

    return poll(done, timeout, interval=0.5, what=f"{count} completed checkpoints")  # type: ignore[no-any-return]


def test_unaligned_checkpoints_persist_at_most_the_reported_bound(cluster_factory,
                                                                   tmp_path: Path) -> None:
    cluster = cluster_factory(2, 2)
    job = write_job(tmp_path, WIDE_RECORDS, "wide.py")
    # Defaults everywhere: a source's checkpoint stores its reader's position, so its large
    # batches are never persisted.
    pairs = [f"-D{k}={v}" for k, v in {
        "execution.checkpointing.interval": "500 ms",
        "execution.checkpointing.unaligned.enabled": "true"}.items()]
    result = cluster.weir("run", "--detached", *pairs, str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().splitlines()[-1]
    try:
        wait_all_running(cluster, job_id)
        # The first checkpoints may come before the queues filled up: skip them.
        rows = completed_with_tasks(cluster, job_id, 6, timeout=180)[2:]
    finally:
        cluster.weir("cancel", job_id)
    assert rows and all(r["unaligned"] for r in rows)
    seen = []
    for row in rows:
        assert len(row["subtasks"]) == 4, row       # source and slow map, 2 subtasks each
        for sub in row["subtasks"]:
            persisted, bound = sub["persisted_bytes"], sub["in_flight_bound_bytes"]
            seen.append((row["id"], sub["task"], sub["subtask"], persisted, bound))
            assert bound > 0, sub
            assert persisted <= bound, (row["id"], sub)
        assert row["in_flight_bound_bytes"] == sum(s["in_flight_bound_bytes"]
                                                   for s in row["subtasks"])
    # Backpressure filled the buffers: the checkpoints did persist in-flight data, and
    # at least one subtask a good part of its bound.
    assert max(p for *_, p, _ in seen) > 0, seen
    assert max(p / b for *_, p, b in seen) > 0.1, seen
    print("checkpoint, task, subtask, persisted, bound:", *seen, sep="\n  ")
