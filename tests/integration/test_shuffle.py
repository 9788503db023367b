"""The shuffle service on a real cluster: pluggable factory, backpressure to the source."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

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


SLOW_JOB = """
    import time
    from weir import StreamExecutionEnvironment, DiscardingSink
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.configure({"pipeline.batch-size": 4096})

    def slow(batch):
        time.sleep(batch.num_rows * 100e-6)  # 10k rows/s per subtask, whatever the batching
        return batch

    (env.from_sequence(0, 10**12).map_batches(lambda b: b)
        .rebalance().map_batches(slow).sink_to(DiscardingSink()))
    env.execute("debloat")
"""


def _measure_inflight(cluster: LocalCluster, job_path: Path, seconds: float) -> tuple[float, float]:
    """Mean bytes queued in the slow task's remote channels, and its records/s."""
    import time

    job_id = cluster.weir("run", "--detached", str(job_path)).stdout.strip()
    try:
        wait_all_running(cluster, job_id)
        tes = cluster.status()["taskexecutors"]

        def read(name: str) -> float:
            return sum(_metric(te["metrics_url"], name, job_id, "Map Batches") for te in tes)

        poll(lambda: read("numRecordsIn") > 20_000, 30, what="the job to warm up")
        time.sleep(2.0)  # let the debloated size settle (EMA over 20 x 200 ms samples)
        started, records = time.monotonic(), read("numRecordsIn")
        samples = []
        while time.monotonic() - started < seconds:
            samples.append(read("inputQueueBytes"))
            time.sleep(0.25)
        rate = (read("numRecordsIn") - records) / (time.monotonic() - started)
        return sum(samples) / len(samples), rate
    finally:
        cluster.weir("cancel", job_id)


@pytest.mark.extended
def test_debloating_shrinks_in_flight_data_and_keeps_throughput(cluster_factory,
                                                                tmp_path: Path):
    job = write_job(tmp_path, SLOW_JOB)
    plain = cluster_factory(2, 1)
    inflight_plain, rate_plain = _measure_inflight(plain, job, 5)
    plain.stop()
    debloated = cluster_factory(2, 1, "taskmanager.network.memory.buffer-debloat.enabled=true",
                                "taskmanager.network.memory.buffer-debloat.target=100 ms")
    inflight_debloated, rate_debloated = _measure_inflight(debloated, job, 5)
    assert inflight_plain > 50_000, "without debloating the channels fill their buffers"
    assert inflight_debloated < inflight_plain / 4, (inflight_plain, inflight_debloated)
    assert abs(rate_debloated - rate_plain) <= 0.10 * rate_plain, (rate_plain, rate_debloated)
