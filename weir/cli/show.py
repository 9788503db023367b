"""What client commands print: job lists, a job's status, its checkpoint history — as
tables for people and as JSON (``--json``) for scripts, whose keys are kept stable.

Example:
    >>> from weir.proto import checkpoint_pb2, common_pb2, dispatcher_pb2
    >>> history = dispatcher_pb2.CheckpointHistory()
    >>> completed = checkpoint_pb2.CheckpointStats.COMPLETED
    >>> _ = history.checkpoints.add(checkpoint_id=3, status=completed, duration_ms=120,
    ...                             external_path="file:///c/job/chk-3")
    >>> row = checkpoints_json(history)[0]
    >>> row["id"], row["status"], row["path"], row["failure_reason"]
    (3, 'COMPLETED', 'file:///c/job/chk-3', None)
"""

from __future__ import annotations

import time
from typing import Any

from weir.client.cluster_client import failure_text, job_status_name, state_name
from weir.proto import checkpoint_pb2, common_pb2, dispatcher_pb2, jobmaster_pb2


def print_jobs(jobs: list[jobmaster_pb2.JobSummary]) -> None:
    if not jobs:
        print("no jobs")
        return
    print(f"{'JOB ID':32}  {'STATUS':10}  {'TASKS':>9}  {'DURATION':>9}  NAME")
    now_ms = time.time() * 1000
    for job in jobs:
        end = job.end_time_ms or now_ms
        duration = f"{(end - job.start_time_ms) / 1000:.1f}s"
        tasks = f"{job.tasks_finished + job.tasks_running}/{job.tasks_total}"
        print(f"{job.job_id:32}  {job_status_name(job.status):10}  {tasks:>9}  "
              f"{duration:>9}  {job.name}")


def status_json(details: jobmaster_pb2.JobDetails) -> dict[str, Any]:
    """``weir status --json``: the job, its restarts, its latest checkpoint, its tasks."""
    summary = details.summary
    last = None
    if details.last_checkpoint_id:
        last = {"id": details.last_checkpoint_id, "path": details.last_checkpoint_path}
    return {
        "job_id": summary.job_id, "name": summary.name,
        "status": job_status_name(summary.status), "restarts": summary.restarts,
        "last_checkpoint": last,
        "last_restore": _restore(details.last_restore)
        if details.HasField("last_restore") else None,
        "last_change": change_json(details.last_change)
        if details.HasField("last_change") else None,
        "failure": failure_text(details) if details.failure.message else None,
        "recoveries": [recovery_json(r) for r in reversed(details.recoveries)],
        "tasks": [{"name": vertex.name, "subtask": sub.subtask_index,
                   "state": state_name(sub.state), "taskexecutor": sub.resource_id,
                   "records_in": sub.metrics.records_in,
                   "records_out": sub.metrics.records_out,
                   "last_restore": _restore(sub.restore) if sub.HasField("restore") else None}
                  for vertex in details.vertices for sub in vertex.subtasks],
    }


def recovery_json(entry: jobmaster_pb2.Recovery) -> dict[str, Any]:
    """A restart or restore, for scripts (newest first in ``weir status --json``);
    ``duration_ms`` is None while the job is still recovering, ``checkpoint_id`` None when
    no checkpoint was restored."""
    cause = entry.cause
    return {"timestamp_ms": cause.timestamp_ms, "cause": cause.message,
            "reason": common_pb2.FailureReason.Name(cause.reason),
            "exception": cause.exception_class or None, "task": cause.task or None,
            "tasks": entry.tasks, "checkpoint_id": entry.checkpoint_id or None,
            "duration_ms": entry.duration_ms if entry.HasField("duration_ms") else None,
            "local_bytes": entry.local_bytes, "remote_bytes": entry.remote_bytes}


def change_json(change: jobmaster_pb2.JobChange) -> dict[str, Any]:
    """A rescale or update, for scripts."""
    return {"kind": change.kind, "checkpoint_id": change.checkpoint_id,
            "downtime_ms": change.downtime_ms, "timestamp_ms": change.timestamp_ms,
            "restarted_operators": list(change.restarted_operators)}


def _restore(stats: jobmaster_pb2.RestoreStats) -> dict[str, int]:
    return {"checkpoint_id": stats.checkpoint_id, "duration_ms": stats.duration_ms,
            "local_bytes": stats.local_bytes, "remote_bytes": stats.remote_bytes}


def print_status(details: jobmaster_pb2.JobDetails) -> None:
    summary = details.summary
    print(f"job {summary.job_id}  {summary.name}")
    print(f"status {job_status_name(summary.status)}; tasks {summary.tasks_running} running, "
          f"{summary.tasks_finished}/{summary.tasks_total} finished; "
          f"restarts {summary.restarts}")
    if details.last_checkpoint_id:
        print(f"last checkpoint {details.last_checkpoint_id}  {details.last_checkpoint_path}")
    if details.HasField("last_restore"):
        r = details.last_restore
        print(f"last restore: checkpoint {r.checkpoint_id} in {r.duration_ms} ms, "
              f"{_size(r.local_bytes)} from local copies, {_size(r.remote_bytes)} downloaded")
    if details.HasField("last_change"):
        c = details.last_change
        print(f"last {c.kind}: from checkpoint {c.checkpoint_id}, down for "
              f"{c.downtime_ms} ms")
    if details.failure.message:
        ended_badly = summary.status in (common_pb2.JOB_FAILED, common_pb2.JOB_CANCELED,
                                         common_pb2.JOB_FAILING, common_pb2.JOB_CANCELLING)
        label = "cause" if ended_badly else "last restart's cause"
        print(f"{label}: {failure_text(details)}")
        if details.failure.traceback:
            for line in details.failure.traceback.rstrip().splitlines():
                print(f"  {line}")
    print(f"  {'TASK':44} {'STATE':12} {'TASKEXECUTOR':18} {'RECORDS IN':>12} "
          f"{'RECORDS OUT':>12} {'BACKPRESSURE':>13} {'BUSY':>9}")
    for vertex in details.vertices:
        for sub in vertex.subtasks:
            name = f"{vertex.name[:36]} ({sub.subtask_index + 1}/{vertex.parallelism})"
            m = sub.metrics
            print(f"  {name:44} {state_name(sub.state):12} {sub.resource_id[:18]:18} "
                  f"{m.records_in:>12,} {m.records_out:>12,} "
                  f"{m.back_pressured_ms_per_s:>8.0f}ms/s {m.busy_ms_per_s:>5.0f}ms/s")


def _status(row: checkpoint_pb2.CheckpointStats) -> str:
    return checkpoint_pb2.CheckpointStats.Status.Name(row.status)


def _reason(row: checkpoint_pb2.CheckpointStats) -> str | None:
    if row.status != checkpoint_pb2.CheckpointStats.FAILED:
        return None
    return checkpoint_pb2.CheckpointFailureReason.Name(row.failure_reason)


def _subtasks(row: checkpoint_pb2.CheckpointStats) -> list[dict[str, Any]]:
    return [{"task": s.task_name, "subtask": s.subtask_index,
             "sync_ms": s.metrics.sync_duration_ms, "async_ms": s.metrics.async_duration_ms,
             "alignment_ms": s.metrics.alignment_duration_ms,
             "start_delay_ms": s.metrics.start_delay_ms,
             "processed_bytes": s.metrics.processed_bytes,
             "persisted_bytes": s.metrics.persisted_bytes,
             "in_flight_bound_bytes": s.metrics.in_flight_bound_bytes,
             "state_size_bytes": s.metrics.state_size,
             "changelog_size_bytes": s.metrics.changelog_state_size,
             "materialized_size_bytes": s.metrics.state_size - s.metrics.changelog_state_size,
             "unaligned": s.metrics.unaligned}
            for s in row.subtasks]


def checkpoints_json(history: dispatcher_pb2.CheckpointHistory,
                     tasks: bool = False) -> list[dict[str, Any]]:
    """``weir checkpoints --json``: one object per checkpoint, newest last."""
    rows = []
    for row in history.checkpoints:
        item: dict[str, Any] = {
            "id": row.checkpoint_id, "status": _status(row), "unaligned": row.unaligned,
            "savepoint": row.savepoint, "trigger_timestamp_ms": row.trigger_timestamp_ms,
            "duration_ms": row.duration_ms, "state_size_bytes": row.state_size,
            "checkpointed_size_bytes": row.incremental_size,
            "changelog_size_bytes": row.changelog_state_size,
            "materialized_size_bytes": row.state_size - row.changelog_state_size,
            "persisted_bytes": row.persisted_bytes,
            "in_flight_bound_bytes": row.in_flight_bound_bytes,
            "processed_bytes": row.processed_bytes,
            "alignment_ms": row.alignment_ms, "failure_reason": _reason(row),
            "failure_message": row.failure_message or None,
            "path": row.external_path or None,
            "acknowledged": row.acknowledged, "total": row.total}
        if tasks:
            item["subtasks"] = _subtasks(row)
        rows.append(item)
    return rows


def _in_flight(sub: dict[str, Any]) -> str:
    """A subtask's persisted in-flight data against the most its network buffers hold."""
    bound = sub["in_flight_bound_bytes"]
    persisted = _size(sub["persisted_bytes"])
    return f"{persisted} / bound {_size(bound)}" if bound else persisted


def _split(sub: dict[str, Any]) -> str:
    """A subtask's state size as materialized + log (the changelog state backend only)."""
    if not sub["changelog_size_bytes"]:
        return ""
    return (f"  state {_size(sub['materialized_size_bytes'])} materialized + "
            f"{_size(sub['changelog_size_bytes'])} log")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def print_checkpoints(history: dispatcher_pb2.CheckpointHistory, tasks: bool = False) -> None:
    if not history.checkpoints:
        print("no checkpoints (is execution.checkpointing.interval set?)")
        return
    if history.restored_checkpoint_id:
        print(f"restored from checkpoint {history.restored_checkpoint_id} at "
              f"{time.strftime('%H:%M:%S', time.localtime(history.restore_timestamp_ms / 1000))}")
    print(f"{'ID':>6}  {'STATUS':11}  {'TYPE':9}  {'TRIGGERED':8}  {'DURATION':>9}  "
          f"{'CHECKPOINTED':>12}  {'STATE':>10}  {'IN-FLIGHT':>10}  {'PROCESSED':>10}  "
          f"{'ALIGNMENT':>9}  "
          "PATH / FAILURE")
    for row in history.checkpoints:
        kind = "savepoint" if row.savepoint else ("unaligned" if row.unaligned else "aligned")
        when = time.strftime("%H:%M:%S", time.localtime(row.trigger_timestamp_ms / 1000))
        where = row.external_path if row.status == checkpoint_pb2.CheckpointStats.COMPLETED \
            else (f"{_reason(row)}: {row.failure_message}" if _reason(row)
                  else f"{row.acknowledged}/{row.total} acknowledged")
        print(f"{row.checkpoint_id:>6}  {_status(row):11}  {kind:9}  {when:8}  "
              f"{row.duration_ms:>7}ms  {_size(row.incremental_size):>12}  "
              f"{_size(row.state_size):>10}  "
              f"{_size(row.persisted_bytes):>10}  {_size(row.processed_bytes):>10}  "
              f"{row.alignment_ms:>7}ms  {where}")
        if row.changelog_state_size:
            print(f"{'':8}state {_size(row.state_size - row.changelog_state_size)} "
                  f"materialized + {_size(row.changelog_state_size)} log (changelog)")
        if tasks:
            for sub in _subtasks(row):
                print(f"{'':8}{sub['task'][:40]:40} ({sub['subtask'] + 1})  sync "
                      f"{sub['sync_ms']}ms  async {sub['async_ms']}ms  alignment "
                      f"{sub['alignment_ms']}ms  start delay {sub['start_delay_ms']}ms  "
                      f"persisted {_in_flight(sub)}{_split(sub)}")
