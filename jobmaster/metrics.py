"""The JobMaster's own Prometheus metrics, read from its state at scrape time: registered
TaskExecutors, slots, jobs by status, uptime, and per job Flink's job metrics
(checkpoints, restarts, up- and downtime).

Example (what ``JobMaster.start`` does)::

    registry.register(CallbackCollector(JobMasterMetrics(jobmaster).collect))
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric

from weir.core.metric_names import JOB_METRICS, JOBMASTER_METRICS, families
from weir.proto import checkpoint_pb2, common_pb2

if TYPE_CHECKING:
    from weir.jobmaster.daemon import JobMaster


class JobMasterMetrics:
    """The metric families of one JobMaster."""

    def __init__(self, jm: JobMaster) -> None:
        self._jm = jm

    def collect(self) -> list[Metric]:
        """Every family, read on the JobMaster's main thread (the scrape's thread waits, at
        most 5 s for each of its two visits)."""
        jm = self._jm

        def snapshot() -> tuple[int, int, int, dict[str, int]]:
            by_state: dict[str, int] = {}
            for job in jm.jobs.values():
                name = common_pb2.JobStatus.Name(job.graph.status).removeprefix("JOB_")
                by_state[name] = by_state.get(name, 0) + 1
            return (len(jm.resources.task_executors), jm.resources.total_slots(),
                    jm.resources.free_slots(), by_state)

        registered, total, free, by_state = jm.main.call(snapshot, timeout=5)
        job_families = jm.main.call(self._job_metrics, timeout=5)
        jm_families = families(JOBMASTER_METRICS)
        jm_families["taskexecutors_registered"].add_metric([], registered)
        jm_families["slots_total"].add_metric([], total)
        jm_families["slots_free"].add_metric([], free)
        for name in ("RUNNING", "FINISHED", "FAILED", "CANCELED", "FAILING", "CANCELLING"):
            jm_families["jobs"].add_metric([name], by_state.get(name, 0))
        jm_families["uptime_seconds"].add_metric([], time.monotonic() - jm.started)
        return [*jm_families.values(), *job_families]

    def _job_metrics(self) -> list[Metric]:
        """Main thread: per-job metric families, labelled by job id and name."""
        per_job = families(JOB_METRICS)
        path = per_job["lastCheckpointExternalPath"]
        for job in self._jm.jobs.values():
            values = [job.job_id, job.graph.job_graph.name]
            times = job.times_ms()
            numbers: dict[str, float] = {
                "numRestarts": job.restarts, "restartingTime": times["restartingTime"],
                "uptime": times["uptime"], "downtime": times["downtime"],
                "lastCheckpointRestoreTimestamp": job.restore_timestamp_ms or -1,
                "lastChangeDowntime": job.last_change.downtime_ms
                if job.last_change is not None else -1}
            if job.checkpointing is not None:
                coordinator = job.checkpointing.coordinator
                completed = [r for r in coordinator.stats()
                             if r.status == checkpoint_pb2.CheckpointStats.COMPLETED]
                numbers.update({
                    "numberOfInProgressCheckpoints": len(coordinator.pending_ids()),
                    "numberOfCompletedCheckpoints": coordinator.counts["completed"],
                    "numberOfFailedCheckpoints": coordinator.counts["failed"],
                    "totalNumberOfCheckpoints": coordinator.counts["completed"]
                    + coordinator.counts["failed"] + len(coordinator.pending_ids())})
                if completed:
                    last = completed[-1]
                    numbers.update({
                        "lastCheckpointDuration": last.duration_ms,
                        "lastCheckpointSize": last.incremental_size,
                        "lastCheckpointFullSize": last.state_size,
                        "lastCheckpointProcessedData": last.processed_bytes,
                        "lastCheckpointPersistedData": last.persisted_bytes,
                        "lastCompletedCheckpointId": last.checkpoint_id})
                    path.add_metric([*values, last.external_path], 1)
                else:
                    numbers["lastCompletedCheckpointId"] = -1
            for name, value in numbers.items():
                per_job[name].add_metric(values, value)
        return list(per_job.values())
