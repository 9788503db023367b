"""External shuffle service: batch output outlives the TaskExecutor that produced it."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.cluster import (
    LocalCluster,
    extra_taskexecutor,
    job_details,
    poll,
    wait_job_status,
    write_job,
)
from tests.support.shuffle_service import shuffle_options
from weir.proto import common_pb2


def _files_of(directory: Path, job_id: str) -> list[Path]:
    return [p for p in directory.rglob("*") if job_id in str(p)] if directory.exists() else []


def test_batch_job_survives_the_loss_of_a_finished_producer(cluster_factory, shuffle_service,
                                                            tmp_path: Path):
    address, data = shuffle_service
    options = shuffle_options(address)
    cluster: LocalCluster = cluster_factory(1, 1, *options)
    out = tmp_path / "out"
    words = [f"w{(i * 7) % 101}" for i in range(30_000)]
    job = write_job(tmp_path, f"""
        from weir import FileSink, StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_runtime_mode("BATCH")
        env.configure({{"pipeline.batch-size": 2000}})
        words = {words!r}
        (env.from_collection(words).map(lambda w: (w, 1))
            .key_by(lambda t: t[0]).sum(1).set_parallelism(2)
            .sink_to(FileSink({str(out)!r}, format="parquet")).set_parallelism(2))
        env.execute("survives its producer")
    """)
    result = cluster.weir("run", "--detached", str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()

    def producer_finished() -> bool:
        details = job_details(cluster, job_id)
        first = details.vertices[0].subtasks
        return all(s.state == common_pb2.FINISHED for s in first)

    poll(producer_finished, 60, interval=0.1, what="the producing stage to finish")
    assert _files_of(data, job_id), "the producer's output should be in the shuffle service"
    # The consumer stage needs 2 slots and the cluster has 1: it waits. Now the producer's
    # TaskExecutor goes away for good, and a new one with 2 slots arrives.
    cluster.kill_taskexecutor(0, signal.SIGKILL)
    with extra_taskexecutor(cluster, 2, *options):
        details = wait_job_status(cluster, job_id, {"FINISHED", "FAILED"}, timeout=120)
        assert details.summary.status == common_pb2.JOB_FINISHED, details.failure.message
    table = pa.concat_tables(pq.read_table(p) for p in sorted(out.glob("*.parquet")))
    finals: dict[str, int] = {}
    for word, count in zip(table.column(0).to_pylist(), table.column(1).to_pylist(),
                           strict=True):
        finals[word] = max(finals.get(word, 0), count)
    assert finals == dict(Counter(words))
    poll(lambda: not _files_of(data, job_id), 30,
         what="the service to delete the job's partitions")
