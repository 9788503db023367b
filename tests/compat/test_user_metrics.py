"""User metrics (PyFlink's ``runtime_context.get_metrics_group()``): naming, values and
labels against a registry of their own, then served by a TaskExecutor's /metrics endpoint,
in process and on a cluster of daemon processes."""

from __future__ import annotations

import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import weir.metrics.metricbase as metric_group
from tests.support.cluster import (
    LocalCluster,
    poll,
    wait_all_running,
    wait_job_status,
    write_job,
)
from weir.datastream.functions import RuntimeContext
from weir.metrics.metricbase import Counter, Distribution, Meter, MetricGroup
from weir.taskexecutor.user_metrics import MetricRegistry

LABELS = {"job_id": "job-1", "task": "Map", "subtask_index": "1"}


@pytest.fixture
def registry() -> tuple[MetricRegistry, CollectorRegistry]:
    """A user-metric registry, served by a Prometheus registry (as a TaskExecutor does)."""
    user_metrics = MetricRegistry()
    served = CollectorRegistry()
    served.register(user_metrics)
    return user_metrics, served


def scraped(served: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the text exposition: (name, sorted labels) -> value."""
    text = generate_latest(served).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_counter_names_labels_and_values(registry):
    user_metrics, served = registry
    root = MetricGroup(user_metrics.scope(**LABELS))
    bytes_read = root.add_group("io.reader").add_group("shard", 3).counter("bytes-read")
    bytes_read.inc(10)
    bytes_read.inc()
    bytes_read.dec(4)
    assert bytes_read.get_count() == 7
    assert scraped(served) == {
        key("weir_user_io_reader_shard_bytes_read", **LABELS, shard="3"): 7.0}
    # A scrape reads the value of the moment.
    bytes_read.inc(100)
    assert scraped(served)[key("weir_user_io_reader_shard_bytes_read", **LABELS,
                               shard="3")] == 107.0


def test_key_value_groups_become_labels_and_names_are_made_legal():
    group = MetricGroup().add_group("9 lives", "a").add_group("__x", "b").add_group("app")
    assert group.get_metric_identifier("größe.max") == "weir_user_9_lives___x_app_gr__e_max"
    assert group.get_all_variables() == {"job_id": "", "task": "", "subtask_index": "0",
                                         "_9_lives": "a", "_x": "b"}
    # The same key again: the inner value wins, as Flink's variables do.
    assert MetricGroup().add_group("k", 1).add_group("k", 2).get_all_variables()["k"] == "2"
    for reserved in ("task", "job_id", "subtask_index", "quantile"):
        with pytest.raises(ValueError, match="reserved"):
            MetricGroup().add_group(reserved, "x")
    with pytest.raises(ValueError, match="non-empty"):
        MetricGroup().add_group("")
    with pytest.raises(ValueError, match="non-empty"):
        MetricGroup().counter("")


def test_same_name_returns_the_same_metric_and_another_kind_is_refused(registry):
    user_metrics, served = registry
    group = MetricGroup(user_metrics.scope(**LABELS)).add_group("g")
    first = group.counter("n")
    assert group.counter("n") is first
    assert MetricGroup(user_metrics.scope(**{**LABELS, "subtask_index": "2"})) \
        .add_group("g").counter("n") is not first
    with pytest.raises(ValueError, match="already a counter"):
        group.distribution("n")
    # A name stands for one kind of metric on the whole TaskExecutor.
    other = MetricGroup(user_metrics.scope(job_id="job-2", task="Sink", subtask_index="0"))
    with pytest.raises(ValueError, match="already used for a counter"):
        other.add_group("g").meter("n")
    assert {name for name, _ in scraped(served)} == {"weir_user_g_n"}


def test_gauge_is_read_at_scrape_time_and_a_failing_one_is_left_out(registry):
    user_metrics, served = registry
    group = MetricGroup(user_metrics.scope(**LABELS))
    queue = [1, 2, 3]
    group.gauge("queue_length", lambda: len(queue))
    group.gauge("broken", lambda: 1 / 0)
    group.gauge("not_a_number", lambda: "many")
    assert scraped(served) == {key("weir_user_queue_length", **LABELS): 3.0}
    queue.clear()
    assert scraped(served) == {key("weir_user_queue_length", **LABELS): 0.0}
    group.gauge("queue_length", lambda: 42.5)  # registered again: the new function
    assert scraped(served) == {key("weir_user_queue_length", **LABELS): 42.5}
    with pytest.raises(TypeError):
        group.gauge("g", 5)  # type: ignore[arg-type]


def test_meter_counts_events_and_reports_their_rate_over_its_time_span(
        registry, monkeypatch: pytest.MonkeyPatch):
    user_metrics, served = registry
    clock = [1000.0]
    monkeypatch.setattr(metric_group, "_now", lambda: clock[0])
    meter = MetricGroup(user_metrics.scope(**LABELS)).meter("requests", time_span_in_seconds=10)
    assert isinstance(meter, Meter)
    meter.mark_event(30)
    clock[0] += 5
    assert meter.get_count() == 30
    assert meter.get_rate() == 6.0  # 30 events in the 5 s since the meter was made
    meter.mark_event(20)
    clock[0] += 5
    values = scraped(served)
    assert values[key("weir_user_requests", **LABELS)] == 5.0  # 50 events in 10 s
    assert values[key("weir_user_requests_events_total", **LABELS)] == 50.0
    # Later, 10 more events in the last 10 s: the 50 before them no longer count.
    clock[0] += 10
    meter.get_rate()
    meter.mark_event(10)
    clock[0] += 10
    assert meter.get_rate() == 1.0
    assert meter.get_count() == 60
    with pytest.raises(ValueError, match="positive"):
        Meter(0)


def test_distribution_exports_count_sum_min_and_max(registry):
    user_metrics, served = registry
    sizes = MetricGroup(user_metrics.scope(**LABELS)).add_group("batch").distribution("size")
    assert isinstance(sizes, Distribution)
    assert scraped(served) == {key("weir_user_batch_size_count", **LABELS): 0.0,
                               key("weir_user_batch_size_sum", **LABELS): 0.0}
    for value in (7, 3, 12, 5):
        sizes.update(value)
    assert scraped(served) == {key("weir_user_batch_size_count", **LABELS): 4.0,
                               key("weir_user_batch_size_sum", **LABELS): 27.0,
                               key("weir_user_batch_size_min", **LABELS): 3.0,
                               key("weir_user_batch_size_max", **LABELS): 12.0}


def test_subtasks_do_not_collide_and_closing_a_task_unregisters_only_its_metrics(registry):
    user_metrics, served = registry
    scopes = [user_metrics.scope(job_id="job-1", task="Map", subtask_index=str(i))
              for i in range(2)]
    counters = [MetricGroup(scope).counter("records") for scope in scopes]
    counters[0].inc(5)
    counters[1].inc(7)
    assert scraped(served) == {
        key("weir_user_records", job_id="job-1", task="Map", subtask_index="0"): 5.0,
        key("weir_user_records", job_id="job-1", task="Map", subtask_index="1"): 7.0}
    scopes[0].close()
    assert scraped(served) == {
        key("weir_user_records", job_id="job-1", task="Map", subtask_index="1"): 7.0}
    # Registering after the end (a function's close()) works, but exports nothing.
    MetricGroup(scopes[0]).counter("late").inc()
    scopes[1].close()
    assert scraped(served) == {}
    # The names are free again: another kind of metric may take them.
    MetricGroup(user_metrics.scope(**LABELS)).distribution("records")


def test_a_restarted_task_replaces_the_metrics_of_its_earlier_attempt(registry):
    user_metrics, served = registry
    old = user_metrics.scope(**LABELS)
    MetricGroup(old).counter("records").inc(100)
    # The new attempt registers before the old one closed: no error, the new one shows...
    new = user_metrics.scope(**LABELS)
    restarted = MetricGroup(new).counter("records")
    restarted.inc(3)
    assert scraped(served) == {key("weir_user_records", **LABELS): 3.0}
    # ...and the old one closing does not take the new one's metrics with it.
    old.close()
    assert scraped(served) == {key("weir_user_records", **LABELS): 3.0}
    new.close()
    assert scraped(served) == {}


def test_a_runtime_context_made_by_hand_has_working_metrics_that_nothing_exports():
    ctx = RuntimeContext("Map", 1, 4, 128, 0)
    group = ctx.get_metrics_group()
    assert ctx.get_metrics_group() is group
    counter = group.add_group("parser").counter("records")
    assert isinstance(counter, Counter)
    counter.inc(2)
    assert counter.get_count() == 2
    assert group.get_all_variables() == {"job_id": "", "task": "Map", "subtask_index": "1"}
    assert "weir_user_" not in generate_latest(REGISTRY).decode()


# -- served by TaskExecutors ----------------------------------------------------------------

ROWS = 500

JOB = textwrap.dedent(f"""
    from weir import DiscardingSink, MapFunction, StreamExecutionEnvironment

    class CountingMap(MapFunction):
        def open(self, runtime_context):
            group = runtime_context.get_metrics_group().add_group("test")
            self.records = group.counter("records")
            self.values = group.distribution("values")

        def map(self, value):
            self.records.inc()
            self.values.update(value[0])
            return value

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    # A watched directory: the job reads its {ROWS} rows, then keeps running.
    (env.from_source(INCOMING, format="parquet", monitor_interval=0.2)
        .map(lambda row: (row["n"],)).rebalance().map(CountingMap()).name("Count")
        .sink_to(DiscardingSink()))
""")


def _incoming(tmp_path: Path) -> Path:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    pq.write_table(pa.table({"n": list(range(ROWS))}), incoming / "rows.parquet")
    return incoming


def _user_samples(urls: list[str], job_id: str) -> dict[tuple[str, str], float]:
    """(sample name, subtask index) -> value of the job's weir_user_test_* samples."""
    found: dict[tuple[str, str], float] = {}
    for url in urls:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith("weir_user_test_") and s.labels.get("job_id") == job_id:
                    assert "Count" in s.labels["task"]
                    found[(s.name, s.labels["subtask_index"])] = s.value
    return found


def _check_counted(urls: list[str], job_id: str) -> None:
    def counted() -> dict[tuple[str, str], float] | None:
        samples = _user_samples(urls, job_id)
        total = sum(v for (name, _), v in samples.items() if name == "weir_user_test_records")
        return samples if total >= ROWS else None

    samples = poll(counted, 20, what=f"the counters to reach {ROWS}")
    subtasks = {index for name, index in samples if name == "weir_user_test_records"}
    assert subtasks == {"0", "1"}  # one label set per subtask, both on this TaskExecutor
    assert sum(samples[("weir_user_test_records", i)] for i in subtasks) == ROWS
    assert sum(samples[("weir_user_test_values_sum", i)] for i in subtasks) == \
        sum(range(ROWS))
    assert sum(samples[("weir_user_test_values_count", i)] for i in subtasks) == ROWS


@pytest.fixture
def mini_cluster() -> Iterator[object]:
    from weir.client.minicluster import MiniCluster
    from weir.core.config import Configuration
    from weir.core.execution import ExecutionContext, set_execution_context

    cluster = MiniCluster(num_slots=2).start()
    set_execution_context(ExecutionContext(address=cluster.address, token=None,
                                           configuration=Configuration()))
    try:
        yield cluster
    finally:
        set_execution_context(None)
        cluster.stop()


def test_in_process_task_executor_serves_the_counters_of_a_running_job(mini_cluster,
                                                                       tmp_path: Path):
    namespace = {"__name__": "__job__", "INCOMING": str(_incoming(tmp_path))}
    exec(compile(JOB, "job.py", "exec"), namespace)
    job = namespace["env"].execute_async("user metrics")  # type: ignore[attr-defined]
    urls = [te.metrics_url for te in mini_cluster.task_executors]  # type: ignore[attr-defined]
    try:
        _check_counted(urls, job.job_id)
    finally:
        job.cancel()
    poll(lambda: job.get_job_status().result() == "CANCELED", 20, what="the job to be cancelled")
    poll(lambda: not _user_samples(urls, job.job_id), 10,
         what="the cancelled tasks' metrics to be unregistered")


@pytest.mark.extended
def test_task_executor_daemon_serves_the_counters_of_a_running_job(cluster_factory,
                                                                   tmp_path: Path):
    cluster: LocalCluster = cluster_factory(1, 2)
    job = write_job(tmp_path, f"INCOMING = {str(_incoming(tmp_path))!r}\n{JOB}"
                    "env.execute('user metrics')\n")
    result = cluster.weir("run", "--detached", str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    urls = [te["metrics_url"] for te in cluster.status()["taskexecutors"]]
    assert len(urls) == 1
    try:
        wait_all_running(cluster, job_id, timeout=20)
        _check_counted(urls, job_id)
    finally:
        cluster.weir("cancel", job_id)
    wait_job_status(cluster, job_id, {"CANCELED"}, timeout=20)
    poll(lambda: not _user_samples(urls, job_id), 10,
         what="the cancelled tasks' metrics to be unregistered")


def test_label_values_are_cut_to_80_characters():
    # Task names come from job authors, and every scrape repeats them.
    from weir.taskexecutor.user_metrics import MetricRegistry

    registry = MetricRegistry()
    scope = registry.scope(job_id="j1", task="T" * 5000, subtask_index="0")

    class Fixed:
        def samples(self, name):
            yield name, "gauge", name, 7

    scope.register("weir_user_seven", (("shard", "s" * 300),), "gauge", Fixed())
    [sample] = [s for f in registry.collect() for s in f.samples]
    assert sample.labels == {"job_id": "j1", "task": "T" * 80, "subtask_index": "0",
                             "shard": "s" * 80}
    scope.close()
