"""Every metric the daemons export on /metrics: name, type, help text and labels, once.

The daemons build their metric families from these declarations at scrape time
(:meth:`MetricSpec.family`), and ``python -m weir.docgen`` writes the metrics reference
(``docs/operations/metrics.md``) from the same lists, so a metric cannot be exported
without being documented, or documented under another name. Names keep one prefix
(``weir_``) and Flink's metric names where the meaning is Flink's.

User functions' own metrics (``runtime_context.get_metrics_group()``) are named by the
user and served as ``weir_user_*``: they are not declared here.

Example:
    >>> spec = TASKEXECUTOR_METRICS[0]
    >>> spec.name, spec.short_name
    ('weir_taskexecutor_slots_total', 'slots_total')
    >>> family = spec.family()
    >>> family.add_metric([], 2)
    >>> [(s.name, s.value) for s in family.samples]
    [('weir_taskexecutor_slots_total', 2)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

#: The Prometheus type of most metrics below: each reads a value at scrape time.
GAUGE = "gauge"
#: A distribution (Flink's histograms), read at scrape time as cumulative buckets, their
#: sum and count (``<name>_bucket``, ``<name>_sum``, ``<name>_count``).
HISTOGRAM = "histogram"

#: Longest label value exported (Flink cuts operator names in metric identifiers to 80
#: characters too): names come from job authors, and every scrape repeats them.
MAX_LABEL_VALUE_CHARS = 80


def label_value(value: object) -> str:
    """``value`` as a label value, cut to :data:`MAX_LABEL_VALUE_CHARS`.

    Example:
        >>> len(label_value("x" * 10_000))
        80
    """
    text = str(value)
    return text if len(text) <= MAX_LABEL_VALUE_CHARS else text[:MAX_LABEL_VALUE_CHARS]


class Gauge(GaugeMetricFamily):
    """A gauge family whose label values are cut by :func:`label_value`."""

    def add_metric(self, labels: Iterable[object], value: float,  # type: ignore[override]
                   timestamp: float | None = None) -> None:
        super().add_metric([label_value(v) for v in labels], value, timestamp)


class HistogramFamily(HistogramMetricFamily):
    """A histogram family whose label values are cut by :func:`label_value`."""

    def add_metric(self, labels: Sequence[object],  # type: ignore[override]
                   buckets: Sequence[tuple[str, float]], sum_value: float | None,
                   timestamp: float | None = None) -> None:
        super().add_metric([label_value(v) for v in labels], buckets, sum_value, timestamp)


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: its full name (``weir_<scope>_<metric>``), Prometheus type,
    help text and label names."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()

    @property
    def short_name(self) -> str:
        """The name without ``weir_<scope>_``: Flink's metric name where there is one."""
        return self.name.split("_", 2)[2]

    def family(self) -> Gauge:
        """A new, empty metric family for one scrape; called on the scraping thread."""
        return Gauge(self.name, self.help, labels=list(self.labels))

    def histogram_family(self) -> HistogramFamily:
        """A new, empty histogram family for one scrape (a :data:`HISTOGRAM` metric)."""
        return HistogramFamily(self.name, self.help, labels=list(self.labels))


def families(specs: Iterable[MetricSpec]) -> dict[str, Gauge]:
    """New gauge families for one scrape, by :attr:`MetricSpec.short_name`, in declared
    order (histograms are left out: see :func:`histogram_families`)."""
    return {spec.short_name: spec.family() for spec in specs if spec.type == GAUGE}


def histogram_families(specs: Iterable[MetricSpec]) -> dict[str, HistogramFamily]:
    """New histogram families for one scrape, by :attr:`MetricSpec.short_name`."""
    return {spec.short_name: spec.histogram_family() for spec in specs
            if spec.type == HISTOGRAM}


def _gauges(scope: str, labels: tuple[str, ...],
            metrics: Iterable[tuple[str, str]]) -> tuple[MetricSpec, ...]:
    return tuple(MetricSpec(f"weir_{scope}_{name}", GAUGE, text, labels)
                 for name, text in metrics)


#: The JobMaster's own metrics.
JOBMASTER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("weir_jobmaster_taskexecutors_registered", GAUGE, "Registered TaskExecutors."),
    MetricSpec("weir_jobmaster_slots_total", GAUGE, "Slots offered by all TaskExecutors."),
    MetricSpec("weir_jobmaster_slots_free", GAUGE, "Slots not allocated to a job."),
    MetricSpec("weir_jobmaster_jobs", GAUGE, "Jobs known to the JobMaster, by status.",
               ("status",)),
    MetricSpec("weir_jobmaster_uptime_seconds", GAUGE, "Seconds since start."),
)

#: Labels of every per-job metric.
JOB_LABELS = ("job_id", "job_name")

#: Per-job metrics, served by the JobMaster, with Flink's names.
JOB_METRICS: tuple[MetricSpec, ...] = (*_gauges("job", JOB_LABELS, (
    ("lastCheckpointDuration", "Duration of the last completed checkpoint (ms)."),
    ("lastCheckpointSize", "Bytes the last completed checkpoint uploaded (incremental "
                           "checkpoints upload only what is new)."),
    ("lastCheckpointFullSize", "Full state size of the last completed checkpoint."),
    ("lastCheckpointProcessedData", "Bytes processed during the last checkpoint's "
                                    "alignment."),
    ("lastCheckpointPersistedData", "In-flight bytes the last checkpoint persisted "
                                    "(unaligned)."),
    ("lastCompletedCheckpointId", "Id of the last completed checkpoint (-1: none)."),
    ("numberOfInProgressCheckpoints", "Checkpoints in progress."),
    ("numberOfCompletedCheckpoints", "Checkpoints completed since the job started."),
    ("numberOfFailedCheckpoints", "Checkpoints failed since the job started."),
    ("totalNumberOfCheckpoints", "Checkpoints triggered since the job started."),
    ("lastCheckpointRestoreTimestamp", "When the job last restored a checkpoint (epoch ms; "
                                       "-1: never)."),
    ("numRestarts", "Restarts of the job."),
    ("restartingTime", "Time the current (or last) restart has taken (ms)."),
    ("uptime", "Time the job has been running since its last (re)start (ms)."),
    ("downtime", "Time the job has been failing or restarting (ms)."),
    ("lastChangeDowntime", "Time the last rescale or update stopped processing: from "
                           "cancelling the old tasks to every new one running (ms; -1: "
                           "none)."),
)), MetricSpec("weir_job_lastCheckpointExternalPath", GAUGE,
               "The last completed checkpoint's directory, as the path label (value 1).",
               (*JOB_LABELS, "path")))

#: The TaskExecutor's own metrics.
TASKEXECUTOR_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("weir_taskexecutor_slots_total", GAUGE, "Slots this TaskExecutor offers."),
    MetricSpec("weir_taskexecutor_slots_used", GAUGE, "Slots running at least one task."),
    MetricSpec("weir_taskexecutor_uptime_seconds", GAUGE, "Seconds since start."),
)

#: Labels of every per-task metric.
TASK_LABELS = ("job_id", "task_name", "subtask_index")

#: Per-task (per-subtask) metrics, served by the TaskExecutor running the task, with
#: Flink's names.
TASK_METRICS: tuple[MetricSpec, ...] = _gauges("task", TASK_LABELS, (
    ("numRecordsIn", "Records a task received."),
    ("numRecordsOut", "Records a task emitted."),
    ("numBytesIn", "Bytes a task received from remote channels."),
    ("numBytesOut", "Bytes a task wrote to its result partitions."),
    ("busyTimeMsPerSecond", "Time per second a task spent processing."),
    ("idleTimeMsPerSecond", "Time per second a task waited for input."),
    ("backPressuredTimeMsPerSecond", "Time per second a task waited for output buffers."),
    ("outPoolUsage", "Share of the task's output buffers in use (0..1)."),
    ("inPoolUsage", "Share of the task's remote input buffers in use (0..1)."),
    ("numBuffersOut", "Buffers a task wrote to its result partitions."),
    ("numBuffersInRemote", "Buffers a task received from remote channels."),
    ("inputQueueBytes", "Bytes queued in the task's remote input channels."),
    ("debloatedBufferSize", "Buffer size chosen by buffer debloating (bytes)."),
    ("estimatedTimeToConsumeBuffersMs",
     "Time the task needs to consume its queued input, at its throughput."),
    ("currentInputWatermark", "The task's event time: the minimum watermark over its inputs "
                              "(epoch ms; absent before the first watermark)."),
    ("currentOutputWatermark", "The last watermark the task sent (epoch ms)."),
    ("numLateRecordsDropped",
     "Records the task's windows dropped as later than the allowed lateness."),
    ("checkpointAlignmentTime", "Time the newest checkpoint waited for barrier alignment at "
                                "the task (ns, at millisecond resolution)."),
    ("checkpointStartDelayNanos", "Time from the newest checkpoint's trigger to its first "
                                  "barrier at the task (ns, at millisecond resolution; a "
                                  "source: to its trigger running)."),
))

#: Labels of the state change log metrics: the log's location (one log per TaskExecutor
#: and location, shared by its tasks).
CHANGELOG_LABELS = ("location",)

#: The changelog state backend's log storage on a TaskExecutor, with Flink's names; Flink's
#: histograms are Prometheus histograms.
CHANGELOG_STORAGE_METRICS: tuple[MetricSpec, ...] = (
    *_gauges("changelog", CHANGELOG_LABELS, (
        ("numberOfUploadRequests", "Log file uploads started (each batches the changes of "
                                   "several tasks)."),
        ("numberOfUploadFailures", "Log file uploads that failed after every attempt."),
        ("totalAttemptsPerUpload", "Attempts of every log file upload, in total."),
        ("uploadQueueSize", "Pieces of log waiting for an upload to start."),
    )),
    MetricSpec("weir_changelog_attemptsPerUpload", HISTOGRAM,
               "Attempts per log file upload (buckets 1, 2, 3, 5, 10).", CHANGELOG_LABELS),
    MetricSpec("weir_changelog_uploadSizes", HISTOGRAM,
               "Bytes per log file upload (buckets 1 KiB to 64 MiB, by fours).",
               CHANGELOG_LABELS),
    MetricSpec("weir_changelog_uploadLatenciesNanos", HISTOGRAM,
               "Time per log file upload, retries included (ns; buckets 1 ms to 10 s).",
               CHANGELOG_LABELS),
)

#: Labels of the materialization metrics: the job and the operator subtask's backend.
MATERIALIZATION_LABELS = ("job_id", "backend")

#: Materializations of the changelog state backend, per keyed backend, with Flink's names
#: (and the restored log's rows still to apply).
MATERIALIZATION_METRICS: tuple[MetricSpec, ...] = _gauges(
    "changelog", MATERIALIZATION_LABELS, (
        ("lastDurationOfMaterialization", "Duration of the last materialization (ms)."),
        ("numberOfFailedMaterialization", "Materializations that failed."),
        ("numberOfCompletedMaterialization", "Materializations that completed."),
        ("restoredLogRowsPending", "Rows of the state change log replayed by the last "
         "restore that are not applied to the backend yet; 0 once applied (weir's own)."),
    ))

#: Every declared metric, by the daemon that serves it: what the reference documents.
BY_DAEMON: tuple[tuple[str, tuple[MetricSpec, ...]], ...] = (
    ("JobMaster", JOBMASTER_METRICS),
    ("JobMaster, per job", JOB_METRICS),
    ("TaskExecutor", TASKEXECUTOR_METRICS),
    ("TaskExecutor, per task", TASK_METRICS),
    ("TaskExecutor, changelog state backend: per log location", CHANGELOG_STORAGE_METRICS),
    ("TaskExecutor, changelog state backend: per keyed backend", MATERIALIZATION_METRICS),
)
