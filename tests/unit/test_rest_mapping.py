"""weir's messages in Flink's REST JSON shapes (the pure functions of rest.mapping)."""

from __future__ import annotations

import pytest

from weir.jobmaster.rest import mapping
from weir.proto import checkpoint_pb2, common_pb2, dispatcher_pb2, jobgraph_pb2, jobmaster_pb2

JOB = "ab" * 16
Stats = checkpoint_pb2.CheckpointStats


def _details() -> jobmaster_pb2.JobDetails:
    details = jobmaster_pb2.JobDetails(summary=jobmaster_pb2.JobSummary(
        job_id=JOB, name="wordcount", status=common_pb2.JOB_RUNNING, start_time_ms=1_000,
        tasks_total=3, tasks_running=2, tasks_finished=1, restarts=2))
    source = details.vertices.add(vertex_id=1, name="Source", parallelism=2)
    source.subtasks.add(subtask_index=0, state=common_pb2.RUNNING,
                        metrics=jobmaster_pb2.TaskMetrics(records_out=5, bytes_out=50,
                                                          back_pressured_ms_per_s=600))
    source.subtasks.add(subtask_index=1, state=common_pb2.FINISHED,
                        metrics=jobmaster_pb2.TaskMetrics(records_out=7))
    sink = details.vertices.add(vertex_id=2, name="Sink", parallelism=1)
    sink.subtasks.add(subtask_index=0, state=common_pb2.FINISHED,
                      metrics=jobmaster_pb2.TaskMetrics(records_in=12))
    details.last_restore.CopyFrom(jobmaster_pb2.RestoreStats(
        checkpoint_id=4, duration_ms=30, local_bytes=100, remote_bytes=20))
    details.last_change.CopyFrom(jobmaster_pb2.JobChange(kind="rescale", checkpoint_id=5,
                                                         downtime_ms=80))
    return details


def _graph() -> jobgraph_pb2.JobGraph:
    graph = jobgraph_pb2.JobGraph(job_id=JOB, name="wordcount")
    graph.vertices.add(id=1, name="Source", parallelism=2)
    graph.vertices.add(id=2, name="Sink", parallelism=1, inputs=[
        jobgraph_pb2.JobEdge(source_vertex=1, partitioner=common_pb2.HASH)])
    return graph


def test_job_details_have_flink_fields_and_weir_extras() -> None:
    job = mapping.job_details(_details(), _graph(), now_ms=5_000)
    assert (job["jid"], job["state"], job["duration"], job["end-time"]) == \
        (JOB, "RUNNING", 4_000, -1)
    source, sink = job["vertices"]
    assert source["id"] == mapping.vertex_hex_id(JOB, 1) and source["vertex-id"] == 1
    assert (source["status"], source["parallelism"]) == ("RUNNING", 2)
    assert (source["tasks"]["RUNNING"], source["tasks"]["FINISHED"]) == (1, 1)
    assert source["metrics"]["write-records"] == 12 and source["metrics"]["write-bytes"] == 50
    assert sink["status"] == "FINISHED" and sink["metrics"]["read-records"] == 12
    assert job["status-counts"]["RUNNING"] == 1 and job["status-counts"]["FINISHED"] == 1
    [edge] = job["plan"]["plan"]["nodes"][1]["inputs"]
    assert (edge["id"], edge["ship_strategy"]) == (source["id"], "HASH")
    assert job["last-restore"] == {"checkpoint-id": 4, "duration": 30, "local-bytes": 100,
                                   "remote-bytes": 20}
    assert (job["last-change"]["kind"], job["last-change"]["downtime"]) == ("rescale", 80)
    assert job["restarts"] == 2


def test_job_states_are_flinks() -> None:
    assert [mapping.job_state(s) for s in (common_pb2.JOB_RUNNING, common_pb2.JOB_FINISHED,
                                           common_pb2.JOB_CANCELED, common_pb2.JOB_FAILED,
                                           common_pb2.JOB_RESTARTING)] == \
        ["RUNNING", "FINISHED", "CANCELED", "FAILED", "RESTARTING"]
    assert mapping.aggregate_state(["FINISHED", "FAILED", "RUNNING"]) == "FAILED"
    assert mapping.aggregate_state([]) == "CREATED"


def test_vertex_ids_are_stable_hex_and_both_forms_are_accepted() -> None:
    hex_id = mapping.vertex_hex_id(JOB, 7)
    assert len(hex_id) == 32 and int(hex_id, 16) >= 0
    assert hex_id != mapping.vertex_hex_id(JOB, 8)
    assert mapping.parse_vertex_id(JOB, hex_id.upper(), [7, 8]) == 7
    assert mapping.parse_vertex_id(JOB, "8", [7, 8]) == 8
    assert mapping.parse_vertex_id(JOB, "9", [7, 8]) is None
    assert mapping.parse_vertex_id(JOB, "x" * 32, [7, 8]) is None


def _history() -> dispatcher_pb2.CheckpointHistory:
    history = dispatcher_pb2.CheckpointHistory(restored_checkpoint_id=4,
                                               restore_timestamp_ms=900)
    first = history.checkpoints.add(checkpoint_id=5, status=Stats.COMPLETED, total=3,
                                    acknowledged=3, trigger_timestamp_ms=1_000,
                                    duration_ms=40, state_size=300)
    for vertex_id, index in ((1, 0), (1, 1), (2, 0)):
        first.subtasks.add(vertex_id=vertex_id, subtask_index=index,
                           metrics=checkpoint_pb2.CheckpointTaskMetrics(
                               ack_timestamp_ms=1_000 + 10 * (index + vertex_id),
                               state_size=100, sync_duration_ms=2))
    history.checkpoints.add(checkpoint_id=6, status=Stats.FAILED, trigger_timestamp_ms=2_000,
                            failure_message="expired")
    history.checkpoints.add(checkpoint_id=7, status=Stats.COMPLETED, savepoint=True,
                            external_path="file:///sp/savepoint-7")
    history.checkpoints.add(checkpoint_id=8, status=Stats.IN_PROGRESS, total=3)
    return history


def test_checkpoints_counts_latest_and_history_newest_first() -> None:
    restore = jobmaster_pb2.RestoreStats(checkpoint_id=4, local_bytes=10, remote_bytes=2)
    result = mapping.checkpoints(_history(), JOB, restore)
    assert result["counts"] == {"restored": 1, "total": 4, "in_progress": 1, "completed": 2,
                                "failed": 1}
    assert [c["id"] for c in result["history"]] == [8, 7, 6, 5]
    assert [c["status"] for c in result["history"]] == \
        ["IN_PROGRESS", "COMPLETED", "FAILED", "COMPLETED"]
    latest = result["latest"]
    assert latest["completed"]["id"] == 5 and latest["savepoint"]["id"] == 7
    assert latest["savepoint"]["checkpoint_type"] == "SAVEPOINT"
    assert latest["failed"]["failure_message"] == "expired"
    assert (latest["restored"]["id"], latest["restored"]["local-bytes"]) == (4, 10)
    assert result["summary"]["state_size"]["max"] == 300


def test_checkpoint_subtasks_show_pending_ones() -> None:
    stats = _history().checkpoints[0]
    detail = mapping.checkpoint(stats, JOB, {1: 2, 2: 1})
    assert detail["tasks"][mapping.vertex_hex_id(JOB, 1)]["num_acknowledged_subtasks"] == 2
    stats.status = Stats.IN_PROGRESS  # the third subtask has not acknowledged yet
    subtasks = mapping.subtask_checkpoints(stats, 1, 3)
    assert [s["status"] for s in subtasks["subtasks"]] == \
        ["completed", "completed", "pending_or_failed"]
    assert subtasks["subtasks"][1]["end_to_end_duration"] == 20
    assert subtasks["num_acknowledged_subtasks"] == 2 and subtasks["status"] == "IN_PROGRESS"


def test_exceptions_root_and_history() -> None:
    details = _details()
    assert mapping.exceptions(details)["root-exception"] is None
    details.restart_causes.add(reason=common_pb2.TASK_EXECUTOR_LOST, message="lost te-1",
                               task="Source (1/2)")
    details.failure.CopyFrom(common_pb2.ErrorInfo(
        reason=common_pb2.USER_CODE_ERROR, message="boom", exception_class="ValueError",
        traceback="Traceback ...\nValueError: boom"))
    result = mapping.exceptions(details)
    assert result["root-exception"] == "Traceback ...\nValueError: boom"
    entries = result["exceptionHistory"]["entries"]
    assert [e["exceptionName"] for e in entries] == ["ValueError", "TASK_EXECUTOR_LOST"]
    assert entries[1]["taskName"] == "Source (1/2)"
    # A running job's failure is its last restart's cause: one entry, not two.
    details.failure.CopyFrom(details.restart_causes[-1])
    entries = mapping.exceptions(details)["exceptionHistory"]["entries"]
    assert [e["exceptionName"] for e in entries] == ["TASK_EXECUTOR_LOST"]


def test_backpressure_and_metrics() -> None:
    source = _details().vertices[0]
    result = mapping.backpressure(source, now_ms=1)
    assert result["backpressure-level"] == "high"
    assert [s["backpressure-level"] for s in result["subtasks"]] == ["high", "ok"]
    values = mapping.subtask_metrics(source)
    assert values["1.numRecordsOut"] == 7
    assert mapping.metric_values(values, "0.numRecordsOut,zzz") == \
        [{"id": "0.numRecordsOut", "value": "5"}]


def test_jobs_overview_entries_carry_what_flinks_client_requires() -> None:
    # Flink's client reads each entry as its JobDetails, whose pending-operators is a
    # required int: without it `flink list` fails to parse the answer.
    entry = mapping.job_summary(_details().summary, now_ms=5_000)
    assert entry["pending-operators"] == 0
    assert (entry["jid"], entry["name"], entry["state"], entry["duration"]) == \
        (JOB, "wordcount", "RUNNING", 4_000)
    assert entry["tasks"]["total"] == 3 and entry["tasks"]["running"] == 2


def test_savepoint_format_and_trigger_id_of_a_request() -> None:
    assert mapping.savepoint_format(None) == checkpoint_pb2.SAVEPOINT_CANONICAL
    assert mapping.savepoint_format("CANONICAL") == checkpoint_pb2.SAVEPOINT_CANONICAL
    assert mapping.savepoint_format("NATIVE") == checkpoint_pb2.SAVEPOINT_NATIVE
    for bad in ("FULL", "", 1, True):
        assert mapping.savepoint_format(bad) is None
    assert mapping.trigger_id("0123456789ABCDEF" * 2) == "0123456789abcdef" * 2
    for bad in ("0" * 31, "g" * 32, None, 12):
        assert mapping.trigger_id(bad) is None


def _timed_vertex() -> jobmaster_pb2.VertexDetails:
    """Subtask 0 runs (deployed at 1_100), subtask 1 finished at 3_000, subtask 2 is not
    scheduled yet; subtask 0 has a watermark, subtask 1 none yet, subtask 2 no inputs."""
    vertex = jobmaster_pb2.VertexDetails(vertex_id=3, name="Window", parallelism=3)
    vertex.subtasks.add(
        subtask_index=0, state=common_pb2.RUNNING, attempt_number=2, resource_id="te-1",
        state_timestamps={common_pb2.CREATED: 1_000, common_pb2.SCHEDULED: 1_050,
                          common_pb2.DEPLOYING: 1_100, common_pb2.INITIALIZING: 1_150,
                          common_pb2.RUNNING: 1_200},
        metrics=jobmaster_pb2.TaskMetrics(input_watermark=1_700_000_000_000,
                                          output_watermark=1_699_999_999_000))
    vertex.subtasks.add(
        subtask_index=1, state=common_pb2.FINISHED, resource_id="te-2",
        state_timestamps={common_pb2.CREATED: 900, common_pb2.SCHEDULED: 950,
                          common_pb2.DEPLOYING: 1_000, common_pb2.RUNNING: 1_300,
                          common_pb2.FINISHED: 3_000},
        metrics=jobmaster_pb2.TaskMetrics(input_watermark=-(1 << 63)))
    vertex.subtasks.add(subtask_index=2, state=common_pb2.CREATED,
                        state_timestamps={common_pb2.CREATED: 1_000})
    return vertex


def test_subtask_times_per_state_and_duration_from_scheduling() -> None:
    times = mapping.subtask_times(JOB, _timed_vertex(), now_ms=5_000)
    assert (times["id"], times["name"], times["now"]) == \
        (mapping.vertex_hex_id(JOB, 3), "Window", 5_000)
    running, finished, created = times["subtasks"]
    assert running["timestamps"]["RUNNING"] == 1_200 and running["timestamps"]["FAILED"] == 0
    assert set(running["timestamps"]) == set(mapping.TASK_STATES)
    assert (running["duration"], running["host"]) == (5_000 - 1_050, "te-1")
    assert finished["duration"] == 3_000 - 950
    assert (created["duration"], created["host"]) == (-1, None)


def test_vertex_and_subtask_times_are_flinks() -> None:
    vertex = _timed_vertex()
    running, finished, created = (mapping.subtask(s, now_ms=5_000) for s in vertex.subtasks)
    assert (running["start-time"], running["end-time"], running["duration"]) == \
        (1_100, -1, 3_900)
    assert running["attempt"] == 2 and running["start_time"] == 1_100
    assert (finished["start-time"], finished["end-time"], finished["duration"]) == \
        (1_000, 3_000, 2_000)
    assert (created["start-time"], created["end-time"], created["duration"]) == (-1, -1, -1)
    # The vertex: from the earliest deployment; no end while a subtask is not final.
    assert mapping.vertex_times(vertex.subtasks, 5_000) == (1_000, -1, 4_000)
    del vertex.subtasks[0]
    del vertex.subtasks[-1]
    assert mapping.vertex_times(vertex.subtasks, 5_000) == (1_000, 3_000, 2_000)
    details = _details()
    details.vertices[1].CopyFrom(vertex)
    job = mapping.job_details(details, _graph(), now_ms=5_000)
    assert (job["vertices"][1]["start-time"], job["vertices"][1]["end-time"]) == (1_000, 3_000)
    assert job["vertices"][0]["start-time"] == -1  # never deployed (no timestamps)


def test_watermarks_as_flink_serves_them() -> None:
    vertex = _timed_vertex()
    assert mapping.watermarks(vertex) == [
        {"id": "0.currentInputWatermark", "value": "1700000000000"},
        {"id": "1.currentInputWatermark", "value": str(-(1 << 63))}]
    values = mapping.metric_values(mapping.subtask_metrics(vertex),
                                   "0.currentInputWatermark,0.currentOutputWatermark,"
                                   "2.currentInputWatermark")
    assert values == [{"id": "0.currentInputWatermark", "value": "1700000000000"},
                      {"id": "0.currentOutputWatermark", "value": "1699999999000"}]
    assert {"id": "1.currentInputWatermark"} in mapping.metric_values(
        mapping.subtask_metrics(vertex), None)


def test_job_config_hides_secrets() -> None:
    graph = _graph()
    graph.config.update({"s3.secret-key": "SK", "s3.access-key": "AK",
                         "security.auth.token": "t0k3n", "db.Password": "pw",
                         "state.backend.type": "rocksdb"})
    config = mapping.job_config(graph, batch=False, restart_strategy="Restart deactivated.")
    assert (config["jid"], config["name"]) == (JOB, "wordcount")
    execution = config["execution-config"]
    assert execution["execution-mode"] == "PIPELINED"
    assert (execution["job-parallelism"], execution["object-reuse-mode"]) == (2, False)
    assert execution["restart-strategy"] == "Restart deactivated."
    assert execution["user-config"] == {
        "db.Password": "******", "s3.access-key": "******", "s3.secret-key": "******",
        "security.auth.token": "******", "state.backend.type": "rocksdb"}
    assert "SK" not in str(config) and "t0k3n" not in str(config)
    assert mapping.job_config(graph, True, "")["execution-config"]["execution-mode"] == \
        "BATCH"


def test_task_manager_restarts_failures_and_tasks() -> None:
    info = dispatcher_pb2.TaskExecutorInfo(
        resource_id="te-1", rpc_address="127.0.0.1:7000", data_address="127.0.0.1:7001",
        slots_total=2, slots_free=1, registered_at_ms=1_234, registrations=2,
        tasks_running=3, task_failures=1)
    entry = mapping.task_manager(info)
    assert (entry["id"], entry["dataPort"], entry["slotsNumber"]) == ("te-1", 7001, 2)
    assert (entry["registered-at"], entry["registrations"], entry["tasks-running"],
            entry["task-failures"]) == (1_234, 2, 3, 1)


def test_subtask_metrics_aggregate_as_flinks_subtasks_metrics_endpoint() -> None:
    vertex = _timed_vertex()
    for sub, busy in zip(vertex.subtasks, (200, 800, 500), strict=False):
        sub.metrics.busy_ms_per_s = busy
    del vertex.subtasks[3:]
    values = mapping.subtask_metrics(vertex)
    names = {entry["id"] for entry in mapping.aggregated_metrics(values, None, None)}
    assert {"busyTimeMsPerSecond", "numRecordsIn", "currentInputWatermark"} <= names
    assert mapping.aggregated_metrics(values, "busyTimeMsPerSecond", None) == [
        {"id": "busyTimeMsPerSecond", "min": 200, "max": 800, "avg": 500.0, "sum": 1500}]
    # Only the subtasks that have a watermark count.
    assert mapping.aggregated_metrics(values, "currentInputWatermark", "min") == [
        {"id": "currentInputWatermark", "min": -(1 << 63)}]
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        mapping.aggregated_metrics(values, "busyTimeMsPerSecond", "median")


def test_vertex_carries_its_busiest_subtask() -> None:
    vertex = _timed_vertex()
    del vertex.subtasks[2:]
    vertex.subtasks[0].metrics.busy_ms_per_s = 100
    vertex.subtasks[1].metrics.busy_ms_per_s = 900
    vertex.subtasks[1].metrics.back_pressured_ms_per_s = 50
    metrics = mapping._vertex_metrics(vertex.subtasks)
    assert (metrics["max-busy-time"], metrics["accumulated-busy-time"]) == (900, 500)
    assert metrics["max-backpressured-time"] == 50


def test_checkpoints_split_the_changelog_from_the_materialized_state() -> None:
    stats = _history().checkpoints[0]
    stats.changelog_state_size = 120
    for sub, log in zip(stats.subtasks, (50, 70, 0), strict=True):
        sub.metrics.changelog_state_size = log
    detail = mapping.checkpoint(stats, JOB, {1: 2, 2: 1})
    assert (detail["state_size"], detail["changelog_state_size"]) == (300, 120)
    tasks = detail["tasks"]
    assert tasks[mapping.vertex_hex_id(JOB, 1)]["changelog_state_size"] == 120
    assert tasks[mapping.vertex_hex_id(JOB, 2)]["changelog_state_size"] == 0
    subtasks = mapping.subtask_checkpoints(stats, 1, 2)["subtasks"]
    assert [s["changelog_state_size"] for s in subtasks] == [50, 70]
