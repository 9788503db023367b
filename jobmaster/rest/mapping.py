"""weir's messages in Flink's REST JSON shapes: pure functions of protobuf messages (no
JobMaster, no I/O), so each shape is tested on its own. Field names are Flink's where the
concept is Flink's; weir's own facts are extra fields under the same resources.

Example:
    >>> job_state(common_pb2.JOB_CANCELED)
    'CANCELED'
    >>> vertex_hex_id("0" * 32, 3) == vertex_hex_id("0" * 32, 3) != vertex_hex_id("1" * 32, 3)
    True
    >>> len(vertex_hex_id("0" * 32, 3))
    32
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from weir.core.secrets import SECRET_KEYS
from weir.proto import checkpoint_pb2, common_pb2, dispatcher_pb2, jobgraph_pb2, jobmaster_pb2

Json = dict[str, Any]

#: Flink's task states, the keys of its ``tasks`` / ``status-counts`` objects.
TASK_STATES = ("CREATED", "SCHEDULED", "DEPLOYING", "INITIALIZING", "RUNNING", "FINISHED",
               "CANCELING", "CANCELED", "FAILED", "RECONCILING")
#: A vertex's state from its subtasks' (Flink's ExecutionJobVertex.getAggregateState):
#: the first of these any subtask is in, else FINISHED when all are, else CREATED.
_AGGREGATE_ORDER = ("FAILED", "CANCELING", "CANCELED", "RUNNING", "INITIALIZING",
                    "DEPLOYING", "SCHEDULED")
_SHIP_STRATEGY = {common_pb2.FORWARD: "FORWARD", common_pb2.REBALANCE: "REBALANCE",
                  common_pb2.HASH: "HASH", common_pb2.BROADCAST: "BROADCAST"}
_CHECKPOINT_STATUS = {checkpoint_pb2.CheckpointStats.IN_PROGRESS: "IN_PROGRESS",
                      checkpoint_pb2.CheckpointStats.COMPLETED: "COMPLETED",
                      checkpoint_pb2.CheckpointStats.FAILED: "FAILED"}
#: Flink's back-pressure levels: the back-pressured share of time up to 10 % is ok, up to
#: 50 % low, above it high.
_LOW, _HIGH = 0.10, 0.50


#: Flink's ``formatType`` of a savepoint or stop request -> weir's savepoint format.
SAVEPOINT_FORMATS = {"CANONICAL": checkpoint_pb2.SAVEPOINT_CANONICAL,
                     "NATIVE": checkpoint_pb2.SAVEPOINT_NATIVE}


def savepoint_format(value: object) -> checkpoint_pb2.SavepointFormat | None:
    """The savepoint format a request's ``formatType`` names (absent or null: canonical,
    Flink's default); None when it names none.

    Example:
        >>> savepoint_format(None) == checkpoint_pb2.SAVEPOINT_CANONICAL
        True
        >>> savepoint_format("native") == checkpoint_pb2.SAVEPOINT_NATIVE
        True
        >>> savepoint_format("FULL") is None
        True
    """
    if value is None:
        return checkpoint_pb2.SAVEPOINT_CANONICAL
    if not isinstance(value, str):
        return None
    return SAVEPOINT_FORMATS.get(value.upper())


def trigger_id(value: object) -> str | None:
    """A client's own ``triggerId`` (Flink's TriggerId: 32 hex digits), lower-cased; None
    when it is none.

    Example:
        >>> trigger_id("AB" * 16) == "ab" * 16, trigger_id("xyz"), trigger_id(7)
        (True, None, None)
    """
    if not isinstance(value, str) or len(value) != 32:
        return None
    try:
        int(value, 16)
    except ValueError:
        return None
    return value.lower()


def job_state(status: int) -> str:
    """A JobStatus as Flink names it (``JOB_RUNNING`` -> ``RUNNING``)."""
    return common_pb2.JobStatus.Name(status).removeprefix("JOB_")


def task_state(state: int) -> str:
    """An ExecutionState as Flink names it (the same names)."""
    return common_pb2.ExecutionState.Name(state)


def vertex_hex_id(job_id: str, vertex_id: int) -> str:
    """A stable 32-hex-digit id for a vertex, as Flink's JobVertexID looks: derived from the
    job id and weir's int vertex id, so it is the same across restarts and JobMasters."""
    return hashlib.blake2b(f"{job_id}/{vertex_id}".encode(), digest_size=16).hexdigest()


def parse_vertex_id(job_id: str, text: str, vertex_ids: Iterable[int]) -> int | None:
    """The int vertex id ``text`` names, as an int or a 32-hex id; None when it names none
    of ``vertex_ids``.

    Example:
        >>> parse_vertex_id("j", "2", [1, 2]), parse_vertex_id("j", vertex_hex_id("j", 1), [1])
        (2, 1)
        >>> parse_vertex_id("j", "7", [1, 2]) is None
        True
    """
    known = list(vertex_ids)
    if text.isdigit() and int(text) in known:
        return int(text)
    for vertex_id in known:
        if vertex_hex_id(job_id, vertex_id) == text.lower():
            return vertex_id
    return None


def _duration(start_ms: int, end_ms: int, now_ms: int) -> int:
    if start_ms <= 0:
        return -1
    return (end_ms if end_ms > 0 else now_ms) - start_ms


def state_counts(states: Iterable[str]) -> dict[str, int]:
    """Flink's ``tasks`` object: how many are in each state (every state named)."""
    counts = dict.fromkeys(TASK_STATES, 0)
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return counts


def aggregate_state(states: Sequence[str]) -> str:
    """A vertex's state from its subtasks' states.

    Example:
        >>> aggregate_state(["RUNNING", "FINISHED"]), aggregate_state(["FINISHED"] * 2)
        ('RUNNING', 'FINISHED')
    """
    for state in _AGGREGATE_ORDER:
        if state in states:
            return state
    if states and all(s == "FINISHED" for s in states):
        return "FINISHED"
    return "CREATED"


def job_summary(summary: jobmaster_pb2.JobSummary, now_ms: int) -> Json:
    """One entry of ``/jobs/overview``. Its ``tasks`` counts subtasks, as running,
    finished and the rest (weir's summary keeps no more); ``pending-operators`` (operators
    of Flink's adaptive batch scheduler not yet in the graph) is always 0."""
    others = summary.tasks_total - summary.tasks_running - summary.tasks_finished
    tasks = state_counts([])
    tasks.update(total=summary.tasks_total, running=summary.tasks_running,
                 finished=summary.tasks_finished, created=max(others, 0))
    tasks = {k.lower(): v for k, v in tasks.items()}
    return {"jid": summary.job_id, "name": summary.name, "state": job_state(summary.status),
            "start-time": summary.start_time_ms or -1,
            "end-time": summary.end_time_ms or -1,
            "duration": _duration(summary.start_time_ms, summary.end_time_ms, now_ms),
            "last-modification": summary.end_time_ms or summary.start_time_ms,
            # Flink's client reads pending-operators as a required int (its JobDetails).
            "tasks": tasks, "pending-operators": 0, "restarts": summary.restarts}


def _vertex_metrics(subtasks: Iterable[jobmaster_pb2.SubtaskDetails]) -> Json:
    metrics = {"read-bytes": 0, "write-bytes": 0, "read-records": 0, "write-records": 0}
    ratios: list[tuple[float, float, float]] = []
    for sub in subtasks:
        m = sub.metrics
        metrics["read-bytes"] += m.bytes_in
        metrics["write-bytes"] += m.bytes_out
        metrics["read-records"] += m.records_in
        metrics["write-records"] += m.records_out
        ratios.append((m.back_pressured_ms_per_s, m.idle_ms_per_s, m.busy_ms_per_s))
    complete = {f"{k}-complete": True for k in list(metrics)}
    extra: Json = {}
    if ratios:
        extra = {"accumulated-backpressured-time": int(sum(r[0] for r in ratios)),
                 "accumulated-idle-time": int(sum(r[1] for r in ratios)),
                 "accumulated-busy-time": sum(r[2] for r in ratios) / len(ratios),
                 # weir's: the busiest subtask, which Flink's dashboard colours a vertex by
                 # (one hot subtask is a bottleneck that an average hides).
                 "max-backpressured-time": max(r[0] for r in ratios),
                 "max-busy-time": max(r[2] for r in ratios)}
    return {**metrics, **complete, **extra}


def _restore(restore: jobmaster_pb2.RestoreStats) -> Json:
    return {"checkpoint-id": restore.checkpoint_id, "duration": restore.duration_ms,
            "local-bytes": restore.local_bytes, "remote-bytes": restore.remote_bytes}


def _entered(sub: jobmaster_pb2.SubtaskDetails, state: int) -> int:
    """When ``sub``'s current attempt entered ``state`` (epoch ms; 0: it did not)."""
    return sub.state_timestamps.get(state, 0)


def _is_terminal(state: int) -> bool:
    return state in (common_pb2.FINISHED, common_pb2.CANCELED, common_pb2.FAILED)


def vertex_times(subtasks: Sequence[jobmaster_pb2.SubtaskDetails], now_ms: int
                 ) -> tuple[int, int, int]:
    """A vertex's (start, end, duration) as Flink's job details compute them: from the
    earliest deployment of a subtask's current attempt; the end (the latest state change)
    only once every subtask is in a final state; -1 for what is not known yet.

    Example:
        >>> running = jobmaster_pb2.SubtaskDetails(
        ...     state=common_pb2.RUNNING, state_timestamps={common_pb2.DEPLOYING: 100})
        >>> done = jobmaster_pb2.SubtaskDetails(state=common_pb2.FINISHED, state_timestamps={
        ...     common_pb2.DEPLOYING: 90, common_pb2.FINISHED: 400})
        >>> vertex_times([running, done], 1000), vertex_times([done], 1000)
        ((90, -1, 910), (90, 400, 310))
        >>> vertex_times([jobmaster_pb2.SubtaskDetails()], 1000)
        (-1, -1, -1)
    """
    starts = [t for t in (_entered(s, common_pb2.DEPLOYING) for s in subtasks) if t > 0]
    if not starts:
        return -1, -1, -1
    start = min(starts)
    if all(_is_terminal(s.state) for s in subtasks):
        end = max(_entered(s, s.state) for s in subtasks)
        return start, end, end - start
    return start, -1, now_ms - start


def vertex(job_id: str, details: jobmaster_pb2.JobDetails,
           vertex_details: jobmaster_pb2.VertexDetails, now_ms: int) -> Json:
    """One vertex of ``/jobs/:jobid``: Flink's fields, and weir's int ``vertex-id``."""
    states = [task_state(s.state) for s in vertex_details.subtasks]
    state = aggregate_state(states)
    start, end, duration = vertex_times(vertex_details.subtasks, now_ms)
    return {"id": vertex_hex_id(job_id, vertex_details.vertex_id),
            "vertex-id": vertex_details.vertex_id, "name": vertex_details.name,
            "maxParallelism": -1, "parallelism": vertex_details.parallelism,
            "status": state, "start-time": start, "end-time": end, "duration": duration,
            "tasks": state_counts(states), "metrics": _vertex_metrics(vertex_details.subtasks)}


def subtask(sub: jobmaster_pb2.SubtaskDetails, now_ms: int) -> Json:
    """One subtask of ``/jobs/:jobid/vertices/:vertexid`` (Flink's
    SubtaskExecutionAttemptDetailsInfo): its current attempt, started when it was deployed,
    ended when it reached a final state; and weir's restore of that attempt."""
    start = _entered(sub, common_pb2.DEPLOYING) or -1
    end = _entered(sub, sub.state) if _is_terminal(sub.state) else -1
    duration = ((end if end > 0 else now_ms) - start) if start > 0 else -1
    m = sub.metrics
    return {"subtask": sub.subtask_index, "status": task_state(sub.state),
            "attempt": sub.attempt_number, "attempt-id": sub.attempt_id,
            "taskmanager-id": sub.resource_id or None,
            "start-time": start, "start_time": start, "end-time": end, "duration": duration,
            "metrics": {"read-records": m.records_in, "write-records": m.records_out,
                        "read-bytes": m.bytes_in, "write-bytes": m.bytes_out},
            "restore": _restore(sub.restore) if sub.HasField("restore") else None}


def subtask_times(job_id: str, vertex_details: jobmaster_pb2.VertexDetails,
                  now_ms: int) -> Json:
    """``/jobs/:jobid/vertices/:vertexid/subtasktimes`` (Flink's SubtasksTimesInfo): when
    each subtask's current attempt entered each state (0: not entered), and its duration
    from being scheduled to its final state (or now; -1 while not scheduled)."""
    subtasks: list[Json] = []
    for sub in vertex_details.subtasks:
        scheduled = _entered(sub, common_pb2.SCHEDULED)
        end = _entered(sub, sub.state) if _is_terminal(sub.state) else now_ms
        timestamps = {name: 0 for name in TASK_STATES}
        timestamps.update({task_state(state): ms for state, ms in sub.state_timestamps.items()})
        subtasks.append({"subtask": sub.subtask_index, "host": sub.resource_id or None,
                         "duration": end - scheduled if scheduled > 0 else -1,
                         "timestamps": timestamps})
    return {"id": vertex_hex_id(job_id, vertex_details.vertex_id),
            "name": vertex_details.name, "now": now_ms, "subtasks": subtasks}


def watermarks(vertex_details: jobmaster_pb2.VertexDetails) -> list[Json]:
    """``/jobs/:jobid/vertices/:vertexid/watermarks`` (Flink's JobVertexWatermarksHandler):
    each subtask's ``currentInputWatermark`` as a string of epoch ms, Long.MIN_VALUE while
    none has arrived; subtasks without one (a source, or not reported yet) left out."""
    return [{"id": f"{sub.subtask_index}.currentInputWatermark",
             "value": str(sub.metrics.input_watermark)}
            for sub in vertex_details.subtasks if sub.metrics.HasField("input_watermark")]


def recovery(entry: jobmaster_pb2.Recovery) -> Json:
    """One of ``recoveries``: when the job failed and why, how many subtasks restarted,
    the checkpoint restored (null: none), how long until they all ran again (null: still
    recovering) and the bytes restored from task-local copies and from storage.

    Example:
        >>> entry = jobmaster_pb2.Recovery(tasks=2, checkpoint_id=4, duration_ms=900)
        >>> entry.cause.CopyFrom(common_pb2.ErrorInfo(
        ...     reason=common_pb2.TASK_EXECUTOR_LOST, message="gone", timestamp_ms=5))
        >>> shown = recovery(entry)
        >>> shown["timestamp"], shown["exceptionName"], shown["checkpoint-id"], shown["duration"]
        (5, 'TASK_EXECUTOR_LOST', 4, 900)
    """
    cause = entry.cause
    return {"timestamp": cause.timestamp_ms, "cause": cause.message,
            "exceptionName": _exception_name(cause), "taskName": cause.task or None,
            "tasks": entry.tasks, "checkpoint-id": entry.checkpoint_id or None,
            "duration": entry.duration_ms if entry.HasField("duration_ms") else None,
            "local-bytes": entry.local_bytes, "remote-bytes": entry.remote_bytes}


def job_details(details: jobmaster_pb2.JobDetails, graph: jobgraph_pb2.JobGraph,
                now_ms: int) -> Json:
    """``/jobs/:jobid``: Flink's JobDetailsInfo, and weir's restarts, last restore (local
    and remote bytes), last checkpoint, last rescale or update (its downtime) and
    ``recoveries``, newest first."""
    summary = details.summary
    vertices = [vertex(summary.job_id, details, v, now_ms) for v in details.vertices]
    result: Json = {
        "jid": summary.job_id, "name": summary.name, "isStoppable": False,
        "state": job_state(summary.status), "job-type": "STREAMING",
        "start-time": summary.start_time_ms or -1, "end-time": summary.end_time_ms or -1,
        "duration": _duration(summary.start_time_ms, summary.end_time_ms, now_ms),
        "maxParallelism": -1, "now": now_ms,
        "timestamps": {job_state(summary.status): summary.end_time_ms
                       or summary.start_time_ms},
        "vertices": vertices,
        "status-counts": state_counts(v["status"] for v in vertices),
        "plan": plan(graph),
        "restarts": summary.restarts,
        "last-checkpoint": ({"id": details.last_checkpoint_id,
                             "external-path": details.last_checkpoint_path}
                            if details.last_checkpoint_id else None),
        "last-restore": (_restore(details.last_restore)
                         if details.HasField("last_restore") else None),
        "last-change": (job_change(details.last_change)
                        if details.HasField("last_change") else None),
        "recoveries": [recovery(r) for r in reversed(details.recoveries)]}
    return result


def job_change(change: jobmaster_pb2.JobChange) -> Json:
    """A rescale or hot update: what it was, from which checkpoint, its downtime."""
    return {"kind": change.kind, "checkpoint-id": change.checkpoint_id,
            "downtime": change.downtime_ms, "timestamp": change.timestamp_ms,
            "restarted-operators": list(change.restarted_operators)}


def plan(graph: jobgraph_pb2.JobGraph) -> Json:
    """``/jobs/:jobid/plan``: the job graph's vertices and their inputs."""
    nodes = []
    for v in graph.vertices:
        inputs = [{"num": i, "id": vertex_hex_id(graph.job_id, edge.source_vertex),
                   "ship_strategy": _SHIP_STRATEGY.get(edge.partitioner, "UNKNOWN"),
                   "exchange": "pipelined_bounded"} for i, edge in enumerate(v.inputs)]
        nodes.append({"id": vertex_hex_id(graph.job_id, v.id), "vertex-id": v.id,
                      "parallelism": v.parallelism, "operator": "", "operator_strategy": "",
                      "description": " -> ".join(v.operator_names) or v.name,
                      "inputs": inputs, "optimizer_properties": {}})
    return {"plan": {"jid": graph.job_id, "name": graph.name, "type": "STREAMING",
                     "nodes": nodes}}


def _exception_name(error: common_pb2.ErrorInfo) -> str | None:
    """The exception class, or else the failure reason (None: neither is known)."""
    if error.exception_class:
        return error.exception_class
    if error.reason == common_pb2.FAILURE_UNKNOWN:
        return None
    return common_pb2.FailureReason.Name(error.reason)


def _exception_entry(error: common_pb2.ErrorInfo) -> Json:
    name = error.exception_class or common_pb2.FailureReason.Name(error.reason)
    return {"exceptionName": name,
            "stacktrace": error.traceback or f"{name}: {error.message}",
            "message": error.message, "reason": common_pb2.FailureReason.Name(
                error.reason),
            "timestamp": error.timestamp_ms or None, "taskName": error.task or None,
            "endpoint": None,
            "taskManagerId": None, "failureLabels": {}, "concurrentExceptions": []}


def exceptions(details: jobmaster_pb2.JobDetails) -> Json:
    """``/jobs/:jobid/exceptions``: the failure that ended the job (or the last restart's
    cause) as the root exception, and the restart causes newest first. Timestamps are when
    the JobMaster learned of each failure (null when unknown)."""
    history = [_exception_entry(e) for e in reversed(details.restart_causes)]
    root: common_pb2.ErrorInfo | None = None
    if details.HasField("failure"):
        root = details.failure
        # A running job keeps its last restart's cause as its failure too: listed once.
        if not details.restart_causes or details.restart_causes[-1] != root:
            history.insert(0, _exception_entry(root))
    elif details.restart_causes:
        root = details.restart_causes[-1]
    root_entry = _exception_entry(root) if root is not None else None
    return {"root-exception": root_entry["stacktrace"] if root_entry else None,
            "timestamp": root_entry["timestamp"] if root_entry else None,
            "all-exceptions": [], "truncated": False,
            "exceptionHistory": {"entries": history, "truncated": False}}


def _stats(values: Sequence[int]) -> Json:
    if not values:
        return {k: 0 for k in ("min", "max", "avg", "p50", "p90", "p95", "p99", "p999")}
    ordered = sorted(values)

    def quantile(q: float) -> float:
        return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])

    return {"min": ordered[0], "max": ordered[-1], "avg": sum(ordered) // len(ordered),
            "p50": quantile(0.5), "p90": quantile(0.9), "p95": quantile(0.95),
            "p99": quantile(0.99), "p999": quantile(0.999)}


def _checkpoint_type(stats: checkpoint_pb2.CheckpointStats) -> str:
    if stats.savepoint:
        return "SAVEPOINT"
    return "UNALIGNED_CHECKPOINT" if stats.unaligned else "CHECKPOINT"


def _latest_ack(stats: checkpoint_pb2.CheckpointStats) -> int:
    acks = [s.metrics.ack_timestamp_ms for s in stats.subtasks]
    return max(acks, default=stats.trigger_timestamp_ms + stats.duration_ms)


def checkpoint(stats: checkpoint_pb2.CheckpointStats, job_id: str,
               tasks: dict[int, int] | None = None) -> Json:
    """One checkpoint as in ``history`` (``tasks``: vertex id -> parallelism, to fill in
    the ``tasks`` object of the details endpoint)."""
    status = _CHECKPOINT_STATUS[stats.status]
    entry: Json = {
        "className": status.lower(),
        "id": stats.checkpoint_id, "status": status, "is_savepoint": stats.savepoint,
        "savepointFormat": "CANONICAL" if stats.savepoint else None,
        "trigger_timestamp": stats.trigger_timestamp_ms,
        "latest_ack_timestamp": _latest_ack(stats),
        "state_size": stats.state_size,
        "checkpointed_size": stats.incremental_size or stats.state_size,
        # weir's: of state_size, what the changelog state backend keeps as a log.
        "changelog_state_size": stats.changelog_state_size,
        "end_to_end_duration": stats.duration_ms,
        "alignment_buffered": 0, "processed_data": stats.processed_bytes,
        "persisted_data": stats.persisted_bytes, "num_subtasks": stats.total,
        "num_acknowledged_subtasks": stats.acknowledged,
        "checkpoint_type": _checkpoint_type(stats),
        "external_path": stats.external_path or None, "discarded": False,
        "alignment-duration": stats.alignment_ms}
    if stats.status == checkpoint_pb2.CheckpointStats.FAILED:
        entry["failure_timestamp"] = stats.trigger_timestamp_ms + stats.duration_ms
        entry["failure_message"] = stats.failure_message or checkpoint_pb2.\
            CheckpointFailureReason.Name(stats.failure_reason)
    entry["tasks"] = {} if tasks is None else {
        vertex_hex_id(job_id, vid): task_checkpoint(stats, vid, parallelism)
        for vid, parallelism in tasks.items()}
    return entry


def task_checkpoint(stats: checkpoint_pb2.CheckpointStats, vertex_id: int,
                    parallelism: int) -> Json:
    """One vertex's part of a checkpoint (a value of ``tasks``)."""
    subs = [s for s in stats.subtasks if s.vertex_id == vertex_id]
    acked = len(subs)
    status = _CHECKPOINT_STATUS[stats.status]
    if acked == parallelism:
        status = "COMPLETED"
    return {"id": stats.checkpoint_id, "status": status,
            "latest_ack_timestamp": max((s.metrics.ack_timestamp_ms for s in subs),
                                        default=-1),
            "state_size": sum(s.metrics.state_size for s in subs),
            "checkpointed_size": sum(s.metrics.incremental_size or s.metrics.state_size
                                     for s in subs),
            "changelog_state_size": sum(s.metrics.changelog_state_size for s in subs),
            "end_to_end_duration": max((s.metrics.ack_timestamp_ms - stats.trigger_timestamp_ms
                                        for s in subs), default=-1),
            "alignment_buffered": 0,
            "processed_data": sum(s.metrics.processed_bytes for s in subs),
            "persisted_data": sum(s.metrics.persisted_bytes for s in subs),
            "num_subtasks": parallelism, "num_acknowledged_subtasks": acked}


def subtask_checkpoints(stats: checkpoint_pb2.CheckpointStats, vertex_id: int,
                        parallelism: int) -> Json:
    """``/jobs/:jobid/checkpoints/details/:checkpointid/subtasks/:vertexid``."""
    by_index = {s.subtask_index: s for s in stats.subtasks if s.vertex_id == vertex_id}
    subtasks: list[Json] = []
    for index in range(parallelism):
        sub = by_index.get(index)
        if sub is None:
            subtasks.append({"index": index, "status": "pending_or_failed"})
            continue
        m = sub.metrics
        subtasks.append({
            "index": index, "status": "completed", "ack_timestamp": m.ack_timestamp_ms,
            "end_to_end_duration": m.ack_timestamp_ms - stats.trigger_timestamp_ms,
            "state_size": m.state_size,
            "checkpointed_size": m.incremental_size or m.state_size,
            "changelog_state_size": m.changelog_state_size,
            "checkpoint": {"sync": m.sync_duration_ms, "async": m.async_duration_ms},
            "alignment": {"buffered": 0, "processed": m.processed_bytes,
                          "persisted": m.persisted_bytes,
                          "duration": m.alignment_duration_ms},
            "start_delay": m.start_delay_ms, "unaligned_checkpoint": m.unaligned,
            "aborted": False})
    done = [s for s in subtasks if s["status"] == "completed"]
    summary = {"state_size": _stats([s["state_size"] for s in done]),
               "checkpointed_size": _stats([s["checkpointed_size"] for s in done]),
               "end_to_end_duration": _stats([s["end_to_end_duration"] for s in done]),
               "checkpoint_duration": {
                   "sync": _stats([s["checkpoint"]["sync"] for s in done]),
                   "async": _stats([s["checkpoint"]["async"] for s in done])},
               "alignment": {"duration": _stats([s["alignment"]["duration"] for s in done])},
               "start_delay": _stats([s["start_delay"] for s in done])}
    return {**task_checkpoint(stats, vertex_id, parallelism), "summary": summary,
            "subtasks": subtasks}


def checkpoints(history: dispatcher_pb2.CheckpointHistory, job_id: str,
                last_restore: jobmaster_pb2.RestoreStats | None) -> Json:
    """``/jobs/:jobid/checkpoints``: counts, summary, latest and history (newest first),
    and with the latest restore weir's local and remote bytes read."""
    all_stats = list(history.checkpoints)
    completed = [s for s in all_stats if s.status == checkpoint_pb2.CheckpointStats.COMPLETED]
    failed = [s for s in all_stats if s.status == checkpoint_pb2.CheckpointStats.FAILED]
    in_progress = [s for s in all_stats
                   if s.status == checkpoint_pb2.CheckpointStats.IN_PROGRESS]

    def latest(items: list[checkpoint_pb2.CheckpointStats]) -> Json | None:
        return checkpoint(items[-1], job_id) if items else None

    restored: Json | None = None
    if history.restored_checkpoint_id:
        restored = {"id": history.restored_checkpoint_id,
                    "restore_timestamp": history.restore_timestamp_ms,
                    "is_savepoint": False, "external_path": None}
        if last_restore is not None:
            restored.update(_restore(last_restore))
    # The history keeps the newest checkpoints; the counts are since the job began.
    num_completed = max(len(completed), history.completed_count)
    num_failed = max(len(failed), history.failed_count)
    return {
        "counts": {"restored": 1 if restored else 0,
                   "total": num_completed + num_failed + len(in_progress),
                   "in_progress": len(in_progress), "completed": num_completed,
                   "failed": num_failed},
        "summary": {
            "checkpointed_size": _stats([s.incremental_size or s.state_size
                                         for s in completed]),
            "state_size": _stats([s.state_size for s in completed]),
            "end_to_end_duration": _stats([s.duration_ms for s in completed]),
            "alignment_buffered": _stats([]),
            "processed_data": _stats([s.processed_bytes for s in completed]),
            "persisted_data": _stats([s.persisted_bytes for s in completed])},
        "latest": {"completed": latest([s for s in completed if not s.savepoint]),
                   "savepoint": latest([s for s in completed if s.savepoint]),
                   "failed": latest(failed), "restored": restored},
        "history": [checkpoint(s, job_id) for s in reversed(all_stats)]}


def subtask_metrics(vertex_details: jobmaster_pb2.VertexDetails) -> dict[str, float]:
    """A vertex's metrics by Flink's names, one per subtask (``0.numRecordsIn``); the
    watermarks only of subtasks that have them."""
    values: dict[str, float] = {}
    for sub in vertex_details.subtasks:
        m, i = sub.metrics, sub.subtask_index
        values.update({f"{i}.numRecordsIn": m.records_in, f"{i}.numRecordsOut": m.records_out,
                       f"{i}.numBytesIn": m.bytes_in, f"{i}.numBytesOut": m.bytes_out,
                       f"{i}.backPressuredTimeMsPerSecond": m.back_pressured_ms_per_s,
                       f"{i}.busyTimeMsPerSecond": m.busy_ms_per_s,
                       f"{i}.idleTimeMsPerSecond": m.idle_ms_per_s})
        if m.HasField("input_watermark"):
            values[f"{i}.currentInputWatermark"] = m.input_watermark
        if m.HasField("output_watermark"):
            values[f"{i}.currentOutputWatermark"] = m.output_watermark
    return values


#: The aggregations of Flink's ``.../subtasks/metrics?agg=``.
AGGREGATIONS = ("min", "max", "avg", "sum")


def aggregated_metrics(values: dict[str, float], get: str | None,
                       agg: str | None) -> list[Json]:
    """Flink's ``/jobs/:jobid/vertices/:vertexid/subtasks/metrics`` from per-subtask values
    (``0.busyTimeMsPerSecond``): without ``get`` the metric names, with it each named
    metric's ``agg`` aggregations over the subtasks that have it (all four by default).
    Raises ValueError naming an unknown aggregation.

    Example:
        >>> values = {"0.busyTimeMsPerSecond": 100.0, "1.busyTimeMsPerSecond": 900.0}
        >>> aggregated_metrics(values, None, None)
        [{'id': 'busyTimeMsPerSecond'}]
        >>> aggregated_metrics(values, "busyTimeMsPerSecond,zzz", "max,avg")
        [{'id': 'busyTimeMsPerSecond', 'max': 900.0, 'avg': 500.0}]
    """
    by_name: dict[str, list[float]] = {}
    for key, value in values.items():
        by_name.setdefault(key.split(".", 1)[1], []).append(value)
    if get is None:
        return [{"id": name} for name in by_name]
    wanted = [a.strip() for a in (agg or ",".join(AGGREGATIONS)).split(",") if a.strip()]
    unknown = [a for a in wanted if a not in AGGREGATIONS]
    if unknown:
        msg = (f"unknown aggregation {unknown[0]!r}: use {', '.join(AGGREGATIONS)}")
        raise ValueError(msg)
    answer: list[Json] = []
    for name in (n.strip() for n in get.split(",")):
        if name not in by_name:
            continue
        xs = by_name[name]
        computed = {"min": min(xs), "max": max(xs), "avg": sum(xs) / len(xs), "sum": sum(xs)}
        answer.append({"id": name, **{a: computed[a] for a in wanted}})
    return answer


def metric_values(values: dict[str, float], get: str | None) -> list[Json]:
    """Flink's metrics answer: without ``?get`` the available ids, with it the named ones
    (values as strings, unknown ids left out).

    Example:
        >>> metric_values({"a": 1, "b": 2}, None)
        [{'id': 'a'}, {'id': 'b'}]
        >>> metric_values({"a": 1, "b": 2}, "b,c")
        [{'id': 'b', 'value': '2'}]
    """
    if get is None:
        return [{"id": name} for name in values]
    wanted = [name.strip() for name in get.split(",") if name.strip()]
    return [{"id": name, "value": str(values[name])} for name in wanted if name in values]


def backpressure_level(ratio: float) -> str:
    """Flink's level of a back-pressured share of time.

    Example:
        >>> backpressure_level(0.05), backpressure_level(0.3), backpressure_level(0.9)
        ('ok', 'low', 'high')
    """
    if ratio <= _LOW:
        return "ok"
    return "low" if ratio <= _HIGH else "high"


def backpressure(vertex_details: jobmaster_pb2.VertexDetails, now_ms: int) -> Json:
    """``/jobs/:jobid/vertices/:vertexid/backpressure`` from the subtasks' time metrics
    (weir measures back pressure continuously: no sampling to wait for)."""
    subtasks: list[Json] = []
    ratios: list[float] = []
    for sub in vertex_details.subtasks:
        m = sub.metrics
        ratio = m.back_pressured_ms_per_s / 1000
        ratios.append(ratio)
        subtasks.append({"subtask": sub.subtask_index, "attempt-number": 0,
                         "backpressure-level": backpressure_level(ratio), "ratio": ratio,
                         "idleRatio": m.idle_ms_per_s / 1000,
                         "busyRatio": m.busy_ms_per_s / 1000})
    worst = max(ratios, default=0.0)
    return {"status": "ok", "backpressure-level": backpressure_level(worst),
            "end-timestamp": now_ms, "subtasks": subtasks}


def task_manager(info: dispatcher_pb2.TaskExecutorInfo) -> Json:
    """One entry of ``/taskmanagers``, and weir's: addresses, pid, metrics URL, when it
    registered (``registered-at``, epoch ms), how often its resource id registered (more
    than once: it restarted or reconnected), the tasks it runs and the tasks that failed
    on it."""
    data_port = int(info.data_address.rsplit(":", 1)[-1]) if ":" in info.data_address else -1
    return {"id": info.resource_id, "path": info.rpc_address, "dataPort": data_port,
            "jmxPort": -1, "slotsNumber": info.slots_total, "freeSlots": info.slots_free,
            "totalResource": {}, "freeResource": {}, "hardware": {},
            "memoryConfiguration": {}, "data-address": info.data_address,
            "metrics-url": info.metrics_url, "pid": info.pid,
            "registered-at": info.registered_at_ms or -1,
            "registrations": info.registrations, "tasks-running": info.tasks_running,
            "task-failures": info.task_failures}


def overview(cluster: dispatcher_pb2.ClusterOverview,
             jobs: Sequence[jobmaster_pb2.JobSummary], version: str) -> Json:
    """``/overview``: TaskExecutors, slots and jobs by state."""
    states = [job_state(j.status) for j in jobs]
    return {"taskmanagers": len(cluster.task_executors), "slots-total": cluster.slots_total,
            "slots-available": cluster.slots_free,
            "jobs-running": sum(s not in ("FINISHED", "CANCELED", "FAILED") for s in states),
            "jobs-finished": states.count("FINISHED"),
            "jobs-cancelled": states.count("CANCELED"), "jobs-failed": states.count("FAILED"),
            "flink-version": version, "flink-commit": ""}


#: Parts of a configuration key that mark its value secret, as Flink's
#: ``GlobalConfiguration.isSensitive`` (a key containing one, ignoring case); weir also
#: hides its own secrets (``weir.core.secrets.SECRET_KEYS``) and any key ending in ``key``
#: (``s3.access-key``, ``ssl.private-key``).
SENSITIVE_KEY_PARTS = ("password", "secret", "fs.azure.account.key", "apikey", "api-key",
                       "auth-params", "service-key", "token", "basic-auth", "jaas.config",
                       "http-headers")
#: What a secret value is shown as (Flink's ``HIDDEN_CONTENT``).
HIDDEN_CONTENT = "******"


def is_sensitive(key: str) -> bool:
    """Whether the value of configuration ``key`` is secret.

    Example:
        >>> [is_sensitive(k) for k in ("s3.secret-key", "security.auth.token",
        ...                            "s3.access-key", "my.Password", "state.backend.type")]
        [True, True, True, True, False]
    """
    lower = key.lower()
    return lower in SECRET_KEYS or lower.endswith("key") or \
        any(part in lower for part in SENSITIVE_KEY_PARTS)


def hide_sensitive(config: dict[str, str]) -> dict[str, str]:
    """``config`` with every secret value replaced by ``******``, keys sorted.

    Example:
        >>> hide_sensitive({"s3.secret-key": "x", "a": "1"})
        {'a': '1', 's3.secret-key': '******'}
    """
    return {k: HIDDEN_CONTENT if is_sensitive(k) else v for k, v in sorted(config.items())}


def job_config(graph: jobgraph_pb2.JobGraph, batch: bool, restart_strategy: str) -> Json:
    """``/jobs/:jobid/config`` (Flink's JobConfigInfo): the execution mode (``BATCH`` with
    blocking exchanges, else ``PIPELINED``), the restart strategy in words, the job's
    parallelism (the largest of its vertices', so a rescale shows), and the job's own
    configuration as ``user-config``, secrets hidden. weir has no object-reuse setting:
    ``object-reuse-mode`` is false, Flink's default."""
    return {"jid": graph.job_id, "name": graph.name, "execution-config": {
        "execution-mode": "BATCH" if batch else "PIPELINED",
        "restart-strategy": restart_strategy,
        "job-parallelism": max((v.parallelism for v in graph.vertices), default=-1),
        "object-reuse-mode": False,
        "user-config": hide_sensitive(dict(graph.config))}}
