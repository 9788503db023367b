"""The TaskExecutor's metric collectors read a task through its public accessors: also while
the task is not set up yet (a scrape during INITIALIZING), when it has no gates, writers or
chain to read. No sockets, no threads: the task is never started."""

from __future__ import annotations

from weir.core.config import Configuration
from weir.core.records import MIN_WATERMARK
from weir.proto import jobgraph_pb2
from weir.taskexecutor.daemon import TaskExecutor
from weir.taskexecutor.task import Task


def _unstarted_task(inputs: int = 0) -> Task:
    tdd = jobgraph_pb2.TaskDeploymentDescriptor(
        job_id="0" * 32, attempt_id="a-1", task_name="Map", subtask_index=0, parallelism=1,
        input_gates=[jobgraph_pb2.InputGateDeployment() for _ in range(inputs)])
    # Neither the shuffle nor the gateway is touched before the task thread runs.
    return Task(tdd, shuffle=None, gateway=None, configuration=Configuration(),  # type: ignore[arg-type]
                on_state=lambda task, state, error: None)


def test_a_task_not_set_up_has_no_gate_writer_or_chain_metrics() -> None:
    task = _unstarted_task()
    assert task.input_metrics() == []
    assert task.output_metrics() == []
    assert task.late_records_dropped() is None


def test_the_taskexecutor_reports_zeros_for_a_task_not_set_up() -> None:
    te = TaskExecutor("127.0.0.1:1", Configuration(), num_slots=1)
    task = _unstarted_task()
    metrics = te._task_metrics(task)
    assert (metrics.attempt_id, metrics.bytes_in, metrics.bytes_out) == ("a-1", 0, 0)
    assert dict(TaskExecutor._pool_metrics(task)) == {
        "outPoolUsage": 0.0, "inPoolUsage": 0.0, "numBuffersOut": 0.0,
        "numBuffersInRemote": 0.0, "inputQueueBytes": 0.0, "debloatedBufferSize": 0.0,
        "estimatedTimeToConsumeBuffersMs": 0.0}
    assert TaskExecutor._event_time_metrics(task) == []


def test_watermarks_reach_the_jobmaster_as_flink_reports_them() -> None:
    te = TaskExecutor("127.0.0.1:1", Configuration(), num_slots=1)
    source = _unstarted_task()
    metrics = te._task_metrics(source)
    # A task without inputs has no input watermark; nothing sent yet, no output watermark.
    assert not metrics.HasField("input_watermark")
    assert not metrics.HasField("output_watermark")
    source.counters.output_watermark = 1_700_000_000_000
    assert te._task_metrics(source).output_watermark == 1_700_000_000_000

    keyed = _unstarted_task(inputs=1)
    assert te._task_metrics(keyed).input_watermark == MIN_WATERMARK  # none arrived yet
    keyed.counters.input_watermark = 1_700_000_000_123
    assert te._task_metrics(keyed).input_watermark == 1_700_000_000_123
