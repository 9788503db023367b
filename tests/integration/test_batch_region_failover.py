"""BATCH region failover on real processes with the external shuffle service: a failed
consumer (user-code failure, or its TaskExecutor SIGKILLed) restarts alone and reads its
finished producers' partitions again from the service; a partition the service can no
longer serve restarts its producer, and only that one. The committed output equals the
expected output exactly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import (
    LocalCluster,
    extra_taskexecutor,
    job_details,
    poll,
    write_job,
)
from tests.support.exactly_once import (
    committed_output,
    diff,
    running_counts,
    status_name,
    wait_ended,
)
from tests.support.shuffle_service import shuffle_options
from weir.proto import common_pb2
from weir.testing.faults import kill_taskexecutor

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

JOB = '''
import os
import sys
import time

from weir import FileSink, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

OUT, N, TRIGGER, CONSUMERS = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.seen = 0

    def process_element(self, value, ctx):
        self.seen += 1
        if self.seen % 50 == 0:
            time.sleep(0.03)  # slow enough to fail while the consumers run
        try:
            os.rename(TRIGGER, TRIGGER + ".used")  # one subtask fails, once
        except FileNotFoundError:
            pass
        else:
            raise RuntimeError("induced failure")
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield (value % 97, count)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_runtime_mode("BATCH")
env.configure({"pipeline.batch-size": 500})
(env.from_sequence(0, N - 1).set_parallelism(2).name("numbers")
    .map(lambda n: n).set_parallelism(2).name("produce")
    .key_by(lambda n: n % 97).process(Count()).set_parallelism(CONSUMERS).name("count")
    .sink_to(FileSink(OUT, format="json")).set_parallelism(CONSUMERS).name("sink"))
env.execute("batch region failover")
'''

N = 20_000
RESTARTS = {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
            "restart-strategy.fixed-delay.delay": "100 ms"}


def assert_exactly_expected(out: Path) -> None:
    expected, got = running_counts(N, 97), committed_output(out)
    assert got == expected, diff(expected, got)


def attempts(details: Any, stage: int) -> list[str]:
    """Attempt ids of the subtasks of stage 0 (producers) or 1 (consumers)."""
    return [s.attempt_id for s in details.vertices[stage].subtasks]


def submit(cluster: LocalCluster, tmp_path: Path, consumers: int) -> tuple[str, Path, Path]:
    out, trigger = tmp_path / "out", tmp_path / "fail-now"
    job = write_job(tmp_path, JOB, "batch_job.py")
    result = cluster.weir("run", "--detached", *(f"-D{k}={v}" for k, v in RESTARTS.items()),
                          str(job), str(out), str(N), str(trigger), str(consumers))
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout.strip().splitlines()[-1], out, trigger


def stage_in(details: Any, stage: int, state: int) -> bool:
    return all(s.state == state for s in details.vertices[stage].subtasks)


def details_if(cluster: LocalCluster, job_id: str, predicate: Callable[[Any], bool]) -> Any:
    details = job_details(cluster, job_id)
    return details if predicate(details) else None


def kill_taskexecutor_of(cluster: LocalCluster, resource_id: str) -> None:
    kill_taskexecutor(cluster.dir, [resource_id])


@pytest.mark.parametrize("failure", ["exception", "sigkill"])
def test_a_failed_consumer_restarts_alone_and_rereads_its_input(
        cluster_factory, shuffle_service, tmp_path: Path, failure: str) -> None:
    address, _ = shuffle_service
    # Three one-slot TaskExecutors: after a kill, a free slot is left for the restart.
    cluster = cluster_factory(3, 1, *shuffle_options(address))
    job_id, out, trigger = submit(cluster, tmp_path, consumers=2)
    before = poll(lambda: details_if(cluster, job_id, lambda d: stage_in(
        d, 0, common_pb2.FINISHED) and stage_in(d, 1, common_pb2.RUNNING)),
        60, interval=0.05, what="the consumers to run after the producers finished")
    if failure == "exception":
        trigger.touch()
    else:
        kill_taskexecutor_of(cluster, before.vertices[1].subtasks[0].resource_id)

    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    assert final.summary.restarts == 1, [c.message for c in final.restart_causes]
    assert attempts(final, 0) == attempts(before, 0), \
        "the producers ran again instead of their partitions being read again"
    changed = [a != b for a, b in zip(attempts(final, 1), attempts(before, 1), strict=True)]
    assert changed.count(True) == 1, changed
    if failure == "sigkill":
        assert changed[0], "the killed TaskExecutor's consumer did not restart"
    assert_exactly_expected(out)


def test_a_partition_the_service_cannot_serve_restarts_its_producer_only(
        cluster_factory, shuffle_service, tmp_path: Path) -> None:
    address, data = shuffle_service
    options = shuffle_options(address)
    # Two slots: the producers run, the three consumers wait for a third slot.
    cluster = cluster_factory(1, 2, *options)
    job_id, out, _ = submit(cluster, tmp_path, consumers=3)
    before = poll(lambda: details_if(cluster, job_id, lambda d: stage_in(
        d, 0, common_pb2.FINISHED)), 60, interval=0.05, what="the producers to finish")
    assert stage_in(before, 1, common_pb2.CREATED)
    producer = before.vertices[0].subtasks[0].attempt_id
    consumer_vertex = before.vertices[1].vertex_id
    index = data / job_id / f"{producer}.{consumer_vertex}" / "index"
    raw = bytearray(index.read_bytes())
    raw[-1] ^= 0xFF  # the index checksum no longer matches: the service cannot serve it
    index.write_bytes(bytes(raw))

    with extra_taskexecutor(cluster, 2, *options):
        final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    causes = list(final.restart_causes)
    assert causes and all(c.reason == common_pb2.PARTITION_NOT_FOUND for c in causes), causes
    assert {c.partition_id for c in causes} == {f"{producer}.{consumer_vertex}"}
    kept = [a == b for a, b in zip(attempts(final, 0), attempts(before, 0), strict=True)]
    assert kept == [False, True], "only the producer of the unreadable partition reruns"
    assert_exactly_expected(out)
