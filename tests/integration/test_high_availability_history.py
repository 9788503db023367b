"""A job's history survives its JobMaster: on a local cluster of real processes with high
availability on file:// storage, a SIGKILLed TaskExecutor is a recovery with a time, a
cause and a duration; after the JobMaster is SIGKILLed and the supervisor starts another,
the new one's REST API shows the earlier checkpoints (the ids `weir checkpoints --json`
showed, counts included) and the earlier recovery, and its own taking over as the newest."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.cluster import LocalCluster, poll
from tests.support.exactly_once import (
    checkpoints,
    kill_busy_taskexecutor,
    running_with_checkpoint_after,
    submit,
)
from weir.core.processes import process_alive
from weir.jobmaster.high_availability import HISTORY_NAME, KIND_HISTORY, decode
from weir.proto import jobmaster_pb2

CONFIG = {"execution.checkpointing.interval": "300 ms",
          "restart-strategy.type": "fixed-delay",
          "restart-strategy.fixed-delay.attempts": "10",
          "restart-strategy.fixed-delay.delay": "200 ms"}


def rest(cluster: LocalCluster, path: str) -> Any:
    """The JobMaster's answer to GET ``path`` (None while no JobMaster answers, or it does
    not know the job yet)."""
    info = cluster.files.jobmaster()
    if info is None or not info.rest_url:
        return None
    try:
        with urllib.request.urlopen(info.rest_url + path, timeout=10) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError):
        return None


def all_running(job: Any) -> bool:
    return bool(job) and job["state"] == "RUNNING" and \
        all(v["status"] == "RUNNING" for v in job["vertices"])


def stored_history(cluster: LocalCluster, job_id: str) -> jobmaster_pb2.JobHistory:
    files = list((cluster.dir / "ha").rglob(f"{job_id}/{HISTORY_NAME}"))
    if not files:
        return jobmaster_pb2.JobHistory()
    return jobmaster_pb2.JobHistory.FromString(
        decode(files[0].read_bytes(), KIND_HISTORY, str(files[0])))


def test_checkpoints_and_recoveries_survive_a_jobmaster_failover(cluster_factory,
                                                                  tmp_path: Path):
    cluster = cluster_factory(2, 2, "--ha")
    job_id = submit(cluster, tmp_path, tmp_path / "out", 10_000_000, config=CONFIG)
    details = running_with_checkpoint_after(cluster, job_id, 0, 90)

    # A TaskExecutor that runs tasks of the job dies: a recovery.
    killed_at = int(time.time() * 1000)
    victim = kill_busy_taskexecutor(cluster, details)

    def recovered() -> Any:
        job = rest(cluster, f"/jobs/{job_id}")
        entries = job["recoveries"] if job else []
        return all_running(job) and entries and entries[0]["duration"] is not None \
            and entries[0]

    loss = poll(recovered, 90, interval=0.2, what="the job to recover from the lost TE")
    # The recovery's cause is the first sign of the loss the JobMaster got: the lost
    # TaskExecutor itself, or a consumer's broken connection to it a moment earlier.
    assert loss["exceptionName"] in ("TASK_EXECUTOR_LOST", "REMOTE_TRANSPORT",
                                     "PARTITION_NOT_FOUND"), loss
    if loss["exceptionName"] == "TASK_EXECUTOR_LOST":
        assert victim in loss["cause"], loss
    assert killed_at - 1000 <= loss["timestamp"] <= killed_at + 30_000, (killed_at, loss)
    assert loss["tasks"] >= 1 and loss["duration"] >= 0
    assert loss["checkpoint-id"] is not None and loss["checkpoint-id"] >= 1
    assert loss["local-bytes"] + loss["remote-bytes"] >= 0
    exceptions = rest(cluster, f"/jobs/{job_id}/exceptions")
    # The recovery counts from the first sign of the failure (a consumer may report its
    # broken connection before the TaskExecutor's loss is noticed, which then becomes
    # the cause): the root exception is that loss, learned then or a little later.
    assert loss["timestamp"] <= exceptions["timestamp"] <= loss["timestamp"] + 10_000, \
        (loss, exceptions)
    assert all(e["timestamp"] for e in exceptions["exceptionHistory"]["entries"])

    # A few more checkpoints, then what the client shows of them.
    after = running_with_checkpoint_after(cluster, job_id, loss["checkpoint-id"] + 3, 90)
    shown = [c for c in checkpoints(cluster, job_id) if c["status"] != "IN_PROGRESS"]
    ids = {c["id"] for c in shown}
    latest = max(c["id"] for c in shown if c["status"] == "COMPLETED")
    assert after.last_checkpoint_id in ids
    # The history is written after each checkpoint, off the JobMaster's main thread (a
    # crash may lose the newest entry): wait until the store has caught up with them.
    poll(lambda: ids <= {c.checkpoint_id for c in stored_history(cluster, job_id).checkpoints}
         and any(r.HasField("duration_ms") for r in stored_history(cluster, job_id).recoveries),
         30, interval=0.1, what="the job's history to be stored")
    before = rest(cluster, f"/jobs/{job_id}/checkpoints")
    old = cluster.files.jobmaster()
    assert old is not None
    failover_at = int(time.time() * 1000)
    os.kill(old.pid, signal.SIGKILL)
    poll(lambda: (i := cluster.files.jobmaster()) and i.pid != old.pid
         and process_alive(i.pid), 60, interval=0.1,
         what="the supervisor to start the JobMaster again")

    def taken_over() -> Any:
        job = rest(cluster, f"/jobs/{job_id}")
        entries = job["recoveries"] if job else []
        return all_running(job) and entries and entries[0]["duration"] is not None \
            and job

    job = poll(taken_over, 120, interval=0.2, what="the new JobMaster to run the job")
    newest, *earlier = job["recoveries"]
    assert newest["exceptionName"] == "JOBMASTER_FAILOVER", newest
    assert newest["timestamp"] >= failover_at and newest["duration"] >= 0
    assert newest["checkpoint-id"] is not None and newest["checkpoint-id"] >= latest
    assert newest["tasks"] == sum(v["parallelism"] for v in job["vertices"])
    assert loss in earlier, (loss, earlier)
    # The exceptions history goes on from the earlier JobMaster's, times included.
    exceptions = rest(cluster, f"/jobs/{job_id}/exceptions")
    entries = exceptions["exceptionHistory"]["entries"]
    assert (entries[0]["exceptionName"], entries[0]["timestamp"]) == \
        ("JOBMASTER_FAILOVER", newest["timestamp"]), entries
    assert exceptions["timestamp"] == newest["timestamp"]
    assert any(e["exceptionName"] == loss["exceptionName"]
               and e["timestamp"] == loss["timestamp"] for e in entries), entries

    history = rest(cluster, f"/jobs/{job_id}/checkpoints")
    assert ids <= {c["id"] for c in history["history"]}, (ids, history["history"])
    assert history["counts"]["completed"] >= before["counts"]["completed"]
    assert history["counts"]["failed"] >= before["counts"]["failed"]
    # New checkpoints continue after the earlier ones, and the details of an earlier one
    # (with its subtasks) are served as before.
    earliest = min(ids)
    detail = rest(cluster, f"/jobs/{job_id}/checkpoints/details/{earliest}")
    assert detail is not None and detail["id"] == earliest
    running_with_checkpoint_after(cluster, job_id, max(ids), 90)
    again = checkpoints(cluster, job_id)
    assert len({c["id"] for c in again}) == len(again)          # no id used twice
    assert ids <= {c["id"] for c in again}
