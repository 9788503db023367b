"""Recovery from an unaligned checkpoint that holds in-flight data: a backpressured keyed
job loses a TaskExecutor after such a checkpoint, restores its channel state (the buffers
its barriers overtook, replayed before any new input) and still commits exactly the
running counts computed independently."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.cluster import job_details, poll, weir_cli, write_job
from tests.support.exactly_once import (
    checkpoints,
    committed_output,
    diff,
    kill_busy_taskexecutor,
    running_counts,
    status_name,
    wait_ended,
)

JOB = """
    import os
    import sys
    import time

    from weir import (FileSink, KeyedProcessFunction, StreamExecutionEnvironment,
                      ValueStateDescriptor)

    OUT, N, KEYS, GATE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


    class SlowCount(KeyedProcessFunction):
        # About 500 records/s per subtask until the gate opens: far slower than the
        # source, so the exchange in front of it stays full.
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count"))

        def process_element(self, value, ctx):
            if not os.path.exists(GATE):
                time.sleep(0.002)
            count = (self.count.value() or 0) + 1
            self.count.update(count)
            yield (value[0], count)


    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_sequence(0, N - 1).map(lambda n: (n % KEYS, "x" * 200))
        .key_by(lambda t: t[0]).process(SlowCount())
        .sink_to(FileSink(OUT, format="json")))
    env.execute("unaligned recovery")
"""

N = 60_000
KEYS = 13


def test_a_restore_replays_the_in_flight_data_of_an_unaligned_checkpoint(cluster_factory,
                                                                          tmp_path: Path):
    cluster = cluster_factory(3, 2)
    out, gate = tmp_path / "out", tmp_path / "gate"
    job = write_job(tmp_path, JOB, "unaligned_recovery.py")
    settings = {"execution.checkpointing.interval": "500 ms",
                "execution.checkpointing.unaligned.enabled": "true",
                "pipeline.batch-size": "200",
                "restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.delay": "200 ms"}
    started = weir_cli("run", "--dir", str(cluster.dir), "--detached",
                       *(f"-D{k}={v}" for k, v in settings.items()),
                       str(job), str(out), str(N), str(KEYS), str(gate))
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip().splitlines()[-1]

    # A completed checkpoint that persisted in-flight data, then the kill.
    poll(lambda: any(c["status"] == "COMPLETED" and c["persisted_bytes"] > 0
                     for c in checkpoints(cluster, job_id)),
         60, interval=0.2, what="an unaligned checkpoint with in-flight data")
    details = job_details(cluster, job_id)
    kill_busy_taskexecutor(cluster, details)
    restored = poll(lambda: (d := job_details(cluster, job_id)).summary.restarts >= 1
                    and d.HasField("last_restore") and d, 60, interval=0.1,
                    what="the job to restore after the kill")
    restored_id = restored.last_restore.checkpoint_id
    by_id = {c["id"]: c for c in checkpoints(cluster, job_id)}
    assert by_id[restored_id]["persisted_bytes"] > 0, by_id[restored_id]
    gate.touch()

    final = wait_ended(cluster, job_id, timeout=180)
    assert status_name(final) == "FINISHED", final.failure.message
    assert final.summary.restarts == 1
    expected: Counter[tuple[Any, ...]] = Counter(running_counts(N, KEYS))
    got = committed_output(out)
    assert got == expected, diff(expected, got)
