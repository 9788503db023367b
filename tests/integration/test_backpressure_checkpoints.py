"""Checkpoints under full backpressure (a slow keyed stage behind a fast source): aligned
barriers wait behind the buffered data, unaligned ones overtake it and complete in about a
second, and buffer debloating leaves less in-flight data for them to persist."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from tests.support.cluster import LocalCluster, poll, wait_all_running, write_job

BACKPRESSURED = """
    import sys
    import time

    from weir import DiscardingSink, StreamExecutionEnvironment

    class Slow:
        # About 1000 records/s per subtask: far slower than the source.
        def __call__(self, record):
            time.sleep(0.001)
            return record

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_sequence(0, 10**9).map(lambda n: (n % 100, "x" * 200))
        .key_by(lambda t: t[0]).map(Slow()).sink_to(DiscardingSink()))
    env.execute("backpressured")
"""


def completed_checkpoints(cluster: LocalCluster, job_id: str, count: int,
                          timeout: float) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        result = cluster.weir("checkpoints", job_id, "--json")
        assert result.returncode == 0, result.stderr
        rows = [r for r in json.loads(result.stdout) if r["status"] == "COMPLETED"]
        return rows if len(rows) >= count else None

    return poll(done, timeout, interval=0.5, what=f"{count} completed checkpoints")  # type: ignore[no-any-return]


def run_backpressured(cluster: LocalCluster, tmp_path: Path, name: str,
                      config: dict[str, str], count: int) -> list[dict[str, Any]]:
    job = write_job(tmp_path, BACKPRESSURED, f"{name}.py")
    # Small source batches: backpressure holds the source back batch by batch.
    pairs = [f"-D{k}={v}" for k, v in {"execution.checkpointing.interval": "1 s",
                                       "pipeline.batch-size": "200", **config}.items()]
    result = cluster.weir("run", "--detached", *pairs, str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().splitlines()[-1]
    try:
        wait_all_running(cluster, job_id)
        # The first checkpoint may come before the queues filled up: skip it.
        rows = completed_checkpoints(cluster, job_id, count + 1, timeout=120)[1:]
    finally:
        cluster.weir("cancel", job_id)
    return rows


def test_unaligned_checkpoints_overtake_backpressure(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 2)
    aligned = run_backpressured(cluster, tmp_path, "aligned", {}, 3)
    unaligned = run_backpressured(cluster, tmp_path, "unaligned", {
        "execution.checkpointing.unaligned.enabled": "true"}, 4)
    cluster.stop()
    # Debloating is a TaskExecutor setting (its input gates size the buffers).
    debloating = cluster_factory(2, 2, "taskmanager.network.memory.buffer-debloat.enabled=true")
    debloated = run_backpressured(debloating, tmp_path, "debloated", {
        "execution.checkpointing.unaligned.enabled": "true"}, 4)
    aligned_ms = statistics.median(r["duration_ms"] for r in aligned)
    unaligned_ms = statistics.median(r["duration_ms"] for r in unaligned)
    assert not any(r["unaligned"] for r in aligned)
    assert all(r["unaligned"] for r in unaligned)
    assert unaligned_ms <= 1500, unaligned
    assert aligned_ms >= 4 * unaligned_ms, (aligned, unaligned)
    # Aligned barriers queue behind the buffered data (about a second of it at 1000
    # records/s per subtask; less when the machine is busy and the source is slower too).
    assert max(r["alignment_ms"] for r in aligned) > 500
    # Unaligned checkpoints persist the data they overtook; debloated buffers hold less.
    persisted = statistics.median(r["persisted_bytes"] for r in unaligned)
    persisted_debloated = statistics.median(r["persisted_bytes"] for r in debloated)
    assert persisted > 0
    assert persisted_debloated < persisted, (debloated, unaligned)
