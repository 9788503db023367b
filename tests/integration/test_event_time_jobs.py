"""Event time on a real cluster: watermarks cross task boundaries in-band and combine over
channels; windows and timers give exactly the results computed independently here."""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.cluster import (
    ClientEnvironment,
    LocalCluster,
    poll,
    wait_all_running,
    wait_job_status,
    write_job,
)
from weir import (
    Duration,
    EventTimeSessionWindows,
    KeyedProcessFunction,
    Row,
    SlidingEventTimeWindows,
    Time,
    TimestampAssigner,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
)

BOUND_MS = 400


def _events(n: int) -> list[tuple[str, int, int]]:
    """(key, value, timestamp): timestamps rise 10 ms per event, shuffled within the
    out-of-orderness bound by a fixed pattern."""
    return [(f"k{i % 7}", i % 13, i * 10 + (i * 7919) % BOUND_MS) for i in range(n)]


class ThirdField(TimestampAssigner):
    def extract_timestamp(self, value: tuple, record_timestamp: int) -> int:
        return value[2]


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_tumbling_and_sliding_event_time_windows_across_the_network(
        shared_cluster: LocalCluster, backend: str) -> None:
    events = _events(6_000)
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS))
                .with_timestamp_assigner(ThirdField()))
    with ClientEnvironment(shared_cluster, **{"state.backend.type": backend}) as env:
        env.set_parallelism(2)
        # Two parallel watermark generators feed the windows: each window task combines
        # the watermarks of both channels.
        stamped = (env.from_collection(events).rebalance().map(lambda e: e)
                   .assign_timestamps_and_watermarks(strategy))
        tumbling = (stamped.key_by(lambda e: e[0])
                    .window(TumblingEventTimeWindows.of(Time.seconds(5)))
                    .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))))
        sliding = (stamped.map(lambda e: (e[0], 1)).key_by(lambda e: e[0])
                   .window(SlidingEventTimeWindows.of(Time.seconds(10), Time.seconds(5)))
                   .count())
        results = list(tumbling.union(sliding).execute_and_collect("windows"))
    expected_sums: dict[tuple[str, int], int] = defaultdict(int)
    expected_counts: dict[tuple[str, int], int] = defaultdict(int)
    for key, value, ts in events:
        expected_sums[(key, ts // 5_000)] += value
        for start in (ts // 5_000 * 5_000, ts // 5_000 * 5_000 - 5_000):
            expected_counts[(key, start)] += 1
    sums = sorted((r[0], r[1]) for r in results if len(r) == 3)
    counts = sorted(r for r in results if len(r) == 2)
    assert sums == sorted((k, v) for (k, _), v in expected_sums.items())
    assert sorted(c for _, c in counts) == sorted(expected_counts.values())
    assert {k for k, _ in counts} == {k for k, _ in expected_counts}


def test_vectorised_window_sum_by_column_with_timestamps_from_a_column(
        shared_cluster: LocalCluster) -> None:
    rows = [Row(user=f"u{i % 11}", amount=i % 17, ts=i * 3) for i in range(30_000)]
    with ClientEnvironment(shared_cluster) as env:
        env.set_parallelism(2)
        totals = (env.from_collection(rows)
                  .assign_timestamps_and_watermarks(
                      WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts"))
                  .key_by("user")
                  .window(TumblingEventTimeWindows.of(Duration.of_seconds(1)))
                  .sum("amount"))
        results = list(totals.execute_and_collect("vectorised windows"))
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for row in rows:
        expected[(row.user, row.ts // 1_000 * 1_000)] += row.amount
    got = {(r.user, r.window_start): r.amount for r in results}
    assert len(results) == len(expected)
    assert got == expected
    assert all(r.window_end == r.window_start + 1_000 for r in results)


class SessionSummary(KeyedProcessFunction):
    """Per key: counts records and emits (key, count, last timestamp) once the key was
    quiet for 1 s of event time — through an event-time timer 1 s after the latest record
    (moved on every record). How far the watermark got when a record arrives depends on
    timing, so a record that finds its key's previous session over but its timer not yet
    fired closes that session itself: the output is the same either way."""

    GAP = 1_000

    def open(self, runtime_context: object) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))  # type: ignore[attr-defined]
        self.last = runtime_context.get_state(ValueStateDescriptor("last"))  # type: ignore[attr-defined]

    def process_element(self, value: tuple, ctx: KeyedProcessFunction.Context) -> list:
        timers = ctx.timer_service()
        out = []
        last = self.last.value()
        if last is not None:
            timers.delete_event_time_timer(last + self.GAP)
            if ctx.timestamp() - last >= self.GAP:
                out.append((ctx.get_current_key(), self.count.value(), last))
                self.count.clear()
                last = None
        latest = max(last or 0, ctx.timestamp())
        self.last.update(latest)
        self.count.update((self.count.value() or 0) + 1)
        timers.register_event_time_timer(latest + self.GAP)
        return out

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> list:
        out = [(ctx.get_current_key(), self.count.value(), self.last.value())]
        self.count.clear()
        self.last.clear()
        return out


def _bursts() -> list[tuple[str, int, int]]:
    """Bursts of events per key separated by quiet gaps of more than 1 s."""
    events = []
    for burst in range(12):
        for i in range(40):
            events.append((f"k{(burst + i) % 3}", 1, burst * 5_000 + i * 20))
    return events


def _expected_sessions(events: list[tuple[str, int, int]], gap: int) -> list[tuple]:
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, _, ts in events:
        by_key[key].append(ts)
    out = []
    for key, stamps in by_key.items():
        stamps.sort()
        count, last = 1, stamps[0]
        for ts in stamps[1:]:
            if ts - last >= gap:
                out.append((key, count, last))
                count = 0
            count, last = count + 1, ts
        out.append((key, count, last))
    return sorted(out)


def test_keyed_process_timers_and_session_windows_on_rocksdb(
        shared_cluster: LocalCluster) -> None:
    events = _bursts()
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(100))
                .with_timestamp_assigner(ThirdField()))
    with ClientEnvironment(shared_cluster, **{"state.backend.type": "rocksdb"}) as env:
        env.set_parallelism(2)
        stamped = env.from_collection(events).assign_timestamps_and_watermarks(strategy)
        quiet = stamped.key_by(lambda e: e[0]).process(SessionSummary())
        sessions = (stamped.key_by(lambda e: e[0])
                    .window(EventTimeSessionWindows.with_gap(Time.seconds(1)))
                    .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))))
        results = list(quiet.union(sessions.map(lambda s: ("session", *s)))
                       .execute_and_collect("timers"))
    from_timers = sorted(r for r in results if r[0] != "session")
    from_windows = sorted((r[1], r[2], r[3]) for r in results if r[0] == "session")
    expected = _expected_sessions(events, 1_000)
    assert from_timers == expected
    assert from_windows == expected


def test_processing_time_windows_of_a_bounded_job_are_emitted_at_the_end(
        shared_cluster: LocalCluster) -> None:
    with ClientEnvironment(shared_cluster) as env:
        env.set_parallelism(2)
        counts = (env.from_sequence(1, 5_000).map(lambda i: (i % 4, 1))
                  .key_by(lambda t: t[0])
                  .window(TumblingProcessingTimeWindows.of(Time.minutes(10)))
                  .reduce(lambda a, b: (a[0], a[1] + b[1])))
        results = list(counts.execute_and_collect("processing time"))
    totals: dict[int, int] = defaultdict(int)
    for key, count in results:
        totals[key] += count
    assert totals == {0: 1_250, 1: 1_250, 2: 1_250, 3: 1_250}


class SeenWatermark(KeyedProcessFunction):
    def process_element(self, value: tuple, ctx: KeyedProcessFunction.Context) -> list:
        return [(value[0], ctx.timestamp(), ctx.timer_service().current_watermark(),
                 ctx.get_current_key())]


def _paced(value: int) -> tuple[int, int]:
    import time

    time.sleep(0.002)  # the workload: a source spread over ~1 s, so watermarks flow mid-way
    return (value, value * 10)


def test_watermarks_flow_in_band_during_the_job_and_never_overtake_records(
        shared_cluster: LocalCluster) -> None:
    strategy = (WatermarkStrategy.for_monotonous_timestamps()
                .with_timestamp_assigner(lambda value, _: value[1]))
    with ClientEnvironment(shared_cluster, **{"pipeline.auto-watermark-interval": "20 ms",
                                              "execution.buffer-timeout": "5 ms"}) as env:
        env.set_parallelism(2)
        seen = (env.from_sequence(0, 499).set_parallelism(1).map(_paced).set_parallelism(1)
                .assign_timestamps_and_watermarks(strategy).set_parallelism(1)
                .key_by(lambda v: v[0] % 4).process(SeenWatermark()))
        results = list(seen.execute_and_collect("watermarks in band"))
    assert sorted(r[0] for r in results) == list(range(500))
    # A watermark w promises no later record at or before w: every record is after it.
    assert all(watermark < timestamp for _, timestamp, watermark, _ in results)
    advanced = [r for r in results if r[2] > -(1 << 63)]
    assert len(advanced) > 250, "watermarks should reach the keyed tasks while data flows"


@pytest.mark.extended
def test_task_metrics_report_the_watermark_of_a_running_job(shared_cluster: LocalCluster,
                                                            tmp_path: Path) -> None:
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment, DiscardingSink, WatermarkStrategy
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        strategy = (WatermarkStrategy.for_monotonous_timestamps()
                    .with_timestamp_assigner(lambda n, _: n))
        (env.from_sequence(0, 10**12).assign_timestamps_and_watermarks(strategy)
            .key_by(lambda n: n % 5).reduce(lambda a, b: b).sink_to(DiscardingSink()))
        env.execute("endless event time")
    """)
    job_id = shared_cluster.weir("run", "--detached", str(job)).stdout.strip()
    try:
        wait_all_running(shared_cluster, job_id)
        urls = [te["metrics_url"] for te in shared_cluster.status()["taskexecutors"]]

        def input_watermarks() -> list[float]:
            found = []
            for url in urls:
                for line in urllib.request.urlopen(url).read().decode().splitlines():
                    if line.startswith("weir_task_currentInputWatermark{") and job_id in line \
                            and "Reduce" in line:
                        found.append(float(line.rsplit(" ", 1)[1]))
            return found

        first = poll(lambda: (w := input_watermarks()) and len(w) == 2 and min(w) > 0 and w,
                     30, what="both keyed tasks to report a watermark")
        poll(lambda: min(input_watermarks()) > max(first), 30,
             what="the watermark to advance")
    finally:
        shared_cluster.weir("cancel", job_id)
    wait_job_status(shared_cluster, job_id, {"CANCELED"}, timeout=30)


def test_event_time_windows_in_batch_mode_fire_at_the_end_of_each_stage(
        shared_cluster: LocalCluster) -> None:
    events = _events(3_000)
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS))
                .with_timestamp_assigner(ThirdField()))
    with ClientEnvironment(shared_cluster) as env:
        env.set_runtime_mode("BATCH")  # blocking exchanges carry no watermarks at all
        env.set_parallelism(2)
        sums = (env.from_collection(events).assign_timestamps_and_watermarks(strategy)
                .key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(Time.seconds(5)))
                .reduce(lambda a, b: (a[0], a[1] + b[1], a[2])))
        results = sorted((k, v) for k, v, _ in sums.execute_and_collect("batch windows"))
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for key, value, ts in events:
        expected[(key, ts // 5_000)] += value
    assert results == sorted((k, v) for (k, _), v in expected.items())
