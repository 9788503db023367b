"""The REST endpoints: each reads through the JobMaster calls the gRPC Dispatcher uses
(they hop onto the main thread with a timeout, never holding it) and answers JSON shaped by
``mapping``. Handlers run on the HTTP server's answering threads.

Savepoints, stop-with-savepoint and rescales take long: a POST starts the operation on a
thread of this module's own small pool and answers its ``request-id`` at once; a GET of
``.../savepoints/:triggerid`` (``.../rescaling/:triggerid``) polls it, as Flink's
asynchronous operations do.
"""

from __future__ import annotations

import importlib.metadata
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weir.checkpoint import options as checkpoint_options
from weir.core import options
from weir.core.errors import JobNotFoundError, UserError, WeirError
from weir.core.ids import JobId
from weir.jobmaster.rest import mapping
from weir.jobmaster.rest.mapping import Json
from weir.jobmaster.rest.router import Router
from weir.jobmaster.restart_strategy import create_restart_strategy
from weir.proto import dispatcher_pb2, jobgraph_pb2, jobmaster_pb2

if TYPE_CHECKING:
    from weir.jobmaster.daemon import JobMaster

#: Asynchronous operations kept for polling (the oldest finished ones are forgotten).
OPERATIONS_KEPT = 256
#: How long one read waits for the JobMaster's main thread: well within the HTTP server's
#: deadline for the whole request (REQUEST_DEADLINE_S), so that a busy JobMaster is
#: answered 503 instead of a cut connection, and an answering thread is not held longer.
READ_TIMEOUT_S = 5.0
#: Savepoints and rescales running at once; more wait for a thread.
OPERATION_THREADS = 2


class RestError(Exception):
    """An answer other than 200: its HTTP ``status`` and the one-line message of Flink's
    ``{"errors": [...]}`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    """What a handler reads: the path's ``:name`` values, the query and the JSON body."""

    params: dict[str, str]
    query: dict[str, str]
    body: Json


Handler = Callable[[Request], tuple[int, Any]]


class Operations:
    """Savepoints, stops and rescales started by REST, by trigger id (thread-safe)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(OPERATION_THREADS, thread_name_prefix="rest-operation")
        self._lock = threading.Lock()
        self._futures: OrderedDict[tuple[str, str, str], Future[Json]] = OrderedDict()

    def start(self, job_id: str, kind: str, run: Callable[[], Json],
              trigger_id: str | None = None) -> str:
        """Start ``run`` under ``trigger_id`` (the client's, as Flink's ``triggerId``) or a
        new one. A trigger id already known for this job and kind is not started again:
        a client that retries a request whose answer it lost gets the first operation."""
        with self._lock:
            if trigger_id is not None and (job_id, kind, trigger_id) in self._futures:
                return trigger_id
            trigger_id = trigger_id or secrets.token_hex(16)
            future = self._pool.submit(run)
            self._futures[(job_id, kind, trigger_id)] = future
            while len(self._futures) > OPERATIONS_KEPT:
                oldest = next(iter(self._futures))
                if not self._futures[oldest].done():
                    break
                del self._futures[oldest]
        return trigger_id

    def status(self, job_id: str, kind: str, trigger_id: str) -> Json:
        with self._lock:
            future = self._futures.get((job_id, kind, trigger_id))
        if future is None:
            raise RestError(404, f"no {kind} operation {trigger_id!r} of job {job_id}")
        if not future.done():
            return {"status": {"id": "IN_PROGRESS"}, "operation": None}
        error = future.exception()
        if error is not None:
            return {"status": {"id": "COMPLETED"},
                    "operation": {"failure-cause": {"class": type(error).__name__,
                                                    "stack-trace": str(error)}}}
        return {"status": {"id": "COMPLETED"}, "operation": future.result()}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _version() -> str:
    """weir's version, as installed (Flink's ``flink-version`` field)."""
    try:
        return importlib.metadata.version("weir")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown"


def _now_ms() -> int:
    return int(time.time() * 1000)


class RestHandlers:
    """The endpoints of one JobMaster; ``routes()`` builds their router. ``close`` stops
    the operations' threads (a running savepoint ends with the JobMaster)."""

    def __init__(self, jm: JobMaster) -> None:
        self._jm = jm
        self._operations = Operations()

    def close(self) -> None:
        self._operations.close()

    def routes(self) -> Router[Handler]:
        """Every path of the API, Flink's where Flink has one."""
        router: Router[Handler] = Router()
        for method, pattern, handler in (
                ("GET", "/config", self.config),
                ("GET", "/overview", self.overview),
                ("GET", "/jobs", self.jobs),
                ("GET", "/jobs/overview", self.jobs_overview),
                ("GET", "/jobs/:jobid", self.job),
                ("PATCH", "/jobs/:jobid", self.cancel),
                ("GET", "/jobs/:jobid/config", self.job_config),
                ("GET", "/jobs/:jobid/plan", self.plan),
                ("GET", "/jobs/:jobid/exceptions", self.exceptions),
                ("GET", "/jobs/:jobid/metrics", self.job_metrics),
                ("GET", "/jobs/:jobid/checkpoints", self.checkpoints),
                ("GET", "/jobs/:jobid/checkpoints/config", self.checkpoint_config),
                ("GET", "/jobs/:jobid/checkpoints/details/:checkpointid",
                 self.checkpoint_details),
                ("GET", "/jobs/:jobid/checkpoints/details/:checkpointid/subtasks/:vertexid",
                 self.checkpoint_subtasks),
                ("GET", "/jobs/:jobid/vertices/:vertexid", self.vertex),
                ("GET", "/jobs/:jobid/vertices/:vertexid/backpressure", self.backpressure),
                ("GET", "/jobs/:jobid/vertices/:vertexid/subtasktimes", self.subtask_times),
                ("GET", "/jobs/:jobid/vertices/:vertexid/watermarks", self.watermarks),
                ("GET", "/jobs/:jobid/vertices/:vertexid/metrics", self.vertex_metrics),
                ("GET", "/jobs/:jobid/vertices/:vertexid/subtasks/metrics",
                 self.aggregated_subtask_metrics),
                ("POST", "/jobs/:jobid/savepoints", self.trigger_savepoint),
                ("GET", "/jobs/:jobid/savepoints/:triggerid", self.savepoint_status),
                ("POST", "/jobs/:jobid/stop", self.stop),
                ("PATCH", "/jobs/:jobid/rescaling", self.rescale),
                ("GET", "/jobs/:jobid/rescaling/:triggerid", self.rescale_status),
                ("GET", "/taskmanagers", self.task_managers),
                ("GET", "/taskmanagers/metrics", self.task_managers_metrics),
                ("GET", "/taskmanagers/:taskmanagerid", self.task_manager),
                ("GET", "/taskmanagers/:taskmanagerid/metrics", self.task_manager_metrics),
                ("GET", "/jobmanager/metrics", self.jobmanager_metrics)):
            router.add(method, pattern, handler)
        return router

    # -- reads ------------------------------------------------------------------------------

    def _overview(self) -> dispatcher_pb2.ClusterOverview:
        return self._jm.cluster_overview(READ_TIMEOUT_S)

    def _jobs(self) -> list[jobmaster_pb2.JobSummary]:
        return self._jm.list_jobs(READ_TIMEOUT_S)

    def _graph(self, job_id: str) -> jobgraph_pb2.JobGraph:
        return self._jm.job_graph(JobId(job_id), READ_TIMEOUT_S)

    def _history(self, job_id: str) -> dispatcher_pb2.CheckpointHistory:
        return self._jm.checkpoint_history(JobId(job_id), READ_TIMEOUT_S)

    def _details(self, job_id: str) -> jobmaster_pb2.JobDetails:
        return self._jm.job_details(JobId(job_id), READ_TIMEOUT_S)

    def _vertex(self, request: Request) -> tuple[jobmaster_pb2.JobDetails,
                                                 jobmaster_pb2.VertexDetails]:
        job_id = request.params["jobid"]
        details = self._details(job_id)
        vertices = {v.vertex_id: v for v in details.vertices}
        vertex_id = mapping.parse_vertex_id(job_id, request.params["vertexid"], vertices)
        if vertex_id is None:
            raise RestError(404, f"job {job_id} has no vertex {request.params['vertexid']!r}")
        return details, vertices[vertex_id]

    def config(self, request: Request) -> tuple[int, Json]:
        offset = -time.timezone if not time.daylight else -time.altzone
        return 200, {"refresh-interval": 3000, "timezone-name": time.tzname[0],
                     "timezone-offset": offset * 1000, "flink-version": _version(),
                     "flink-revision": "", "features": {
                         "web-submit": False, "web-cancel": True, "web-rescale": True,
                         "web-history": False}}

    def overview(self, request: Request) -> tuple[int, Json]:
        return 200, mapping.overview(self._overview(), self._jobs(), _version())

    def jobs(self, request: Request) -> tuple[int, Json]:
        return 200, {"jobs": [{"id": j.job_id, "status": mapping.job_state(j.status)}
                              for j in self._jobs()]}

    def jobs_overview(self, request: Request) -> tuple[int, Json]:
        now = _now_ms()
        return 200, {"jobs": [mapping.job_summary(j, now) for j in self._jobs()]}

    def job(self, request: Request) -> tuple[int, Json]:
        job_id = request.params["jobid"]
        details = self._details(job_id)
        return 200, mapping.job_details(details, self._graph(JobId(job_id)), _now_ms())

    def job_config(self, request: Request) -> tuple[int, Json]:
        graph = self._graph(JobId(request.params["jobid"]))
        conf = self._jm.configuration.merged(dict(graph.config))
        strategy = create_restart_strategy(conf, checkpoint_options.checkpointing_enabled(conf))
        batch = str(conf.get(options.RUNTIME_MODE)).upper() == "BATCH"
        return 200, mapping.job_config(graph, batch, strategy.summary())

    def plan(self, request: Request) -> tuple[int, Json]:
        return 200, mapping.plan(self._graph(JobId(request.params["jobid"])))

    def exceptions(self, request: Request) -> tuple[int, Json]:
        return 200, mapping.exceptions(self._details(request.params["jobid"]))

    def job_metrics(self, request: Request) -> tuple[int, list[Json]]:
        job_id = JobId(request.params["jobid"])
        details = self._details(job_id)
        history = self._history(job_id)
        completed = [c for c in history.checkpoints if c.status == c.COMPLETED]
        values: dict[str, float] = {
            "numRestarts": details.summary.restarts,
            "totalNumberOfCheckpoints": len(history.checkpoints),
            "numberOfCompletedCheckpoints": len(completed),
            "numberOfFailedCheckpoints": sum(c.status == c.FAILED
                                             for c in history.checkpoints),
            "numberOfInProgressCheckpoints": sum(c.status == c.IN_PROGRESS
                                                 for c in history.checkpoints),
            "lastCheckpointDuration": completed[-1].duration_ms if completed else -1,
            "lastCheckpointSize": completed[-1].state_size if completed else -1,
            "lastCheckpointRestoreTimestamp": history.restore_timestamp_ms or -1}
        return 200, mapping.metric_values(values, request.query.get("get"))

    def checkpoints(self, request: Request) -> tuple[int, Json]:
        job_id = JobId(request.params["jobid"])
        details = self._details(job_id)
        restore = details.last_restore if details.HasField("last_restore") else None
        return 200, mapping.checkpoints(self._history(job_id), job_id, restore)

    def checkpoint_config(self, request: Request) -> tuple[int, Json]:
        job_id = JobId(request.params["jobid"])
        conf = self._jm.configuration.merged(dict(self._graph(job_id).config))
        interval = conf.get(checkpoint_options.CHECKPOINTING_INTERVAL)
        if not interval:
            raise RestError(404, f"checkpointing is not enabled for job {job_id}")
        retention = str(conf.get(checkpoint_options.EXTERNALIZED_RETENTION))
        return 200, {
            "mode": str(conf.get(checkpoint_options.CHECKPOINTING_MODE)).lower(),
            "interval": int(interval * 1000),
            "timeout": int(conf.get(checkpoint_options.CHECKPOINTING_TIMEOUT) * 1000),
            "min_pause": int(conf.get(checkpoint_options.MIN_PAUSE) * 1000),
            "max_concurrent": conf.get(checkpoint_options.MAX_CONCURRENT_CHECKPOINTS),
            "externalization": {
                "enabled": retention.upper() != "NO_EXTERNALIZED_CHECKPOINTS",
                "delete_on_cancellation": retention.upper() == "DELETE_ON_CANCELLATION"},
            "checkpoint_storage": conf.get(checkpoint_options.CHECKPOINTS_DIR),
            "unaligned_checkpoints": bool(conf.get(checkpoint_options.UNALIGNED)),
            "tolerable_failed_checkpoints": conf.get(
                checkpoint_options.TOLERABLE_FAILED_CHECKPOINTS),
            "aligned_checkpoint_timeout": int(
                (conf.get(checkpoint_options.ALIGNED_CHECKPOINT_TIMEOUT) or 0) * 1000),
            "checkpoints_after_tasks_finish": True}

    def _checkpoint(self, request: Request) -> tuple[Any, jobmaster_pb2.JobDetails]:
        job_id = JobId(request.params["jobid"])
        text = request.params["checkpointid"]
        if not text.isdigit():
            raise RestError(400, f"checkpoint id {text!r} is not a number")
        details = self._details(job_id)
        for stats in self._history(job_id).checkpoints:
            if stats.checkpoint_id == int(text):
                return stats, details
        raise RestError(404, f"job {job_id} has no checkpoint {text} in its history")

    def checkpoint_details(self, request: Request) -> tuple[int, Json]:
        stats, details = self._checkpoint(request)
        tasks = {v.vertex_id: v.parallelism for v in details.vertices}
        return 200, mapping.checkpoint(stats, request.params["jobid"], tasks)

    def checkpoint_subtasks(self, request: Request) -> tuple[int, Json]:
        stats, details = self._checkpoint(request)
        job_id = request.params["jobid"]
        vertices = {v.vertex_id: v.parallelism for v in details.vertices}
        vertex_id = mapping.parse_vertex_id(job_id, request.params["vertexid"], vertices)
        if vertex_id is None:
            raise RestError(404, f"job {job_id} has no vertex {request.params['vertexid']!r}")
        return 200, mapping.subtask_checkpoints(stats, vertex_id, vertices[vertex_id])

    def vertex(self, request: Request) -> tuple[int, Json]:
        _, vertex = self._vertex(request)
        now = _now_ms()
        job_id = request.params["jobid"]
        return 200, {"id": mapping.vertex_hex_id(job_id, vertex.vertex_id),
                     "vertex-id": vertex.vertex_id, "name": vertex.name,
                     "parallelism": vertex.parallelism, "maxParallelism": -1, "now": now,
                     "subtasks": [mapping.subtask(s, now) for s in vertex.subtasks]}

    def backpressure(self, request: Request) -> tuple[int, Json]:
        _, vertex = self._vertex(request)
        return 200, mapping.backpressure(vertex, _now_ms())

    def subtask_times(self, request: Request) -> tuple[int, Json]:
        _, vertex = self._vertex(request)
        return 200, mapping.subtask_times(request.params["jobid"], vertex, _now_ms())

    def watermarks(self, request: Request) -> tuple[int, list[Json]]:
        _, vertex = self._vertex(request)
        return 200, mapping.watermarks(vertex)

    def vertex_metrics(self, request: Request) -> tuple[int, list[Json]]:
        _, vertex = self._vertex(request)
        return 200, mapping.metric_values(mapping.subtask_metrics(vertex),
                                          request.query.get("get"))

    def aggregated_subtask_metrics(self, request: Request) -> tuple[int, list[Json]]:
        _, vertex = self._vertex(request)
        try:
            return 200, mapping.aggregated_metrics(mapping.subtask_metrics(vertex),
                                                   request.query.get("get"),
                                                   request.query.get("agg"))
        except ValueError as err:
            raise RestError(400, str(err)) from None

    def task_managers(self, request: Request) -> tuple[int, Json]:
        overview = self._overview()
        return 200, {"taskmanagers": [mapping.task_manager(te)
                                      for te in overview.task_executors]}

    def _task_manager(self, request: Request) -> Any:
        wanted = request.params["taskmanagerid"]
        for te in self._overview().task_executors:
            if te.resource_id == wanted:
                return te
        raise RestError(404, f"no TaskExecutor {wanted!r} is registered")

    def task_manager(self, request: Request) -> tuple[int, Json]:
        return 200, {**mapping.task_manager(self._task_manager(request)), "metrics": {}}

    def task_manager_metrics(self, request: Request) -> tuple[int, list[Json]]:
        te = self._task_manager(request)
        values = {"Status.Slots.Total": float(te.slots_total),
                  "Status.Slots.Free": float(te.slots_free)}
        return 200, mapping.metric_values(values, request.query.get("get"))

    def task_managers_metrics(self, request: Request) -> tuple[int, list[Json]]:
        overview = self._overview()
        values = {"Status.Slots.Total": float(overview.slots_total),
                  "Status.Slots.Free": float(overview.slots_free)}
        return 200, mapping.metric_values(values, request.query.get("get"))

    def jobmanager_metrics(self, request: Request) -> tuple[int, list[Json]]:
        overview = self._overview()
        jobs = self._jobs()
        values = {"numRegisteredTaskManagers": float(len(overview.task_executors)),
                  "taskSlotsTotal": float(overview.slots_total),
                  "taskSlotsAvailable": float(overview.slots_free),
                  "numRunningJobs": float(sum(mapping.job_state(j.status) == "RUNNING"
                                              for j in jobs))}
        return 200, mapping.metric_values(values, request.query.get("get"))

    # -- actions ----------------------------------------------------------------------------

    def cancel(self, request: Request) -> tuple[int, Json]:
        mode = request.query.get("mode", "cancel")
        if mode != "cancel":
            raise RestError(400, f"mode {mode!r} is not supported: use ?mode=cancel, or "
                                 "POST /jobs/:jobid/stop to stop with a savepoint")
        self._jm.cancel_job(JobId(request.params["jobid"]), READ_TIMEOUT_S)
        return 202, {}

    def _savepoint(self, job_id: str, body: Json, target: Any, terminate: bool,
                   drain: bool) -> str:
        if target is not None and not isinstance(target, str):
            raise RestError(400, "target-directory must be a string (a file:// or s3:// "
                                 "directory)")
        savepoint_format = mapping.savepoint_format(body.get("formatType"))
        if savepoint_format is None:
            raise RestError(400, f"formatType {body.get('formatType')!r} is not a savepoint "
                                 "format: use CANONICAL or NATIVE")
        given = body.get("triggerId")
        trigger = None if given is None else mapping.trigger_id(given)
        if given is not None and trigger is None:
            raise RestError(400, f"triggerId {given!r} is not a trigger id: give 32 hex "
                                 "digits, or leave it out")
        self._details(job_id)  # an unknown job is 404 now, not when the trigger is polled
        savepoint = jobmaster_pb2.SavepointRequest(job_id=job_id, target_directory=target or "",
                                                   format=savepoint_format,
                                                   terminate=terminate, drain=drain)
        return self._operations.start(job_id, "savepoint", lambda: {
            "location": self._jm.trigger_savepoint(savepoint)}, trigger)

    def trigger_savepoint(self, request: Request) -> tuple[int, Json]:
        cancel = request.body.get("cancel-job", False)
        if not isinstance(cancel, bool):
            raise RestError(400, "cancel-job must be true or false")
        trigger = self._savepoint(request.params["jobid"], request.body,
                                  request.body.get("target-directory"), cancel, False)
        return 202, {"request-id": trigger}

    def stop(self, request: Request) -> tuple[int, Json]:
        drain = request.body.get("drain", False)
        if not isinstance(drain, bool):
            raise RestError(400, "drain must be true or false")
        target = request.body.get("targetDirectory", request.body.get("target-directory"))
        trigger = self._savepoint(request.params["jobid"], request.body, target, True, drain)
        return 202, {"request-id": trigger}

    def savepoint_status(self, request: Request) -> tuple[int, Json]:
        return 200, self._operations.status(request.params["jobid"], "savepoint",
                                            request.params["triggerid"])

    def rescale(self, request: Request) -> tuple[int, Json]:
        text = request.query.get("parallelism", "")
        if not text.isdigit() or int(text) < 1:
            raise RestError(400, "give the new parallelism as ?parallelism=N (N >= 1)")
        job_id = request.params["jobid"]
        self._details(job_id)

        def run() -> Json:
            return mapping.job_change(self._jm.rescale_job(JobId(job_id), int(text), {}))

        return 202, {"request-id": self._operations.start(job_id, "rescale", run)}

    def rescale_status(self, request: Request) -> tuple[int, Json]:
        return 200, self._operations.status(request.params["jobid"], "rescale",
                                            request.params["triggerid"])


def error_status(err: Exception) -> int:
    """The HTTP status of an error a JobMaster call raised: 404 for an unknown job, 400 for
    other user errors, 503 when the JobMaster did not answer in time, 500 for the rest.

    Example:
        >>> from weir.core.errors import JobNotFoundError
        >>> error_status(JobNotFoundError("x")), error_status(TimeoutError())
        (404, 503)
    """
    if isinstance(err, RestError):
        return err.status
    if isinstance(err, JobNotFoundError):
        return 404
    if isinstance(err, UserError):
        return 400
    if isinstance(err, TimeoutError):
        return 503
    if isinstance(err, WeirError):
        return 409
    return 500
