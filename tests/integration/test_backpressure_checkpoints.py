"""Checkpoints under full backpressure (a slow keyed stage behind a fast source): aligned
barriers wait behind the buffered data, unaligned ones overtake it and complete in about a
second, and buffer debloating leaves less in-flight data for them to persist."""

from __future__ import annotations

import json
import statistics
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import LocalCluster, poll, wait_all_running, write_job

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

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


def checkpoint_task_metrics(cluster: LocalCluster, job_id: str) -> dict[tuple[str, str], Any]:
    """Every TaskExecutor's checkpoint metrics of ``job_id``'s tasks:
    (task, subtask) -> {metric name: value}."""
    found: dict[tuple[str, str], dict[str, float]] = {}
    for te in cluster.status()["taskexecutors"]:
        with urllib.request.urlopen(te["metrics_url"], timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name.removeprefix("weir_task_")
                if name.startswith("checkpoint") and sample.labels.get("job_id") == job_id:
                    key = (sample.labels["task_name"], sample.labels["subtask_index"])
                    found.setdefault(key, {})[name] = sample.value
    return found


def run_backpressured(cluster: LocalCluster, tmp_path: Path, name: str,
                      config: dict[str, str], count: int,
                      metrics: dict[tuple[str, str], Any] | None = None
                      ) -> list[dict[str, Any]]:
    """The completed checkpoints after the first; with ``metrics``, also fills in the
    task checkpoint metrics seen at the end."""
    job = write_job(tmp_path, BACKPRESSURED, f"{name}.py")
    pairs = [f"-D{k}={v}" for k, v in {"execution.checkpointing.interval": "1 s",
                                       **config}.items()]
    result = cluster.weir("run", "--detached", *pairs, str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().splitlines()[-1]
    try:
        wait_all_running(cluster, job_id)
        # The first checkpoint may come before the queues filled up: skip it.
        rows = completed_checkpoints(cluster, job_id, count + 1, timeout=120)[1:]
        if metrics is not None:
            metrics.update(checkpoint_task_metrics(cluster, job_id))
    finally:
        cluster.weir("cancel", job_id)
    return rows


def test_unaligned_checkpoints_overtake_backpressure(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 2)
    task_metrics: dict[tuple[str, str], Any] = {}
    aligned = run_backpressured(cluster, tmp_path, "aligned", {}, 3, task_metrics)
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
    # Aligned barriers queue behind the buffered data (above: they take far longer than
    # unaligned ones). A subtask aligns from its first channel's barrier to its last, as
    # long as one channel's queue is longer than another's; network buffers keep each queue
    # to a few buffers of about 150 of these records, so alignment may be short (under
    # 500 ms), but it is measured.
    assert max(r["alignment_ms"] for r in aligned) > 0
    # The same at the tasks, in Flink's unit (ns): every task reports both metrics, and
    # the slow keyed subtasks waited for their barriers.
    assert len(task_metrics) == 4, task_metrics     # source and keyed map, 2 subtasks each
    for values in task_metrics.values():
        assert values.keys() == {"checkpointAlignmentTime", "checkpointStartDelayNanos"}
        assert min(values.values()) >= 0
    assert max(v["checkpointAlignmentTime"] for v in task_metrics.values()) >= 1e6, task_metrics
    # Unaligned checkpoints persist the data they overtook; debloated buffers hold less.
    persisted = statistics.median(r["persisted_bytes"] for r in unaligned)
    persisted_debloated = statistics.median(r["persisted_bytes"] for r in debloated)
    assert persisted > 0
    assert persisted_debloated < persisted, (debloated, unaligned)
