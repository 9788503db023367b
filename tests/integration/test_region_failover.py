"""Region failover on real processes: a job of two independent keyed pipelines, one task
fails once; with ``region`` only its pipeline restarts (the other keeps its attempts), with
``full`` every task restarts. Both commit exactly the expected output."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import job_details, poll, write_job
from tests.support.exactly_once import (
    committed_output,
    diff,
    running_counts,
    running_with_checkpoint_after,
    status_name,
    wait_ended,
)

JOB = '''
import os
import sys
import time

from weir import FileSink, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

OUT, N, TRIGGER = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def throttle(n):
    if n % 100 == 0:
        time.sleep(0.02)
    return n


class Count(KeyedProcessFunction):
    def __init__(self, fails):
        self.fails = fails

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        if self.fails:
            try:
                os.rename(TRIGGER, TRIGGER + ".used")  # one subtask fails, once
            except FileNotFoundError:
                pass
            else:
                raise RuntimeError("induced failure")
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield (value % 7, count)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
for name, fails in (("a", True), ("b", False)):
    (env.from_sequence(0, N - 1).name(f"source {name}").map(throttle).name(f"map {name}")
        .key_by(lambda n: n % 7).process(Count(fails)).name(f"count {name}")
        .sink_to(FileSink(os.path.join(OUT, name), format="json")).name(f"sink {name}"))
env.execute("two pipelines")
'''

N = 12_000


def attempts(details: Any, pipeline: str) -> dict[tuple[str, int], str]:
    return {(v.name, s.subtask_index): s.attempt_id for v in details.vertices
            if v.name.endswith(f" {pipeline}") for s in v.subtasks}


@pytest.mark.parametrize("strategy", ["region", pytest.param("full", marks=pytest.mark.extended)])
def test_a_task_failure_restarts_its_region_only(cluster_factory, tmp_path, strategy):
    cluster = cluster_factory(2, 2)
    out, trigger = tmp_path / "out", tmp_path / "fail-now"
    job = write_job(tmp_path, JOB, "two_pipelines.py")
    config = {"execution.checkpointing.interval": "300 ms",
              "restart-strategy.type": "fixed-delay",
              "restart-strategy.fixed-delay.attempts": "3",
              "restart-strategy.fixed-delay.delay": "100 ms",
              "jobmanager.execution.failover-strategy": strategy}
    result = cluster.weir("run", "--detached", *(f"-D{k}={v}" for k, v in config.items()),
                          str(job), str(out), str(N), str(trigger))
    assert result.returncode == 0, result.stderr + result.stdout
    job_id = result.stdout.strip().splitlines()[-1]

    before = running_with_checkpoint_after(cluster, job_id, 0, 120)
    assert status_name(before) == "RUNNING", before.failure.message
    trigger.touch()
    restarted = poll(lambda: (d := job_details(cluster, job_id)).summary.restarts >= 1 and d,
                     60, interval=0.1, what="the job to restart after the induced failure")
    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    assert final.summary.restarts == 1
    assert "induced failure" in restarted.restart_causes[-1].message

    b_kept = attempts(final, "b") == attempts(before, "b")
    a_kept = {k: v for k, v in attempts(final, "a").items() if attempts(before, "a")[k] == v}
    assert not a_kept, f"tasks of the failed pipeline kept their attempts: {a_kept}"
    assert b_kept == (strategy == "region"), (attempts(before, "b"), attempts(final, "b"))
    expected = running_counts(N, 7)
    for pipeline in ("a", "b"):
        got = committed_output(out / pipeline)
        assert got == expected, f"pipeline {pipeline}: {diff(expected, got)}"
