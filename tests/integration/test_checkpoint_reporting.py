"""What a user sees of checkpoints and recovery on a real cluster: ``weir status --json``,
``weir checkpoints --json`` / ``--tasks`` and the JobMaster's Prometheus job metrics, for a
job that lost a TaskExecutor and was then cancelled with its checkpoints retained."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import job_details, wait_job_status
from tests.support.exactly_once import (
    kill_busy_taskexecutor,
    running_with_checkpoint_after,
    status_name,
    submit,
)

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

CHECKPOINT_KEYS = {"id", "status", "unaligned", "savepoint", "trigger_timestamp_ms",
                   "duration_ms", "state_size_bytes", "persisted_bytes", "processed_bytes",
                   "alignment_ms", "failure_reason", "path"}
JOB_METRICS = {"lastCheckpointDuration", "lastCheckpointSize", "lastCheckpointFullSize",
               "lastCheckpointProcessedData", "lastCheckpointPersistedData",
               "lastCompletedCheckpointId", "lastCheckpointExternalPath",
               "numberOfInProgressCheckpoints", "numberOfCompletedCheckpoints",
               "numberOfFailedCheckpoints", "totalNumberOfCheckpoints",
               "lastCheckpointRestoreTimestamp", "numRestarts", "restartingTime", "uptime",
               "downtime"}


def cli_json(cluster: Any, *args: str) -> Any:
    result = cluster.weir(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def job_metrics(cluster: Any, job_id: str) -> dict[str, Any]:
    """The JobMaster's ``weir_job_*`` samples of ``job_id``: name -> (value, labels)."""
    url = cluster.status()["jobmaster"]["metrics_url"]
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("weir_job_") and sample.labels.get("job_id") == job_id:
                samples[sample.name.removeprefix("weir_job_")] = (sample.value, sample.labels)
    return samples


def test_status_checkpoints_and_metrics_of_a_recovered_job(cluster_factory, tmp_path):
    cluster = cluster_factory(3, 2)
    job_id = submit(cluster, tmp_path, tmp_path / "out", 10_000_000, config={
        "execution.checkpointing.interval": "300 ms",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"})
    details = running_with_checkpoint_after(cluster, job_id, 0, 60)
    victim = kill_busy_taskexecutor(cluster, details)
    restored = running_with_checkpoint_after(cluster, job_id, details.last_checkpoint_id, 60)
    assert status_name(restored) == "RUNNING"

    status = cli_json(cluster, "status", job_id)
    assert (status["job_id"], status["status"], status["restarts"]) == (job_id, "RUNNING", 1)
    assert status["last_checkpoint"]["id"] >= restored.last_checkpoint_id
    assert status["last_checkpoint"]["path"].endswith(f"/{job_id}/chk-"
                                                      f"{status['last_checkpoint']['id']}")
    live = {te["resource_id"] for te in cluster.status()["taskexecutors"] if te["alive"]}
    assert victim not in live
    for task in status["tasks"]:
        assert task["state"] == "RUNNING" and task["taskexecutor"] in live
        assert {"name", "subtask"} <= task.keys()
    assert sorted((t["name"], t["subtask"]) for t in status["tasks"]) == sorted(
        (v.name, s.subtask_index) for v in restored.vertices for s in v.subtasks)

    metrics = job_metrics(cluster, job_id)
    assert metrics.keys() >= JOB_METRICS, JOB_METRICS - metrics.keys()
    assert metrics["numRestarts"][0] == 1
    assert metrics["lastCheckpointRestoreTimestamp"][0] > 0
    assert metrics["lastCompletedCheckpointId"][0] >= restored.last_checkpoint_id
    assert metrics["numberOfCompletedCheckpoints"][0] >= 2
    assert metrics["lastCheckpointExternalPath"][1]["path"].startswith("file://")

    assert cluster.weir("cancel", job_id).returncode == 0
    final = wait_job_status(cluster, job_id, {"CANCELED"}, timeout=60)
    history = cli_json(cluster, "checkpoints", job_id)
    assert history and all(row.keys() >= CHECKPOINT_KEYS for row in history)
    ids = [row["id"] for row in history]
    assert ids == sorted(ids)                       # newest last
    completed = [row for row in history if row["status"] == "COMPLETED"]
    assert completed[-1]["id"] == final.last_checkpoint_id
    for row in completed:
        assert row["unaligned"] is False and row["savepoint"] is False
        assert row["duration_ms"] >= 0 and row["state_size_bytes"] > 0
        assert row["failure_reason"] in (None, "")
    # retained on cancellation: the latest checkpoint is still there, complete
    latest = Path(completed[-1]["path"].removeprefix("file://"))
    assert (latest / "_metadata").is_file()
    assert job_details(cluster, job_id).last_checkpoint_path == completed[-1]["path"]

    table = cluster.weir("checkpoints", job_id, "--tasks")
    assert table.returncode == 0, table.stderr
    assert "COMPLETED" in table.stdout and "sync" in table.stdout
    assert "CHECKPOINTED" in table.stdout and "IN-FLIGHT" in table.stdout
    assert "alignment" in table.stdout and "start delay" in table.stdout
