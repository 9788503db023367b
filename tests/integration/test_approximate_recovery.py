"""Approximate task-local recovery on real processes
(``jobmanager.execution.failover-strategy: approximate``): a failed sink-side task restarts
alone while its producers keep running; its input is processed at most once.

The job: a source of ``0..N-1`` feeds, by key, a keyed task that writes ``[subtask, n]``
through the transactional FileSink. The checks, computed from the input alone:

* the producers keep their attempts; only the failed keyed subtask gets a new one;
* no number is committed twice, and none that was not in the input;
* every number of the keys of the keyed subtask that did not fail is committed (nothing of
  the running part of the job is lost); what the failed one lost is reported.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import write_job
from tests.support.exactly_once import (
    running_with_checkpoint_after,
    status_name,
    wait_ended,
)

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

JOB = '''
import os
import sys
import time

from weir import FileSink, KeyedProcessFunction, StreamExecutionEnvironment

OUT, N, TRIGGER, SOURCES = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
KEYS = 7


def throttle(n):
    if n % 100 == 0:
        time.sleep(0.03)
    return n


class Tag(KeyedProcessFunction):
    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value, ctx):
        if self.subtask == 1 and TRIGGER:
            try:
                os.rename(TRIGGER, TRIGGER + ".used")  # fails once
            except FileNotFoundError:
                pass
            else:
                raise RuntimeError("induced failure")
        yield (self.subtask, value)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
(env.from_sequence(0, N - 1).set_parallelism(SOURCES).name("source")
    .map(throttle).set_parallelism(SOURCES).name("throttle")
    .key_by(lambda n: n % KEYS).process(Tag()).name("tag")
    .sink_to(FileSink(OUT, format="json")).name("sink"))
env.execute("approximate")
'''

N = 12_000
KEYS = 7
CONFIG = {"execution.checkpointing.interval": "300 ms",
          "restart-strategy.type": "fixed-delay",
          "restart-strategy.fixed-delay.attempts": "3",
          "restart-strategy.fixed-delay.delay": "100 ms",
          "jobmanager.execution.failover-strategy": "approximate"}


def committed(directory: Path) -> list[tuple[int, int]]:
    out = []
    for part in sorted(directory.glob("part-*")):
        out.extend(tuple(json.loads(line)) for line in part.read_text().splitlines())
    return out  # type: ignore[return-value]


def attempts(details: Any) -> dict[tuple[str, int], str]:
    return {(v.name, s.subtask_index): s.attempt_id for v in details.vertices
            for s in v.subtasks}


def submit(cluster: Any, tmp_path: Path, trigger: Path | str, sources: int) -> str:
    job = write_job(tmp_path, JOB, "approximate.py")
    result = cluster.weir("run", "--detached", *(f"-D{k}={v}" for k, v in CONFIG.items()),
                          str(job), str(tmp_path / "out"), str(N), str(trigger), str(sources))
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout.strip().splitlines()[-1]


def finish(cluster: Any, job_id: str) -> Any:
    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    assert final.summary.restarts == 1
    return final


def check_output(out: Path, failed: int) -> int:
    """At most once for the ``failed`` subtask, exactly once for the other; returns the
    loss."""
    records = committed(out)
    numbers = Counter(n for _, n in records)
    duplicated = {n: c for n, c in numbers.items() if c > 1}
    assert not duplicated, f"{len(duplicated)} numbers committed twice, e.g. {list(duplicated)[:5]}"
    assert set(numbers) <= set(range(N))
    kept_keys = {n % KEYS for subtask, n in records if subtask != failed}
    kept_expected = {n for n in range(N) if n % KEYS in kept_keys}
    missing = kept_expected - set(numbers)
    assert not missing, f"the subtask that kept running lost {len(missing)} records"
    assert any(subtask == failed for subtask, _ in records), "the restarted subtask wrote nothing"
    lost = N - len(numbers)
    print(f"approximate recovery lost {lost} of {N} records (all of the restarted subtask)")
    return lost


def test_a_failed_sink_side_task_restarts_alone_and_its_producers_keep_running(
        cluster_factory, tmp_path):
    cluster = cluster_factory(2, 2)
    trigger = tmp_path / "fail-now"
    job_id = submit(cluster, tmp_path, trigger, sources=2)
    before = running_with_checkpoint_after(cluster, job_id, 0, 120)
    assert status_name(before) == "RUNNING", before.failure.message
    trigger.touch()
    final = finish(cluster, job_id)
    assert "induced failure" in final.restart_causes[-1].message
    changed = {k for k, v in attempts(final).items() if attempts(before)[k] != v}
    assert {name for name, _ in changed} and all("tag" in name for name, _ in changed), changed
    assert [index for _, index in changed] == [1], changed
    check_output(tmp_path / "out", failed=1)


def test_a_killed_taskexecutor_holding_only_a_sink_side_task_restarts_that_task_alone(
        cluster_factory, tmp_path):
    # One source subtask and two keyed ones on three one-slot TaskExecutors: the keyed
    # subtask that does not share a slot with the source has a TaskExecutor of its own.
    cluster = cluster_factory(3, 1)
    job_id = submit(cluster, tmp_path, "", sources=1)
    before = running_with_checkpoint_after(cluster, job_id, 0, 120)
    assert status_name(before) == "RUNNING", before.failure.message
    source_te = {s.resource_id for v in before.vertices if "source" in v.name.lower()
                 for s in v.subtasks}
    alone = [(v.name, s.subtask_index, s.resource_id) for v in before.vertices
             for s in v.subtasks if s.resource_id not in source_te]
    assert alone and all("tag" in name for name, _, _ in alone), alone
    _, index, victim = alone[0]
    os.kill(cluster.taskexecutor_pid(victim), 9)
    final = finish(cluster, job_id)
    changed = {k for k, v in attempts(final).items() if attempts(before)[k] != v}
    assert changed and all("tag" in name and i == index for name, i in changed), changed
    check_output(tmp_path / "out", failed=index)
