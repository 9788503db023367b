"""The shuffle service on a real cluster: pluggable factory, backpressure to the source."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.support.cluster import (
    ClientEnvironment,
    LocalCluster,
    poll,
    wait_all_running,
    wait_job_status,
    weir_cli,
    write_job,
)


def test_shuffle_service_factory_is_loaded_by_dotted_path(cluster_factory, tmp_path: Path,
                                                          monkeypatch):
    record = tmp_path / "record"
    record.mkdir()
    monkeypatch.setenv("WEIR_TEST_SHUFFLE_RECORD", str(record))
    cluster = cluster_factory(
        2, 1, "shuffle-service-factory.class="
              "tests.support.recording_shuffle.RecordingShuffleServiceFactory")
    with ClientEnvironment(cluster) as env:
        env.set_parallelism(2)
        got = sorted(env.from_sequence(1, 2000).key_by(lambda n: n % 7).sum(0)
                     .execute_and_collect())
    assert len(got) == 2000
    markers = sorted(p.name.split("-")[0] for p in record.iterdir())
    assert markers.count("master") == 1 and markers.count("environment") == 2


def test_wrong_shuffle_factory_is_a_clear_start_up_error():
    result = weir_cli("jobmaster", "-D", "shuffle-service-factory.class=no.such.Factory")
    assert result.returncode == 2
    assert "shuffle-service-factory.class" in result.stderr and "Traceback" not in result.stderr


def _metric(url: str, name: str, job_id: str, task_prefix: str) -> float:
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
              if line.startswith(f"weir_task_{name}{{") and job_id in line
              and f'task_name="{task_prefix}' in line]
    return max(values, default=0.0)


def test_slow_sink_backpressures_the_source_across_task_executors(cluster_factory,
                                                                  tmp_path: Path):
    cluster: LocalCluster = cluster_factory(2, 1)
    job = write_job(tmp_path, """
        import time
        from weir import StreamExecutionEnvironment, DiscardingSink
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        env.configure({"pipeline.batch-size": 1000})

        def slow(batch):
            time.sleep(0.05)
            return batch

        (env.from_sequence(0, 10**12).map_batches(lambda b: b)
            .rebalance().map_batches(slow).sink_to(DiscardingSink()))
        env.execute("slow sink")
    """)
    job_id = cluster.weir("run", "--detached", str(job)).stdout.strip()
    try:
        wait_all_running(cluster, job_id)
        tes = cluster.status()["taskexecutors"]

        def source_backpressured() -> bool:
            return any(_metric(te["metrics_url"], "backPressuredTimeMsPerSecond", job_id,
                               "Source") > 500 for te in tes)

        poll(source_backpressured, 30, interval=0.5, what="the source to be backpressured")
        # Bounded buffers: what the source emitted stays close to what the sink consumed.
        def totals() -> tuple[float, float]:
            out = sum(_metric(te["metrics_url"], "numRecordsIn", job_id, "Source")
                      for te in tes)
            sunk = sum(_metric(te["metrics_url"], "numRecordsIn", job_id, "Map Batches")
                       for te in tes)
            return out, sunk

        emitted, consumed = totals()
        assert consumed > 0
        # Only the configured buffers are in flight: the gap between what the source emitted
        # and what the slow operator took is bounded and does not grow while the job runs.
        assert emitted - consumed < 200_000, (emitted, consumed)
        first_gap = emitted - consumed
        poll(lambda: totals()[1] > consumed + 20_000, 30, interval=0.5,
             what="the slow operator to make progress")
        emitted, consumed = totals()
        assert emitted - consumed < first_gap + 50_000, (first_gap, emitted - consumed)
    finally:
        cluster.weir("cancel", job_id)
    wait_job_status(cluster, job_id, {"CANCELED"}, timeout=30)
